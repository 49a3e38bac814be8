"""Functional layer: softmax family, losses, linear, embedding, layer norm, dropout, activations
and scaled dot-product attention. Imports `backend`, `autograd`, `ops` (shape helpers) and
`tensor`; arrays only through their array API namespace. Most functions compose Tensor ops, so
every order of gradient comes from the ops layer; Softmax, LogSoftmax and Erf are fused for their
numerics, each with a closed-form backward written in Tensor ops. Masks are bool, True = may
attend; masked scores become -inf and a row with no finite score gets softmax weights of exactly
0, so fully masked rows are 0 in value and in gradient, never NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from . import backend, ops
from .autograd import Function, is_grad_enabled
from .ops import broadcast_shapes
from .tensor import Tensor, arange, where

# ------------------------------------------------------------------------------- softmax family


def _row_shift(xp: Any, x: Any, axis: int) -> Any:
    """The max along `axis`, with non-finite maxima (all -inf rows) replaced by 0.

    Subtracting the max keeps exp() from overflowing for logits like 1e4; replacing an infinite
    max by 0 keeps `x - shift` from becoming -inf - (-inf) = NaN on fully masked rows.
    """
    shift = _max_along(xp, x, axis)
    return xp.where(xp.isfinite(shift), shift, xp.zeros_like(shift))


def _max_along(xp: Any, x: Any, axis: int) -> Any:
    """xp.max(x, axis=axis, keepdims=True), by halving when `axis` is a short last axis.

    NumPy's max along a short contiguous axis costs about 20 ns a row (375 us for the 16 keys of
    (64, 4, 16, 16) attention scores); `maximum` of the two halves, repeated, does the same in
    log2(n) vectorised passes (125 us). From about 128 keys on, the plain max is faster.
    """
    if axis != x.ndim - 1 or x.shape[-1] > 64 or x.size == 0:
        return xp.max(x, axis=axis, keepdims=True)
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        folded = xp.maximum(x[..., :half], x[..., half : 2 * half])
        if x.shape[-1] % 2:  # the odd column goes on to the next round
            folded = xp.concat([folded, x[..., -1:]], axis=-1)
        x = folded
    return x


class Softmax(Function):
    """y = exp(x - m) / sum(exp(x - m)) along `axis` (m = max, a constant: y does not depend on it);
    dL/dx = y * (g - sum(g * y)).  A row of all -inf gives y = 0 (and gradient 0), not NaN."""

    __slots__ = ("axis",)

    def forward(self, x: Any, axis: int = -1) -> Any:
        self.axis = axis
        xp = backend.namespace(x)
        exps = xp.exp(x - _row_shift(xp, x, axis))
        total = ops.sum_array(exps, (axis,), keepdims=True)
        # total is 0 only on an all -inf row, where every exp is 0: 0 / 1 = 0.
        exps /= xp.where(total > 0, total, xp.ones_like(total))  # in place: exps is ours
        return exps

    def backward(self, grad: Tensor) -> Tensor:
        y = self.output  # using the output keeps higher-order gradients exact
        return y * (grad - (grad * y).sum(axis=self.axis, keepdims=True))


class LogSoftmax(Function):
    """y = x - m - log(sum(exp(x - m))) along `axis`;  dL/dx = g - exp(y) * sum(g).

    A row of all -inf gives y = -inf (the log of probability 0) and gradient g, never NaN."""

    __slots__ = ("axis",)

    def forward(self, x: Any, axis: int = -1) -> Any:
        self.axis = axis
        xp = backend.namespace(x)
        shifted = x - _row_shift(xp, x, axis)
        total = ops.sum_array(xp.exp(shifted), (axis,), keepdims=True)
        shifted -= xp.log(xp.where(total > 0, total, xp.ones_like(total)))  # in place: ours
        return shifted

    def backward(self, grad: Tensor) -> Tensor:
        return grad - self.output.exp() * grad.sum(axis=self.axis, keepdims=True)


def _check_float(op: str, x: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(x).__name__}")
    if not backend.is_floating(backend.namespace(x.data), x.dtype):
        raise TypeError(
            f"{op}: expected a floating-point tensor, got dtype {backend.dtype_name(x.dtype)}"
        )
    return x


def _check_axis(op: str, x: Tensor, axis: int) -> int:
    if not isinstance(axis, int) or not -x.ndim <= axis < max(x.ndim, 1):
        raise ValueError(f"{op}: axis {axis!r} is out of range for a tensor of shape {x.shape}")
    return axis % x.ndim if x.ndim else 0


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """Normalised exponentials along `axis`: every row is >= 0 and sums to 1.

    Shapes: x (..., N) -> (..., N) (any axis). Finite for logits of +-1e4; a row that is -inf
    everywhere (fully masked) gives zeros rather than PyTorch's NaN.
    """
    x = _check_float("softmax", x)
    return Softmax.apply(x, axis=_check_axis("softmax", x, axis))


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """log(softmax(x)) computed without forming softmax (no log(0) for tiny probabilities).

    Shapes: x (..., N) -> (..., N).
    """
    x = _check_float("log_softmax", x)
    return LogSoftmax.apply(x, axis=_check_axis("log_softmax", x, axis))


# ---------------------------------------------------------------------------------------- loss
REDUCTIONS = ("mean", "sum", "none")


def _same_device(op: str, x: Tensor, *others: Tensor | None) -> None:
    """A fused op sees raw arrays: check here that its tensors share x's device, naming both."""
    for other in others:
        if other is not None:
            x._operand(other, op)


