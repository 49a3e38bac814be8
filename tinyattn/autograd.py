"""Autograd layer: the Function base class, grad mode, and the backward engine.

Imports `backend` and the modules split from it below this one: `grad_mode` (grad and anomaly
mode), `hooks` (RemovableHandle, retain_grad's mark) and `torch_protocol` (PyTorch's
custom-Function protocol); nothing array-specific: the engine moves Tensors, not arrays.
The graph is made of Tensors: a Tensor produced by an op holds that op's Function in ``_ctx``,
and the Function holds its input Tensors. Nothing points back from a Function to its outputs
(a node with several keeps weak references only), so a graph has no reference cycles and is
freed as soon as the last Tensor of it goes out of scope.

The engine walks that graph iteratively (no recursion limit) from the newest node to the oldest:
every Function gets a creation number when it is recorded, and a tensor is always made after
its inputs, so popping the largest number first (a heap) runs each backward rule once, after all
of its outputs' consumers, with the summed gradients; leaves accumulate at the end. Backward
rules are written with Tensor operations: under ``create_graph=True`` they record a graph of
their own (higher-order gradients); otherwise they run with grad mode off, and the built-in ones
make their ops' array calls directly (`rules_on_arrays`). Grad mode and anomaly mode (per thread)
live in `grad_mode`, below this module; its public names are importable from here too.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from . import backend, grad_mode, hooks, torch_protocol
from .errors import TinyattnError, freed_graph_message, modified_in_place_message
from .grad_mode import (
    AnomalyError,
    _check_backward,
    _check_forward,
    _modes,
    _run_rule,
    detect_anomaly,
    enable_grad,
    is_anomaly_enabled,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from .hooks import RETAIN_GRAD, RemovableHandle, _check_hook_result
from .saved_values import (  # KEPT_CONSTANT_SIZE: re-exported
    KEPT_CONSTANT_SIZE,  # noqa: F401
    ReleasedConstant,
    check_versions,
    skeleton_of,
    versions_read,
)

# --------------------------------------------------------------------------------------- Function
_READS = frozenset({"inputs", "output"})


class Function(torch_protocol.ContextMethods):
    """Base class of every differentiable operation, built-in or user-defined.

    Subclasses implement ``forward(self, *arrays, **kwargs) -> array`` on raw arrays and
    ``backward(self, grad) -> Tensor | tuple`` with Tensor operations (one gradient per input,
    ``None`` for inputs that need none). Inside backward, ``self.inputs`` are the input Tensors,
    ``self.output`` is the output Tensor (None for a rule whose ``backward_reads`` leaves it
    out), and ``self.saved_tensors`` what forward saved.
    Apply with ``MyOp.apply(*tensors, **kwargs)``: the keyword arguments (constants such as a
    scale or an axis) go to ``forward``, which keeps what backward needs on ``self``. apply
    creates the instance without calling ``__init__``, so defining ``__init__`` is an error.

    Several outputs: a forward that returns a tuple of arrays makes apply return a tuple of
    Tensors, and backward is called once, after every output in the graph has its gradient,
    as ``backward(self, grad_0, grad_1, ...)``: one gradient per output, a zero tensor for an
    output no gradient reached. ``self.output`` is then the tuple of outputs (None for one
    already freed). An output with an integer or bool dtype gets no gradient and no history.

    PyTorch's protocol (a staticmethod ``forward(ctx, ...)`` on Tensors) is the same node seen
    through another door; `torch_protocol` describes it.

    Class attributes a subclass may set:

    - ``backward_reads``: which values backward reads, ``("inputs", "output")`` by default.
      Their versions are recorded with the node and checked before backward runs, so a tensor
      changed in place in between is an error, not a wrong gradient. An op whose backward uses
      only shapes (Add, Sum, Reshape) declares ``()``; Exp, which reads its output, ``("output",)``.
    - ``grad_reads``: finer than backward_reads, for each input the values its gradient reads
      (input positions, and "output"): MatMul's ``((1,), (0,))``, as dL/da needs b and dL/db
      needs a. Then only the values some needed gradient reads are version-checked, and an
      input that needs no gradient and that no rule reads is not kept (`ReleasedConstant`).
    - ``shares_storage``: True for ops whose result may be a view of input 0 (reshape, permute,
      basic indexing): when it is one, the result shares that input's version counter.

    After a backward without ``retain_graph`` the node is released: ``inputs`` and the saved
    values are dropped (that frees the memory), and ``released_inputs`` keeps a skeleton for
    drawing the graph: for each former input, the Function that produced it (whose own
    ``released_inputs`` continue the chain), else the input Tensor itself if a gradient reaches
    it or it is small, else a `ReleasedConstant` (shape and dtype, not the values). The
    skeleton points only from newer nodes to older ones, so it makes no reference cycle.
    """

    # Built-in ops add their own __slots__; a user subclass without __slots__ gets a __dict__.
    # `inputs` is None once the node is released (after a backward without retain_graph).
    # `_seq` is the creation number the engine orders by (set when the node is recorded);
    # `_versions` the (position, version) pairs backward will check, or None (position >= 0:
    # an input; -1 - k: output k). `_outputs` is None for one output, else an `_Outputs`.
    __slots__ = (
        "inputs",
        "output",
        "_released_inputs",
        "_saved",
        "_saved_versions",
        "_versions",
        "_trace",
        "_seq",
        "_outputs",
    )
    backward_reads: tuple[str, ...] = ("inputs", "output")
    grad_reads: tuple[tuple, ...] | None = None
    shares_storage: bool = False
    _reads_inputs = _reads_output = True  # backward_reads as two flags, set per subclass
    _all_reads: tuple | None = None  # grad_reads' union, for the common case (set per subclass)
    _ctx_protocol = False  # PyTorch's protocol: forward is a staticmethod taking ctx
    _checks_versions = True  # backward_reads or grad_reads name a value (set per subclass)
    _plain = False  # neither shares_storage nor _checks_versions: apply's short path
    _saves = False  # set on the class by save_for_backward: some node of it saved values

    def reads_host(self) -> bool:
        """Whether the last forward read values back to the host (an index range check): on a
        GPU that waits for the device, which a CUDA graph cannot hold (ta.compile keeps such an
        op out of its graphs)."""
        return False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in vars(cls):
            raise TypeError(
                f"{cls.__name__} defines __init__, but apply() creates a Function without "
                f"calling __init__. Pass constants as keyword arguments instead: "
                f"{cls.__name__}.apply(x, scale=2.0) calls forward(self, x, scale=2.0), and "
                "forward keeps what backward needs on self (self.scale = scale)."
            )
        reads = cls.backward_reads
        if not isinstance(reads, tuple) or not _READS.issuperset(reads):
            raise TypeError(
                f"{cls.__name__}.backward_reads must be a tuple of 'inputs' and 'output', "
                f"got {reads!r}"
            )
        cls._reads_inputs, cls._reads_output = "inputs" in reads, "output" in reads
        torch_protocol.check_grad_reads(cls)
        if cls.grad_reads is not None:  # what the rule reads when every input needs a gradient
            union = set().union(*cls.grad_reads)
            cls._all_reads = (sorted(p for p in union if p != "output"), "output" in union)
            cls._reads_by_need = {}  # the same for each pattern of inputs needing a gradient
        cls._checks_versions = bool(cls.backward_reads) or cls.grad_reads is not None
        cls._plain = not cls.shares_storage and not cls._checks_versions
        if torch_protocol.is_ctx_protocol(cls):
            torch_protocol.adopt(cls)
            if "apply" not in vars(cls):  # PyTorch's door: apply runs the static forward
                cls.apply = classmethod(_apply_ctx)

    def forward(self, *arrays: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement forward")

    def backward(self, grad: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement backward")

    @classmethod
    def apply(cls, *inputs: Any, **kwargs: Any) -> Any:
        """Run forward on the inputs' arrays and, if grad mode is on, record the node."""
        fn = cls.__new__(cls)
        fn.inputs = inputs
        if _recorder is not None:  # ta.compile is recording a step: it runs and notes forward
            data = _recorder.forward(fn, inputs, kwargs)
        elif len(inputs) == 1:  # the common unary case, without building an argument list
            data = fn.forward(inputs[0].array, **kwargs)
        else:
            data = fn.forward(*[t.array for t in inputs], **kwargs)
        if grad_mode._anomaly_threads and _modes.anomaly:
            _check_forward(fn, data)
        recorded = False
        if grad_mode._grad_off_threads == 0 or _modes.grad_enabled:
            for t in inputs:
                if t.requires_grad:
                    recorded = True
                view = t._view
                if view is not None and view[1] != t._version_counter[0]:
                    view_refresher(t)  # its base was written in place since: history again
        if type(data) is tuple:
            return _record_outputs(fn, data, recorded)
        out = _wrap(data, fn if recorded else None)
        if not cls._plain:
            return _view_or_versions(fn, out, recorded)
        if recorded:  # a node that makes no view and whose rule reads only shapes (common)
            fn._seq = _next_seq()
            fn._outputs = fn._versions = fn.output = None
        return out

    def save_for_backward(self, *values: Any) -> None:
        """Keep values (Tensors, or arrays that become constant Tensors) for the backward rule."""
        self._saved = values
        if not self._saves:
            type(self)._saves = True
        self._saved_versions = tuple(
            v._version_counter[0] if hasattr(v, "_version_counter") else None for v in values
        )

    @property
    def saved_tensors(self) -> tuple:
        saved = self._unchanged_saved()
        anchor = self.inputs[0]
        return tuple(v if v is None or hasattr(v, "_ctx") else anchor.constant(v) for v in saved)

    @property
    def saved_arrays(self) -> tuple:
        """The saved values as arrays, checked as `saved_tensors` checks them: for a rule that
        computes on arrays (no graph being recorded)."""
        return tuple(v.array if hasattr(v, "_ctx") else v for v in self._unchanged_saved())

    def _unchanged_saved(self) -> tuple:
        """The saved values, after checking that no saved tensor was modified in place."""
        if self.inputs is None:
            raise RuntimeError(freed_graph_message(self.name))
        saved = getattr(self, "_saved", None) or ()
        versions = getattr(self, "_saved_versions", None) or ()
        for position, (value, version) in enumerate(zip(saved, versions)):
            if version is not None and value._version_counter[0] != version:
                what = f"saved tensor {position}"
                current = value._version_counter[0]
                raise RuntimeError(
                    modified_in_place_message(self.name, what, value.shape, current, version)
                )
        return saved

    @property
    def needs_input_grad(self) -> tuple[bool, ...]:
        """Whether each input needs a gradient (in PyTorch's protocol: each forward argument,
        False for one that is not a Tensor)."""
        places = getattr(self, "_arg_places", None)
        if places is not None:
            return tuple(p is not None and self.inputs[p].requires_grad for p in places)
        return tuple(t.requires_grad for t in self.inputs)

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def released_inputs(self) -> tuple | None:
        """After release: each former input (a leaf Tensor) or its producing Function; else None."""
        return getattr(self, "_released_inputs", None)

    def release(self, entirely: bool = False) -> None:
        """Drop what backward needed, keeping the skeleton; a second backward then raises.

        A node with nothing to drop keeps its inputs instead (unless `entirely`): its rule reads
        no values (a reshape, a slice, a sum) and a later walk can get past each input, so a
        second backward runs through it, as PyTorch's runs through nodes that saved nothing
        (``x[0:3].sum().backward()`` twice). See `walkable_again`."""
        inputs = self.inputs
        if not entirely and inputs is not None and walkable_again(self, inputs):
            return
        if inputs is not None:
            if len(inputs) == 1:  # the common unary case, and its input's producer, without calls
                producer = inputs[0]._ctx
                self._released_inputs = (skeleton_of(inputs[0]) if producer is None else producer,)
            else:
                self._released_inputs = tuple([skeleton_of(t) for t in inputs])
        self._saved = self.inputs = None


