"""Elementwise primitives: arithmetic with NumPy broadcasting, unary functions, where, clip, cast.

Forward runs on raw arrays through the array API; backward and jvp are written with Tensor
operations so they can themselves be differentiated (the commonest backward rules also have their
array form, below). A broadcast input's gradient is summed back to its shape by ``Tensor.sum_to``
(the SumTo op, or its forward `sum_to_array` on arrays): the only place where broadcasting is
undone; its tangent is broadcast to the output's shape (`_fit`).
"""

from __future__ import annotations

import math
from typing import Any

from ..autograd import Function
from ..backend import has_out, namespace
from ..kernels import power, relu_array, same_float, scalar_operand
from .reductions import summed_to
from .rounding import sign_array

# ------------------------------------------------------------------------------------ arithmetic
# The commonest rules also declare their array form (`backward_arrays`), which the engine calls
# when no graph is recorded and no step is compiled: the same values by the same array calls,
# without a dispatch per op. Declared only where the calls are certainly the same: Python-number
# constants, and tensors of one float dtype (a Tensor product of two dtypes promotes as PyTorch
# does, which NumPy does not).


def _scalar(c: Any) -> bool:
    """Whether c is a Python number: the scalar ops' Tensor methods take exactly those."""
    return type(c) in _NUMBERS


_NUMBERS = (float, int)  # (a bool is an int, not one of these types)


# A jvp rule's tangent has the output's shape: a term from a broadcast input is broadcast into
# new memory, and an input's tangent passed on unchanged is copied, because an in-place op on the
# output later writes into the output's tangent, which must be neither the input's nor a view
# that reaches one element many times.
def _fit(tangent: Any, out: Any) -> Any:
    """A tangent term as `out`'s tangent: itself, or broadcast to out's shape in new memory."""
    if tangent.shape == out.shape:
        return tangent
    return tangent.broadcast_to(out.shape).clone()


def _copy(tangent: Any, out: Any) -> Any:
    """An input's tangent passed on unchanged (dy = dx), in new memory of out's shape."""
    return tangent.broadcast_to(out.shape).clone()


def _zeros(out: Any) -> Any:
    """A zero tangent of out's shape and dtype, as a constant."""
    return out.constant(namespace(out.array).zeros_like(out.array))


def sum_to_array(x: Any, shape: tuple) -> Any:
    """``Tensor.sum_to`` on arrays, for the rules on arrays: x itself when it has `shape` (as
    the method returns the tensor itself, with no op), else SumTo's forward."""
    return x if x.shape == shape else summed_to(x, shape)


def _shaped(fn: Function, ga: Any, gb: Any) -> tuple:
    """An array rule's gradients of fn's two inputs, shaped as the inputs: each summed back to its
    input's shape (broadcasting ran forwards), None for an input that needs none."""
    a, b = fn.inputs
    return (
        sum_to_array(ga, a.array.shape) if a.requires_grad else None,
        sum_to_array(gb, b.array.shape) if b.requires_grad else None,
    )


class Add(Function):
    """y = a + b;  dL/da = g, dL/db = g (each summed back to its own shape);  dy = da + db."""

    __slots__ = ()
    backward_reads = ()

    def forward(self, a: Any, b: Any) -> Any:
        return a + b

    def backward(self, grad: Any) -> tuple:
        a, b = self.inputs
        return (
            grad.sum_to(a.shape) if a.requires_grad else None,
            grad.sum_to(b.shape) if b.requires_grad else None,
        )

    def jvp(self, da: Any, db: Any) -> Any:
        if da is None or db is None:
            return _copy(db if da is None else da, self.output)
        return da + db

    def backward_arrays(self, g: Any) -> tuple:
        return _shaped(self, g, g)