def _integer_tensor(
    op: str, values: Any, name: str, like: Tensor, like_name: str, kind: str, hint: str = ""
) -> Tensor:
    """`values` (class targets, embedding indices) as an integer Tensor on `like`'s device."""
    if not isinstance(values, Tensor):
        values = Tensor(values, device=like.device)
    if values.device != like.device:
        raise RuntimeError(
            f"{op}: {name} are on device '{values.device}' but {like_name} "
            f"{'are' if like_name.endswith('s') else 'is'} on '{like.device}'; "
            "move one with .to(device)"
        )
    if not backend.namespace(values.data).isdtype(values.dtype, "integral"):
        raise TypeError(
            f"{op}: {name} must be {kind}, got dtype {backend.dtype_name(values.dtype)}{hint}"
        )
    return values


def _check_targets(logits: Tensor, targets: Any, ignore_index: int | None) -> Tensor:
    """Targets as an integer Tensor of shape logits.shape[:-1], every value a class or ignored."""
    targets = _integer_tensor(
        "cross_entropy", targets, "targets", logits, "logits", "integer class indices",
        " (probability targets are not supported)",
    )  # fmt: skip
    xp = backend.namespace(targets.data)
    if targets.shape != logits.shape[:-1]:
        raise ValueError(
            f"cross_entropy: targets of shape {targets.shape} do not match logits of shape "
            f"{logits.shape}: expected targets of shape {logits.shape[:-1]} (classes last)"
        )
    classes = logits.shape[-1]
    values = targets.data
    bad = (values < 0) | (values >= classes)
    if ignore_index is not None:
        bad = bad & (values != ignore_index)
    flat_bad = xp.reshape(bad, (-1,))
    if flat_bad.shape[0] and bool(xp.any(flat_bad)):
        first = int(xp.argmax(xp.astype(flat_bad, xp.int32)))
        value = int(xp.reshape(values, (-1,))[first])
        count = int(xp.sum(xp.astype(flat_bad, xp.int32)))
        ignored = "" if ignore_index is None else f" or ignore_index={ignore_index}"
        raise ValueError(
            f"cross_entropy: target value {value} (flat position {first}) is out of range for "
            f"{classes} classes (expected 0..{classes - 1}{ignored}); {count} target(s) invalid"
        )
    return targets


