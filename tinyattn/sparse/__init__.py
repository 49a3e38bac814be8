"""PyTorch's ``torch.sparse`` for the COO layout: a sparse tensor, and sparse times dense.

A sparse COO tensor of `size` holds `indices` (an int64 (S, nnz) tensor: the coordinates of
the nnz stored elements in the first S dims) and `values` ((nnz, *dense dims): the elements),
as PyTorch's does. Built from a values tensor that requires grad, it carries the gradient to it;
``sparse @ dense`` (``mm``, ``spmm``) multiplies without forming the dense matrix, composed of a
gather of the dense rows and an ``index_add`` into the result rows, so gradients reach the
values and the dense operand through those ops (no derivative math here).

Its surface is what graph networks use: `sparse_coo_tensor`, ``Tensor.to_sparse()``,
``to_dense``, ``coalesce``, ``indices``/``values`` (and ``_indices``/``_values``), ``@`` with a
dense matrix. Other operations on it, other layouts (CSR, CSC, blocks) and sparse results
(sparse @ sparse, sparse + sparse) raise an error that names them and says to call
``to_dense()``. Unlike PyTorch's, a `SparseTensor` is not a ``tinyattn.Tensor``.

Two layers: the layout (`SparseTensor`, `from_dense`, `mm`) is in layout.py, below the tensor
layer, so that ``Tensor.to_sparse`` can import it; this module, the public face, adds the
constructor `sparse_coo_tensor` above the tensor layer: it imports `tensor` and `creation`.
"""

from __future__ import annotations

from typing import Any

from ..creation import tensor as _new_tensor
from ..errors import TinyattnError
from ..tensor import Tensor
from .layout import SparseTensor, mm
from .layout import from_dense as from_dense  # the function behind Tensor.to_sparse

__all__ = ["SparseTensor", "mm", "spmm", "sparse_coo_tensor"]

spmm = mm  # PyTorch's older name (``torch.spmm``)


# ------------------------------------------------------------------------------- construction
def sparse_coo_tensor(
    indices: Any,
    values: Any,
    size: Any = None,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    check_invariants: bool | None = None,
    is_coalesced: bool | None = None,
) -> SparseTensor:
    """PyTorch's ``torch.sparse_coo_tensor``: `indices` (S, nnz) and `values` (nnz, *D) as a
    sparse tensor of `size` (by default each index's largest value plus one, then the values'
    dims). Values that require grad pass gradients through it; ``requires_grad=True`` makes a
    new leaf of the values. Not coalesced unless ``is_coalesced=True`` (as in PyTorch, the
    caller vouches for it). Shapes: (S, nnz) and (nnz, *D) -> (*S sizes, *D)."""
    values = values if isinstance(values, Tensor) else _new_tensor(values, device=device)
    if dtype is not None or device is not None:
        values = values.to(device=device, dtype=dtype)
    if requires_grad:
        values = values.detach().requires_grad_()
    index = indices if isinstance(indices, Tensor) else _new_tensor(indices, device=values.device)
    index = _checked_indices(index.to(values.device).long(), values)
    sparse_dims = index.shape[0]
    if size is None:
        largest = index.amax(1).tolist() if index.shape[1] else [-1] * sparse_dims
        size = tuple(int(m) + 1 for m in largest) + tuple(values.shape[1:])
    size = tuple(int(s) for s in size)
    _check_size(index, values, size)
    return SparseTensor(index, values, size, coalesced=bool(is_coalesced))


# ------------------------------------------------------------------------------------- helpers
def _checked_indices(index: Tensor, values: Tensor) -> Tensor:
    if index.ndim != 2 or index.shape[1] != values.shape[0]:
        raise TinyattnError(
            f"sparse_coo_tensor: indices must be an (S, nnz) tensor with nnz = values.shape[0], "
            f"got indices of shape {index.shape} and values of shape {values.shape}"
        )
    if index.numel() and index.amin().item() < 0:
        raise TinyattnError("sparse_coo_tensor: found a negative index")
    return index


def _check_size(index: Tensor, values: Tensor, size: tuple) -> None:
    sparse_dims = index.shape[0]
    if len(size) != sparse_dims + values.ndim - 1 or size[sparse_dims:] != values.shape[1:]:
        raise TinyattnError(
            f"sparse_coo_tensor: size {size} does not match {sparse_dims} sparse dims and "
            f"values of shape {values.shape} (expected (*{sparse_dims} sizes, "
            f"*{tuple(values.shape[1:])}))"
        )
    if index.shape[1]:
        largest = index.amax(1).tolist()
        for d, (top, bound) in enumerate(zip(largest, size)):
            if top >= bound:
                raise TinyattnError(
                    f"sparse_coo_tensor: index {top} is out of bounds for dim {d} with size {bound}"
                )
