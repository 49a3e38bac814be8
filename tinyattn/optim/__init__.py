"""Optim layer: optimizers (SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam,
Rprop, ASGD, LBFGS, Muon), gradient clipping and learning-rate schedules.

A package so that ``optim.lr_scheduler`` is reached as an attribute, as in PyTorch. Imports
`backend`, `autograd` and `tensor`, never `nn`.
"""

from . import lr_scheduler
from .adam_variants import Adamax, NAdam, RAdam
from .adaptive import Adagrad, RMSprop
from .classic import ASGD, Adadelta, Rprop
from .lbfgs import LBFGS
from .muon import Muon
from .optimizer import SGD, Adam, AdamW, Optimizer, clip_grad_norm

__all__ = [
    "ASGD",
    "LBFGS",
    "SGD",
    "Adadelta",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "Muon",
    "NAdam",
    "Optimizer",
    "RAdam",
    "RMSprop",
    "Rprop",
    "clip_grad_norm",
    "lr_scheduler",
]

# PyTorch's names tinyattn does not have, with what to use instead: a program that touches one
# gets an AttributeError that says so, not a bare "has no attribute".
_NOT_HERE = {
    "Adafactor": "use optim.AdamW (or optim.Adam), which tinyattn has",
    "SparseAdam": "tinyattn has no sparse gradients; use optim.Adam",
    "swa_utils": "average the weights by hand (an exponential moving average of the state dict)",
    "swap_in_optimizer_params_and_state": "load the state with optimizer.load_state_dict",
}


def __getattr__(name: str):  # noqa: ANN202  (PEP 562: called only for names not found above)
    if name in _NOT_HERE:
        raise AttributeError(
            f"torch.optim.{name} is not in tinyattn (tinyattn.optim has no {name!r}): "
            f"{_NOT_HERE[name]}"
        )
    raise AttributeError(
        f"module 'tinyattn.optim' has no attribute {name!r}: it is not in tinyattn; the "
        f"optimizers are {', '.join(n for n in __all__ if n[0].isupper() and n != 'Optimizer')}"
    )