def cross_entropy(
    logits: Tensor,
    targets: Any,
    ignore_index: int | None = None,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> Tensor:
    """Negative log-likelihood of class indices under softmax(logits), PyTorch's formula.

    loss_i = (1 - s) * (-log p[i, t_i]) + s * mean_c(-log p[i, c]) with s = label_smoothing;
    targets equal to ignore_index contribute 0; "mean" divides by the number of targets not
    ignored (0 loss, not PyTorch's NaN, when all are ignored).
    dL/dlogits_i = p_i - ((1 - s) * onehot(t_i) + s / C), times the reduction's weight.
    Shapes: logits (..., C) with classes LAST, targets (...) integer -> () or (...) for "none".
    """
    logits = _check_float("cross_entropy", logits)
    if logits.ndim < 1:
        raise ValueError("cross_entropy: logits must have a class axis, got a 0-d tensor")
    if reduction not in REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    targets = _check_targets(logits, targets, ignore_index)
    xp = backend.namespace(logits.data)
    classes = logits.shape[-1]
    log_probs = log_softmax(logits, axis=-1)
    # A one-hot comparison instead of a gather: portable, and ignored rows simply match nothing.
    class_ids = xp.arange(classes, device=logits.data.device)
    kept = (
        xp.ones(targets.shape, dtype=xp.bool, device=logits.data.device)
        if ignore_index is None
        else targets.data != ignore_index
    )
    one_hot = (targets.data[..., None] == class_ids) & kept[..., None]
    weights = xp.astype(one_hot, logits.dtype) * (1.0 - label_smoothing)
    if label_smoothing:
        weights = weights + xp.astype(kept[..., None], logits.dtype) * (label_smoothing / classes)
    per_target = -(log_probs * logits.constant(weights)).sum(axis=-1)
    if reduction == "none":
        return per_target
    total = per_target.sum()
    if reduction == "sum":
        return total
    count = int(xp.sum(xp.astype(kept, xp.int32)))
    return total * (1.0 / max(count, 1))


# ------------------------------------------------------------------------- linear and embedding


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y = x @ weight^T + bias (PyTorch layout: weight is (out, in)).

    dL/dx = g @ weight, dL/dweight = g^T x (summed over leading axes), dL/dbias = sum of g.
    Shapes: x (..., in), weight (out, in), bias (out,) -> (..., out).
    """
    if weight.ndim != 2:
        raise ValueError(f"linear: weight must be 2-D (out, in), got shape {weight.shape}")
    if x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"linear: input of shape {x.shape} has {x.shape[-1] if x.ndim else 0} features, "
            f"but weight of shape {weight.shape} expects {weight.shape[1]}"
        )
    _same_device("linear", x, weight, bias)
    if bias is None:
        return ops.Linear.apply(x, weight)  # one fused node: (..., in) -> (..., out)
    if bias.shape != (weight.shape[0],):
        raise ValueError(
            f"linear: bias of shape {bias.shape} does not match weight of shape "
            f"{weight.shape}: expected ({weight.shape[0]},)"
        )
    return ops.Linear.apply(x, weight, bias)


def embedding(indices: Any, weight: Tensor) -> Tensor:
    """Rows of `weight` picked by integer `indices`: y[...] = weight[indices[...]].

    dL/dweight = zeros with each g row scatter-added at its index (repeated indices add up); the
    gather's backward (IndexAdd) does the scatter-add through `backend.scatter_add`.
    Shapes: indices (...) integer, weight (V, D) -> (..., D).
    """
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D (V, D), got shape {weight.shape}")
    indices = _integer_tensor("embedding", indices, "indices", weight, "weight", "integers")
    xp = backend.namespace(indices.data)
    rows = weight.shape[0]
    if indices.ndim == 0:
        indices = indices.reshape(1)
        return embedding(indices, weight).reshape(weight.shape[1])
    if indices.numel():
        low, high = int(xp.min(indices.data)), int(xp.max(indices.data))
        # Negative indices are rejected, not wrapped: -1 is almost always a padding bug.
        if low < 0 or high >= rows:
            bad = low if low < 0 else high
            raise IndexError(
                f"embedding: index {bad} is out of range for {rows} embeddings "
                f"(valid 0..{rows - 1}); indices have shape {indices.shape}"
            )
    return weight[indices]


# ------------------------------------------------------------------------ normalisation, dropout


def layer_norm(
    x: Tensor,
    normalized_shape: int | tuple[int, ...],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """y = (x - mean) / sqrt(var + eps) * weight + bias over the trailing `normalized_shape` axes.

    One fused op (ops.LayerNorm) with the biased variance, as in PyTorch;
    dL/dx = (g_hat - mean(g_hat) - x_hat * mean(g_hat * x_hat)) / sqrt(var + eps), g_hat = g * w.
    Shapes: x (..., *normalized_shape) -> same; weight, bias normalized_shape.
    """
    x = _check_float("layer_norm", x)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or len(shape) > x.ndim or x.shape[x.ndim - len(shape) :] != shape:
        raise ValueError(
            f"layer_norm: normalized_shape {shape} does not match the trailing axes of input "
            f"shape {x.shape}"
        )
    if not isinstance(eps, int | float) or isinstance(eps, bool) or not 0 <= eps < math.inf:
        raise ValueError(f"layer_norm: eps must be a finite number >= 0, got {eps!r}")
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None and param.shape != shape:
            raise ValueError(
                f"layer_norm: {name} has shape {param.shape}, expected normalized_shape {shape}"
            )
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    _same_device("layer_norm", x, weight, bias)
    affine = [p for p in (weight, bias) if p is not None]
    return ops.LayerNorm.apply(x, *affine, axes=axes, eps=float(eps), has_weight=weight is not None)


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability p and scale the rest by 1 / (1 - p) (inverted dropout,
    so evaluation needs no rescaling); the identity when not training or p == 0.

    dL/dx = g * mask / (1 - p). The mask comes from the host RNG (`ta.manual_seed`).
    Shapes: x (...) -> (...).
    """
    x = _check_float("dropout", x)  # an integer tensor cannot be scaled by 1 / (1 - p)
    if not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability p must be in [0, 1], got {p!r}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = backend.bernoulli_mask(x.shape, 1.0 - p, like=x.data)
    xp = backend.namespace(x.data)
    return x * x.constant(xp.astype(keep, x.dtype) * (1.0 / (1.0 - p)))


# --------------------------------------------------------------------------------- activations


def relu(x: Tensor) -> Tensor:
    """y = max(x, 0);  dL/dx = g * [x > 0].  Shapes: any."""
    return x.relu()


# W. J. Cody's rational Chebyshev approximations for erf/erfc (Math. Comp. 23, 1969; Netlib
# SPECFUN CALERF). Relative error below 1e-16 in float64 over the whole line: measured against
# math.erf, the worst absolute error is 2.2e-16, so exact GELU matches PyTorch to ~1e-15.
_ERF_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
          3.20937758913846947e03, 1.85777706184603153e-1)  # fmt: skip
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
          2.84423683343917062e03)  # fmt: skip
_ERF_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
          2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
          2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)  # fmt: skip
_ERF_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
          1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
          3.43936767414372164e03, 1.23033935480374942e03)  # fmt: skip
_ERF_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
          1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)  # fmt: skip
_ERF_Q = (2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1,
          6.05183413124413191e-2, 2.33520497626869185e-3)  # fmt: skip
_SMALL, _MIDDLE = 0.46875, 4.0


