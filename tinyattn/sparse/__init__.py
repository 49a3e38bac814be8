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
``to_dense()``. Unlike PyTorch's, a `SparseTensor` is not a ``tinyattn.Tensor``. Sits above the
tensor layer: imports `backend`, `tensor` and `creation`.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend
from ..creation import tensor as _new_tensor
from ..creation import zeros
from ..errors import TinyattnError
from ..methods.common import stack
from ..tensor import Tensor

__all__ = ["SparseTensor", "mm", "spmm", "sparse_coo_tensor"]


class SparseTensor:
    """A sparse COO tensor (PyTorch's ``layout=torch.sparse_coo``); see the module docstring.

    Shapes: indices (S, nnz) int64, values (nnz, *D), size (*sparse S dims, *D)."""

    __slots__ = ("_index", "_value", "_size", "_coalesced")
    is_sparse = True
    layout = "sparse_coo"
    is_meta = False

    def __init__(self, indices: Tensor, values: Tensor, size: tuple, coalesced: bool) -> None:
        self._index, self._value, self._size = indices, values, tuple(size)
        self._coalesced = coalesced

    # ------------------------------------------------------------------- what PyTorch reports
    @property
    def shape(self) -> tuple[int, ...]:
        return self._size

    def size(self, dim: int | None = None) -> Any:
        return self._size if dim is None else self._size[dim]

    def dim(self) -> int:
        return len(self._size)

    ndim = property(dim)

    @property
    def dtype(self) -> Any:
        return self._value.dtype

    @property
    def device(self) -> Any:
        return self._value.device

    @property
    def requires_grad(self) -> bool:
        return self._value.requires_grad

    def sparse_dim(self) -> int:
        return self._index.shape[0]

    def dense_dim(self) -> int:
        return self._value.ndim - 1

    def _nnz(self) -> int:
        return self._index.shape[1]

    def is_coalesced(self) -> bool:
        return self._coalesced

    def indices(self) -> Tensor:
        """The (S, nnz) coordinates; PyTorch allows this on a coalesced tensor only."""
        self._check_coalesced("indices")
        return self._index

    def values(self) -> Tensor:
        """The (nnz, *D) stored elements (their gradient flows back to what built them);
        PyTorch allows this on a coalesced tensor only."""
        self._check_coalesced("values")
        return self._value

    def _indices(self) -> Tensor:
        """The coordinates as stored, coalesced or not (PyTorch's ``_indices``)."""
        return self._index

    def _values(self) -> Tensor:
        """The elements as stored, coalesced or not (PyTorch's ``_values``)."""
        return self._value

    def _check_coalesced(self, op: str) -> None:
        if not self._coalesced:
            raise RuntimeError(
                f"Cannot get {op} on an uncoalesced tensor, please call .coalesce() first"
            )

    def __repr__(self) -> str:
        return (
            f"tensor(indices={self._index!r},\n       values={self._value!r},\n"
            f"       size={self._size}, nnz={self._nnz()}, layout=torch.sparse_coo)"
        )

    # ------------------------------------------------------------------------- conversions
    def coalesce(self) -> SparseTensor:
        """Indices sorted (row-major) and unique, the values of repeated ones summed (the
        gradient of each summed value goes to every element it came from)."""
        if self._coalesced:
            return self
        xp = backend.namespace(self._index.array)
        linear = _linear_positions(self._index, self._size[: self.sparse_dim()])
        unique, inverse = xp.unique_inverse(linear.array)
        rows = len(unique)
        values = zeros(rows, *self._value.shape[1:], dtype=self.dtype, device=self.device)
        values = values.index_add(0, Tensor._from_op(inverse, None), self._value)
        indices = _coordinates(Tensor._from_op(unique, None), self._size[: self.sparse_dim()])
        return SparseTensor(indices, values, self._size, coalesced=True)

    def to_dense(self) -> Tensor:
        """The dense tensor of `size`: zeros where nothing is stored, repeated indices summed."""
        sparse_size = self._size[: self.sparse_dim()]
        linear = _linear_positions(self._index, sparse_size)
        flat = zeros(
            math.prod(sparse_size), *self._value.shape[1:], dtype=self.dtype, device=self.device
        )
        return flat.index_add(0, linear, self._value).reshape(self._size)

    def to_sparse(self) -> SparseTensor:
        return self

    def to(self, *args: Any, **kwargs: Any) -> SparseTensor:
        """Move or cast: the indices and values each moved with ``Tensor.to`` (indices keep
        int64)."""
        values = self._value.to(*args, **kwargs)
        return SparseTensor(self._index.to(values.device), values, self._size, self._coalesced)

    def detach(self) -> SparseTensor:
        return SparseTensor(self._index, self._value.detach(), self._size, self._coalesced)

    # ----------------------------------------------------------------------------- products
    def __matmul__(self, other: Any) -> Tensor:
        return mm(self, other)

    matmul = __matmul__

    def mm(self, other: Any) -> Tensor:
        return mm(self, other)

    def t(self) -> SparseTensor:
        """The transpose of a 2-d sparse matrix (its two index rows swapped)."""
        _check_matrix("t", self)
        indices = self._index.flip(0)
        return SparseTensor(indices, self._value, self._size[::-1], coalesced=False)

    def __add__(self, other: Any) -> Any:
        raise RuntimeError(
            "add(sparse, dense) is not supported. Use add(dense, sparse) instead (dense + "
            "sparse, dense - sparse and dense @ sparse are dense tensors)"
        )

    __radd__ = __sub__ = __rsub__ = __add__

    def __mul__(self, other: Any) -> Any:
        raise NotImplementedError(
            "sparse * x is not in tinyattn (PyTorch's result is sparse); call to_dense() first"
        )

    __rmul__ = __mul__

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(f"'SparseTensor' object has no attribute {name!r}", name=name)
        raise AttributeError(
            f"sparse COO tensor: {name!r} is not supported on sparse tensors in tinyattn (they "
            "support indices, values, coalesce, to_dense and @ with a dense matrix); call "
            f".to_dense().{name} instead",
            name=name,
        )


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


