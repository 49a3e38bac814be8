"""Tensor methods, arithmetic family: what the operator table (ops/table.py) does not generate.

Clamping (``clip``/``clamp`` and friends), ``minimum``, ``masked_fill``, ``where``,
``softmax`` and ``log_softmax``, the logical and floating-point tests (``isnan``, ``isclose``),
matrix products by PyTorch's names (``mm``, ``bmm``, ``mv``, ``dot``, ``outer``, ``addmm``),
``lerp``, ``addcmul``,
``logaddexp``, ``diff``, and the keyword forms of the table's ``add``/``sub``/``div``
(``alpha``, ``rounding_mode``) with ``fmod`` and ``copysign``. Part of the tensor layer:
imports `backend`, `ops` and `methods.common`.
Each method checks its arguments, then calls one op's ``apply`` or composes other methods; no
derivative math lives here.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend
from ..backend import promotion
from ..errors import DimError, TinyattnError
from ..ops import (
    Clip,
    LogSoftmax,
    Sign,
    Softmax,
    broadcast_shapes,
)
from ..ops.computed import array_call, computed
from ..ops.division import Copysign, Fmod, RoundedDivide
from .common import (
    SCALARS,
    TensorBase,
    check_integer_divisor,
    concat,
    describe,
    is_float,
    number_operand,
    promote,
    result_type,
    where,
)

_LN2 = math.log(2.0)


class ArithmeticMethods(TensorBase):
    """Arithmetic beyond the operator table: clamping, softmax, matrix products, tests."""

    __slots__ = ()  # every tensor's slots are declared once, in Tensor

    # The operator table gives ``x + y``, ``x - y`` and ``x / y``; these are the named methods
    # with PyTorch's keywords, each the operator when the keyword is left at its default.
    def add(self, other: Any, *, alpha: Any = 1) -> TensorBase:
        """x + alpha * other (``alpha`` scales the other operand, as in PyTorch)."""
        return self + (other if alpha == 1 else _scaled("add", other, alpha))

    def sub(self, other: Any, *, alpha: Any = 1) -> TensorBase:
        """x - alpha * other."""
        return self - (other if alpha == 1 else _scaled("sub", other, alpha))

    subtract = sub

    def div(self, other: Any, *, rounding_mode: str | None = None) -> TensorBase:
        """x / other; with ``rounding_mode="trunc"`` rounded toward zero, with ``"floor"`` down.
        A rounded quotient keeps an integer dtype and has zero gradient (`RoundedDivide`), as in
        PyTorch. Shapes: x and other broadcast together."""
        if rounding_mode is None:
            return self / other
        if rounding_mode not in ("trunc", "floor"):
            raise RuntimeError(
                "div: expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                f"{rounding_mode!r}"
            )
        a, b = _integer_safe_operands(self, other, "div")
        return RoundedDivide.apply(a, b, rounding_mode=rounding_mode)

    divide = div

    def true_divide(self, other: Any) -> TensorBase:
        return self / other

    def fmod(self, other: Any) -> TensorBase:
        """a - b * trunc(a / b): the remainder with the sign of the dividend (C's fmod; ``%``
        and ``remainder`` take the divisor's sign).  dL/da = g, dL/db = -g * trunc(a / b).
        Shapes: a and b broadcast together."""
        return Fmod.apply(*_integer_safe_operands(self, other, "fmod"))

    def copysign(self, other: Any) -> TensorBase:
        """|x| with the sign of other (a float result; -0.0 is negative).
        dL/dx = g * sign(x) * sign(other) (0 where x = 0), dL/dother = 0.
        Shapes: x and other broadcast together."""
        x = self if is_float(self.array) or isinstance(other, TensorBase) else self._cast("float32")
        a, b = _broadcast_operands(x, other, "copysign")  # a number's sign survives: not wrapped
        if not is_float(a.array):
            a, b = a._cast("float32"), b._cast("float32")
        return Copysign.apply(a, b)

    def is_floating_point(self) -> bool:
        """Whether the dtype is a floating-point one (float16, float32, float64)."""
        return is_float(self.array)

    def logical_not(self) -> TensorBase:
        return self.bool().__invert__()

    def logical_and(self, other: Any) -> TensorBase:
        """Elementwise `x and y` of the truth values (nonzero is True), as bool.
        Shapes: x and y broadcast together."""
        return self.bool() & self._operand(other, "logical_and").bool()

    def logical_or(self, other: Any) -> TensorBase:
        """Elementwise `x or y` of the truth values (nonzero is True), as bool.
        Shapes: x and y broadcast together."""
        return self.bool() | self._operand(other, "logical_or").bool()

    def logical_xor(self, other: Any) -> TensorBase:
        """Elementwise exclusive or of the truth values (nonzero is True), as bool.
        Shapes: x and y broadcast together."""
        return self.bool() ^ self._operand(other, "logical_xor").bool()

    def clip(self, min: Any = None, max: Any = None) -> TensorBase:  # noqa: A002
        """Clamp into [min, max] (numbers, or tensors that broadcast); the gradient passes where
        min <= x <= max, and to a tensor bound where it is the value taken, as in PyTorch. With
        min > max every element is max (PyTorch's min(max(x, min), max))."""
        if min is None and max is None:
            raise TinyattnError("clip: at least one of min and max must be given")
        if isinstance(min, TensorBase) or isinstance(max, TensorBase):
            return self._clip_by_tensors(min, max)
        if is_float(self.array):
            return Clip.apply(self, low=min, high=max)
        # PyTorch's promotion with the bounds: clamp(int_tensor, 0.5) is float32 and
        # clamp(bool_tensor, 0, 1) int64; each bound as that dtype holds it (-1 is 255 in uint8).
        bounds = [bound for bound in (min, max) if bound is not None]
        name = result_type(self, *bounds)
        if name == "bool":
            raise NotImplementedError("clamp: not implemented for bool tensors and bool bounds")
        low, high = (
            None if bound is None else promotion.number_as(bound, name, "clamp")
            for bound in (min, max)
        )
        return Clip.apply(self._cast(name), low=low, high=high)

    clamp = clip

    def _clip_by_tensors(self, low: Any, high: Any) -> TensorBase:
        """clip with tensor bounds: max(x, low), then min(., high), each a `where` that gives
        the gradient to x on ties (PyTorch's rule: x passes where low <= x <= high)."""
        out = self
        if low is not None:
            low = self._operand(low, "clip")
            broadcast_shapes("clip", self.shape, low.shape)
            out = where(out < low, low, out)
        if high is not None:
            high = self._operand(high, "clip")
            broadcast_shapes("clip", self.shape, high.shape)
            out = where(out > high, high, out)
        return out

    def softmax(self, dim: int = -1, dtype: Any = None) -> TensorBase:
        """Normalised exponentials ``exp(x) / sum(exp(x))`` along `dim` (the Softmax op): every
        row is >= 0 and sums to 1; a row that is -inf everywhere gives zeros, not NaN.
        `dtype` casts first. Shapes: (..., N) -> (..., N); a 0-d tensor gives 1."""
        return _along_rows(self, Softmax, "softmax", dim, dtype)

    def log_softmax(self, dim: int = -1, dtype: Any = None) -> TensorBase:
        """``x - logsumexp(x)`` along `dim` (the LogSoftmax op), never forming softmax (no log(0)
        for tiny probabilities). Shapes: (..., N) -> (..., N); a 0-d tensor gives 0."""
        return _along_rows(self, LogSoftmax, "log_softmax", dim, dtype)

    def masked_fill(self, mask: TensorBase, value: float) -> TensorBase:
        """A copy with `value` where the bool `mask` (broadcast to this shape) is True."""
        if not isinstance(mask, TensorBase) or backend.dtype_name(mask.dtype) != "bool":
            raise TypeError(f"masked_fill: mask must be a bool Tensor, got {describe(mask)}")
        broadcast = broadcast_shapes("masked_fill", self.shape, mask.shape)
        if broadcast != self.shape:
            raise TinyattnError(
                f"masked_fill: mask of shape {mask.shape} does not broadcast to {self.shape}"
            )
        # The result keeps this tensor's dtype: an int64 tensor filled with 2.7 holds 2, and
        # NaN, which no integer holds, raises (as PyTorch converts the value).
        value = number_operand(self, value, backend.dtype_name(self.dtype), "masked_fill", True)
        return where(mask, value, self)

    def where(self, condition: TensorBase, other: Any) -> TensorBase:
        """This tensor where the bool `condition` is True, else `other`: PyTorch's
        ``x.where(condition, y)``, which is ``where(condition, x, y)``."""
        return where(condition, self, other)

    def _products(
        self, op: str, other: Any, dims: tuple[int, int], inner: bool = True
    ) -> TensorBase:
        other = self._operand(other, op)
        if (self.ndim, other.ndim) != dims:
            raise TinyattnError(
                f"{op}: expects tensors of {dims[0]} and {dims[1]} dims, got shapes "
                f"{self.shape} and {other.shape}"
            )
        # No broadcasting of batches (bmm), and inner sizes that meet: as PyTorch checks them.
        meets = other.shape[0] if other.ndim == 1 else other.shape[-2]
        if inner and (self.shape[-1] != meets or self.shape[:-2] != other.shape[:-2]):
            raise TinyattnError(f"{op}: shapes {self.shape} and {other.shape} do not fit together")
        return other

    def mm(self, other: Any) -> TensorBase:
        """(n, k) @ (k, m)."""
        return self @ self._products("mm", other, (2, 2))

    def bmm(self, other: Any) -> TensorBase:
        """(b, n, k) @ (b, k, m)."""
        return self @ self._products("bmm", other, (3, 3))

    def mv(self, vec: Any) -> TensorBase:
        """(n, k) @ (k,) -> (n,)."""
        return self @ self._products("mv", vec, (2, 1))

    def dot(self, other: Any) -> TensorBase:
        """sum(a * b) of two vectors, a 0-d tensor."""
        return self @ self._products("dot", other, (1, 1))

    def outer(self, other: Any) -> TensorBase:
        """out[i, j] = a[i] * b[j]."""
        other = self._products("outer", other, (1, 1), inner=False)
        return self.reshape(-1, 1) * other.reshape(1, -1)

    def sign(self) -> TensorBase:
        """-1, 0 or 1 by the sign of each element; its gradient is zero, as in PyTorch (a
        float result requires grad when the input does). Shapes: any."""
        if is_float(self.array):
            return Sign.apply(self)
        if backend.dtype_name(self.dtype) == "bool":
            return self.clone()  # NumPy has no bool sign; a bool's sign is itself
        return computed(array_call, self, name="sign")

    def isnan(self) -> TensorBase:
        return computed(array_call, self, name="isnan")

    def isinf(self) -> TensorBase:
        return computed(array_call, self, name="isinf")

    def isfinite(self) -> TensorBase:
        return computed(array_call, self, name="isfinite")

    def square(self) -> TensorBase:
        """x * x (int64 for a bool tensor, as PyTorch's square);  dL/dx = 2 g x.  Shapes: any."""
        x = self._cast("int64") if backend.dtype_name(self.dtype) == "bool" else self
        return x * x

    def reciprocal(self) -> TensorBase:
        """1 / x (a float result for an integer tensor)."""
        return 1.0 / self

    def rsqrt(self) -> TensorBase:
        """1 / sqrt(x)."""
        return 1.0 / self.sqrt()

    def clamp_min(self, min: float) -> TensorBase:  # noqa: A002  (PyTorch's name)
        return self.clip(min=min)

    def clamp_max(self, max: float) -> TensorBase:  # noqa: A002  (PyTorch's name)
        return self.clip(max=max)

    def frac(self) -> TensorBase:
        """x - trunc(x), the fractional part with the sign of x;  dL/dx = g.  Shapes: any."""
        backend.check_floating("frac", self.array)
        return self - self.trunc()

    def lerp(self, end: Any, weight: Any) -> TensorBase:
        """start + weight * (end - start), start being this tensor; `weight` a number or a
        tensor. For weights of 0.5 and more it is end - (end - start) * (1 - weight), the form
        PyTorch's kernel uses, so that weight 1 gives exactly `end`.
        dL/dstart = g (1 - w), dL/dend = g w, dL/dw = g (end - start).
        Shapes: start, end and weight broadcast together."""
        backend.check_floating("lerp", self.array)
        end = self._operand(end, "lerp")
        shape = broadcast_shapes("lerp", self.shape, end.shape)
        if type(weight) in SCALARS:
            if weight < 0.5:
                return self + weight * (end - self)
            return end - (end - self) * (1.0 - weight)
        weight = self._operand(weight, "lerp")
        broadcast_shapes("lerp", shape, weight.shape)
        difference = end - self
        return where(weight < 0.5, self + weight * difference, end - difference * (1.0 - weight))

    def addmm(
        self, mat1: TensorBase, mat2: TensorBase, *, beta: float = 1, alpha: float = 1
    ) -> TensorBase:
        """beta * input + alpha * (mat1 @ mat2), input (this tensor) broadcast to the product's
        shape; with beta = 0 the input is not read (a NaN in it does not reach the result).

        Shapes: mat1 (n, m), mat2 (m, p), input broadcastable to (n, p) -> (n, p)."""
        first = self._operand(mat1, "addmm")
        product = first @ first._products("addmm", mat2, (2, 2))
        if self.ndim > 2 or broadcast_shapes("addmm", self.shape, product.shape) != product.shape:
            raise TinyattnError(
                f"addmm: input of shape {self.shape} does not broadcast to the product's shape "
                f"{product.shape}"
            )
        if alpha != 1:
            product = product * alpha
        if beta == 0:
            return product
        return (self if beta == 1 else self * beta) + product

    def addcmul(self, tensor1: Any, tensor2: Any, value: float = 1) -> TensorBase:
        """x + value * t1 * t2 (Adam's second-moment update);  dL/dx = g,
        dL/dt1 = value * g * t2, dL/dt2 = value * g * t1.  Shapes: all three broadcast."""
        backend.check_floating("addcmul", self.array)
        t1, t2 = self._operand(tensor1, "addcmul"), self._operand(tensor2, "addcmul")
        broadcast_shapes("addcmul", self.shape, broadcast_shapes("addcmul", t1.shape, t2.shape))
        return self + (t1 * t2 if value == 1 else t1 * value * t2)

    def addcdiv(self, tensor1: Any, tensor2: Any, value: float = 1) -> TensorBase:
        """x + value * t1 / t2 (Adam's parameter update);  dL/dx = g,
        dL/dt1 = value * g / t2, dL/dt2 = -value * g * t1 / t2^2.  Shapes: all three broadcast."""
        backend.check_floating("addcdiv", self.array)
        t1, t2 = self._operand(tensor1, "addcdiv"), self._operand(tensor2, "addcdiv")
        broadcast_shapes("addcdiv", self.shape, broadcast_shapes("addcdiv", t1.shape, t2.shape))
        return self + (t1 / t2 if value == 1 else t1 * value / t2)

    def logaddexp(self, other: Any) -> TensorBase:
        """log(e^x + e^y) without overflow: the larger plus log1p(exp(smaller - larger)), the
        exponent clipped at 0 in each branch so that the branch not taken cannot overflow.
        dL/dx = g * sigmoid(x - y), dL/dy = g * sigmoid(y - x) (1/2 each at ties).
        Shapes: x and y broadcast together."""
        self, other = _float_operands(self, other, "logaddexp")
        # Two equal infinities: inf - inf would be NaN (with a warning), but the result is that
        # infinity, so their difference is taken as 0.
        same_infinity = (self == other) & self.isinf()
        difference = where(same_infinity, 0.0, other) - where(same_infinity, 0.0, self)
        if_self = self + difference.clip(max=0.0).exp().log1p()
        if_other = other + (-difference).clip(max=0.0).exp().log1p()
        return where(difference <= 0, if_self, if_other)

    def logaddexp2(self, other: Any) -> TensorBase:
        """log2(2^x + 2^y): logaddexp in base 2;  dL/dx = g * 2^x / (2^x + 2^y).
        Shapes: x and y broadcast together."""
        self, other = _float_operands(self, other, "logaddexp2")
        return (self * _LN2).logaddexp(other * _LN2) * (1.0 / _LN2)

    def nan_to_num(
        self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None
    ) -> TensorBase:
        """NaN, +inf and -inf replaced by `nan`, `posinf` and `neginf` (by default 0 and the
        dtype's largest and lowest finite values);  dL/dx = g where x was finite, 0 elsewhere.
        Shapes: any."""
        for name, value in (("nan", nan), ("posinf", posinf), ("neginf", neginf)):
            if value is not None and type(value) not in SCALARS:
                raise TypeError(f"nan_to_num: {name} must be a number, got {value!r}")
        if not is_float(self.array):
            return self.clone()
        largest = backend.largest_finite(self.dtype)
        posinf = largest if posinf is None else posinf
        neginf = -largest if neginf is None else neginf
        out = where(self.isnan(), nan, self)
        out = where(self == math.inf, posinf, out)
        return where(self == -math.inf, neginf, out)

    def diff(
        self,
        n: int = 1,
        dim: int = -1,
        prepend: TensorBase | None = None,
        append: TensorBase | None = None,
    ) -> TensorBase:
        """The n-th forward difference along `dim`: out[i] = x[i + 1] - x[i], n times, after
        `prepend` and `append` are joined on (as PyTorch's and NumPy's diff).

        Shapes: (..., m, ...) -> (..., m + extra - n, ...)."""
        if type(n) is not int or n < 0:
            raise TinyattnError(f"diff: n must be an int >= 0, got {n!r}")
        key = self._along("diff", dim)
        parts = [self._operand(t, "diff") for t in (prepend, self, append) if t is not None]
        out = concat(parts, axis=dim) if len(parts) > 1 else self
        for _ in range(n):
            if out.shape[dim] == 0:
                break
            out = out[(*key, slice(1, None))] - out[(*key, slice(None, -1))]
        return out

    def isclose(
        self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
    ) -> TensorBase:
        """``|x - other| <= atol + rtol * |other|`` elementwise (equal infinities are close; NaNs
        are close to each other only with `equal_nan`)."""
        other = self._operand(other, "isclose")
        broadcast_shapes("isclose", self.shape, other.shape)
        a, b = (self, other) if self.dtype == other.dtype else promote(self, other, "isclose")
        options = {"rtol": float(rtol), "atol": float(atol), "equal_nan": bool(equal_nan)}
        return computed(_isclose, a.detach(), b.detach(), **options)

    def allclose(
        self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
    ) -> bool:
        """Whether every element is close (``isclose``): a Python bool."""
        return bool(self.isclose(other, rtol, atol, equal_nan).all())


def _isclose(xp: Any, a: Any, b: Any, rtol: float, atol: float, equal_nan: bool) -> Any:
    close = a == b  # equal infinities, which the difference below cannot tell
    if backend.is_float_array(a):
        if equal_nan:
            close = close | (xp.isnan(a) & xp.isnan(b))
        finite = xp.isfinite(a) & xp.isfinite(b)
        a, b = xp.where(finite, a, 0.0), xp.where(finite, b, 0.0)  # no inf - inf warnings
        close = close | (finite & (xp.abs(a - b) <= atol + rtol * xp.abs(b)))
    else:
        close = close | (xp.abs(a - b) <= atol + rtol * xp.abs(b))
    return close


def _along_rows(x: TensorBase, function: type, op: str, dim: Any, dtype: Any) -> TensorBase:
    """Softmax or LogSoftmax of `x` along `dim` after the checks they share."""
    if dtype is not None:
        x = x._cast(backend.dtype_name(dtype))
    backend.check_floating(op, x.array)
    size = max(x.ndim, 1)
    if not isinstance(dim, int) or isinstance(dim, bool) or not -size <= dim < size:
        raise DimError(f"{op}: dim {dim!r} is out of range for a tensor of shape {x.shape}")
    if x.ndim == 0:  # one element along a virtual axis of size 1, as in PyTorch
        return function.apply(x.reshape(1), axis=0).reshape(())
    return function.apply(x, axis=dim % x.ndim)


def _scaled(op: str, other: Any, alpha: Any) -> Any:
    """alpha * other, refusing a float alpha with integer operands as PyTorch does."""
    if isinstance(other, TensorBase) and not is_float(other.array) and isinstance(alpha, float):
        raise RuntimeError(
            f"{op}: for integral input tensors, argument alpha must not be a floating point "
            f"number (got {alpha!r})"
        )
    return other * alpha


def _broadcast_operands(x: TensorBase, other: Any, op: str) -> tuple[TensorBase]:
    """Both operands as Tensors of one promoted dtype, checked to broadcast."""
    other = x._operand(other, op)
    broadcast_shapes(op, x.shape, other.shape)
    return (x, other) if x.dtype == other.dtype else promote(x, other, op)


def _integer_safe_operands(x: TensorBase, other: Any, op: str) -> tuple[TensorBase]:
    """`_broadcast_operands`, refusing bool operands and an integer division by zero (PyTorch
    raises for both; NumPy would give 0)."""
    a, b = _broadcast_operands(x, other, op)
    if not is_float(b.array):
        check_integer_divisor(op, a, b)
    return a, b


def _float_operands(x: TensorBase, other: Any, op: str) -> tuple[TensorBase]:
    """Both operands in their promoted dtype, which must be floating (PyTorch has no integer
    kernel for these ops, but an integer meets a float operand as in any other op)."""
    a, b = _broadcast_operands(x, other, op)
    if not is_float(a.array):
        raise NotImplementedError(
            f"{op}: not implemented for {backend.dtype_name(a.dtype)} tensors; "
            "give at least one floating-point operand"
        )
    return a, b
