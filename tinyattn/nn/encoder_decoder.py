"""nn layer, part 5: PyTorch's encoder-decoder Transformer modules.

``Transformer``, ``TransformerEncoder(Layer)`` and ``TransformerDecoder(Layer)`` with PyTorch's
arguments, defaults, submodule names and masks, built on ``nn.MultiheadAttention`` (PyTorch's
packed ``in_proj_weight`` layout), so their state dicts load into torch.nn's and back. Imports
`tensor`, `creation`, `nn.functional` and the other nn parts. Invariants: masks keep PyTorch's
meanings (a bool ``*_mask`` is True where attention is NOT allowed, a float one is added to the
scores; a ``*_key_padding_mask`` is True at padding); ``is_causal`` is only a hint that the mask
given is the causal one (the mask is what is applied, as in PyTorch); inputs are (T, N, E), or
(N, T, E) with batch_first=True, or unbatched (T, E).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from ..creation import full
from ..errors import TinyattnError
from ..tensor import Tensor
from . import functional as F
from . import init
from .attention import MultiheadAttention
from .layers import Dropout, LayerNorm, Linear, _place
from .module import Module, ModuleList

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _activation(op: str, activation: str | Callable[[Tensor], Tensor]) -> Callable:
    """PyTorch's ``activation=``: "relu", "gelu" or any callable (a function or a module)."""
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise RuntimeError(f"{op}: activation should be relu/gelu, not {activation}")
        return _ACTIVATIONS[activation]
    if not callable(activation):
        raise TypeError(f"{op}: activation must be 'relu', 'gelu' or a callable")
    return activation


class _FeedForward(Module):
    """The parts every layer shares: linear1, dropout, linear2 and the activation between.

    Not a module of its own in PyTorch's tree: the layers below inherit it, so the names
    (``linear1``, ``dropout``, ``linear2``) sit directly on the layer, as PyTorch's do."""

    def _build_feed_forward(self, op: str, sizes: tuple, dropout: float, activation: Any) -> None:
        d_model, dim_feedforward, bias = sizes
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.activation = _activation(op, activation)

    def _ff_block(self, x: Tensor) -> Tensor:
        hidden = self.activation(self.linear1(x))  # (..., E) -> (..., dim_feedforward)
        return self.linear2(self.dropout(hidden))  # (..., dim_feedforward) -> (..., E)


class TransformerEncoderLayer(_FeedForward):
    """Self-attention then a feed-forward block, each with dropout, a residual and a LayerNorm.

    Post-LN (norm_first=False, the default): x = norm1(x + sa(x)); x = norm2(x + ff(x)).
    Pre-LN (norm_first=True): x = x + sa(norm1(x)); x = x + ff(norm2(x)).
    Shapes: src (S, N, E), (N, S, E) with batch_first, or (S, E) -> same; src_mask (S, S) or
    (N * nhead, S, S); src_key_padding_mask (N, S).
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first
        )
        self._build_feed_forward(
            "TransformerEncoderLayer", (d_model, dim_feedforward, bias), dropout, activation
        )
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        _place(self, device, dtype)

    def forward(
        self,
        src: Tensor,
        src_mask: Any = None,
        src_key_padding_mask: Any = None,
        is_causal: bool = False,
    ) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self.dropout2(self._ff_block(self.norm2(x)))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self.dropout2(self._ff_block(x)))

    def _sa_block(self, x: Tensor, mask: Any, padding: Any, is_causal: bool) -> Tensor:
        out, _ = self.self_attn(
            x,
            x,
            x,
            attn_mask=mask,
            key_padding_mask=padding,
            need_weights=False,
            is_causal=is_causal,
        )
        return self.dropout1(out)


class TransformerDecoderLayer(_FeedForward):
    """Self-attention over the target, attention to the encoder's output (memory), then a
    feed-forward block; each with dropout, a residual and a LayerNorm (norm1, norm2, norm3).

    Post-LN (default): x = norm1(x + sa(x)); x = norm2(x + mha(x, memory)); x = norm3(x + ff(x)).
    Pre-LN (norm_first=True): x = x + sa(norm1(x)); x = x + mha(norm2(x), memory);
    x = x + ff(norm3(x)).
    Shapes: tgt (T, N, E) and memory (S, N, E) (batch first with batch_first=True, or
    unbatched) -> like tgt; tgt_mask (T, T); memory_mask (T, S); *_key_padding_mask (N, T) and
    (N, S).
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        attention = {"dropout": dropout, "bias": bias, "batch_first": batch_first}
        self.self_attn = MultiheadAttention(d_model, nhead, **attention)
        self.multihead_attn = MultiheadAttention(d_model, nhead, **attention)
        self._build_feed_forward(
            "TransformerDecoderLayer", (d_model, dim_feedforward, bias), dropout, activation
        )
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        _place(self, device, dtype)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Any = None,
        memory_mask: Any = None,
        tgt_key_padding_mask: Any = None,
        memory_key_padding_mask: Any = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        target = (tgt_mask, tgt_key_padding_mask, tgt_is_causal)
        source = (memory_mask, memory_key_padding_mask, memory_is_causal)
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), *target)
            x = x + self._mha_block(self.norm2(x), memory, *source)
            return x + self.dropout3(self._ff_block(self.norm3(x)))
        x = self.norm1(x + self._sa_block(x, *target))
        x = self.norm2(x + self._mha_block(x, memory, *source))
        return self.norm3(x + self.dropout3(self._ff_block(x)))

    def _sa_block(self, x: Tensor, mask: Any, padding: Any, is_causal: bool) -> Tensor:
        out, _ = self.self_attn(
            x, x, x, attn_mask=mask, key_padding_mask=padding, need_weights=False,
            is_causal=is_causal,
        )  # fmt: skip
        return self.dropout1(out)

    def _mha_block(
        self, x: Tensor, memory: Tensor, mask: Any, padding: Any, is_causal: bool
    ) -> Tensor:
        out, _ = self.multihead_attn(
            x, memory, memory, attn_mask=mask, key_padding_mask=padding, need_weights=False,
            is_causal=is_causal,
        )  # fmt: skip
        return self.dropout2(out)