def walkable_again(fn: Function, inputs: tuple) -> bool:
    """Whether backward leaves `fn` whole: its rule reads no values (no versions noted, nothing
    saved), and each input is a leaf or comes from a node alike, not released. The inputs'
    producers are looked at, not further: a node over one that saved values is released, so
    the values it would keep (its inputs) are freed, and a second backward stops there."""
    if not _saved_nothing(fn):
        return False
    for tensor in inputs:
        producer = tensor._ctx
        if producer is not None and (producer.inputs is None or not _saved_nothing(producer)):
            return False
    return True


def _saved_nothing(fn: Function) -> bool:
    """Whether fn's rule reads no values: none noted for a version check, none saved. The class
    flag comes first: reading a slot never set costs an exception inside getattr."""
    return fn._versions is None and (not fn._saves or not getattr(fn, "_saved", None))


class _Outputs:
    """What a node with several outputs knows of them, without keeping them alive: weak
    references (the engine finds an output's position by identity), their version counters
    (plain lists), and their shapes and dtypes (for the zero gradient of an unused output)."""

    __slots__ = ("refs", "counters", "shapes", "dtypes")

    def __init__(self, outputs: tuple) -> None:
        self.refs = tuple([weakref.ref(t) for t in outputs])
        self.counters = tuple([t._version_counter for t in outputs])
        self.shapes = tuple([t.array.shape for t in outputs])
        self.dtypes = tuple([t.array.dtype for t in outputs])

    def stand_in(self, tensor: Any, handle: Any) -> None:
        """`handle` is output k from now on: an in-place op moved `tensor`'s history on."""
        k = self.position(tensor)
        self.refs = self.refs[:k] + (weakref.ref(handle),) + self.refs[k + 1 :]

    def position(self, tensor: Any) -> int:
        for k, ref in enumerate(self.refs):
            if ref() is tensor:
                return k
        raise RuntimeError("a tensor names a node with several outputs but is none of them")


