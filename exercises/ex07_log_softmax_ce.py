"""Exercise 7: the backward of log-softmax, and the gradient of cross-entropy.

The math, along one row (y = log_softmax(x) = x - log(sum_j exp(x_j)), p = softmax(x) = exp(y)):

    dy_i/dx_j = delta_ij - p_j
    dL/dx_j = sum_i g_i (delta_ij - p_j) = g_j - p_j * sum_i g_i
    so  dL/dx = g - exp(y) * sum(g)      (the sum along the axis, kept as a size-1 axis)

Cross-entropy of one row with target class t is L = -y_t, so g = -onehot(t) and sum(g) = -1:
    dL/dx = p - onehot(t)
and the mean over N rows divides that by N: dL/dlogits = (softmax(logits) - onehot) / N.

Hint: ``self.output`` is y. For ``cross_entropy_grad`` use ``one_hot`` below and your own
softmax (``x.exp()`` of a log_softmax, or exercise 6); no autograd needed.

Grade it: ``python -m pytest exercises -k ex07``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tinyattn as ta
from tinyattn import Function, Tensor
from tinyattn.backend import namespace


class LogSoftmax(Function):
    """y = x - max - log(sum(exp(x - max))) along `axis`;  dL/dx = g - exp(y) * sum(g)."""

    def forward(self, x: Any, axis: int = -1) -> Any:
        self.axis = axis
        xp = namespace(x)
        shifted = x - xp.max(x, axis=axis, keepdims=True)  # the shift avoids overflow
        return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))

    def backward(self, grad: Tensor) -> Tensor:
        raise NotImplementedError("exercise 7: write this rule (see the hint above)")


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    return LogSoftmax.apply(x, axis=axis)


def one_hot(targets: Sequence[int], classes: int) -> Tensor:
    """(N, classes) float64 rows with a 1 at each target's class."""
    return ta.tensor([[1.0 if c == t else 0.0 for c in range(classes)] for t in targets])


def cross_entropy_grad(logits: Tensor, targets: Sequence[int]) -> Tensor:
    """dL/dlogits of L = mean over rows of -log_softmax(logits)[row, target], in closed form.

    Shapes: logits (N, C), targets N class indices -> (N, C).
    """
    raise NotImplementedError("exercise 7: write this rule (see the hint above)")
