"""Autograd layer: the Function base class, grad mode, and the backward engine.

Imports only `backend` (and nothing array-specific: the engine moves Tensors, not arrays).
The graph is made of Tensors: a Tensor produced by an op holds that op's Function in ``_ctx``,
and the Function holds its input Tensors. Nothing points back from a Function to its output, so
a graph has no reference cycles and is freed as soon as the last Tensor of it goes out of scope.

The engine walks that graph iteratively (no recursion limit) from the newest node to the oldest:
every Function gets a creation number when it is recorded, and a tensor is always made after
its inputs, so popping the largest number first (a heap) runs each backward rule once, after all
of its output's consumers, with the summed gradient; leaves accumulate at the end. Backward
rules are written with Tensor operations: under ``create_graph=True`` they record a graph of
their own (higher-order gradients); otherwise they run with grad mode off and record nothing.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from . import backend

# The global state: whether ops record a graph, and whether anomaly mode checks every result.
_grad_enabled = True
_anomaly_mode = False
_in_rule = False  # set by the engine while a backward rule runs in anomaly mode


def is_grad_enabled() -> bool:
    return _grad_enabled


@contextlib.contextmanager
def set_grad_enabled(mode: bool) -> Iterator[None]:
    """Context manager that turns graph recording on or off, restoring the old mode on exit."""
    global _grad_enabled
    previous, _grad_enabled = _grad_enabled, bool(mode)
    try:
        yield
    finally:
        _grad_enabled = previous


class no_grad(contextlib.ContextDecorator):  # noqa: N801  (named like the PyTorch context manager)
    """``with ta.no_grad():`` (or ``@ta.no_grad()``): ops inside record no graph."""

    def __enter__(self) -> None:
        global _grad_enabled
        self._previous, _grad_enabled = _grad_enabled, False

    def __exit__(self, *exc: object) -> None:
        global _grad_enabled
        _grad_enabled = self._previous


class enable_grad(no_grad):  # noqa: N801
    """Turn recording back on inside a ``no_grad`` block."""

    def __enter__(self) -> None:
        global _grad_enabled
        self._previous, _grad_enabled = _grad_enabled, True


class AnomalyError(RuntimeError):
    """A NaN or Inf appeared in a forward or backward result while anomaly mode was on."""


class detect_anomaly(contextlib.ContextDecorator):  # noqa: N801
    """``with ta.detect_anomaly():`` check every forward and backward result for NaN/Inf.

    The first non-finite value raises AnomalyError naming the op (for backward: the op whose
    rule produced it) and the line of user code that created that op in forward. In forward,
    a NaN or Inf that an op only carries from its inputs (the -inf of a masked attention score)
    is not reported: the op that introduced it is. Off by default; when off it costs one flag
    test per op.
    """

    def __enter__(self) -> None:
        global _anomaly_mode
        self._previous, _anomaly_mode = _anomaly_mode, True

    def __exit__(self, *exc: object) -> None:
        global _anomaly_mode
        _anomaly_mode = self._previous


def is_anomaly_enabled() -> bool:
    return _anomaly_mode


def _user_frame() -> str:
    """Where user code called into tinyattn: the innermost frame outside the package."""
    package = os.path.dirname(__file__)
    import traceback  # noqa: PLC0415  (anomaly mode only)

    for frame in reversed(traceback.extract_stack()[:-1]):
        if not frame.filename.startswith(package):
            return f'File "{frame.filename}", line {frame.lineno}, in {frame.name}: {frame.line}'
    return "(inside tinyattn)"


def _nonfinite(array: Any) -> str | None:
    """'NaN' or 'Inf' if the array has one, else None (a device sync: anomaly mode only)."""
    if not backend.is_floating(backend.namespace(array), array.dtype):
        return None
    xp = backend.namespace(array)
    if bool(xp.any(xp.isnan(array))):
        return "NaN"
    if bool(xp.any(xp.isinf(array))):
        return "Inf"
    return None


def _has(array: Any, test: str) -> bool:
    xp = backend.namespace(array)
    return backend.is_floating(xp, array.dtype) and bool(xp.any(getattr(xp, test)(array)))


def _introduced(fn: Function, data: Any) -> str | None:
    """'NaN' or 'Inf' if the output has one and none of the inputs had that kind, else None.

    An op that only carries a value it was given did not produce it: attention fills masked
    scores with -inf on purpose, and log_softmax of a fully masked row is -inf.
    """
    for kind, test in (("NaN", "isnan"), ("Inf", "isinf")):
        if _has(data, test) and not any(_has(t.data, test) for t in fn.inputs):
            return kind
    return None


def _check_forward(fn: Function, data: Any) -> None:
    if _in_rule:
        return  # ops run by a backward rule are checked as that rule's result, by the engine
    fn._trace = _user_frame()
    bad = _introduced(fn, data)
    if bad is not None:
        raise AnomalyError(
            f"{fn.name} forward produced {bad} (output shape {tuple(data.shape)}), "
            f"created at {fn._trace}"
        )


def _check_backward(fn: Function, position: int, grad: Any) -> None:
    bad = _nonfinite(grad.data)
    if bad is not None:
        where = getattr(fn, "_trace", None) or "(created before anomaly mode was on)"
        raise AnomalyError(
            f"{fn.name} backward produced {bad} in the gradient of input {position} "
            f"(shape {grad.shape}); the {fn.name} op was created at {where}"
        )


# --------------------------------------------------------------------------------------- Function
class Function:
    """Base class of every differentiable operation, built-in or user-defined.

    Subclasses implement ``forward(self, *arrays, **kwargs) -> array`` on raw arrays and
    ``backward(self, grad) -> Tensor | tuple`` with Tensor operations (one gradient per input,
    ``None`` for inputs that need none). Inside backward, ``self.inputs`` are the input Tensors,
    ``self.output`` is the output Tensor, and ``self.saved_tensors`` what forward saved.
    Apply with ``MyOp.apply(*tensors, **kwargs)``.
    """

    # Built-in ops add their own __slots__; a user subclass without __slots__ gets a __dict__.
    # `inputs` is None once the node is released (after a backward without retain_graph).
    # `_seq` is the creation number the engine orders by (set when the node is recorded).
    __slots__ = ("inputs", "output", "_saved", "_trace", "_seq", "released_inputs")

    def forward(self, *arrays: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement forward")

    def backward(self, grad: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement backward")

    @classmethod
    def apply(cls, *inputs: Any, **kwargs: Any) -> Any:
        """Run forward on the inputs' arrays and, if grad mode is on, record the node."""
        fn = cls.__new__(cls)
        fn.inputs = inputs
        if len(inputs) == 1:  # the common unary case, without building an argument list
            data = fn.forward(inputs[0].data, **kwargs)
        else:
            data = fn.forward(*[t.data for t in inputs], **kwargs)
        if _anomaly_mode:
            _check_forward(fn, data)
        if _grad_enabled:
            for t in inputs:
                if t.requires_grad:
                    fn._seq = _next_seq()
                    return inputs[0]._from_op(data, fn)
        return inputs[0]._from_op(data, None)

    def save_for_backward(self, *values: Any) -> None:
        """Keep values (Tensors, or arrays that become constant Tensors) for the backward rule."""
        self._saved = values

    @property
    def saved_tensors(self) -> tuple:
        if self.inputs is None:
            raise RuntimeError(_freed_message(self))
        anchor = self.inputs[0]
        return tuple(
            v if v is None or hasattr(v, "_ctx") else anchor.constant(v)
            for v in getattr(self, "_saved", None) or ()
        )

    @property
    def needs_input_grad(self) -> tuple[bool, ...]:
        return tuple(t.requires_grad for t in self.inputs)

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def released(self) -> bool:
        return self.inputs is None

    def release(self) -> None:
        """Drop what backward needed; a second backward through this node then raises.

        ``released_inputs`` keeps the graph's shape for pictures: each former input if it is a
        leaf, else the Function that produced it (no array of an intermediate stays alive).
        """
        self._saved = None
        if self.inputs is not None:
            self.released_inputs = tuple(t if t._ctx is None else t._ctx for t in self.inputs)
        self.inputs = None