def _view_or_versions(fn: Function, out: Any, recorded: bool) -> Any:
    """The rest of `Function.apply` for an op that may make a view or whose rule reads values."""
    source = fn.inputs[0]
    if type(fn).shares_storage and backend.is_view_of(out.array, source.array):
        # A view: an in-place change through either bumps both (a copy keeps its own).
        out._version_counter = counter = source._version_counter
        base = source if source._view is None else source._view[0]
        out._view = (base, counter[0])  # a write through it reaches the base's history
    if recorded:
        fn._seq = _next_seq()
        fn._outputs = fn.output = None
        fn._versions = versions_read(fn, (out._version_counter,))
    return out


def _record_outputs(fn: Function, data: tuple, recorded: bool, like: tuple = ()) -> tuple:
    """The Tensors of a forward that returned several arrays; if recorded, the node behind them.
    Integer and bool outputs are constants: no gradient flows through an index. `like`: the
    Tensors a forward in PyTorch's protocol returned, whose version counters the outputs share."""
    inputs = fn.inputs
    constant = torch_protocol.constant_outputs(fn, like) if like else set()
    outputs = []
    for k, array in enumerate(data):
        if not like:
            floating = backend.is_floating(backend.namespace(array), array.dtype)
        differentiable = recorded and (k not in constant if like else floating)
        out = inputs[0]._from_op(array, fn if differentiable else None)
        if like:
            out._version_counter = like[k]._version_counter
        elif type(fn).shares_storage and backend.is_view_of(array, inputs[0].array):
            out._version_counter = counter = inputs[0]._version_counter  # a view, as in `apply`
            base = inputs[0] if inputs[0]._view is None else inputs[0]._view[0]
            out._view = (base, counter[0])
        outputs.append(out)
    outputs = tuple(outputs)
    if recorded:
        fn._seq = _next_seq()
        fn._outputs = _Outputs(outputs)
        fn._versions = versions_read(fn, fn._outputs.counters)
    return outputs


