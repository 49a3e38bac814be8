"""Trigonometric primitives: sin and cos, each the other's derivative (up to a sign), and atan2.

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


class Atan2(Function):
    """y = atan2(a, b), the angle of the point (b, a) in (-pi, pi];  with r2 = a**2 + b**2,
    dL/da = g * b / r2 and dL/db = -g * a / r2 (NaN at the origin, as in PyTorch).

    Shapes: a and b broadcast together -> y (the broadcast shape).
    """

    __slots__ = ()
    backward_reads = ("inputs",)

    def forward(self, a: Any, b: Any) -> Any:
        return namespace(a).atan2(a, b)

    def backward(self, grad: Any) -> tuple:
        a, b = self.inputs
        scaled = grad / (a * a + b * b)
        return (
            (scaled * b).sum_to(a.shape) if a.requires_grad else None,
            (-scaled * a).sum_to(b.shape) if b.requires_grad else None,
        )
