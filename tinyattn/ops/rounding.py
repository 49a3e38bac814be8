"""Rounding primitives: floor, ceil, round, trunc, sign, floor division and remainder.

floor, ceil, round, trunc and sign are step functions: their derivative is 0 wherever it exists, and
PyTorch defines it as 0 everywhere, so their gradient is zeros (the graph is kept, so a loss
through them backpropagates zeros rather than failing), and so is their tangent. Floor division
has no derivative in PyTorch at all: its backward raises. The remainder a - b * floor(a / b) is
differentiable almost everywhere.
"""

from __future__ import annotations

from typing import Any

from ..autograd import Function
from ..backend import namespace


class _Step(Function):
    """A piecewise-constant function: y = step(x);  dL/dx = 0, dy = 0 (PyTorch's convention)."""

    __slots__ = ()
    backward_reads = ()  # the rule needs only the gradient
    step = ""  # the array API function name

    def forward(self, x: Any) -> Any:
        return getattr(namespace(x), self.step)(x)

    def backward(self, grad: Any) -> Any:
        return grad * 0.0

    def jvp(self, dx: Any) -> Any:
        y = self.output
        return y.constant(namespace(y.array).zeros_like(y.array))


class Floor(_Step):
    """y = floor(x), the largest integer <= x;  dL/dx = 0, dy = 0.

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    step = "floor"


class Ceil(_Step):
    """y = ceil(x), the smallest integer >= x;  dL/dx = 0, dy = 0.

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    step = "ceil"


class Round(_Step):
    """y = x rounded to the nearest integer, halves to even (as NumPy and PyTorch);
    dL/dx = 0, dy = 0.

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    step = "round"


class Trunc(_Step):
    """y = x rounded toward zero (its integer part);  dL/dx = 0, dy = 0.

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    step = "trunc"


class Sign(_Step):
    """y = -1, 0 or 1 by the sign of x (NaN gives 0, as in PyTorch);  dL/dx = 0, dy = 0.

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    step = "sign"

    def forward(self, x: Any) -> Any:
        return sign_array(x)


def sign_array(x: Any) -> Any:
    """PyTorch's sign of a float array: -1, 0 or 1, and 0 for NaN. The array API's sign keeps
    NaN (both give +0.0 for -0.0); Abs's gradient uses this too, 0 at NaN as PyTorch's."""
    xp = namespace(x)
    y = xp.sign(x)
    return xp.where(xp.isnan(y), xp.zeros_like(y), y)


class FloorDivide(Function):
    """y = floor(a / b) (Python's ``//``);  no derivative: backward raises, as in PyTorch.

    Shapes: a and b broadcast together -> y.
    """

    __slots__ = ()

    def forward(self, a: Any, b: Any) -> Any:
        return namespace(a).floor_divide(a, b)

    def backward(self, grad: Any) -> tuple:
        raise RuntimeError(
            "floor_divide: the derivative of a // b is not defined (PyTorch has none either); "
            "use a / b, or detach() the operands"
        )


class Remainder(Function):
    """y = a - b * floor(a / b) (Python's ``%``, the sign of b);
    dL/da = g, dL/db = -g * floor(a / b);  dy = da - db * floor(a / b).

    Shapes: a and b broadcast together -> y.
    """

    __slots__ = ()

    def forward(self, a: Any, b: Any) -> Any:
        return namespace(a).remainder(a, b)

    def backward(self, grad: Any) -> tuple:
        a, b = self.inputs
        quotient = grad.constant(namespace(a.array).floor_divide(a.array, b.array))
        return (
            grad.sum_to(a.shape) if a.requires_grad else None,
            (-grad * quotient).sum_to(b.shape) if b.requires_grad else None,
        )

    def jvp(self, da: Any, db: Any) -> Any:
        if db is None:  # da in new memory: an in-place op on y writes into y's tangent
            return da.broadcast_to(self.output.shape).clone()
        a, b = (t.array for t in self.inputs)
        slope = db * db.constant(namespace(a).floor_divide(a, b))
        return -slope if da is None else da - slope


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`.
VMAP_RULES = dict.fromkeys((Floor, Ceil, Round, Trunc, Sign, FloorDivide, Remainder), "elementwise")
