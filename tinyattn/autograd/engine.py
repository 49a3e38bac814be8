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
from collections.abc import Sequence
from typing import Any

from .. import backend
from ..errors import TinyattnError, freed_graph_message
from . import function, grad_mode, hooks, listeners
from .function import Function, rules_on_arrays
from .grad_mode import set_grad_enabled
from .hooks import RETAIN_GRAD, _check_hook_result
from .saved_values import check_versions


def run_backward(
    roots: Sequence[Any],
    root_grads: Sequence[Any],
    retain_graph: bool,
    create_graph: bool,
    capture: Sequence[Any] | None = None,
) -> dict[int, Any]:
    """Propagate `root_grads` from `roots` back through the graph, newest node first.

    With ``capture=None`` leaf gradients accumulate into ``.grad``; otherwise the gradients of the
    tensors in `capture` are returned by ``id`` and no ``.grad`` is touched (``tinyattn.grad``).
    Listeners (`listeners`) see each rule run, and each leaf's ``.grad`` set.
    """
    pending, leaves, ready = _seeded(roots, root_grads)
    early = hooks.early_leaves(roots, capture)  # leaves with post-accumulate hooks, if any
    handed: dict[int, list] = {}  # memory root -> the gradients in it handed to leaves so far
    wanted = None if capture is None else set(capture)
    captured: dict[int, Any] = {}
    watching = listeners.active  # one read: nobody starts listening mid-walk
    release = not retain_graph and (watching is None or not watching.keeps_graph())
    with set_grad_enabled(create_graph):  # rules record a graph only for higher order
        while ready:
            # The newest tensor waiting: its consumers are all newer, so its gradient is complete.
            entry = heapq.heappop(ready)
            if early:  # leaves every reader of which has run get their .grad now
                _deliver_early(early.due(-entry[0]), leaves, wanted, captured, handed)
            tensor = entry[-1]
            grad = pending.pop(tensor)
            if wanted is not None or tensor._hooks:
                grad = _received(tensor, grad, wanted, captured)
            fn = tensor._ctx
            if fn._outputs is not None:  # every output of fn waiting now has its complete gradient
                tensor, grad = _gather(fn, entry, grad, ready, pending, wanted, captured)
            inputs = fn.inputs
            if watching is not None:  # ta.compile, anomaly mode, ...: usually None
                input_grads = watching.rule(fn, tensor, grad, _bound(fn, tensor, grad))
            elif fn._versions is None and inputs is not None:
                input_grads = _run_lent(fn, inputs, tensor, grad)  # nothing to check (common)
            else:
                input_grads = _call_backward(fn, tensor, grad)
            _pass_on(fn, inputs, input_grads, pending, leaves, ready)
            if release:
                fn.release()
        _deliver(leaves, wanted, captured, handed)
    return captured


def _pass_on(
    fn: Function,
    inputs: tuple,
    input_grads: tuple,
    pending: dict,
    leaves: dict,
    ready: list,
) -> None:
    """Send each input of `fn` its gradient from `fn`'s rule: checked when it is not a Tensor of
    the input's shape and dtype, then summed into `pending` (or a leaf's total) by `_send`."""
    for position, parent in enumerate(inputs):
        if parent._rebased is not None:  # written in place after fn read it
            parent = _as_of(parent, fn._seq)
        parent_grad = input_grads[position]
        if parent_grad is None or not parent.requires_grad:
            continue
        array = parent_grad.array if hasattr(parent_grad, "_ctx") else None
        like = parent.array
        # A Tensor of the input's shape and dtype passes on unchecked (common).
        if array is None or array.shape != like.shape or array.dtype is not like.dtype:
            parent_grad = _checked(fn, position, parent, parent_grad)
        producer = parent._ctx
        if producer is None or producer._outputs is not None or parent in pending:
            _send(parent, parent_grad, pending, leaves, ready)
        else:  # `_send`'s common case: a one-output node's first gradient, without the call
            pending[parent] = parent_grad
            heapq.heappush(ready, (-producer._seq, parent))


def _seeded(roots: Sequence[Any], root_grads: Sequence[Any]) -> tuple[dict, dict, list]:
    """The walk's state with the roots' gradients sent: `pending` (a non-leaf tensor -> the sum
    of the gradients it has received so far), `leaves` (a leaf -> its summed gradient, delivered
    at the end) and `ready`, a heap of (-creation number, tensor) for the tensors in `pending`
    (for an output of a node with several outputs (-creation number, its position, tensor), so
    that they pop together)."""
    pending: dict = {}
    leaves: dict = {}
    ready: list = []
    for root, grad in zip(roots, root_grads):
        _send(root, grad, pending, leaves, ready)
    return pending, leaves, ready


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


def _sum(total: Any, grad: Any) -> Any:
    """total + grad (alike: `_checked`), as arrays where no graph needs Add: the same sum."""
    return function._wrap(total.array + grad.array, None) if rules_on_arrays() else total + grad


