"""Functional layer: the core of ``tinyattn.nn.functional`` (which re-exports these very objects and
adds the losses and PyTorch's other activations). Softmax family, linear, embedding, layer norm,
dropout, activations and scaled dot-product attention, each with PyTorch's signature and meaning
(``dim=``, with NumPy's ``axis=`` accepted as an alias). Imports `backend`, `kernels`, `ops` and
`tensor`; arrays only through their array API namespace. Each public function checks its arguments,
then composes Tensor ops or calls one fused op from `ops` (Softmax, LogSoftmax, Erf, Gelu, Linear,
LayerNorm, Dropout, BlockwiseAttention): no derivative math lives here, so every order of gradient
comes from the ops layer. `_attention`, `_dropout` and `_blockwise_attention` check nothing: they
trust their callers (nn.MultiHeadAttention calls `_attention` after its own checks).
Bool masks: True = may attend; a fully masked row's weights are 0 in value and gradient, not NaN.
"""

# ruff: noqa: A002  (PyTorch's parameter names, input ..., so keyword callers port unchanged)

from __future__ import annotations

import math
from typing import Any

from . import backend, kernels, ops
from .attention_heads import repeat_kv_heads
from .creation import arange, tensor
from .errors import TinyattnError
from .methods.common import where
from .ops import BlockwiseAttention, Dropout, Erf, Gelu, LogSoftmax, Softmax, broadcast_shapes
from .tensor import Tensor

# ------------------------------------------------------------------------------- softmax family


def _check_float(op: str, x: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(x).__name__}")
    backend.check_floating(op, x.array)
    return x


def _pick_dim(op: str, dim: int | None, axis: int | None) -> int:
    """`dim`, or NumPy's alias `axis`; one of them is required (see softmax)."""
    if dim is not None and axis is not None and dim != axis:
        raise TypeError(f"{op}: got both dim={dim} and axis={axis}; pass one")
    chosen = dim if dim is not None else axis
    if chosen is None:
        raise TypeError(
            f"{op}: pass dim= (PyTorch's implicit choice of dimension is deprecated and "
            "tinyattn does not guess)"
        )
    return chosen


def softmax(
    input: Tensor, dim: int | None = None, dtype: Any = None, *, axis: int | None = None
) -> Tensor:
    """Normalised exponentials along `dim`: every row is >= 0 and sums to 1 (Tensor.softmax).

    `dim` is required (PyTorch guesses one with a deprecation warning when it is left out;
    tinyattn raises TypeError); ``axis=`` is its NumPy spelling; `dtype` casts the input first.
    Shapes: (..., N) -> (..., N) (any dim); a 0-d input gives 1, as in PyTorch. Finite for
    logits of +-1e4; a row that is -inf everywhere (fully masked) gives zeros rather than
    PyTorch's NaN; a row holding NaN gives NaN.
    """
    dim = _pick_dim("softmax", dim, axis)
    if not isinstance(input, Tensor):
        raise TypeError(f"softmax: expected a Tensor, got {type(input).__name__}")
    return input.softmax(dim, dtype)


def log_softmax(
    input: Tensor, dim: int | None = None, dtype: Any = None, *, axis: int | None = None
) -> Tensor:
    """log(softmax(x)) along `dim`, computed without forming softmax (no log(0) for tiny
    probabilities). `dim` is required, as for softmax.

    Shapes: (..., N) -> (..., N); a 0-d input gives 0, as in PyTorch.
    """
    dim = _pick_dim("log_softmax", dim, axis)
    if not isinstance(input, Tensor):
        raise TypeError(f"log_softmax: expected a Tensor, got {type(input).__name__}")
    return input.log_softmax(dim, dtype)


# ------------------------------------------------------------------------- linear and embedding


