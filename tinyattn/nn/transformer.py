"""nn layer, part 4: positional encodings and a Transformer block.

Imports `backend`, `tensor`, `functional` and the other nn parts. Invariants: attention alone is
permutation-equivariant (it sees a set, not a sequence), so order enters only through the
positional encodings added here; both encodings ADD to their input and accept (B, T, C) or (T, C).
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend
from .. import functional as F
from ..creation import arange, randn
from ..errors import TinyattnError
from ..tensor import Tensor
from .attention import KVCache, MultiHeadAttention
from .layers import Dropout, LayerNorm, Linear
from .module import Module, Parameter


def _check_positions(op: str, x: Tensor, max_len: int, dim: int) -> int:
    if x.ndim not in (2, 3) or x.shape[-1] != dim:
        raise TinyattnError(
            f"{op}: expected input (B, T, {dim}) or (T, {dim}), got shape {x.shape}"
        )
    length = x.shape[-2]
    if length > max_len:
        raise TinyattnError(f"{op}: sequence length {length} exceeds max_len={max_len}")
    return length


class SinusoidalPositionalEncoding(Module):
    """x + PE[:T] with PE[pos, 2i] = sin(pos / 10000^(2i/dim)), PE[pos, 2i+1] = cos(same).

    The table is a non-persistent buffer (recomputed, not saved), cast to x's dtype when added.
    Shapes: x (B, T, dim) or (T, dim) with T <= max_len -> same.
    """

    def __init__(self, max_len: int, dim: int) -> None:
        super().__init__()
        if max_len <= 0 or dim <= 0:
            raise TinyattnError(
                f"SinusoidalPositionalEncoding: sizes must be positive, got {max_len}, {dim}"
            )
        self.max_len, self.dim = max_len, dim
        self.register_buffer("table", self._table(max_len, dim), persistent=False)

    @staticmethod
    def _table(max_len: int, dim: int) -> Tensor:
        positions = arange(max_len, dtype="float64").reshape(max_len, 1)  # (T, 1)
        pairs = arange(0, dim, 2, dtype="float64")  # (ceil(dim/2),): the even feature indices 2i
        frequencies = (pairs * (-math.log(10000.0) / dim)).exp()  # 1 / 10000^(2i/dim)
        angles = (positions * frequencies).array  # (T, ceil(dim/2))
        xp = backend.namespace(angles)
        # The array API has sin and cos (Tensor has no need for them): a constant table.
        table = xp.stack([xp.sin(angles), xp.cos(angles)], axis=-1)  # (T, ceil(dim/2), 2)
        table = xp.reshape(table, (max_len, -1))[:, :dim]  # -> (T, dim), sin/cos interleaved
        return Tensor._from_op(xp.astype(table, xp.float32), None)

    def forward(self, x: Tensor) -> Tensor:
        length = _check_positions("SinusoidalPositionalEncoding", x, self.max_len, self.dim)
        return x + self.table[:length].to(x.dtype)  # (T, C) broadcasts over B

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, dim={self.dim}"


class LearnedPositionalEmbedding(Module):
    """x + weight[:T] with a learned (max_len, dim) table, init N(0, 0.02^2) (GPT-2's).

    Shapes: x (B, T, dim) or (T, dim) with T <= max_len -> same.
    """

    def __init__(self, max_len: int, dim: int) -> None:
        super().__init__()
        if max_len <= 0 or dim <= 0:
            raise TinyattnError(
                f"LearnedPositionalEmbedding: sizes must be positive, got {max_len}, {dim}"
            )
        self.max_len, self.dim = max_len, dim
        self.weight = Parameter((randn(max_len, dim, dtype="float64") * 0.02).to("float32"))

    def forward(self, x: Tensor) -> Tensor:
        length = _check_positions("LearnedPositionalEmbedding", x, self.max_len, self.dim)
        return x + self.weight[:length]  # (T, C) broadcasts over B

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, dim={self.dim}"


class TransformerBlock(Module):
    """Attention and an MLP, each with a residual connection and a LayerNorm.

    Post-LN (default, the original Transformer): x = LN1(x + attn(x)); x = LN2(x + mlp(x)).
    Pre-LN (norm_first=True): x = x + attn(LN1(x)); x = x + mlp(LN2(x)).
    mlp(x) = linear2(dropout(act(linear1(x)))); dropout also follows attn and mlp.
    Shapes: x (B, T, d_model) or (T, d_model) -> same.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise TinyattnError(
                f"TransformerBlock: activation must be 'relu' or 'gelu', got {activation!r}"
            )
        self.norm_first, self.activation = norm_first, activation
        self.attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.norm1 = LayerNorm(d_model)
        self.linear1 = Linear(d_model, d_ff)
        self.linear2 = Linear(d_ff, d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout = Dropout(dropout)

    def _mlp(self, x: Tensor) -> Tensor:
        hidden = self.linear1(x)  # (..., C) -> (..., d_ff)
        hidden = F.relu(hidden) if self.activation == "relu" else F.gelu(hidden)
        return self.linear2(self.dropout(hidden))  # (..., d_ff) -> (..., C)

    def forward(
        self,
        x: Tensor,
        mask: Any = None,
        is_causal: bool = False,
        key_padding_mask: Any = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """mask: bool, True = may attend; key_padding_mask (B, T): bool, True = padding;
        cache: the attention's KVCache when decoding position by position (is_causal=True)."""
        masks = {"mask": mask, "is_causal": is_causal, "key_padding_mask": key_padding_mask}
        if cache is not None:
            masks["cache"] = cache
        if self.norm_first:
            x = x + self.dropout(self.attn(self.norm1(x), **masks))
            return x + self.dropout(self._mlp(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.attn(x, **masks)))
        return self.norm2(x + self.dropout(self._mlp(x)))


__all__ = ["LearnedPositionalEmbedding", "SinusoidalPositionalEncoding", "TransformerBlock"]
