"""Fused primitives: a linear map and layer normalisation as one node each.

Composed from primitives, `x @ W.mT + b` is three graph nodes and layer norm about ten, each with
its own temporaries and Python overhead. As single Functions they make one node and fewer arrays,
with the same results. Backward is still written with Tensor operations, so both stay
differentiable to any order: under ``create_graph=True`` LayerNorm recomputes its normalised
input from the input Tensor. When no graph is being recorded, both rules compute the same
gradients on arrays instead (`kernels.linear_grads`, `kernels.layer_norm_grads`), LayerNorm's from
its saved normalised input: a dozen op dispatches fewer per call.
"""

from __future__ import annotations

import math
from typing import Any

from .. import kernels
from ..autograd import Function, is_grad_enabled
from ..backend import dtype_name, is_half, namespace, reshape
from .reductions import sum_array


class Linear(Function):
    """y = x W^T + b;  dL/dx = g W,  dL/dW = g^T x (leading axes folded into rows),  dL/db = sum g;
    dy = dx W^T + x dW^T + db.

    Shapes: x (..., in), W (out, in), b (out,) -> (..., out). The bias is an optional third input.
    """

    __slots__ = ()
    grad_reads = ((1,), (0,), ())  # dL/dx reads W, dL/dW reads x, dL/db neither

    def forward(self, x: Any, weight: Any, bias: Any = None) -> Any:
        for other, name in ((weight, "weight"), (bias, "bias")):
            if other is not None and other.dtype != x.dtype:  # as PyTorch: no silent widening
                names = f"{dtype_name(x.dtype)} but {name} is {dtype_name(other.dtype)}"
                raise RuntimeError(f"linear: input is {names}; cast one with .to(dtype)")
        xp = namespace(x)
        rows = reshape(x, (-1, x.shape[-1]))  # (..., in) -> (N, in): one GEMM for all rows
        y = xp.matmul(rows, xp.matrix_transpose(weight))  # (N, in) @ (in, out) -> (N, out)
        if bias is not None:
            # In place: y is a fresh array, and a second one of its size would cost another
            # trip through memory.
            y = _add_into(y, bias)
        return reshape(y, (*x.shape[:-1], weight.shape[0]))

    def backward_arrays(self, g: Any) -> tuple | None:
        x, weight = self.inputs[0], self.inputs[1]  # the same gradients by the same calls
        wanted = tuple(t.requires_grad for t in self.inputs)
        x_read = x.array if weight.requires_grad else None
        return kernels.linear_grads(g, x_read, weight.array if x.requires_grad else None, wanted)

    def backward(self, grad: Any) -> tuple:
        x, weight = self.inputs[0], self.inputs[1]
        grad_rows = grad.reshape((-1, weight.shape[0]))  # (..., out) -> (N, out)
        grad_x = grad_w = grad_b = None
        if x.requires_grad:
            grad_x = grad @ weight  # (..., out) @ (out, in) -> (..., in)
        if weight.requires_grad:
            grad_w = grad_rows.mT @ x.reshape((-1, x.shape[-1]))  # (out, N) @ (N, in)
        if len(self.inputs) == 3 and self.inputs[2].requires_grad:
            grad_b = grad_rows.sum(axis=0)
        return (grad_x, grad_w, grad_b)[: len(self.inputs)]

    def jvp(self, tangent_x: Any, tangent_w: Any, tangent_b: Any = None) -> Any:
        x, weight = self.inputs[0], self.inputs[1]
        # Each product is a Linear itself (one GEMM over all rows); the first takes db along.
        bias = () if tangent_b is None else (tangent_b,)
        terms = []
        if tangent_x is not None:
            terms.append(Linear.apply(tangent_x, weight, *bias))
            bias = ()
        if tangent_w is not None:
            terms.append(Linear.apply(x, tangent_w, *bias))
            bias = ()
        if bias:  # only b has a tangent
            return _spread(tangent_b, self.output)
        return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def _spread(tangent: Any, out: Any) -> Any:
    """`tangent` broadcast to `out`'s shape as a new array (a broadcast view shares memory,
    which an in-place write to the output's tangent would reach)."""
    return tangent + out.constant(namespace(out.array).zeros_like(out.array))


def _add_into(y: Any, b: Any) -> Any:
    """y + b, written into y (a fresh array of the caller's) when no promotion is needed."""
    if b.dtype != y.dtype:
        return y + b
    y += b
    return y


def _normalize(xp: Any, x: Any, axes: tuple, eps: float) -> tuple[Any, Any]:
    """x_hat = (x - mean) * rstd and rstd = 1 / sqrt(var + eps) over `axes` (arrays or Tensors)."""
    if hasattr(x, "_ctx"):  # a Tensor: build the same values with differentiable ops
        centered = x - x.mean(axis=axes, keepdims=True)
        rstd = 1.0 / ((centered * centered).mean(axis=axes, keepdims=True) + eps).sqrt()
        return centered * rstd, rstd
    axes = tuple(sorted(a % x.ndim for a in axes))
    count = math.prod(x.shape[a] for a in axes)
    centered = x - sum_array(x, axes, keepdims=True) / count
    rstd = 1.0 / xp.sqrt(sum_array(centered * centered, axes, keepdims=True) / count + eps)
    centered *= rstd  # in place: x_hat, in the array just made for it
    return centered, rstd


