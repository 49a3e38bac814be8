"""Sliding windows: the two linear ops that convolution and pooling are built from.

`Unfold` lays every window of the trailing axes out as new axes (im2col); `Fold` adds window
values back where they came from (col2im). Each is the other's adjoint, so each one's backward
is the other and both are differentiable to any order. The window offsets come before the
window positions, PyTorch's im2col layout: for an image (N, C, H, W) the windows are (N, C, kh,
kw, H_out, W_out), so (N, C * kh * kw, H_out * W_out) is a reshape away, and a convolution is
the weight (C_out, C * kh * kw) times that matrix, its output (N, C_out, H_out * W_out) in
row-major (N, C, H, W) order (`tinyattn.nn.functional.conv2d`). The input gradient is the
transposed product, folded back onto the input; pooling reduces the offset axes.
"""

from __future__ import annotations

import itertools
from typing import Any

from ..autograd import Function
from ..backend import contiguous_copy, namespace, sliding_windows


class Unfold(Function):
    """y[..., k, o] = x[..., o * step + k * dilation] (per trailing axis: offset k, window o);
    dL/dx = Fold(g): each window's gradient added back where the window was;
    dy = Unfold(dx) (the op is linear).

    Shapes: x (*lead, *size) -> y (*lead, *window, *counts).
    """

    __slots__ = ("size", "window", "step", "dilation")
    backward_reads = ()  # linear: the gradient needs only the geometry

    def forward(self, x: Any, window: tuple = (), step: tuple = (), dilation: tuple = ()) -> Any:
        self.size = x.shape[x.ndim - len(window) :]
        self.window, self.step, self.dilation = window, step, dilation
        lead, spatial = x.ndim - len(window), len(window)
        view = sliding_windows(x, window, step, dilation)  # (*lead, *counts, *window)
        # Offsets before positions: the copy then reads runs of neighbouring input elements
        # (the last axis of positions), about 10x faster than copying each small window in turn,
        # and a product with the weight comes out in the input's (N, C, H, W) order.
        order = (*range(lead), *range(lead + spatial, lead + 2 * spatial))
        order += tuple(range(lead, lead + spatial))
        # The strided view reads overlapping memory; the copy is the im2col matrix, so a later
        # write to x cannot reach the windows.
        return contiguous_copy(namespace(view).permute_dims(view, order))

    def backward(self, grad: Any) -> Any:
        return Fold.apply(
            grad, size=self.size, window=self.window, step=self.step, dilation=self.dilation
        )

    def jvp(self, tangent: Any) -> Any:
        return Unfold.apply(tangent, window=self.window, step=self.step, dilation=self.dilation)


class Fold(Function):
    """y[..., i] = sum of g[..., k, o] over the offsets k and windows o with
    o * step + k * dilation = i (Unfold's adjoint);  dL/dg = Unfold(dL/dy);  dy = Fold(dg).

    Shapes: g (*lead, *window, *counts) -> y (*lead, *size).
    """

    __slots__ = ("window", "step", "dilation")
    backward_reads = ()

    def forward(
        self,
        windows: Any,
        size: tuple = (),
        window: tuple = (),
        step: tuple = (),
        dilation: tuple = (),
    ) -> Any:
        self.window, self.step, self.dilation = window, step, dilation
        xp, spatial = namespace(windows), len(window)
        lead = windows.shape[: windows.ndim - 2 * spatial]
        counts = windows.shape[windows.ndim - spatial :]
        out = xp.zeros(lead + tuple(size), dtype=windows.dtype, device=windows.device)
        # One strided slice of the output per window offset: the scatter-add without atomics,
        # as the windows at one offset never overlap each other.
        for offset in itertools.product(*(range(k) for k in window)):
            index = (slice(None),) * len(lead) + tuple(
                slice(o * d, o * d + (n - 1) * s + 1, s)
                for o, d, n, s in zip(offset, dilation, counts, step, strict=True)
            )
            out[index] = out[index] + windows[(slice(None),) * len(lead) + offset + (...,)]
        return out

    def backward(self, grad: Any) -> Any:
        return Unfold.apply(grad, window=self.window, step=self.step, dilation=self.dilation)

    def jvp(self, tangent: Any) -> Any:
        out = self.output
        size = out.shape[out.ndim - len(self.window) :]  # the output's trailing (spatial) axes
        return Fold.apply(
            tangent, size=size, window=self.window, step=self.step, dilation=self.dilation
        )


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`. Both act
# on trailing axes, so the batch dim is one more leading axis, as for a one-input elementwise op.
VMAP_RULES = {Unfold: "elementwise", Fold: "elementwise"}
