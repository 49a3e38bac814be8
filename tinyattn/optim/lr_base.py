"""Optim layer: LRScheduler, the base of every learning-rate schedule (PyTorch's, with its
state and stepping rules); the schedules themselves are in lr_scheduler.py and lr_composite.py.

Imports the Optimizer base. Invariants (PyTorch's): constructing a scheduler records each
group's ``initial_lr`` and takes the first step (``last_epoch`` becomes 0, the lr becomes the
schedule's value at 0); each ``step()`` advances ``last_epoch`` by one and writes the new lr
into ``optimizer.param_groups``. Most schedules compute each lr from the previous one
(PyTorch's recursive forms), so their float rounding matches PyTorch's exactly; ``step(epoch)``
(deprecated in PyTorch, with its warning) jumps to an epoch through the closed form where the
schedule has one.
"""

from __future__ import annotations

import warnings
from typing import Any

from ..autograd import replayed_call
from .optimizer import Optimizer

EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated where "
    "possible. Please use `scheduler.step()` to step the scheduler. During the deprecation, if "
    "epoch is different from None, the closed form is used instead of the new chainable form, "
    "where available."
)


def check_optimizer(scheduler: Any, optimizer: Any) -> None:
    if not isinstance(optimizer, Optimizer):
        raise TypeError(
            f"{type(scheduler).__name__}: {type(optimizer).__name__} is not an Optimizer"
        )


def per_group(name: str, optimizer: Optimizer, value: Any) -> list[Any]:
    """One value per parameter group: a list or tuple as given (its length checked), else the
    one value repeated (PyTorch's `_format_param`)."""
    groups = len(optimizer.param_groups)
    if isinstance(value, list | tuple):
        if len(value) != groups:
            raise ValueError(
                f"{name} must have the same length as optimizer.param_groups. {name} has "
                f"{len(value)} values, param_groups has {groups}."
            )
        return list(value)
    return [value] * groups


class LRScheduler:
    """Base class: subclasses define ``get_lr()`` -> one lr per parameter group, and may define
    ``_get_closed_form_lr()`` for ``step(epoch)``."""

    _is_initial: bool = False

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        check_optimizer(self, optimizer)
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
        self._initial_step()

    def _initial_step(self) -> None:
        """The step a scheduler takes when it is made (or restarted by SequentialLR)."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list[float]:
        raise NotImplementedError(f"{type(self).__name__} must implement get_lr")

    def get_last_lr(self) -> list[float]:
        """The lr of each parameter group as set by the last step()."""
        return list(self._last_lr)

    @replayed_call  # a compiled step runs it on every replay
    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or iteration) and write the new lrs into the optimizer. With
        `epoch` (deprecated in PyTorch, which warns as here) jump to that epoch."""
        self._step_count += 1
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed_form = getattr(self, "_get_closed_form_lr", None)
            values = closed_form() if closed_form is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        """Every attribute except the optimizer (PyTorch's layout)."""
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)


__all__ = ["EPOCH_DEPRECATION_WARNING", "LRScheduler"]
