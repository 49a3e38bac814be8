"""nn.functional: the one functional API, PyTorch's ``torch.nn.functional`` names, signatures
and meanings, so ``import tinyattn.nn.functional as F`` ports a program unchanged.

The core functions (softmax, log_softmax, linear, embedding, layer_norm, dropout, relu, gelu,
scaled_dot_product_attention, causal_mask, erf) live in `tinyattn.functional`, the layer below,
and are re-exported here as the same objects; this module adds the losses, ``pad``,
``one_hot`` and PyTorch's other activations. Everything here is a composition of Tensor ops
and functional ops, so gradients (and higher-order gradients) come from their rules. Meanings
are PyTorch's: class axis 1 for cross_entropy and nll_loss on (N, C, d1, ...) inputs, a bool
``attn_mask`` is True where a query MAY attend (a float one is added to the scores), ``pad``
lists (left, right) pairs from the last axis backwards.
"""

# PyTorch's parameter names (input, ...) are kept so keyword callers port unchanged.
# ruff: noqa: A001, A002

from __future__ import annotations

import math
import warnings
from typing import Any

from .. import backend
from ..creation import tensor
from ..errors import TinyattnError
from ..functional import (  # the core functions, re-exported as the same objects
    BlockwiseAttention,  # noqa: F401
    Erf,  # noqa: F401
    LogSoftmax,  # noqa: F401
    Softmax,  # noqa: F401
    causal_mask,  # noqa: F401
    dropout,  # noqa: F401
    embedding,  # noqa: F401
    erf,  # noqa: F401
    gelu,  # noqa: F401
    layer_norm,  # noqa: F401
    linear,  # noqa: F401
    log_softmax,
    relu,  # noqa: F401
    scaled_dot_product_attention,  # noqa: F401
    softmax,
)
from ..functional import __all__ as _core_all
from ..methods.common import where
from ..methods.missing import missing_attribute
from ..ops import BinaryCrossEntropy, CrossEntropy, NegLogLikelihood, bad_targets
from ..ops.computed import computed
from ..tensor import Tensor
from ..tensor_functions import cosine_similarity  # noqa: F401  (re-exported: F.cosine_similarity)
from ..tensor_functions import pad as tensor_pad

REDUCTIONS = ("none", "mean", "sum")


