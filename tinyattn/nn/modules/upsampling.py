"""PyTorch's ``torch.nn.modules.upsampling``: the same classes as ``tinyattn.nn``, under the path
PyTorch programs and saved modules name them by. Defines nothing."""

from ..upsample import Upsample

__all__ = ["Upsample"]
