"""Trigonometric and hyperbolic primitives: sin and cos, each the other's derivative (up to a
sign), tan, the inverse functions asin, acos, atan and atan2, and sinh, cosh (each the other's
derivative), asinh, acosh and atanh.

Forward runs on raw arrays; backward is written with Tensor ops, so sin and cos differentiate
each other to any order.
"""

from __future__ import annotations

from typing import Any

from ..autograd import Function
from ..backend import namespace


class Sin(Function):
    """y = sin(x);  dL/dx = g * cos(x);  dy = dx * cos(x).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()

    def forward(self, x: Any) -> Any:
        return namespace(x).sin(x)

    def backward(self, grad: Any) -> Any:
        return grad * self.inputs[0].cos()

    def jvp(self, tangent: Any) -> Any:
        return tangent * self.inputs[0].cos()


class Cos(Function):
    """y = cos(x);  dL/dx = -g * sin(x);  dy = -dx * sin(x).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()

    def forward(self, x: Any) -> Any:
        return namespace(x).cos(x)

    def backward(self, grad: Any) -> Any:
        return -(grad * self.inputs[0].sin())

    def jvp(self, tangent: Any) -> Any:
        return -(tangent * self.inputs[0].sin())


class Atan2(Function):
    """y = atan2(a, b), the angle of the point (b, a) in (-pi, pi];  with r2 = a**2 + b**2,
    dL/da = g * b / r2 and dL/db = -g * a / r2 (NaN at the origin, as in PyTorch);
    dy = (da * b - db * a) / r2.

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

    def jvp(self, tangent_a: Any, tangent_b: Any) -> Any:
        a, b = self.inputs
        # Each term has the broadcast shape: a tangent has its primal's shape.
        if tangent_b is None:
            change = tangent_a * b
        elif tangent_a is None:
            change = -(tangent_b * a)
        else:
            change = tangent_a * b - tangent_b * a
        return change / (a * a + b * b)


class Tan(Function):
    """y = tan(x);  dL/dx = g * (1 + y^2);  dy = dx * (1 + y^2).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    backward_reads = ("output",)

    def forward(self, x: Any) -> Any:
        return namespace(x).tan(x)

    def backward(self, grad: Any) -> Any:
        y = self.output
        return grad * (y * y + 1.0)

    def jvp(self, tangent: Any) -> Any:
        y = self.output
        return tangent * (y * y + 1.0)


class Asin(Function):
    """y = asin(x) in [-pi/2, pi/2] for x in [-1, 1];  dL/dx = g / sqrt(1 - x^2);
    dy = dx / sqrt(1 - x^2).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    backward_reads = ("inputs",)

    def forward(self, x: Any) -> Any:
        return namespace(x).asin(x)

    def backward(self, grad: Any) -> Any:
        x = self.inputs[0]
        return grad / (1.0 - x * x).sqrt()

    def jvp(self, tangent: Any) -> Any:
        x = self.inputs[0]
        return tangent / (1.0 - x * x).sqrt()


class Acos(Function):
    """y = acos(x) in [0, pi] for x in [-1, 1];  dL/dx = -g / sqrt(1 - x^2);
    dy = -dx / sqrt(1 - x^2).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    backward_reads = ("inputs",)

    def forward(self, x: Any) -> Any:
        return namespace(x).acos(x)

    def backward(self, grad: Any) -> Any:
        x = self.inputs[0]
        return -(grad / (1.0 - x * x).sqrt())

    def jvp(self, tangent: Any) -> Any:
        x = self.inputs[0]
        return -(tangent / (1.0 - x * x).sqrt())


class Atan(Function):
    """y = atan(x) in (-pi/2, pi/2);  dL/dx = g / (1 + x^2);  dy = dx / (1 + x^2).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    backward_reads = ("inputs",)

    def forward(self, x: Any) -> Any:
        return namespace(x).atan(x)

    def backward(self, grad: Any) -> Any:
        x = self.inputs[0]
        return grad / (x * x + 1.0)

    def jvp(self, tangent: Any) -> Any:
        x = self.inputs[0]
        return tangent / (x * x + 1.0)


class Sinh(Function):
    """y = sinh(x) = (e^x - e^-x) / 2;  dL/dx = g * cosh(x);  dy = dx * cosh(x).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    backward_reads = ("inputs",)

    def forward(self, x: Any) -> Any:
        return namespace(x).sinh(x)

    def backward(self, grad: Any) -> Any:
        return grad * self.inputs[0].cosh()

    def jvp(self, tangent: Any) -> Any:
        return tangent * self.inputs[0].cosh()


class Cosh(Function):
    """y = cosh(x) = (e^x + e^-x) / 2;  dL/dx = g * sinh(x);  dy = dx * sinh(x).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    backward_reads = ("inputs",)

    def forward(self, x: Any) -> Any:
        return namespace(x).cosh(x)

    def backward(self, grad: Any) -> Any:
        return grad * self.inputs[0].sinh()

    def jvp(self, tangent: Any) -> Any:
        return tangent * self.inputs[0].sinh()


class Asinh(Function):
    """y = asinh(x) = log(x + sqrt(x^2 + 1));  dL/dx = g / sqrt(x^2 + 1);
    dy = dx / sqrt(x^2 + 1).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    backward_reads = ("inputs",)

    def forward(self, x: Any) -> Any:
        return namespace(x).asinh(x)

    def backward(self, grad: Any) -> Any:
        x = self.inputs[0]
        return grad / (x * x + 1.0).sqrt()

    def jvp(self, tangent: Any) -> Any:
        x = self.inputs[0]
        return tangent / (x * x + 1.0).sqrt()


class Acosh(Function):
    """y = acosh(x) = log(x + sqrt(x^2 - 1)) for x >= 1;  dL/dx = g / sqrt(x^2 - 1);
    dy = dx / sqrt(x^2 - 1).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    backward_reads = ("inputs",)

    def forward(self, x: Any) -> Any:
        return namespace(x).acosh(x)

    def backward(self, grad: Any) -> Any:
        x = self.inputs[0]
        return grad / (x * x - 1.0).sqrt()

    def jvp(self, tangent: Any) -> Any:
        x = self.inputs[0]
        return tangent / (x * x - 1.0).sqrt()


class Atanh(Function):
    """y = atanh(x) = log((1 + x) / (1 - x)) / 2 for |x| < 1;  dL/dx = g / (1 - x^2);
    dy = dx / (1 - x^2).

    Shapes: x (...) -> y (...).
    """

    __slots__ = ()
    backward_reads = ("inputs",)

    def forward(self, x: Any) -> Any:
        return namespace(x).atanh(x)

    def backward(self, grad: Any) -> Any:
        x = self.inputs[0]
        return grad / (1.0 - x * x)

    def jvp(self, tangent: Any) -> Any:
        x = self.inputs[0]
        return tangent / (1.0 - x * x)


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`.
VMAP_RULES = dict.fromkeys(
    (Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Atan2), "elementwise"
)