class Sub(Function):
    """y = a - b;  dL/da = g, dL/db = -g;  dy = da - db."""

    __slots__ = ()
    backward_reads = ()

    def forward(self, a: Any, b: Any) -> Any:
        return a - b

    def backward(self, grad: Any) -> tuple:
        a, b = self.inputs
        return (
            grad.sum_to(a.shape) if a.requires_grad else None,
            (-grad).sum_to(b.shape) if b.requires_grad else None,
        )

    def jvp(self, da: Any, db: Any) -> Any:
        if db is None:
            return _copy(da, self.output)
        return _fit(-db, self.output) if da is None else da - db

    def backward_arrays(self, g: Any) -> tuple:
        return _shaped(self, g, -g if self.inputs[1].requires_grad else None)


class Mul(Function):
    """y = a * b;  dL/da = g * b, dL/db = g * a;  dy = da * b + a * db."""

    __slots__ = ()
    grad_reads = ((1,), (0,))  # dL/da reads b, dL/db reads a

    def forward(self, a: Any, b: Any) -> Any:
        return a * b

    def backward(self, grad: Any) -> tuple:
        a, b = self.inputs
        return (
            (grad * b).sum_to(a.shape) if a.requires_grad else None,
            (grad * a).sum_to(b.shape) if b.requires_grad else None,
        )

    def jvp(self, da: Any, db: Any) -> Any:
        a, b = self.inputs
        if da is None or db is None:
            return a * db if da is None else da * b
        return da * b + a * db

    def backward_arrays(self, g: Any) -> tuple | None:
        a, b = self.inputs
        x, y = a.array, b.array
        if x.dtype != g.dtype or y.dtype != g.dtype or (x.shape != y.shape and not same_float(g)):
            return None  # the Tensor rule: PyTorch's promotion of two dtypes, float16 sums
        return _shaped(self, g * y if a.requires_grad else None, g * x if b.requires_grad else None)


class Div(Function):
    """y = a / b;  dL/da = g / b, dL/db = -g * a / b**2 = -g * y / b;  dy = (da - y db) / b."""

    __slots__ = ()
    grad_reads = ((1,), (1, "output"))  # a itself is never read

    def forward(self, a: Any, b: Any) -> Any:
        return a / b

    def backward(self, grad: Any) -> tuple:
        a, b = self.inputs
        grad_a = grad / b
        return (
            grad_a.sum_to(a.shape) if a.requires_grad else None,
            (-grad_a * self.output).sum_to(b.shape) if b.requires_grad else None,
        )

    def jvp(self, da: Any, db: Any) -> Any:
        b, y = self.inputs[1], self.output
        if db is None:
            return da / b
        return -db * y / b if da is None else (da - db * y) / b


class Pow(Function):
    """y = a ** b;  dL/da = g * b * a**(b - 1), dL/db = g * y * log(a);
    dy = da * b * a**(b - 1) + db * y * log(a).

    As in PyTorch, the slope in a is 0 where b = 0 (y = 1 there) and the slope in b is 0 where
    a = 0 and b >= 0, where the formulas would give 0 * inf = NaN.
    """

    __slots__ = ()
    grad_reads = ((0, 1), (0, "output"))

    def forward(self, a: Any, b: Any) -> Any:
        xp = namespace(a)
        if xp.isdtype(a.dtype, "bool"):
            return xp.logical_or(a, xp.logical_not(b))  # x ** True is x, x ** False is True
        if xp.isdtype(a.dtype, "integral") and bool(xp.any(b < 0)):
            return _integer_power(xp, a, b)
        return a**b

    def backward(self, grad: Any) -> tuple:
        a, b = self.inputs
        grad_a = grad_b = None
        if a.requires_grad:
            grad_a = (grad * self._slope_a()).sum_to(a.shape)
        if b.requires_grad:
            grad_b = (grad * self._slope_b()).sum_to(b.shape)
        return grad_a, grad_b

    def jvp(self, da: Any, db: Any) -> Any:
        if da is None or db is None:
            return db * self._slope_b() if da is None else da * self._slope_a()
        return da * self._slope_a() + db * self._slope_b()

    def _slope_a(self) -> Any:
        """dy/da = b * a**(b - 1), and 0 where b = 0."""
        a, b = self.inputs
        return _zero_where(b.array == 0, b * a ** (b - 1.0))

    def _slope_b(self) -> Any:
        """dy/db = y * log(a), and 0 where a = 0 and b >= 0."""
        a, b = self.inputs
        return _zero_where((a.array == 0) & (b.array >= 0), self.output * a.log())


