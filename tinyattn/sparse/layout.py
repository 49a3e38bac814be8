"""The sparse COO layout: `SparseTensor`, ``Tensor.to_sparse`` (`from_dense`) and sparse @ dense.

A sparse COO tensor of `size` holds `indices` (an int64 (S, nnz) tensor: the coordinates of
the nnz stored elements in the first S dims) and `values` ((nnz, *dense dims): the elements),
as PyTorch's does. ``sparse @ dense`` (`mm`) multiplies without forming the dense matrix,
composed of a gather of the dense rows and an ``index_add`` into the result rows, so gradients
reach the values and the dense operand through those ops (no derivative math here).

Sits below the tensor layer, beside the Tensor method families: imports `backend`, `errors` and
`methods.common` only, recognises a tensor by `TensorBase` and makes new ones through the tensors
it is given (``_from_op``, ``new_tensor``), so that ``Tensor.to_sparse`` (methods/layouts.py)
can import it. The public constructor, `sparse_coo_tensor`, is in tinyattn/sparse/__init__.py.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend
from ..errors import TinyattnError
from ..methods.common import TensorBase, checked_shape, filled, stack


class SparseTensor:
    """A sparse COO tensor (PyTorch's ``layout=torch.sparse_coo``); see the module docstring.

    Shapes: indices (S, nnz) int64, values (nnz, *D), size (*sparse S dims, *D)."""

    __slots__ = ("_index", "_value", "_size", "_coalesced")
    is_sparse = True
    layout = "sparse_coo"
    is_meta = False

    def __init__(
        self, indices: TensorBase, values: TensorBase, size: tuple, coalesced: bool
    ) -> None:
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

    def indices(self) -> TensorBase:
        """The (S, nnz) coordinates; PyTorch allows this on a coalesced tensor only."""
        self._check_coalesced("indices")
        return self._index

    def values(self) -> TensorBase:
        """The (nnz, *D) stored elements (their gradient flows back to what built them);
        PyTorch allows this on a coalesced tensor only."""
        self._check_coalesced("values")
        return self._value

    def _indices(self) -> TensorBase:
        """The coordinates as stored, coalesced or not (PyTorch's ``_indices``)."""
        return self._index

    def _values(self) -> TensorBase:
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
        values = _zeros(
            self._value, rows, *self._value.shape[1:], dtype=self.dtype, device=self.device
        )
        values = values.index_add(0, self._index._from_op(inverse, None), self._value)
        indices = _coordinates(self._index._from_op(unique, None), self._size[: self.sparse_dim()])
        return SparseTensor(indices, values, self._size, coalesced=True)

    def to_dense(self) -> TensorBase:
        """The dense tensor of `size`: zeros where nothing is stored, repeated indices summed."""
        sparse_size = self._size[: self.sparse_dim()]
        linear = _linear_positions(self._index, sparse_size)
        flat = _zeros(
            self._value,
            math.prod(sparse_size),
            *self._value.shape[1:],
            dtype=self.dtype,
            device=self.device,
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
    def __matmul__(self, other: Any) -> TensorBase:
        return mm(self, other)

    matmul = __matmul__

    def mm(self, other: Any) -> TensorBase:
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
def from_dense(x: TensorBase, sparse_dim: int | None = None) -> SparseTensor:
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
def mm(mat1: Any, mat2: Any) -> TensorBase:
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
    if not isinstance(mat2, TensorBase) or mat2.ndim != 2 or mat2.shape[0] != mat1.shape[1]:
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
    out = _zeros(mat2, mat1.shape[0], mat2.shape[1], dtype=mat2.dtype, device=mat2.device)
    return out.index_add(0, rows, contributions)  # (N, F): summed into row i


# ------------------------------------------------------------------------------------- helpers
def _zeros(like: TensorBase, *shape: int, dtype: Any, device: Any) -> TensorBase:
    """``ta.zeros(*shape, dtype=dtype, device=device)`` (its checks and its error messages),
    made through `like` because this module sits below tinyattn.creation."""
    return filled(like._from_op, checked_shape("zeros", shape), 0, dtype, device, False)


def _linear_positions(indices: TensorBase, sparse_size: tuple) -> TensorBase:
    """Row-major positions in a flattened `sparse_size` of each index column. (S, nnz) -> (nnz,)."""
    strides = [math.prod(sparse_size[d + 1 :]) for d in range(len(sparse_size))]
    weights = indices.new_tensor(strides, dtype="int64", device=indices.device).unsqueeze(1)
    return (indices * weights).sum(0)


def _coordinates(linear: TensorBase, sparse_size: tuple) -> TensorBase:
    """The inverse of `_linear_positions`: (nnz,) -> (S, nnz)."""
    rows = []
    for d in reversed(range(len(sparse_size))):
        rows.append(linear % sparse_size[d])
        linear = linear // sparse_size[d]
    return stack(rows[::-1], axis=0)


def _check_matrix(op: str, sparse: SparseTensor) -> None:
    if sparse.sparse_dim() != 2 or sparse.dense_dim() != 0:
        raise NotImplementedError(
            f"sparse.{op}: tinyattn takes a 2-d sparse matrix with scalar values (sparse_dim 2, "
            f"dense_dim 0), got size {sparse.shape} with sparse_dim {sparse.sparse_dim()}"
        )
