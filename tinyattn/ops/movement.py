"""Movement primitives with PyTorch's names: flip (reverse axes) and clone (copy).

Both move values without changing them, so each backward is the same movement of the gradient
(flip is its own inverse) or the gradient itself (a copy).
"""

from __future__ import annotations

from typing import Any

from ..autograd import Function
from ..backend import namespace


class Flip(Function):
    """y = x reversed along `axes`;  dL/dx = g reversed along the same axes.

    Shapes: x (...) -> y (...), the same shape.
    """

    __slots__ = ("axes",)

    def forward(self, x: Any, axes: tuple = ()) -> Any:
        self.axes = axes
        return namespace(x).flip(x, axis=axes)

    def backward(self, grad: Any) -> Any:
        return grad.flip(self.axes)


class Clone(Function):
    """y = a copy of x in new memory;  dL/dx = g.

    Shapes: x (...) -> y (...), the same shape.
    """

    __slots__ = ()

    def forward(self, x: Any) -> Any:
        return namespace(x).asarray(x, copy=True)

    def backward(self, grad: Any) -> Any:
        return grad
