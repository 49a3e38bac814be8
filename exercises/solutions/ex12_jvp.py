# Reference solution: ex12_jvp.py with its rule written in.
"""Exercise 12: forward mode. Write the jvp rules of tanh, a matrix product and log-softmax.

A backward rule maps the output's gradient g to the inputs' (g -> J^T g, a vector-Jacobian
product). A jvp rule goes the other way: it maps the inputs' tangents (how fast each input moves
along a chosen direction) to the output's tangent (dx -> J dx, a Jacobian-vector product).
While a ``forward_ad.dual_level()`` is open, tinyattn calls ``jvp(self, *tangents)`` after each
op's forward, with one tangent per input (None for an input that has none), and carries what it
returns beside the output. The math (dx, da, db: the inputs' tangents; dy: the output's):

    y = tanh(x)          dy = dx * (1 - y**2)
    y = a @ b            dy = da @ b + a @ db          (the product rule, on matrices)
    y = log_softmax(x)   dy = dx - sum(exp(y) * dx)    (the sum along the axis, kept as size 1)

Compare each with the backward written beside it. Tanh's Jacobian is diagonal, so its jvp and its
backward are the same formula. The matrix product's backward is G @ B^T and A^T @ G; its jvp has
no transposes. Log-softmax's Jacobian, I - 1 p^T with p = exp(y), is not symmetric: backward
subtracts p * sum(g), jvp subtracts sum(p * dx). Copying backward into jvp is wrong there.

Hint: write jvp with Tensor operations, as backward is; ``self.inputs`` and ``self.output`` are
there as in backward. For the matrix product, a term whose tangent is None is left out (return
``a @ db`` when ``da`` is None); an input's tangent has that input's shape, and ``@`` broadcasts
the batch axes as in forward.

Grade it: ``python -m pytest exercises -k ex12``.
"""

from __future__ import annotations

from typing import Any

from tinyattn import Function, Tensor
from tinyattn.backend import namespace


class Tanh(Function):
    """y = tanh(x);  dL/dx = g * (1 - y**2);  dy = dx * (1 - y**2)."""

    def forward(self, x: Any) -> Any:
        return namespace(x).tanh(x)

    def backward(self, grad: Tensor) -> Tensor:
        y = self.output
        return grad * (1.0 - y * y)

    def jvp(self, dx: Tensor) -> Tensor:
        y = self.output
        return dx * (1.0 - y * y)


class MatMul(Function):
    """y = a @ b;  dL/da = G @ b^T, dL/db = a^T @ G;  dy = da @ b + a @ db."""

    def forward(self, a: Any, b: Any) -> Any:
        return namespace(a).matmul(a, b)

    def backward(self, grad: Tensor) -> tuple[Tensor, Tensor]:
        a, b = self.inputs
        return (grad @ b.mT).sum_to(a.shape), (a.mT @ grad).sum_to(b.shape)

    def jvp(self, da: Tensor | None, db: Tensor | None) -> Tensor:
        a, b = self.inputs
        if da is None or db is None:
            return a @ db if da is None else da @ b
        return da @ b + a @ db


class LogSoftmax(Function):
    """y = x - max - log(sum(exp(x - max))) along `axis`;  dL/dx = g - exp(y) * sum(g);
    dy = dx - sum(exp(y) * dx)."""

    def forward(self, x: Any, axis: int = -1) -> Any:
        self.axis = axis
        xp = namespace(x)
        shifted = x - xp.max(x, axis=axis, keepdims=True)  # the shift avoids overflow
        return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))

    def backward(self, grad: Tensor) -> Tensor:
        return grad - self.output.exp() * grad.sum(axis=self.axis, keepdims=True)

    def jvp(self, dx: Tensor) -> Tensor:
        return dx - (self.output.exp() * dx).sum(axis=self.axis, keepdims=True)


def tanh(x: Tensor) -> Tensor:
    return Tanh.apply(x)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    return MatMul.apply(a, b)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    return LogSoftmax.apply(x, axis=axis)
