"""Scans: the running sum and the running product along one axis.

The adjoint of a running sum is a running sum from the other end: dL/dx_i = sum_{j >= i} g_j,
which is flip(cumsum(flip(g))), so the backward is written with the same op and is itself
differentiable. The running product is composed of products of Tensors (`running_product`), so
its gradients of every order come from Mul, and zeros need no care.
"""

from __future__ import annotations

from typing import Any

from ..autograd import Function
from ..backend import is_half, namespace
from .shape import Concat


class Cumsum(Function):
    """y_i = sum_{j <= i} x_j along `axis`;  dL/dx_i = sum_{j >= i} g_j (a reversed running sum);
    dy = cumsum(dx), the same running sum (a linear op is its own tangent map).

    float16 runs in float32, each sum rounded once, as PyTorch's CPU kernel.
    Shapes: x (...) -> y (...), the same shape.
    """

    __slots__ = ("axis",)
    backward_reads = ()  # the rule needs only the gradient

    def forward(self, x: Any, axis: int = 0) -> Any:
        self.axis = axis
        xp = namespace(x)
        if is_half(x):
            return xp.astype(xp.cumulative_sum(x, axis=axis, dtype=xp.float32), x.dtype)
        return xp.cumulative_sum(x, axis=axis, dtype=x.dtype)

    def backward(self, grad: Any) -> Any:
        return grad.flip(self.axis).cumsum(self.axis).flip(self.axis)

    def jvp(self, dx: Any) -> Any:
        return dx.cumsum(self.axis)


def running_product(x: Any, axis: int, exclusive: bool = False) -> Any:
    """prod_{j <= i} x_j along `axis` of the Tensor x (prod_{j < i} with `exclusive`, 1 first).

    Hillis and Steele's doubling: round s multiplies every entry by the one 2**s places before
    it, so ceil(log2 n) rounds of Tensor products. Only products: the gradient, of any order,
    comes from Mul, and a zero needs no care, where a quotient (y_n / x_i for the product of the
    others) would divide by it.
    Shapes: x (...) -> the same shape.
    """
    n = x.shape[axis]
    lead = (slice(None),) * (axis % x.ndim)
    if exclusive and n:
        xp = namespace(x.array)
        shape = x.shape[: len(lead)] + (1,) + x.shape[len(lead) + 1 :]
        ones = x.constant(xp.ones(shape, dtype=x.array.dtype, device=x.array.device))
        x = Concat.apply(ones, x[(*lead, slice(0, n - 1))], axis=len(lead))
    step = 1
    while step < n:
        head = x[(*lead, slice(0, step))]
        tail = x[(*lead, slice(step, None))] * x[(*lead, slice(0, n - step))]
        x = Concat.apply(head, tail, axis=len(lead))
        step *= 2
    return x


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`.
VMAP_RULES = {Cumsum: "along_axes"}
