# Reference solution: ex04_matmul.py with its rule written in.
"""Exercise 4: the backward of a batched matrix product.

The math, for Y = A @ B with A (n, k), B (k, m), Y (n, m) and G = dL/dY:

    Y[i, j] = sum_p A[i, p] B[p, j]
    dL/dA[i, p] = sum_j G[i, j] B[p, j]    that is   dL/dA = G @ B^T     (n, m) @ (m, k)
    dL/dB[p, j] = sum_i A[i, p] G[i, j]    that is   dL/dB = A^T @ G     (k, n) @ (n, m)

Check the shapes: each gradient has its operand's shape. With leading batch axes, ``@`` works
on the last two axes and broadcasts the rest (A (2, n, k) @ B (k, m) uses B for both batches),
so, as in exercise 1, sum each gradient back to its operand's shape.

Hint: ``t.mT`` swaps the last two axes of a Tensor; ``.sum_to(shape)`` undoes broadcasting.

Grade it: ``python -m pytest exercises -k ex04``.
"""

from __future__ import annotations

from typing import Any

from tinyattn import Function, Tensor
from tinyattn.backend import namespace


class MatMul(Function):
    """Y = A @ B (at least 2-D, batch axes broadcast);  dL/dA = G @ B^T, dL/dB = A^T @ G."""

    def forward(self, a: Any, b: Any) -> Any:
        return namespace(a).matmul(a, b)

    def backward(self, grad: Tensor) -> tuple[Tensor, Tensor]:
        a, b = self.inputs
        return (grad @ b.mT).sum_to(a.shape), (a.mT @ grad).sum_to(b.shape)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    return MatMul.apply(a, b)