# ------------------------------------------------------------------------------------ helpers
def _as_tensor(op: str, x: Any, like: Tensor | None = None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    try:
        return tensor(x, device=None if like is None else like.device)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{op}: expected a Tensor, got {type(x).__name__} ({exc})") from None


def _check_reduction(op: str, reduction: str, allowed: tuple = REDUCTIONS) -> None:
    if reduction not in allowed:
        raise TinyattnError(f"{op}: reduction must be one of {allowed}, got {reduction!r}")


def _no_legacy(op: str, size_average: Any, reduce: Any) -> None:
    """PyTorch's deprecated size_average=/reduce= are refused rather than ignored."""
    if size_average is not None or reduce is not None:
        raise NotImplementedError(
            f"{op}: size_average= and reduce= (deprecated in PyTorch) are not supported; use "
            "reduction="
        )


def _reduce(op: str, loss: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.mean()


def _classes_last(x: Tensor) -> Tensor:
    """PyTorch's (N, C, d1, ...) to tinyattn's (N, d1, ..., C); (N, C) and (C,) are unchanged."""
    if x.ndim < 3:
        return x
    return x.permute(0, *range(2, x.ndim), 1)


def _integer_targets(op: str, target: Any, input: Tensor, ignore_index: int) -> Tensor:
    """Class-index targets as an integer Tensor on the input's device, checked against C."""
    target = _as_tensor(op, target, input)
    xp = backend.namespace(target.array)
    if backend.is_floating(xp, target.dtype) or backend.dtype_name(target.dtype) == "bool":
        raise TypeError(
            f"{op}: class-index targets must be integers, got dtype "
            f"{backend.dtype_name(target.dtype)}"
        )
    if target.device != input.device:
        raise RuntimeError(f"{op}: input is on '{input.device}' but target is on '{target.device}'")
    expected = input.shape[:1] + input.shape[2:] if input.ndim >= 2 else ()
    if target.shape != expected:
        raise TinyattnError(
            f"{op}: input of shape {input.shape} needs target of shape {expected} "
            f"(input is (N, C, d1, ...) with classes on axis 1, or (C,)), got {target.shape}"
        )
    classes = input.shape[1] if input.ndim >= 2 else input.shape[0]
    _check_classes(op, target.array, classes, ignore_index)
    return target


def _check_classes(op: str, values: Any, classes: int, ignore_index: int) -> None:
    """IndexError (PyTorch's type) naming the first target that is neither a class nor ignored."""
    xp = backend.namespace(values)
    flat_bad = xp.reshape(bad_targets(xp, values, classes, ignore_index), (-1,))
    if flat_bad.shape[0] and backend.meta.has_values(values) and bool(xp.any(flat_bad)):
        first = int(xp.argmax(xp.astype(flat_bad, xp.int32)))
        value = int(xp.reshape(values, (-1,))[first])
        count = int(xp.sum(xp.astype(flat_bad, xp.int32)))
        raise IndexError(
            f"{op}: target value {value} (flat position {first}) is out of range for "
            f"{classes} classes (expected 0..{classes - 1} or ignore_index={ignore_index}); "
            f"{count} target(s) invalid"
        )


# ---------------------------------------------------------------------------------- activations
def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """x * sigmoid(x) (also called swish); dL/dx = s + x s (1 - s)."""
    return input * input.sigmoid()


def sigmoid(input: Tensor) -> Tensor:
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:
    return input.tanh()


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x where x > 0, else negative_slope * x (slope also the gradient at 0, as PyTorch)."""
    return where(input > 0, input, input * negative_slope)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, else alpha * (exp(x) - 1)."""
    return where(input > 0, input, (input.clip(max=0.0).exp() - 1.0) * alpha)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch's rule)."""
    scaled = input * beta
    return where(scaled > threshold, input, _softplus(scaled) * (1.0 / beta))


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """min(max(x, 0), 6);  dL/dx = g where 0 < x < 6 (0 at the kinks, as PyTorch)."""
    return hardtanh(input, 0.0, 6.0)


def hardtanh(
    input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> Tensor:
    """x clamped into [min_val, max_val];  dL/dx = g strictly inside (PyTorch's rule)."""
    inside = (input > min_val) & (input < max_val)
    return where(inside, input, input.clip(min_val, max_val).detach())


def softsign(input: Tensor) -> Tensor:
    """x / (1 + |x|);  dL/dx = g / (1 + |x|)^2."""
    return input / (input.abs() + 1.0)


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """scale * elu(x, alpha) with the self-normalising constants of Klambauer et al."""
    return elu(input, _SELU_ALPHA) * _SELU_SCALE


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """x * tanh(softplus(x)) (softplus with PyTorch's threshold of 20)."""
    return input * softplus(input).tanh()


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """relu6(x + 3) / 6;  dL/dx = g / 6 where -3 < x < 3."""
    return relu6(input + 3.0) * (1.0 / 6.0)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """x * hardsigmoid(x);  dL/dx = g (2x + 3) / 6 where -3 < x < 3, 0 below, g above."""
    return input * hardsigmoid(input)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """a * sigmoid(b), a and b the two halves of x along `dim` (its size must be even).
    Shapes: (..., 2n at dim, ...) -> (..., n, ...)."""
    size = input.shape[dim] if -input.ndim <= dim < input.ndim else None
    if size is None or size % 2:
        raise TinyattnError(
            f"glu: dim {dim} of shape {input.shape} must exist and have an even size"
        )
    first, second = input.chunk(2, dim)
    return first * second.sigmoid()


def softmin(
    input: Tensor, dim: int | None = None, dtype: Any = None, *, axis: int | None = None
) -> Tensor:
    """softmax(-x) along `dim` (required, as for softmax)."""
    return softmax(-input, dim, dtype, axis=axis)


def smooth_l1_loss(
    input: Tensor,
    target: Any,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    beta: float = 1.0,
) -> Tensor:
    """0.5 d^2 / beta where d = |input - target| < beta, else d - 0.5 beta (|d| for beta 0)."""
    _no_legacy("smooth_l1_loss", size_average, reduce)
    _check_reduction("smooth_l1_loss", reduction)
    difference = input - _as_tensor("smooth_l1_loss", target, input)
    return _reduce("smooth_l1_loss", _smooth_l1(difference, beta), reduction)


def huber_loss(input: Tensor, target: Any, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """0.5 d^2 where d = |input - target| < delta, else delta (d - 0.5 delta): delta times
    the smooth L1 loss with beta = delta."""
    _check_reduction("huber_loss", reduction)
    difference = input - _as_tensor("huber_loss", target, input)
    return _reduce("huber_loss", _smooth_l1(difference, delta) * delta, reduction)


def _smooth_l1(difference: Tensor, beta: float) -> Tensor:
    """Elementwise 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (|d| for beta 0).
    The square is of d itself, not of |d|: the curvature at d = 0 stays 1 / beta."""
    distance = difference.abs()
    if beta == 0:
        return distance
    square = difference * difference * (0.5 / beta)
    return where(distance < beta, square, distance - 0.5 * beta)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:  # noqa: A002
    """x / max(||x||_p, eps) along `dim` (PyTorch's F.normalize), for any p `Tensor.norm`
    takes (a float, inf, -inf).

    Shapes: any -> the same."""
    if not isinstance(input, Tensor):
        raise TypeError(f"normalize: expected a Tensor, got {type(input).__name__}")
    if p != "fro" and (not isinstance(p, int | float) or isinstance(p, bool)):
        raise TinyattnError(f"normalize: p={p!r} is not supported; use a number, inf or -inf")
    return input / input.norm(p=p, dim=dim, keepdim=True).clamp_min(eps)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """x where x > 0, else alpha * (exp(x / alpha) - 1) (PyTorch's CELU); the exponent is
    clipped at 0 so the branch not taken cannot overflow.  Shapes: any -> the same."""
    if alpha == 0:
        raise RuntimeError("celu: ZeroDivisionError (alpha must not be 0)")
    return where(input > 0, input, (input.clip(max=0.0) / alpha).expm1() * alpha)


def _softplus(z: Tensor) -> Tensor:
    """log(1 + e^z), no overflow for large z, no threshold: log1p(e^z) for z <= 0 and
    z + log1p(e^-z) above, each branch on its own side of 0 (clipped), so its exp never
    overflows and the unused branch stays finite. dL/dz = g * sigmoid(z), 1/2 at 0.

    Not max(z, 0) + log1p(e^-|z|): that has the same values, but its two kinks at 0 add their
    subgradients, 1 + 0, so at exactly z = 0 (zero logits, a zero-initialised layer) the
    gradient came out 1 instead of 1/2."""
    below, above = z.clip(max=0.0), z.clip(min=0.0)
    return where(z > 0, above + (-above).exp().log1p(), below.exp().log1p())


def logsigmoid(input: Tensor) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), computed without overflow."""
    return -_softplus(-input)


def one_hot(tensor: Any, num_classes: int = -1) -> Tensor:
    """int64 one-hot vectors: out[..., c] = 1 where tensor == c. Shapes: (...) -> (..., C)."""
    tensor = _as_tensor("one_hot", tensor)
    xp = backend.namespace(tensor.array)
    if backend.is_floating(xp, tensor.dtype) or backend.dtype_name(tensor.dtype) == "bool":
        raise TypeError(
            f"one_hot: expected an integer tensor, got dtype {backend.dtype_name(tensor.dtype)}"
        )
    data = tensor.array
    empty = 0 in tensor.shape
    checked = not empty and backend.meta.has_values(data)  # a meta tensor has none to check
    # RuntimeError for class values out of range, as PyTorch.
    if checked and bool(xp.any(data < 0)):
        raise RuntimeError("one_hot: class values must be non-negative")
    if num_classes == -1:
        if empty:
            raise TinyattnError("one_hot: cannot infer num_classes of an empty tensor; pass it")
        num_classes = int(xp.max(data)) + 1
    elif checked and bool(xp.any(data >= num_classes)):
        raise RuntimeError(f"one_hot: class values must be smaller than num_classes={num_classes}")
    return computed(_one_hot_of, tensor, num_classes=num_classes, dtype="int64")


def _picked(xp: Any, target: Any, classes: int, ignore: int, dtype: str) -> Any:
    """(..., C) with 1 at each target's class (0 on an ignored target), in the loss's dtype."""
    picks = target[..., None] == xp.arange(classes, dtype=target.dtype, device=target.device)
    return xp.astype(picks & (target != ignore)[..., None], backend.dtype_of_name(xp, dtype))


def _one_hot_of(xp: Any, data: Any, num_classes: int, dtype: str) -> Any:
    """(..., C) with 1 where data == c: array code run as one op (a compiled step replays it)."""
    hits = data[..., None] == xp.arange(num_classes, dtype=data.dtype, device=data.device)
    return xp.astype(hits, backend.dtype_of_name(xp, dtype))


# ---------------------------------------------------------------------------------------- losses
def cross_entropy(
    input: Tensor,
    target: Any,
    weight: Tensor | None = None,
    size_average: Any = None,
    ignore_index: int = -100,
    reduce: Any = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """PyTorch's cross entropy: input (N, C), (N, C, d1, ...) or (C,) logits with classes on
    axis 1, target class indices (N, d1, ...) or class probabilities shaped like input.

    loss_i = (1 - s) * (-log p[i, t_i]) + s * mean_c(-log p[i, c]) with s = label_smoothing;
    "mean" averages over the targets not equal to ignore_index (0 when all are ignored; PyTorch
    gives NaN). With a `weight` per class, each term is weighted by its class (w[t_i], w_c) and
    "mean" divides by the sum of w[t_i] over the kept targets, as PyTorch.
    dL/dlogits_i = p_i - ((1 - s) * onehot(t_i) + s / C), times the reduction's weight.
    Shapes: input (N, C, d1, ...), target (N, d1, ...) integer -> () or (N, d1, ...) for "none".
    """
    op = "cross_entropy"
    _no_legacy(op, size_average, reduce)
    _check_reduction(op, reduction)
    if not isinstance(input, Tensor):
        raise TypeError(f"{op}: input must be a Tensor of logits, got {type(input).__name__}")
    backend.check_floating(op, input.array)
    if input.ndim < 1:
        raise TinyattnError(f"{op}: input must have a class axis, got a 0-d tensor")
    if not 0.0 <= label_smoothing <= 1.0:
        raise TinyattnError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing}")
    if weight is not None:
        weight = _class_weights(op, weight, input)
    if isinstance(target, Tensor) and backend.is_floating(
        backend.namespace(target.array), target.dtype
    ):
        return _soft_cross_entropy(input, target, reduction, label_smoothing, weight)
    target = _integer_targets(op, target, input, ignore_index)
    logits = _classes_last(input)  # (N, d1, ..., C)
    if weight is not None:
        log_probs = log_softmax(logits, dim=-1)
        return _weighted_nll(log_probs, target, weight, ignore_index, reduction, label_smoothing)
    # One node, log-softmax to the reduction: its target rows are computed from the targets
    # in its forward, so a compiled step computes them again from each batch.
    return CrossEntropy.apply(
        logits,
        target,
        ignore_index=ignore_index,
        smoothing=label_smoothing,
        reduction=reduction,
    )


def _class_weights(op: str, weight: Any, input: Tensor) -> Tensor:
    """A 1-D float tensor of one weight per class, on the input's device, checked."""
    weight = _as_tensor(op, weight, input)
    classes = input.shape[1] if input.ndim >= 2 else input.shape[0]
    if weight.shape != (classes,):
        raise TinyattnError(
            f"{op}: weight must have one entry per class, shape ({classes},), got {weight.shape}"
        )
    if weight.device != input.device:
        raise RuntimeError(f"{op}: input is on '{input.device}' but weight is on '{weight.device}'")
    return weight.to(input.dtype)


def _weighted_nll(
    logp: Tensor,
    target: Tensor,
    weight: Tensor,
    ignore_index: int,
    reduction: str,
    label_smoothing: float = 0.0,
) -> Tensor:
    """PyTorch's class-weighted loss over log-probabilities logp (..., C), classes last:
    loss_i = (1 - s) w[t_i] (-logp[i, t_i]) + (s / C) sum_c w_c (-logp[i, c]), 0 for an ignored
    target; "mean" divides the sum by sum_i w[t_i] over the kept targets, as PyTorch, whatever
    its sign (0 / 0 = NaN for zero weights), except that all targets ignored give 0 (PyTorch:
    NaN)."""
    classes, dtype = logp.shape[-1], backend.dtype_name(logp.dtype)
    picks = computed(_picked, target, classes=classes, ignore=ignore_index, dtype=dtype)
    weighted = picks * weight  # w[t_i] at the target's class, zeros on ignored rows
    loss = NegLogLikelihood.apply(logp, weighted)
    if label_smoothing:
        kept = picks.sum(axis=-1, keepdims=True)  # 1 for a kept target, 0 for an ignored one
        smooth = NegLogLikelihood.apply(logp, kept * weight)
        loss = loss * (1.0 - label_smoothing) + smooth * (label_smoothing / classes)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    any_kept = (target != ignore_index).any()
    return loss.sum() / where(any_kept, weighted.sum(), 1.0)


def _soft_cross_entropy(
    input: Tensor,
    target: Tensor,
    reduction: str,
    label_smoothing: float,
    weight: Tensor | None = None,
) -> Tensor:
    """Cross entropy against class probabilities: -sum_c w_c q_c log p_c (w = 1 without
    weights), q smoothed toward 1/C; "mean" divides by the number of targets, as PyTorch."""
    if target.shape != input.shape:
        raise TinyattnError(
            f"cross_entropy: probability targets must have the input's shape {input.shape}, "
            f"got {target.shape}"
        )
    dim = 1 if input.ndim >= 2 else 0
    classes = input.shape[dim]
    if label_smoothing:
        target = target * (1.0 - label_smoothing) + label_smoothing / classes
    if weight is not None:  # one weight per class, along the class axis
        target = target * weight.reshape((classes,) + (1,) * (input.ndim - 1 - dim))
    loss = -(log_softmax(input, dim=dim) * target).sum(axis=dim)
    if reduction == "mean" and input.ndim >= 2:
        return loss.sum() * (1.0 / math.prod(loss.shape))  # PyTorch: divide by N * d1 * ...
    return _reduce("cross_entropy", loss, reduction)


def nll_loss(
    input: Tensor,
    target: Any,
    weight: Tensor | None = None,
    size_average: Any = None,
    ignore_index: int = -100,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """Negative log-likelihood of log-probabilities: loss_i = -w[t_i] input[i, t_i] (w = 1
    without `weight`); input (N, C), (N, C, d1, ...) or (C,); "mean" divides by the sum of
    w[t_i] over the targets not equal to ignore_index."""
    op = "nll_loss"
    _no_legacy(op, size_average, reduce)
    _check_reduction(op, reduction)
    if not isinstance(input, Tensor) or input.ndim < 1:
        raise TinyattnError(f"{op}: input must be a Tensor with a class axis")
    target = _integer_targets(op, target, input, ignore_index)
    logp = _classes_last(input)
    if weight is not None:
        weight = _class_weights(op, weight, input)
        return _weighted_nll(logp, target, weight, ignore_index, reduction)
    dtype = backend.dtype_name(logp.dtype)
    picks = computed(_picked, target, classes=logp.shape[-1], ignore=ignore_index, dtype=dtype)
    loss = NegLogLikelihood.apply(logp, picks)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    # The count of kept targets as a tensor (not a Python number): a compiled step counts anew.
    count = (target != ignore_index).sum().clip(1, None)._cast(dtype)
    return loss.sum() / count


def mse_loss(
    input: Tensor,
    target: Any,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """(input - target)^2, reduced; differing shapes broadcast with a warning, as in PyTorch."""
    _no_legacy("mse_loss", size_average, reduce)
    _check_reduction("mse_loss", reduction)
    target = _as_tensor("mse_loss", target, input)
    if target.shape != input.shape:
        warnings.warn(
            f"mse_loss: target shape {target.shape} differs from input shape {input.shape}; "
            "they broadcast, which is rarely intended",
            UserWarning,
            stacklevel=2,
        )
    diff = input - target
    return _reduce("mse_loss", diff * diff, reduction)


def l1_loss(
    input: Tensor,
    target: Any,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """|input - target|, reduced (the gradient at 0 is 0, as PyTorch's sign)."""
    _no_legacy("l1_loss", size_average, reduce)
    _check_reduction("l1_loss", reduction)
    target = _as_tensor("l1_loss", target, input)
    return _reduce("l1_loss", (input - target).abs(), reduction)


def binary_cross_entropy(
    input: Tensor,
    target: Any,
    weight: Tensor | None = None,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """-(y log p + (1 - y) log(1 - p)) for probabilities p; each log is clamped at -100, and
    the gradient's denominator p (1 - p) at 1e-12, as in PyTorch, so p = 0 or 1 gives a finite
    loss and gradient (ops.BinaryCrossEntropy)."""
    op = "binary_cross_entropy"
    _no_legacy(op, size_average, reduce)
    _check_reduction(op, reduction)
    target = _as_tensor(op, target, input)
    if target.shape != input.shape:
        raise TinyattnError(
            f"{op}: target shape {target.shape} must equal input shape {input.shape}"
        )
    loss = BinaryCrossEntropy.apply(input, target)
    if weight is not None:
        loss = loss * weight
    return _reduce(op, loss, reduction)


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Any,
    weight: Tensor | None = None,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """binary_cross_entropy(sigmoid(x), y) computed stably:
    (1 - y) x + (1 + (w_pos - 1) y) softplus(-x)."""
    op = "binary_cross_entropy_with_logits"
    _no_legacy(op, size_average, reduce)
    _check_reduction(op, reduction)
    target = _as_tensor(op, target, input)
    if target.shape != input.shape:
        raise TinyattnError(
            f"{op}: target shape {target.shape} must equal input shape {input.shape}"
        )
    log_weight = 1.0 if pos_weight is None else (pos_weight - 1.0) * target + 1.0
    loss = (1.0 - target) * input + log_weight * _softplus(-input)
    if weight is not None:
        loss = loss * weight
    return _reduce(op, loss, reduction)


def kl_div(
    input: Tensor,
    target: Any,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    """KL(target || exp(input)) pointwise, PyTorch's formula: input holds log-probabilities;
    target * (log target - input), 0 where target == 0 (or exp(t) * (t - input) with
    log_target). "batchmean" divides the sum by the batch size input.shape[0]."""
    op = "kl_div"
    _no_legacy(op, size_average, reduce)
    _check_reduction(op, reduction, REDUCTIONS + ("batchmean",))
    target = _as_tensor(op, target, input)
    if log_target:
        pointwise = target.exp() * (target - input)
    else:
        positive = target > 0
        safe = where(positive, target, 1.0)  # log(1) = 0: no -inf * 0 at target == 0
        pointwise = where(positive, target * safe.log(), 0.0) - target * input
    if reduction == "batchmean":
        return pointwise.sum() * (1.0 / input.shape[0]) if input.ndim else pointwise.sum()
    return _reduce(op, pointwise, reduction)


# ----------------------------------------------------------------------------------------- pad
def pad(input: Tensor, pad: Any, mode: str = "constant", value: float | None = None) -> Tensor:
    """Padding, PyTorch's order: pad = (left, right) of the last axis, then of the one before,
    ...; negative amounts crop. Gradients flow to the kept elements; the result is always a
    new tensor, as PyTorch's. Modes "reflect", "replicate" and "circular" are `tinyattn.pad`'s,
    with PyTorch's rules on dims and sizes."""
    if mode != "constant" and value:  # PyTorch refuses a fill value it would not use
        raise RuntimeError(f'pad: padding mode "{mode}" doesn\'t take in value argument {value}')
    return tensor_pad(input, pad, mode=mode, value=0.0 if value is None else value)


def __getattr__(name: str) -> Any:
    """A PyTorch name this module lacks: an AttributeError saying so, and what to use."""
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}", name=name)
    message = missing_attribute("tinyattn.nn.functional", "torch.nn.functional", name, globals())
    raise AttributeError(message, name=name)


__all__ = sorted(
    set(_core_all)
    | {
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
        "cross_entropy",
        "elu",
        "celu",
        "l1_loss",
        "leaky_relu",
        "logsigmoid",
        "softplus",
        "kl_div",
        "mse_loss",
        "normalize",
        "relu6",
        "hardtanh",
        "softsign",
        "selu",
        "mish",
        "hardsigmoid",
        "hardswish",
        "glu",
        "softmin",
        "smooth_l1_loss",
        "huber_loss",
        "cosine_similarity",
        "nll_loss",
        "one_hot",
        "pad",
        "sigmoid",
        "silu",
        "tanh",
    }
)

# Convolution, pooling, unfold/fold and batch_norm live in their own module, re-exported here.
from .functional_conv import (  # noqa: E402
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    batch_norm,
    conv1d,
    conv2d,
    conv3d,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
    fold,
    max_pool1d,
    max_pool2d,
    max_pool3d,
    max_unpool1d,
    max_unpool2d,
    max_unpool3d,
    unfold,
)

__all__ += [
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "batch_norm",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "fold",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "max_unpool1d",
    "max_unpool2d",
    "max_unpool3d",
    "unfold",
]

# interpolate lives in its own module, re-exported here.
from .functional_interp import interpolate  # noqa: E402

__all__ += ["interpolate"]

# Group, instance and RMS norm, channel and alpha dropout, and pixel shuffle live in their own
# modules, re-exported here.
from .functional_dropout import (  # noqa: E402
    alpha_dropout,
    dropout1d,
    dropout2d,
    dropout3d,
    feature_alpha_dropout,
)
from .functional_norm import group_norm, instance_norm, rms_norm  # noqa: E402
from .functional_shuffle import pixel_shuffle, pixel_unshuffle  # noqa: E402

__all__ += [
    "alpha_dropout",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "feature_alpha_dropout",
    "group_norm",
    "instance_norm",
    "pixel_shuffle",
    "pixel_unshuffle",
    "rms_norm",
]
