"""Optim layer: optimizers (SGD, Adam, AdamW, RMSprop, Adagrad), gradient clipping and
learning-rate schedules.

A package so that ``optim.lr_scheduler`` is reached as an attribute, as in PyTorch. Imports
`backend`, `autograd` and `tensor`, never `nn`.
"""

from . import lr_scheduler
from .adaptive import Adagrad, RMSprop
from .optimizer import SGD, Adam, AdamW, Optimizer, clip_grad_norm

__all__ = [
    "SGD",
    "Adagrad",
    "Adam",
    "AdamW",
    "Optimizer",
    "RMSprop",
    "clip_grad_norm",
    "lr_scheduler",
]
