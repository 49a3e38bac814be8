"""PyTorch's ``torch.nn.modules.normalization``: the same classes as ``tinyattn.nn``, under the path
PyTorch programs and saved modules name them by. Defines nothing."""

from ..layers import LayerNorm
from ..normalization import GroupNorm, RMSNorm

__all__ = ["GroupNorm", "LayerNorm", "RMSNorm"]
