"""Movement primitives with PyTorch's names: flip (reverse axes) and clone (copy).

Both move values without changing them, so each backward is the same movement of the gradient
(flip is its own inverse) or the gradient itself (a copy).
"""

from __future__ import annotations

from typing import Any

from ..autograd import Function
from ..backend import contiguous_copy, namespace


class Flip(Function):
    """y = x reversed along `axes`;  dL/dx = g reversed along the same axes.

    Shapes: x (...) -> y (...), the same shape.
    """

    __slots__ = ("axes",)

    def forward(self, x: Any, axes: tuple = ()) -> Any:
        self.axes = axes
        xp = namespace(x)
        # A copy, as PyTorch's flip: NumPy's flip is a view, and a write through it (or into x)
        # would reach the other without the shared version counter noticing.
        return xp.asarray(xp.flip(x, axis=axes), copy=True)

    def backward(self, grad: Any) -> Any:
        return grad.flip(self.axes)


class Clone(Function):
    """y = a copy of x in new memory;  dL/dx = g.

    Shapes: x (...) -> y (...), the same shape.
    """

    __slots__ = ()

    def forward(self, x: Any, contiguous: bool = False) -> Any:
        if contiguous:  # ``x.contiguous()``: row-major, whatever x's layout
            return contiguous_copy(x)
        return namespace(x).asarray(x, copy=True)

    def backward(self, grad: Any) -> Any:
        return grad
