"""What a recorded node keeps of its values, and the checks on them.

Below `autograd` (which re-exports the public names); imports only `errors`. Two things:

- **Versions.** A backward rule may read its inputs' or outputs' values (`backward_reads`,
  `grad_reads`). When the node is recorded, `versions_read` notes the version counter of each
  value it will read; before the rule runs, `check_runnable` refuses if one was written in
  place since (PyTorch's "modified by an inplace operation" error). A rule that reads no value
  has no versions, and its node skips both.
- **Skeletons.** Backward frees a node's inputs (`Function.release`) but keeps, for each one,
  what a drawing of the graph needs: the Function that made it, a parameter or small constant
  itself, or a `ReleasedConstant` (shape and dtype) for a large constant such as a mask.
"""

from __future__ import annotations

import math
import operator
from typing import Any

from ..errors import freed_graph_message, modified_in_place_message

_requires_grad = operator.attrgetter("requires_grad")


class ReleasedConstant:
    """What a released node keeps of a constant input (no gradient reaches it, and it holds more
    than `KEPT_CONSTANT_SIZE` values): its shape and dtype, to be drawn. A mask or a dropout
    pattern is as large as the activations, and its values are freed with the rest of the
    graph."""

    __slots__ = ("shape", "dtype")
    requires_grad = False
    grad = None
    _ctx = _rebased = None

    def __init__(self, shape: tuple, dtype: Any) -> None:
        self.shape, self.dtype = shape, dtype

    def numel(self) -> int:
        return math.prod(self.shape)


# A constant of at most this many values is kept whole by a released node (the 2.0 of x * 2.0,
# a bias-sized vector): it costs no memory to speak of, and making a stand-in for it on every
# node would slow a chain of tiny ops by about 6%.
KEPT_CONSTANT_SIZE = 64


def skeleton_of(tensor: Any) -> Any:
    """A released node's record of one input: the Function that made it, or the tensor itself
    if it is a leaf a gradient reaches (a parameter) or a small constant, else a
    `ReleasedConstant`."""
    # Its attributes, not the Tensor's properties: this runs on every node. A ReleasedConstant
    # is an input the node never kept (`grad_reads`).
    if tensor._ctx is not None or tensor.requires_grad or type(tensor) is ReleasedConstant:
        return tensor if tensor._ctx is None else tensor._ctx
    array = tensor.array
    if math.prod(array.shape) <= KEPT_CONSTANT_SIZE:
        return tensor
    return ReleasedConstant(array.shape, array.dtype)


def values_read(fn: Any) -> tuple[list, bool]:
    """(input positions, whether the outputs are read): what the rule reads, given which inputs
    need a gradient when the op declares `grad_reads`, else by `backward_reads`."""
    if fn.grad_reads is None:
        return (range(len(fn.inputs)) if fn._reads_inputs else []), fn._reads_output
    if all(map(_requires_grad, fn.inputs)):  # the common case: every read, every input kept
        return fn._all_reads
    need = tuple([t.requires_grad for t in fn.inputs])
    reads = fn._reads_by_need.get(need)
    if reads is None:
        wanted: set = set().union(*(fn.grad_reads[p] for p, needed in enumerate(need) if needed))
        positions = sorted(p for p in wanted if p != "output")
        dropped = tuple(p for p, needed in enumerate(need) if not needed and p not in wanted)
        reads = fn._reads_by_need[need] = (positions, "output" in wanted, dropped)
    positions, output, dropped = reads
    if dropped:  # an input nothing reads is not kept: its memory goes with its last user
        kept = list(fn.inputs)
        for p in dropped:
            kept[p] = skeleton_of(kept[p])
        fn.inputs = tuple(kept)
    return positions, output


def versions_read(fn: Any, outputs: tuple) -> tuple | None:
    """The (position, version) pairs backward will check, as of now (see `Function.__slots__`),
    or None if the rule reads no value."""
    positions, output = values_read(fn)
    versions = [(p, fn.inputs[p]._version_counter[0]) for p in positions]
    if output:
        for k, out in enumerate(outputs):
            versions.append((-1 - k, out._version_counter[0]))
    return tuple(versions) or None


def check_runnable(fn: Any, output: Any) -> None:
    """Refuse to run the rule of a node that an earlier backward freed, or whose values were
    changed in place after the node was recorded."""
    if fn.inputs is None:
        raise RuntimeError(freed_graph_message(fn.name))
    for position, version in fn._versions:
        if position < 0 or fn.inputs[position]._version_counter[0] != version:
            _check_output_or_refuse(fn, output, position, version)


def _check_output_or_refuse(fn: Any, output: Any, position: int, version: int) -> None:
    """`check_runnable` of an output read (position -1 - k), or its refusal of a changed input."""
    if position >= 0:
        tensor = fn.inputs[position]
        current, shape, what = tensor._version_counter[0], tensor.shape, f"input {position}"
    elif fn._outputs is None:
        current, shape, what = output._version_counter[0], output.shape, "output"
    else:
        k = -1 - position
        current, shape = fn._outputs.counters[k][0], fn._outputs.shapes[k]
        what = f"output {k}"
    if current != version:
        raise RuntimeError(modified_in_place_message(fn.name, what, shape, current, version))
