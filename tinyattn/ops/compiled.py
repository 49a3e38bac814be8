"""Compiled calls as nodes of the caller's graph (``ta.compile(model)`` with backward outside).

A replayed compiled function is one node: its forward result and its backward rule come from the
recording (compiler/graph.py hands them in), so the derivative math here is only the plumbing:
the node returns what it is given, and its backward runs the recorded backward. Imports
`autograd` and `backend`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import backend
from ..autograd import Function

FORWARD_MODE_REFUSED = (
    "forward-mode AD (dual tensors, jvp, jacfwd) reached a call of a compiled function, whose "
    "recording holds its backward only; call the function uncompiled under forward mode"
)


class CompiledCall(Function):
    """One call of a compiled function: y = f(inputs, parameters) as replayed; its backward
    gives dL/d(inputs, parameters) from dL/dy by the recorded backward. No jvp: the recording
    holds J^T only (J v would take one replayed backward per output element), so forward mode
    through a compiled call raises, naming the way out."""

    backward_reads = ("inputs",)  # a parameter changed in place before backward is an error

    def forward(self, *arrays: Any, output: Any, backward: Callable) -> Any:
        self.run = backward
        return output

    def backward(self, grad: Any) -> tuple:
        return self.run(grad.array)

    def jvp(self, *tangents: Any) -> Any:
        raise RuntimeError(FORWARD_MODE_REFUSED)


class CompiledOutput(Function):
    """Output k of a compiled call with several: y_k = the call's k-th result. Its backward
    keeps dL/dy_k for the call's node (the anchor), which runs once all have reported."""

    backward_reads = ()

    def forward(self, anchor: Any, output: Any, index: int, holder: list) -> Any:
        self.index, self.holder = index, holder
        return output

    def backward(self, grad: Any) -> Any:
        self.holder[self.index] = grad.array
        anchor = self.inputs[0].array
        return backend.namespace(anchor).zeros_like(anchor)

    def jvp(self, tangent: Any) -> Any:
        raise RuntimeError(FORWARD_MODE_REFUSED)  # the anchor has no tangent to give one