def _apply_ctx(cls: type, *args: Any, **kwargs: Any) -> Any:
    """`Function.apply` of a class written in PyTorch's protocol (`torch_protocol`)."""
    return _apply_ctx_protocol(cls.__new__(cls), args, kwargs)


def _apply_ctx_protocol(fn: Function, args: tuple, kwargs: dict) -> Any:
    """``apply`` in PyTorch's protocol (see `torch_protocol`): forward runs on Tensors, then
    the same node as the teaching protocol's records its Tensor arguments as inputs."""
    results, several = torch_protocol.run_forward(fn, args, kwargs)
    if not fn.inputs:
        return results if several else results[0]
    recorded = _modes.grad_enabled and any(t.requires_grad for t in fn.inputs)
    outputs = _record_outputs(fn, tuple([r.array for r in results]), recorded, like=results)
    return outputs if several else outputs[0]


# ----------------------------------------------------------------------------------------- engine
# Creation numbers of recorded Functions: a node's is larger than those of the nodes before it.
_next_seq = itertools.count().__next__


def _wrap(data: Any, ctx: Any) -> Any:
    """Tensor._from_op, installed by the tensor layer: a module function, so apply's call is
    the interpreter's fast one, not a staticmethod looked up on the input."""
    raise RuntimeError("the tensor layer is not loaded")


