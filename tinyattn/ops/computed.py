"""Results without a gradient, computed by array code: comparisons, masks, indices from values.

`x > 0`, `~mask`, `argmax`, the flat positions `gather` reads: their results are boolean or
integer, so no gradient flows through them, and they are written as plain array code. Made
through this one op instead of wrapped directly, they become ops like any other, which is what
lets ``ta.compile`` record them and compute them again from the new values on every replay
(array code wrapped directly would be replayed with its first result).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..autograd import Function
from ..backend import namespace
from . import batching


class Computed(Function):
    """y = function(xp, *arrays, **options), array code with no gradient;  dL/dx = none.

    Its inputs are detached (the caller's `computed` does it), so it never joins a graph.
    Shapes: whatever `function` makes.
    """

    __slots__ = ()
    backward_reads = ()

    def forward(self, *arrays: Any, function: Callable | None = None, options: tuple = ()) -> Any:
        return function(namespace(arrays[0]), *arrays, **dict(options))

    def backward(self, grad: Any) -> tuple:
        return (None,) * len(self.inputs)


def computed(function: Callable, *tensors: Any, **options: Any) -> Any:
    """``function(xp, *arrays, **options)`` on the tensors' arrays, as a `Computed` op.

    `function` must be a module-level function (a compiled step compares it between calls by
    identity) and `options` plain Python values.
    """
    inputs = [t.detach() if t.requires_grad else t for t in tensors]
    return Computed.apply(*inputs, function=function, options=tuple(options.items()))


def array_call(xp: Any, *arrays: Any, name: str) -> Any:
    """``xp.<name>(*arrays)``: a comparison, a bitwise or a logical function. A compiled step
    replays it as the same function writing into a buffer (``out=``), where one exists."""
    return getattr(xp, name)(*arrays)


def _batched(cls: type, values: list, batched: tuple, kwargs: dict, size: int) -> Any:
    """vmap's rule: a comparison, bitwise or logical function (`array_call`) broadcasts as an
    elementwise op; other array code (indices from values) declines, and runs per sample."""
    if kwargs.get("function") is not array_call:
        return NotImplemented
    return batching.elementwise(cls, values, batched, kwargs, size)


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`, or a rule.
VMAP_RULES = {Computed: _batched}