def _send(tensor: Any, grad: Any, pending: dict, leaves: dict, ready: list) -> None:
    """Add one gradient to what `tensor` has received; a tensor's first one queues it."""
    if tensor._ctx is None:
        previous = leaves.get(tensor)
        leaves[tensor] = grad if previous is None else _sum(previous, grad)
    elif tensor in pending:
        pending[tensor] = _sum(pending[tensor], grad)
    else:
        pending[tensor] = grad
        fn = tensor._ctx
        # Creation numbers are unique, and outputs of one node differ in position, so two
        # tensors are never compared.
        if fn._outputs is None:
            heapq.heappush(ready, (-fn._seq, tensor))
        else:
            heapq.heappush(ready, (-fn._seq, fn._outputs.position(tensor), tensor))


def _received(tensor: Any, grad: Any, wanted: set | None, captured: dict) -> Any:
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
        grads[position] = _received(tensor, pending.pop(tensor), *rest)
    xp = backend.namespace(grad.array)
    for k, shape in enumerate(known.shapes):
        if grads[k] is None:
            zeros = xp.zeros(shape, dtype=known.dtypes[k], device=grad.array.device)
            grads[k] = grad.constant(zeros)
    return tuple([ref() for ref in known.refs]), grads


def _call_backward(fn: Function, output: Any, grad: Any) -> tuple:
    """Run fn's backward rule on the output's gradient: one gradient (or None) per input."""
    if fn.inputs is None:
        raise RuntimeError(freed_graph_message(fn.name))
    if fn._versions is not None:
        check_versions(fn, output)
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
        grads = _rule(fn, grad)
    kind = type(grads)
    if kind is tuple and len(grads) == len(inputs):
        return grads
    if len(inputs) == 1 and kind is not tuple and kind is not list:  # a unary rule's one (common)
        return (grads,)
    return _as_gradient_tuple(fn, grads)


def _run_with_output(fn: Function, output: Any, grad: Any) -> Any:
    """The rule's result, with ``fn.output`` set for the call."""
    fn.output = output  # lent to the rule for this call only: no lasting cycle
    try:
        if type(grad) is list:  # several outputs (`_gather`): one gradient each
            return fn.backward(*grad)
        return _rule(fn, grad)
    finally:
        fn.output = None


def _rule(fn: Function, grad: Any) -> Any:
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


def _deliver(leaves: dict, wanted: set | None, captured: dict, handed: dict) -> None:
    """Hand the leaves their summed gradients: into ``.grad``, or into `captured` for grad().
    `handed`: memory root -> the gradients in it handed to leaves so far in this backward."""
    for leaf, grad in leaves.items():
        if leaf._hooks:
            grad = _run_hooks(leaf, grad)
        if wanted is not None:
            if leaf in wanted:
                captured[id(leaf)] = grad
            continue
        if listeners.active is None:
            _accumulate(leaf, grad, handed)
        else:  # a recording notes the .grad it reads and sets
            listeners.active.deliver(leaf, lambda: _accumulate(leaf, grad, handed))  # noqa: B023
        if leaf._hooks:
            hooks.run_post_accumulate(leaf)


def _accumulate(leaf: Any, grad: Any, handed: dict) -> None:
    """leaf.grad = grad, or leaf.grad + grad when it has one (PyTorch's accumulation)."""
    leaf.grad = _own_memory(grad, handed) if leaf.grad is None else leaf.grad + grad


def _own_memory(grad: Any, handed: dict) -> Any:
    """`grad`, or a copy of it, holding memory no other leaf's new .grad reaches, that it can
    write: as in PyTorch, where a hand-written SGD loop's p.grad.zero_() must not zero another
    leaf's gradient too. Gradients may share memory (Add hands one gradient to both its
    inputs; the blocks of a stacked weight's gradient are views of one array, which is fine
    as long as they do not overlap), and a sum's gradient is a broadcast view, copied here as
    PyTorch copies an expanded one. (A sum below is a new array anyway.)"""
    root = backend.storage_root(grad.array)
    if backend.repeats_or_is_read_only(grad.array) or _overlaps(grad.array, handed.get(root)):
        grad = grad.clone()
        root = backend.storage_root(grad.array)
    handed.setdefault(root, []).append(grad.array)
    return grad


def _overlaps(array: Any, others: list | None) -> bool:
    """Whether `array` reaches a byte that one of `others` (arrays of its memory) reaches."""
    if not others:  # the common case: the first gradient in this memory, no extent needed
        return False
    low, high = backend.memory_extent(array)
    return any(low < end and start < high for start, end in map(backend.memory_extent, others))


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
    retain = create_graph if retain_graph is None else retain_graph
    captured = run_backward(outputs, seeds, retain, create_graph, capture=inputs)
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


def default_root_grad(output: Any, given: Any, caller: str) -> Any:
    """The seed gradient of a root: ones for a one-element output, else it must be given."""
    if not output.requires_grad:
        raise RuntimeError(
            f"{caller}: the tensor (shape {output.shape}) does not require grad and has no graph; "
            "did you create it under no_grad, detach it, or forget requires_grad=True?"
        )
    if given is None:
        if output.numel() != 1:
            raise RuntimeError(
                f"{caller}: the output has shape {output.shape}; backward without a gradient is "
                "only defined for a single-element output. Reduce it (e.g. .sum()) or pass a "
                "gradient of the same shape."
            )
        return output._ones_like_constant()
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
    return given


def _as_sequence(value: Any) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]