def _same_device(op: str, x: Tensor, *others: Tensor | None) -> None:
    """A fused op sees raw arrays: check here that its tensors share x's device, naming both."""
    for other in others:
        if other is not None:
            x._operand(other, op)


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y = x @ weight^T + bias (PyTorch layout: weight is (out, in)).

    dL/dx = g @ weight, dL/dweight = g^T x (summed over leading axes), dL/dbias = sum of g.
    Shapes: input (..., in), weight (out, in), bias (out,) -> (..., out).
    """
    x = input
    if weight.ndim != 2:
        raise TinyattnError(f"linear: weight must be 2-D (out, in), got shape {weight.shape}")
    if x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise TinyattnError(
            f"linear: input of shape {x.shape} has {x.shape[-1] if x.ndim else 0} features, "
            f"but weight of shape {weight.shape} expects {weight.shape[1]}"
        )
    _same_device("linear", x, weight, bias)  # dtypes: in the op, after autocast's casts
    if bias is None:
        return ops.Linear.apply(x, weight)  # one fused node: (..., in) -> (..., out)
    if bias.shape != (weight.shape[0],):
        raise TinyattnError(
            f"linear: bias of shape {bias.shape} does not match weight of shape "
            f"{weight.shape}: expected ({weight.shape[0]},)"
        )
    return ops.Linear.apply(x, weight, bias)


def _integer_tensor(op: str, values: Any, name: str, like: Tensor, like_name: str) -> Tensor:
    """`values` (embedding indices) as an integer Tensor on `like`'s device."""
    if not isinstance(values, Tensor):
        values = tensor(values, device=like.device)
    if values.device != like.device:
        raise RuntimeError(
            f"{op}: {name} are on device '{values.device}' but {like_name} is on "
            f"'{like.device}'; move one with .to(device)"
        )
    if not backend.namespace(values.array).isdtype(values.dtype, "integral"):
        raise TypeError(
            f"{op}: {name} must be integers, got dtype {backend.dtype_name(values.dtype)}"
        )
    return values


