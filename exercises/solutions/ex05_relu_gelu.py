# Reference solution: ex05_relu_gelu.py with its rule written in.
"""Exercise 5: the backward of ReLU and GELU.

The math (g = dL/dy):

    ReLU:  y = max(x, 0)              dL/dx = g * [x > 0]   (0 at x = 0, as in PyTorch)
    GELU (tanh form):
           u = c * (x + 0.044715 x^3),  c = sqrt(2 / pi),  t = tanh(u)
           y = 0.5 x (1 + t)
           dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) * c * (1 + 3 * 0.044715 x^2)
           dL/dx = g * dy/dx

Hint: ``[x > 0]`` is a 0/1 mask; build it as an array and make it a constant Tensor:
``grad.constant(namespace(x.array).astype(x.array > 0, grad.dtype))``. For GELU, write dy/dx with
Tensor operations on ``x = self.inputs[0]`` (``x.tanh()``, ``x * x``, numbers).

Grade it: ``python -m pytest exercises -k ex05``.
"""

from __future__ import annotations

import math
from typing import Any

from tinyattn import Function, Tensor
from tinyattn.backend import namespace

C = math.sqrt(2.0 / math.pi)
K = 0.044715


class Relu(Function):
    """y = max(x, 0);  dL/dx = g * [x > 0]."""

    def forward(self, x: Any) -> Any:
        return namespace(x).maximum(x, 0.0)

    def backward(self, grad: Tensor) -> Tensor:
        x = self.inputs[0]
        return grad * grad.constant(namespace(x.array).astype(x.array > 0, grad.dtype))


class Gelu(Function):
    """y = 0.5 x (1 + tanh(c (x + k x^3)));  dL/dx = g * dy/dx (see the module docstring)."""

    def forward(self, x: Any) -> Any:
        xp = namespace(x)
        return 0.5 * x * (1.0 + xp.tanh(C * (x + K * x**3)))

    def backward(self, grad: Tensor) -> Tensor:
        x = self.inputs[0]
        t = ((x + K * x * x * x) * C).tanh()
        slope = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * C * (1.0 + 3.0 * K * x * x)
        return grad * slope


def relu(x: Tensor) -> Tensor:
    return Relu.apply(x)


def gelu(x: Tensor) -> Tensor:
    return Gelu.apply(x)
