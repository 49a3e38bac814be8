"""Constants computed from integer targets and random masks: ops without a gradient to pass on.

Cross-entropy's target weights and its count of kept targets depend on the targets' values, and
dropout's mask on the host generator. Computing them inside an op's forward, rather than with
array code in `functional`, keeps a step's whole computation made of recorded ops: `ta.compile`
replays forwards, so new targets and new masks flow through a replay like any other input.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..autograd import Function


class ClassWeights(Function):
    """w[..., c] = (1 - s) * [t == c] + s / C on rows whose target is kept, 0 on ignored rows.

    The target distribution of cross-entropy with label smoothing s (PyTorch's). Targets are
    integers, so there is no gradient. Shapes: targets (...) int -> (..., C) of `dtype`.
    """

    backward_reads = ()

    def forward(
        self, targets: Any, classes: int, ignore_index: Any, smoothing: float, dtype: Any
    ) -> Any:
        xp = backend.namespace(targets)
        kept = _kept(xp, targets, ignore_index)[..., None]  # (..., 1)
        hits = targets[..., None] == xp.arange(classes, device=targets.device)  # (..., C)
        weights = xp.astype(hits & kept, dtype) * (1.0 - smoothing)
        if smoothing:
            weights = weights + xp.astype(kept, dtype) * (smoothing / classes)
        return weights

    def backward(self, grad: Any) -> None:
        return None


class KeptCount(Function):
    """n = max(1, number of targets != ignore_index): the divisor of a "mean" cross-entropy.

    At least 1, so that all-ignored targets give a loss of 0, not 0/0. No gradient.
    Shapes: targets (...) int -> () of `dtype`.
    """

    backward_reads = ()

    def forward(self, targets: Any, ignore_index: Any, dtype: Any) -> Any:
        xp = backend.namespace(targets)
        count = xp.sum(xp.astype(_kept(xp, targets, ignore_index), dtype))
        return xp.maximum(count, xp.ones((), dtype=dtype, device=targets.device))

    def backward(self, grad: Any) -> None:
        return None


def _kept(xp: Any, targets: Any, ignore_index: Any) -> Any:
    if ignore_index is None:
        return xp.ones(targets.shape, dtype=xp.bool, device=targets.device)
    return targets != ignore_index


class Dropout(Function):
    """y = x * m / (1 - p) with m[i] ~ Bernoulli(1 - p), drawn from the host generator.

    dL/dx = dL/dy * m / (1 - p). The mask is drawn in forward, so a replayed step draws a new
    one, exactly as an eager step would. Shapes: x (...) -> (...).
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