def embedding(
    input: Any,
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """Rows of `weight` picked by integer indices: y[...] = weight[input[...]]; the row
    `padding_idx` gets no gradient.

    dL/dweight = zeros with each g row scatter-added at its index (repeated indices add up); the
    gather's backward (IndexAdd) does the scatter-add through `backend.scatter_add`.
    Shapes: input (...) integer, weight (V, D) -> (..., D).
    """
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError(
            "embedding: max_norm, scale_grad_by_freq and sparse are not supported; renormalise "
            "the weight yourself under no_grad if you need max_norm"
        )
    if weight.ndim != 2:
        raise TinyattnError(f"embedding: weight must be 2-D (V, D), got shape {weight.shape}")
    indices = _integer_tensor("embedding", input, "indices", weight, "weight")
    xp = backend.namespace(indices.array)
    rows = weight.shape[0]
    if indices.numel() and backend.meta.has_values(indices.array):  # meta: none to check
        low, high = int(xp.min(indices.array)), int(xp.max(indices.array))
        # Negative indices are rejected, not wrapped: -1 is almost always a padding bug.
        if low < 0 or high >= rows:
            bad = low if low < 0 else high
            raise IndexError(
                f"embedding: index {bad} is out of range for {rows} embeddings "
                f"(valid 0..{rows - 1}); indices have shape {indices.shape}"
            )
    if padding_idx is not None:
        weight = _without_padding_gradient(weight, padding_idx)
    if indices.ndim == 0:
        return weight[indices.reshape(1)].reshape(weight.shape[1])
    return weight[indices]


def _without_padding_gradient(weight: Tensor, padding_idx: int) -> Tensor:
    """The same values, but the row `padding_idx` comes from a detached copy: no gradient."""
    rows = weight.shape[0]
    if not isinstance(padding_idx, int) or not -rows <= padding_idx < rows:
        raise TinyattnError(f"embedding: padding_idx {padding_idx} is out of range for {rows} rows")
    xp = backend.namespace(weight.array)
    is_pad = xp.arange(rows, device=weight.array.device) == padding_idx % rows
    return where(weight.constant(xp.reshape(is_pad, (rows, 1))), weight.detach(), weight)


# ------------------------------------------------------------------------ normalisation, dropout


def layer_norm(
    input: Tensor,
    normalized_shape: int | tuple[int, ...],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """y = (x - mean) / sqrt(var + eps) * weight + bias over the trailing `normalized_shape` axes.

    One fused op (ops.LayerNorm) with the biased variance, as in PyTorch;
    dL/dx = (g_hat - mean(g_hat) - x_hat * mean(g_hat * x_hat)) / sqrt(var + eps), g_hat = g * w.
    Shapes: input (..., *normalized_shape) -> same; weight, bias normalized_shape.
    """
    x = _check_float("layer_norm", input)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or len(shape) > x.ndim or x.shape[x.ndim - len(shape) :] != shape:
        raise TinyattnError(
            f"layer_norm: normalized_shape {shape} does not match the trailing axes of input "
            f"shape {x.shape}"
        )
    if not isinstance(eps, int | float) or isinstance(eps, bool) or not 0 <= eps < math.inf:
        raise TinyattnError(f"layer_norm: eps must be a finite number >= 0, got {eps!r}")
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None and param.shape != shape:
            raise TinyattnError(
                f"layer_norm: {name} has shape {param.shape}, expected normalized_shape {shape}"
            )
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    _same_device("layer_norm", x, weight, bias)
    affine = [p for p in (weight, bias) if p is not None]
    return ops.LayerNorm.apply(x, *affine, axes=axes, eps=float(eps), has_weight=weight is not None)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability p and scale the rest by 1 / (1 - p) (inverted dropout,
    so evaluation needs no rescaling); the identity when not training or p == 0.

    dL/dx = g * mask / (1 - p). The mask comes from the host RNG (`ta.manual_seed`).
    ``inplace=True`` is accepted and computes out of place (use the result).
    Shapes: input (...) -> (...).
    """
    x = _check_float("dropout", input)  # an integer tensor cannot be scaled by 1 / (1 - p)
    if not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
        raise TinyattnError(f"dropout: probability p must be in [0, 1], got {p!r}")
    if not training or p == 0.0:
        return x
    return _dropout(x, p)


def _dropout(x: Tensor, p: float) -> Tensor:
    """Dropout of a float tensor with a checked 0 < p <= 1 (p = 1: all zeros, no 1 / 0 scale)."""
    return x * 0.0 if p == 1.0 else Dropout.apply(x, p=p)


# --------------------------------------------------------------------------------- activations


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """y = max(x, 0);  dL/dx = g * [x > 0].  ``inplace=True`` is accepted and computes out of
    place (use the result).  Shapes: any."""
    return input.relu()


def erf(input: Tensor) -> Tensor:
    """The error function (the array API has none): Cody's approximation, float64-exact.

    Shapes: any.
    """
    return Erf.apply(_check_float("erf", input))


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """GELU: y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))) ("none", exact), or PyTorch's
    "tanh" form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). The exact form is one fused
    op (`ops.Gelu`), dL/dx = g * (Phi(x) + x * phi(x)); the tanh form is composed of Tensor ops.
    Shapes: any.
    """
    x = _check_float("gelu", input)
    if approximate == "none":
        return Gelu.apply(x)
    if approximate == "tanh":
        inner = (x + 0.044715 * x * x * x) * math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + inner.tanh())
    raise TinyattnError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


# ----------------------------------------------------------------------------------- attention


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    return_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """out = softmax(q k^T * scale + M) @ v over the keys, with scale = 1/sqrt(D) by default.

    PyTorch's meaning: a bool attn_mask is True where a query may attend (M = -inf where it is
    False); a float attn_mask is M itself, added to the scores; is_causal lets query i see keys
    j <= i (top-left aligned) and, as in PyTorch, excludes attn_mask. Dropout (p = dropout_p,
    applied whenever > 0, as in PyTorch) acts on the weights. A query with no allowed key (or
    no key at all) gets output 0 and gradient 0, never NaN. enable_gqa=True lets key and value
    have fewer heads (dim -3), each shared by a group of query heads. ``return_weights=True`` is
    tinyattn's extension (keyword only): it also returns the weights that multiplied v.
    This function checks every argument, then calls `_attention`, which trusts them.
    Shapes: query (..., Tq, D), key (..., Tk, D), value (..., Tk, Dv), attn_mask broadcastable
    to (..., Tq, Tk) -> out (..., Tq, Dv), weights (..., Tq, Tk).
    """
    if enable_gqa:  # fewer key/value heads: each serves a group of query heads
        key, value = repeat_kv_heads(query, key, value)
    scale, mask = _check_attention(query, key, value, attn_mask, dropout_p, is_causal, scale)
    return _attention(query, key, value, mask, dropout_p, is_causal, scale, return_weights)


def _attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float,
    return_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """scaled_dot_product_attention on checked arguments (no checks here). `mask` is None, bool
    (True = may attend) or float (added), broadcastable to the scores; unlike the public entry,
    is_causal may come with a bool mask (they are ANDed: nn.MultiHeadAttention passes both).
    Long sequences take the block-wise path below (same result, O(T) memory)."""
    if _use_blockwise(q, k, v, mask, dropout_p, return_weights):
        return _blockwise_attention(q, k, v, mask, is_causal, scale)
    scores = (q @ k.mT) * scale  # (..., Tq, D) @ (..., D, Tk) -> (..., Tq, Tk)
    if mask is not None and not _is_bool(mask):
        scores = scores + mask  # an additive float mask
    allowed = _allowed(mask, is_causal, scores)
    if allowed is not None:
        scores = where(allowed, scores, -math.inf)
    weights = Softmax.apply(scores, axis=scores.ndim - 1)  # over the keys: sums to 1 (or 0)
    if dropout_p > 0.0:
        weights = _dropout(weights, dropout_p)
    out = weights @ v  # (..., Tq, Tk) @ (..., Tk, Dv) -> (..., Tq, Dv)
    return (out, weights) if return_weights else out


def causal_mask(tq: int, tk: int | None = None, device: Any = None) -> Tensor:
    """Bool (Tq, Tk) mask, True = may attend: query i sees keys j <= i (aligned top-left, as
    PyTorch's ``is_causal``). Shapes: -> (Tq, Tk)."""
    tk = tq if tk is None else tk
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (tq, tk)):
        raise TinyattnError(f"causal_mask: sizes must be ints >= 0, got Tq={tq!r}, Tk={tk!r}")
    # key column j (1, Tk) against query row i (Tq, 1): allowed where j <= i
    return arange(tk, device=device).reshape(1, tk) <= arange(tq, device=device).reshape(tq, 1)