def _clones(op: str, layer: Module, num_layers: int) -> ModuleList:
    """num_layers deep copies of `layer` (PyTorch's _get_clones: each starts from its weights)."""
    if not isinstance(layer, Module):
        raise TypeError(f"{op}: expected a layer module, got {type(layer).__name__}")
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 0:
        raise TinyattnError(f"{op}: num_layers must be a non-negative int, got {num_layers!r}")
    return ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])


class TransformerEncoder(Module):
    """A stack of num_layers copies of encoder_layer, then `norm` (if given).

    Shapes: src as the layer takes it -> same. ``enable_nested_tensor`` and ``mask_check``
    choose PyTorch's inference fast path and are accepted and ignored (see docs/from-pytorch.md
    for the padded positions that path changes).
    """

    def __init__(
        self,
        encoder_layer: Module,
        num_layers: int,
        norm: Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ) -> None:
        super().__init__()
        self.layers = _clones("TransformerEncoder", encoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(
        self,
        src: Tensor,
        mask: Any = None,
        src_key_padding_mask: Any = None,
        is_causal: bool | None = None,
    ) -> Tensor:
        output = src
        for layer in self.layers:
            output = layer(
                output,
                src_mask=mask,
                src_key_padding_mask=src_key_padding_mask,
                is_causal=bool(is_causal),
            )
        return output if self.norm is None else self.norm(output)


class TransformerDecoder(Module):
    """A stack of num_layers copies of decoder_layer, each reading the same memory, then `norm`.

    Shapes: tgt and memory as the layer takes them -> like tgt.
    """

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Module | None = None) -> None:
        super().__init__()
        self.layers = _clones("TransformerDecoder", decoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Any = None,
        memory_mask: Any = None,
        tgt_key_padding_mask: Any = None,
        memory_key_padding_mask: Any = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        output = tgt
        for layer in self.layers:
            output = layer(
                output,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=bool(tgt_is_causal),
                memory_is_causal=memory_is_causal,
            )
        return output if self.norm is None else self.norm(output)


class Transformer(Module):
    """The encoder-decoder Transformer (Vaswani et al.), PyTorch's module: an encoder of
    num_encoder_layers layers and a final LayerNorm, a decoder likewise; weights with more
    than one dimension start Xavier-uniform, as PyTorch's ``_reset_parameters`` draws them.

    Shapes: src (S, N, E), tgt (T, N, E) (batch first with batch_first=True, or unbatched
    (S, E), (T, E)) -> (T, N, E); masks as in TransformerEncoderLayer and
    TransformerDecoderLayer.
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = F.relu,
        custom_encoder: Module | None = None,
        custom_decoder: Module | None = None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        layer_args = dict(
            dim_feedforward=dim_feedforward,
            dropout=dropout,
            activation=activation,
            layer_norm_eps=layer_norm_eps,
            batch_first=batch_first,
            norm_first=norm_first,
            bias=bias,
        )
        self.encoder = custom_encoder or TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **layer_args),
            num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias),
        )
        self.decoder = custom_decoder or TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **layer_args),
            num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias),
        )
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        _place(self, device, dtype)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Any = None,
        tgt_mask: Any = None,
        memory_mask: Any = None,
        src_key_padding_mask: Any = None,
        tgt_key_padding_mask: Any = None,
        memory_key_padding_mask: Any = None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        self._check(src, tgt)
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal
        )
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )

    def _check(self, src: Tensor, tgt: Tensor) -> None:
        """PyTorch's checks: the same batch size (when batched) and width d_model."""
        batch_axis = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[batch_axis] != tgt.shape[batch_axis]:
            raise RuntimeError(
                f"Transformer: the batch number of src {src.shape} and tgt {tgt.shape} must be "
                f"equal (batch_first={self.batch_first})"
            )
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError(
                f"Transformer: the feature number of src {src.shape} and tgt {tgt.shape} must "
                f"be equal to d_model={self.d_model}"
            )

    @staticmethod
    def generate_square_subsequent_mask(size: int, device: Any = None, dtype: Any = None) -> Tensor:
        """The float causal mask (size, size): 0 on and below the diagonal, -inf above (position
        i may attend to 0..i), PyTorch's additive form."""
        return full((size, size), float("-inf"), dtype=dtype, device=device).triu(diagonal=1)


__all__ = [
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
]
