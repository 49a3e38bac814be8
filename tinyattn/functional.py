"""Functional layer: softmax family, losses, linear, embedding, layer norm, dropout, activations
and scaled dot-product attention. Imports `backend`, `kernels`, `ops` and `tensor`; arrays
only through their array API namespace. Every function here checks its arguments and composes
Tensor ops or calls one fused op from `ops` (Softmax, LogSoftmax, Erf, Gelu, Linear, LayerNorm,
BlockwiseAttention; ClassWeights, KeptCount and Dropout make cross-entropy's target weights and
dropout's mask): no derivative math lives here, so every order of gradient comes
from the ops layer. Masks are bool, True = may attend; masked scores become -inf and a row with
no finite score gets softmax weights of exactly 0, so fully masked rows are 0 in value and in
gradient, never NaN.
"""

from __future__ import annotations

import math
from typing import Any

from . import backend, kernels, ops
from .creation import arange
from .methods.common import where
from .ops import (
    BlockwiseAttention,
    ClassWeights,
    Dropout,
    Erf,
    Gelu,
    KeptCount,
    LogSoftmax,
    Softmax,
    bad_targets,
    broadcast_shapes,
)
from .tensor import Tensor

# ------------------------------------------------------------------------------- softmax family


def _check_float(op: str, x: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(x).__name__}")
    backend.check_floating(op, x.array)
    return x


def _check_axis(op: str, x: Tensor, axis: int) -> int:
    """`axis` as a non-negative int; a 0-d tensor takes 0 or -1, as in PyTorch."""
    if not isinstance(axis, int) or not -max(x.ndim, 1) <= axis < max(x.ndim, 1):
        raise ValueError(f"{op}: axis {axis!r} is out of range for a tensor of shape {x.shape}")
    return axis % x.ndim if x.ndim else 0


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """Normalised exponentials along `axis`: every row is >= 0 and sums to 1.

    Shapes: x (..., N) -> (..., N) (any axis); a 0-d x gives 1, as in PyTorch. Finite for
    logits of +-1e4; a row that is -inf everywhere (fully masked) gives zeros rather than
    PyTorch's NaN; a row holding NaN gives NaN.
    """
    x = _check_float("softmax", x)
    axis = _check_axis("softmax", x, axis)
    if x.ndim == 0:  # one element along a virtual axis of size 1
        return Softmax.apply(x.reshape(1), axis=0).reshape(())
    return Softmax.apply(x, axis=axis)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """log(softmax(x)) computed without forming softmax (no log(0) for tiny probabilities).

    Shapes: x (..., N) -> (..., N); a 0-d x gives 0, as in PyTorch.
    """
    x = _check_float("log_softmax", x)
    axis = _check_axis("log_softmax", x, axis)
    if x.ndim == 0:
        return LogSoftmax.apply(x.reshape(1), axis=0).reshape(())
    return LogSoftmax.apply(x, axis=axis)


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
    if not backend.namespace(values.array).isdtype(values.dtype, "integral"):
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
    xp = backend.namespace(targets.array)
    if targets.shape != logits.shape[:-1]:
        raise ValueError(
            f"cross_entropy: targets of shape {targets.shape} do not match logits of shape "
            f"{logits.shape}: expected targets of shape {logits.shape[:-1]} (classes last)"
        )
    classes = logits.shape[-1]
    values = targets.array
    flat_bad = xp.reshape(bad_targets(xp, values, classes, ignore_index), (-1,))
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
    log_probs = log_softmax(logits, axis=-1)
    # The target distribution as an op of the targets (rows gathered from a table, with a zero
    # row for ignored targets), so compiled steps compute it again from each batch.
    weights = ClassWeights.apply(
        targets,
        classes=logits.shape[-1],
        ignore_index=ignore_index,
        smoothing=label_smoothing,
        dtype=logits.dtype,
    )
    per_target = -(log_probs * weights).sum(axis=-1)
    if reduction == "none":
        return per_target
    total = per_target.sum()
    if reduction == "sum":
        return total
    return total / KeptCount.apply(targets, ignore_index=ignore_index, dtype=logits.dtype)


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
    xp = backend.namespace(indices.array)
    rows = weight.shape[0]
    if indices.ndim == 0:
        indices = indices.reshape(1)
        return embedding(indices, weight).reshape(weight.shape[1])
    if indices.numel():
        low, high = int(xp.min(indices.array)), int(xp.max(indices.array))
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
    return Dropout.apply(x, p=p)


