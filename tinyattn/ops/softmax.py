"""The softmax family: softmax and log-softmax along one axis, each one fused node.

Composed from primitives, softmax is a max, a subtraction, an exp, a sum and a division (five
nodes); fused, it is one node whose backward needs only its output. Both shift every row by its
max first (exp of a large logit would overflow) and give fully masked rows (all -inf) a finite
answer: softmax 0, log-softmax -inf, gradient 0 or g, never NaN. A row holding NaN is NaN.
float16 rows are computed in float32 and rounded once, as PyTorch's CPU kernels do.
"""

from __future__ import annotations

from typing import Any

from .. import kernels
from ..autograd import Function
from ..backend import is_half, namespace


class Softmax(Function):
    """y = exp(x - m) / sum(exp(x - m)) along `axis` (m = max, a constant: y does not depend on it);
    dL/dx = y * (g - sum(g * y));  dy = y * (dx - sum(dx * y)) (the same map: J is symmetric).
    A row of all -inf gives y = 0 (and gradient and tangent 0), not NaN.

    Shapes: x (..., N) -> (..., N) (any axis).
    """

    __slots__ = ("axis",)

    def forward(self, x: Any, axis: int = -1) -> Any:
        self.axis = axis
        xp = namespace(x)
        if x.size == 0:  # no row to normalise (an empty row has no max)
            return xp.zeros_like(x)
        if is_half(x):
            return xp.astype(_softmax(xp, xp.astype(x, xp.float32), axis), x.dtype)
        return _softmax(xp, x, axis)

    def backward(self, grad: Any) -> Any:
        y = self.output  # using the output keeps higher-order gradients exact
        return y * (grad - (grad * y).sum(axis=self.axis, keepdims=True))

    def backward_arrays(self, g: Any) -> tuple | None:
        return kernels.softmax_grad(g, self.output.array, self.axis)

    def jvp(self, tangent: Any) -> Any:
        y = self.output
        return y * (tangent - (tangent * y).sum(axis=self.axis, keepdims=True))


class LogSoftmax(Function):
    """y = x - m - log(sum(exp(x - m))) along `axis`;  dL/dx = g - exp(y) * sum(g);
    dy = dx - sum(exp(y) * dx).

    A row of all -inf gives y = -inf (the log of probability 0), gradient g and tangent dx,
    never NaN.
    Shapes: x (..., N) -> (..., N) (any axis).
    """

    __slots__ = ("axis",)

    def forward(self, x: Any, axis: int = -1) -> Any:
        self.axis = axis
        return log_softmax_array(x, axis)

    def backward(self, grad: Any) -> Any:
        return grad - self.output.exp() * grad.sum(axis=self.axis, keepdims=True)

    def backward_arrays(self, g: Any) -> tuple | None:
        return kernels.log_softmax_grad(g, self.output.array, self.axis)

    def jvp(self, tangent: Any) -> Any:
        return tangent - (self.output.exp() * tangent).sum(axis=self.axis, keepdims=True)


def _softmax(xp: Any, x: Any, axis: int) -> Any:
    """Softmax's forward on arrays: shift by the row max, exponentiate, normalise."""
    exps = xp.exp(x - kernels.row_shift(xp, x, axis))
    total = kernels.sum_array(exps, (axis % x.ndim,), keepdims=True)
    # total is 0 only on an all -inf row, where every exp is 0: 0 / 1 = 0. A NaN total (a row
    # holding NaN or +inf) divides the whole row, which then is NaN.
    exps /= xp.where(total == 0, xp.ones_like(total), total)  # in place: exps is ours
    return exps


class SavedLogSoftmax(LogSoftmax):
    """y = log_softmax(x) along `axis`, given as `values` (computed by the caller from x's
    values at the time); dL/dx and dy as `LogSoftmax`.

    A fused op that computed log-softmax inside its forward (`ops.CrossEntropy`) builds this
    node under ``create_graph``, so that its rule's Tensor form depends on x through
    log-softmax's own rule. Like PyTorch's, that rule reads the output, never x: x may have
    been changed in place since. Shapes: x (..., N), values (..., N) -> (..., N).
    """

    __slots__ = ()
    backward_reads = ("output",)

    def forward(self, x: Any, values: Any = None, axis: int = -1) -> Any:
        self.axis = axis
        return values


def log_softmax_array(x: Any, axis: int) -> Any:
    """`LogSoftmax`'s forward on an array: float16 computed in float32 and rounded once.
    Shapes: x (..., N) -> (..., N) (any axis)."""
    xp = namespace(x)
    if x.size == 0:
        return xp.zeros_like(x)
    if is_half(x):
        return xp.astype(_log_softmax(xp, xp.astype(x, xp.float32), axis), x.dtype)
    return _log_softmax(xp, x, axis)


def _log_softmax(xp: Any, x: Any, axis: int) -> Any:
    """LogSoftmax's forward on arrays: the shifted row minus the log of its exponentials' sum."""
    shifted = x - kernels.row_shift(xp, x, axis)
    total = kernels.sum_array(xp.exp(shifted), (axis % x.ndim,), keepdims=True)
    shifted -= xp.log(xp.where(total == 0, xp.ones_like(total), total))  # in place: ours
    return shifted


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`.
VMAP_RULES = dict.fromkeys((Softmax, LogSoftmax), "along_axes")