def _is_bool(t: Tensor) -> bool:
    return backend.dtype_name(t.dtype) == "bool"


def _allowed(mask: Tensor | None, is_causal: bool, scores: Tensor) -> Tensor | None:
    """The bool mask of allowed scores: a bool `mask` ANDed with the causal one, or None."""
    allowed = mask if mask is not None and _is_bool(mask) else None
    if is_causal:
        causal = causal_mask(*scores.shape[-2:], device=scores.device)
        allowed = causal if allowed is None else allowed & causal
    return allowed


def _check_attention(
    q: Any, k: Any, v: Any, mask: Any, dropout_p: Any, is_causal: bool, scale: Any
) -> tuple[float, Tensor | None]:
    """Check scaled_dot_product_attention's arguments; return the scale and the mask to use."""
    op = "scaled_dot_product_attention"
    _check_inputs(op, q, k, v)
    if not isinstance(dropout_p, int | float) or not 0.0 <= dropout_p <= 1.0:
        raise TinyattnError(f"{op}: dropout_p must be in [0, 1], got {dropout_p!r}")
    if mask is not None and is_causal:  # PyTorch's documented error (its math path's too)
        raise RuntimeError(f"{op}: explicit attn_mask should not be set when is_causal=True")
    scores_shape = (*_batch_shape(q, k, v), q.shape[-2], k.shape[-2])
    mask = _checked_mask(op, mask, scores_shape, q)
    if scale is not None:
        return scale, mask
    # With D = 0 every score is 0 whatever the scale (PyTorch: the weights are uniform).
    return (1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0), mask