# Installed by the tensor layer (methods/inplace_graph.py): before an op reads a view whose base
# was written in place since, gives it the base's new history.
view_refresher: Callable[[Any], None] = lambda tensor: None  # noqa: E731


def run_backward(
    roots: Sequence[Any],
    root_grads: Sequence[Any],
    retain_graph: bool,
    create_graph: bool,
    capture: Sequence[Any] | None = None,
    observer: Any = None,
) -> dict[int, Any]:
    """Propagate `root_grads` from `roots` back through the graph, newest node first.

    With ``capture=None`` leaf gradients accumulate into ``.grad``; otherwise the gradients of the
    tensors in `capture` are returned by ``id`` and no ``.grad`` is touched (``tinyattn.grad``).
    An `observer` (``viz.animate_backward`` passes one) is told the walk, in its order:
    ``observer.rule_runs(tensor, grad)`` before each rule, with the complete gradient the rule
    gets, and ``observer.gradient_sent(fn, position, grad)`` for each gradient it sends.
    """
    pending, leaves, ready = _seeded(roots, root_grads)
    early = hooks.early_leaves(roots) if capture is None else None  # post-accumulate hooks
    handed: dict[int, list] = {}  # memory root -> the gradients in it handed to leaves so far
    wanted = None if capture is None else set(capture)
    captured: dict[int, Any] = {}
    watched = wanted is not None or observer is not None  # every gradient to `_received`
    release = not retain_graph and _recorder is None  # a recording replays rules later
    with set_grad_enabled(create_graph):  # rules record a graph only for higher order
        while ready:
            # The newest tensor waiting: its consumers are all newer, so its gradient is complete.
            entry = heapq.heappop(ready)
            if early:  # leaves every reader of which has run get their .grad now
                due = [leaf for leaf in early.due(-entry[0]) if leaf in leaves]
                _deliver({leaf: leaves.pop(leaf) for leaf in due}, wanted, captured, handed)
            tensor = entry[-1]
            grad = pending.pop(tensor)
            if watched or tensor._hooks:
                grad = _received(tensor, grad, wanted, captured, observer)
            fn = tensor._ctx
            if fn._outputs is not None:  # every output of fn waiting now has its complete gradient
                tensor, grad = _gather(fn, entry, grad, ready, pending, wanted, captured, observer)
            inputs = fn.inputs
            if fn._versions is None and _recorder is None and inputs is not None:
                input_grads = _run_lent(fn, inputs, tensor, grad)  # nothing to check (common)
            else:
                input_grads = _call_backward(fn, tensor, grad)
            for position, parent in enumerate(inputs):
                if parent._rebased is not None:  # written in place after fn read it
                    parent = _as_of(parent, fn._seq)
                parent_grad = input_grads[position]
                if parent_grad is not None and parent.requires_grad:
                    array = parent_grad.array if hasattr(parent_grad, "_ctx") else None
                    like = parent.array
                    if (  # a Tensor of the input's shape and dtype passes on unchecked (common)
                        array is None
                        or array.shape != like.shape
                        or array.dtype is not like.dtype
                        or grad_mode._anomaly_threads
                    ):
                        parent_grad = _checked(fn, position, parent, parent_grad)
                    producer = parent._ctx
                    if producer is None or producer._outputs is not None or parent in pending:
                        _send(parent, parent_grad, pending, leaves, ready)
                    else:  # `_send`'s common case: a one-output node's first gradient
                        pending[parent] = parent_grad
                        heapq.heappush(ready, (-producer._seq, parent))
                    if observer is not None:
                        observer.gradient_sent(fn, position, parent_grad)
            if release:
                fn.release()
        _deliver(leaves, wanted, captured, handed)
    return captured


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
    return _wrap(total.array + grad.array, None) if rules_on_arrays() else total + grad


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


