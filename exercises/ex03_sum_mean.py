"""Exercise 3: the backward of Sum and Mean over axes.

The math, for y = sum of x over some axes (g = dL/dy has y's shape):

    dy/dx[i, j] = 1 for every element that was summed into y[i], so  dL/dx = g copied back
    along the summed axes (a broadcast).
    y = mean over N elements = sum / N, so  dL/dx = g / N copied back.

Hint: without keepdims the summed axes are gone from g: first put them back as size-1 axes
(``grad.reshape(self.kept_shape)``, computed for you in forward), then
``.broadcast_to(x.shape)``. ``self.count`` is N, the number of elements averaged.

Grade it: ``python -m pytest exercises -k ex03``.
"""

from __future__ import annotations

import math
from typing import Any

from tinyattn import Function, Tensor
from tinyattn.backend import namespace


def _axes(axis: int | tuple[int, ...] | None, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else axis
    return tuple(a % ndim for a in axes)


class Sum(Function):
    """y = sum of x over `axis`;  dL/dx = g broadcast back to x's shape."""

    def forward(self, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        axes = _axes(axis, x.ndim)
        self.kept_shape = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
        self.count = math.prod(x.shape[i] for i in axes)
        xp = namespace(x)
        return xp.asarray(xp.sum(x, axis=axes, keepdims=keepdims))

    def backward(self, grad: Tensor) -> Tensor:
        raise NotImplementedError("exercise 3: write this rule (see the hint above)")


class Mean(Sum):
    """y = mean of x over `axis`;  dL/dx = g / N broadcast back to x's shape."""

    def forward(self, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        return super().forward(x, axis, keepdims) / self.count

    def backward(self, grad: Tensor) -> Tensor:
        raise NotImplementedError("exercise 3: write this rule (see the hint above)")


def sum(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return Sum.apply(x, axis=axis, keepdims=keepdims)


def mean(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return Mean.apply(x, axis=axis, keepdims=keepdims)
