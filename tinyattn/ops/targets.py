"""Constants computed from integer targets and random masks: ops without a gradient to pass on.

Cross-entropy's target weights and its count of kept targets depend on the targets' values, and
dropout's mask on the host generator. Computing them inside an op's forward, rather than with
array code in `functional`, keeps a step's whole computation made of recorded ops: `ta.compile`
replays forwards, so new targets and new masks flow through a replay like any other input.
"""

from __future__ import annotations

from typing import Any

from .. import backend, kernels
from ..autograd import Function


class ClassWeights(Function):
    """w[..., c] = (1 - s) * [t == c] + s / C on rows whose target is kept, 0 on ignored rows.

    The target distribution of cross-entropy with label smoothing s (PyTorch's). For up to
    `kernels.IDENTITY_ROWS` classes each row is gathered from a table of the C possible rows
    and one zero row (for ignored targets): one write per entry, where comparing every target
    with every class makes several passes over (..., C). For more classes the table would
    outgrow the result, and the targets are compared. Both give the same values. Targets are
    integers, so there is no gradient. Shapes: targets (...) int -> (..., C) of `dtype`.
    """

    __slots__ = ("on_host",)
    backward_reads = ()

    def reads_host(self) -> bool:
        return not self.on_host  # the range check of device targets waits for the device

    def forward(
        self, targets: Any, classes: int, ignore_index: Any, smoothing: float, dtype: Any
    ) -> Any:
        self.on_host = backend.is_host_array(targets)
        return target_rows(targets, classes, ignore_index, smoothing, dtype)

    def backward(self, grad: Any) -> None:
        return None


def target_rows(targets: Any, classes: int, ignore_index: Any, smoothing: float, dtype: Any) -> Any:
    """`ClassWeights`' forward on arrays: the targets checked, then their rows.
    Shapes: targets (...) int -> (..., C) of `dtype`."""
    # cross_entropy checked the targets of an eager call; a compiled step's replay gets new
    # ones unchecked, so they are checked here too. On the host the table's take refuses
    # them; CuPy's take wraps an index out of range, so there they are compared, which
    # waits for the device (as getitem's range check does).
    xp = backend.namespace(targets)
    on_host = backend.is_host_array(targets)
    if (classes > kernels.IDENTITY_ROWS or not on_host) and backend.meta.has_values(targets):
        if bool(xp.any(bad_targets(xp, targets, classes, ignore_index))):
            raise _out_of_range(classes, ignore_index)
    if classes > kernels.IDENTITY_ROWS:
        return _compared(xp, targets, classes, ignore_index, smoothing, dtype)
    rows = gather_target_rows(xp, targets, classes, ignore_index, smoothing, dtype)
    return xp.reshape(rows, (*targets.shape, classes))


def gather_target_rows(
    xp: Any,
    targets: Any,
    classes: int,
    ignore_index: Any,
    smoothing: float,
    dtype: Any,
    out: Any = None,
) -> Any:
    """`ClassWeights`' rows for up to `kernels.IDENTITY_ROWS` classes, one per target, gathered
    from the table of the C possible rows and a zero row; written into `out` (a NumPy (n, C)
    array: a compiled step's buffer) when given. A target out of range is sent past the table,
    so that NumPy's take refuses it, and raises the op's error. Shapes: targets (...) -> (n, C).
    """
    flat = xp.astype(xp.reshape(targets, (-1,)), xp.int64)  # room for C + 1 in any dtype
    index = xp.where((flat < 0) | (flat >= classes), classes + 1, flat)
    if ignore_index is not None:
        index = xp.where(flat == ignore_index, classes, index)  # the zero row
    table = _target_rows(xp, classes, smoothing, dtype, targets.device)
    try:
        if out is not None:
            return table.take(index, axis=0, out=out)
        return xp.take(table, index, axis=0)
    except IndexError:
        raise _out_of_range(classes, ignore_index) from None


