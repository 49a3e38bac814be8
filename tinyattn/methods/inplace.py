"""Tensor methods, in-place family: writes into a tensor's own storage.

``add_``, ``mul_``, ``div_`` (with ``rounding_mode``), ``fmod_``, ``copysign_``, ``+=``,
``copy_``, ``fill_``, ``zero_``, ``clamp_``, ``masked_fill_``, ``index_fill_``, ``scatter_``,
``scatter_reduce_``, ``index_put_``, ``normal_``, ``uniform_``, ``x[key] = v`` and the in-place
forms of the unary ops (``exp_()``, ``relu_()`` ...). Each computes its result out of place,
then stores it into the tensor's array (`_store`) and bumps the version counter that the tensor
shares with its views, so a backward that saved the old values refuses to run. Part of the
tensor layer: imports `backend`, `autograd`, `ops` and `methods.common`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import backend
from ..autograd import (
    check_host_read,
    is_grad_enabled,
    no_grad,
    note_store,
)
from ..autograd.forward_ad import in_place_tangents, store_tangents
from ..errors import TinyattnError
from ..ops import (
    normalize_axes,
)
from ..ops.computed import computed
from .common import TensorBase, named, new_leaf, where, written_value
from .inplace_graph import dtype_kind, fitted, recorded_inplace, replaced

# Unary ops that also have an in-place form, ``x.exp_()``: the out-of-place result stored back.
IN_PLACE_UNARY = ("abs", "neg", "exp", "log", "sqrt", "tanh", "sigmoid", "relu")


def _in_place_method(name: str) -> Callable:
    op = f"{name}_"

    def method(self: TensorBase) -> TensorBase:
        return self._inplace(op, lambda x: getattr(x, name)())

    return named(method, op, f"``x.{name}()`` written into x, in place (its version goes up).")


class InPlaceMethods(TensorBase):
    """In-place writes: each stores an out-of-place result and bumps the version counter."""

    __slots__ = ()  # every tensor's slots are declared once, in Tensor

    # ========================================================================================
    # In-place operations. Each writes into this tensor's existing array (so views and the
    # array behind ``.array`` see the change) and adds one to its version, which backward checks
    # before it uses a value saved in forward. In grad mode, on a tensor in the graph (or with a
    # value that requires grad), the op is recorded as PyTorch records it: the new values are
    # computed out of place from the tensor's history, and the tensor's history moves to that
    # computation (a write through a view moves its base's history too). A leaf that requires
    # grad is refused in grad mode; under ``ta.no_grad()`` anything may be written.
    # ========================================================================================
    def _inplace(
        self, op: str, compute: Callable[[TensorBase], TensorBase], *values: Any, cast: bool = False
    ) -> TensorBase:
        """Compute ``compute(x)``, x standing for this tensor's values, and store it here."""
        tangents = in_place_tangents(self, op, compute, values)  # None unless forward AD is on
        if is_grad_enabled() and _in_graph(self, op, values):
            recorded_inplace(self, op, compute, cast)
        else:
            with no_grad():
                result = fitted(op, self, compute(self), cast)
            self._store(op, result.array)
        if tangents is not None:
            store_tangents(self, tangents)
        return self

    def _store(self, op: str, array: Any) -> None:
        """Write `array` (this tensor's shape) into the existing storage and bump the version."""
        xp = backend.namespace(self.array)
        note_store(self.array, array, op)  # a compiled step's recording notes the write
        if array.dtype != self.array.dtype:
            array = xp.astype(array, self.array.dtype)
        if not hasattr(type(self.array), "__setitem__"):
            self.array = array  # a NumPy scalar (a 0-d result) is immutable: nothing aliases it
        else:
            try:
                if backend.shares_elements(self.array):
                    raise TinyattnError("two of its elements share one memory location")
                self.array[...] = array
            except ValueError as exc:  # a broadcast view (expand, broadcast_to) is read-only
                raise RuntimeError(
                    f"{op}: cannot write into this tensor of shape {self.shape}: its storage is "
                    f"read-only ({exc}); a broadcast result (expand, broadcast_to) shares one "
                    "element among many places, so write into a copy instead"
                ) from exc
        self._version_counter[0] += 1

    def __iadd__(self, other: Any) -> TensorBase:
        return self._inplace("add_", lambda x: x + other, other)

    def __isub__(self, other: Any) -> TensorBase:
        return self._inplace("sub_", lambda x: x - other, other)

    def __imul__(self, other: Any) -> TensorBase:
        return self._inplace("mul_", lambda x: x * other, other)

    def __itruediv__(self, other: Any) -> TensorBase:
        return self._inplace("div_", lambda x: x / other, other)

    def __ifloordiv__(self, other: Any) -> TensorBase:
        return self._inplace("floor_divide_", lambda x: x // other, other)

    def __imod__(self, other: Any) -> TensorBase:
        return self._inplace("remainder_", lambda x: x % other, other)

    def add_(self, other: Any, alpha: float = 1) -> TensorBase:
        """``self += alpha * other``, in place."""
        return self._inplace("add_", lambda x: x + (other if alpha == 1 else other * alpha), other)

    def sub_(self, other: Any, alpha: float = 1) -> TensorBase:
        """``self -= alpha * other``, in place."""
        return self._inplace("sub_", lambda x: x - (other if alpha == 1 else other * alpha), other)

    def mul_(self, other: Any) -> TensorBase:
        return self._inplace("mul_", lambda x: x * other, other)

    def div_(self, other: Any, *, rounding_mode: str | None = None) -> TensorBase:
        return self._inplace("div_", lambda x: x.div(other, rounding_mode=rounding_mode), other)

    def fmod_(self, other: Any) -> TensorBase:
        return self._inplace("fmod_", lambda x: x.fmod(other), other)

    def copysign_(self, other: Any) -> TensorBase:
        return self._inplace("copysign_", lambda x: x.copysign(other), other)

    def copy_(self, src: Any) -> TensorBase:
        """Copy `src` into this tensor (broadcast to its shape, cast to its dtype and device)."""
        if isinstance(src, TensorBase) and src.device != self.device:
            src = src.detach().to(self.device)
        return self._inplace(
            "copy_", lambda x: x._operand(src, "copy_").broadcast_to(x.shape), src, cast=True
        )

    def fill_(self, value: Any) -> TensorBase:
        """Set every element to `value` (a number or a one-element tensor)."""
        return self._inplace(
            "fill_",
            lambda x: written_value(x, value, "fill_").reshape(()).broadcast_to(x.shape),
            value,
            cast=True,
        )

    def zero_(self) -> TensorBase:
        return self.fill_(0)

    def clamp_(self, min: Any = None, max: Any = None) -> TensorBase:  # noqa: A002
        return self._inplace("clamp_", lambda x: x.clip(min, max), min, max)

    clip_ = clamp_

    def pow_(self, exponent: Any) -> TensorBase:
        return self._inplace("pow_", lambda x: x**exponent, exponent)

    def addcmul_(self, tensor1: Any, tensor2: Any, value: float = 1) -> TensorBase:
        return self._inplace(
            "addcmul_", lambda x: x.addcmul(tensor1, tensor2, value=value), tensor1, tensor2
        )

    def addcdiv_(self, tensor1: Any, tensor2: Any, value: float = 1) -> TensorBase:
        return self._inplace(
            "addcdiv_", lambda x: x.addcdiv(tensor1, tensor2, value=value), tensor1, tensor2
        )

    def lerp_(self, end: Any, weight: Any) -> TensorBase:
        return self._inplace("lerp_", lambda x: x.lerp(end, weight), end, weight)

    def scatter_add_(self, dim: int, index: TensorBase, src: TensorBase) -> TensorBase:
        return self._inplace("scatter_add_", lambda x: x.scatter_add(dim, index, src), src)

    def index_add_(
        self, dim: int, index: TensorBase, source: TensorBase, alpha: float = 1
    ) -> TensorBase:
        return self._inplace(
            "index_add_", lambda x: x.index_add(dim, index, source, alpha=alpha), source
        )

    def masked_fill_(self, mask: TensorBase, value: Any) -> TensorBase:
        """Set the elements where the bool `mask` (broadcast to this shape) is True to `value`."""
        return self._inplace("masked_fill_", lambda x: x.masked_fill(mask, value), value, cast=True)

    def index_fill_(self, dim: int, index: Any, value: Any) -> TensorBase:
        """Set the slices ``index`` along dimension `dim` to `value`."""
        axis = normalize_axes("index_fill_", dim, max(self.ndim, 1))[0]
        hit = _positions_hit("index_fill_", self, axis, index)
        filling = written_value(self, value, "index_fill_")
        return self._inplace("index_fill_", lambda x: where(hit, filling, x), value, cast=True)

    def scatter_(
        self, dim: int, index: TensorBase, src: Any = None, *, value: Any = None, reduce: Any = None
    ) -> TensorBase:
        """``self[..., index[i, j], ...] = src[i, j]`` along `dim` (PyTorch's scatter_).

        `src` is a tensor at least as large as `index` or a number (also as ``value=``). Where an
        index repeats, the written value is unspecified in PyTorch; here it is the mean of the
        values sent there. ``reduce="add"`` or ``"multiply"`` combines instead of writing.
        """
        src = _source_or_value("scatter_", src, value)
        if reduce is not None:
            return self._inplace(
                "scatter_",
                lambda x: x._scatter_with_reduce("scatter_", dim, index, src, reduce),
                src,
            )
        return self._inplace("scatter_", lambda x: _scattered(x, dim, index, src), src, cast=True)

    def scatter_reduce_(
        self,
        dim: int,
        index: TensorBase,
        src: TensorBase,
        reduce: str,
        *,
        include_self: bool = True,
    ) -> TensorBase:
        return self._inplace(
            "scatter_reduce_",
            lambda x: x.scatter_reduce(dim, index, src, reduce, include_self=include_self),
            src,
        )

    def index_put_(self, indices: Any, values: Any, accumulate: bool = False) -> TensorBase:
        return self._inplace(
            "index_put_", lambda x: x.index_put(indices, values, accumulate), values, cast=True
        )

    def normal_(self, mean: float = 0.0, std: float = 1.0) -> TensorBase:
        """Fill with samples of N(mean, std^2) from the generator ``ta.manual_seed`` seeds (a
        leaf that requires grad only under ``ta.no_grad()``, as in PyTorch)."""
        return self._inplace("normal_", lambda x: _drawn(x, "normal") * std + mean)

    def uniform_(self, from_: float = 0.0, to: float = 1.0, **kwargs: Any) -> TensorBase:
        """Fill with samples uniform in [from, to) (PyTorch's keyword is ``from``)."""
        low = kwargs.pop("from", from_)
        if kwargs:
            raise TypeError(f"uniform_: unexpected arguments {sorted(kwargs)}")
        return self._inplace("uniform_", lambda x: _drawn(x, "uniform") * (to - low) + low)

    def __setitem__(self, key: Any, value: Any) -> None:
        """``x[key] = value``: basic slices, steps, integer lists or arrays, a bool mask."""
        self._inplace("setitem", lambda x: _assigned(x, key, value), value, cast=True)


def _slices_hit(xp: Any, index: Any, size: int, shape: tuple) -> Any:
    """A bool array of `shape`, True on the positions (along its one long axis) index names."""
    flat = xp.reshape(xp.astype(index, xp.int64), (-1,))
    flat = xp.where(flat < 0, flat + size, flat)
    hit = xp.any(xp.arange(size, device=flat.device)[:, None] == flat[None, :], axis=1)
    return xp.reshape(hit, shape)


def _put(xp: Any, x: Any, values: Any, positions: Any) -> Any:
    """x with x.flat[positions] = values (the last one wins where a position repeats)."""
    targets = xp.reshape(positions, (-1,))
    values = xp.astype(xp.reshape(values, (-1,)), x.dtype)
    flat = xp.reshape(xp.asarray(x, copy=True), (-1,))
    try:
        flat[targets] = values
    except IndexError:  # array_api_strict has no integer-array assignment: match one-hot
        match = xp.arange(flat.shape[0], device=targets.device)[:, None] == targets[None, :]
        # The last match wins, as NumPy's assignment does.
        last = targets.shape[0] - 1 - xp.argmax(xp.astype(xp.flip(match, axis=1), xp.int8), axis=1)
        flat = xp.where(xp.any(match, axis=1), xp.take(values, last), flat)
    return xp.reshape(flat, x.shape)


def _scatter_mean(xp: Any, x: Any, index: Any, values: Any, axis: int, integral: bool) -> Any:
    """x after scatter_ along `axis`: each written place gets the mean of the values sent there
    (their sum for an integer or bool tensor, where a mean would not fit)."""
    size = x.shape[axis]
    idx = xp.astype(index, xp.int64)
    idx = xp.where(idx < 0, idx + size, idx)
    values = xp.astype(values, x.dtype)
    # One-hot along a new last axis: match[..., i, ..., j] says index[..., i, ...] == j.
    match = idx[..., None] == xp.arange(size, device=idx.device)
    zero = xp.zeros((), dtype=values.dtype, device=values.device)
    count = xp.sum(xp.astype(match, values.dtype), axis=axis)
    total = xp.sum(xp.where(match, values[..., None], zero), axis=axis)
    order = [*range(axis), total.ndim - 1, *range(axis, total.ndim - 1)]  # j back to `axis`
    count, total = xp.permute_dims(count, tuple(order)), xp.permute_dims(total, tuple(order))
    hit = count > 0
    one = xp.ones((), dtype=values.dtype, device=values.device)
    mean = total if integral else total / xp.where(hit, count, one)
    region = tuple(slice(0, n) for n in index.shape)
    written = region[:axis] + (slice(None),) + region[axis + 1 :]
    full_hit = xp.zeros(x.shape, dtype=xp.bool, device=hit.device)
    full_hit[written] = hit
    full_values = xp.zeros(x.shape, dtype=x.dtype, device=hit.device)
    full_values[written] = xp.astype(mean, x.dtype)
    return xp.where(full_hit, full_values, x)


# Used by the in-place section at the end of the Tensor class: the checks every in-place
# operation makes, and the out-of-place values that indexing writes compute.
def _in_graph(tensor: TensorBase, op: str, values: tuple) -> bool:
    """Whether an in-place `op` in grad mode must be recorded (it touches the graph); refuses a
    leaf that requires grad, or a view of one, with PyTorch's message."""
    base = tensor._view[0] if tensor._view is not None else None
    for target, what in ((tensor, "a leaf Variable"), (base, "a view of a leaf Variable")):
        if target is not None and target.requires_grad and target._ctx is None:
            raise RuntimeError(
                f"{op}: {what} that requires grad is being used in an in-place operation. "
                "Update parameters inside `with ta.no_grad():`."
            )
    fn = tensor._ctx
    if base is not None and fn is not None and fn._outputs is not None:
        raise RuntimeError(
            f"{op}: output {fn._outputs.position(tensor)} of {fn.name} is a view and is being "
            "modified inplace. This view is the output of a function that returns multiple "
            "views, which does not allow its outputs to be modified inplace (as in PyTorch); "
            "replace the inplace operation by an out-of-place one"
        )
    if tensor.requires_grad or (base is not None and base.requires_grad):
        return True
    return any(isinstance(value, TensorBase) and value.requires_grad for value in values)


def _int_index(op: str, tensor: TensorBase, index: Any, size: int, axis: int) -> Any:
    """An index (Tensor, list or array) as a flat, range-checked integer array (no negatives)."""
    index = tensor._operand(index, op)
    xp = backend.namespace(index.array)
    if not xp.isdtype(index.dtype, "integral"):
        raise IndexError(
            f"{op}: index must hold integers, got dtype {backend.dtype_name(index.dtype)}"
        )
    flat = xp.reshape(index.array, (-1,))
    if flat.shape[0]:
        low, high = int(xp.min(flat)), int(xp.max(flat))
        if low < -size or high >= size:
            bad = low if low < -size else high
            raise IndexError(
                f"{op}: index {bad} is out of range for dimension {axis} of size {size}"
            )
    return xp.where(flat < 0, flat + size, flat)


def _positions_hit(op: str, tensor: TensorBase, axis: int, index: Any) -> TensorBase:
    """A bool Tensor, True on the slices of dimension `axis` that `index` names."""
    size = tensor.shape[axis] if tensor.ndim else 1
    _int_index(op, tensor, index, size, axis)  # dtype and range checks
    shape = [1] * tensor.ndim
    if tensor.ndim:
        shape[axis] = size
    return computed(_slices_hit, tensor._operand(index, op), size=size, shape=tuple(shape))


def _scattered(tensor: TensorBase, dim: int, index: Any, src: Any) -> TensorBase:
    """The values of `tensor` after ``scatter_(dim, index, src)``, computed out of place (as one
    op, so a compiled step writes the new values on every replay)."""
    xp = backend.namespace(tensor.array)
    axis = normalize_axes("scatter_", dim, tensor.ndim)[0]
    index = tensor._operand(index, "scatter_")
    if index.ndim != tensor.ndim or any(
        i > n for d, (i, n) in enumerate(zip(index.shape, tensor.shape)) if d != axis
    ):
        raise RuntimeError(
            f"scatter_: index of shape {index.shape} does not fit a tensor of shape "
            f"{tensor.shape} (same number of dimensions, no larger outside dimension {axis})"
        )
    _int_index("scatter_", tensor, index, tensor.shape[axis], axis)  # dtype and range checks
    if is_grad_enabled() and (
        tensor.requires_grad or (isinstance(src, TensorBase) and src.requires_grad)
    ):
        raise RuntimeError(
            f"scatter_: a tensor in the graph (shape {tensor.shape}) cannot be scattered into in "
            "place; use the out-of-place x.scatter(dim, index, src), which is recorded"
        )
    if isinstance(src, TensorBase):
        tensor._operand(src, "scatter_")
        if src.ndim != index.ndim or any(s < i for s, i in zip(src.shape, index.shape)):
            raise RuntimeError(
                f"scatter_: src of shape {src.shape} is smaller than index of shape {index.shape}"
            )
        values = src[tuple(slice(0, n) for n in index.shape)]
    else:
        values = tensor.constant(
            xp.full(index.shape, src, dtype=tensor.dtype, device=tensor.array.device)
        )
    return computed(
        _scatter_mean, tensor, index, values, axis=axis, integral=dtype_kind(tensor) < 2
    )


def _bool_key(tensor: TensorBase, key: Any) -> TensorBase | None:
    """The key as a bool Tensor when it is a boolean mask, else None."""
    if isinstance(key, list) and key and all(isinstance(k, bool) for k in key):
        key = new_leaf(tensor._from_op, key, None, tensor.device, False)
    elif hasattr(key, "__array_interface__") and key.dtype.kind == "b":
        key = new_leaf(tensor._from_op, key, None, tensor.device, False)
    if isinstance(key, TensorBase) and backend.dtype_name(key.dtype) == "bool":
        return tensor._operand(key, "setitem")
    return None


def _assigned(tensor: TensorBase, key: Any, value: Any) -> TensorBase:
    """The values of `tensor` after ``tensor[key] = value``, computed out of place (as one op,
    so a compiled step writes the new values on every replay)."""
    value = written_value(tensor, value, "setitem")
    mask = _bool_key(tensor, key)
    if mask is not None:
        return _mask_assigned(tensor, mask, value)
    xp = backend.namespace(tensor.array)
    size = tensor.numel()
    # Which flat positions x[key] reads: indexing a tensor of positions gives every check
    # (ranges, shapes) of x[key] and the places to write.
    positions = xp.reshape(xp.arange(size, device=tensor.array.device), tensor.shape)
    selected = tensor._from_op(positions, None)[key]
    if value.shape != selected.shape:
        value = value.broadcast_to(selected.shape)
    if not selected.numel():
        return tensor.detach()
    if is_grad_enabled() and (tensor.requires_grad or value.requires_grad):
        # In the graph: the gradient flows to both. Where the key names a place twice the last
        # write wins, and (as in PyTorch) every write still gets the gradient of its place:
        # an overwritten value enters as ``v - v.detach()``, zero that carries a gradient.
        last = computed(_last_of_repeats, selected)
        value = where(last, value, value - value.detach())
        return replaced(tensor, selected, value)
    return computed(_put, tensor, value, selected)


def _last_of_repeats(xp: Any, positions: Any) -> Any:
    """True where a position does not occur again later in row-major order."""
    flat = xp.reshape(positions, (-1,))
    order = xp.argsort(flat, stable=True)  # equal positions stay in order: the last is last
    ordered = xp.take(flat, order)
    tail = xp.ones((min(1, flat.shape[0]),), dtype=xp.bool, device=flat.device)
    last = xp.concat([ordered[1:] != ordered[:-1], tail])
    return xp.reshape(xp.take(last, xp.argsort(order)), positions.shape)


def _mask_assigned(tensor: TensorBase, mask: TensorBase, value: TensorBase) -> TensorBase:
    """``x[mask] = value``: a number, a value broadcast over the masked rows, or one per row."""
    xp = backend.namespace(tensor.array)
    if mask.shape != tensor.shape[: mask.ndim]:
        raise IndexError(
            f"setitem: a mask of shape {mask.shape} does not match the shape {tensor.shape} "
            "of the tensor (it must equal its leading dimensions)"
        )
    rest = tensor.shape[mask.ndim :]
    if value.ndim <= len(rest):  # the same value for every selected row
        return where(mask.reshape(mask.shape + (1,) * len(rest)), value, tensor)
    if is_grad_enabled() and (tensor.requires_grad or value.requires_grad):
        raise RuntimeError(
            f"setitem: x[mask] = rows (one row of shape {value.shape[1:]} per True) is not "
            "recorded in the graph; write it out of place, e.g. with ta.where, or as x[mask] = v "
            "with one value for every selected row"
        )
    check_host_read("x[mask] = rows (how many rows it takes depends on the values)")
    cond = xp.reshape(mask.array, mask.shape + (1,) * len(rest))
    flags = xp.reshape(mask.array, (-1,))
    count = int(xp.sum(xp.astype(flags, xp.int64)))
    if value.shape != (count, *rest):
        raise RuntimeError(
            f"setitem: the mask selects {count} row(s) of shape {rest}, but the value has "
            f"shape {value.shape}"
        )
    if count == 0:
        return tensor.detach()
    order = xp.cumulative_sum(xp.astype(flags, xp.int64)) - 1  # row i takes value[order[i]]
    rows = xp.take(xp.reshape(value.array, (count, -1)), xp.where(order < 0, 0, order), axis=0)
    gathered = xp.astype(xp.reshape(rows, tensor.shape), tensor.dtype)
    return tensor._from_op(xp.where(cond, gathered, tensor.array), None)


for _name in IN_PLACE_UNARY:
    setattr(InPlaceMethods, f"{_name}_", _in_place_method(_name))


def _source_or_value(op: str, src: Any, value: Any) -> Any:
    """scatter's `src`, given positionally or as PyTorch's keyword ``value`` (a number)."""
    if (src is None) == (value is None):
        raise TypeError(f"{op}: give exactly one of src and value")
    return src if value is None else value


def _drawn(tensor: TensorBase, kind: str) -> TensorBase:
    """Standard samples of `kind` ("normal" or "uniform") in the tensor's shape, dtype, device."""
    backend.check_floating(f"{kind}_", tensor.array)
    draw = backend.random_array(kind, tensor.shape, tensor.dtype, str(tensor.device))
    return tensor._from_op(draw, None)