def _received(tensor: Any, grad: Any, wanted: set | None, captured: dict, observer: Any) -> Any:
    """`tensor`'s complete gradient after its hooks, kept where retain_grad or grad() asks."""
    if tensor._hooks:
        grad = _run_hooks(tensor, grad)
        if RETAIN_GRAD in tensor._hooks:  # after every hook, as in PyTorch
            tensor.grad = grad.clone() if tensor._grad is None else tensor._grad + grad
    if wanted is not None and tensor in wanted:
        captured[id(tensor)] = grad
    if observer is not None:
        observer.rule_runs(tensor, grad)
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
    inputs = fn.inputs
    if _recorder is not None:
        return _recorder.rule(fn, grad, output, lambda: _run_lent(fn, inputs, output, grad))
    return _run_lent(fn, inputs, output, grad)


def _run_lent(fn: Function, inputs: tuple, output: Any, grad: Any) -> tuple:
    """Run fn's rule on `grad` (a list, one per output, for a node with several outputs)."""
    if fn._reads_output or type(grad) is list or grad_mode._anomaly_threads:
        grads = _run_with_output(fn, output, grad)
    else:  # a rule that reads no output (`backward_reads`) is lent none (common)
        grads = fn.backward(grad)
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
        anomaly = grad_mode._anomaly_threads and _modes.anomaly
        if type(grad) is list:  # several outputs (`_gather`): one gradient each
            return fn.backward(*grad) if not anomaly else _run_rule(fn, *grad)
        return fn.backward(grad) if not anomaly else _run_rule(fn, grad)
    finally:
        fn.output = None


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
        grad = _wrap(grad, None)
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
    if grad_mode._anomaly_threads and _modes.anomaly:
        _check_backward(fn, position, grad)
    return grad


def _deliver(leaves: dict, wanted: set | None, captured: dict, handed: dict) -> None:
    """Hand the leaves their summed gradients: into ``.grad``, or into `captured` for grad().
    `handed`: memory root -> the gradients in it handed to leaves so far in this backward."""
    for leaf, grad in leaves.items():
        if leaf._hooks:
            grad = _run_hooks(leaf, grad)
        if wanted is not None and leaf in wanted:
            captured[id(leaf)] = grad
        elif wanted is None:
            if leaf.grad is not None and _recorder is not None:
                _recorder.read_grad(leaf, leaf.grad)  # a gradient from before: the tape's input
            if leaf.grad is None:
                grad = _own_memory(grad, handed)
            leaf.grad = grad if leaf.grad is None else leaf.grad + grad
            if _recorder is not None:
                _recorder.set_grad(leaf, leaf.grad)
            if leaf._hooks:
                hooks.run_post_accumulate(leaf)


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
        result = hook(grad) if _recorder is None else _recorder.hook(hook, grad)
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


# ------------------------------------------------------------------------- recording a step
# `ta.compile` (tinyattn/compiler.py) records a step by installing a Recorder for its thread:
# Function.apply, the engine and the replayed calls below report to it. `_recorder` is the one
# test per op: None while no thread records, else `_ThisThread`, which hands each report to the
# reporting thread's recorder, or does the plain thing on a thread that records nothing (work
# another thread does meanwhile is its own, not the step's).
_recording: dict[int, Any] = {}  # thread id -> its Recorder
_recording_lock = threading.Lock()  # two threads starting or ending recordings at once
_recorder: Any = None


def _report(name: str, plain: Callable | None = None) -> Any:
    """One of `_ThisThread`'s reports: to the calling thread's recorder's method `name`, or, on a
    thread that records nothing, `plain` (the plain thing to do; None: nothing)."""

    def report(*args: Any) -> Any:
        recorder = _recording.get(threading.get_ident())
        if recorder is not None:
            return getattr(recorder, name)(*args)
        return None if plain is None else plain(*args)

    return staticmethod(report)