def _integer_power(xp: Any, a: Any, b: Any) -> Any:
    """a ** b in integers with some b < 0, as PyTorch computes it (NumPy refuses): the exact
    quotient 1 / a**|b| truncated, so 1 for a = 1, +-1 for a = -1 by the parity of b, else 0
    (0 ** -n included, where PyTorch also gives 0). Shapes: a and b broadcast together."""
    negative = b < 0
    result = a ** xp.where(negative, xp.zeros_like(b), b)
    one, minus_one, zero = (
        xp.asarray(v, dtype=result.dtype, device=result.device) for v in (1, -1, 0)
    )
    odd = (b % 2) != 0
    reciprocal = xp.where(a == 1, one, xp.where(a == -1, xp.where(odd, minus_one, one), zero))
    return xp.where(negative, reciprocal, result)


def _zero_where(condition: Any, value: Any) -> Any:
    """`value` (a Tensor) with 0 where the bool array `condition` holds.

    A where, not a product with a 0/1 mask: the masked entries may be inf or NaN, and 0 * inf is
    NaN. Still a Where node, so higher-order gradients pass through it.
    """
    xp = namespace(value.array)
    zero = value.constant(xp.zeros((), dtype=value.dtype, device=value.array.device))
    return Where.apply(value.constant(condition), zero, value)


class Neg(Function):
    """y = -x;  dL/dx = -g;  dy = -dx."""

    __slots__ = ()
    backward_reads = ()

    def forward(self, x: Any) -> Any:
        return -x

    def backward(self, grad: Any) -> Any:
        return -grad

    def jvp(self, dx: Any) -> Any:
        return -dx

    def backward_arrays(self, g: Any) -> tuple:
        return (-g,)


class Maximum(Function):
    """y = max(a, b) elementwise;  the gradient goes to the larger input, split evenly on ties;
    dy = w * da + (1 - w) * db, with w = 1 where a wins, 0 where b wins, 1/2 on a tie."""

    __slots__ = ()
    backward_reads = ("inputs",)

    pick = "maximum"

    def forward(self, a: Any, b: Any) -> Any:
        return getattr(namespace(a), self.pick)(a, b)

    def backward(self, grad: Any) -> tuple:
        a, b = self.inputs
        weight_a = self._weight_a(grad)
        return (
            (grad * weight_a).sum_to(a.shape) if a.requires_grad else None,
            (grad - grad * weight_a).sum_to(b.shape) if b.requires_grad else None,
        )

    def jvp(self, da: Any, db: Any) -> Any:
        weight_a = self._weight_a(da if db is None else db)
        if da is None or db is None:  # PyTorch's: db + w * (da - db), a missing one as 0
            return da * weight_a if db is None else db - db * weight_a
        return db + weight_a * (da - db)

    def _weight_a(self, like: Any) -> Any:
        """w, a constant of like's dtype: 1 where a wins, 0 where b wins, 1/2 on a tie (the
        subgradient that keeps symmetry, as PyTorch's)."""
        a, b = (t.array for t in self.inputs)
        xp = namespace(a)
        wins = a > b if self.pick == "maximum" else a < b
        return like.constant(xp.astype(wins, like.dtype) + 0.5 * xp.astype(a == b, like.dtype))


class Minimum(Maximum):
    """y = min(a, b) elementwise;  the gradient goes to the smaller input, split evenly on ties;
    dy = w * da + (1 - w) * db, with w = 1 where a wins (is smaller), 1/2 on a tie.

    Its own op, not -maximum(-a, -b): negating an integer's minimum (INT_MIN) overflows.
    """

    __slots__ = ()
    pick = "minimum"