def _check_inputs(op: str, q: Any, k: Any, v: Any) -> None:
    """query, key and value: float tensors (..., T, D) whose sizes and batch axes fit."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_float(op, t)
        if t.ndim < 2:
            raise TinyattnError(f"{op}: {name} must have shape (..., T, D), got {t.shape}")
    if not q.dtype == k.dtype == v.dtype:
        names = ", ".join(backend.dtype_name(t.dtype) for t in (q, k, v))
        raise RuntimeError(f"{op}: q, k and v must have the same dtype (as PyTorch), got {names}")
    if q.shape[-1] != k.shape[-1]:
        raise TinyattnError(
            f"{op}: q of shape {q.shape} and k of shape {k.shape} differ in the feature size D "
            f"({q.shape[-1]} != {k.shape[-1]})"
        )
    if k.shape[-2] != v.shape[-2]:
        raise TinyattnError(
            f"{op}: k of shape {k.shape} and v of shape {v.shape} differ in the number of keys Tk "
            f"({k.shape[-2]} != {v.shape[-2]})"
        )
    try:
        _batch_shape(q, k, v)
    except ValueError:
        raise TinyattnError(
            f"{op}: the leading (batch) axes of q {q.shape}, k {k.shape} and v {v.shape} "
            "cannot be broadcast together"
        ) from None


def _checked_mask(op: str, mask: Any, shape: tuple, query: Tensor) -> Tensor | None:
    """attn_mask as a bool Tensor, or a float one in the query's dtype, broadcastable to the
    scores `shape` (..., Tq, Tk); None stays None."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        mask = tensor(mask, device=query.device)
    if not _is_bool(mask) and not backend.is_floating(backend.namespace(mask.array), mask.dtype):
        raise TypeError(
            f"{op}: attn_mask must be bool (True = may attend) or floating (added to the "
            f"scores), got dtype {backend.dtype_name(mask.dtype)}"
        )
    if mask.device != query.device:
        raise RuntimeError(
            f"{op}: attn_mask is on device '{mask.device}' but query is on '{query.device}'"
        )
    if mask.ndim > len(shape) or any(
        m != 1 and m != s for m, s in zip(reversed(mask.shape), reversed(shape), strict=False)
    ):
        raise TinyattnError(
            f"{op}: attn_mask of shape {mask.shape} cannot be broadcast to the scores shape "
            f"{shape} (..., Tq, Tk)"
        )
    return mask if _is_bool(mask) else mask.to(backend.dtype_name(query.dtype))


def _batch_shape(q: Tensor, k: Tensor, v: Tensor) -> tuple:
    """The broadcast leading (batch) axes of q, k and v."""
    op = "scaled_dot_product_attention"
    return broadcast_shapes(op, broadcast_shapes(op, q.shape[:-2], k.shape[:-2]), v.shape[:-2])


# ------------------------------------------------------------------- memory-efficient attention
# A separate implementation of the same attention (ops.BlockwiseAttention): it never holds the
# (Tq, Tk) score matrix, and is tested against the reference above. Its tile sizes and threads
# are in `kernels`. _attention takes it when the score matrix would hold at least this many
# numbers (batch * Tq * Tk; 2**22 floats are 16 MB in float32) and neither dropout, the
# weights nor a float mask are asked for. Set it to 0 to force the block-wise path, to
# math.inf to force the plain one (the block-wise gradient is first order only).
BLOCKWISE_MIN_SCORES = 1 << 22


def _use_blockwise(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float, return_weights: bool
) -> bool:
    """Whether _attention takes the block-wise path (see above)."""
    scores_count = math.prod(_batch_shape(q, k, v)) * q.shape[-2] * k.shape[-2]
    return (
        scores_count >= BLOCKWISE_MIN_SCORES
        and dropout_p == 0.0
        and not return_weights
        and (mask is None or _is_bool(mask))
        and q.device == k.device == v.device  # else the plain path's matmul names both devices
    )


def _blockwise_attention(
    q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None, is_causal: bool, scale: float
) -> Tensor:
    """_attention through BlockwiseAttention (same results); `allowed` is a checked bool mask."""
    batch = _batch_shape(q, k, v)
    if allowed is not None and allowed.ndim < 2:
        allowed = allowed.reshape(*(1,) * (2 - allowed.ndim), *allowed.shape)  # -> (1, Tk)
    xp = backend.namespace(q.array)
    dtype = xp.result_type(q.dtype, k.dtype, v.dtype)  # as the plain path's matmuls promote
    # The Function wants equal batch axes; BroadcastTo's backward sums the gradients back.
    q, k, v = (t.to(dtype).broadcast_to(*batch, *t.shape[-2:]) for t in (q, k, v))
    tq, tk = q.shape[-2], k.shape[-2]
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
