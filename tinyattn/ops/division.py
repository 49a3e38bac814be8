"""Division with rounding, fmod and copysign: PyTorch's ``div(rounding_mode=)``, ``fmod`` and
``copysign``.

A rounded quotient is a step function of both operands: PyTorch defines its gradient as zero, and
so does `RoundedDivide` (the graph is kept). fmod is the remainder with the sign of the dividend
(C's fmod), unlike `Remainder` (Python's %, the sign of the divisor). copysign's derivative in
its first operand is the sign it was given, and zero in the second.
"""

from __future__ import annotations

from typing import Any

from ..autograd import Function
from ..backend import is_float_array, namespace


def _truncated_quotient(xp: Any, a: Any, b: Any) -> Any:
    """a / b rounded toward zero: trunc of the true quotient for floats; for integers the floor
    quotient moved up by one where it was rounded down past a negative exact quotient."""
    if is_float_array(a):
        return xp.trunc(a / b)
    floor = xp.floor_divide(a, b)
    inexact = (floor * b != a) & ((a < 0) != (b < 0))
    return xp.where(inexact, floor + 1, floor)


class RoundedDivide(Function):
    """y = trunc(a / b) or floor(a / b) (``rounding_mode``);  dL/da = dL/db = 0, dy = 0
    (PyTorch's rule).

    Shapes: a and b broadcast together -> y.
    """

    __slots__ = ()
    backward_reads = ()

    def forward(self, a: Any, b: Any, rounding_mode: str = "trunc") -> Any:
        xp = namespace(a)
        if rounding_mode == "trunc":
            return _truncated_quotient(xp, a, b)
        return xp.floor_divide(a, b)

    def backward(self, grad: Any) -> tuple:
        a, b = self.inputs
        return (
            (grad * 0.0).sum_to(a.shape) if a.requires_grad else None,
            (grad * 0.0).sum_to(b.shape) if b.requires_grad else None,
        )

    def jvp(self, da: Any, db: Any) -> Any:
        y = self.output
        return y.constant(namespace(y.array).zeros_like(y.array))


class Fmod(Function):
    """y = a - b * trunc(a / b) (the sign of a);  dL/da = g, dL/db = -g * trunc(a / b);
    dy = da - db * trunc(a / b).

    Shapes: a and b broadcast together -> y.
    """

    __slots__ = ()

    def forward(self, a: Any, b: Any) -> Any:
        xp = namespace(a)
        # The remainder of the magnitudes is exact; the dividend's sign goes back on.
        magnitude = xp.remainder(xp.abs(a), xp.abs(b))
        if is_float_array(magnitude):
            return xp.copysign(magnitude, a)
        return xp.where(a < 0, -magnitude, magnitude)

    def backward(self, grad: Any) -> tuple:
        a, b = self.inputs
        quotient = grad.constant(_truncated_quotient(namespace(a.array), a.array, b.array))
        return (
            grad.sum_to(a.shape) if a.requires_grad else None,
            (-grad * quotient).sum_to(b.shape) if b.requires_grad else None,
        )

    def jvp(self, da: Any, db: Any) -> Any:
        if db is None:  # da in new memory: an in-place op on y writes into y's tangent
            return da.broadcast_to(self.output.shape).clone()
        a, b = (t.array for t in self.inputs)
        slope = db * db.constant(_truncated_quotient(namespace(a), a, b))
        return -slope if da is None else da - slope


class Copysign(Function):
    """y = |a| with the sign of b (-0.0 counts as negative);
    dL/da = g * sign(a) * sign(b) (0 where a = 0), dL/db = 0;  dy = da * sign(a) * sign(b).

    Shapes: a and b broadcast together -> y.
    """

    __slots__ = ()

    def forward(self, a: Any, b: Any) -> Any:
        return namespace(a).copysign(a, b)

    def backward(self, grad: Any) -> tuple:
        a, b = self.inputs
        flip = self._flip(grad)
        return (
            (grad * flip).sum_to(a.shape) if a.requires_grad else None,
            (grad * 0.0).sum_to(b.shape) if b.requires_grad else None,
        )

    def jvp(self, da: Any, db: Any) -> Any:
        y = self.output
        if da is None:  # flat in b
            return y.constant(namespace(y.array).zeros_like(y.array))
        return da * self._flip(da)

    def _flip(self, like: Any) -> Any:
        """dy/da = sign(a) * sign(b), a constant of y's shape."""
        a, b = (t.array for t in self.inputs)
        xp = namespace(a)
        one = xp.ones((), dtype=a.dtype, device=a.device)
        return like.constant(xp.sign(a) * xp.copysign(one, b))


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`.
VMAP_RULES = dict.fromkeys((RoundedDivide, Fmod, Copysign), "elementwise")