# ---------------------------------------------------------------------------------------- unary


class Exp(Function):
    """y = exp(x);  dL/dx = g * y;  dy = dx * y."""

    __slots__ = ()
    backward_reads = ("output",)

    def forward(self, x: Any) -> Any:
        return namespace(x).exp(x)

    def backward(self, grad: Any) -> Any:
        return grad * self.output

    def jvp(self, dx: Any) -> Any:
        return dx * self.output

    def backward_arrays(self, g: Any) -> tuple | None:
        y = self.output.array
        return (g * y,) if same_float(g, y) else None


class Log(Function):
    """y = log(x);  dL/dx = g / x;  dy = dx / x."""

    __slots__ = ()
    backward_reads = ("inputs",)

    def forward(self, x: Any) -> Any:
        return namespace(x).log(x)

    def backward(self, grad: Any) -> Any:
        return grad / self.inputs[0]

    def jvp(self, dx: Any) -> Any:
        return dx / self.inputs[0]


_LN2, _LN10 = math.log(2.0), math.log(10.0)


class Log2(Function):
    """y = log2(x);  dL/dx = g / (x ln 2);  dy = dx / (x ln 2).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    backward_reads = ("inputs",)

    def forward(self, x: Any) -> Any:
        return namespace(x).log2(x)

    def backward(self, grad: Any) -> Any:
        return grad / (self.inputs[0] * _LN2)

    def jvp(self, dx: Any) -> Any:
        return dx / (self.inputs[0] * _LN2)


class Log10(Function):
    """y = log10(x);  dL/dx = g / (x ln 10);  dy = dx / (x ln 10).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    backward_reads = ("inputs",)

    def forward(self, x: Any) -> Any:
        return namespace(x).log10(x)

    def backward(self, grad: Any) -> Any:
        return grad / (self.inputs[0] * _LN10)

    def jvp(self, dx: Any) -> Any:
        return dx / (self.inputs[0] * _LN10)


class Exp2(Function):
    """y = 2^x;  dL/dx = g * y ln 2;  dy = dx * y ln 2.

    Shapes: x (...) -> y (...). The array API has no exp2: pow(2, x), which is exact at integer
    x where exp(x ln 2) is not.
    """

    __slots__ = ()
    backward_reads = ("output",)

    def forward(self, x: Any) -> Any:
        xp = namespace(x)
        return xp.pow(xp.asarray(2.0, dtype=x.dtype, device=x.device), x)

    def backward(self, grad: Any) -> Any:
        return grad * (self.output * _LN2)

    def jvp(self, dx: Any) -> Any:
        return dx * (self.output * _LN2)


class Log1p(Function):
    """y = log(1 + x), accurate where x is tiny (log(1 + x) would round 1 + x first);
    dL/dx = g / (1 + x);  dy = dx / (1 + x).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    backward_reads = ("inputs",)

    def forward(self, x: Any) -> Any:
        return namespace(x).log1p(x)

    def backward(self, grad: Any) -> Any:
        return grad / (self.inputs[0] + 1.0)

    def jvp(self, dx: Any) -> Any:
        return dx / (self.inputs[0] + 1.0)


class Expm1(Function):
    """y = exp(x) - 1, accurate where x is tiny;  dL/dx = g * exp(x) = g * (y + 1);
    dy = dx * (y + 1).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    backward_reads = ("output",)

    def forward(self, x: Any) -> Any:
        return namespace(x).expm1(x)

    def backward(self, grad: Any) -> Any:
        return grad * (self.output + 1.0)

    def jvp(self, dx: Any) -> Any:
        return dx * (self.output + 1.0)


class Sqrt(Function):
    """y = sqrt(x);  dL/dx = g / (2 y);  dy = dx / (2 y)."""

    __slots__ = ()
    backward_reads = ("output",)

    def forward(self, x: Any) -> Any:
        return namespace(x).sqrt(x)

    def backward(self, grad: Any) -> Any:
        return grad / (self.output * 2.0)

    def jvp(self, dx: Any) -> Any:
        return dx / (self.output * 2.0)


