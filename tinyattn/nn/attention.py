"""nn layer, part 3: multi-head attention.

Imports `tensor`, `functional` and the other nn parts. Invariants: queries, keys and values are
three Linear(d_model, d_model) maps; heads are a split of the projected width (head h owns the
columns h*D .. (h+1)*D - 1, i.e. the row block h of each projection's weight), so one big
projection then a split equals H small per-head projections; inputs are batch-first (B, T, C)
or unbatched (T, C); masks are bool, True = may attend.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from .. import functional as F
from ..tensor import Tensor
from .layers import Linear
from .module import Module


class MultiHeadAttention(Module):
    """out = out_proj(concat over heads h of softmax(Q_h K_h^T / sqrt(D)) V_h).

    Q = q_proj(query), K = k_proj(key), V = v_proj(value), each split into H heads of width
    D = d_model / H. Self-attention when key and value are omitted; cross-attention when key
    (and value, which defaults to key) come from another sequence.
    Shapes: query (B, Tq, C) or (Tq, C); key/value (B, Tk, C) or (Tk, C);
    mask (Tq, Tk), (B, Tq, Tk) or (B, H, Tq, Tk), each axis possibly 1 ->
    out (B, Tq, C) and, with need_weights, weights (B, H, Tq, Tk) (no B when unbatched).
    """

    def __init__(
        self, d_model: int, num_heads: int, bias: bool = True, dropout: float = 0.0
    ) -> None:
        super().__init__()
        if not isinstance(num_heads, int) or num_heads <= 0:
            raise ValueError(
                f"MultiHeadAttention: num_heads must be a positive int, got {num_heads!r}"
            )
        if not isinstance(d_model, int) or d_model <= 0 or d_model % num_heads:
            raise ValueError(
                f"MultiHeadAttention: d_model={d_model!r} must be a positive multiple of "
                f"num_heads={num_heads} (each head gets d_model / num_heads features)"
            )
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"MultiHeadAttention: dropout must be in [0, 1], got {dropout}")
        self.d_model, self.num_heads, self.dropout = d_model, num_heads, dropout
        self.head_dim = d_model // num_heads
        self.q_proj = Linear(d_model, d_model, bias=bias)
        self.k_proj = Linear(d_model, d_model, bias=bias)
        self.v_proj = Linear(d_model, d_model, bias=bias)
        self.out_proj = Linear(d_model, d_model, bias=bias)

    def _check(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        op = "MultiHeadAttention"
        if query.ndim not in (2, 3):
            raise ValueError(f"{op}: query must be (B, T, C) or (T, C), got shape {query.shape}")
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.ndim != query.ndim:
                raise ValueError(
                    f"{op}: {name} of shape {t.shape} and query of shape {query.shape} must both "
                    "be batched (B, T, C) or both unbatched (T, C)"
                )
            if t.shape[-1] != self.d_model:
                raise ValueError(
                    f"{op}: {name} of shape {t.shape} has width {t.shape[-1]}, "
                    f"but d_model is {self.d_model}"
                )
        if key.shape[:-1] != value.shape[:-1]:
            raise ValueError(
                f"{op}: key of shape {key.shape} and value of shape {value.shape} must have the "
                "same batch and length"
            )
        if query.ndim == 3 and key.shape[0] != query.shape[0]:
            raise ValueError(
                f"{op}: query of shape {query.shape} and key of shape {key.shape} have different "
                "batch sizes"
            )

    def _check_mask(self, mask: Tensor, batch: int, length_q: int, length_k: int) -> None:
        """Name the user's mask shape (not the per-head one) when it does not fit the scores."""
        op = "MultiHeadAttention"
        if backend.dtype_name(mask.dtype) != "bool":
            raise TypeError(
                f"{op}: mask must be bool (True = may attend), got dtype "
                f"{backend.dtype_name(mask.dtype)}"
            )
        full = (batch, self.num_heads, length_q, length_k)
        # A 3-D mask is (B, Tq, Tk), shared by the heads; 2-D and lower align with the end.
        expected = full if mask.ndim == 4 else (batch, length_q, length_k)[3 - mask.ndim :]
        if mask.ndim > 4 or any(
            m != 1 and m != n for m, n in zip(mask.shape, expected, strict=True)
        ):
            raise ValueError(
                f"{op}: mask of shape {mask.shape} cannot be broadcast to the attention scores "
                f"(B, H, Tq, Tk) = {full}; expected (Tq, Tk), (B, Tq, Tk) or (B, H, Tq, Tk), "
                "any axis may be 1"
            )

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
    ) -> Tensor | tuple[Tensor, Tensor]:
        key = query if key is None else key
        value = key if value is None else value
        self._check(query, key, value)
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = (
                t.expand_dims(0) for t in (query, key, value)
            )  # (T, C) -> (1, T, C)
        if mask is not None and not isinstance(mask, Tensor):
            mask = Tensor(mask, device=query.device)  # a NumPy or nested-list bool mask
        if mask is not None:
            self._check_mask(mask, query.shape[0], query.shape[1], key.shape[1])
        if mask is not None and mask.ndim == 3:
            mask = mask.expand_dims(1)  # (B, Tq, Tk) -> (B, 1, Tq, Tk): the same for every head
        batch, length_q, width = query.shape
        q = self._split_heads(self.q_proj(query))  # (B, Tq, C) -> (B, H, Tq, D)
        k = self._split_heads(self.k_proj(key))  # (B, Tk, C) -> (B, H, Tk, D)
        v = self._split_heads(self.v_proj(value))  # (B, Tk, C) -> (B, H, Tk, D)
        # Asking for the weights only when they are wanted lets long sequences take the
        # block-wise path, which never forms the (Tq, Tk) weights.
        result = F.scaled_dot_product_attention(
            q,
            k,
            v,
            mask=mask,
            is_causal=is_causal,
            dropout_p=self.dropout if self.training else 0.0,
            return_weights=need_weights,
        )  # out (B, H, Tq, D), and with need_weights the weights (B, H, Tq, Tk)
        out, weights = result if need_weights else (result, None)
        out = out.permute(0, 2, 1, 3)  # (B, H, Tq, D) -> (B, Tq, H, D)
        out = self.out_proj(out.reshape(batch, length_q, width))  # (B, Tq, H, D) -> (B, Tq, C)
        if unbatched:
            out = out.squeeze(0)  # (1, Tq, C) -> (Tq, C): drop the B = 1 axis again
            weights = weights.squeeze(0) if need_weights else None
        return (out, weights) if need_weights else out

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, num_heads={self.num_heads}, dropout={self.dropout}"


__all__ = ["MultiHeadAttention"]
