"""Scans: the running sum along one axis.

The adjoint of a running sum is a running sum from the other end: dL/dx_i = sum_{j >= i} g_j,
which is flip(cumsum(flip(g))), so the backward is written with the same op and is itself
differentiable.
"""

from __future__ import annotations

from typing import Any

from ..autograd import Function
from ..backend import namespace


class Cumsum(Function):
    """y_i = sum_{j <= i} x_j along `axis`;  dL/dx_i = sum_{j >= i} g_j (a reversed running sum).

    Shapes: x (...) -> y (...), the same shape.
    """

    __slots__ = ("axis",)

    def forward(self, x: Any, axis: int = 0) -> Any:
        self.axis = axis
        return namespace(x).cumulative_sum(x, axis=axis, dtype=x.dtype)

    def backward(self, grad: Any) -> Any:
        return grad.flip(self.axis).cumsum(self.axis).flip(self.axis)
