"""Optim layer: three rules older than Adam, Adadelta, Rprop and ASGD, with PyTorch's rules and
state.

Imports `backend` and the optimizer helpers beside it. Each `_update` follows PyTorch's
single-tensor function step for step on raw arrays (the base class writes the result into the
parameter in place); the state keys are PyTorch's, so a PyTorch state dict loads and the run
continues. The per-tensor loop only: ``foreach`` is accepted and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import backend
from ..errors import TinyattnError
from .options import LoopOptimizer, check_flags, check_range, float32


class Adadelta(LoopOptimizer):
    """Adadelta (Zeiler), PyTorch's rule: each step's size is the ratio of two running RMS's,
    so no learning rate is needed (lr only scales the result):
    g = grad + weight_decay * p;  v = rho v + (1 - rho) g^2;
    delta = sqrt(u + eps) / sqrt(v + eps) * g;  u = rho u + (1 - rho) delta^2;  p = p - lr delta.
    """

    state_keys = ("step", "square_avg", "acc_delta")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        *,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            rho=rho,
            eps=eps,
            weight_decay=weight_decay,
            maximize=maximize,
            capturable=capturable,
            foreach=foreach,
            differentiable=differentiable,
        )
        super().__init__(params, defaults)

    def _validate(self, group: dict[str, Any]) -> None:
        for name in ("lr", "eps", "weight_decay"):
            check_range(self.name, name, group[name], 0.0)
        check_range(self.name, "rho", group["rho"], 0.0, 1.0)
        check_flags(self.name, group)

    def _update(self, param: Any, grad: Any, group: dict, state: dict) -> Any:
        xp = backend.namespace(param)
        rho, eps = group["rho"], group["eps"]
        if not state:
            state.update(step=0, square_avg=xp.zeros_like(param), acc_delta=xp.zeros_like(param))
        state["step"] += 1
        grad = -grad if group["maximize"] else grad
        if group["weight_decay"]:
            grad = grad + group["weight_decay"] * param
        square_avg = state["square_avg"] = state["square_avg"] * rho + (1 - rho) * grad * grad
        delta = xp.sqrt(state["acc_delta"] + eps) / xp.sqrt(square_avg + eps) * grad
        state["acc_delta"] = state["acc_delta"] * rho + (1 - rho) * delta * delta
        return param + (-group["lr"]) * delta


class Rprop(LoopOptimizer):
    """Rprop (Riedmiller & Braun), PyTorch's rule: only the gradient's sign is used. Each
    element keeps its own step size s, which grows by etaplus while the sign stays, shrinks by
    etaminus when it flips (and that element then skips one update), within step_sizes:
    c = sign(g * g_prev);  s = clip(s * (etaplus if c > 0, etaminus if c < 0, 1 if c = 0));
    g = 0 where c < 0;  p = p - sign(g) * s;  g_prev = g.
    """

    state_keys = ("step", "prev", "step_size")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        etas: tuple[float, float] = (0.5, 1.2),
        step_sizes: tuple[float, float] = (1e-6, 50),
        *,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            etas=etas,
            step_sizes=step_sizes,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        super().__init__(params, defaults)

    def _validate(self, group: dict[str, Any]) -> None:
        check_range(self.name, "lr", group["lr"], 0.0)
        for name in ("etas", "step_sizes"):
            if not isinstance(group[name], tuple | list) or len(group[name]) != 2:
                raise TinyattnError(f"{self.name}: {name} must be a pair, got {group[name]!r}")
            group[name] = tuple(group[name])
        etaminus, etaplus = group["etas"]
        if not 0.0 < etaminus < 1.0 < etaplus:
            raise TinyattnError(
                f"{self.name}: invalid eta values {etaminus!r}, {etaplus!r} "
                "(must be 0 < etaminus < 1 < etaplus)"
            )
        check_flags(self.name, group)

    def _update(self, param: Any, grad: Any, group: dict, state: dict) -> Any:
        xp = backend.namespace(param)
        etaminus, etaplus = group["etas"]
        low, high = group["step_sizes"]
        if not state:  # each element's step size starts at lr, in the parameter's dtype
            state.update(step=0, prev=xp.zeros_like(param))
            state["step_size"] = xp.full_like(param, group["lr"])
        state["step"] += 1
        grad = -grad if group["maximize"] else grad
        sign = xp.sign(grad * state["prev"])
        factor = xp.where(sign > 0, etaplus, xp.where(sign < 0, etaminus, 1.0))
        factor = xp.astype(factor, param.dtype)
        step_size = state["step_size"] = xp.clip(state["step_size"] * factor, low, high)
        # A flipped sign means the last step overshot: skip this element's update, and forget
        # its gradient so that the next step's comparison sees 0 (factor 1).
        grad = xp.where(factor == xp.asarray(etaminus, dtype=param.dtype), 0.0, grad)
        grad = xp.astype(grad, param.dtype)
        state["prev"] = grad
        return param + (-1) * xp.sign(grad) * step_size


class ASGD(LoopOptimizer):
    """Averaged SGD (Polyak & Juditsky), PyTorch's rule with t the step count: SGD with a
    decaying step eta, plus a running average ax of the iterates from step t0 on:
    g = grad + weight_decay * p;  p = p (1 - lambd eta) - eta g;
    ax = p if mu = 1 else ax + mu (p - ax);
    eta = lr / (1 + lambd lr t)^alpha;  mu = 1 / max(1, t - t0).
    eta and mu are float32, as PyTorch's 0-d state tensors. The averaged weights are
    ``optimizer.state[p]["ax"]``; the parameters themselves follow plain SGD.
    """

    state_keys = ("step", "eta", "mu", "ax")
    scalar_keys = ("eta", "mu")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        lambd: float = 1e-4,
        alpha: float = 0.75,
        t0: float = 1e6,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            lambd=lambd,
            alpha=alpha,
            t0=t0,
            weight_decay=weight_decay,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        super().__init__(params, defaults)

    def _validate(self, group: dict[str, Any]) -> None:
        for name in ("lr", "weight_decay"):
            check_range(self.name, name, group[name], 0.0)
        check_flags(self.name, group)

    def _update(self, param: Any, grad: Any, group: dict, state: dict) -> Any:
        xp = backend.namespace(param)
        lr, lambd = group["lr"], group["lambd"]
        if not state:
            state.update(step=0, eta=float32(lr), mu=1.0, ax=xp.zeros_like(param))
        state["step"] += 1
        grad = -grad if group["maximize"] else grad
        if group["weight_decay"]:
            grad = grad + group["weight_decay"] * param
        eta = state["eta"]
        param = param * (1 - lambd * eta)
        param = param + (-eta) * grad
        if state["mu"] != 1:
            state["ax"] = state["ax"] + (param - state["ax"]) * state["mu"]
        else:  # averaging has not started: the average is the iterate itself
            state["ax"] = xp.asarray(param, copy=True)
        step = state["step"]
        state["eta"] = float32(lr / ((1 + lambd * lr * step) ** group["alpha"]))
        state["mu"] = float32(1 / max(1, step - group["t0"]))
        return param


__all__ = ["ASGD", "Adadelta", "Rprop"]