class Tanh(Function):
    """y = tanh(x);  dL/dx = g * (1 - y**2);  dy = dx * (1 - y**2)."""

    __slots__ = ()
    backward_reads = ("output",)

    def forward(self, x: Any) -> Any:
        return namespace(x).tanh(x)

    def backward(self, grad: Any) -> Any:
        y = self.output
        return grad * (1.0 - y * y)

    def jvp(self, dx: Any) -> Any:
        y = self.output
        return dx * (1.0 - y * y)


class Sigmoid(Function):
    """y = 1 / (1 + exp(-x));  dL/dx = g * y * (1 - y);  dy = dx * y * (1 - y).

    Computed from e = exp(-|x|) <= 1, as 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0: it
    never overflows and keeps full relative precision in the tails (the tanh form
    (1 + tanh(x/2)) / 2 cancels to 0 for x below about -17 in float32, so log(sigmoid) gave -inf).
    """

    __slots__ = ()
    backward_reads = ("output",)

    def forward(self, x: Any) -> Any:
        xp = namespace(x)
        e = xp.exp(-xp.abs(x))
        return xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))

    def backward(self, grad: Any) -> Any:
        y = self.output
        return grad * y * (1.0 - y)

    def jvp(self, dx: Any) -> Any:
        y = self.output
        return dx * y * (1.0 - y)


class Relu(Function):
    """y = max(x, 0);  dL/dx = g * [y > 0] (the subgradient at 0 is 0, as in PyTorch);
    dy = dx * [y > 0].

    The rule reads the output, as PyTorch's does (y > 0 exactly where x > 0): so ``x.relu_()``
    needs no copy of x, and a later in-place change of y is caught as in PyTorch."""

    __slots__ = ()
    backward_reads = ("output",)

    def forward(self, x: Any) -> Any:
        return relu_array(x)  # maximum, not where: ~10x faster, keeps NaN

    def backward(self, grad: Any) -> Any:
        # The mask as a Tensor op (a bool tensor multiplies as 0 or 1): a compiled step records
        # it and replays the product as one call, where a mask built from the raw array would
        # make the replay call this rule instead.
        return grad * (self.output > 0)

    def jvp(self, dx: Any) -> Any:
        return dx * (self.output > 0)

    def backward_arrays(self, g: Any) -> tuple | None:
        y = self.output.array
        return (g * (y > 0),) if has_out(y) else None  # NumPy, CuPy: a bool mask multiplies


class Abs(Function):
    """y = |x|;  dL/dx = g * sign(x) (0 at x = 0 and, as in PyTorch, at NaN);
    dy = dx * sign(x)."""

    __slots__ = ()
    backward_reads = ("inputs",)

    def forward(self, x: Any) -> Any:
        return namespace(x).abs(x)

    def backward(self, grad: Any) -> Any:
        return grad * grad.constant(sign_array(self.inputs[0].array))

    def jvp(self, dx: Any) -> Any:
        return dx * dx.constant(sign_array(self.inputs[0].array))


class Clip(Function):
    """y = min(max(x, low), high);  dL/dx = g where low <= x <= high, else 0 (the bounds count as
    inside, as PyTorch's);  dy = dx there, else 0."""

    __slots__ = ("low", "high")
    backward_reads = ("inputs",)

    def forward(self, x: Any, low: float | None = None, high: float | None = None) -> Any:
        self.low, self.high = low, high
        return namespace(x).clip(x, low, high)

    def backward(self, grad: Any) -> Any:
        return grad * self._inside(grad)

    def jvp(self, dx: Any) -> Any:
        return dx * self._inside(dx)

    def _inside(self, like: Any) -> Any:
        """[low <= x <= high] as a constant of like's dtype."""
        x = self.inputs[0].array
        xp = namespace(x)
        inside = xp.ones(x.shape, dtype=xp.bool, device=x.device)
        if self.low is not None:
            inside = inside & (x >= self.low)
        if self.high is not None:
            inside = inside & (x <= self.high)
        return like.constant(xp.astype(inside, like.dtype))


