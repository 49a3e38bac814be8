"""Exercise 1: the backward of Mul and Div, with broadcasting.

The math (g = dL/dy, the gradient arriving from above, shaped like y):

    y = a * b      dL/da = g * b          dL/db = g * a
    y = a / b      dL/da = g / b          dL/db = -g * a / b**2

Broadcasting: in ``a * b`` with a of shape (3, 4) and b of shape (4,), b is used by every row,
so its gradient is the SUM over the rows of ``g * a``. ``Tensor.sum_to(shape)`` sums a gradient
back to an input's shape (the inverse of broadcasting); call it on every gradient you return.

Hint: ``a, b = self.inputs`` gives the input Tensors. Write the rule with Tensor operations
(``grad * b``), return one gradient per input as a tuple.

Grade it: ``python -m pytest exercises -k ex01``.
"""

from __future__ import annotations

from typing import Any

from tinyattn import Function, Tensor


class Mul(Function):
    """y = a * b;  dL/da = g * b, dL/db = g * a (each summed back to its input's shape)."""

    def forward(self, a: Any, b: Any) -> Any:
        return a * b

    def backward(self, grad: Tensor) -> tuple[Tensor, Tensor]:
        a, b = self.inputs
        raise NotImplementedError("exercise 1: write this rule (see the hint above)")


class Div(Function):
    """y = a / b;  dL/da = g / b, dL/db = -g * a / b**2 (each summed back to its input's shape)."""

    def forward(self, a: Any, b: Any) -> Any:
        return a / b

    def backward(self, grad: Tensor) -> tuple[Tensor, Tensor]:
        a, b = self.inputs
        raise NotImplementedError("exercise 1: write this rule (see the hint above)")


def mul(a: Tensor, b: Tensor) -> Tensor:
    return Mul.apply(a, b)


def div(a: Tensor, b: Tensor) -> Tensor:
    return Div.apply(a, b)
