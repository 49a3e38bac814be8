"""Exercise 11: scaled dot-product attention, forward and backward as one op.

The math (one batch element; q (T, D), k (S, D), v (S, E), s = 1 / sqrt(D), G = dL/dout):

    scores  = q @ k^T * s          (T, S)
    weights = softmax(scores)      (T, S), along the keys (last axis)
    out     = weights @ v          (T, E)

Backward, one step at a time, each a rule from an earlier exercise:

    dL/dv       = weights^T @ G                                   (exercise 4)
    dL/dweights = G @ v^T                                         (exercise 4)
    dL/dscores  = weights * (dW - sum(dW * weights))              (exercise 6, dW = dL/dweights)
    dL/dq       = dL/dscores @ k * s                              (exercise 4)
    dL/dk       = dL/dscores^T @ q * s                            (exercise 4)

Batch axes in front (B, ..., T, D) change nothing: ``@`` and ``.mT`` work on the last two axes.

Hint: ``(weights,) = self.saved_tensors``; ``q, k, v = self.inputs``; ``self.scale`` is s.

Grade it: ``python -m pytest exercises -k ex11``.
"""

from __future__ import annotations

import math
from typing import Any

from tinyattn import Function, Tensor
from tinyattn.backend import namespace


class Attention(Function):
    """out = softmax(q k^T / sqrt(D)) v;  gradients for q, k and v (see the module docstring).

    Shapes: q (..., T, D), k (..., S, D), v (..., S, E) -> out (..., T, E).
    """

    def forward(self, q: Any, k: Any, v: Any) -> Any:
        xp = namespace(q)
        self.scale = 1.0 / math.sqrt(q.shape[-1])
        scores = xp.matmul(q, xp.matrix_transpose(k)) * self.scale  # (..., T, S)
        exps = xp.exp(scores - xp.max(scores, axis=-1, keepdims=True))
        weights = exps / xp.sum(exps, axis=-1, keepdims=True)  # (..., T, S)
        self.save_for_backward(weights)
        return xp.matmul(weights, v)  # (..., T, S) @ (..., S, E) -> (..., T, E)

    def backward(self, grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = self.inputs
        raise NotImplementedError("exercise 11: write this rule (see the hint above)")


def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return Attention.apply(q, k, v)
