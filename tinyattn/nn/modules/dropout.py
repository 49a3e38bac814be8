"""PyTorch's ``torch.nn.modules.dropout``: the same classes as ``tinyattn.nn``, under the path
PyTorch programs and saved modules name them by. Defines nothing."""

from ..layers import Dropout

__all__ = ["Dropout"]
