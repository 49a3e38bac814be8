"""Optim layer: Muon, PyTorch's optimizer for the 2-d weights of hidden layers: momentum whose
update is orthogonalised by a Newton-Schulz iteration before it is applied.

Imports `backend` and the optimizer helpers beside it. As in PyTorch, the iteration runs in
bfloat16: every intermediate is rounded to bfloat16 (`backend.bfloat16`; products are summed in
float32 and rounded once, as PyTorch's CPU matmul does), so the update equals PyTorch's up to
the order of float32 sums inside a matrix product. Other parameters (biases, embeddings) belong
to another optimizer such as AdamW.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from .. import backend
from ..backend.bfloat16 import round_to_bfloat16
from ..errors import TinyattnError
from .optimizer import _lerp
from .options import LoopOptimizer, check_range

# Keller Jordan's quintic coefficients: chosen to raise small singular values fast.
EPS = 1e-7
DEFAULT_A, DEFAULT_B, DEFAULT_C = 3.4445, -4.7750, 2.0315
DEFAULT_NS_STEPS = 5


def zeropower_via_newtonschulz(
    grad: Any, ns_coefficients: tuple[float, float, float], ns_steps: int, eps: float
) -> Any:
    """An approximately orthogonal matrix with grad's singular vectors (U S' V^T, S' near 1),
    PyTorch's iteration in bfloat16: X = G / max(|G|_F, eps) (the spectral norm is then <= 1);
    ns_steps times: A = X X^T, B = b A + c A A, X = a X + B X. A tall matrix is transposed so
    that the Gram matrix A is the smaller one."""
    if ns_steps >= 100:
        raise TinyattnError("Muon: the number of Newton-Schulz steps must be less than 100")
    if len(grad.shape) != 2:
        raise TinyattnError(f"Muon: the gradient must be a 2-d matrix, got shape {grad.shape}")
    a, b, c = ns_coefficients
    xp, bf16 = backend.namespace(grad), round_to_bfloat16
    tall = grad.shape[0] > grad.shape[1]
    ortho = bf16(xp.astype(grad, xp.float32))  # float64 goes through float32, as in PyTorch
    if tall:
        ortho = ortho.mT
    norm = bf16(xp.sqrt(xp.sum(ortho * ortho)))
    ortho = bf16(ortho / bf16(xp.maximum(norm, xp.asarray(eps, dtype=xp.float32))))
    a, b, c = (float(xp.asarray(v, dtype=xp.float32)) for v in (a, b, c))
    for _ in range(ns_steps):
        gram = bf16(ortho @ ortho.mT)
        gram_update = bf16(b * gram + c * (gram @ gram))  # addmm: one rounding of the sum
        ortho = bf16(a * ortho + gram_update @ ortho)
    return ortho.mT if tall else ortho


def adjust_lr(lr: float, adjust_lr_fn: str | None, param_shape: tuple[int, ...]) -> float:
    """The lr scaled so that updates of matrices of any shape have a comparable RMS: "original"
    (the default, Keller Jordan's) sqrt(max(1, A / B)); "match_rms_adamw" (Moonshot's)
    0.2 sqrt(max(A, B)), which makes AdamW's lr and weight decay reusable."""
    rows, columns = param_shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        ratio = math.sqrt(max(1, rows / columns))
    elif adjust_lr_fn == "match_rms_adamw":
        ratio = 0.2 * math.sqrt(max(rows, columns))
    else:
        ratio = 1.0
    return lr * ratio


class Muon(LoopOptimizer):
    """Muon (Keller Jordan), PyTorch's rule for 2-d parameters:
    B = lerp(B, g, 1 - momentum) (B starts at 0);  U = lerp(g, B, momentum) (nesterov) or B;
    O = NS(U) (`zeropower_via_newtonschulz`, in bfloat16);
    p = p (1 - lr weight_decay);  p = p - adjust_lr(lr, shape) O.
    """

    state_keys = ("momentum_buffer",)

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: tuple[float, float, float] = (DEFAULT_A, DEFAULT_B, DEFAULT_C),
        eps: float = EPS,
        ns_steps: int = DEFAULT_NS_STEPS,
        adjust_lr_fn: str | None = None,
    ) -> None:
        defaults = dict(
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            nesterov=nesterov,
            ns_coefficients=ns_coefficients,
            eps=eps,
            ns_steps=ns_steps,
            adjust_lr_fn=adjust_lr_fn,
        )
        super().__init__(params, defaults)

    def _validate(self, group: dict[str, Any]) -> None:
        for name in ("lr", "momentum", "weight_decay"):
            check_range(self.name, name, group[name], 0.0)
        if group["adjust_lr_fn"] not in (None, "original", "match_rms_adamw"):
            raise TinyattnError(
                f"Muon: adjust_lr_fn {group['adjust_lr_fn']!r} is not supported (None, "
                "'original' or 'match_rms_adamw')"
            )
        if len(tuple(group["ns_coefficients"])) != 3:
            raise TinyattnError("Muon: ns_coefficients must be three numbers (a, b, c)")
        for p in group["params"]:
            if p.ndim != 2:
                raise TinyattnError(
                    f"Muon only supports 2-d parameters, got one of shape {tuple(p.shape)}: "
                    "optimize biases and embeddings with another optimizer such as AdamW"
                )

    def _update(self, param: Any, grad: Any, group: dict, state: dict) -> Any:
        xp, momentum = backend.namespace(param), group["momentum"]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = xp.zeros_like(grad)
        buffer = state["momentum_buffer"] = _lerp(state["momentum_buffer"], grad, 1 - momentum)
        update = _lerp(grad, buffer, momentum) if group["nesterov"] else buffer
        update = zeropower_via_newtonschulz(
            update, tuple(group["ns_coefficients"]), group["ns_steps"], group["eps"]
        )
        adjusted_lr = adjust_lr(group["lr"], group["adjust_lr_fn"], param.shape)
        param = param * (1 - group["lr"] * group["weight_decay"])
        return param + (-adjusted_lr) * xp.astype(update, param.dtype)


__all__ = ["Muon"]
