"""Movement primitives with PyTorch's names: flip (reverse axes) and clone (copy).

Both move values without changing them, so each backward is the same movement of the gradient
(flip is its own inverse) or the gradient itself (a copy).
"""

from __future__ import annotations

from typing import Any

from ..autograd import Function
from ..backend import contiguous_copy, diagonal_view, namespace


class Flip(Function):
    """y = x reversed along `axes`;  dL/dx = g reversed along the same axes;
    dy = dx reversed along the same axes.

    Shapes: x (...) -> y (...), the same shape.
    """

    __slots__ = ("axes",)
    backward_reads = ()  # the rule needs only the gradient

    def forward(self, x: Any, axes: tuple = ()) -> Any:
        self.axes = axes
        xp = namespace(x)
        # A copy, as PyTorch's flip: NumPy's flip is a view, and a write through it (or into x)
        # would reach the other without the shared version counter noticing.
        return xp.asarray(xp.flip(x, axis=axes), copy=True)

    def backward(self, grad: Any) -> Any:
        return grad.flip(self.axes)

    def jvp(self, tangent: Any) -> Any:
        return Flip.apply(tangent, axes=self.axes)


class Clone(Function):
    """y = a copy of x in new memory;  dL/dx = g;  dy = a copy of dx.

    Shapes: x (...) -> y (...), the same shape.
    """

    __slots__ = ()
    backward_reads = ()  # the gradient passes through: no value is read

    def forward(self, x: Any, contiguous: bool = False) -> Any:
        if contiguous:  # ``x.contiguous()``: row-major, whatever x's layout
            return contiguous_copy(x)
        return namespace(x).asarray(x, copy=True)

    def backward(self, grad: Any) -> Any:
        return grad

    def jvp(self, tangent: Any) -> Any:
        # A copy, not dx itself: an in-place write into y updates y's tangent in place, which
        # must not reach x's.
        return tangent.clone()


class Diagonal(Function):
    """y = the diagonal `offset` of the matrices axes (a, b) span, as a new last axis, a view
    of x;  dL/dx = g placed on that diagonal, zeros elsewhere;  dy = the same diagonal of dx.

    Shapes: x (..., r, ..., c, ...) -> y (the other axes..., the diagonal's length)."""

    __slots__ = ("shape", "offset", "axes")
    backward_reads = ()
    shares_storage = True

    def forward(self, x: Any, offset: int = 0, axes: tuple = (0, 1)) -> Any:
        self.shape, self.offset, self.axes = x.shape, offset, axes
        return diagonal_view(x, offset, *axes)

    def backward(self, grad: Any) -> Any:
        return DiagonalEmbed.apply(grad, shape=self.shape, offset=self.offset, axes=self.axes)

    def jvp(self, tangent: Any) -> Any:
        return Diagonal.apply(tangent, offset=self.offset, axes=self.axes)


class DiagonalEmbed(Function):
    """y = zeros of `shape` with g on the diagonal `offset` of axes (a, b) (Diagonal's adjoint);
    dL/dg = the same diagonal of dL/dy;  dy = zeros with dg on that diagonal.

    Shapes: g (the other axes..., length) -> y `shape`."""

    __slots__ = ("offset", "axes")
    backward_reads = ()

    def forward(self, grad: Any, shape: tuple = (), offset: int = 0, axes: tuple = (0, 1)) -> Any:
        self.offset, self.axes = offset, axes
        out = namespace(grad).zeros(shape, dtype=grad.dtype, device=grad.device)
        diagonal_view(out, offset, *axes)[...] = grad
        return out

    def backward(self, grad: Any) -> Any:
        return Diagonal.apply(grad, offset=self.offset, axes=self.axes)

    def jvp(self, tangent: Any) -> Any:
        shape = self.output.shape
        return DiagonalEmbed.apply(tangent, shape=shape, offset=self.offset, axes=self.axes)


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`.
VMAP_RULES = {Flip: "along_axes", Clone: "elementwise"}