class Where(Function):
    """y = a where cond else b;  dL/da = g * cond, dL/db = g * (1 - cond); cond gets none;
    dy = da where cond else db."""

    __slots__ = ()
    grad_reads = ((), (0,), (0,))  # only the condition: a and b themselves are never read

    def forward(self, cond: Any, a: Any, b: Any) -> Any:
        return namespace(a).where(cond, a, b)

    def backward(self, grad: Any) -> tuple:
        cond, a, b = self.inputs
        # The mask as a Tensor op (a bool tensor multiplies as 0 or 1), as in Relu: a compiled
        # step records the products and replays them as out= calls, not this rule as a call.
        chosen = grad * cond
        return (
            None,
            chosen.sum_to(a.shape) if a.requires_grad else None,
            (grad - chosen).sum_to(b.shape) if b.requires_grad else None,
        )

    def jvp(self, _: Any, da: Any, db: Any) -> Any:
        cond, y = self.inputs[0], self.output
        if da is None or db is None:  # the side without a tangent contributes 0
            xp = namespace(y.array)
            zero = y.constant(xp.zeros((), dtype=y.array.dtype, device=y.array.device))
            da, db = (zero, db) if da is None else (da, zero)
        return _fit(Where.apply(cond, da, db), y)

    def backward_arrays(self, g: Any) -> tuple | None:
        cond, a, b = self.inputs
        if not has_out(g) or cond.array.dtype != bool:
            return None  # NumPy, CuPy: the same product with the bool mask, on arrays
        chosen = g * cond.array
        return (
            None,
            sum_to_array(chosen, a.shape) if a.requires_grad else None,
            sum_to_array(g - chosen, b.shape) if b.requires_grad else None,
        )


class Cast(Function):
    """y = x converted to another float dtype;  dL/dx = g converted back;  dy = dx converted."""

    __slots__ = ()
    backward_reads = ()

    def forward(self, x: Any, dtype: Any = None) -> Any:
        return namespace(x).astype(x, dtype)

    def backward(self, grad: Any) -> Any:
        return grad.to(self.inputs[0].dtype)

    def jvp(self, dx: Any) -> Any:
        converted = dx.to(self.output.dtype)
        return _copy(dx, self.output) if converted is dx else converted


# ------------------------------------------------------------------------------- with a scalar
# A Python number as the other operand: it is passed straight to the array library (which keeps
# the tensor's dtype, NEP 50), so no constant tensor is built and no gradient is summed for it.


class AddScalar(Function):
    """y = x + c (also x - c as x + (-c), exact in IEEE arithmetic);  dL/dx = g;  dy = dx."""

    __slots__ = ()
    backward_reads = ()

    def forward(self, x: Any, c: float = 0.0) -> Any:
        return x + scalar_operand(c, x)

    def backward(self, grad: Any) -> Any:
        return (grad,)

    def jvp(self, dx: Any) -> Any:
        return _copy(dx, self.output)


class MulScalar(Function):
    """y = x * c;  dL/dx = g * c;  dy = dx * c."""

    __slots__ = ("c", "operand")
    backward_reads = ()

    def forward(self, x: Any, c: float = 1.0) -> Any:
        self.c = c
        self.operand = operand = scalar_operand(c, x)
        return x * operand

    def backward(self, grad: Any) -> Any:
        return grad * self.c

    def jvp(self, dx: Any) -> Any:
        return dx * self.c

    def backward_arrays(self, g: Any) -> tuple | None:
        return (g * _operand_for(self, g),) if type(self.c) in _NUMBERS else None