def _freed_message(fn: Function) -> str:
    return (
        f"{fn.name}: trying to backward through the graph a second time (or to use its saved "
        "values after they were freed). Pass retain_graph=True to the first backward() or grad() "
        "call if you need to backward through the graph again."
    )


# ----------------------------------------------------------------------------------------- engine
# Creation numbers of recorded Functions. A Function is recorded after its inputs were made, so
# every node's number is larger than the numbers of the nodes it was computed from.
_next_seq = itertools.count().__next__


def _checked(fn: Function, position: int, parent: Any, grad: Any) -> Any:
    """Wrap arrays, check the shape (a wrong broadcast sum is caught here), match the dtype."""
    if not hasattr(grad, "_ctx"):
        grad = parent.constant(grad)
    if grad.data.shape != parent.data.shape:
        raise RuntimeError(
            f"{fn.name}.backward returned a gradient of shape {grad.shape} for input {position} "
            f"of shape {parent.shape}"
        )
    if grad.data.dtype != parent.data.dtype:
        grad = grad.to(parent.dtype)
    return grad


def _run_hooks(tensor: Any, grad: Any) -> Any:
    for hook in tensor._hooks or ():
        result = hook(grad)
        if result is not None:
            grad = result
    return grad


def _run_rule(fn: Function, grad: Any) -> Any:
    """Call the backward rule in anomaly mode: ops it runs are checked as its result."""
    global _in_rule
    previous, _in_rule = _in_rule, True
    try:
        return fn.backward(grad)
    finally:
        _in_rule = previous


