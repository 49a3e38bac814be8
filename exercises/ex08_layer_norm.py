"""Exercise 8: the backward of LayerNorm (normalising the last axis, no weight or bias).

The math, along one row of n values (g = dL/dy):

    mu = mean(x),  var = mean((x - mu)^2),  r = 1 / sqrt(var + eps)
    y = x_hat = (x - mu) * r

    x_hat depends on x directly and through mu and r. Differentiating (d mu/dx_j = 1/n,
    dr/dx_j = -r^3 (x_j - mu) / n) and collecting terms gives
        dL/dx = r * (g - mean(g) - x_hat * mean(g * x_hat))
    with both means along the row (kept as a size-1 axis so they broadcast).

Hint: ``self.output`` is x_hat; ``(rstd,) = self.saved_tensors`` is r, saved by forward.

Grade it: ``python -m pytest exercises -k ex08``.
"""

from __future__ import annotations

from typing import Any

from tinyattn import Function, Tensor
from tinyattn.backend import namespace


class LayerNorm(Function):
    """y = (x - mean) / sqrt(var + eps) over the last axis;
    dL/dx = r * (g - mean(g) - y * mean(g * y)), r = 1 / sqrt(var + eps)."""

    def forward(self, x: Any, eps: float = 1e-5) -> Any:
        xp = namespace(x)
        centred = x - xp.mean(x, axis=-1, keepdims=True)
        rstd = 1.0 / xp.sqrt(xp.mean(centred * centred, axis=-1, keepdims=True) + eps)
        self.save_for_backward(rstd)
        return centred * rstd

    def backward(self, grad: Tensor) -> Tensor:
        raise NotImplementedError("exercise 8: write this rule (see the hint above)")


def layer_norm(x: Tensor, eps: float = 1e-5) -> Tensor:
    return LayerNorm.apply(x, eps=eps)