def _ratio(z: Any, num: tuple, den: tuple) -> Any:
    """Cody's nested evaluation: (num[-1]z^k + ... + num[k-1]) / (z^k + ... + den[k-1])."""
    top, bottom = num[-1] * z, z
    for a, b in zip(num[: len(den) - 1], den[:-1], strict=True):
        top, bottom = (top + a) * z, (bottom + b) * z
    return (top + num[len(den) - 1]) / (bottom + den[-1])


def _erf_array(xp: Any, x: Any) -> Any:
    """erf on an array: three ranges of |x|, each evaluated on its own clipped copy (no inf)."""
    y = xp.abs(x)
    small = xp.clip(y, 0.0, _SMALL)
    erf_small = x * _ratio(small * small, _ERF_A, _ERF_B)
    middle = xp.clip(y, _SMALL, _MIDDLE)
    large = xp.clip(y, _MIDDLE, None)
    inv_sq = 1.0 / (large * large)
    erfc_scaled_large = (1.0 / math.sqrt(math.pi) - inv_sq * _ratio(inv_sq, _ERF_P, _ERF_Q)) / large
    tail_at = xp.where(y <= _MIDDLE, middle, large)
    tail = xp.where(y <= _MIDDLE, _ratio(middle, _ERF_C, _ERF_D), erfc_scaled_large)
    # exp(-y^2) split as exp(-r^2) exp(-(y-r)(y+r)) with r = y rounded down to 1/16: keeps the
    # rounding error of y^2 out of the exponent (Cody's trick).
    rounded = xp.trunc(tail_at * 16.0) / 16.0
    erfc = xp.exp(-rounded * rounded) * xp.exp(-(tail_at - rounded) * (tail_at + rounded)) * tail
    erf_large = xp.sign(x) * ((0.5 - erfc) + 0.5)
    return xp.where(y <= _SMALL, erf_small, erf_large)


class Erf(Function):
    """y = erf(x) = 2/sqrt(pi) * integral_0^x exp(-t^2) dt;  dL/dx = g * 2/sqrt(pi) * exp(-x^2)."""

    __slots__ = ()

    def forward(self, x: Any) -> Any:
        return _erf_array(backend.namespace(x), x)

    def backward(self, grad: Tensor) -> Tensor:
        x = self.inputs[0]
        return grad * ((-(x * x)).exp() * (2.0 / math.sqrt(math.pi)))


