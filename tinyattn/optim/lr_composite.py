"""Optim layer: the learning-rate schedules that cycle, compose or watch a metric, PyTorch's
CyclicLR, OneCycleLR, CosineAnnealingWarmRestarts, SequentialLR, ChainedScheduler and
ReduceLROnPlateau (re-exported by lr_scheduler.py, the module programs import).

Imports lr_base and the Optimizer base. CyclicLR and OneCycleLR also cycle the momentum (SGD's
``momentum`` or Adam's beta1) against the lr, as PyTorch does, and add PyTorch's keys
``max_lr``, ``min_lr``, ``max_momentum``, ``base_momentum`` to the parameter groups.
"""

from __future__ import annotations

import math
import types
import warnings
from bisect import bisect_right
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from ..errors import TinyattnError
from .lr_base import EPOCH_DEPRECATION_WARNING, LRScheduler, check_optimizer, per_group
from .optimizer import Optimizer


def _set_momentum(group: dict, momentum: float, use_beta1: bool) -> None:
    if use_beta1:
        group["betas"] = (momentum, *group["betas"][1:])
    else:
        group["momentum"] = momentum


def _momentum_kind(scheduler: Any, optimizer: Optimizer) -> bool:
    """Whether the momentum to cycle is Adam's beta1 (else SGD's momentum)."""
    if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
        raise TinyattnError(
            f"{type(scheduler).__name__}: optimizer must support momentum or beta1 with "
            "`cycle_momentum` option enabled"
        )
    return "betas" in optimizer.defaults


def _check_members(scheduler: Any, optimizer: Optimizer, schedulers: Sequence[Any]) -> None:
    name = type(scheduler).__name__
    if len(schedulers) < 1:
        raise TinyattnError(f"{name} expects at least one scheduler, but got no scheduler.")
    for index, member in enumerate(schedulers):
        if not hasattr(member, "optimizer"):
            raise TypeError(f"{name} at index {index} should have `optimizer` as its attribute.")
        if isinstance(member, ReduceLROnPlateau):
            raise TinyattnError(
                f"{name} does not support `ReduceLROnPlateau` (its step needs a metric), but got "
                f"one at index {index}"
            )
        if member.optimizer is not optimizer:
            raise TinyattnError(
                f"{name} expects all schedulers to belong to the same optimizer, but the one at "
                f"index {index} ({type(member).__name__}) has another"
            )


