"""nn layer, part 3: multi-head attention.

Imports `backend`, `tensor`, `functional` and the other nn parts. Invariants: queries, keys and
values are three Linear(d_model, d_model) maps; heads are a split of the projected width (head h
owns the columns h*D .. (h+1)*D - 1, i.e. the row block h of each projection's weight), so one big
projection then a split equals H small per-head projections; inputs are batch-first (B, T, C) or
unbatched (T, C); `mask` is bool, True = may attend (tinyattn's one polarity, the same as PyTorch's
F.scaled_dot_product_attention), while `key_padding_mask` keeps PyTorch's meaning, True = padding
to ignore. MultiheadAttention (lower-case h) is PyTorch's module, layout and masks included, so its
state_dict loads into torch.nn.MultiheadAttention and back. A KVCache keeps fixed-size buffers and
a position tensor, never Python numbers, so a per-token step that uses it can be `ta.compile`d.
"""

from __future__ import annotations

import math
from typing import Any

from .. import autograd, backend
from .. import functional as F
from ..creation import arange, tensor, zeros
from ..errors import TinyattnError
from ..methods.common import where
from ..ops import Concat, HeadsAttention
from ..tensor import Tensor
from .layers import Linear, NonDynamicallyQuantizableLinear, uniform
from .module import Module, Parameter

# Whether MultiHeadAttention may compute its heads as one `ops.HeadsAttention` node (see
# `MultiHeadAttention._fuses`). Set it to False to record the reference's ops instead: the split
# and merge of every head, the products, the mask and the softmax, each a node of its own.
FUSED_ATTENTION = True


def _check_sizes(op: str, name: str, width: Any, num_heads: Any, dropout: Any) -> None:
    """Both attention modules' size checks: heads a positive int dividing the width, dropout a
    probability."""
    if not isinstance(num_heads, int) or num_heads <= 0:
        raise TinyattnError(f"{op}: num_heads must be a positive int, got {num_heads!r}")
    if not isinstance(width, int) or width <= 0 or width % num_heads:
        raise TinyattnError(
            f"{op}: {name}={width!r} must be a positive multiple of num_heads={num_heads} "
            f"(each head gets {name} / num_heads features)"
        )
    if not 0.0 <= dropout <= 1.0:
        raise TinyattnError(f"{op}: dropout must be in [0, 1], got {dropout}")


class KVCache:
    """The keys and values of the positions a self-attention layer has seen, for decoding.

    Made by ``attn.new_cache(batch, max_len)``; ``attn(x, is_causal=True, cache=cache)`` writes
    the new positions' keys and values after the cached ones and lets each new position attend
    to the cached ones and itself, so a decoder that feeds one new token per call does one row
    of projections per layer instead of the whole prefix again.

    Everything is fixed-size tensors, so a per-token step that uses the cache records and
    replays under ``ta.compile``: the buffers hold ``max_len`` rows from the start (unwritten
    rows are masked out), the number of positions written is the tensor ``position`` (updated
    in place, never read into Python by the attention), and the rows to write and the keys to
    attend are looked up in two constant tables with it. Growing buffers (concatenation) would
    change shapes on every token, and a Python position would change the recorded ops.
    Shapes: keys and values (B, H, max_len, D); position (1,) int64.
    """

    def __init__(
        self, batch: int, num_heads: int, max_len: int, head_dim: int, dtype: Any, device: Any
    ) -> None:
        for name, size in (("batch", batch), ("max_len", max_len)):
            if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
                raise TinyattnError(f"KVCache: {name} must be a positive int, got {size!r}")
        self.keys = zeros(batch, num_heads, max_len, head_dim, dtype=dtype, device=device)
        self.values = zeros(batch, num_heads, max_len, head_dim, dtype=dtype, device=device)
        self.position = zeros(1, dtype="int64", device=device)
        rows = arange(max_len, device=device).reshape(max_len, 1)  # (L, 1)
        columns = arange(max_len, device=device)  # (L,)
        self._row_at = rows == columns  # (L, L): row p is True at key p only (where to write)
        self._keys_upto = rows >= columns  # (L, L): row p is True at keys 0..p (what p sees)
        self.max_len = max_len

    @property
    def batch(self) -> int:
        return self.keys.shape[0]

    @property
    def device(self) -> str:
        return self.keys.device

    def __len__(self) -> int:
        """The number of positions written (reads the position tensor: not inside a step)."""
        return int(self.position)

    def reset(self) -> KVCache:
        """Forget every position (in place, so a compiled step keeps using these buffers)."""
        with autograd.no_grad():
            self.position.zero_()
            self.keys.zero_()
            self.values.zero_()
        return self

    def append(self, keys: Tensor, values: Tensor) -> Tensor:
        """Write keys and values (B, H, T, D) at the next T positions; return the bool mask
        (T, max_len) of the keys each new position may attend (the cached ones and itself)."""
        length = keys.shape[2]
        self._check_room(length)
        positions = self.position + arange(length, device=self.device)  # (T,)
        stored_keys, stored_values = self.keys, self.values
        for i in range(length):  # row i goes to position p + i: a select, so no shape changes
            at = self._row_at[positions[i : i + 1]].reshape(1, 1, self.max_len, 1)  # (1,1,L,1)
            stored_keys = where(at, keys[:, :, i : i + 1], stored_keys)  # (B, H, L, D)
            stored_values = where(at, values[:, :, i : i + 1], stored_values)
        self.keys.copy_(stored_keys)
        self.values.copy_(stored_values)
        self.position.add_(length)
        return self._keys_upto[positions]  # (T, L)

    def _check_room(self, length: int) -> None:
        """Refuse an append past max_len. The position is read straight from its array, which
        a compiled step's recording allows (a check, no branch); a replay does not run this,
        and the table lookup there refuses the out-of-range position with an IndexError."""
        written = int(backend.to_numpy(self.position.array)[0])
        if written + length > self.max_len:
            raise TinyattnError(
                f"KVCache: cannot append {length} position(s) to a cache holding {written} of "
                f"max_len={self.max_len}; make a longer cache or reset() it"
            )