# --------------------------------------------------------------------------------- activations


def relu(x: Tensor) -> Tensor:
    """y = max(x, 0);  dL/dx = g * [x > 0].  Shapes: any."""
    return x.relu()


def erf(x: Tensor) -> Tensor:
    """The error function (the array API has none): Cody's approximation, float64-exact.

    Shapes: any.
    """
    return Erf.apply(_check_float("erf", x))


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU: y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))) ("none", exact), or PyTorch's
    "tanh" form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). The exact form is one fused
    op (`ops.Gelu`), dL/dx = g * (Phi(x) + x * phi(x)); the tanh form is composed of Tensor ops.
    Shapes: any.
    """
    x = _check_float("gelu", x)
    if approximate == "none":
        return Gelu.apply(x)
    if approximate == "tanh":
        inner = (x + 0.044715 * x * x * x) * math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + inner.tanh())
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


# ----------------------------------------------------------------------------------- attention


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
    allowed key (or no key at all) gets output 0 and gradient 0. Dropout (p = dropout_p, always
    applied when > 0, like PyTorch) acts on the weights; the returned weights are the ones
    multiplied with v. Gradients come from matmul, where and the fused softmax.
    Long sequences take the block-wise path below (same result, O(T) memory).
    Shapes: q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) -> out (..., Tq, Dv),
    weights (..., Tq, Tk).
    """
    scale = _check_attention(q, k, v, dropout_p, scale)
    if _use_blockwise(q, k, v, dropout_p, return_weights):
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


def _check_attention(q: Tensor, k: Tensor, v: Tensor, dropout_p: Any, scale: Any) -> float:
    """Check the arguments of scaled_dot_product_attention; return the scale to use."""
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
    if not isinstance(dropout_p, int | float) or not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"{op}: dropout_p must be in [0, 1], got {dropout_p!r}")
    if scale is not None:
        return scale
    # With D = 0 every score is 0 whatever the scale (PyTorch: the weights are uniform).
    return 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0


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
        allowed = causal if allowed is None else allowed & causal
    return allowed


def _batch_shape(q: Tensor, k: Tensor, v: Tensor) -> tuple:
    """The broadcast leading (batch) axes of q, k and v; _check_attention ran before."""
    op = "scaled_dot_product_attention"
    return broadcast_shapes(op, broadcast_shapes(op, q.shape[:-2], k.shape[:-2]), v.shape[:-2])


# ------------------------------------------------------------------- memory-efficient attention
# A separate implementation of the same attention (ops.BlockwiseAttention): it never holds the
# (Tq, Tk) score matrix, and is tested against the reference above. Its tile sizes and threads
# are in `kernels`. scaled_dot_product_attention takes it when the score matrix would hold at
# least this many numbers (batch * Tq * Tk; 2**22 floats are 16 MB in float32) and neither
# dropout nor the weights are asked for. Set it to 0 to force the block-wise path, to math.inf
# to force the plain one (the block-wise gradient is first order only).
BLOCKWISE_MIN_SCORES = 1 << 22


def _use_blockwise(q: Tensor, k: Tensor, v: Tensor, dropout_p: float, return_weights: bool) -> bool:
    """Whether scaled_dot_product_attention takes the block-wise path (see above)."""
    scores_count = math.prod(_batch_shape(q, k, v)) * q.shape[-2] * k.shape[-2]
    return (
        scores_count >= BLOCKWISE_MIN_SCORES
        and dropout_p == 0.0
        and not return_weights
        and q.device == k.device == v.device  # else the plain path's matmul names both devices
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
    xp = backend.namespace(q.array)
    dtype = xp.result_type(q.dtype, k.dtype, v.dtype)  # as the plain path's matmuls promote
    # The Function wants equal batch axes; BroadcastTo's backward sums the gradients back.
    q, k, v = (t.to(dtype).broadcast_to(*batch, *t.shape[-2:]) for t in (q, k, v))
    block_q, block_k = kernels.block_sizes(math.prod(batch), tq, tk, q.device.startswith("cuda"))
    allowed = None if allowed is None else allowed.array
    options = {"is_causal": is_causal, "scale": scale, "block_q": block_q, "block_k": block_k}
    return BlockwiseAttention.apply(q, k, v, allowed=allowed, **options)


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