def erf(x: Tensor) -> Tensor:
    """The error function (the array API has none): Cody's approximation, float64-exact.

    Shapes: any.
    """
    return Erf.apply(_check_float("erf", x))


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU: y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))) ("none", exact), or PyTorch's
    "tanh" form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Gradients come from the ops:
    exact dL/dx = g * (Phi(x) + x * phi(x)). Shapes: any.
    """
    x = _check_float("gelu", x)
    if approximate == "none":
        return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))
    if approximate == "tanh":
        inner = (x + 0.044715 * x * x * x) * math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + inner.tanh())
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


# ----------------------------------------------------------------------------------- attention


def causal_mask(tq: int, tk: int | None = None, device: Any = None) -> Tensor:
    """Bool (Tq, Tk) mask, True = may attend: query i sees keys j <= i (aligned top-left, as
    PyTorch's ``is_causal``). Shapes: -> (Tq, Tk).
    """
    tk = tq if tk is None else tk
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (tq, tk)):
        raise ValueError(f"causal_mask: sizes must be non-negative ints, got Tq={tq!r}, Tk={tk!r}")
    rows = arange(tq, device=device).reshape(tq, 1)  # (Tq, 1)
    cols = arange(tk, device=device).reshape(1, tk)  # (1, Tk)
    return cols <= rows


def _checked_mask(mask: Any, shape: tuple, device: str) -> Tensor | None:
    """The user mask as a bool Tensor broadcastable to the scores `shape` (..., Tq, Tk), or None."""
    op = "scaled_dot_product_attention"
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        mask = Tensor(mask, device=device)
    if backend.dtype_name(mask.dtype) != "bool":
        raise TypeError(
            f"{op}: mask must be bool (True = may attend), got dtype "
            f"{backend.dtype_name(mask.dtype)}; an additive float mask is not supported"
        )
    if mask.device != device:
        raise RuntimeError(
            f"{op}: mask is on device '{mask.device}' but the scores are on '{device}'"
        )
    if mask.ndim > len(shape) or any(
        m != 1 and m != s for m, s in zip(reversed(mask.shape), reversed(shape), strict=False)
    ):
        raise ValueError(
            f"{op}: mask of shape {mask.shape} cannot be broadcast to the scores shape "
            f"{shape} (..., Tq, Tk)"
        )
    return mask


def _attention_mask(mask: Any, is_causal: bool, scores: Tensor) -> Tensor | None:
    """Combine the user mask and the causal mask into one bool tensor broadcastable to scores."""
    allowed = _checked_mask(mask, scores.shape, scores.device)
    if is_causal:
        tq, tk = scores.shape[-2:]
        causal = causal_mask(tq, tk, device=scores.device)
        allowed = causal if allowed is None else allowed.constant(allowed.data & causal.data)
    return allowed


def _batch_shape(q: Tensor, k: Tensor, v: Tensor) -> tuple:
    """The broadcast leading (batch) axes of q, k and v; _check_attention_shapes ran before."""
    op = "scaled_dot_product_attention"
    return broadcast_shapes(op, broadcast_shapes(op, q.shape[:-2], k.shape[:-2]), v.shape[:-2])


def _check_attention_shapes(q: Tensor, k: Tensor, v: Tensor) -> None:
    op = "scaled_dot_product_attention"
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_float(op, t)
        if t.ndim < 2:
            raise ValueError(f"{op}: {name} must have shape (..., T, D), got {t.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"{op}: q of shape {q.shape} and k of shape {k.shape} differ in the feature size D "
            f"({q.shape[-1]} != {k.shape[-1]})"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"{op}: k of shape {k.shape} and v of shape {v.shape} differ in the number of keys Tk "
            f"({k.shape[-2]} != {v.shape[-2]})"
        )
    try:
        _batch_shape(q, k, v)
    except ValueError:
        raise ValueError(
            f"{op}: the leading (batch) axes of q {q.shape}, k {k.shape} and v {v.shape} "
            "cannot be broadcast together"
        ) from None


# ------------------------------------------------------------------- memory-efficient attention
# scaled_dot_product_attention computes block-wise when the score matrix would hold at least this
# many numbers (batch * Tq * Tk; 2**22 floats are 16 MB in float32) and neither dropout nor the
# weights are asked for. Set it to 0 to force the block-wise path, to math.inf to force the plain.
BLOCKWISE_MIN_SCORES = 1 << 22
# A tile is (queries per block) x (keys per block) for every batch entry. Keys per block is fixed;
# queries per block follow from the numbers in one tile's scores (batch * Bq * Bk). 2**19 (2 MB
# in float32: 512 x 256 for 4 heads) was the fastest of the tiles tried (docs/performance.md):
# smaller tiles pay more Python per score, larger ones fall out of a core's 2 MB L2 cache.
ATTENTION_BLOCK_KEYS = 256
ATTENTION_BLOCK_SCORES = 1 << 19
# On a GPU the same tile is a few microseconds of work, less than the Python, the kernel launches
# and the host sync of the shift test around it: tiles there are 64 times larger (2048 keys,
# 2**25 scores, 128 MB in float32), still a small part of a GPU's memory.
GPU_ATTENTION_BLOCK_KEYS = 2048
GPU_ATTENTION_BLOCK_SCORES = 1 << 25
# How far a score may exceed its row's shift in BlockwiseAttention's forward: exp(20) ~ 5e8, so
# sums over a million keys of values up to 1e20 stay finite even in float32 (max ~3e38).
SHIFT_SLACK = 20.0


# Threads that work on different query blocks at once (NumPy releases the GIL inside its kernels).
# 1 by default: more pays only with a 1-thread BLAS (threadpoolctl), because a multi-threaded BLAS
# called from every thread oversubscribes the cores (measured in docs/performance.md).
ATTENTION_THREADS = 1


def _parallel_map(function: Callable, items: list) -> list:
    """[function(item) for item in items], on ATTENTION_THREADS threads when that is above 1."""
    if ATTENTION_THREADS <= 1 or len(items) <= 1:
        return [function(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415  (only when threads are on)

    with ThreadPoolExecutor(max_workers=ATTENTION_THREADS) as pool:
        return list(pool.map(function, items))


def _block_sizes(batch: int, tq: int, tk: int, gpu: bool = False) -> tuple[int, int]:
    """(queries, keys) per tile, each between 1 and its sequence length."""
    keys, scores = (
        (GPU_ATTENTION_BLOCK_KEYS, GPU_ATTENTION_BLOCK_SCORES)
        if gpu
        else (ATTENTION_BLOCK_KEYS, ATTENTION_BLOCK_SCORES)
    )
    block_k = max(1, min(tk, keys))
    block_q = max(1, min(tq, scores // max(1, batch * block_k)))
    return block_q, block_k


def _blocks(stop: int, size: int) -> list[slice]:
    """Consecutive slices of `size` covering [0, stop); the last one may be shorter."""
    return [slice(i, min(i + size, stop)) for i in range(0, stop, size)]


def _append_ones(xp: Any, x: Any) -> Any:
    """(..., T, D) -> (..., T, D + 1) with a last column of ones (see BlockwiseAttention)."""
    ones = xp.ones((*x.shape[:-1], 1), dtype=x.dtype, device=x.device)
    return xp.concat([x, ones], axis=-1)


class BlockwiseAttention(Function):
    """out = softmax(q k^T * scale, masked over keys) @ v, computed one tile (a block of queries
    against a block of keys) at a time, so the (Tq, Tk) score matrix never exists.

    Forward, an online softmax: each query row keeps a shift c and, over its key blocks b, sums
        acc += exp(S_b - c) [v_b, 1]   with S_b = q k_b^T * scale (disallowed scores -inf).
    The ones column makes the last column of acc the normaliser l = sum_j exp(S_j - c); then
    out = acc[:, :Dv] / l and lse = c + log l (one number per query) is saved. Any shift gives
    the same out and lse as long as no exp overflows: see _forward_rows for when c moves.
    Backward recomputes the weights tile by tile, P = exp(S - lse), and with D_i = sum_c dO_ic O_ic
        dV_b += P^T dO,   dS = P * (dO v_b^T - D),   dQ += dS k_b * scale,   dK_b += dS^T q * scale.
    Memory is O(T): q, k, v, out, lse and one tile. A query with no allowed key has l = 0: out 0
    and gradient 0. First-order only (the backward runs on arrays): see _FirstOrderOnly.
    Shapes: q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) with equal batch axes, allowed bool
    broadcastable to (..., Tq, Tk) with at least 2 axes -> out (..., Tq, Dv).
    """

    __slots__ = ("is_causal", "scale", "block_q", "block_k")

    def forward(
        self,
        q: Any,
        k: Any,
        v: Any,
        allowed: Any = None,
        is_causal: bool = False,
        scale: float = 1.0,
        block_q: int = 1,
        block_k: int = 1,
    ) -> Any:
        self.is_causal, self.scale, self.block_q, self.block_k = is_causal, scale, block_q, block_k
        xp = backend.namespace(q)
        q_scaled = q * scale  # scaling the (Tq, D) queries once, not every tile's scores
        keys = (
            k,
            _append_ones(xp, k),  # (..., Tk, D) -> (..., Tk, D + 1): [q, -c] @ [k, 1]^T = S - c
            xp.sqrt(xp.sum(k * k, axis=-1))[..., None, :],  # |k_j|: (..., Tk) -> (..., 1, Tk)
            _append_ones(xp, v),  # (..., Tk, Dv) -> (..., Tk, Dv + 1): P @ [v, 1] also sums P
        )
        q_norms = xp.sqrt(xp.sum(q_scaled * q_scaled, axis=-1, keepdims=True))  # (..., Tq, 1)
        out = xp.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
        lse = xp.empty((*q.shape[:-1], 1), dtype=q.dtype, device=q.device)
        row_blocks = _blocks(q.shape[-2], block_q)
        results = _parallel_map(
            lambda rows: self._forward_rows(
                xp, rows, q_scaled[..., rows, :], q_norms[..., rows, :], keys, allowed
            ),
            row_blocks,
        )
        for rows, (out_rows, lse_rows) in zip(row_blocks, results, strict=True):
            out[..., rows, :], lse[..., rows, :] = out_rows, lse_rows
        self.save_for_backward(lse, allowed)
        return out

    def _forward_rows(
        self, xp: Any, rows: slice, q_rows: Any, q_norms: Any, keys: tuple, allowed: Any
    ) -> tuple[Any, Any]:
        """One query block's online softmax over its key blocks: (out rows, lse rows).

        The shift c starts at the first tile's row max m and moves up to the new m (acc is
        rescaled by exp(c_old - c)) only when a tile could hold a score above c + SHIFT_SLACK:
        |S_ij| <= |q_i| max_j |k_j| (Cauchy-Schwarz) rules that out for most tiles, which then
        skip the max and the subtraction, since S - c comes out of [q, -c] @ [k, 1]^T directly.
        """
        k, k_ones, k_norms, v_ones = keys
        new = {"dtype": q_rows.dtype, "device": q_rows.device}
        running_max = xp.full((*q_rows.shape[:-1], 1), -math.inf, **new)  # m: (..., Bq, 1)
        shift = xp.zeros_like(running_max)  # c = m, or 0 while a row has seen no allowed key
        q_shifted = xp.concat([q_rows, -shift], axis=-1)  # [q * scale, -c]: (..., Bq, D + 1)
        acc = xp.zeros((*q_rows.shape[:-1], v_ones.shape[-1]), **new)  # (..., Bq, Dv + 1)
        for cols in self._key_blocks(k.shape[-2], rows):
            tile = self._tile_mask(xp, allowed, rows, cols, q_rows.device)
            largest = q_norms * xp.max(k_norms[..., cols], axis=-1, keepdims=True)  # >= S_ij
            if bool(xp.all(largest - running_max <= SHIFT_SLACK)):  # false while m is -inf
                # S - c: (..., Bq, D + 1) @ (..., D + 1, Bk) -> (..., Bq, Bk)
                scores = q_shifted @ k_ones[..., cols, :].mT
                if tile is not None:
                    scores = xp.where(tile, scores, -math.inf)
                acc = acc + xp.exp(scores) @ v_ones[..., cols, :]  # (.., Bq, Bk) @ (.., Bk, Dv+1)
                continue
            scores = q_rows @ k[..., cols, :].mT  # S: (..., Bq, D) @ (..., D, Bk) -> (..., Bq, Bk)
            if tile is not None:
                scores = xp.where(tile, scores, -math.inf)
            new_max = xp.maximum(running_max, xp.max(scores, axis=-1, keepdims=True))
            # A row with no allowed key yet keeps c = 0: exp(-inf - 0) = 0, where a shift of
            # -inf would give -inf - -inf = NaN. exp(m - c) rescales the old sums; it is 0 while
            # m was -inf, when those sums are 0 anyway.
            new_shift = xp.where(xp.isfinite(new_max), new_max, 0.0)
            weighted = xp.exp(scores - new_shift) @ v_ones[..., cols, :]  # (..., Bq, Dv + 1)
            acc = acc * xp.exp(running_max - new_shift) + weighted
            running_max, shift = new_max, new_shift
            q_shifted = xp.concat([q_rows, -shift], axis=-1)
        total = acc[..., -1:]  # l_i = sum_j exp(S_ij - c_i), the ones column's row
        found = total > 0.0  # False for a query that may attend to nothing
        total = xp.where(found, total, 1.0)
        # lse of an empty row is -inf; 0 keeps it finite (backward masks that whole row anyway).
        return acc[..., :-1] / total, xp.where(found, shift + xp.log(total), 0.0)

    def _key_blocks(self, tk: int, rows: slice) -> list[slice]:
        """Key blocks a query block sees: under is_causal query i sees keys j <= i only, so the
        blocks past the block's last query are skipped (half the work of a square causal layer)."""
        return _blocks(min(tk, rows.stop) if self.is_causal else tk, self.block_k)

    def _tile_mask(self, xp: Any, allowed: Any, rows: slice, cols: slice, device: Any) -> Any:
        """The bool mask of one tile, or None when every score in it is allowed.

        The user mask keeps its broadcast axes of size 1 (slicing those would empty them). The
        causal part, key <= query, is built for the tile only and only where the tile crosses
        the diagonal (a key past the tile's first query).
        """
        tile = None
        if allowed is not None:
            row_part = rows if allowed.shape[-2] != 1 else slice(None)
            col_part = cols if allowed.shape[-1] != 1 else slice(None)
            tile = allowed[..., row_part, col_part]
        if self.is_causal and cols.stop - 1 > rows.start:
            query = xp.arange(rows.start, rows.stop, device=device)[:, None]  # (Bq, 1)
            key = xp.arange(cols.start, cols.stop, device=device)[None, :]  # (1, Bk)
            tile = key <= query if tile is None else tile & (key <= query)
        return tile

    def backward(self, grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        lse, allowed = (None if t is None else t.data for t in self.saved_tensors)
        grads = self._backward_arrays(grad.data, self.output.data, lse, allowed)
        if is_grad_enabled():  # create_graph=True: the gradients must refuse a second backward
            return tuple(_FirstOrderOnly.apply(*self.inputs, grad, value=g) for g in grads)
        return tuple(t.constant(g) for t, g in zip(self.inputs, grads, strict=True))

    def _backward_arrays(self, grad: Any, out: Any, lse: Any, allowed: Any) -> tuple:
        """(dq, dk, dv) on arrays, recomputing each tile's weights from the saved lse.

        Two extra columns fold two subtractions into the matmuls that need them anyway:
        [q * scale, -lse] @ [k, 1]^T = S - lse, and [dO, -D] @ [v, 1]^T = dO v^T - D.
        """
        q, k, v = (t.data for t in self.inputs)
        xp = backend.namespace(q)
        q_scaled = q * self.scale
        row_dots = xp.sum(grad * out, axis=-1, keepdims=True)  # D_i: (..., Tq, 1)
        arrays = (
            q_scaled,
            xp.concat([q_scaled, -lse], axis=-1),  # (..., Tq, D + 1)
            k,
            _append_ones(xp, k),  # (..., Tk, D + 1)
            grad,
            xp.concat([grad, -row_dots], axis=-1),  # (..., Tq, Dv + 1)
            v,
            _append_ones(xp, v),  # (..., Tk, Dv + 1)
        )
        grad_q = xp.empty_like(q)
        row_blocks = _blocks(q.shape[-2], self.block_q)
        threads = max(1, min(ATTENTION_THREADS, len(row_blocks)))
        # Thread t takes query blocks t, t + threads, ... (causal blocks differ in cost), writes
        # its rows of dq and returns its own sums for dk and dv, which are added up here.
        parts = _parallel_map(
            lambda blocks: self._backward_rows(xp, blocks, arrays, allowed, grad_q),
            [row_blocks[start::threads] for start in range(threads)],
        )
        grad_k, grad_v = parts[0]
        for part_k, part_v in parts[1:]:
            grad_k, grad_v = grad_k + part_k, grad_v + part_v
        return grad_q, grad_k, grad_v

    def _backward_rows(
        self, xp: Any, row_blocks: list, arrays: tuple, allowed: Any, grad_q: Any
    ) -> tuple[Any, Any]:
        """Writes dq for the query blocks `row_blocks`; returns their share of (dk, dv)."""
        q_scaled, q_shifted, k, k_ones, grad, grad_shifted, v, v_ones = arrays
        grad_k, grad_v = xp.zeros_like(k), xp.zeros_like(v)
        for rows in row_blocks:
            grad_q_rows = xp.zeros_like(q_scaled[..., rows, :])
            for cols in self._key_blocks(k.shape[-2], rows):
                # P = exp(S - lse): (..., Bq, D + 1) @ (..., D + 1, Bk) -> (..., Bq, Bk)
                scores = q_shifted[..., rows, :] @ k_ones[..., cols, :].mT
                tile = self._tile_mask(xp, allowed, rows, cols, k.device)
                if tile is not None:
                    scores = xp.where(tile, scores, -math.inf)
                weights = xp.exp(scores)
                # (..., Bk, Bq) @ (..., Bq, Dv) -> (..., Bk, Dv)
                grad_v[..., cols, :] += weights.mT @ grad[..., rows, :]
                # dS = P * (dP - D): (..., Bq, Dv + 1) @ (..., Dv + 1, Bk) -> (..., Bq, Bk)
                grad_scores = weights * (grad_shifted[..., rows, :] @ v_ones[..., cols, :].mT)
                grad_q_rows = grad_q_rows + grad_scores @ k[..., cols, :]  # (.., Bq, D)
                grad_k[..., cols, :] += grad_scores.mT @ q_scaled[..., rows, :]  # (.., Bk, D)
            grad_q[..., rows, :] = grad_q_rows * self.scale
        return grad_k, grad_v


class _FirstOrderOnly(Function):
    """y = value, a gradient BlockwiseAttention computed on arrays; recorded under create_graph
    so that differentiating it again raises instead of silently returning 0."""

    __slots__ = ()

    def forward(self, *arrays: Any, value: Any = None) -> Any:
        return value

    def backward(self, grad: Tensor) -> None:
        raise NotImplementedError(
            "double backward through block-wise attention is not supported: use the plain path "
            "(set tinyattn.functional.BLOCKWISE_MIN_SCORES = math.inf)"
        )


def _blockwise_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Any, is_causal: bool, scale: float
) -> Tensor:
    """scaled_dot_product_attention through BlockwiseAttention (same checks, same results)."""
    batch = _batch_shape(q, k, v)
    tq, tk = q.shape[-2], k.shape[-2]
    allowed = _checked_mask(mask, (*batch, tq, tk), q.device)
    if allowed is not None and allowed.ndim < 2:
        allowed = allowed.reshape(*(1,) * (2 - allowed.ndim), *allowed.shape)  # -> (1, Tk)
    xp = backend.namespace(q.data)
    dtype = xp.result_type(q.dtype, k.dtype, v.dtype)  # as the plain path's matmuls promote
    # The Function wants equal batch axes; BroadcastTo's backward sums the gradients back.
    q, k, v = (t.to(dtype).broadcast_to(*batch, *t.shape[-2:]) for t in (q, k, v))
    block_q, block_k = _block_sizes(math.prod(batch), tq, tk, q.device.startswith("cuda"))
    return BlockwiseAttention.apply(
        q,
        k,
        v,
        allowed=None if allowed is None else allowed.data,
        is_causal=is_causal,
        scale=scale,
        block_q=block_q,
        block_k=block_k,
    )


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Any = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
    return_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """out = softmax(q k^T * scale, masked over keys) @ v, with scale = 1/sqrt(D) by default.

    The mask (bool, True = may attend, broadcastable to (..., Tq, Tk)) and the causal mask are
    ANDed; disallowed scores become -inf, so their weights are exactly 0 and a query with no
    allowed key gets output 0 and gradient 0. Dropout (p = dropout_p, always applied when > 0,
    like PyTorch) acts on the weights; the returned weights are the ones multiplied with v.
    Gradients come from matmul, where and the fused softmax (dL/dscores = w * (g_w - sum g_w w)).
    When batch * Tq * Tk >= BLOCKWISE_MIN_SCORES (and no dropout, no weights), the same result
    comes from BlockwiseAttention in O(T) memory instead (first-order gradients only).
    Shapes: q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) -> out (..., Tq, Dv),
    weights (..., Tq, Tk).
    """
    _check_attention_shapes(q, k, v)
    if not isinstance(dropout_p, int | float) or not 0.0 <= dropout_p <= 1.0:
        raise ValueError(
            f"scaled_dot_product_attention: dropout_p must be in [0, 1], got {dropout_p!r}"
        )
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores_count = math.prod(_batch_shape(q, k, v)) * q.shape[-2] * k.shape[-2]
    if (
        scores_count >= BLOCKWISE_MIN_SCORES
        and dropout_p == 0.0
        and not return_weights
        and q.device == k.device == v.device  # else the plain path's matmul names both devices
    ):
        return _blockwise_attention(q, k, v, mask, is_causal, scale)
    scores = (q @ k.mT) * scale  # (..., Tq, D) @ (..., D, Tk) -> (..., Tq, Tk)
    allowed = _attention_mask(mask, is_causal, scores)
    if allowed is not None:
        scores = where(allowed, scores, -math.inf)
    weights = softmax(scores, axis=-1)  # over the keys: each query's weights sum to 1 (or 0)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, training=True)
    out = weights @ v  # (..., Tq, Tk) @ (..., Tk, Dv) -> (..., Tq, Dv)
    return (out, weights) if return_weights else out


__all__ = [
    "BlockwiseAttention",
    "Erf",
    "LogSoftmax",
    "Softmax",
    "causal_mask",
    "cross_entropy",
    "dropout",
    "embedding",
    "erf",
    "gelu",
    "layer_norm",
    "linear",
    "log_softmax",
    "relu",
    "scaled_dot_product_attention",
    "softmax",
]
