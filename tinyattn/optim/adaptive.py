"""Optim layer, part 2: RMSprop and Adagrad, PyTorch's per-parameter adaptive step sizes.

Imports `backend`, `tensor` and the Optimizer base beside it. Invariants: each update follows
PyTorch's single-tensor arithmetic step for step (on raw arrays, written into the parameter in
place by the base class); the state keys are PyTorch's (``step``, ``square_avg``,
``momentum_buffer``, ``grad_avg``; ``step``, ``sum``), so a PyTorch optimizer's state dict
loads here and the run continues. These two run the per-tensor loop only (no flat path).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import backend
from ..errors import TinyattnError
from ..tensor import Tensor
from .optimizer import Optimizer, _check_flags, _check_number, _lerp, _Opmath


class RMSprop(Optimizer):
    """RMSprop (Hinton), PyTorch's rule:
    g = grad + weight_decay * p;  v = alpha v + (1 - alpha) g^2;
    centered: a = lerp(a, g, 1 - alpha), d = sqrt(v - a^2) + eps;  else d = sqrt(v) + eps;
    momentum > 0: b = momentum b + g / d, p = p - lr b;  else p = p - lr g / d.
    """

    state_keys = ("step", "square_avg", "momentum_buffer", "grad_avg")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        foreach: bool | None = None,
        **flags: Any,
    ) -> None:
        _check_flags(type(self).__name__, flags)
        defaults = dict(
            lr=lr,
            alpha=alpha,
            eps=eps,
            weight_decay=weight_decay,
            momentum=momentum,
            centered=centered,
            foreach=foreach,
        )
        super().__init__(params, defaults)

    def _validate(self, group: dict[str, Any]) -> None:
        for name in ("lr", "alpha", "eps", "weight_decay", "momentum"):
            _check_number(self.name, name, group[name], 0.0)
        if not isinstance(group["centered"], bool):
            raise TinyattnError(f"{self.name}: centered must be a bool, got {group['centered']!r}")

    def _update(self, param: Any, grad: Any, group: dict, state: dict) -> Any:
        xp = backend.namespace(param)
        alpha, momentum = group["alpha"], group["momentum"]
        if not state:  # PyTorch's first-step state: zeros, and only the buffers in use
            state["step"] = 0
            state["square_avg"] = xp.zeros_like(param)
            if momentum > 0:
                state["momentum_buffer"] = xp.zeros_like(param)
            if group["centered"]:
                state["grad_avg"] = xp.zeros_like(param)
        state["step"] += 1
        ops = _Opmath(param, self.name)  # one PyTorch op per `ops.store`
        param, grad = ops.wide(param), ops.wide(grad)
        if group["weight_decay"]:
            grad = ops.store(grad + ops.added("weight_decay", group["weight_decay"]) * param)
        square_avg = ops.store(ops.wide(state["square_avg"]) * alpha)
        square_avg = ops.store(square_avg + (1.0 - alpha) * grad * grad)
        state["square_avg"] = ops.narrow(square_avg)
        if group["centered"]:
            grad_avg = ops.store(_lerp(ops.wide(state["grad_avg"]), grad, 1.0 - alpha))
            state["grad_avg"] = ops.narrow(grad_avg)
            variance = ops.store(square_avg - grad_avg * grad_avg)
            average = ops.store(xp.sqrt(variance))
        else:
            average = ops.store(xp.sqrt(square_avg))
        average = ops.store(average + ops.added("eps", group["eps"]))
        if momentum > 0:
            buffer = ops.store(ops.wide(state["momentum_buffer"]) * momentum)
            buffer = ops.store(buffer + grad / average)
            state["momentum_buffer"] = ops.narrow(buffer)
            return ops.narrow(param + (-ops.added("lr", group["lr"])) * buffer)
        return ops.narrow(param + (-group["lr"]) * (grad / average))


class Adagrad(Optimizer):
    """Adagrad (Duchi et al.), PyTorch's rule, with t the step count:
    g = grad + weight_decay * p;  s = s + g^2;  p = p - lr / (1 + (t - 1) lr_decay) g / (sqrt(s)
    + eps). Each parameter's state (step 0, s = initial_accumulator_value) exists from the start,
    as in PyTorch.
    """

    state_keys = ("step", "sum")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        foreach: bool | None = None,
        **flags: Any,
    ) -> None:
        _check_flags(type(self).__name__, flags)
        defaults = dict(
            lr=lr,
            lr_decay=lr_decay,
            eps=eps,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            foreach=foreach,
        )
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p] = self._initial_state(p, group)

    @staticmethod
    def _initial_state(param: Tensor, group: dict) -> dict[str, Any]:
        xp = backend.namespace(param.array)
        total = xp.full_like(param.array, group["initial_accumulator_value"])
        return {"step": 0, "sum": total}

    def _validate(self, group: dict[str, Any]) -> None:
        for name in ("lr", "lr_decay", "eps", "weight_decay", "initial_accumulator_value"):
            _check_number(self.name, name, group[name], 0.0)

    def _update(self, param: Any, grad: Any, group: dict, state: dict) -> Any:
        xp = backend.namespace(param)
        if not state:  # a parameter group added after construction
            state.update(self._initial_state(Tensor._from_op(param, None), group))
        state["step"] += 1
        ops = _Opmath(param, self.name)  # one PyTorch op per `ops.store`
        param, grad = ops.wide(param), ops.wide(grad)
        if group["weight_decay"]:
            grad = ops.store(grad + ops.added("weight_decay", group["weight_decay"]) * param)
        step_size = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        total = ops.store(ops.wide(state["sum"]) + grad * grad)
        state["sum"] = ops.narrow(total)
        deviation = ops.store(ops.store(xp.sqrt(total)) + ops.added("eps", group["eps"]))
        return ops.narrow(param + (-step_size) * (grad / deviation))


__all__ = ["Adagrad", "RMSprop"]
