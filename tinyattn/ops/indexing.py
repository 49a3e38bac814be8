"""Indexing: gather with ``x[key]`` and its adjoint, scatter-add into zeros.

A key may hold ints, slices, None, Ellipsis and at most one integer array (a gather). The array
part is done with ``take`` on a flattened index, which every array API library has, and its
backward scatters with `backend.scatter_add`, so repeated indices add up. GetItem and IndexAdd are
each other's backward, so indexing is differentiable to any order.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .. import kernels
from ..autograd import Function
from ..backend import dtype_name, namespace, scatter_add
from ..backend.meta import has_values


class ParsedKey(NamedTuple):
    full: tuple  # the key with the Ellipsis expanded, as given otherwise
    basic: tuple  # the key with the array replaced by a full slice (None kept)
    basic_no_new: tuple  # the same without None, for writing back with __setitem__
    index: Any  # the integer array, or None
    axis: int  # the axis of x[basic] that the array indexes
    to_front: bool  # NumPy moves the gathered dims first when advanced indices are split


def parse_key(key: Any, shape: tuple) -> ParsedKey:
    """Normalise an indexing key for a tensor of `shape`, raising IndexError with the shapes."""
    key = key if isinstance(key, tuple) else (key,)
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError(f"getitem: an index can only have a single ellipsis, got {key!r}")
    if consumed > len(shape):
        raise IndexError(f"getitem: too many indices ({consumed}) for a tensor of shape {shape}")
    ellipsis_at = [i for i, k in enumerate(key) if k is Ellipsis]
    if ellipsis_at:
        at = ellipsis_at[0]
        key = key[:at] + (slice(None),) * (len(shape) - consumed) + key[at + 1 :]
    else:
        key = key + (slice(None),) * (len(shape) - consumed)
    arrays = [i for i, k in enumerate(key) if hasattr(k, "shape") and k.ndim > 0]
    if len(arrays) > 1:
        raise IndexError("getitem: only one integer-array index per key is supported")
    dim = 0
    for k in key:
        if isinstance(k, int) and not isinstance(k, bool):
            if not -shape[dim] <= k < shape[dim]:
                raise IndexError(
                    f"getitem: index {k} is out of range for axis {dim} of size {shape[dim]}"
                )
        if k is not None:
            dim += 1
    if not arrays:
        return ParsedKey(key, key, tuple(k for k in key if k is not None), None, 0, False)
    position = arrays[0]
    basic = key[:position] + (slice(None),) + key[position + 1 :]
    axis = sum(1 for k in key[:position] if not isinstance(k, int))
    # PyTorch applies the ints first (basic indexing), so the gathered dims stay where the array
    # was: x[0, :, i] has shape (n, len(i)). (NumPy counts the int as a second advanced index
    # and would move the gathered dims to the front when a slice separates the two.)
    to_front = False
    basic_no_new = tuple(k for k in basic if k is not None)
    return ParsedKey(key, basic, basic_no_new, key[position], axis, to_front)


def _checked_index(index: Any, size: int, axis: int) -> Any:
    """Flatten the index, reject out-of-range values (CuPy would wrap silently), wrap negatives."""
    xp = namespace(index)
    if not xp.isdtype(index.dtype, "integral"):
        raise IndexError(
            f"getitem: index arrays must be integers, got dtype {dtype_name(index.dtype)}"
        )
    flat = xp.reshape(index, (-1,))
    if flat.shape[0] and has_values(flat):  # a meta index has no values to check
        low, high = int(xp.min(flat)), int(xp.max(flat))
        if low < -size or high >= size:
            bad = low if low < -size else high
            raise IndexError(f"getitem: index {bad} is out of range for axis {axis} of size {size}")
        if low < 0:
            flat = xp.where(flat < 0, flat + size, flat)
    return flat


def _is_full_slice(k: Any) -> bool:
    return isinstance(k, slice) and k == slice(None)


def _move_axis(xp: Any, array: Any, source: int, count: int, destination: int) -> Any:
    """Move `count` consecutive axes starting at `source` to start at `destination`."""
    order = [i for i in range(array.ndim) if not source <= i < source + count]
    block = list(range(source, source + count))
    return xp.permute_dims(array, tuple(order[:destination] + block + order[destination:]))


class GetItem(Function):
    """y = x[key];  dL/dx = zeros with g scattered (added) into the indexed places;
    dy = dx[key]."""

    __slots__ = ("key",)
    backward_reads = ()
    shares_storage = True

    def reads_host(self) -> bool:
        return self.key.index is not None  # the range check of an index array

    def forward(self, x: Any, key: Any = None) -> Any:
        self.key = parse_key(key, x.shape)
        xp = namespace(x)
        gathered = x[self.key.basic]
        index = self.key.index
        if index is None:
            return xp.asarray(gathered)
        axis = self.key.axis
        flat = _checked_index(index, gathered.shape[axis], axis)
        taken = xp.take(gathered, flat, axis=axis)
        shape = gathered.shape[:axis] + index.shape + gathered.shape[axis + 1 :]
        taken = xp.reshape(taken, shape)
        if self.key.to_front:
            taken = _move_axis(xp, taken, axis, index.ndim, 0)
        return taken

    def backward(self, grad: Any) -> Any:
        return IndexAdd.apply(grad, shape=self.inputs[0].shape, key=self.key)

    def jvp(self, tangent: Any) -> Any:
        return GetItem.apply(tangent, key=self.key.full)


class IndexAdd(Function):
    """y = zeros(shape) with g added at x[key] (repeats summed);  dL/dg = (dL/dy)[key];
    dy = zeros(shape) with dg added at x[key]."""

    __slots__ = ("key",)
    backward_reads = ()

    def reads_host(self) -> bool:
        return self.key.index is not None  # the range check of an index array

    def forward(self, grad: Any, shape: tuple = (), key: ParsedKey | None = None) -> Any:
        self.key = key
        xp = namespace(grad)
        if key.index is not None and all(_is_full_slice(k) for k in key.full[1:]):
            # x[index] (an embedding lookup): its adjoint is one index-add of rows.
            flat = _checked_index(key.index, shape[0], 0)
            rest = math.prod(shape[1:])
            values = xp.reshape(grad, (flat.shape[0], rest))  # (*index.shape, *rest) -> (n, rest)
            return xp.reshape(kernels.index_add_rows(flat, values, shape[0]), shape)
        out = xp.zeros(shape, dtype=grad.dtype, device=grad.device)
        target_shape = out[key.basic_no_new].shape
        if key.index is not None:
            grad = self._scatter_index(xp, grad, out[key.basic].shape)
        out[key.basic_no_new] = xp.reshape(grad, target_shape)
        return out

    def _scatter_index(self, xp: Any, grad: Any, gathered_shape: tuple) -> Any:
        """Undo the gather: rows of `grad` added into zeros of the gathered-from shape."""
        key, axis = self.key, self.key.axis
        index_ndim = key.index.ndim
        if key.to_front:
            grad = _move_axis(xp, grad, 0, index_ndim, axis)
        # (..., *index.shape, ...) -> (n, rest) with the index axis first
        grad = _move_axis(xp, grad, axis, index_ndim, 0)
        rest = grad.shape[index_ndim:]
        flat = _checked_index(key.index, gathered_shape[axis], axis)
        values = xp.reshape(grad, (flat.shape[0], *rest))
        moved_shape = (gathered_shape[axis],) + gathered_shape[:axis] + gathered_shape[axis + 1 :]
        summed = scatter_add(
            xp.zeros(moved_shape, dtype=grad.dtype, device=grad.device), flat, values
        )
        return _move_axis(xp, summed, 0, 1, axis)

    def backward(self, grad: Any) -> Any:
        return GetItem.apply(grad, key=self.key.full)

    def jvp(self, tangent: Any) -> Any:
        return IndexAdd.apply(tangent, shape=self.output.shape, key=self.key)


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`.
VMAP_RULES = {GetItem: "getitem"}