def _as_gradient_tuple(fn: Function, grads: Any) -> tuple:
    """One gradient (or None) per input, from whatever a rule returned, or a clear error."""
    if type(grads) is not tuple:
        grads = tuple(grads) if isinstance(grads, list) else (grads,)
    if len(grads) != len(fn.inputs):
        raise RuntimeError(
            f"{fn.name}.backward returned {len(grads)} gradient(s) for {len(fn.inputs)} input(s)"
        )
    return grads


def run_backward(
    roots: Sequence[Any],
    root_grads: Sequence[Any],
    retain_graph: bool,
    create_graph: bool,
    capture: Sequence[Any] | None = None,
) -> dict[int, Any]:
    """Propagate `root_grads` from `roots` back through the graph.

    With ``capture=None`` leaf gradients accumulate into ``.grad``; otherwise the gradients of the
    tensors in `capture` are returned by ``id`` and no ``.grad`` is touched (``tinyattn.grad``).
    """
    pending: dict = {}  # non-leaf tensor -> its summed gradient so far
    leaves: dict = {}  # leaf tensor -> its summed gradient
    # Non-leaf tensors that have received a gradient, as (-creation number, tensor): the newest
    # pops first, and by then every consumer (all newer) has sent its part. Numbers are unique,
    # so two tensors are never compared.
    ready: list = []
    wanted = None if capture is None else set(capture)
    captured: dict[int, Any] = {}
    for root, grad in zip(roots, root_grads):
        if root._ctx is None:
            leaves[root] = grad if root not in leaves else leaves[root] + grad
        elif root in pending:
            pending[root] = pending[root] + grad
        else:
            pending[root] = grad
            heapq.heappush(ready, (-root._ctx._seq, root))
    tensor_class = root_grads[0].__class__ if root_grads else None  # what ops return
    with set_grad_enabled(create_graph):
        while ready:
            tensor = heapq.heappop(ready)[1]
            grad = pending.pop(tensor)
            if tensor._hooks:
                grad = _run_hooks(tensor, grad)
            if wanted is not None and tensor in wanted:
                captured[id(tensor)] = grad
            fn = tensor._ctx
            parents = fn.inputs
            if parents is None:
                raise RuntimeError(_freed_message(fn))
            fn.output = tensor  # lent to the rule for this call only: no lasting cycle
            try:
                input_grads = fn.backward(grad) if not _anomaly_mode else _run_rule(fn, grad)
            finally:
                fn.output = None
            if type(input_grads) is not tuple:
                if len(parents) == 1 and input_grads.__class__ is tensor_class:
                    input_grads = (input_grads,)  # a unary rule's one gradient, the common case
                else:
                    input_grads = _as_gradient_tuple(fn, input_grads)
            elif len(input_grads) != len(parents):
                input_grads = _as_gradient_tuple(fn, input_grads)
            for position, parent in enumerate(parents):
                parent_grad = input_grads[position]
                if parent_grad is None or not parent.requires_grad:
                    continue
                if (
                    parent_grad.__class__ is not tensor_class
                    or parent_grad.data.shape != parent.data.shape
                    or parent_grad.data.dtype != parent.data.dtype
                ):  # the rare case: wrap, check or cast (the common one costs three compares)
                    parent_grad = _checked(fn, position, parent, parent_grad)
                if _anomaly_mode:
                    _check_backward(fn, position, parent_grad)
                if parent._ctx is None:
                    previous = leaves.get(parent)
                    leaves[parent] = parent_grad if previous is None else previous + parent_grad
                elif parent in pending:
                    pending[parent] = pending[parent] + parent_grad
                else:
                    pending[parent] = parent_grad
                    heapq.heappush(ready, (-parent._ctx._seq, parent))
            if not retain_graph:
                fn.release()
        for leaf, grad in leaves.items():
            if leaf._hooks:
                grad = _run_hooks(leaf, grad)
            if wanted is not None:
                if leaf in wanted:
                    captured[id(leaf)] = grad
            elif leaf.grad is None:
                # Gradients may share arrays (Add passes one gradient to both inputs): tinyattn
                # never updates a .grad array in place, so sharing is safe and saves a copy.
                leaf.grad = grad
            else:
                leaf.grad = leaf.grad + grad
    return captured


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
    outputs = _as_sequence(outputs)
    inputs = _as_sequence(inputs)
    grad_outputs = _as_sequence(grad_outputs) if grad_outputs is not None else [None] * len(outputs)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"grad: got {len(grad_outputs)} grad_outputs for {len(outputs)} outputs")
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


class RemovableHandle:
    """Returned by ``register_hook``; ``handle.remove()`` unregisters the hook."""

    __slots__ = ("_hooks", "_hook")

    def __init__(self, hooks: list, hook: Callable) -> None:
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        with contextlib.suppress(ValueError):
            self._hooks.remove(self._hook)


__all__ = [
    "AnomalyError",
    "Function",
    "RemovableHandle",
    "detect_anomaly",
    "is_anomaly_enabled",
    "enable_grad",
    "grad",
    "is_grad_enabled",
    "no_grad",
    "run_backward",
    "set_grad_enabled",
]