class _Composite(LRScheduler):
    """State dicts of a scheduler made of schedulers: each member's state dict in a list."""

    def state_dict(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [member.state_dict() for member in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        members = state.pop("_schedulers")
        self.__dict__.update(state)
        for member, saved in zip(self._schedulers, members, strict=True):
            member.load_state_dict(saved)


class SequentialLR(_Composite):
    """One scheduler after another: schedulers[i] runs from milestones[i - 1] on, restarted at
    its milestone (its epoch set to 0 through its closed form, as in PyTorch)."""

    def __init__(
        self,
        optimizer: Optimizer,
        schedulers: list[LRScheduler],
        milestones: list[int],
        last_epoch: int = -1,
    ) -> None:
        _check_members(self, optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise TinyattnError(
                "SequentialLR expects one milestone fewer than schedulers, got "
                f"{len(schedulers)} schedulers and {len(milestones)} milestones"
            )
        self._schedulers, self._milestones = schedulers, milestones
        self.last_epoch, self.optimizer = last_epoch + 1, optimizer
        # Undo the members' construction steps, then start the first one afresh.
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self._undo_steps(self)
        first = self._schedulers[bisect_right(self._milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def _undo_steps(self, scheduler: Any) -> None:
        if hasattr(scheduler, "_schedulers"):
            for member in scheduler._schedulers:
                self._undo_steps(member)
        elif hasattr(scheduler, "last_epoch"):
            scheduler.last_epoch -= 1

    def step(self) -> None:  # type: ignore[override]
        self.last_epoch += 1
        index = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[index]
        if index > 0 and self._milestones[index - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


class ChainedScheduler(_Composite):
    """Several schedulers stepped together: each step() steps every one, in order, so their
    factors multiply."""

    def __init__(
        self, schedulers: Sequence[LRScheduler], optimizer: Optimizer | None = None
    ) -> None:
        if len(schedulers) < 1:
            raise TinyattnError("ChainedScheduler expects at least one scheduler to be chained")
        optimizer = optimizer or schedulers[0].optimizer
        _check_members(self, optimizer, schedulers)
        self._schedulers, self.optimizer = schedulers, optimizer
        self._last_lr = [group["lr"] for group in schedulers[-1].optimizer.param_groups]

    def step(self) -> None:  # type: ignore[override]
        for scheduler in self._schedulers:
            scheduler.step()
        self._last_lr = [group["lr"] for group in self._schedulers[-1].optimizer.param_groups]


class ReduceLROnPlateau(LRScheduler):
    """Multiply the lr by factor when a metric has stopped improving for more than patience
    epochs. Improving (mode "min", threshold_mode "rel"): metric < best * (1 - threshold);
    "abs": metric < best - threshold; mode "max" mirrors both. After a reduction, cooldown
    epochs pass before bad epochs count again; the lr never goes below min_lr, and a reduction
    smaller than eps is skipped. ``step(metric)`` takes the metric."""

    def __init__(
        self,
        optimizer: Optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: list[float] | float = 0,
        eps: float = 1e-8,
    ) -> None:
        if factor >= 1.0:
            raise TinyattnError(f"ReduceLROnPlateau: factor should be < 1.0, got {factor!r}")
        check_optimizer(self, optimizer)
        self.factor, self.optimizer = factor, optimizer
        if isinstance(min_lr, list | tuple):
            self.default_min_lr, self.min_lrs = None, per_group("min_lr", optimizer, min_lr)
        else:
            self.default_min_lr, self.min_lrs = min_lr, per_group("min_lr", optimizer, min_lr)
        self.patience, self.cooldown, self.eps = patience, cooldown, eps
        self.last_epoch = 0
        self._last_lr = [group["lr"] for group in optimizer.param_groups]
        self._init_is_better(mode, threshold, threshold_mode)
        self._reset()

    def _reset(self) -> None:
        self.best, self.cooldown_counter, self.num_bad_epochs = self.mode_worse, 0, 0

    def step(self, metrics: float, epoch: int | None = None) -> None:  # type: ignore[override]
        current = float(metrics)
        if epoch is None:
            epoch = self.last_epoch + 1
        else:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self.last_epoch = epoch
        if self._is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:  # bad epochs right after a reduction do not count
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def _reduce_lr(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise RuntimeError(
                    f"ReduceLROnPlateau: the optimizer has {len(groups)} param groups but "
                    f"min_lr gives {len(self.min_lrs)}; set min_lrs to match"
                )
            self.min_lrs = [self.default_min_lr] * len(groups)
        for group, min_lr in zip(groups, self.min_lrs, strict=True):
            old_lr = float(group["lr"])
            new_lr = max(old_lr * self.factor, min_lr)
            if old_lr - new_lr > self.eps:
                group["lr"] = new_lr

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def _is_better(self, current: float, best: float) -> bool:
        if self.mode == "min" and self.threshold_mode == "rel":
            return current < best * (1.0 - self.threshold)
        if self.mode == "min":
            return current < best - self.threshold
        if self.threshold_mode == "rel":
            return current > best * (self.threshold + 1.0)
        return current > best + self.threshold

    def _init_is_better(self, mode: str, threshold: float, threshold_mode: str) -> None:
        if mode not in {"min", "max"}:
            raise TinyattnError(f"ReduceLROnPlateau: mode {mode!r} is unknown ('min' or 'max')")
        if threshold_mode not in {"rel", "abs"}:
            raise TinyattnError(
                f"ReduceLROnPlateau: threshold mode {threshold_mode!r} is unknown ('rel' or 'abs')"
            )
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)
        self._init_is_better(self.mode, self.threshold, self.threshold_mode)


class CyclicLR(LRScheduler):
    """The lr goes from base_lr up to max_lr over step_size_up steps and back over
    step_size_down (Smith's cyclical learning rates), the amplitude scaled by scale_fn:
    "triangular" 1, "triangular2" halved each cycle, "exp_range" gamma ** iteration. With
    cycle_momentum the momentum moves the other way, between max_momentum and base_momentum.
    Step it after every batch."""

    def __init__(
        self,
        optimizer: Optimizer,
        base_lr: float | list[float],
        max_lr: float | list[float],
        step_size_up: int = 2000,
        step_size_down: int | None = None,
        mode: str = "triangular",
        gamma: float = 1.0,
        scale_fn: Callable[[float], float] | None = None,
        scale_mode: str = "cycle",
        cycle_momentum: bool = True,
        base_momentum: float = 0.8,
        max_momentum: float = 0.9,
        last_epoch: int = -1,
    ) -> None:
        check_optimizer(self, optimizer)
        self.optimizer = optimizer
        base_lrs = per_group("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups, strict=True):
                group["lr"] = lr
        self.max_lrs = per_group("max_lr", optimizer, max_lr)
        step_size_up = float(step_size_up)
        step_size_down = float(step_size_down) if step_size_down is not None else step_size_up
        self.total_size = step_size_up + step_size_down
        self.step_ratio = step_size_up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise TinyattnError(f"CyclicLR: mode {mode!r} is invalid and scale_fn is None")
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom, self.scale_mode = scale_fn, scale_mode
        self._init_scale_fn()
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = _momentum_kind(self, optimizer)
            self.base_momentums = per_group("base_momentum", optimizer, base_momentum)
            self.max_momentums = per_group("max_momentum", optimizer, max_momentum)
            if last_epoch == -1:
                for top, bottom, group in zip(
                    self.max_momentums, self.base_momentums, optimizer.param_groups, strict=True
                ):
                    _set_momentum(group, top, self.use_beta1)
                    group["max_momentum"], group["base_momentum"] = top, bottom
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _init_scale_fn(self) -> None:
        if self._scale_fn_custom is not None:
            return
        if self.mode == "triangular":
            self._scale_fn_ref, self.scale_mode = _triangular, "cycle"
        elif self.mode == "triangular2":
            self._scale_fn_ref, self.scale_mode = _triangular2, "cycle"
        else:
            self._scale_fn_ref, self.scale_mode = partial(_exp_range, self.gamma), "iterations"

    def scale_fn(self, x: float) -> float:
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        return self._scale_fn_ref(x)

    def get_lr(self) -> list[float]:
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle  # the position in the cycle, [0, 1)
        if x <= self.step_ratio:
            scale_factor = x / self.step_ratio
        else:
            scale_factor = (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [
            base + (top - base) * scale_factor * scale
            for base, top in zip(self.base_lrs, self.max_lrs, strict=True)
        ]
        if self.cycle_momentum:
            for group, bottom, top in zip(
                self.optimizer.param_groups, self.base_momentums, self.max_momentums, strict=True
            ):
                _set_momentum(group, top - (top - bottom) * scale_factor * scale, self.use_beta1)
        return lrs

    def state_dict(self) -> dict[str, Any]:
        """As PyTorch: the built-in scale function is not saved; a custom one only as its
        attributes (None for a plain function)."""
        state = super().state_dict()
        state.pop("_scale_fn_ref", None)
        function = state.pop("_scale_fn_custom")
        saved = None
        if function is not None and not isinstance(function, types.FunctionType):
            saved = function.__dict__.copy()
        state["_scale_fn_custom"] = saved
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        function = state.pop("_scale_fn_custom")
        super().load_state_dict(state)
        if function is not None:
            self._scale_fn_custom.__dict__.update(function)
        self._init_scale_fn()


def _triangular(x: float) -> float:
    return 1.0


def _triangular2(x: float) -> float:
    return 1 / (2.0 ** (x - 1))


def _exp_range(gamma: float, x: float) -> float:
    return gamma**x


class CosineAnnealingWarmRestarts(LRScheduler):
    """SGDR (Loshchilov & Hutter): eta_min + (initial_lr - eta_min) (1 + cos(pi T_cur / T_i)) / 2,
    where T_cur counts the epochs since the last restart and the i-th period lasts
    T_i = T_0 T_mult^i epochs. ``step(epoch)`` accepts a fractional epoch (PyTorch's way of
    stepping within an epoch)."""

    def __init__(
        self,
        optimizer: Optimizer,
        T_0: int,  # noqa: N803  (PyTorch's names)
        T_mult: int = 1,  # noqa: N803
        eta_min: float = 0.0,
        last_epoch: int = -1,
    ) -> None:
        if not isinstance(T_0, int) or T_0 <= 0:
            raise TinyattnError(f"Expected positive integer T_0, but got {T_0!r}")
        if not isinstance(T_mult, int) or T_mult < 1:
            raise TinyattnError(f"Expected integer T_mult >= 1, but got {T_mult!r}")
        if not isinstance(eta_min, float | int):
            raise TinyattnError(f"Expected float or int eta_min, but got {eta_min!r}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        cosine = math.cos(math.pi * self.T_cur / self.T_i)
        return [self.eta_min + (base - self.eta_min) * (1 + cosine) / 2 for base in self.base_lrs]

    def step(self, epoch: float | None = None) -> None:  # type: ignore[override]
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:  # a restart: the next period is T_mult times longer
                self.T_cur = self.T_cur % self.T_i
                self.T_i = self.T_i * self.T_mult
        else:
            self._jump_to(epoch)
        self.last_epoch = math.floor(epoch)
        for group, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=True):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def _jump_to(self, epoch: float) -> None:
        """T_cur and T_i at `epoch`: the period it falls in (a geometric series if T_mult > 1)."""
        if epoch < 0:
            raise TinyattnError(f"Expected non-negative epoch, but got {epoch!r}")
        if epoch < self.T_0:
            self.T_i, self.T_cur = self.T_0, epoch
        elif self.T_mult == 1:
            self.T_cur = epoch % self.T_0
        else:
            n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
            self.T_cur = epoch - self.T_0 * (self.T_mult**n - 1) / (self.T_mult - 1)
            self.T_i = self.T_0 * self.T_mult**n


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin): the lr rises from max_lr / div_factor to max_lr over
    pct_start of total_steps, then anneals to initial_lr / final_div_factor ("cos" or "linear");
    three_phase goes back to the initial lr before the final decay. With cycle_momentum the
    momentum (SGD's, or Adam's beta1) moves the other way between max_momentum and
    base_momentum. Step it after every batch; total_steps steps at most."""

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr: float | list[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float | list[float] = 0.85,
        max_momentum: float | list[float] = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ) -> None:
        check_optimizer(self, optimizer)
        self.optimizer = optimizer
        self.total_steps = _total_steps(total_steps, epochs, steps_per_epoch)
        self._schedule_phases = _phases(self.total_steps, pct_start, three_phase)
        if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
            raise TinyattnError(f"Expected float between 0 and 1 pct_start, but got {pct_start!r}")
        if anneal_strategy not in ("cos", "linear"):
            raise TinyattnError(
                f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy!r}"
            )
        self._anneal_func_type = anneal_strategy
        max_lrs = per_group("max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for top, group in zip(max_lrs, optimizer.param_groups, strict=True):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = _momentum_kind(self, optimizer)
            tops = per_group("max_momentum", optimizer, max_momentum)
            bottoms = per_group("base_momentum", optimizer, base_momentum)
            if last_epoch == -1:
                for top, bottom, group in zip(tops, bottoms, optimizer.param_groups, strict=True):
                    _set_momentum(group, top, self.use_beta1)
                    group["max_momentum"], group["base_momentum"] = top, bottom
        super().__init__(optimizer, last_epoch)

    def _anneal_func(self, start: float, end: float, pct: float) -> float:
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        step = self.last_epoch
        if step > self.total_steps:
            raise TinyattnError(
                f"Tried to step {step} times. The specified number of total steps is "
                f"{self.total_steps}"
            )
        lrs = []
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for index, phase in enumerate(self._schedule_phases):
                end_step = phase["end_step"]
                if step <= end_step or index == len(self._schedule_phases) - 1:
                    pct = (step - start_step) / (end_step - start_step)
                    lr = self._anneal_func(group[phase["start_lr"]], group[phase["end_lr"]], pct)
                    if self.cycle_momentum:
                        momentum = self._anneal_func(
                            group[phase["start_momentum"]], group[phase["end_momentum"]], pct
                        )
                    break
                start_step = phase["end_step"]
            lrs.append(lr)
            if self.cycle_momentum:
                _set_momentum(group, momentum, self.use_beta1)
        return lrs


def _total_steps(total_steps: int | None, epochs: int | None, steps_per_epoch: int | None) -> int:
    if total_steps is not None:
        if not isinstance(total_steps, int) or total_steps <= 0:
            raise TinyattnError(f"Expected positive integer total_steps, but got {total_steps!r}")
        return total_steps
    if epochs is not None and steps_per_epoch is not None:
        if not isinstance(epochs, int) or epochs <= 0:
            raise TinyattnError(f"Expected positive integer epochs, but got {epochs!r}")
        if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
            raise TinyattnError(
                f"Expected positive integer steps_per_epoch, but got {steps_per_epoch!r}"
            )
        return epochs * steps_per_epoch
    raise TinyattnError("You must define either total_steps OR (epochs AND steps_per_epoch)")


def _phases(total: int, pct_start: float, three_phase: bool) -> list[dict[str, Any]]:
    """PyTorch's phases: where each ends, and the group keys its lr and momentum go between."""
    warmup_end = float(pct_start * total) - 1
    up = dict(end_step=warmup_end, start_lr="initial_lr", end_lr="max_lr")
    up.update(start_momentum="max_momentum", end_momentum="base_momentum")
    if not three_phase:
        down = dict(end_step=total - 1, start_lr="max_lr", end_lr="min_lr")
        down.update(start_momentum="base_momentum", end_momentum="max_momentum")
        return [up, down]
    back = dict(end_step=float(2 * pct_start * total) - 2, start_lr="max_lr", end_lr="initial_lr")
    back.update(start_momentum="base_momentum", end_momentum="max_momentum")
    final = dict(end_step=total - 1, start_lr="initial_lr", end_lr="min_lr")
    final.update(start_momentum="max_momentum", end_momentum="max_momentum")
    return [up, back, final]


__all__ = [
    "ChainedScheduler",
    "CosineAnnealingWarmRestarts",
    "CyclicLR",
    "OneCycleLR",
    "ReduceLROnPlateau",
    "SequentialLR",
]
