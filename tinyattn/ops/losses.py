"""Loss primitives whose values at the edges need one node: PyTorch's answers at -inf and 0.

Composed from primitives, a negative log-likelihood ``-(log_probs * weights).sum(-1)`` is NaN
where a class is masked to -inf and the target gives it weight 0 (0 * -inf), and a binary cross
entropy's gradient ``(p - y) / (p (1 - p))`` is NaN at p = 0 or 1. PyTorch's kernels give a
finite loss and gradient there: one picks only the weighted terms, the other clamps its
denominator. Each rule is one Function here, its backward written with Tensor operations.
"""

from __future__ import annotations

from typing import Any

from ..autograd import Function
from ..backend import is_host_array, namespace, quiet_invalid
from ..kernels import sum_array

# PyTorch's clamps: each log at -100, and binary cross entropy's gradient denominator at 1e-12
# as a float32 (its constant's type, whatever the input's dtype): 9.999999960041972e-13.
LOG_FLOOR = -100.0
BCE_EPSILON = 9.999999960041972e-13


class NegLogLikelihood(Function):
    """y = -sum_c w_c * logp_c along the last axis, where a term with w_c = 0 counts 0 even at
    logp_c = -inf (PyTorch picks the weighted terms; it never forms 0 * -inf);
    dL/dlogp = -g w,  dL/dw = -g logp.

    Shapes: log_probs (..., C), weights broadcasting to it -> (...).
    """

    __slots__ = ()
    grad_reads = ((1,), (0,))  # the gradient of each input reads the other

    def forward(self, log_probs: Any, weights: Any) -> Any:
        xp = namespace(log_probs)
        with quiet_invalid():
            terms = log_probs * weights
        total = -sum_array(terms, (terms.ndim - 1,))
        # A NaN total is a NaN logit or a 0 * -inf term: only the second is recomputed. On a
        # device the test would wait for it, so there the terms are always filtered.
        if is_host_array(total) and not xp.any(xp.isnan(total)):
            return total
        terms = xp.where(weights == 0, xp.zeros_like(terms), terms)
        return -sum_array(terms, (terms.ndim - 1,))

    def backward(self, grad: Any) -> tuple:
        log_probs, weights = self.inputs
        grad = grad.unsqueeze(-1)  # (...) -> (..., 1): one value per row of C terms
        return (
            (-(grad * weights)).sum_to(log_probs.shape) if log_probs.requires_grad else None,
            (-(grad * log_probs)).sum_to(weights.shape) if weights.requires_grad else None,
        )


class BinaryCrossEntropy(Function):
    """y = -(t max(log p, -100) + (1 - t) max(log(1 - p), -100)) elementwise, PyTorch's clamps;
    dL/dp = g (p - t) / max(p (1 - p), 1e-12),  dL/dt = g (max(log(1 - p), -100) - max(log p,
    -100)). Finite at p = 0 and 1 (PyTorch's gradient there is about +-1e12).

    Shapes: p and t the same shape -> that shape.
    """

    __slots__ = ("on_host",)
    grad_reads = ((0, 1), (0,))

    def reads_host(self) -> bool:
        return not self.on_host  # the range check of device arrays waits for the device

    def forward(self, p: Any, target: Any) -> Any:
        xp = namespace(p)
        self.on_host = is_host_array(p)
        for name, values in (("input", p), ("target", target)):  # PyTorch's check and error
            if bool(xp.any((values < 0) | (values > 1))):
                raise RuntimeError(
                    f"binary_cross_entropy: all elements of {name} should be between 0 and 1"
                )
        log_p, log_q = _clamped_logs(xp, p)
        return -(target * log_p + (1.0 - target) * log_q)

    def backward(self, grad: Any) -> tuple:
        p, target = self.inputs
        grad_p = grad_t = None
        if p.requires_grad:
            grad_p = grad * (p - target) / (p * (1.0 - p)).clip(min=BCE_EPSILON)
        if target.requires_grad:  # Tensor logs, so that the rule differentiates again in p
            log_p = p.log().clip(min=LOG_FLOOR)
            log_q = (1.0 - p).log().clip(min=LOG_FLOOR)
            grad_t = grad * (log_q - log_p)
        return grad_p, grad_t


def _clamped_logs(xp: Any, p: Any) -> tuple[Any, Any]:
    """(max(log p, -100), max(log(1 - p), -100)) on arrays, without log(0)'s warning."""
    return _clamped_log(xp, p), _clamped_log(xp, 1.0 - p)


def _clamped_log(xp: Any, x: Any) -> Any:
    positive = x > 0
    logs = xp.log(xp.where(positive, x, xp.ones_like(x)))  # log(1) = 0 where x is 0
    return xp.where(positive, xp.maximum(logs, LOG_FLOOR), xp.full_like(x, LOG_FLOOR))
