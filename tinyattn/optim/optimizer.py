"""Optim layer, part 1: the Optimizer base, SGD (momentum, Nesterov), Adam, AdamW, clip_grad_norm.

Imports `backend`, `autograd` and `tensor`. Invariants: updates run on raw arrays (no graph is
ever recorded) and are written into each parameter in place, as in PyTorch: views of a parameter
and ``state_dict()`` tensors (which share its array) see the new values, and the parameter's
version goes up, so backward through a graph kept from before the step raises instead of using
the new weights. Optimizer state arrays are replaced, never updated in place. The arithmetic
follows PyTorch's single-tensor implementations step for step, so float64 runs agree with torch
to ~1e-15.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from .. import backend
from ..autograd import enable_grad, replayed_call
from ..tensor import Tensor

# ------------------------------------------------------------------------------------ checks


def _check_number(op: str, name: str, value: Any, low: float, high: float | None = None) -> None:
    """value must be a real number in [low, high] (high exclusive when given as a bound)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and value >= low and (high is None or value < high)
    if not ok:
        bound = f"[{low}, {high})" if high is not None else f">= {low}"
        raise ValueError(f"{op}: invalid {name} {value!r} (must be a finite number {bound})")


def _param_list(op: str, params: Any) -> list[dict]:
    """Normalise an iterable of Tensors, or of {"params": [...], **options} dicts, into groups."""
    if isinstance(params, Tensor):
        raise TypeError(f"{op}: params must be an iterable of Tensors, got a single Tensor")
    groups = list(params)
    if not groups:
        raise ValueError(f"{op}: got an empty parameter list")
    if not isinstance(groups[0], dict):
        groups = [{"params": groups}]
    return groups


# PyTorch's implementation hints: accepted (programs pass fused=True on CUDA) and ignored, since
# they choose a kernel, not a result. Flags that change the result are refused unless off.
_HINTS = ("foreach", "fused", "capturable", "differentiable")
_REFUSED_WHEN_ON = ("amsgrad", "maximize", "decoupled_weight_decay")


def _check_flags(op: str, flags: dict[str, Any]) -> None:
    for name, value in flags.items():
        if name in _HINTS:
            continue
        if name in _REFUSED_WHEN_ON:
            if value:
                raise NotImplementedError(f"{op}: {name}=True is not supported")
            continue
        raise TypeError(f"{op}: unexpected keyword argument {name!r}")


# Keys a parameter group holds besides the optimizer's options (a scheduler adds initial_lr).
_GROUP_KEYS = {"params", "initial_lr"}


def _write(param: Tensor, array: Any, name: str) -> None:
    """Give `param` its new values in place, as PyTorch does: the Parameter object and its array
    stay the same (models, optimizers and state-dict snapshots keep seeing it), and its version
    goes up, so a graph that saved the old values refuses to backward through them."""
    param._store(f"{name}.step", array)


# --------------------------------------------------------------------------------- Optimizer