class DivScalar(Function):
    """y = x / c;  dL/dx = g / c;  dy = dx / c."""

    __slots__ = ("c", "operand")
    backward_reads = ()

    def forward(self, x: Any, c: float = 1.0) -> Any:
        self.c = c
        self.operand = operand = scalar_operand(c, x)
        return x / operand

    def backward(self, grad: Any) -> Any:
        return grad / self.c

    def jvp(self, dx: Any) -> Any:
        return dx / self.c

    def backward_arrays(self, g: Any) -> tuple | None:
        return (g / _operand_for(self, g),) if type(self.c) in _NUMBERS else None


def _operand_for(fn: MulScalar | DivScalar, g: Any) -> Any:
    """The forward's `scalar_operand` where the gradient has x's dtype (always, but for a root
    gradient given in another), else c: the same number either way."""
    operand = fn.operand
    return operand if getattr(operand, "dtype", None) is g.dtype else fn.c


class RSubScalar(Function):
    """y = c - x;  dL/dx = -g;  dy = -dx."""

    __slots__ = ()
    backward_reads = ()

    def forward(self, x: Any, c: float = 0.0) -> Any:
        return scalar_operand(c, x) - x

    def backward(self, grad: Any) -> Any:
        return -grad

    def jvp(self, dx: Any) -> Any:
        return -dx

    def backward_arrays(self, g: Any) -> tuple:
        return (-g,)


class RDivScalar(Function):
    """y = c / x;  dL/dx = -g * c / x**2 = -g * y / x;  dy = -dx * y / x."""

    __slots__ = ()

    def forward(self, x: Any, c: float = 1.0) -> Any:
        return c / x

    def backward(self, grad: Any) -> Any:
        return -grad * self.output / self.inputs[0]

    def jvp(self, dx: Any) -> Any:
        return -dx * self.output / self.inputs[0]


class PowScalar(Function):
    """y = x ** c;  dL/dx = g * c * x**(c - 1), and 0 when c = 0 (not 0 * inf at x = 0);
    dy = dx * c * x**(c - 1), the same slope."""

    __slots__ = ("c",)
    backward_reads = ("inputs",)

    def forward(self, x: Any, c: float = 1.0) -> Any:
        self.c = c
        return power(x, c)

    def backward(self, grad: Any) -> Any:
        return grad * self._slope()

    def jvp(self, dx: Any) -> Any:
        return dx * self._slope()

    def _slope(self) -> Any:
        """dy/dx: a Tensor, or the number 0."""
        x = self.inputs[0]
        if self.c == 0:
            return 0.0  # y = 1 everywhere, even at x = 0 (PyTorch's rule)
        if self.c == 2:
            return x * 2.0  # the common square, without a pow
        return x ** (self.c - 1) * self.c


class RPowScalar(Function):
    """y = c ** x;  dL/dx = g * y * log(c), and 0 when c = 0 and x >= 0 (PyTorch's rule);
    dy = dx * y * log(c), the same slope."""

    __slots__ = ("log_c",)
    backward_reads = ("output",)

    def forward(self, x: Any, c: float = 1.0) -> Any:
        self.log_c = math.log(c) if c > 0 else -math.inf if c == 0 else math.nan
        return c**x

    def backward(self, grad: Any) -> Any:
        return grad * self._slope()

    def jvp(self, dx: Any) -> Any:
        return dx * self._slope()

    def _slope(self) -> Any:
        """dy/dx = y * log(c)."""
        slope = self.output * self.log_c
        if self.log_c == -math.inf:  # c = 0: y is 0 or 1 for x >= 0, flat; inf * -inf for x < 0
            slope = _zero_where(self.inputs[0].array >= 0, slope)
        return slope


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`.
# fmt: off
VMAP_RULES = dict.fromkeys(
    (Add, Sub, Mul, Div, Pow, Neg, Maximum, Minimum, Exp, Log, Log2, Log10, Exp2, Log1p,
     Expm1, Sqrt, Tanh, Sigmoid, Relu, Abs, Clip, Where, Cast, AddScalar, MulScalar,
     DivScalar, RSubScalar, RDivScalar, PowScalar, RPowScalar),
    "elementwise",
)
# fmt: on
