"""Exercise 9: the order of the backward walk (a topological sort).

A backward rule may only run once its output's gradient is complete, that is, after every
tensor that USED the output has sent its part. So the engine needs the graph's tensors in an
order where each tensor comes before the tensors it was computed from (its inputs): a reverse
topological order. ``backward`` below is a whole engine built on your order.

The graph: ``t._ctx`` is the Function that made tensor t (None for a leaf), and
``t._ctx.inputs`` the tensors it read. A tensor used twice (x * x, or a diamond
a -> b, a -> c, (b, c) -> d) must still appear once, after ALL of its users.

Hint: a depth-first search that appends a tensor after all its inputs are done gives the
inputs-first order; reverse it. Use your own stack, not recursion: graphs thousands of ops deep
(a long loop) exceed Python's recursion limit. (tinyattn's engine orders by creation number
instead; this is the textbook way.)

Grade it: ``python -m pytest exercises -k ex09``.
"""

from __future__ import annotations

import tinyattn as ta
from tinyattn import Tensor


def topological_order(root: Tensor) -> list[Tensor]:
    """Every tensor `root` was computed from, root included, once each, every tensor before
    the tensors it was computed from (so ``order[0] is root`` and leaves come late)."""
    raise NotImplementedError("exercise 9: write this rule (see the hint above)")


def backward(root: Tensor) -> None:
    """A whole engine: walk `root`'s graph in your order, summing gradients (given)."""
    grads = {id(root): ta.ones_like(root)}
    with ta.no_grad():
        for tensor in topological_order(root):
            grad = grads.pop(id(tensor), None)
            if grad is None:
                continue  # nothing reached this tensor
            fn = tensor._ctx
            if fn is None:  # a leaf: its gradient is complete
                tensor.grad = grad if tensor.grad is None else tensor.grad + grad
                continue
            fn.output = tensor  # some rules read the output (exp, tanh, softmax)
            input_grads = fn.backward(grad)
            fn.output = None
            if not isinstance(input_grads, tuple):
                input_grads = (input_grads,)
            for parent, parent_grad in zip(fn.inputs, input_grads):
                if parent_grad is None or not parent.requires_grad:
                    continue
                previous = grads.get(id(parent))
                grads[id(parent)] = parent_grad if previous is None else previous + parent_grad