def bad_targets(xp: Any, targets: Any, classes: int, ignore_index: Any) -> Any:
    """The mask of targets that are neither a class in 0..C-1 nor `ignore_index`."""
    bad = (targets < 0) | (targets >= classes)
    if ignore_index is not None:
        bad = bad & (targets != ignore_index)
    return bad


def _out_of_range(classes: int, ignore_index: Any) -> IndexError:
    ignored = "" if ignore_index is None else f" or ignore_index={ignore_index}"
    return IndexError(
        f"cross_entropy: a target value is out of range for {classes} classes (expected "
        f"0..{classes - 1}{ignored}) in a replay of a compiled step"
    )


@backend.cache_per_device(maxsize=16)
def _target_rows(xp: Any, classes: int, smoothing: float, dtype: Any, device: Any) -> Any:
    """(C + 1, C): row c is the smoothed one-hot of class c, row C all zeros; the same
    operations on the same values as `_compared` makes. Only ever read."""
    rows = xp.astype(xp.eye(classes + 1, classes, dtype=xp.bool, device=device), dtype)
    rows = rows * (1.0 - smoothing)
    if smoothing:
        kept = xp.astype(xp.arange(classes + 1, device=device) < classes, dtype)[:, None]
        rows = rows + kept * (smoothing / classes)
    return rows


def _compared(
    xp: Any, targets: Any, classes: int, ignore_index: Any, smoothing: float, dtype: Any
) -> Any:
    """The target rows by comparing every target with every class (an out-of-range target
    matches none)."""
    kept = _kept(xp, targets, ignore_index)[..., None]  # (..., 1)
    hits = targets[..., None] == xp.arange(classes, device=targets.device)  # (..., C)
    weights = xp.astype(hits & kept, dtype) * (1.0 - smoothing)
    if smoothing:
        weights = weights + xp.astype(kept, dtype) * (smoothing / classes)
    return weights


class KeptCount(Function):
    """n = max(1, number of targets != ignore_index): the divisor of a "mean" cross-entropy.

    At least 1, so that all-ignored targets give a loss of 0, not 0/0. No gradient.
    Shapes: targets (...) int -> () of `dtype`.
    """

    backward_reads = ()

    def forward(self, targets: Any, ignore_index: Any, dtype: Any) -> Any:
        return kept_count(targets, ignore_index, dtype)

    def backward(self, grad: Any) -> None:
        return None


def kept_count(targets: Any, ignore_index: Any, dtype: Any) -> Any:
    """`KeptCount`'s forward on arrays. Shapes: targets (...) int -> () of `dtype`."""
    xp = backend.namespace(targets)
    count = xp.sum(xp.astype(_kept(xp, targets, ignore_index), dtype))
    # An array, not the NumPy scalar maximum gives for 0-d operands: a compiled step's buffer.
    return xp.asarray(xp.maximum(count, xp.ones((), dtype=dtype, device=targets.device)))


def _kept(xp: Any, targets: Any, ignore_index: Any) -> Any:
    if ignore_index is None:
        return xp.ones(targets.shape, dtype=xp.bool, device=targets.device)
    return targets != ignore_index


class Dropout(Function):
    """y = x * m / (1 - p) with m[i] ~ Bernoulli(1 - p), drawn from the host generator.

    dL/dx = dL/dy * m / (1 - p);  dy = dx * m / (1 - p), with forward's mask. The mask is drawn
    in forward, so a replayed step draws a new one, exactly as an eager step would.
    Shapes: x (...) -> (...).
    """

    backward_reads = ()

    def forward(self, x: Any, p: float) -> Any:
        xp = backend.namespace(x)
        keep = backend.bernoulli_mask(x.shape, 1.0 - p, like=x)
        scaled_mask = xp.astype(keep, x.dtype) * (1.0 / (1.0 - p))
        self.save_for_backward(scaled_mask)
        return x * scaled_mask

    def backward(self, grad: Any) -> Any:
        (scaled_mask,) = self.saved_tensors
        return grad * scaled_mask

    def jvp(self, tangent: Any) -> Any:
        (scaled_mask,) = self.saved_tensors
        return tangent * scaled_mask


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`.
VMAP_RULES = {Dropout: "dropout"}