class Optimizer:
    """Base class: parameter groups with hyper-parameters, per-parameter state, zero_grad and
    state_dict. Subclasses define `defaults`, `_validate(group)`, `state_keys` and
    `_update(param, grad, group, state) -> new parameter array`."""

    state_keys: tuple[str, ...] = ()

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[Tensor, dict[str, Any]] = {}  # keyed by the Parameter itself
        for group in _param_list(self.name, params):
            self.add_param_group(group)

    @property
    def name(self) -> str:
        return type(self).__name__

    def add_param_group(self, group: dict[str, Any]) -> None:
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        known = {id(p) for g in self.param_groups for p in g["params"]}
        for position, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"{self.name}: parameter {position} is a {type(p).__name__}, not a Tensor"
                )
            if not p.is_leaf:
                raise ValueError(
                    f"{self.name}: parameter {position} (shape {p.shape}) is not a leaf"
                )
            if id(p) in known:
                raise ValueError(
                    f"{self.name}: parameter {position} (shape {p.shape}) appears twice"
                )
            known.add(id(p))
        unknown = set(group) - set(self.defaults) - _GROUP_KEYS
        if unknown:
            raise ValueError(
                f"{self.name}: unknown option(s) {sorted(unknown)} in a parameter group"
            )
        full = {**self.defaults, **group, "params": params}
        self._validate(full)
        self.param_groups.append(full)

    def _validate(self, group: dict[str, Any]) -> None:
        raise NotImplementedError

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Set every parameter's gradient to None (PyTorch's default), or with
        ``set_to_none=False`` to a new zero Tensor of its shape."""
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none or p.grad is None:
                    p.grad = None
                else:
                    xp = backend.namespace(p.grad.array)
                    p.grad = Tensor._from_op(xp.zeros_like(p.grad.array), None)

    @replayed_call  # a compiled step runs it on every replay
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient (parameters without one are skipped).

        With a closure (PyTorch's form), it is called first, with grad mode on, to recompute
        the loss and gradients; its result is returned.
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        position = -1
        for group in self.param_groups:
            for p in group["params"]:
                position += 1
                if p.grad is None:
                    continue
                self._check_grad(position, p)
                state = self.state.setdefault(p, {})
                _write(p, self._update(p.array, p.grad.array, group, state), self.name)
        return loss

    def _update(self, param: Any, grad: Any, group: dict, state: dict) -> Any:
        raise NotImplementedError

    def _check_grad(self, position: int, p: Tensor) -> None:
        """A gradient set by hand must match its parameter (NumPy would broadcast it silently)."""
        if p.grad.shape != p.shape:
            raise ValueError(
                f"{self.name}.step: parameter {position} has shape {p.shape} but its gradient "
                f"has shape {p.grad.shape}"
            )
        if p.grad.device != p.device:
            raise RuntimeError(
                f"{self.name}.step: parameter {position} is on device '{p.device}' but its "
                f"gradient is on '{p.grad.device}'"
            )

    # ------------------------------------------------------------------------- state dict
    def _all_params(self) -> list[Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def state_dict(self) -> dict[str, Any]:
        """{"state": {index: {name: Tensor or number}}, "param_groups": [{options, "params":
        [indices]}]}, PyTorch's layout; indices count parameters across groups in order."""
        state = {}
        for index, p in enumerate(self._all_params()):
            if p in self.state:
                state[index] = {
                    key: Tensor._from_op(v, None) if hasattr(v, "shape") else v
                    for key, v in self.state[p].items()
                }
        groups, start = [], 0
        for group in self.param_groups:
            count = len(group["params"])
            options = {k: v for k, v in group.items() if k != "params"}
            groups.append({**options, "params": list(range(start, start + count))})
            start += count
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore state and hyper-parameters, all or nothing: a mismatch changes nothing."""
        op = f"{self.name}.load_state_dict"
        if set(state_dict) != {"state", "param_groups"}:
            raise ValueError(
                f"{op}: expected keys 'state' and 'param_groups', got {sorted(state_dict)}"
            )
        groups = list(state_dict["param_groups"])
        if len(groups) != len(self.param_groups):
            raise ValueError(
                f"{op}: the checkpoint has {len(groups)} parameter group(s), this optimizer "
                f"has {len(self.param_groups)}"
            )
        new_groups = []
        for number, (saved, mine) in enumerate(zip(groups, self.param_groups, strict=True)):
            if not isinstance(saved, dict) or "params" not in saved:
                raise ValueError(f"{op}: parameter group {number} has no 'params' list")
            unknown = set(saved) - set(self.defaults) - _GROUP_KEYS
            if unknown:
                raise ValueError(
                    f"{op}: parameter group {number} has option(s) {sorted(unknown)} that "
                    f"{self.name} does not have (a checkpoint of another optimizer?)"
                )
            if len(saved["params"]) != len(mine["params"]):
                raise ValueError(
                    f"{op}: parameter group {number} has {len(saved['params'])} parameter(s) in "
                    f"the checkpoint but {len(mine['params'])} here"
                )
            options = {k: _plain(v) for k, v in saved.items() if k != "params"}
            new_group = {**mine, **options, "params": mine["params"]}
            self._validate(new_group)
            new_groups.append(new_group)
        new_state = self._converted_state(op, state_dict["state"])
        self.param_groups, self.state = new_groups, new_state

    def _converted_state(self, op: str, saved: dict) -> dict[Tensor, dict[str, Any]]:
        params = self._all_params()
        new_state: dict[Tensor, dict[str, Any]] = {}
        for raw_index, entries in saved.items():
            try:
                index = int(raw_index)
            except (TypeError, ValueError):
                raise ValueError(
                    f"{op}: state key {raw_index!r} is not a parameter index"
                ) from None
            if not 0 <= index < len(params):
                raise ValueError(f"{op}: state for parameter {index}, but there are {len(params)}")
            unexpected = set(entries) - set(self.state_keys)
            if unexpected:
                raise ValueError(
                    f"{op}: unexpected state key(s) {sorted(unexpected)} for parameter {index} "
                    f"({self.name} keeps {list(self.state_keys)})"
                )
            p, converted = params[index], {}
            for key, value in entries.items():
                if key == "step":
                    converted[key] = int(_plain(value))
                    continue
                array = Tensor(value, dtype=backend.dtype_name(p.dtype), device=p.device).array
                if tuple(array.shape) != p.shape:
                    raise ValueError(
                        f"{op}: state '{key}' of parameter {index} has shape {tuple(array.shape)}, "
                        f"the parameter has shape {p.shape}"
                    )
                converted[key] = array
            new_state[p] = converted
        return new_state


def _plain(value: Any) -> Any:
    """Tensors (as ta.load returns numbers) back to Python numbers or tuples."""
    if isinstance(value, Tensor):
        value = value.numpy().tolist()
    return tuple(value) if isinstance(value, list) else value


# --------------------------------------------------------------------------------------- SGD


class SGD(Optimizer):
    """Stochastic gradient descent, PyTorch's rule:
    g = grad + weight_decay * p;  b = g (first step) or momentum * b + (1 - dampening) * g;
    g = g + momentum * b (nesterov) or b;  p = p - lr * g.
    """

    state_keys = ("momentum_buffer",)

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        momentum: float = 0.0,
        dampening: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
        **flags: Any,
    ) -> None:
        _check_flags(type(self).__name__, flags)
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            nesterov=nesterov,
            weight_decay=weight_decay,
        )
        super().__init__(params, defaults)

    def _validate(self, group: dict[str, Any]) -> None:
        for name in ("lr", "momentum", "dampening", "weight_decay"):
            _check_number(self.name, name, group[name], 0.0)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("SGD: nesterov momentum needs momentum > 0 and dampening = 0")

    def _update(self, param: Any, grad: Any, group: dict, state: dict) -> Any:
        momentum = group["momentum"]
        if group["weight_decay"]:
            grad = grad + group["weight_decay"] * param
        if momentum:
            buffer = state.get("momentum_buffer")
            if buffer is None:
                buffer = grad
            else:
                buffer = momentum * buffer + (1.0 - group["dampening"]) * grad
            state["momentum_buffer"] = buffer
            grad = grad + momentum * buffer if group["nesterov"] else buffer
        return param - group["lr"] * grad


# -------------------------------------------------------------------------------------- Adam


def _lerp(start: Any, end: Any, weight: float) -> Any:
    """start + weight * (end - start), in the form PyTorch's CPU kernel picks for this weight."""
    if weight < 0.5:
        return start + weight * (end - start)
    return end - (end - start) * (1.0 - weight)


