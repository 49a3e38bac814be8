"""PyTorch's ``torch.nn.modules.fold``: the same classes as ``tinyattn.nn``, under the path
PyTorch programs and saved modules name them by. Defines nothing."""

from ..rearrange import Fold, Unfold

__all__ = ["Fold", "Unfold"]
