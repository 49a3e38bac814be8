"""PyTorch's ``torch.nn.modules.module``: the same classes as ``tinyattn.nn``, under the path
PyTorch programs and saved modules name them by. Defines nothing."""

from ..module import Module

__all__ = ["Module"]
