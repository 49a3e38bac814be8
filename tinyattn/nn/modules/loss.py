"""PyTorch's ``torch.nn.modules.loss``: the same classes as ``tinyattn.nn``, under the path
PyTorch programs and saved modules name them by. Defines nothing."""

from ..loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
    _Loss,
)

__all__ = [
    "BCELoss",
    "BCEWithLogitsLoss",
    "CrossEntropyLoss",
    "HuberLoss",
    "KLDivLoss",
    "L1Loss",
    "MSELoss",
    "NLLLoss",
    "SmoothL1Loss",
    "_Loss",
]
