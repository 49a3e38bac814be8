"""Autograd, the walk: `run_backward`, `grad`, and the gradient a backward starts from.

The engine walks the graph iteratively (no recursion limit) from the newest node to the oldest:
every Function gets a creation number when it is recorded, and a tensor is always made after
its inputs, so popping the largest number first (a heap) runs each backward rule once, after all
of its outputs' consumers, with the summed gradients; leaves accumulate at the end. Backward
rules are written with Tensor operations: under ``create_graph=True`` they record a graph of
their own (higher-order gradients); otherwise they run with grad mode off, and the built-in ones
make their ops' array calls directly (`rules_on_arrays`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

from .. import backend
from ..errors import TinyattnError
from . import function, grad_mode, hooks, listeners
from .function import Function, rules_on_arrays
from .grad_mode import set_grad_enabled
from .hooks import RETAIN_GRAD, _check_hook_result
from .saved_values import check_runnable


def run_backward(
    roots: Sequence[Any],
    root_grads: Sequence[Any],
    retain_graph: bool | None,
    create_graph: bool,
    capture: set | None = None,
) -> dict[int, Any]:
    """Propagate `root_grads` from `roots` back through the graph, newest node first.

    With ``capture=None`` leaf gradients accumulate into ``.grad``; otherwise the gradients of the
    tensors in the set `capture` are returned by ``id`` and no ``.grad`` is touched
    (``tinyattn.grad``). The graph is released unless `retain_graph` (None: as `create_graph`).
    Listeners (`listeners`) see each rule run, and each leaf's ``.grad`` set.
    """
    watching = listeners.active  # one read: nobody starts listening mid-walk
    # Where no graph is built and nobody watches, a rule with an array form (`_rule`) runs
    # on arrays and records nothing; grad mode goes off only for the first rule or hook that
    # uses Tensor ops (`modes`), so a walk of array rules never touches the per-thread mode.
    arrays = not create_graph and watching is None
    # The walk's state (`_send`), grad()'s results by id, and memory root -> the gradients in it
    # handed to leaves so far (`_deliver`).
    pending, leaves, ready, captured, handed = {}, {}, [], {}, {}
    for root, grad in zip(roots, root_grads):
        _send(root, grad, pending, leaves, ready, arrays)
    early = hooks.early_leaves(roots, capture) if hooks.live[0] else None
    retain = create_graph if retain_graph is None else retain_graph
    release = not retain and (watching is None or not watching.keeps_graph())
    modes = [] if arrays else [set_grad_enabled(create_graph)]  # rules record for higher order
    try:
        while ready:
            # The newest tensor waiting: its consumers are all newer, so its gradient is complete.
            entry = heapq.heappop(ready)
            if early:  # leaves every reader of which has run get their .grad now
                due = early.due(-entry[0])
                _deliver_early(due, leaves, capture, captured, handed, create_graph, watching)
            tensor = entry[-1]
            grad = pending.pop(tensor)
            fn = tensor._ctx
            if capture is not None or tensor._hooks or fn._outputs is not None:
                _in_grad_mode(modes, create_graph)  # hooks run in the rules' grad mode
                tensor, grad = _received(fn, entry, tensor, grad, ready, pending, capture, captured)
            input_grads = _rule(fn, tensor, grad, arrays, watching, modes, create_graph)
            _pass_on(fn, fn.inputs, input_grads, pending, leaves, ready, arrays)
            if release:
                fn.release()
        _deliver(leaves, capture, captured, handed, create_graph, watching)
    finally:
        for mode in modes:
            mode.__exit__()
    return captured


def _pass_on(
    fn: Function,
    inputs: tuple,
    input_grads: tuple,
    pending: dict,
    leaves: dict,
    ready: list,
    arrays: bool,
) -> None:
    """Send each input of `fn` its gradient from `fn`'s rule (a Tensor, or an array rule's
    array): checked when it is not of the input's shape and dtype, then summed into `pending`
    (or a leaf's total) by `_send`."""
    for position, parent in enumerate(inputs):
        if parent._rebased is not None:  # written in place after fn read it
            parent = _as_of(parent, fn._seq)
        grad = input_grads[position]
        if grad is None or not parent.requires_grad:
            continue
        if not hasattr(grad, "_ctx"):  # an array rule's array: a constant Tensor
            grad = function._wrap(grad, None)
        if grad.array.shape != parent.array.shape or grad.array.dtype is not parent.array.dtype:
            grad = _checked(fn, position, parent, grad)
        producer = parent._ctx
        if producer is None or producer._outputs is not None or parent in pending:
            _send(parent, grad, pending, leaves, ready, arrays)
        else:  # `_send`'s common case, without the call: a one-output node's first gradient
            pending[parent] = grad
            heapq.heappush(ready, (-producer._seq, parent))


def _rule(
    fn: Function,
    output: Any,
    grad: Any,
    arrays: bool,
    watching: Any,
    modes: list,
    create_graph: bool,
) -> tuple:
    """fn's rule on the gradient of its output: its array form (`Function.backward_arrays`, one
    array or None per input) where `arrays` allows it and the op declares one that applies; else
    the rule itself, with Tensor ops, in the walk's grad mode (`_call_backward`), or run by the
    listener `watching`."""
    if arrays and fn.backward_arrays is not None and type(grad) is not list:
        if fn.inputs is None or fn._versions is not None:
            check_runnable(fn, output)
        found = fn.backward_arrays(grad.array) if not fn._reads_output else _lent(fn, output, grad)
        if found is not None:
            return found
    if not modes:  # the walk's first rule in Tensor ops: grad mode as create_graph from now on
        modes.append(set_grad_enabled(create_graph))
    if watching is not None:  # ta.compile, anomaly mode, ...
        return watching.rule(fn, output, grad, _bound(fn, output, grad))
    if fn._versions is None and fn.inputs is not None:
        return _run_lent(fn, fn.inputs, output, grad)  # nothing to check (common)
    return _call_backward(fn, output, grad)


def _lent(fn: Function, output: Any, grad: Any) -> tuple | None:
    """fn's array form, with its output lent (a rule that reads it)."""
    return _run_with_output(fn, output, grad, fn.backward_arrays)


def _in_grad_mode(modes: list, create_graph: bool) -> None:
    """Turn grad mode to `create_graph` for the rest of the walk, if not done yet (`modes`)."""
    if not modes:
        modes.append(set_grad_enabled(create_graph))


def _as_of(tensor: Any, seq: int) -> Any:
    """What `tensor` was when node number `seq` read it: an in-place op recorded later moved
    its history on (``tensor._rebased``: (when, the handle on the history before, older))."""
    rebased = tensor._rebased
    while rebased is not None and rebased[0] > seq:
        tensor, rebased = rebased[1], rebased[2]
    return tensor


def input_as_read(fn: Function, position: int) -> Any:
    """`fn`'s input `position` as fn read it, its history then: for a rule that builds a graph
    on an input it does not read (under create_graph) after an in-place op moved it on."""
    tensor = fn.inputs[position]
    return tensor if tensor._rebased is None else _as_of(tensor, fn._seq)


def _send(tensor: Any, grad: Any, pending: dict, leaves: dict, ready: list, arrays: bool) -> None:
    """Add one gradient to what `tensor` has received; a tensor's first one queues it.
    `pending`: a non-leaf tensor -> the sum of its gradients so far; `leaves`: a leaf -> its
    sum, delivered at the end; `ready`: a heap of (-creation number, tensor) for the tensors in
    `pending` ((-creation number, its position, tensor) for an output of a node with several,
    so that they pop together; creation numbers are unique, so two tensors are never compared)."""
    fn = tensor._ctx
    received = leaves if fn is None else pending
    total = received.get(tensor)
    if total is None:
        received[tensor] = grad
        if fn is not None:
            heapq.heappush(ready, (-fn._seq, tensor) if fn._outputs is None else _entry(fn, tensor))
    elif arrays or rules_on_arrays():  # a sum of arrays where no graph needs Add: the same bits
        received[tensor] = function._wrap(total.array + grad.array, None)
    else:
        received[tensor] = total + grad


def _entry(fn: Function, tensor: Any) -> tuple:
    """The heap entry of an output of a node with several: (-creation number, position, it)."""
    return (-fn._seq, fn._outputs.position(tensor), tensor)


def _received(
    fn: Function,
    entry: tuple,
    tensor: Any,
    grad: Any,
    ready: list,
    pending: dict,
    wanted: set | None,
    captured: dict,
) -> tuple:
    """(tensor, gradient) for fn's rule, after the tensor's hooks, kept where retain_grad or
    grad() asks; for a node with several outputs, (outputs, gradients) (`_gather`)."""
    if wanted is not None or tensor._hooks:
        grad = _kept(tensor, grad, wanted, captured)
    if fn._outputs is None:
        return tensor, grad
    return _gather(fn, entry, grad, ready, pending, wanted, captured)


def _kept(tensor: Any, grad: Any, wanted: set | None, captured: dict) -> Any:
    """`tensor`'s complete gradient after its hooks, kept where retain_grad or grad() asks."""
    if tensor._hooks:
        grad = _run_hooks(tensor, grad)
        if RETAIN_GRAD in tensor._hooks:  # after every hook, as in PyTorch
            tensor.grad = grad.clone() if tensor._grad is None else tensor._grad + grad
    if wanted is not None and tensor in wanted:
        captured[id(tensor)] = grad
    return grad


def _gather(fn: Function, entry: tuple, grad: Any, ready: list, pending: dict, *rest: Any) -> tuple:
    """(outputs, gradients) of a node with several outputs: the other outputs waiting pop now
    (they share its creation number), and an output no gradient reached gets zeros."""
    known = fn._outputs
    grads: list = [None] * len(known.refs)
    grads[entry[1]] = grad
    while ready and ready[0][0] == entry[0]:
        _, position, tensor = heapq.heappop(ready)
        grads[position] = _kept(tensor, pending.pop(tensor), *rest)
    xp = backend.namespace(grad.array)
    for k, shape in enumerate(known.shapes):
        if grads[k] is None:
            zeros = xp.zeros(shape, dtype=known.dtypes[k], device=grad.array.device)
            grads[k] = grad.constant(zeros)
    return tuple([ref() for ref in known.refs]), grads


def _call_backward(fn: Function, output: Any, grad: Any) -> tuple:
    """Run fn's backward rule on the output's gradient: one gradient (or None) per input."""
    if fn.inputs is None or fn._versions is not None:
        check_runnable(fn, output)
    return _run_lent(fn, fn.inputs, output, grad)


def _bound(fn: Function, output: Any, grad: Any) -> Any:
    """`_call_backward` of these arguments, as the `run` a listener's ``rule`` is given."""
    return lambda: _call_backward(fn, output, grad)


def _run_lent(fn: Function, inputs: tuple, output: Any, grad: Any) -> tuple:
    """Run fn's rule on `grad` (a list, one per output, for a node with several outputs)."""
    if fn._reads_output or type(grad) is list:
        grads = _run_with_output(fn, output, grad)
    elif fn.backward_arrays is None:  # a rule that reads no output is lent none (common)
        grads = fn.backward(grad)
    else:
        grads = _either_form(fn, grad)
    kind = type(grads)
    if kind is tuple and len(grads) == len(inputs):
        return grads
    if len(inputs) == 1 and kind is not tuple and kind is not list:  # a unary rule's one (common)
        return (grads,)
    return _as_gradient_tuple(fn, grads)


def _run_with_output(fn: Function, output: Any, grad: Any, on_arrays: Any = None) -> Any:
    """The rule's result (or `on_arrays`'s, on the gradient's array), with ``fn.output`` set
    for the call."""
    fn.output = output  # lent to the rule for this call only: no lasting cycle
    try:
        if on_arrays is not None:
            return on_arrays(grad.array)
        if type(grad) is list:  # several outputs (`_gather`): one gradient each
            return fn.backward(*grad)
        return _either_form(fn, grad)
    finally:
        fn.output = None


def _either_form(fn: Function, grad: Any) -> Any:
    """fn's backward rule on `grad`: its array form (`Function.backward_arrays`) where the op
    declares one and no graph is built, which makes the same array calls without a Tensor op's
    dispatch each, else the rule itself."""
    if fn.backward_arrays is not None and (
        rules_on_arrays() or (fn.arrays_in_recordings and not grad_mode.is_grad_enabled())
    ):
        arrays = fn.backward_arrays(grad.array)
        if arrays is not None:
            return function.constants(*arrays)
    return fn.backward(grad)


def _as_gradient_tuple(fn: Function, grads: Any) -> tuple:
    """One gradient (or None) per input, from whatever a rule returned, or a clear error."""
    if type(grads) is not tuple:
        grads = tuple(grads) if isinstance(grads, list) else (grads,)
    if len(grads) != len(fn.inputs):
        raise RuntimeError(
            f"{fn.name}.backward returned {len(grads)} gradient(s) for {len(fn.inputs)} input(s)"
        )
    return grads


def _checked(fn: Function, position: int, parent: Any, grad: Any) -> Any:
    """Wrap arrays, check the shape (a wrong broadcast sum is caught here), match the dtype."""
    if not hasattr(grad, "_ctx"):  # a rule's array: a constant Tensor
        grad = function._wrap(grad, None)
    if grad.array.shape != parent.array.shape:
        raise RuntimeError(
            f"{fn.name}.backward returned a gradient of shape {grad.shape} for input {position} "
            f"of shape {parent.shape}"
        )
    # NumPy's dtypes of one kind are one object, so `is` settles the common case without
    # the slower comparison.
    dtype = parent.array.dtype
    if grad.array.dtype is not dtype and grad.array.dtype != dtype:
        grad = grad.to(parent.dtype)
    return grad


def _deliver_early(due: list, leaves: dict, *rest: Any) -> None:
    """`_deliver` to the leaves in `due` that the walk reached (a post-accumulate hook's)."""
    _deliver({leaf: leaves.pop(leaf) for leaf in due if leaf in leaves}, *rest)


def _deliver(
    leaves: dict,
    wanted: set | None,
    captured: dict,
    handed: dict,
    create_graph: bool,
    watching: Any,
) -> None:
    """Hand the leaves their summed gradients: into ``.grad``, or into `captured` for grad().
    `handed`: memory root -> the gradients in it handed to leaves so far in this backward;
    `watching`: the walk's listener."""
    for leaf, grad in leaves.items():
        if leaf._hooks or wanted is not None or watching is not None:
            _deliver_one(leaf, grad, wanted, captured, handed, create_graph)
        else:  # checked on the way here, so not through the .grad setter's checks (common)
            leaf._grad = _accumulated(leaf, grad, handed)


def _deliver_one(
    leaf: Any, grad: Any, wanted: set | None, captured: dict, handed: dict, create_graph: bool
) -> None:
    """`_deliver` to a leaf with hooks, for grad(), or while a listener watches."""
    if leaf._hooks:
        with set_grad_enabled(create_graph):  # hooks run in the rules' grad mode
            grad = _run_hooks(leaf, grad)
    if wanted is not None:
        if leaf in wanted:
            captured[id(leaf)] = grad
        return
    if listeners.active is None:
        leaf.grad = _accumulated(leaf, grad, handed)
    else:  # a recording notes the .grad it reads and sets
        listeners.active.deliver(leaf, lambda: _set_grad(leaf, _accumulated(leaf, grad, handed)))
    if leaf._hooks:
        with set_grad_enabled(create_graph):
            hooks.run_post_accumulate(leaf)


def _set_grad(leaf: Any, grad: Any) -> None:
    """leaf.grad = grad, through the setter (a recording notes the assignment)."""
    leaf.grad = grad


def _accumulated(leaf: Any, grad: Any, handed: dict) -> Any:
    """The leaf's new .grad: grad, or leaf.grad + grad when it has one (PyTorch's accumulation).

    A new ``.grad`` holds memory that no other leaf's new ``.grad`` reaches and that can be
    written (`backend.own_memory`), as in PyTorch, where a hand-written SGD loop's
    ``p.grad.zero_()`` must not zero another leaf's gradient too: Add hands one gradient to
    both its inputs, and a sum's gradient is a broadcast view (PyTorch copies an expanded one)."""
    if leaf._grad is not None:
        return leaf._grad + grad
    array = backend.own_memory(grad.array, handed)
    if array is grad.array:
        return grad
    return grad.clone() if grad.requires_grad else function._wrap(array, None)  # a copy


def _run_hooks(tensor: Any, grad: Any) -> Any:
    """Call the tensor's hooks in order; a Tensor a hook returns replaces the gradient."""
    for hook in list(tensor._hooks or ()):  # a copy: a hook may remove itself
        if hook is RETAIN_GRAD:
            continue
        result = hook(grad) if listeners.active is None else listeners.active.hook(hook, grad)
        if result is not None:
            _check_hook_result(tensor, hook, result)
            grad = result
    return grad


def grad(
    outputs: Any,
    inputs: Any,
    grad_outputs: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool = False,
) -> tuple:
    """Gradients of `outputs` with respect to `inputs`, returned (not accumulated into ``.grad``).

    ``dL/dinput = sum over outputs of grad_output * d output / d input``. With ``create_graph=True``
    the returned gradients are themselves differentiable (Hessian-vector products, gradgradcheck).
    """
    outputs, inputs = _as_sequence(outputs), _as_sequence(inputs)
    grad_outputs = _as_sequence(grad_outputs) if grad_outputs is not None else [None] * len(outputs)
    if len(grad_outputs) != len(outputs):
        raise TinyattnError(f"grad: {len(grad_outputs)} grad_outputs for {len(outputs)} outputs")
    for kind, tensors in (("output", outputs), ("input", inputs)):
        for position, tensor in enumerate(tensors):
            if not hasattr(tensor, "_ctx"):  # the engine cannot import Tensor (layering)
                raise TypeError(
                    f"grad: {kind} {position} is a {type(tensor).__name__}, not a Tensor"
                )
    for position, tensor in enumerate(inputs):
        if not tensor.requires_grad:
            raise RuntimeError(
                f"grad: input {position} (shape {tensor.shape}) does not require grad"
            )
    seeds = [default_root_grad(out, g, "grad") for out, g in zip(outputs, grad_outputs)]
    captured = run_backward(outputs, seeds, retain_graph, create_graph, capture=set(inputs))
    results = []
    for position, tensor in enumerate(inputs):
        found = captured.get(id(tensor))
        if found is None and not allow_unused:
            raise RuntimeError(
                f"grad: input {position} (shape {tensor.shape}) was not used to compute the "
                "outputs; pass allow_unused=True to get None for it"
            )
        results.append(found)
    return tuple(results)


def default_root_grad(output: Any, given: Any, caller: str = "backward") -> Any:
    """The seed gradient of a root: ones for a one-element output, else it must be given."""
    if given is None and output.requires_grad and math.prod(output.array.shape) == 1:  # common
        return function._wrap(backend.namespace(output.array).ones_like(output.array), None)
    if not output.requires_grad:
        raise RuntimeError(
            f"{caller}: the tensor (shape {output.shape}) does not require grad and has no graph; "
            "did you create it under no_grad, detach it, or forget requires_grad=True?"
        )
    if given is None:
        raise RuntimeError(
            f"{caller}: the output has shape {output.shape}; backward without a gradient is "
            "only defined for a single-element output. Reduce it (e.g. .sum()) or pass a "
            "gradient of the same shape."
        )
    if not hasattr(given, "_ctx"):  # a list or an array: a constant on the output's device
        given = type(output)._from_op(backend.asarray(given, device=output.device), None)
    elif not isinstance(given, type(output)):
        given = type(output)._from_op(given, None)
    if given.shape != output.shape:
        raise RuntimeError(
            f"{caller}: gradient of shape {given.shape} given for an output of shape {output.shape}"
        )
    if given.device != output.device:
        raise RuntimeError(
            f"{caller}: gradient on device '{given.device}' given for an output on device "
            f"'{output.device}'; move it with .to(device)"
        )
    if given.dtype != output.dtype:  # cast to the output's dtype, as PyTorch's engine does
        given = given.to(output.dtype)
    return given


def _as_sequence(value: Any) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]
