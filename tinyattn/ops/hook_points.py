"""Hook points: an identity node where module hooks see several gradients at once.

Part of the ops layer: imports `backend` and `autograd`. `nn.Module`'s full backward hooks pass
a call's tensor args (and, separately, its output tensors) through one GradientsMeet node, so
its backward receives all their gradients together and can hand them to the hooks in one call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..autograd import Function
from ..backend import namespace


class GradientsMeet(Function):
    """Identity on several tensors (copies): y_k = x_k; dL/dx_k = g_k, or what `callback`
    makes of all the g_k at once (the one place a module's backward hooks see them);
    dy_k = dx_k (copies too: an in-place write to y_k's tangent must not reach x_k's)."""

    backward_reads = ()

    def forward(self, *arrays: Any, callback: Callable | None = None) -> Any:
        self.callback = callback
        copies = tuple(namespace(a).asarray(a, copy=True) for a in arrays)
        return copies if len(copies) > 1 else copies[0]

    def backward(self, *grads: Any) -> Any:
        grads = self.callback(grads)
        return tuple(grads) if len(grads) > 1 else grads[0]

    def jvp(self, *tangents: Any) -> Any:
        copies = tuple(None if t is None else t.clone() for t in tangents)
        return copies if len(copies) > 1 else copies[0]
