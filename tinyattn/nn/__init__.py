"""nn layer: modules with parameters, built on `functional`.

A package because one file would pass ~400 lines; the parts import in this order:
module (Module, Parameter) -> layers (Linear, Embedding, LayerNorm, Dropout) -> attention
(MultiHeadAttention) -> transformer (positional encodings, TransformerBlock). Imports `backend`,
`autograd`, `tensor` and `functional`, never `optim`.
"""

from .attention import MultiHeadAttention
from .layers import GELU, Dropout, Embedding, LayerNorm, Linear, ReLU
from .module import IncompatibleKeys, Module, ModuleList, Parameter, Sequential
from .transformer import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, TransformerBlock

__all__ = [
    "GELU",
    "Dropout",
    "Embedding",
    "IncompatibleKeys",
    "LayerNorm",
    "LearnedPositionalEmbedding",
    "Linear",
    "Module",
    "ModuleList",
    "MultiHeadAttention",
    "Parameter",
    "ReLU",
    "Sequential",
    "SinusoidalPositionalEncoding",
    "TransformerBlock",
]
