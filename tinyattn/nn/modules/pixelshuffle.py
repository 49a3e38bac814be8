"""PyTorch's ``torch.nn.modules.pixelshuffle``: the same classes as ``tinyattn.nn``, under the
path PyTorch programs and saved modules name them by. Defines nothing."""

from ..rearrange import PixelShuffle, PixelUnshuffle

__all__ = ["PixelShuffle", "PixelUnshuffle"]
