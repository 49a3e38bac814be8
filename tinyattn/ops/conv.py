"""Sliding windows: the two linear ops that convolution and pooling are built from.

`Unfold` lays every window of the trailing axes out as new axes (im2col); `Fold` adds window
values back where they came from (col2im). Each is the other's adjoint, so each one's backward
is the other and both are differentiable to any order. A convolution is then one product of the
windows with the weight (`tinyattn.nn.functional.conv2d`): its input gradient is the transposed
product, folded back onto the input; pooling reduces the window axes.
"""

from __future__ import annotations

import itertools
from typing import Any

from ..autograd import Function
from ..backend import contiguous_copy, namespace, sliding_windows


class Unfold(Function):
    """y[..., o, k] = x[..., o * step + k * dilation] (per trailing axis);
    dL/dx = Fold(g): each window's gradient added back where the window was.

    Shapes: x (*lead, *size) -> y (*lead, *counts, *window).
    """

    __slots__ = ("size", "window", "step", "dilation")
    backward_reads = ()  # linear: the gradient needs only the geometry

    def forward(self, x: Any, window: tuple = (), step: tuple = (), dilation: tuple = ()) -> Any:
        self.size = x.shape[x.ndim - len(window) :]
        self.window, self.step, self.dilation = window, step, dilation
        # The strided view reads overlapping memory; the copy is the im2col matrix, so a later
        # write to x cannot reach the windows.
        return contiguous_copy(sliding_windows(x, window, step, dilation))

    def backward(self, grad: Any) -> Any:
        return Fold.apply(
            grad, size=self.size, window=self.window, step=self.step, dilation=self.dilation
        )


class Fold(Function):
    """y[..., i] = sum of g[..., o, k] over the windows o and offsets k with
    o * step + k * dilation = i (Unfold's adjoint);  dL/dg = Unfold(dL/dy).

    Shapes: g (*lead, *counts, *window) -> y (*lead, *size).
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
        counts = windows.shape[len(lead) : len(lead) + spatial]
        out = xp.zeros(lead + tuple(size), dtype=windows.dtype, device=windows.device)
        # One strided slice of the output per window offset: the scatter-add without atomics,
        # as the windows at one offset never overlap each other.
        for offset in itertools.product(*(range(k) for k in window)):
            index = (slice(None),) * len(lead) + tuple(
                slice(o * d, o * d + (n - 1) * s + 1, s)
                for o, d, n, s in zip(offset, dilation, counts, step, strict=True)
            )
            out[index] = out[index] + windows[(..., *offset)]
        return out

    def backward(self, grad: Any) -> Any:
        return Unfold.apply(grad, window=self.window, step=self.step, dilation=self.dilation)
