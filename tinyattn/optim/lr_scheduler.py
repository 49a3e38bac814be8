"""Learning-rate schedules with PyTorch's names, formulas and state: LambdaLR, StepLR,
CosineAnnealingLR, LinearLR.

Invariants (PyTorch's): constructing a scheduler records each group's ``initial_lr`` and takes
the first step (``last_epoch`` becomes 0, the lr becomes the schedule's value at 0); each
``step()`` advances ``last_epoch`` by one and writes the new lr into ``optimizer.param_groups``.
StepLR, CosineAnnealingLR and LinearLR use PyTorch's recursive forms (each lr computed from the
previous one), so their float rounding matches PyTorch's exactly.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any

from ..autograd import replayed_call
from ..errors import TinyattnError
from .optimizer import Optimizer


class LRScheduler:
    """Base class: subclasses define ``get_lr()`` -> one lr per parameter group."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(
                f"{type(self).__name__}: {type(optimizer).__name__} is not an Optimizer"
            )
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for index, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"{type(self).__name__}: param 'initial_lr' is not specified in "
                        f"param_groups[{index}] when resuming with last_epoch={last_epoch}; load "
                        "the optimizer's state_dict first"
                    )
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self._is_initial = True
        self.step()
        self._is_initial = False

    def get_lr(self) -> list[float]:
        raise NotImplementedError(f"{type(self).__name__} must implement get_lr")

    def get_last_lr(self) -> list[float]:
        """The lr of each parameter group as set by the last step()."""
        return list(self._last_lr)

    @replayed_call  # a compiled step runs it on every replay
    def step(self) -> None:
        """Advance one epoch (or iteration) and write the new lrs into the optimizer."""
        self._step_count += 1
        self.last_epoch += 1
        values = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        """Every attribute except the optimizer (PyTorch's layout)."""
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)


class LambdaLR(LRScheduler):
    """lr = initial_lr * lr_lambda(last_epoch), one function per group or one for all."""

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
                    f"LambdaLR: expected {groups} lr_lambdas (one per group), got {len(lr_lambda)}"
                )
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * groups
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [
            base_lr * function(self.last_epoch)
            for function, base_lr in zip(self.lr_lambdas, self.base_lrs, strict=True)
        ]

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


__all__ = ["CosineAnnealingLR", "LRScheduler", "LambdaLR", "LinearLR", "StepLR"]
