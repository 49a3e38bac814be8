"""Loss primitives whose values at the edges need one node: PyTorch's answers at -inf and 0.

Composed from primitives, a negative log-likelihood ``-(log_probs * weights).sum(-1)`` is NaN
where a class is masked to -inf and the target gives it weight 0 (0 * -inf), and a binary cross
entropy's gradient ``(p - y) / (p (1 - p))`` is NaN at p = 0 or 1. PyTorch's kernels give a
finite loss and gradient there: one picks only the weighted terms, the other clamps its
denominator. Each rule is one Function here, its backward written with Tensor operations.
`CrossEntropy` is one node for speed: log-softmax through the reduction, the same array calls
as the six nodes it replaces.
"""

from __future__ import annotations

from typing import Any

from .. import kernels
from ..autograd import Function, input_as_read, is_grad_enabled
from ..backend import is_host_array, namespace, quiet_invalid
from ..kernels import sum_array
from .reductions import summed
from .softmax import SavedLogSoftmax, log_softmax_array
from .targets import kept_count, target_rows

# PyTorch's clamps: each log at -100, and binary cross entropy's gradient denominator at 1e-12
# as a float32 (its constant's type, whatever the input's dtype): 9.999999960041972e-13.
LOG_FLOOR = -100.0
BCE_EPSILON = 9.999999960041972e-13


class NegLogLikelihood(Function):
    """y = -sum_c w_c * logp_c along the last axis, where a term with w_c = 0 counts 0 even at
    logp_c = -inf (PyTorch picks the weighted terms; it never forms 0 * -inf);
    dL/dlogp = -g w,  dL/dw = -g logp;  dy = -sum_c (w_c dlogp_c + dw_c logp_c).

    Shapes: log_probs (..., C), weights broadcasting to it -> (...).
    """

    __slots__ = ()
    grad_reads = ((1,), (0,))  # the gradient of each input reads the other

    def forward(self, log_probs: Any, weights: Any) -> Any:
        return nll_array(log_probs, weights)

    def backward(self, grad: Any) -> tuple:
        log_probs, weights = self.inputs
        grad = grad.unsqueeze(-1)  # (...) -> (..., 1): one value per row of C terms
        return (
            (-(grad * weights)).sum_to(log_probs.shape) if log_probs.requires_grad else None,
            (-(grad * log_probs)).sum_to(weights.shape) if weights.requires_grad else None,
        )

    def jvp(self, tangent_log_probs: Any, tangent_weights: Any) -> Any:
        log_probs, weights = self.inputs
        terms = None
        if tangent_log_probs is not None:
            terms = weights * tangent_log_probs
        if tangent_weights is not None:
            weighted = tangent_weights * log_probs
            terms = weighted if terms is None else terms + weighted
        return -terms.sum(axis=-1)


def nll_array(log_probs: Any, weights: Any) -> Any:
    """`NegLogLikelihood`'s forward on arrays. Shapes: (..., C), weights -> (...)."""
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


