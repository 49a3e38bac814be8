"""The backward walk in one sitting: reverse mode with nothing but the idea.

Order the graph so that every tensor comes before the tensors it was computed from; seed the
output's gradient with one; walk that order, running each node's backward rule once, on the sum
of the gradients its output received; add what the rule sends into each input's sum.
`tinyattn.autograd.engine.run_backward` walks the same graph with the same rules (ordered by
creation number instead of a sort) and adds what a library needs on top: ``.grad`` and hooks,
freeing the graph, in-place checks, nodes with several outputs. tests/test_teaching_engine.py
checks that the two give the same gradients on every op of the op table and on small models.
"""

import tinyattn as ta
from tinyattn import Tensor


def topological_order(output: Tensor) -> list[Tensor]:
    """Every tensor `output` was computed from, once each, each before its own inputs."""
    placed: set[int] = set()
    inputs_first: list[Tensor] = []
    stack = [(output, False)]
    while stack:  # a stack of our own, not recursion: a graph can be 100,000 ops deep
        tensor, inputs_placed = stack.pop()
        if inputs_placed:  # all its inputs are in the list now, so it may follow them
            inputs_first.append(tensor)
        elif id(tensor) not in placed:  # a tensor used twice is placed once
            placed.add(id(tensor))
            stack.append((tensor, True))  # come back after the inputs pushed next
            if tensor._ctx is not None:
                stack.extend((parent, False) for parent in tensor._ctx.inputs)
    return inputs_first[::-1]


def grad(output: Tensor, inputs: list[Tensor]) -> list[Tensor | None]:
    """d output / d input for each of `inputs` (None where output does not depend on it).
    `output` has one element. The gradients live in one dictionary: no tensor is changed."""
    grads = {id(output): ta.ones_like(output)}  # d output / d output = 1
    with ta.no_grad():  # rules are Tensor code: the gradients need no graph of their own
        for tensor in topological_order(output):
            fn, tensor_grad = tensor._ctx, grads.get(id(tensor))
            if fn is None or tensor_grad is None:  # a leaf, or a tensor no gradient reached
                continue
            # Every tensor that used this one came earlier in the order: tensor_grad is complete.
            input_grads = run_rule(fn, tensor, tensor_grad)
            for parent, parent_grad in zip(fn.inputs, input_grads, strict=True):
                if parent_grad is None or not parent.requires_grad:
                    continue
                previous = grads.get(id(parent))  # a tensor used twice gets a gradient per use
                grads[id(parent)] = parent_grad if previous is None else previous + parent_grad
    return [grads.get(id(tensor)) for tensor in inputs]


def run_rule(fn: ta.Function, output: Tensor, output_grad: Tensor) -> tuple:
    """fn's backward rule on its output's gradient: one gradient (or None) per input of fn."""
    if fn._outputs is not None:
        raise NotImplementedError(f"{fn.name} has several outputs; run_backward gathers them")
    fn.output = output  # lent for the call: rules such as exp's and tanh's reuse their output
    try:
        input_grads = fn.backward(output_grad)  # a broadcast input's rule sums its share itself
    finally:
        fn.output = None  # a Function never keeps its output: that would make a cycle
    return input_grads if isinstance(input_grads, tuple) else (input_grads,)
