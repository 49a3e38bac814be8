"""PyTorch's ``torch.nn.modules.sparse``: the same classes as ``tinyattn.nn``, under the path
PyTorch programs and saved modules name them by. Defines nothing."""

from ..layers import Embedding

__all__ = ["Embedding"]
