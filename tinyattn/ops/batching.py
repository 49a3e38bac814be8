"""Ops layer, vmap's batching rules: how an op runs on a whole batch of samples at once.

Inside ``vmap`` (``tinyattn.func``) an op whose inputs are batched gets, instead of its forward,
its batching rule: ``rule(cls, values, batched, kwargs, size)``, where `values` are the inputs'
*physical* Tensors (a batched one has the batch dim first, (B, *sample shape)), `batched` says
which are, and `size` is B. The rule calls ordinary ops on them (which record the graph) and
returns the physical result, batch dim first. Each op module declares its ops' rules by name in
a ``VMAP_RULES`` table beside the ops; the names are the functions of `KINDS` below: a few kinds
shared by most ops (elementwise, along axes, reductions, shape ops) and the few rules of one op
(matmul, linear, cross-entropy, dropout).

Imports nothing of tinyattn: a rule uses the Tensor methods of the tensors it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def padded(value: Any, ndim: int) -> Any:
    """A physical Tensor (B, *s) as (B, 1, ..., 1, *s) with `ndim` logical dims, so it
    broadcasts against unbatched operands as one sample would."""
    missing = ndim - (value.ndim - 1)
    if missing <= 0:
        return value
    return value.reshape((value.shape[0],) + (1,) * missing + tuple(value.shape[1:]))


def logical_ndim(value: Any, batched: bool) -> int:
    return value.ndim - 1 if batched else value.ndim


def expanded(value: Any, size: int) -> Any:
    """An unbatched Tensor as a physical one: the same values for every sample (a view)."""
    return value.unsqueeze(0).expand(size, *value.shape)


def elementwise(cls: type, values: list, batched: tuple, kwargs: dict, size: int) -> Any:
    """Broadcasting ops: batched operands padded to the widest rank, the rest broadcast."""
    ndim = max(logical_ndim(v, b) for v, b in zip(values, batched))
    aligned = [padded(v, ndim) if b else v for v, b in zip(values, batched)]
    return cls.apply(*aligned, **kwargs)


def shifted(axis: Any, ndim: int) -> Any:
    """Logical axes as physical ones: None is every logical axis, negative axes stay."""
    if axis is None:
        return tuple(range(1, ndim + 1))
    if isinstance(axis, tuple | list):
        return tuple(shifted(a, ndim) for a in axis)
    return axis + 1 if axis >= 0 else axis


def along_axes(cls: type, values: list, batched: tuple, kwargs: dict, size: int) -> Any:
    """Ops along axes of input 0 (softmax, cumsum, layer norm, split): the axes shifted past
    the batch dim; further inputs (a norm's weight) are aligned with input 0."""
    first = values[0] if batched[0] else expanded(values[0], size)
    ndim = first.ndim - 1
    rest = [padded(v, ndim) if b else v for v, b in zip(values[1:], batched[1:])]
    kwargs = dict(kwargs)
    for name in ("axis", "axes"):
        if name in kwargs:
            kwargs[name] = shifted(kwargs[name], ndim)
    return cls.apply(first, *rest, **kwargs)


def reduction(cls: type, values: list, batched: tuple, kwargs: dict, size: int) -> Any:
    """Reductions (sum, mean, max, ...): no axis means every logical axis, not the batch's."""
    return along_axes(cls, values, batched, {"axis": None, **kwargs}, size)


def reshape(cls: type, values: list, batched: tuple, kwargs: dict, size: int) -> Any:
    (value,) = values
    return cls.apply(value, shape=(value.shape[0], *kwargs["shape"]))


def permute(cls: type, values: list, batched: tuple, kwargs: dict, size: int) -> Any:
    (value,) = values
    ndim = value.ndim - 1
    axes = tuple(a % ndim + 1 for a in kwargs["axes"]) if ndim else ()
    return cls.apply(value, axes=(0, *axes))


def broadcast_to(cls: type, values: list, batched: tuple, kwargs: dict, size: int) -> Any:
    """x broadcast to a logical shape: padded to its rank first (broadcasting aligns right)."""
    (value,) = values
    shape = tuple(kwargs["shape"])
    return cls.apply(padded(value, len(shape)), shape=(value.shape[0], *shape))


def sum_to(cls: type, values: list, batched: tuple, kwargs: dict, size: int) -> Any:
    """x summed to a logical shape: the leading logical dims the target lacks go first (a plain
    sum_to would sum the batch dim with them)."""
    (value,) = values
    shape = tuple(kwargs["shape"])
    extra = value.ndim - 1 - len(shape)
    if extra > 0:
        value = value.sum(axis=tuple(range(1, extra + 1)))
    return cls.apply(value, shape=(value.shape[0], *shape))


def getitem(cls: type, values: list, batched: tuple, kwargs: dict, size: int) -> Any:
    """x[key] per sample: a full slice before the key keeps the batch dim (the key's arrays
    gather where they stand, as PyTorch's do). A key that is one index array batched at this
    level (``x.reshape(-1)[positions]`` in gather, with positions computed per sample) takes
    each sample's own positions, as offsets into the batch's rows; other batched keys decline.
    Shapes: x (B, n, *rest), index (B, *i) -> (B, *i, *rest)."""
    (value,) = values
    key = kwargs.get("key")
    key = key if isinstance(key, tuple) else (key,)
    if not any(_per_sample(k) for k in key):
        return cls.apply(value, key=(slice(None), *key))
    if len(key) != 1 or _per_sample(getattr(key[0].value, "array", None)):
        return NotImplemented
    index = key[0].value  # the physical Tensor of positions: (B, *i)
    rows = value.shape[1]
    first = index.new_ones((size,)).cumsum(0) - 1  # 0, 1, ..., B - 1: each sample's row block
    offsets = (first * rows).reshape((size,) + (1,) * (index.ndim - 1))
    flat = value.reshape((size * rows, *value.shape[2:]))
    return flat[(index + offsets).reshape(-1)].reshape((*index.shape, *value.shape[2:]))


def _per_sample(part: Any) -> bool:
    """Whether a part of a key is an array batched by vmap (it holds its physical Tensor)."""
    return hasattr(part, "value") and hasattr(part, "level")


def concat(cls: type, values: list, batched: tuple, kwargs: dict, size: int) -> Any:
    """cat along a logical axis: unbatched pieces repeated for each sample."""
    pieces = [v if b else expanded(v, size) for v, b in zip(values, batched)]
    return cls.apply(*pieces, axis=shifted(kwargs.get("axis", 0), pieces[0].ndim - 1))


def matmul(cls: type, values: list, batched: tuple, kwargs: dict, size: int) -> Any:
    """a @ b per sample: 1-D operands made matrices (and squeezed back after), batched operands
    padded to the widest rank so the batch dims of one sample broadcast as they would alone.
    Shapes: a (B, ..., n, k), b (..., k, m) -> (B, ..., n, m)."""
    a, b = values
    a_vector, b_vector = logical_ndim(a, batched[0]) == 1, logical_ndim(b, batched[1]) == 1
    a = a.unsqueeze(-2) if a_vector else a  # (k,) -> (1, k)
    b = b.unsqueeze(-1) if b_vector else b  # (k,) -> (k, 1)
    ndim = max(logical_ndim(a, batched[0]), logical_ndim(b, batched[1]))
    a = padded(a, ndim) if batched[0] else a
    b = padded(b, ndim) if batched[1] else b
    result = cls.apply(a, b)  # (B, ..., n, m): the row's axis first, while it is second-last
    result = result.squeeze(-2) if a_vector else result
    return result.squeeze(-1) if b_vector else result


def linear(cls: type, values: list, batched: tuple, kwargs: dict, size: int) -> Any:
    """x W^T + b per sample. A shared weight keeps the one GEMM over every row of the batch;
    a batched weight (per-sample parameters) is a batched matrix product.
    Shapes: x (B, ..., in), W (B, out, in) or (out, in), b (B, out) or (out,) -> (B, ..., out)."""
    x, weight, *bias = values
    if not any(batched[1:]):
        return cls.apply(x, weight, *bias)
    x = x if batched[0] else expanded(x, size)
    rows = x.reshape((size, -1, x.shape[-1]))  # (B, ..., in) -> (B, N, in)
    y = rows @ weight.mT  # (B, N, in) @ (B, in, out) -> (B, N, out)
    if bias:
        y = y + (bias[0].unsqueeze(-2) if batched[2] else bias[0])  # (B, 1, out) or (out,)
    return y.reshape((*x.shape[:-1], y.shape[-1]))  # (B, N, out) -> (B, ..., out)


def cross_entropy(cls: type, values: list, batched: tuple, kwargs: dict, size: int) -> Any:
    """The loss of each sample: every row's loss, then each sample's reduction over its rows
    (a mean divides by the sample's rows not ignored, as one sample's call would).
    Shapes: x (B, ..., C), targets (B, ...) -> (B,) or (B, ...) with reduction "none"."""
    x, targets = (v if b else expanded(v, size) for v, b in zip(values, batched))
    reduction = kwargs.get("reduction", "mean")
    rows = cls.apply(x, targets, **{**kwargs, "reduction": "none"})  # (B, ...)
    if reduction == "none":
        return rows
    axes = tuple(range(1, rows.ndim))
    total = rows.sum(axis=axes) if axes else rows
    if reduction == "sum":
        return total
    if targets.ndim == x.ndim:  # class probabilities: every row counts
        return total / max(1, rows[0].numel())
    kept = (targets != kwargs.get("ignore_index", -100)).to(total.dtype)
    return total / (kept.sum(axis=axes) if axes else kept)


def dropout(cls: type, values: list, batched: tuple, kwargs: dict, size: int) -> Any:
    """Dropout per sample: with randomness "different" each sample draws its own mask, with
    "same" one mask of a sample's shape is drawn and shared. Shapes: x (B, ...) -> (B, ...)."""
    (x,) = values
    kwargs = dict(kwargs)
    if kwargs.pop("randomness") == "different":
        return cls.apply(x, **kwargs)
    mask = cls.apply(x[0].detach() * 0 + 1, **kwargs)  # one sample's scaled mask
    return x * mask


KINDS: dict[str, Callable] = {
    "elementwise": elementwise,
    "along_axes": along_axes,
    "reduction": reduction,
    "reshape": reshape,
    "permute": permute,
    "broadcast_to": broadcast_to,
    "sum_to": sum_to,
    "getitem": getitem,
    "concat": concat,
    "matmul": matmul,
    "linear": linear,
    "cross_entropy": cross_entropy,
    "dropout": dropout,
}
# Rules that draw random numbers: vmap's `randomness` decides whether they may and how.
RANDOM = frozenset({"dropout"})
