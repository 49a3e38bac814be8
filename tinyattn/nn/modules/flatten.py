"""PyTorch's ``torch.nn.modules.flatten``: the same classes as ``tinyattn.nn``, under the path
PyTorch programs and saved modules name them by. Defines nothing."""

from ..conv import Unflatten
from ..layers import Flatten

__all__ = ["Flatten", "Unflatten"]
