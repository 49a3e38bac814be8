"""Optim layer: Adam's relatives, Adamax, NAdam and RAdam, with PyTorch's rules and state.

Imports `backend` and the optimizer helpers beside it. Each `_update` follows PyTorch's
single-tensor function step for step on raw arrays (the base class writes the result into the
parameter in place); the state keys are PyTorch's (``step``, ``exp_avg``, ``exp_inf`` or
``exp_avg_sq``, NAdam's ``mu_product``), so a PyTorch state dict loads and the run continues.
The per-tensor loop only: ``foreach`` is accepted and changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from .. import backend
from .optimizer import _lerp
from .options import LoopOptimizer, check_betas, check_flags, check_range, float32


def _decayed(param: Any, grad: Any, group: dict) -> tuple[Any, Any]:
    """PyTorch's first lines: negate the gradient for `maximize`, then L2 weight decay through
    the gradient, or (``decoupled_weight_decay``) shrink the weights directly, as AdamW."""
    if group["maximize"]:
        grad = -grad
    decay = group["weight_decay"]
    if decay and group.get("decoupled_weight_decay"):
        param = param * (1.0 - group["lr"] * decay)
    elif decay:
        grad = grad + decay * param
    return param, grad


class _AdamLike(LoopOptimizer):
    """The options the three share: lr, betas, eps, weight_decay and PyTorch's flags."""

    def _validate(self, group: dict[str, Any]) -> None:
        for name in ("lr", "eps", "weight_decay") + self.extra_numbers:
            check_range(self.name, name, group[name], 0.0)
        group["betas"] = check_betas(self.name, group["betas"])
        check_flags(self.name, group)

    extra_numbers: tuple[str, ...] = ()

    @staticmethod
    def _zeros(state: dict, param: Any, *keys: str) -> None:
        xp = backend.namespace(param)
        state["step"] = 0
        for key in keys:
            state[key] = xp.zeros_like(param)


class Adamax(_AdamLike):
    """Adamax (Kingma & Ba, section 7), Adam with the infinity norm, PyTorch's rule:
    g = grad + weight_decay * p;  m = lerp(m, g, 1 - beta1);  u = max(beta2 u, |g| + eps);
    p = p - lr / (1 - beta1^t) * m / u.
    """

    state_keys = ("step", "exp_avg", "exp_inf")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        super().__init__(params, defaults)

    def _update(self, param: Any, grad: Any, group: dict, state: dict) -> Any:
        xp = backend.namespace(param)
        beta1, beta2 = group["betas"]
        if not state:
            self._zeros(state, param, "exp_avg", "exp_inf")
        state["step"] += 1
        param, grad = _decayed(param, grad, group)
        state["exp_avg"] = _lerp(state["exp_avg"], grad, 1.0 - beta1)
        # The infinity norm's running maximum; eps keeps it positive where g has been 0.
        state["exp_inf"] = xp.maximum(state["exp_inf"] * beta2, xp.abs(grad) + group["eps"])
        step_size = group["lr"] / (1.0 - beta1 ** state["step"])
        return param + (-step_size * state["exp_avg"]) / state["exp_inf"]


class NAdam(_AdamLike):
    """NAdam (Dozat), Adam with Nesterov momentum, PyTorch's rule with t the step count and
    mu_t = beta1 (1 - 0.96^(t psi) / 2) (psi = momentum_decay), P_t = mu_1 ... mu_t:
    g = grad + weight_decay * p (or p = p (1 - lr weight_decay) when decoupled);
    m = lerp(m, g, 1 - beta1);  v = beta2 v + (1 - beta2) g^2;  d = sqrt(v / (1 - beta2^t)) + eps;
    p = p - lr (1 - mu_t) / (1 - P_t) g / d - lr mu_{t+1} / (1 - P_t mu_{t+1}) m / d.
    P_t is kept in float32, as PyTorch's ``mu_product`` tensor.
    """

    state_keys = ("step", "mu_product", "exp_avg", "exp_avg_sq")
    scalar_keys = ("mu_product",)
    extra_numbers = ("momentum_decay",)

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            momentum_decay=momentum_decay,
            decoupled_weight_decay=decoupled_weight_decay,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            differentiable=differentiable,
        )
        super().__init__(params, defaults)

    def _update(self, param: Any, grad: Any, group: dict, state: dict) -> Any:
        xp = backend.namespace(param)
        lr, (beta1, beta2), decay_rate = group["lr"], group["betas"], group["momentum_decay"]
        if not state:
            self._zeros(state, param, "exp_avg", "exp_avg_sq")
            state["mu_product"] = 1.0
        state["step"] += 1
        step = state["step"]
        param, grad = _decayed(param, grad, group)
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * decay_rate))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * decay_rate))
        mu_product = state["mu_product"] = float32(state["mu_product"] * float32(mu))
        exp_avg = state["exp_avg"] = _lerp(state["exp_avg"], grad, 1.0 - beta1)
        exp_avg_sq = state["exp_avg_sq"] * beta2 + (1.0 - beta2) * grad * grad
        state["exp_avg_sq"] = exp_avg_sq
        denominator = xp.sqrt(exp_avg_sq / (1.0 - beta2**step)) + group["eps"]
        # Nesterov's look-ahead: this step's gradient and the next step's momentum, each
        # bias-corrected by its own running product of the mu's.
        grad_factor = -lr * (1.0 - mu) / (1.0 - mu_product)
        momentum_factor = (-lr * mu_next) / (1.0 - mu_product * mu_next)
        param = param + (grad_factor * grad) / denominator
        return param + (momentum_factor * exp_avg) / denominator


class RAdam(_AdamLike):
    """RAdam (Liu et al.), Adam with the variance of its adaptive step rectified, PyTorch's rule
    with t the step count, rho_inf = 2 / (1 - beta2) - 1 and
    rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t):
    g = grad + weight_decay * p (or p = p (1 - lr weight_decay) when decoupled);
    m = lerp(m, g, 1 - beta1);  v = beta2 v + (1 - beta2) g^2;  m_hat = m / (1 - beta1^t);
    rho_t > 5: p = p - m_hat lr sqrt(1 - beta2^t) / (sqrt(v) + eps) r_t with
    r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t));
    else (too few steps for a trustworthy v): p = p - m_hat lr.
    """

    state_keys = ("step", "exp_avg", "exp_avg_sq")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            decoupled_weight_decay=decoupled_weight_decay,
            differentiable=differentiable,
        )
        super().__init__(params, defaults)

    def _update(self, param: Any, grad: Any, group: dict, state: dict) -> Any:
        xp = backend.namespace(param)
        lr, (beta1, beta2) = group["lr"], group["betas"]
        if not state:
            self._zeros(state, param, "exp_avg", "exp_avg_sq")
        state["step"] += 1
        step = state["step"]
        param, grad = _decayed(param, grad, group)
        exp_avg = state["exp_avg"] = _lerp(state["exp_avg"], grad, 1.0 - beta1)
        exp_avg_sq = state["exp_avg_sq"] * beta2 + (1.0 - beta2) * grad * grad
        state["exp_avg_sq"] = exp_avg_sq
        correction2 = 1.0 - beta2**step
        corrected = exp_avg / (1.0 - beta1**step)
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * (beta2**step) / correction2
        if rho_t <= 5.0:  # the variance estimate is not yet tractable: plain momentum SGD
            return param - corrected * lr
        rectification = math.sqrt(
            (rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)
        )
        adaptive = correction2**0.5 / (xp.sqrt(exp_avg_sq) + group["eps"])
        return param - corrected * lr * adaptive * rectification


__all__ = ["Adamax", "NAdam", "RAdam"]
