"""Learning-rate schedules with PyTorch's names, formulas and state: this module is
``torch.optim.lr_scheduler``. Here the schedules of one formula (LambdaLR, MultiplicativeLR,
StepLR, MultiStepLR, ConstantLR, LinearLR, ExponentialLR, PolynomialLR, CosineAnnealingLR); the
cycles, compositions and ReduceLROnPlateau are in lr_composite.py and re-exported here.

Imports lr_base (the LRScheduler base and its invariants) and lr_composite. Each ``get_lr`` is
PyTorch's recursive form (each lr computed from the previous one), so the float rounding matches
PyTorch's exactly; ``_get_closed_form_lr`` serves ``step(epoch)`` and SequentialLR's restarts.
"""

from __future__ import annotations

import math
import types
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import TinyattnError
from .lr_base import EPOCH_DEPRECATION_WARNING, LRScheduler
from .lr_composite import (
    ChainedScheduler,
    CosineAnnealingWarmRestarts,
    CyclicLR,
    OneCycleLR,
    ReduceLROnPlateau,
    SequentialLR,
)
from .optimizer import Optimizer


class _WithLambdas(LRScheduler):
    """A schedule given by functions of the epoch, one per group or one for all, whose state
    dict keeps what PyTorch keeps of them."""

    def __init__(
        self,
        optimizer: Optimizer,
        lr_lambda: Callable[[int], float] | list[Callable[[int], float]],
        last_epoch: int = -1,
    ) -> None:
        groups = len(optimizer.param_groups)
        if isinstance(lr_lambda, list | tuple):
            if len(lr_lambda) != groups:
                raise TinyattnError(
                    f"{type(self).__name__}: expected {groups} lr_lambdas (one per group), got "
                    f"{len(lr_lambda)}"
                )
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * groups
        for function in self.lr_lambdas:
            if not callable(function):
                raise TypeError(
                    f"{type(self).__name__}: lr_lambda should be a function, got "
                    f"{type(function).__name__}"
                )
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> dict[str, Any]:
        """As PyTorch: plain functions and lambdas are not saved (None in their place); the
        attributes of callable objects are."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [
            None if isinstance(function, types.FunctionType) else function.__dict__.copy()
            for function in self.lr_lambdas
        ]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        saved = state.pop("lr_lambdas", [None] * len(self.lr_lambdas))
        self.__dict__.update(state)
        for function, attributes in zip(self.lr_lambdas, saved, strict=False):
            if attributes is not None:
                function.__dict__.update(attributes)


class LambdaLR(_WithLambdas):
    """lr = initial_lr * lr_lambda(last_epoch), one function per group or one for all."""

    def get_lr(self) -> list[float]:
        return [
            base_lr * function(self.last_epoch)
            for function, base_lr in zip(self.lr_lambdas, self.base_lrs, strict=True)
        ]


class MultiplicativeLR(_WithLambdas):
    """lr = previous lr * lr_lambda(last_epoch) at every step after the first (the factor of
    epoch 0 is not applied), one function per group or one for all."""

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self._is_initial:
            return [group["lr"] for group in groups]
        return [
            group["lr"] * function(self.last_epoch)
            for function, group in zip(self.lr_lambdas, groups, strict=True)
        ]


class StepLR(LRScheduler):
    """Multiply the lr by gamma at every epoch that is a multiple of step_size (PyTorch's
    recursive form): initial_lr * gamma ** (epoch // step_size) for an int step_size; a float
    one, as in PyTorch, decays where epoch % step_size == 0 (2.5: at 5, 10, ...)."""

    def __init__(
        self, optimizer: Optimizer, step_size: float, gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        if not isinstance(step_size, int | float) or isinstance(step_size, bool) or step_size <= 0:
            raise TinyattnError(f"StepLR: step_size must be a positive number, got {step_size!r}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [group["lr"] for group in self.optimizer.param_groups]
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the lr by gamma at each milestone epoch (by gamma^k at a milestone listed k
    times): initial_lr * gamma ** (number of milestones <= epoch)."""

    def __init__(
        self,
        optimizer: Optimizer,
        milestones: Iterable[int],
        gamma: float = 0.1,
        last_epoch: int = -1,
    ) -> None:
        self.milestones, self.gamma = Counter(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self.last_epoch not in self.milestones:
            return [group["lr"] for group in groups]
        factor = self.gamma ** self.milestones[self.last_epoch]
        return [group["lr"] * factor for group in groups]

    def _get_closed_form_lr(self) -> list[float]:
        passed = bisect_right(sorted(self.milestones.elements()), self.last_epoch)
        return [base * self.gamma**passed for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """lr = initial_lr * factor for the first total_iters epochs, then initial_lr."""

    def __init__(
        self,
        optimizer: Optimizer,
        factor: float = 1.0 / 3,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        if not 0 <= factor <= 1.0:
            raise TinyattnError(f"ConstantLR: factor must be in [0, 1], got {factor!r}")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self.last_epoch == 0:
            return [group["lr"] * self.factor for group in groups]
        if self.last_epoch != self.total_iters:
            return [group["lr"] for group in groups]
        return [group["lr"] * (1.0 / self.factor) for group in groups]

    def _get_closed_form_lr(self) -> list[float]:
        factor = self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor)
        return [base * factor for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """lr = initial_lr * gamma ** epoch (each step multiplies by gamma)."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self._is_initial:
            return [group["lr"] for group in groups]
        return [group["lr"] * self.gamma for group in groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma**self.last_epoch for base in self.base_lrs]


class PolynomialLR(LRScheduler):
    """lr = initial_lr * (1 - min(epoch, total_iters) / total_iters) ** power: a polynomial decay
    to 0 at total_iters (PyTorch's recursive form: each step multiplies by the ratio of two
    consecutive values)."""

    def __init__(
        self,
        optimizer: Optimizer,
        total_iters: int = 5,
        power: float = 1.0,
        last_epoch: int = -1,
    ) -> None:
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self._is_initial or self.last_epoch > self.total_iters:
            return [group["lr"] for group in groups]
        decay = (
            (1.0 - self.last_epoch / self.total_iters)
            / (1.0 - (self.last_epoch - 1) / self.total_iters)
        ) ** self.power
        return [group["lr"] * decay for group in groups]

    def _get_closed_form_lr(self) -> list[float]:
        remaining = 1.0 - min(self.total_iters, self.last_epoch) / self.total_iters
        return [base * remaining**self.power for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """eta_min + (initial_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2, PyTorch's recursive
    form (which keeps following the cosine past T_max)."""

    def __init__(
        self,
        optimizer: Optimizer,
        T_max: int,
        eta_min: float = 0.0,
        last_epoch: int = -1,  # noqa: N803
    ) -> None:
        if not isinstance(T_max, int) or T_max <= 0:
            raise TinyattnError(f"CosineAnnealingLR: T_max must be a positive int, got {T_max!r}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups, eta_min, t_max = self.optimizer.param_groups, self.eta_min, self.T_max
        if self._is_initial:
            return [group["lr"] for group in groups]
        if self._step_count == 1 and self.last_epoch > 0:
            return [
                eta_min + (base - eta_min) * (1 + math.cos(self.last_epoch * math.pi / t_max)) / 2
                for base in self.base_lrs
            ]
        if (self.last_epoch - 1 - t_max) % (2 * t_max) == 0:
            return [
                group["lr"] + (base - eta_min) * (1 - math.cos(math.pi / t_max)) / 2
                for base, group in zip(self.base_lrs, groups, strict=True)
            ]
        return [
            (1 + math.cos(math.pi * self.last_epoch / t_max))
            / (1 + math.cos(math.pi * (self.last_epoch - 1) / t_max))
            * (group["lr"] - eta_min)
            + eta_min
            for group in groups
        ]

    def _get_closed_form_lr(self) -> list[float]:
        eta_min, cosine = self.eta_min, math.cos(math.pi * self.last_epoch / self.T_max)
        return [eta_min + (base - eta_min) * (1 + cosine) / 2 for base in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale the lr by a factor going linearly from start_factor to end_factor over total_iters
    epochs, then keep it."""

    def __init__(
        self,
        optimizer: Optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        if not 0 < start_factor <= 1.0:
            raise TinyattnError(f"LinearLR: start_factor must be in (0, 1], got {start_factor!r}")
        if not 0 <= end_factor <= 1.0:
            raise TinyattnError(f"LinearLR: end_factor must be in [0, 1], got {end_factor!r}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self.last_epoch == 0:
            return [group["lr"] * self.start_factor for group in groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return [group["lr"] for group in groups]
        delta = self.end_factor - self.start_factor
        factor = 1.0 + delta / (
            self.total_iters * self.start_factor + (self.last_epoch - 1) * delta
        )
        return [group["lr"] * factor for group in groups]

    def _get_closed_form_lr(self) -> list[float]:
        progress = min(self.total_iters, self.last_epoch) / self.total_iters
        factor = self.start_factor + (self.end_factor - self.start_factor) * progress
        return [base * factor for base in self.base_lrs]


# PyTorch's private base-class name, which older programs subclass.
_LRScheduler = LRScheduler


def __getattr__(name: str):  # noqa: ANN202  (PEP 562: called only for names not found above)
    raise AttributeError(
        f"module 'tinyattn.optim.lr_scheduler' has no attribute {name!r}: it is not in tinyattn; "
        f"the schedules are {', '.join(n for n in __all__ if n[0].isupper())}"
    )


__all__ = [
    "EPOCH_DEPRECATION_WARNING",
    "ChainedScheduler",
    "ConstantLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "CyclicLR",
    "ExponentialLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "MultiplicativeLR",
    "OneCycleLR",
    "PolynomialLR",
    "ReduceLROnPlateau",
    "SequentialLR",
    "StepLR",
]
