"""Exercise 2: the backward of Exp and Log.

The math (g = dL/dy):

    y = exp(x)     dy/dx = exp(x) = y       dL/dx = g * y
    y = log(x)     dy/dx = 1 / x            dL/dx = g / x

Hint: ``self.inputs[0]`` is x and ``self.output`` is y (the engine lends it to backward). Reusing
y saves recomputing exp(x). One input, so return one Tensor (not a tuple).

Grade it: ``python -m pytest exercises -k ex02``.
"""

from __future__ import annotations

from typing import Any

from tinyattn import Function, Tensor
from tinyattn.backend import namespace


class Exp(Function):
    """y = exp(x);  dL/dx = g * y."""

    def forward(self, x: Any) -> Any:
        return namespace(x).exp(x)

    def backward(self, grad: Tensor) -> Tensor:
        raise NotImplementedError("exercise 2: write this rule (see the hint above)")


class Log(Function):
    """y = log(x);  dL/dx = g / x."""

    def forward(self, x: Any) -> Any:
        return namespace(x).log(x)

    def backward(self, grad: Tensor) -> Tensor:
        raise NotImplementedError("exercise 2: write this rule (see the hint above)")


def exp(x: Tensor) -> Tensor:
    return Exp.apply(x)


def log(x: Tensor) -> Tensor:
    return Log.apply(x)
