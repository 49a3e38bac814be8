"""Tensor methods, indexing family: reading by position.

``x[key]`` (basic slicing, integer and boolean index arrays), ``gather``, ``scatter``/
``scatter_add``/``index_add`` (out of place), ``index_select``, ``masked_select``, ``topk``,
``sort``/``argsort``, ``nonzero``, ``unique``, ``bincount`` and ``multinomial``. Part of the
tensor layer: imports `backend`, `autograd`, `ops` and `methods.common`. Every index is checked
here (dtype, bounds, device) with an error naming the op; the GetItem and IndexAdd ops trust it.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend
from ..autograd import (
    check_host_read,
)
from ..errors import DimError, TinyattnError
from ..ops import (
    GetItem,
    IndexAdd,
    broadcast_shapes,
    normalize_dim,
)
from ..ops.computed import computed
from ..ops.indexing import parse_key
from .common import TensorBase, ValuesIndices, check_integral, is_float, stack, where


class IndexingMethods(TensorBase):
    """Indexing: reading by position, gathering, sorting."""

    __slots__ = ()  # every tensor's slots are declared once, in Tensor

    def __getitem__(self, key: Any) -> TensorBase:
        """``x[key]`` with PyTorch's rules: ints, slices, None and Ellipsis select a view; then
        the index arrays (integer arrays, lists, tuples inside a tuple, bool masks, Python
        bools) are broadcast together and gather one element each. Their dims stay where the
        first array was when the arrays are adjacent (ints do not separate them, as ints select
        first), and go to the front otherwise, as in NumPy."""
        mask = _bool_mask(key)
        if mask is not None:
            return self._masked_select(mask)
        basic, arrays = _split_key(self, key)
        plain = all(part == slice(None) for part in basic)  # no view needed before a gather
        viewed = self if plain and arrays else GetItem.apply(self, key=basic)
        if not arrays:
            return viewed
        if len(arrays) == 1:
            dim, index = arrays[0]
            return GetItem.apply(viewed, key=(slice(None),) * dim + (index,))
        return viewed._index_arrays(arrays)

    def _index_arrays(self, arrays: list) -> TensorBase:
        """Several index arrays (dims of this tensor and arrays, by dim): broadcast together,
        their dims moved to the front unless adjacent, merged into one dim (row-major) and
        indexed by one merged index, so GetItem gathers once."""
        xp = backend.namespace(self.array)
        dims = [dim for dim, _ in arrays]
        shape = ()
        try:
            for _, index in arrays:
                shape = broadcast_shapes("getitem", shape, index.shape)
        except ValueError:
            shapes = ", ".join(str(list(index.shape)) for _, index in arrays)
            raise IndexError(
                f"getitem: shape mismatch: indexing tensors could not be broadcast together "
                f"with shapes {shapes}"
            ) from None
        for dim, index in arrays:
            _wrapped_index(xp, index, self.shape[dim], dim)  # dtype and range checks
        first = dims[0]
        moved = self
        if dims != list(range(first, first + len(dims))):  # apart: the gathered dims go first
            rest = [d for d in range(self.ndim) if d not in dims]
            moved, first = self.permute(*dims, *rest), 0
        sizes = tuple(self.shape[d] for d in dims)
        parts = [self._from_op(index, None) for _, index in arrays]
        flat = computed(_merged_index, *parts, sizes=sizes, shape=shape)
        last = first + len(dims)
        merged = moved.reshape(moved.shape[:first] + (math.prod(sizes),) + moved.shape[last:])
        return GetItem.apply(merged, key=(slice(None),) * first + (flat.array,))

    def _masked_select(self, mask: TensorBase) -> TensorBase:
        """``x[mask]``: the elements where the bool mask (over the leading dims) is True."""
        mask = self._operand(mask, "getitem")
        if mask.shape != self.shape[: mask.ndim]:
            raise IndexError(
                f"getitem: a bool mask of shape {mask.shape} does not match the leading "
                f"dimensions of shape {self.shape}"
            )
        check_host_read("x[mask] with a bool mask (its length depends on the values)")
        (flat,) = backend.nonzero(backend.namespace(mask.array).reshape(mask.array, (-1,)))
        rows = self.reshape((-1,) + self.shape[mask.ndim :])
        return rows[self._from_op(flat, None)]

    def gather(self, dim: int, index: TensorBase) -> TensorBase:
        """``out[i][j][k] = x[index[i][j][k]][j][k]`` for dim 0 (and so on): values picked
        along `dim`; index has this tensor's ndim and no larger sizes. The gradient adds back.
        """
        index = self._operand(index, "gather")
        axis = normalize_dim("gather", dim, self.ndim)
        _check_index("gather", self, axis, index)
        positions = computed(_flat_positions, index, shape=self.shape, axis=axis)
        return self.reshape(-1)[positions].reshape(index.shape)

    def scatter(
        self, dim: int, index: TensorBase, src: Any = None, *, value: Any = None, reduce: Any = None
    ) -> TensorBase:
        """Out of place: a copy with ``out[index[i][j]][j] = src[i][j]`` (dim 0; and so on);
        `src` a tensor or a number (also as ``value=``).

        The gradient of this tensor is zero at the written places; `src` gets the gradient
        gathered from them. Repeated target places are refused (PyTorch leaves them undefined).
        ``reduce="add"`` or ``"multiply"`` combines with the values there (`scatter_reduce`).
        """
        if (src is None) == (value is None):
            raise TypeError("scatter: give exactly one of src and value")
        src = src if value is None else value
        if reduce is not None:
            return self._scatter_with_reduce("scatter", dim, index, src, reduce)
        positions, key, values = self._scatter_places("scatter", dim, index, src)
        _check_unique("scatter", positions)
        placed = IndexAdd.apply(values, shape=(self.numel(),), key=key)
        hits = IndexAdd.apply(self.constant(_ones(positions)), shape=(self.numel(),), key=key)
        written = (hits > 0).reshape(self.shape)
        return where(written, placed.reshape(self.shape), self)

    def scatter_add(self, dim: int, index: TensorBase, src: TensorBase) -> TensorBase:
        """Out of place: a copy with ``src[i][j]`` added at ``out[index[i][j]][j]`` (dim 0; and
        so on); repeated places add up.  dL/dx = g, dL/dsrc = g gathered at the places.

        Shapes: x (...); index and src of x's ndim, index no larger than src -> x's shape."""
        _, key, values = self._scatter_places("scatter_add", dim, index, src)
        return self + IndexAdd.apply(values, shape=(self.numel(),), key=key).reshape(self.shape)

    def _scatter_places(
        self, op: str, dim: int, index: Any, src: Any
    ) -> tuple[Any, Any, TensorBase]:
        """What scatter and scatter_add share: the flat places `index` names along `dim`
        (checked), their key, and src's values for them in this tensor's dtype, flat (a tensor
        cut to index's shape, or a number repeated)."""
        index = self._operand(index, op)
        axis = normalize_dim(op, dim, self.ndim)
        _check_index(op, self, axis, index)
        positions = computed(_flat_positions, index, shape=self.shape, axis=axis).array
        if isinstance(src, TensorBase):
            src = self._operand(src, op)
            if src.dtype != self.dtype:  # PyTorch casts neither way
                raise RuntimeError(
                    f"{op}: expected src's dtype {backend.dtype_name(src.dtype)} to equal this "
                    f"tensor's, {backend.dtype_name(self.dtype)}"
                )
            if src.ndim != index.ndim or any(n > m for n, m in zip(index.shape, src.shape)):
                raise TinyattnError(
                    f"{op}: src of shape {src.shape} is smaller than index of shape "
                    f"{index.shape} (it needs index's ndim and at least its sizes)"
                )
            src = src[tuple(slice(0, n) for n in index.shape)]
        else:
            src = self._operand(src, op).broadcast_to(index.shape)
        return positions, parse_key(positions, (self.numel(),)), src.to(self.dtype).reshape(-1)

    def index_add(
        self, dim: int, index: TensorBase, source: TensorBase, alpha: float = 1
    ) -> TensorBase:
        """Out of place: a copy with ``alpha * source``'s slices along `dim` added at the
        positions `index` names (repeats add up).  dL/dx = g, dL/dsource = alpha * g[index].

        Shapes: x (..., n, ...), index (k,) integers, source (..., k, ...) -> x's shape."""
        index, source = self._operand(index, "index_add"), self._operand(source, "index_add")
        if source.dtype != self.dtype:  # PyTorch casts neither way
            raise RuntimeError(
                f"index_add: source ({backend.dtype_name(source.dtype)}) and this tensor "
                f"({backend.dtype_name(self.dtype)}) must have the same dtype"
            )
        axis = normalize_dim("index_add", dim, self.ndim)
        name = backend.dtype_name(index.dtype)
        if not name.startswith(("int", "uint")) or index.ndim != 1:
            raise TypeError(
                f"index_add: index must be a 1-D integer tensor, got shape {index.shape} and "
                f"dtype {name}"
            )
        expected = self.shape[:axis] + (index.shape[0],) + self.shape[axis + 1 :]
        if source.shape != expected:
            raise TinyattnError(
                f"index_add: source of shape {source.shape} does not fit: {index.shape[0]} "
                f"entries along dim {axis} of a tensor of shape {self.shape} need {expected}"
            )
        _check_in_range("index_add", index, axis, self.shape[axis])  # no counting from the end
        key = parse_key((slice(None),) * axis + (index.array,), self.shape)
        source = source.to(self.dtype) if alpha == 1 else source.to(self.dtype) * alpha
        return self + IndexAdd.apply(source, shape=self.shape, key=key)

    def topk(
        self,
        k: int,
        dim: int = -1,
        largest: bool = True,
        sorted: bool = True,  # noqa: A002
    ) -> ValuesIndices:
        """The k largest (or smallest) values along dim, in order, and their indices."""
        axis = normalize_dim("topk", dim, self.ndim) if self.ndim else 0
        length = self.shape[axis] if self.ndim else 1
        if not 0 <= k <= length:
            raise TinyattnError(f"topk: k={k} is out of range for dim {dim} of shape {self.shape}")
        indices = computed(_top_order, self, axis=axis, k=k, largest=largest)
        return ValuesIndices(self.gather(axis, indices) if self.ndim else self, indices)

    def nonzero(self, as_tuple: bool = False) -> Any:
        """The indices of the non-zero elements: an (n, ndim) int64 tensor, or one per dim."""
        check_host_read("nonzero() (its shape depends on the values)")
        if not self.ndim:  # PyTorch: one index of a 1-d view as a tuple, else (n, 0) indices
            found = self.reshape(1).nonzero(as_tuple=True)
            return found if as_tuple else found[0].unsqueeze(1)[:, :0]
        found = tuple(self._from_op(i, None) for i in backend.nonzero(self.array))
        return found if as_tuple else stack(found, axis=1)

    def unique(
        self,
        sorted: bool = True,  # noqa: A002  (PyTorch's name)
        return_inverse: bool = False,
        return_counts: bool = False,
        dim: int | None = None,
    ) -> Any:
        """The distinct values, sorted (with `dim`, the distinct slices along it), and with
        `return_inverse` / `return_counts` the tuple (values, inverse, counts) PyTorch returns:
        inverse gives each element's (slice's) position in the values. No gradient flows
        through it. Shapes: (...) -> (k,), inverse (...), counts (k,)."""
        check_host_read("unique() (its length depends on the values)")
        axis = None if dim is None else normalize_dim("unique", dim, self.ndim)
        values, inverse, counts = (self._from_op(a, None) for a in backend.unique(self.array, axis))
        extra = [t for t, wanted in ((inverse, return_inverse), (counts, return_counts)) if wanted]
        return (values, *extra) if extra else values

    def bincount(self, weights: TensorBase | None = None, minlength: int = 0) -> TensorBase:
        """How often each of 0, 1, ..., max (or minlength - 1, if larger) occurs in this 1-D
        tensor of non-negative integers, int64; with `weights`, their sums per value instead:
        y[b] = sum of weights[i] where x[i] = b, so dL/dweights[i] = g[x[i]] (PyTorch has no
        gradient here). Shapes: (n,) -> (max(x) + 1 or minlength,)."""
        if self.ndim != 1:
            raise TinyattnError(f"bincount: expected a 1-D tensor, got shape {self.shape}")
        check_integral("bincount", self)
        if type(minlength) is not int or minlength < 0:
            raise TinyattnError(f"bincount: minlength must be an int >= 0, got {minlength!r}")
        check_host_read("bincount() (its length depends on the values)")
        if self.numel() and int(self.min().item()) < 0:
            raise TinyattnError(
                f"bincount: values must be >= 0, got a minimum of {int(self.min().item())}"
            )
        length = max(int(self.max().item()) + 1 if self.numel() else 0, minlength)
        if weights is None:
            return self._from_op(backend.bincount(self.array, length), None)
        weights = self._operand(weights, "bincount")
        if weights.shape != self.shape:
            raise TinyattnError(
                f"bincount: weights of shape {weights.shape} for input of shape {self.shape}"
            )
        if not is_float(weights.array):
            weights = weights._cast("float64")  # PyTorch gives double for integer weights
        key = parse_key(self.array, (length,))
        return IndexAdd.apply(weights, shape=(length,), key=key)

    def multinomial(self, num_samples: int, replacement: bool = False) -> TensorBase:
        """Category indices drawn with these (unnormalised) weights, per row, from the host
        generator seeded by ``ta.manual_seed``; without replacement they are distinct."""
        if self.ndim not in (1, 2):
            raise TinyattnError(f"multinomial: expected 1-d or 2-d weights, got shape {self.shape}")
        host = backend.to_numpy(self.array).reshape(-1, self.shape[-1])
        if not (host >= 0).all() or not (host.sum(axis=1) > 0).all():
            raise TinyattnError("multinomial: weights must be non-negative with a positive sum")
        if not replacement and num_samples > int((host > 0).sum(axis=1).min()):
            raise TinyattnError(
                f"multinomial: cannot draw {num_samples} distinct categories without "
                f"replacement from a row with fewer non-zero weights (shape {self.shape})"
            )
        drawn = backend.multinomial(host, num_samples, replacement)
        drawn = backend.asarray(drawn, device=self.device)
        out = self._from_op(drawn, None)
        return out.reshape(num_samples) if self.ndim == 1 else out

    def masked_select(self, mask: TensorBase) -> TensorBase:
        """The elements where the bool `mask` is True, as 1-D (mask and tensor broadcast
        together); the gradient goes back to those elements.
        Shapes: x, mask broadcast to S -> (the number of True elements of the mask over S,)."""
        mask = self._operand(mask, "masked_select")
        if backend.dtype_name(mask.dtype) != "bool":
            raise TypeError(
                f"masked_select: mask must be a bool tensor, got {backend.dtype_name(mask.dtype)}"
            )
        shape = broadcast_shapes("masked_select", self.shape, mask.shape)
        return self.broadcast_to(shape)[mask.broadcast_to(shape)]

    def index_select(self, dim: int, index: TensorBase) -> TensorBase:
        """The entries of `dim` at the positions of the 1-D integer tensor `index` (0-d: one
        position), each in 0..n-1: a negative one is refused, as in PyTorch, where ``x[index]``
        would count it from the end.  Shapes: x (..., n, ...), index (k,) -> (..., k, ...)."""
        if not isinstance(index, TensorBase) or index.ndim > 1:
            raise TinyattnError(f"index_select: index must be a 1-D integer Tensor, got {index!r}")
        check_integral("index_select", index, bools=False)
        if not self.ndim:  # dim 0 or -1, and one position, as in PyTorch
            normalize_dim("index_select", dim, 1)
            if index.numel() != 1:
                raise TinyattnError(
                    f"index_select: a 0-d tensor takes one index, got {index.numel()}"
                )
            return self.reshape(1).index_select(0, index.reshape(1)).reshape(())
        axis = normalize_dim("index_select", dim, self.ndim)
        _check_in_range("index_select", index, axis, self.shape[axis])
        return self[(*self._along("index_select", axis), index.reshape(-1))]

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> ValuesIndices:
        """(values, indices) along `dim`, ascending unless `descending`: ``topk`` of the whole
        dimension, so equal values keep their index order (``stable=True``'s order, given
        whatever `stable` says)."""
        if not self.ndim:
            return self.topk(1, dim, largest=descending)
        axis = normalize_dim("sort", dim, self.ndim)
        return self.topk(self.shape[axis], axis, largest=descending)

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> TensorBase:
        return self.sort(dim, descending).indices


def _ones(array: Any) -> Any:
    xp = backend.namespace(array)
    return xp.ones(array.shape, dtype=xp.float32, device=array.device)


def _check_index(op: str, tensor: TensorBase, axis: int, index: TensorBase) -> None:
    """gather/scatter: an integer index of the same ndim, no larger, values in range."""
    name = backend.dtype_name(index.dtype)
    if not name.startswith(("int", "uint")):
        raise TypeError(f"{op}: index must be an integer tensor, got dtype {name}")
    if index.ndim != tensor.ndim or any(
        n > m for d, (n, m) in enumerate(zip(index.shape, tensor.shape)) if d != axis
    ):
        raise RuntimeError(  # PyTorch's type for this mistake
            f"{op}: index of shape {index.shape} does not fit a tensor of shape {tensor.shape} "
            f"along dim {axis} (same ndim, no larger size in the other dims)"
        )
    _check_in_range(op, index, axis, tensor.shape[axis])


def _check_in_range(op: str, index: TensorBase, axis: int, size: int) -> None:
    """Every index in 0..size-1, or PyTorch's refusal: a DimError, both of the types PyTorch
    raises here (IndexError, and RuntimeError from some of its kernels)."""
    if index.numel() and backend.meta.has_values(index.array):  # meta: none to check
        xp = backend.namespace(index.array)
        low, high = int(xp.min(index.array)), int(xp.max(index.array))
        if low < 0 or high >= size:
            raise DimError(
                f"{op}: index {low if low < 0 else high} is out of range for dim {axis} of "
                f"size {size}"
            )


def _merged_index(xp: Any, *parts: Any, sizes: tuple, shape: tuple) -> Any:
    """Adjacent index arrays as one row-major index into their dims merged into one."""
    flat = xp.zeros(shape, dtype=xp.int64, device=parts[0].device)
    for part, size in zip(parts, sizes, strict=True):
        index = xp.astype(part, xp.int64)
        flat = flat * size + xp.broadcast_to(xp.where(index < 0, index + size, index), shape)
    return flat


def _top_order(xp: Any, x: Any, axis: int, k: int, largest: bool) -> Any:
    """The positions of the k largest (or smallest) along `axis`, ties in index order. NaN
    ranks above every number, as in PyTorch (so NaN logits show in the top k)."""
    if backend.is_float_array(x):  # ascending puts NaN last, as the largest
        order = _descending_order(xp, x, axis) if largest else xp.argsort(x, axis=axis, stable=True)
    else:  # integers as they are (float64 rounds past 2**53); ~x reverses them, -x can overflow
        keys = xp.astype(x, xp.uint8) if backend.dtype_name(x.dtype) == "bool" else x
        keys = xp.bitwise_invert(keys) if largest else keys
        order = xp.argsort(keys, axis=axis, stable=True)
    return xp.astype(order[(slice(None),) * axis + (slice(0, k), Ellipsis)], xp.int64)


def _descending_order(xp: Any, x: Any, axis: int) -> Any:
    """A stable descending argsort of floats, NaN first. A stable sort of -x would put NaN
    last; the ascending sort (NaN last) of x reversed along `axis`, itself reversed, puts it
    first and keeps equal values in index order."""
    n = x.shape[axis]
    flipped_order = xp.argsort(xp.flip(x, axis=axis), axis=axis, stable=True)
    return (n - 1) - xp.flip(flipped_order, axis=axis)


def _flat_positions(xp: Any, index: Any, shape: tuple, axis: int) -> Any:
    """Row-major positions in a flattened `shape` of the elements gather/scatter address."""
    positions = xp.zeros(index.shape, dtype=xp.int64, device=index.device)
    stride = 1
    for d in reversed(range(len(shape))):
        if d == axis:
            coordinate = xp.astype(index, xp.int64)
        else:
            along = [1] * index.ndim
            along[d] = index.shape[d]
            coordinate = xp.reshape(xp.arange(index.shape[d], device=index.device), tuple(along))
        positions = positions + coordinate * stride
        stride *= shape[d]
    return xp.reshape(positions, (-1,))


def _check_unique(op: str, positions: Any) -> None:
    xp = backend.namespace(positions)
    ordered = xp.sort(positions)
    if positions.shape[0] > 1 and bool(xp.any(ordered[1:] == ordered[:-1])):
        raise TinyattnError(
            f"{op}: the index writes the same place twice, where PyTorch leaves the result "
            "undefined; use unique indices"
        )


def _wrapped_index(xp: Any, index: Any, size: int, axis: int) -> Any:
    """An integer index array as int64 in [0, size), or an IndexError naming the axis."""
    if not backend.dtype_name(index.dtype).startswith(("int", "uint")):
        raise IndexError(
            f"getitem: index arrays must be integers, got dtype {backend.dtype_name(index.dtype)}"
        )
    index = xp.astype(index, xp.int64)
    if math.prod(index.shape):
        low, high = int(xp.min(index)), int(xp.max(index))
        if low < -size or high >= size:
            bad = low if low < -size else high
            raise IndexError(f"getitem: index {bad} is out of range for axis {axis} of size {size}")
    return xp.where(index < 0, index + size, index)


def _bool_mask(key: Any) -> TensorBase | None:
    """The mask of ``x[mask]``: a bool Tensor as the whole key, else None."""
    if isinstance(key, TensorBase) and backend.dtype_name(key.dtype) == "bool" and key.ndim > 0:
        return key
    return None


def _as_tuple(key: Any) -> tuple:
    """The parts of a key. A list holding a tensor, sequence, slice, None or Ellipsis is read
    as a tuple (``x[[0, slice(None)]]``), PyTorch's (deprecated) rule; other lists index."""
    if isinstance(key, tuple):
        return key
    if isinstance(key, list) and len(key) < 32:
        if any(
            isinstance(part, TensorBase | list | tuple | range | slice)
            or part is None
            or part is Ellipsis
            for part in key
        ):
            return tuple(key)
    return (key,)


def _index_part(tensor: TensorBase, part: Any) -> Any:
    """One part of a key as an int, slice, None, Ellipsis, a Python bool, an integer array on
    the tensor's device, or a bool array (a mask); an IndexError names anything else."""
    if isinstance(part, bool) or part is None or part is Ellipsis or isinstance(part, slice):
        return part
    if isinstance(part, int):
        return part
    if isinstance(part, range):  # PyTorch reads a range as the list of its ints
        part = list(part)
    if isinstance(part, TensorBase):
        if part.device.type == "cpu" and tensor.device.type != "cpu":
            part = part.to(tensor.device)  # as PyTorch: CPU indices go to the indexed tensor
        array = tensor._operand(part, "getitem").array
    elif isinstance(part, list | tuple) or hasattr(part, "__array_interface__"):
        empty = isinstance(part, list | tuple) and not part  # x[[]] selects nothing
        array = backend.asarray(part, dtype="int64" if empty else None, device=tensor.device)
    elif hasattr(part, "__index__"):
        return int(part)
    else:
        raise IndexError(
            "getitem: only integers, slices (`:`), ellipsis (`...`), None and integer or bool "
            f"tensors are valid indices (got {type(part).__name__})"
        )
    name = backend.dtype_name(array.dtype)
    if name not in ("bool", "uint8") and not name.startswith("int"):
        raise IndexError(
            f"getitem: tensors used as indices must be long, int, byte or bool tensors, got {name}"
        )
    if array.ndim == 0:  # a 0-d index reads like a number (a bool one like a Python bool)
        value = part.item() if isinstance(part, TensorBase) else backend.to_numpy(array).item()
        return bool(value) if name in ("bool", "uint8") else int(value)
    if name == "uint8":  # PyTorch reads a uint8 index as a mask
        array = backend.namespace(array).astype(array, backend.namespace(array).bool)
    return array


def _split_key(tensor: TensorBase, key: Any) -> tuple[tuple, list]:
    """A key as its basic part (ints, slices, None; each index array a full slice) and its index
    arrays as (dim of ``x[basic]``, integer array). A bool mask over k dims becomes the k arrays
    of its nonzero positions; a Python bool a new dim of size 1 indexed by [0] (True) or []."""
    parts = [_index_part(tensor, part) for part in _as_tuple(key)]
    if sum(1 for part in parts if part is Ellipsis) > 1:
        raise IndexError("getitem: an index can only have a single ellipsis ('...')")
    used = sum(_dims_used(part) for part in parts)
    if used > tensor.ndim:
        raise IndexError(f"getitem: too many indices ({used}) for a tensor of shape {tensor.shape}")
    basic: list = []
    arrays: list = []
    dim = 0  # the dim of the input that the next part indexes
    for part in parts:
        if part is Ellipsis:
            basic += [slice(None)] * (tensor.ndim - used)
            dim += tensor.ndim - used
        elif isinstance(part, bool):
            arrays.append((_out_dims(basic), _bool_index(tensor, part)))
            basic.append(None)
        elif hasattr(part, "dtype") and backend.dtype_name(part.dtype) == "bool":
            for index in _mask_indices(tensor, part, dim):
                arrays.append((_out_dims(basic), index))
                basic.append(slice(None))
            dim += part.ndim
        elif hasattr(part, "dtype"):
            arrays.append((_out_dims(basic), part))
            basic.append(slice(None))
            dim += 1
        else:
            basic.append(part)
            dim += part is not None
    return tuple(basic), arrays


def _dims_used(part: Any) -> int:
    """How many dims of the indexed tensor one part of a key consumes."""
    if part is None or part is Ellipsis or isinstance(part, bool):
        return 0
    if hasattr(part, "dtype") and backend.dtype_name(part.dtype) == "bool":
        return part.ndim  # a mask covers as many dims as it has
    return 1


def _out_dims(basic: list) -> int:
    """The number of dims ``x[basic]`` has so far (an int removes its dim)."""
    return sum(1 for part in basic if not isinstance(part, int))


def _bool_index(tensor: TensorBase, value: bool) -> Any:
    xp = backend.namespace(tensor.array)
    return xp.zeros((1 if value else 0,), dtype=xp.int64, device=tensor.array.device)


def _mask_indices(tensor: TensorBase, mask: Any, dim: int) -> tuple:
    """The nonzero positions of a bool mask that indexes dims dim, dim + 1, ... of `tensor`."""
    covered = tensor.shape[dim : dim + mask.ndim]
    if mask.shape != covered:
        raise IndexError(
            f"getitem: the shape of the mask {mask.shape} does not match the shape {covered} "
            f"of dims {dim}..{dim + mask.ndim - 1} of the indexed tensor of shape {tensor.shape}"
        )
    check_host_read("x[..., mask] with a bool mask (its length depends on the values)")
    return backend.nonzero(mask)