class _ThisThread:
    """Hands a report to the current thread's recorder, or runs it plainly when it has none."""

    forward = _report(
        "forward", lambda fn, inputs, kwargs: fn.forward(*[t.array for t in inputs], **kwargs)
    )
    rule = _report("rule", lambda fn, grad, output, run: run())
    call = _report("call", lambda function, args, kwargs: function(*args, **kwargs))
    hook = _report("hook", lambda hook, grad: hook(grad))
    set_grad, read_grad = _report("set_grad"), _report("read_grad")
    created, grad_set, draw = _report("created"), _report("grad_set"), _report("draw")
    store, host_read = _report("store"), _report("host_read")
    python_write, module_hooks = _report("python_write"), _report("module_hooks")
    mode = _report("mode")


def set_recorder(recorder: Any) -> Any:
    """Install `recorder` (or None) for the calling thread; returns the one it replaces."""
    global _recorder
    ident = threading.get_ident()
    with _recording_lock:
        previous = _recording.pop(ident, None)
        if recorder is not None:
            _recording[ident] = recorder
        _recorder = _ThisThread if _recording else None
        backend.draw_hook = _ThisThread.draw if _recording else None
    return previous


def active_recorder() -> Any:
    """The calling thread's recorder, or None."""
    return _recording.get(threading.get_ident())


def replayed_call(function: Callable) -> Callable:
    """Mark a function whose Python must run on every replay of a compiled step (an optimizer's
    step, gradient clipping, a scheduler): while recording it runs as one recorded call."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _recorder is None:
            return function(*args, **kwargs)
        # A generator (model.parameters()) would be empty on replay: keep its items.
        args = tuple(list(a) if isinstance(a, Iterator) else a for a in args)
        return _recorder.call(function, args, kwargs)

    return wrapper


def note_store(target: Any, source: Any, op: str = "in-place write") -> None:
    """Called by in-place writes (``x[...] = v``, ``x.add_(y)``): a recording notes the write, so
    that a replay writes again, into the same array, at the same point of the step."""
    if _recorder is not None:
        _recorder.store(target, source, op)


def note_created(array: Any) -> None:
    """Called by the factories (``zeros``, ``tensor(data)``, ...): a recording tells an array the
    step made from Python values from one that existed before the call."""
    if _recorder is not None:
        _recorder.created(array)


def note_grad_set(tensor: Any) -> None:
    """Called when a tensor's ``.grad`` is assigned: a recording tells a gradient held from
    before the call (an input of the tape) from one the step made (``zero_grad``)."""
    if _recorder is not None:
        _recorder.grad_set(tensor)


def note_mode(owner: Any, name: str) -> None:
    """Called by ``nn.Module.__call__``: the ops a recording sees depend on ``owner.<name>`` (a
    module's ``_replay_key``: its mode and what it holds), so a compiled step keys its tapes on
    that value and records again when it changes (``model.eval()``) instead of replaying."""
    if _recorder is not None:
        _recorder.mode(owner, name)


def rules_on_arrays() -> bool:
    """Whether a built-in rule may make its Tensor ops' array calls itself (the same bits):
    grad mode is off and no thread records a step for ``ta.compile`` (whose replay runs each
    recorded op as an ``out=`` call)."""
    return _recorder is None and grad_mode._grad_off_threads != 0 and not _modes.grad_enabled


def constants(*arrays: Any) -> tuple:
    """A rule's gradients made on arrays, as constant Tensors (None stays None)."""
    if len(arrays) == 1:  # a unary rule's (the common case), without a loop
        return (None if arrays[0] is None else _wrap(arrays[0], None),)
    return tuple([None if a is None else _wrap(a, None) for a in arrays])


def check_host_read(what: str) -> None:
    """Called where a tensor's value reaches Python (item, bool, numpy): refused in a recording."""
    if _recorder is not None:
        _recorder.host_read(what)


def check_python_write(what: str) -> None:
    """Called where the step sets Python state that replayed calls read (an optimizer's
    learning rate): refused in a recording, outside the calls a replay runs as Python."""
    if _recorder is not None:
        _recorder.python_write(what)


__all__ = [
    "AnomalyError",
    "Function",
    "ReleasedConstant",
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