def from_dense(x: Tensor, sparse_dim: int | None = None) -> SparseTensor:
    """``x.to_sparse()``: the coordinates of x's nonzero elements (in row-major order) and
    those elements, a coalesced sparse tensor. The gradient of its values reaches x."""
    dims = x.ndim if sparse_dim is None else sparse_dim
    if not 0 < dims <= x.ndim:
        raise TinyattnError(
            f"to_sparse: sparse_dim must be in [1, {x.ndim}] for a tensor of shape {x.shape}, "
            f"got {sparse_dim}"
        )
    stored = x.detach() != 0
    if dims < x.ndim:  # a hybrid tensor keeps each slice with any nonzero element
        stored = stored.reshape(*x.shape[:dims], -1).any(-1)
    indices = stored.nonzero().mT  # (S, nnz), row-major order
    values = x[tuple(indices)]  # (nnz, *D)
    return SparseTensor(indices, values, x.shape, coalesced=True)


# ------------------------------------------------------------------------------------ products
def mm(mat1: Any, mat2: Any) -> Tensor:
    """PyTorch's ``torch.sparse.mm`` of a 2-d sparse matrix and a dense one, a dense result:
    out[i] = sum over stored (i, j, v) of v * mat2[j]. Gradients reach the sparse values and
    mat2 (PyTorch's mm returns the same numbers; its gradient for the sparse operand is sparse,
    tinyattn's reaches the values that built it). Shapes: (N, M) sparse, (M, F) -> (N, F)."""
    if not isinstance(mat1, SparseTensor):
        raise TypeError(
            f"sparse.mm: expected a sparse COO matrix first, got {type(mat1).__name__} "
            "(for two dense matrices use ta.mm)"
        )
    if isinstance(mat2, SparseTensor):
        raise NotImplementedError(
            "sparse.mm: sparse @ sparse (a sparse result) is not in tinyattn; call to_dense() "
            "on one operand"
        )
    _check_matrix("mm", mat1)
    if not isinstance(mat2, Tensor) or mat2.ndim != 2 or mat2.shape[0] != mat1.shape[1]:
        shape = getattr(mat2, "shape", type(mat2).__name__)
        raise TinyattnError(
            f"sparse.mm: mat1 and mat2 shapes cannot be multiplied ({mat1.shape[0]}x"
            f"{mat1.shape[1]} sparse and {shape})"
        )
    if mat2.dtype != mat1.dtype:
        raise TinyattnError(
            f"sparse.mm: expected both operands to have the same dtype, got "
            f"{backend.dtype_name(mat1.dtype)} and {backend.dtype_name(mat2.dtype)}"
        )
    rows, columns = mat1._index[0], mat1._index[1]
    contributions = mat2[columns] * mat1._value.unsqueeze(1)  # (nnz, F): v * mat2[j]
    out = zeros(mat1.shape[0], mat2.shape[1], dtype=mat2.dtype, device=mat2.device)
    return out.index_add(0, rows, contributions)  # (N, F): summed into row i


spmm = mm  # PyTorch's older name (``torch.spmm``)


# ------------------------------------------------------------------------------------- helpers
def _linear_positions(indices: Tensor, sparse_size: tuple) -> Tensor:
    """Row-major positions in a flattened `sparse_size` of each index column. (S, nnz) -> (nnz,)."""
    strides = [math.prod(sparse_size[d + 1 :]) for d in range(len(sparse_size))]
    weights = _new_tensor(strides, dtype="int64", device=indices.device).unsqueeze(1)
    return (indices * weights).sum(0)


def _coordinates(linear: Tensor, sparse_size: tuple) -> Tensor:
    """The inverse of `_linear_positions`: (nnz,) -> (S, nnz)."""
    rows = []
    for d in reversed(range(len(sparse_size))):
        rows.append(linear % sparse_size[d])
        linear = linear // sparse_size[d]
    return stack(rows[::-1], axis=0)


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


def _check_matrix(op: str, sparse: SparseTensor) -> None:
    if sparse.sparse_dim() != 2 or sparse.dense_dim() != 0:
        raise NotImplementedError(
            f"sparse.{op}: tinyattn takes a 2-d sparse matrix with scalar values (sparse_dim 2, "
            f"dense_dim 0), got size {sparse.shape} with sparse_dim {sparse.sparse_dim()}"
        )