class Adam(Optimizer):
    """Adam (Kingma & Ba), PyTorch's rule, with t the step count:
    g = grad + weight_decay * p;  m = lerp(m, g, 1 - beta1);  v = beta2 v + (1 - beta2) g^2;
    p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
    """

    state_keys = ("step", "exp_avg", "exp_avg_sq")
    decoupled = False  # AdamW: decay the weights directly instead of through the gradient

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        **flags: Any,
    ) -> None:
        _check_flags(type(self).__name__, flags)
        super().__init__(
            params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
        )

    def _validate(self, group: dict[str, Any]) -> None:
        for name in ("lr", "eps", "weight_decay"):
            _check_number(self.name, name, group[name], 0.0)
        betas = group["betas"]
        if not isinstance(betas, tuple | list) or len(betas) != 2:
            raise ValueError(f"{self.name}: betas must be a pair (beta1, beta2), got {betas!r}")
        for index, beta in enumerate(betas):
            _check_number(self.name, f"beta at index {index}", beta, 0.0, 1.0)
        group["betas"] = tuple(betas)

    def _update(self, param: Any, grad: Any, group: dict, state: dict) -> Any:
        xp = backend.namespace(param)
        lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros_like(param)
            state["exp_avg_sq"] = xp.zeros_like(param)
        if self.decoupled:
            param = param * (1.0 - lr * decay)
        elif decay:
            grad = grad + decay * param
        state["step"] += 1
        step = state["step"]
        state["exp_avg"] = _lerp(state["exp_avg"], grad, 1.0 - beta1)
        state["exp_avg_sq"] = state["exp_avg_sq"] * beta2 + (1.0 - beta2) * (grad * grad)
        step_size = lr / (1.0 - beta1**step)
        denominator = xp.sqrt(state["exp_avg_sq"]) / math.sqrt(1.0 - beta2**step) + eps
        return param + (-step_size) * (state["exp_avg"] / denominator)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter), PyTorch's rule:
    p = p * (1 - lr * weight_decay), then the Adam step on the raw gradient.
    """

    decoupled = True

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        **flags: Any,
    ) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, **flags)


# ---------------------------------------------------------------------------------- clipping


@replayed_call  # a compiled step runs it on every replay
def clip_grad_norm(params: Iterable[Tensor] | Tensor, max_norm: float, eps: float = 1e-6) -> float:
    """Scale all gradients by min(1, max_norm / (total + eps)), total = sqrt(sum of |g|^2) over
    every parameter (PyTorch's rule); returns the total norm before clipping as a float.

    Each gradient is replaced by a new Tensor, never scaled in place (gradients may share arrays).
    """
    _check_number("clip_grad_norm", "max_norm", max_norm, 0.0)
    params = [params] if isinstance(params, Tensor) else list(params)
    grads = [p for p in params if p.grad is not None]
    squares = 0.0
    for p in grads:
        xp = backend.namespace(p.grad.array)
        squares += float(xp.sum(p.grad.array * p.grad.array))
    total = math.sqrt(squares)
    scale = min(1.0, max_norm / (total + eps))
    for p in grads:
        p.grad = Tensor._from_op(p.grad.array * scale, None)
    return total


__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "clip_grad_norm"]
