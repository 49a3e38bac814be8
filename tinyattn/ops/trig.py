"""Trigonometric primitives: sin and cos, each the other's derivative (up to a sign).

Forward runs on raw arrays; backward is written with Tensor ops, so sin and cos differentiate
each other to any order.
"""

from __future__ import annotations

from typing import Any

from ..autograd import Function
from ..backend import namespace


class Sin(Function):
    """y = sin(x);  dL/dx = g * cos(x).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()

    def forward(self, x: Any) -> Any:
        return namespace(x).sin(x)

    def backward(self, grad: Any) -> Any:
        return grad * self.inputs[0].cos()


class Cos(Function):
    """y = cos(x);  dL/dx = -g * sin(x).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()

    def forward(self, x: Any) -> Any:
        return namespace(x).cos(x)

    def backward(self, grad: Any) -> Any:
        return -(grad * self.inputs[0].sin())