def _stackable(layers: tuple) -> bool:
    """Whether calling each layer is F.linear with its own weight and bias, and their weights
    (and biases) can be stacked into one: plain Linear modules, no hooks, one dtype, each with
    a bias or none. (Weights on different devices fail in either form.)"""
    if any(type(layer) is not Linear or layer._active_hooks() is not None for layer in layers):
        return False
    biases = [layer.bias is not None for layer in layers]
    if any(biases) and not all(biases):
        return False
    dtype = layers[0].weight.dtype
    return all(
        layer.weight.dtype == dtype and (layer.bias is None or layer.bias.dtype == dtype)
        for layer in layers
    )


class MultiHeadAttention(Module):
    """out = out_proj(concat over heads h of softmax(Q_h K_h^T / sqrt(D)) V_h).

    Q = q_proj(query), K = k_proj(key), V = v_proj(value), each split into H heads of width
    D = d_model / H. Self-attention when key and value are omitted; cross-attention when key
    (and value, which defaults to key) come from another sequence.
    Shapes: query (B, Tq, C) or (Tq, C); key/value (B, Tk, C) or (Tk, C);
    mask (Tq, Tk), (B, Tq, Tk) or (B, H, Tq, Tk), each axis possibly 1, bool, True = may
    attend; key_padding_mask (B, Tk) (or (Tk,) unbatched), bool, True = padding to ignore
    (PyTorch's meaning) -> out (B, Tq, C) and, with need_weights, weights (B, H, Tq, Tk)
    (no B when unbatched). Pass a PyTorch-style padding mask as key_padding_mask, never as
    mask: a 2-D mask is (Tq, Tk) whatever B is, and one with a query row that may attend no
    key is refused (it is a padding mask or PyTorch's inverted attn_mask polarity).
    Decoding: with ``cache=attn.new_cache(B, max_len)`` and is_causal=True (under no_grad), the
    query's positions are appended to the cache and attend to every cached position and to
    themselves; weights are then (B, H, Tq, max_len). See KVCache.
    """

    def __init__(
        self, d_model: int, num_heads: int, bias: bool = True, dropout: float = 0.0
    ) -> None:
        super().__init__()
        _check_sizes("MultiHeadAttention", "d_model", d_model, num_heads, dropout)
        self.d_model, self.num_heads, self.dropout = d_model, num_heads, dropout
        self.head_dim = d_model // num_heads
        self.q_proj = Linear(d_model, d_model, bias=bias)
        self.k_proj = Linear(d_model, d_model, bias=bias)
        self.v_proj = Linear(d_model, d_model, bias=bias)
        self.out_proj = Linear(d_model, d_model, bias=bias)

    def _check(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        """The inputs: float tensors of matching rank, width d_model and batch and length."""
        op = "MultiHeadAttention"
        inputs = {"query": query, "key": key, "value": value}
        for name, t in inputs.items():
            if not isinstance(t, Tensor):
                raise TypeError(f"{op}: {name} must be a Tensor, got {type(t).__name__}")
        for t in {id(t): t for t in inputs.values()}.values():  # self-attention: one tensor
            backend.check_floating(op, t.array)
        if query.ndim not in (2, 3):
            raise TinyattnError(f"{op}: query must be (B, T, C) or (T, C), got shape {query.shape}")
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.ndim != query.ndim:
                raise TinyattnError(
                    f"{op}: {name} of shape {t.shape} and query of shape {query.shape} must both "
                    "be batched (B, T, C) or both unbatched (T, C)"
                )
            if t.shape[-1] != self.d_model:
                raise TinyattnError(
                    f"{op}: {name} of shape {t.shape} has width {t.shape[-1]}, "
                    f"but d_model is {self.d_model}"
                )
        if key.shape[:-1] != value.shape[:-1]:
            raise TinyattnError(
                f"{op}: key of shape {key.shape} and value of shape {value.shape} must have the "
                "same batch and length"
            )
        if query.ndim == 3 and key.shape[0] != query.shape[0]:
            raise TinyattnError(
                f"{op}: query of shape {query.shape} and key of shape {key.shape} have different "
                "batch sizes"
            )

    def _check_mask(
        self, mask: Tensor, batch: int, length_q: int, length_k: int, device: str
    ) -> None:
        """The mask: bool, on the inputs' device, its shape (named as the user gave it, not the
        per-head one) broadcastable to the scores."""
        op = "MultiHeadAttention"
        if backend.dtype_name(mask.dtype) != "bool":
            raise TypeError(
                f"{op}: mask must be bool (True = may attend), got dtype "
                f"{backend.dtype_name(mask.dtype)}"
            )
        if mask.device != device:
            raise RuntimeError(
                f"{op}: mask is on device '{mask.device}' but the inputs are on '{device}'"
            )
        full = (batch, self.num_heads, length_q, length_k)
        # A 3-D mask is (B, Tq, Tk), shared by the heads; 2-D and lower align with the end.
        expected = full if mask.ndim == 4 else (batch, length_q, length_k)[3 - mask.ndim :]
        if mask.ndim > 4 or any(
            m != 1 and m != n for m, n in zip(mask.shape, expected, strict=True)
        ):
            raise TinyattnError(
                f"{op}: mask of shape {mask.shape} cannot be broadcast to the attention scores "
                f"(B, H, Tq, Tk) = {full}; expected (Tq, Tk), (B, Tq, Tk) or (B, H, Tq, Tk), "
                "any axis may be 1"
            )

    def _check_mask_rows(self, mask: Tensor) -> None:
        """A shared (Tq, Tk) mask in which some query may attend nothing is a misuse: a
        PyTorch key-padding mask (B, Tk) read as (Tq, Tk) when B == Tq, or PyTorch's
        attn_mask polarity (True = blocked, as torch.triu(..., diagonal=1))."""
        xp = backend.namespace(mask.array)
        if mask.ndim == 2 and mask.shape[-1] > 0 and bool(xp.any(~xp.any(mask.array, axis=-1))):
            raise TinyattnError(
                f"MultiHeadAttention: mask of shape {mask.shape} has a query row with no key "
                "allowed; mask is (Tq, Tk) with True = may attend. For a padding mask (B, Tk) "
                "with True = padding, pass key_padding_mask=; for PyTorch's attn_mask (True = "
                "blocked), pass its negation"
            )

    def _padding_allowed(self, key_padding_mask: Any, batch: int, length_k: int, device: str):
        """key_padding_mask (B, Tk), True = ignore, as the (B, 1, 1, Tk) may-attend tensor."""
        op = "MultiHeadAttention"
        if not isinstance(key_padding_mask, Tensor):
            key_padding_mask = tensor(key_padding_mask, device=device)
        if backend.dtype_name(key_padding_mask.dtype) != "bool":
            raise TypeError(
                f"{op}: key_padding_mask must be bool (True = padding to ignore), got dtype "
                f"{backend.dtype_name(key_padding_mask.dtype)}"
            )
        if key_padding_mask.shape != (batch, length_k):
            raise TinyattnError(
                f"{op}: key_padding_mask of shape {key_padding_mask.shape} must be (B, Tk) = "
                f"{(batch, length_k)} (or (Tk,) for unbatched inputs)"
            )
        if key_padding_mask.device != device:
            raise RuntimeError(
                f"{op}: key_padding_mask is on '{key_padding_mask.device}' but the inputs are "
                f"on '{device}'"
            )
        return (~key_padding_mask).reshape(batch, 1, 1, length_k)

    def _split_heads(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        x = x.reshape(batch, length, self.num_heads, self.head_dim)  # (B, T, C) -> (B, T, H, D)
        return x.permute(0, 2, 1, 3)  # (B, T, H, D) -> (B, H, T, D)

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        mask: Any = None,
        is_causal: bool = False,
        need_weights: bool = False,
        key_padding_mask: Any = None,
        cache: KVCache | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        if cache is not None:
            extra = {"key": key, "value": value, "mask": mask, "key_padding_mask": key_padding_mask}
            return self._cached(query, cache, is_causal, need_weights, extra)
        key = query if key is None else key
        value = key if value is None else value
        self._check(query, key, value)
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = (
                t.expand_dims(0) for t in (query, key, value)
            )  # (T, C) -> (1, T, C)
        if mask is not None and not isinstance(mask, Tensor):
            mask = tensor(mask, device=query.device)  # a NumPy or nested-list bool mask
        if mask is not None:
            self._check_mask(mask, query.shape[0], query.shape[1], key.shape[1], query.device)
            self._check_mask_rows(mask)
        if mask is not None and mask.ndim == 3:
            mask = mask.expand_dims(1)  # (B, Tq, Tk) -> (B, 1, Tq, Tk): the same for every head
        if key_padding_mask is not None:
            if unbatched and isinstance(key_padding_mask, Tensor) and key_padding_mask.ndim == 1:
                key_padding_mask = key_padding_mask.expand_dims(0)  # (Tk,) -> (1, Tk)
            elif unbatched and not isinstance(key_padding_mask, Tensor):
                key_padding_mask = tensor(key_padding_mask, device=query.device).reshape(1, -1)
            allowed = self._padding_allowed(
                key_padding_mask, query.shape[0], key.shape[1], query.device
            )  # (B, 1, 1, Tk): True = may attend
            mask = allowed if mask is None else mask & allowed
        batch, length_q, width = query.shape
        if self._fuses(query, key, mask, need_weights):  # the same values, as one node
            out, weights = self._fused(query, key, value, mask, is_causal), None
        else:
            q = self._split_heads(self.q_proj(query))  # (B, Tq, C) -> (B, H, Tq, D)
            k = self._split_heads(self.k_proj(key))  # (B, Tk, C) -> (B, H, Tk, D)
            v = self._split_heads(self.v_proj(value))  # (B, Tk, C) -> (B, H, Tk, D)
            # Every argument was checked above, so the trusting inner attention is called.
            # Asking for the weights only when they are wanted lets long sequences take the
            # block-wise path, which never forms the (Tq, Tk) weights.
            result = F._attention(
                q, k, v, mask, self._dropout_p(), is_causal, self._scale(), need_weights
            )  # out (B, H, Tq, D), and with need_weights the weights (B, H, Tq, Tk)
            out, weights = result if need_weights else (result, None)
            out = out.permute(0, 2, 1, 3)  # (B, H, Tq, D) -> (B, Tq, H, D)
            out = out.reshape(batch, length_q, width)  # (B, Tq, H, D) -> (B, Tq, C)
        out = self.out_proj(out)  # (B, Tq, C)
        if unbatched:
            out = out.squeeze(0)  # (1, Tq, C) -> (Tq, C): drop the B = 1 axis again
            weights = weights.squeeze(0) if need_weights else None
        return (out, weights) if need_weights else out

    def _fuses(self, query: Tensor, key: Tensor, mask: Tensor | None, need_weights: bool) -> bool:
        """Whether `ops.HeadsAttention` computes this call: the reference's values as one node
        (no weights asked for, no dropout, a bool mask or none, float32 or float64, and fewer
        scores than the block-wise path's threshold). `FUSED_ATTENTION` = False turns it off."""
        scores = query.shape[0] * self.num_heads * query.shape[1] * key.shape[1]
        return (
            FUSED_ATTENTION
            and not need_weights
            and self._dropout_p() == 0.0
            and (mask is None or F._is_bool(mask))
            and backend.dtype_name(query.dtype) in ("float32", "float64")
            and 0 < scores < F.BLOCKWISE_MIN_SCORES
        )

    def _fused(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, is_causal: bool
    ) -> Tensor:
        """The attention of every head by `ops.HeadsAttention`, on the projections as they are
        (heads side by side, no split or merge). Shapes: (B, Tq, C), (B, Tk, C) -> (B, Tq, C)."""
        allowed = mask
        if is_causal:
            causal = F.causal_mask(query.shape[1], key.shape[1], device=query.device)
            allowed = causal if allowed is None else allowed & causal
        projected, packed = self._projected(query, key, value)
        masks = () if allowed is None else (allowed,)
        return HeadsAttention.apply(
            *projected, *masks, heads=self.num_heads, scale=self._scale(), packed=packed
        )

    def _projected(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[tuple, bool]:
        """(q, k, v) projected, and False; or for self-attention through three plain Linear
        layers (`_stackable`: no hooks, one dtype, all with a bias or none), ([q | k | v],) and
        True: one product of query with the weights stacked (PyTorch's in_proj_weight layout).
        The same values: each block of the product is that projection's product. Backward
        then takes one product for dL/dquery and one for the stacked dL/dW, not three each,
        and adds no three gradients of query together. Shapes: (B, T, C) -> 3 x (B, T, C) or
        (B, T, 3C)."""
        layers = (self.q_proj, self.k_proj, self.v_proj)
        if not (query is key and key is value and _stackable(layers)):
            return tuple(layer(x) for layer, x in zip(layers, (query, key, value))), False
        for layer in layers:  # a compiled step depends on them as if they had been called
            autograd.note_mode(layer, "_replay_key")
        weight = Concat.apply(*[layer.weight for layer in layers], axis=0)  # (3C, C)
        bias = layers[0].bias
        if bias is not None:
            bias = Concat.apply(*[layer.bias for layer in layers], axis=0)  # (3C,)
        return (F.linear(query, weight, bias),), True

    def _dropout_p(self) -> float:
        return self.dropout if self.training else 0.0

    def _scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim)

    def new_cache(self, batch: int, max_len: int, dtype: Any = None, device: Any = None) -> KVCache:
        """An empty KVCache for decoding `batch` sequences of up to `max_len` positions, in
        the dtype and on the device of the projections unless given."""
        weight = self.k_proj.weight
        dtype = backend.dtype_name(weight.dtype) if dtype is None else dtype
        device = weight.device if device is None else device
        return KVCache(batch, self.num_heads, max_len, self.head_dim, dtype, device)

    def _cached(
        self, query: Tensor, cache: KVCache, is_causal: bool, need_weights: bool, extra: dict
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Self-attention of the new positions `query` over the cache and themselves."""
        self._check_cache(query, cache, is_causal, extra)
        unbatched = query.ndim == 2
        if unbatched:
            query = query.expand_dims(0)  # (T, C) -> (1, T, C)
        batch, length, width = query.shape
        q = self._split_heads(self.q_proj(query))  # (B, T, C) -> (B, H, T, D)
        k = self._split_heads(self.k_proj(query))
        v = self._split_heads(self.v_proj(query))
        allowed = cache.append(k, v).reshape(1, 1, length, cache.max_len)  # (1, 1, T, L)
        result = F._attention(
            q,
            cache.keys,
            cache.values,
            allowed,
            self._dropout_p(),
            False,
            self._scale(),
            need_weights,
        )  # out (B, H, T, D), and with need_weights the weights (B, H, T, L)
        out, weights = result if need_weights else (result, None)
        out = out.permute(0, 2, 1, 3).reshape(batch, length, width)  # (B, H, T, D) -> (B, T, C)
        out = self.out_proj(out)
        if unbatched:
            out = out.squeeze(0)  # (1, T, C) -> (T, C)
            weights = weights.squeeze(0) if need_weights else None
        return (out, weights) if need_weights else out

    def _check_cache(self, query: Tensor, cache: Any, is_causal: bool, extra: dict) -> None:
        op = "MultiHeadAttention"
        if not isinstance(cache, KVCache):
            raise TypeError(f"{op}: cache must be a KVCache (attn.new_cache), got {type(cache)}")
        given = [name for name, value in extra.items() if value is not None]
        if given or not is_causal:
            raise TinyattnError(
                f"{op}: a KV cache serves causal self-attention only (each new position sees "
                "the cached ones and itself): pass is_causal=True and no "
                + ("key, value, mask or key_padding_mask" if not given else ", ".join(given))
            )
        if autograd.is_grad_enabled() and (
            query.requires_grad or any(p.requires_grad for p in self.parameters())
        ):
            raise RuntimeError(
                f"{op}: a KV cache is written in place and keeps no graph; decode under "
                "ta.no_grad() (train with the full sequence and is_causal=True)"
            )
        self._check(query, query, query)
        batch = query.shape[0] if query.ndim == 3 else 1
        expected = (batch, self.num_heads, cache.max_len, self.head_dim)
        if cache.keys.shape != expected:
            raise TinyattnError(
                f"{op}: a cache of keys {cache.keys.shape} does not fit query of shape "
                f"{query.shape} with {self.num_heads} heads of {self.head_dim} (expected "
                f"(B, H, max_len, D) = {expected})"
            )
        if cache.device != query.device or cache.keys.dtype != query.dtype:
            raise RuntimeError(
                f"{op}: the cache is {backend.dtype_name(cache.keys.dtype)} on "
                f"'{cache.device}' but query is {backend.dtype_name(query.dtype)} on "
                f"'{query.device}'"
            )

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, num_heads={self.num_heads}, dropout={self.dropout}"


class MultiheadAttention(Module):
    """PyTorch's torch.nn.MultiheadAttention: the same parameters (in_proj_weight (3E, E) holding
    the q, k, v projections stacked, in_proj_bias (3E,), out_proj), the same initialisation
    (Xavier-uniform in_proj_weight, zero biases), the same arguments and mask meanings.

    out = out_proj(concat over heads of softmax(Q_h K_h^T / sqrt(D) + M) V_h), where M is -inf
    where a bool attn_mask is True (True = NOT allowed, PyTorch's polarity for this module) or
    key_padding_mask is True (padding), and the values of float masks (added).
    Shapes: query (L, N, E) (or (N, L, E) with batch_first=True, or (L, E) unbatched), key and
    value (S, N, E) likewise; attn_mask (L, S) or (N * H, L, S); key_padding_mask (N, S) ->
    out like query and, with need_weights, weights (N, L, S) averaged over heads
    (average_attn_weights=True) or (N, H, L, S).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        op = "MultiheadAttention"
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError(f"{op}: add_bias_kv and add_zero_attn are not supported")
        if kdim not in (None, embed_dim) or vdim not in (None, embed_dim):
            raise NotImplementedError(
                f"{op}: kdim/vdim different from embed_dim are not supported (got kdim={kdim}, "
                f"vdim={vdim}, embed_dim={embed_dim})"
            )
        _check_sizes(op, "embed_dim", embed_dim, num_heads, dropout)
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.head_dim = embed_dim // num_heads
        self.batch_first = batch_first
        self.kdim = self.vdim = embed_dim
        self._qkv_same_embed_dim = True
        bound = math.sqrt(6.0 / (embed_dim + 3 * embed_dim))  # Xavier: fan_in E, fan_out 3E
        self.in_proj_weight = Parameter(uniform((3 * embed_dim, embed_dim), bound))
        self.register_parameter("in_proj_bias", Parameter(zeros(3 * embed_dim)) if bias else None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias)
        if bias:
            self.out_proj.bias = Parameter(zeros(embed_dim))
        if dtype is not None:
            self.to(backend.dtype_name(dtype) if not isinstance(dtype, str) else dtype)
        if device is not None:
            self.to(device)

    def _additive(self, name: str, mask: Any, shape: tuple, scores: Tensor) -> Tensor | None:
        """A bool (True = blocked) or float mask as a float Tensor to add to the scores."""
        if mask is None:
            return None
        if not isinstance(mask, Tensor):
            mask = tensor(mask, device=scores.device)
        if mask.shape != shape:
            raise TinyattnError(f"MultiheadAttention: {name} of shape {mask.shape} must be {shape}")
        xp = backend.namespace(mask.array)
        if backend.dtype_name(mask.dtype) == "bool":
            zero = xp.zeros((), dtype=scores.dtype, device=scores.array.device)
            return where(mask, -math.inf, scores.constant(zero))
        if not backend.is_floating(xp, mask.dtype):
            raise TypeError(
                f"MultiheadAttention: {name} must be bool or floating, got "
                f"{backend.dtype_name(mask.dtype)}"
            )
        return mask.to(backend.dtype_name(scores.dtype))

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Any = None,
        need_weights: bool = True,
        attn_mask: Any = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        if is_causal and attn_mask is None:
            raise RuntimeError(
                "MultiheadAttention: is_causal is a hint that attn_mask is the causal mask; pass "
                "attn_mask (as PyTorch requires)"
            )
        unbatched = query.ndim == 2
        query, key, value, key_padding_mask = self._batch_first(query, key, value, key_padding_mask)
        batch, length_q, width = query.shape
        q, k, v = self._project(query, key, value)  # 3 x (N, H, T, D)
        scores = (q * (1.0 / math.sqrt(self.head_dim))) @ k.mT  # (N, H, L, S)
        scores = self._masked(scores, attn_mask, key_padding_mask)
        weights = F.softmax(scores, dim=-1)
        if self.training and self.dropout > 0.0:
            weights = F.dropout(weights, self.dropout, training=True)
        out = (weights @ v).permute(0, 2, 1, 3).reshape(batch, length_q, width)
        out = self.out_proj(out)  # (N, L, E)
        if unbatched:
            out = out.squeeze(0)
        elif not self.batch_first:
            out = out.swapaxes(0, 1)  # (N, L, E) -> (L, N, E)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(axis=1)  # (N, H, L, S) -> (N, L, S)
        return out, weights.squeeze(0) if unbatched else weights

    def _batch_first(self, query: Tensor, key: Tensor, value: Tensor, padding: Any) -> tuple:
        """Check the inputs and bring them to (N, T, E), with the padding mask to (N, S)."""
        op = "MultiheadAttention"
        if query.ndim not in (2, 3):
            raise TinyattnError(f"{op}: query must be 2-D or 3-D, got shape {query.shape}")
        for name, t in (("key", key), ("value", value)):
            if t.ndim != query.ndim or t.shape[-1] != self.embed_dim:
                raise TinyattnError(
                    f"{op}: {name} of shape {t.shape} does not match query of shape "
                    f"{query.shape} and embed_dim {self.embed_dim}"
                )
        if query.ndim == 2:
            query, key, value = (t.expand_dims(0) for t in (query, key, value))  # (1, L, E)
            if padding is not None:
                padding = tensor(padding, device=query.device).reshape(1, -1)
        elif not self.batch_first:  # (L, N, E) -> (N, L, E)
            query, key, value = (t.swapaxes(0, 1) for t in (query, key, value))
        if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
            raise TinyattnError(f"{op}: query, key and value disagree in batch or length")
        return query, key, value, padding

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> list[Tensor]:
        """q, k, v from the three row blocks of in_proj_weight: (N, T, E) -> (N, H, T, D)."""
        w, b, width = self.in_proj_weight, self.in_proj_bias, self.embed_dim
        projected = []
        for index, x in enumerate((query, key, value)):
            rows = slice(index * width, (index + 1) * width)
            y = F.linear(x, w[rows], None if b is None else b[rows])  # (N, T, E)
            y = y.reshape(x.shape[0], x.shape[1], self.num_heads, self.head_dim)  # (N, T, H, D)
            projected.append(y.permute(0, 2, 1, 3))  # (N, T, H, D) -> (N, H, T, D)
        return projected

    def _masked(self, scores: Tensor, attn_mask: Any, padding: Any) -> Tensor:
        """Add attn_mask ((L, S) or (N*H, L, S)) and the padding mask ((N, S)) to the scores."""
        batch, heads, length_q, length_k = scores.shape
        if attn_mask is not None:
            if not isinstance(attn_mask, Tensor):
                attn_mask = tensor(attn_mask, device=scores.device)
            attn_shape = (
                (length_q, length_k) if attn_mask.ndim == 2 else (batch * heads, length_q, length_k)
            )
            added = self._additive("attn_mask", attn_mask, attn_shape, scores)
            if added.ndim == 3:
                added = added.reshape(batch, heads, length_q, length_k)
            scores = scores + added
        if padding is not None:
            added = self._additive("key_padding_mask", padding, (batch, length_k), scores)
            scores = scores + added.reshape(batch, 1, 1, length_k)
        return scores

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, dropout={self.dropout}, "
            f"batch_first={self.batch_first}"
        )


__all__ = ["KVCache", "MultiHeadAttention", "MultiheadAttention"]