class LayerNorm(Function):
    """y = x_hat * w + b with x_hat = (x - mean) / sqrt(var + eps) over the trailing `axes`;
    dL/dx = rstd * (h - mean(h) - x_hat * mean(h * x_hat)) with h = g * w,
    dL/dw = sum(g * x_hat), dL/db = sum(g) (sums over the leading axes). The sums of h * x_hat
    are taken as (g * x_hat) @ w, a product with dL/dw's own operand rather than another pass.
    dy = dx_hat * w + x_hat * dw + db, dx_hat = rstd * (dx - mean(dx) - x_hat * mean(dx * x_hat)).

    Shapes: x (..., *normalized), w and b (*normalized) -> (..., *normalized). The variance is
    the biased one (divided by N), as in PyTorch. Inputs: x, then w and b when present. A
    float16 input is normalised in float32 and the result rounded once, as PyTorch's CPU kernel.
    """

    __slots__ = ("axes", "eps", "has_weight", "has_bias")

    def forward(
        self, x: Any, *affine: Any, axes: tuple = (-1,), eps: float = 1e-5, has_weight: bool = True
    ) -> Any:
        self.axes, self.eps = axes, eps
        self.has_weight, self.has_bias = has_weight, len(affine) == 1 + has_weight
        xp = namespace(x)
        half = is_half(x)
        x_hat, rstd = _normalize(xp, xp.astype(x, xp.float32) if half else x, axes, eps)
        y = x_hat
        if self.has_weight:
            y = y * affine[0]
        if self.has_bias:
            y = y + affine[-1] if y is x_hat else _add_into(y, affine[-1])
        if half:  # backward works in the input's dtype
            x_hat, rstd, y = (xp.astype(a, x.dtype) for a in (x_hat, rstd, y))
        self.save_for_backward(x_hat, rstd)
        return y

    def backward_arrays(self, g: Any) -> tuple | None:
        x_hat, rstd = self.saved_arrays  # the same gradients by the same calls, on arrays
        wanted = (
            self.inputs[0].requires_grad,
            self.has_weight and self.inputs[1].requires_grad,
            self.has_bias and self.inputs[-1].requires_grad,
        )
        weight = self.inputs[1].array if self.has_weight else None
        grads = kernels.layer_norm_grads(g, x_hat, rstd, weight, self.axes, wanted)
        if grads is None:
            return None
        grad_x, grad_w, grad_b = grads
        return (grad_x, *[grad_w] * self.has_weight, *[grad_b] * self.has_bias)

    def backward(self, grad: Any) -> tuple:
        x = self.inputs[0]
        if is_grad_enabled():  # create_graph: x_hat must carry its dependence on x
            x_hat, rstd = _normalize(None, x, self.axes, self.eps)
        else:
            x_hat, rstd = self.saved_tensors
        weight = self.inputs[1] if self.has_weight else None
        grads = [None] * len(self.inputs)
        wants_weight = weight is not None and weight.requires_grad
        scaled = grad * x_hat if x.requires_grad or wants_weight else None
        if x.requires_grad:
            h = grad * weight if weight is not None else grad
            mean_h = h.mean(axis=self.axes, keepdims=True)
            if weight is None:  # h * x_hat is g * x_hat itself
                mean_hx = scaled.mean(axis=self.axes, keepdims=True)
            else:  # sum(h * x_hat) = (g * x_hat) @ w: one product, no pass of its own
                count = weight.numel()
                sums = scaled.reshape((-1, count)) @ weight.reshape((count,))
                mean_hx = sums.reshape(rstd.shape) / count
            grads[0] = (h - mean_h - x_hat * mean_hx) * rstd
        if wants_weight:
            grads[1] = scaled.sum_to(weight.shape)
        if self.has_bias and self.inputs[-1].requires_grad:
            grads[-1] = grad.sum_to(self.inputs[-1].shape)
        return tuple(grads)

    def jvp(self, tangent_x: Any, *tangents_affine: Any) -> Any:
        x = self.inputs[0]
        weight = self.inputs[1] if self.has_weight else None
        tangent_w = tangents_affine[0] if self.has_weight else None
        tangent_b = tangents_affine[-1] if self.has_bias else None
        if tangent_x is None and tangent_w is None:
            return _spread(tangent_b, self.output)
        # x_hat and rstd again as Tensor ops of x (not the saved arrays), so that the tangent
        # carries its own dependence on x: a tangent of it, or a gradient through it, is exact.
        x_hat, rstd = _normalize(None, x, self.axes, self.eps)
        total = None
        if tangent_x is not None:
            centered = tangent_x - tangent_x.mean(axis=self.axes, keepdims=True)
            projection = (tangent_x * x_hat).mean(axis=self.axes, keepdims=True)
            total = (centered - x_hat * projection) * rstd
            total = total if weight is None else total * weight
        if tangent_w is not None:
            total = x_hat * tangent_w if total is None else total + x_hat * tangent_w
        if tangent_b is not None:
            total = total + tangent_b
        return total if total.dtype == self.output.dtype else total.to(self.output.dtype)


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`.
VMAP_RULES = {Linear: "linear", LayerNorm: "along_axes"}