class CrossEntropy(Function):
    """Cross entropy of logits against class-index targets, as one node:
    log p = log_softmax(x) along the last axis; w = the targets' rows (`ClassWeights`: the
    one-hot of t smoothed by s, a zero row for an ignored target); l = -sum_c w_c log p_c per
    target; then "none" gives l, "sum" sum(l), "mean" sum(l) / n, n = max(1, kept targets).
    dL/dx = G - p * sum_c G along the last axis, with G = -g w (g / n for "mean");
    dl = -sum_c w_c (dx_c - sum_k p_k dx_k) per target, reduced as l is.

    Composed, this is six nodes (log-softmax, target rows, negative log-likelihood, sum, count,
    division) whose four rules make a dozen Tensor ops. Here one forward makes the same array
    calls in the same order, and the rule (`kernels.cross_entropy_grad` on arrays) the same
    as the four rules: loss and gradient equal the composition's bit for bit. The rule reads
    what forward saved, never x, so x may be changed in place afterwards (as in PyTorch); under
    ``create_graph`` it reaches x through `SavedLogSoftmax`, log-softmax's own rule.
    Shapes: x (..., C) float, targets (...) int -> () ((...) for "none").
    """

    __slots__ = ("on_host", "reduction")
    backward_reads = ()  # only the saved arrays, which no one else holds

    def reads_host(self) -> bool:
        return not self.on_host  # the range check of device targets waits for the device

    def forward(
        self,
        x: Any,
        targets: Any,
        ignore_index: Any = -100,
        smoothing: float = 0.0,
        reduction: str = "mean",
    ) -> Any:
        self.on_host, self.reduction = is_host_array(targets), reduction
        weights = target_rows(targets, x.shape[-1], ignore_index, smoothing, x.dtype)
        log_probs = log_softmax_array(x, -1)
        per_target = nll_array(log_probs, weights)  # 0 * -inf counts 0, as PyTorch
        if reduction == "none":
            self.save_for_backward(log_probs, weights)
            return per_target
        total = summed(per_target, tuple(range(per_target.ndim)))
        if reduction == "sum":
            self.save_for_backward(log_probs, weights)
            return total
        count = kept_count(targets, ignore_index, x.dtype)
        self.save_for_backward(log_probs, weights, count)
        total /= count  # in place: a 0-d array stays one (a quotient of two is a scalar)
        return total

    def backward_arrays(self, g: Any) -> tuple | None:
        if not self.inputs[0].requires_grad:
            return (None, None)
        log_probs, weights, *count = self.saved_arrays
        count = count[0] if count else None
        each = self.reduction == "none"
        grads = kernels.cross_entropy_grad(g, log_probs, weights, count, each)
        return None if grads is None else (*grads, None)

    def backward(self, grad: Any) -> tuple:
        if not self.inputs[0].requires_grad:
            return (None, None)
        log_probs, weights, *count = self.saved_tensors
        if is_grad_enabled():  # create_graph: log p must carry its dependence on x
            x = input_as_read(self, 0)  # not x's values: an in-place op may have moved it on
            log_probs = SavedLogSoftmax.apply(x, values=log_probs.array, axis=-1)
        if count:
            grad = grad / count[0]
        elif self.reduction == "none":
            grad = grad.unsqueeze(-1)  # one value per row of C terms
        terms = -(grad * weights)
        return (terms - log_probs.exp() * terms.sum(axis=-1, keepdims=True), None)

    def jvp(self, tangent_x: Any, tangent_targets: Any = None) -> Any:
        log_probs, weights, *count = self.saved_tensors
        # log p as a node of x (its values kept): a tangent of this tangent, or a gradient
        # through it, reaches x through log-softmax's own rules.
        log_probs = SavedLogSoftmax.apply(self.inputs[0], values=log_probs.array, axis=-1)
        tangent_log_probs = tangent_x - (log_probs.exp() * tangent_x).sum(axis=-1, keepdims=True)
        per_target = -(weights * tangent_log_probs).sum(axis=-1)
        if self.reduction == "none":
            return per_target
        total = per_target.sum()
        return total / count[0] if count else total


class BinaryCrossEntropy(Function):
    """y = -(t max(log p, -100) + (1 - t) max(log(1 - p), -100)) elementwise, PyTorch's clamps;
    dL/dp = g (p - t) / max(p (1 - p), 1e-12),  dL/dt = g (max(log(1 - p), -100) - max(log p,
    -100));  dy = dp (p - t) / max(p (1 - p), 1e-12) + dt (max(log(1 - p), -100) - max(log p,
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

    def jvp(self, tangent_p: Any, tangent_target: Any) -> Any:
        p, target = self.inputs
        total = None
        if tangent_p is not None:
            total = tangent_p * (p - target) / (p * (1.0 - p)).clip(min=BCE_EPSILON)
        if tangent_target is not None:
            log_p = p.log().clip(min=LOG_FLOOR)
            log_q = (1.0 - p).log().clip(min=LOG_FLOOR)
            term = tangent_target * (log_q - log_p)
            total = term if total is None else total + term
        return total


def _clamped_logs(xp: Any, p: Any) -> tuple[Any, Any]:
    """(max(log p, -100), max(log(1 - p), -100)) on arrays, without log(0)'s warning."""
    return _clamped_log(xp, p), _clamped_log(xp, 1.0 - p)


def _clamped_log(xp: Any, x: Any) -> Any:
    positive = x > 0
    logs = xp.log(xp.where(positive, x, xp.ones_like(x)))  # log(1) = 0 where x is 0
    return xp.where(positive, xp.maximum(logs, LOG_FLOOR), xp.full_like(x, LOG_FLOOR))


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`.
# NegLogLikelihood sums the last axis of a broadcast product: the batch dim leads, as in an
# elementwise op.
VMAP_RULES = {CrossEntropy: "cross_entropy", NegLogLikelihood: "elementwise"}
