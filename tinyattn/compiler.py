"""The fast path for whole steps: ``ta.compile(step)`` records a step's array work, then replays it.

Imports `backend`, `autograd` and `tensor`. The reference path (Tensor ops building a graph, the
engine walking it) pays Python costs per op that small models feel: a Tensor object per result,
argument checks, graph nodes, the engine's bookkeeping. A training step does the same array work
every time its inputs have the same shapes, so it can be written down once and replayed:

- **Recording.** The first two calls with a new signature (the shapes, dtypes and devices of the
  tensor arguments, and the other arguments' values) run eagerly while a `Recorder` writes a
  tape: every op's ``forward`` on its arrays, every backward rule, every gradient stored on a
  leaf, every random draw made outside an op, and calls that must run as Python on every step
  (``optimizer.step``, gradient clipping, a scheduler's ``step``).
- **Checking.** The two tapes must agree: the same ops with the same arguments, and every array
  that no recorded op made (a parameter, a constant mask) either the same array in both calls or
  equal in value. An array that changes between calls without a recorded op making it was made
  by code the tape cannot see (raw array code, or a Python number read from a tensor), and
  replaying it would be silently wrong: that is a `CompileError` naming the op, never a replay.
  Reading a tensor's value into Python (``.item()``, ``bool(x)``, ``.numpy()``) inside the step
  is refused while recording for the same reason.
- **Replaying.** From the third call on, the tape runs on the new inputs' arrays: ``forward``
  functions are called directly with arrays from a list of slots, with no Tensor objects, no
  graph and no checks, then each backward rule, then the optimizer. Parameters and optimizer
  state change in place exactly as in eager mode; the returned tensors hold the new values.

What the tape cannot hold is refused when recording, not replayed: see `CompileError`. Python
side effects of the step other than the calls listed above (printing, appending to a list) run
only while recording.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

from . import autograd, backend
from .tensor import Tensor


class CompileError(RuntimeError):
    """A step cannot be replayed faithfully; the message says which op or call and why."""


class _Slot:
    """A placeholder for the array in slot `index`, inside an op's keyword arguments."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class Recorder:
    """Writes the tape of one call. The engine, `Function.apply` and backend call it."""

    def __init__(self, inputs: list[Tensor]) -> None:
        self.tape: list[tuple] = []
        self.slot_of: dict[int, int] = {}  # id(array) -> slot
        self.arrays: list[Any] = []  # slot -> the recorded array (keeps ids alive and unique)
        self.made: list[bool] = []  # slot -> made by the tape (True) or given (False)
        self.output_slot: dict[int, int] = {}  # id(Function) -> the slot of its output
        self.suspended = 0  # > 0 inside a replayed call, whose inner work is not recorded
        self.in_forward = 0
        self.drawing: set[int] = set()  # tape positions of ops whose forward draws (dropout)
        for tensor in inputs:
            self._new_slot(tensor.array, made=True)

    # ------------------------------------------------------------------------------ slots
    def _new_slot(self, array: Any, made: bool) -> int:
        self.slot_of[id(array)] = len(self.arrays)
        self.arrays.append(array)
        self.made.append(made)
        return len(self.arrays) - 1

    def _slot(self, array: Any) -> int:
        """The slot of an array the tape reads: one it made, or a new constant slot."""
        slot = self.slot_of.get(id(array))
        if slot is None or self.arrays[slot] is not array:
            slot = self._new_slot(array, made=False)
        return slot

    def _kwargs(self, kwargs: dict) -> tuple[dict, bool]:
        """Keyword arguments with arrays replaced by slots (index arrays of a GetItem key)."""
        found = False

        def walk(value: Any) -> Any:
            nonlocal found
            if isinstance(value, tuple | list):
                return _rebuilt(value, [walk(v) for v in value])
            if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, type):
                found = True
                return _Slot(self._slot(value))
            return value

        return {k: walk(v) for k, v in kwargs.items()}, found

    # -------------------------------------------------------------------------- recording
    def forward(self, fn: Any, inputs: tuple, kwargs: dict) -> Any:
        """Run and record one op's forward (called by `Function.apply` while recording)."""
        arrays = [t.array for t in inputs]
        self.in_forward += 1
        try:
            data = fn.forward(*arrays, **kwargs)
        finally:
            self.in_forward -= 1
        if self.suspended:
            return data
        in_slots = [self._slot(a) for a in arrays]
        template, dynamic = self._kwargs(kwargs)
        out = self._new_slot(data, made=True)
        saved = getattr(fn, "_saved", None) or ()
        saved_slots = [
            (position, self._new_slot(value, made=True))
            for position, value in enumerate(saved)
            if value is not None and not hasattr(value, "_ctx") and id(value) not in self.slot_of
        ]
        self.output_slot[id(fn)] = out
        self.tape.append(("op", fn, in_slots, template, dynamic, out, saved_slots))
        return data

    def rule(self, fn: Any, grad: Any, output: Any, run: Callable[[], tuple]) -> tuple:
        """Run one backward rule. Ops inside it are recorded as usual; a rule that uses arrays
        no recorded op made (raw array code) is recorded as one call of the rule instead."""
        if self.suspended:
            return run()
        mark, first_slot = len(self.tape), len(self.arrays)
        grads = run()
        # A rule may also build an array with raw array code and feed it to a recorded op as a
        # constant (ReLU's mask x > 0): that constant would replay stale. Such a rule, like one
        # that returns raw arrays, is replayed as one call of the rule.
        raw = any(
            not self.made[slot] and getattr(self.arrays[slot], "ndim", 0) > 0
            for slot in range(first_slot, len(self.arrays))
        )
        if not raw and all(g is None or id(_data(g)) in self.slot_of for g in grads):
            return grads
        del self.tape[mark:]  # replay the rule itself, with its inputs' arrays refreshed
        for slot in range(first_slot, len(self.arrays)):
            self.made[slot] = True  # arrays of the dropped entries: nothing reads them now
        refresh = []
        for tensor in fn.inputs:
            slot = self.slot_of.get(id(tensor.array))
            refresh.append(slot if slot is not None and self.made[slot] else None)
        out_slots = [None if g is None else self._rule_output(_data(g), first_slot) for g in grads]
        grad_slot = self._slot(grad.array)
        self.tape.append(("rule", fn, grad_slot, self._slot(output.array), refresh, out_slots))
        return grads

    def _rule_output(self, array: Any, first_slot: int) -> int:
        """The slot of a rule's result: the one its dropped ops gave it (so it stays the first
        slot of its memory, a buffer the replay writes into), or a new one."""
        slot = self.slot_of.get(id(array))
        if slot is not None and slot >= first_slot and self.arrays[slot] is array:
            return slot
        return self._new_slot(array, made=True)

    def set_grad(self, leaf: Tensor, grad: Tensor) -> None:
        """The engine stored `grad` as ``leaf.grad``."""
        if not self.suspended:
            self.tape.append(("grad", leaf, self._slot(grad.array)))

    def draw(self, function: Callable, args: tuple, result: Any) -> None:
        """A random draw: replayed as a new draw, unless an op's forward made it (the op's own
        replay draws again)."""
        if self.suspended:
            return
        if self.in_forward:
            self.drawing.add(len(self.tape))  # the op being recorded: its replay draws again
            return
        if function is None:
            raise CompileError(
                f"compile: the step samples with {args[0]}, whose probabilities are computed in "
                "the step; a replay cannot redraw it. Sample outside the compiled step"
            )
        self.tape.append(("draw", function, args, self._new_slot(result, made=True)))

    def call(self, function: Callable, args: tuple, kwargs: dict) -> Any:
        """Run a call that replays as Python (an optimizer step); record it with its result."""
        if self.suspended:
            return function(*args, **kwargs)
        self.suspended += 1
        try:
            result = function(*args, **kwargs)
        finally:
            self.suspended -= 1
        slot = self._new_slot(result.array, made=True) if isinstance(result, Tensor) else None
        self.tape.append(("call", function, args, kwargs, slot))
        return result

    def store(self, target: Any, source: Any, op: str = "in-place write") -> None:
        """An in-place write of `source` into `target` (``x[...] = v``, ``x.add_(y)``)."""
        if self.suspended:
            return
        if not backend.is_buffer(target):
            raise CompileError(
                f"compile: the step writes in place into a tensor of shape {tuple(target.shape)} "
                "whose array cannot be written (a 0-d NumPy scalar); a replay could not repeat it"
            )
        self.tape.append(("store", self._slot(target), self._slot(source), op))

    def host_read(self, what: str) -> None:
        if not self.suspended:
            raise CompileError(
                f"compile: the step reads a tensor's value into Python ({what}) while it is "
                "recorded; the replay could not follow a branch or a number computed from it. "
                "Return the tensor from the step and read it outside"
            )


# ------------------------------------------------------------------------------------ checking
def _data(value: Any) -> Any:
    return value.array if isinstance(value, Tensor) else value


def _same_constant(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    host_a, host_b = backend.to_numpy(a), backend.to_numpy(b)
    equal = host_a == host_b
    if host_a.dtype.kind in "fc":  # NaN == NaN here: the same constant either way
        equal = equal | ((host_a != host_a) & (host_b != host_b))
    return bool(equal.all())


def _same_argument(x: Any, y: Any) -> bool:
    """Arguments of a replayed call: the same objects (tensors by identity) or equal values."""
    if x is y:
        return True
    if isinstance(x, tuple | list):
        return type(x) is type(y) and len(x) == len(y) and all(map(_same_argument, x, y))
    if isinstance(x, Tensor) or isinstance(y, Tensor):
        return False
    try:
        return bool(x == y)
    except (TypeError, ValueError):
        return False


def _entry_name(entry: tuple) -> str:
    kind = entry[0]
    if kind in ("op", "rule"):
        return f"{type(entry[1]).__name__} {'forward' if kind == 'op' else 'backward'}"
    if kind == "call":
        return f"call of {getattr(entry[1], '__qualname__', entry[1])}"
    if kind == "store":
        return f"the in-place {entry[3]}"
    return kind


_GRAD_HINT = (
    " (a common cause: gradients that start as None on the first call and are added to on the "
    "next; zero them inside the step, as optimizer.zero_grad() does)"
)


def check_same(first: Recorder, second: Recorder) -> None:
    """Raise CompileError unless two recordings of one signature can share one tape."""
    if len(first.tape) != len(second.tape):
        raise CompileError(
            f"compile: two calls with the same input shapes ran different operations "
            f"({len(first.tape)} and {len(second.tape)} recorded steps): the step branches on "
            "values or Python state, so no single recording can replay it" + _GRAD_HINT
        )
    for position, (a, b) in enumerate(zip(first.tape, second.tape)):
        same = a[0] == b[0] and (type(a[1]) is type(b[1]) if a[0] in ("op", "rule") else True)
        if a[0] == "op" and same:
            same = a[2] == b[2] and _same_kwargs(a[3], b[3])
        if a[0] == "call" and same:
            same = a[1] == b[1] and _same_argument(a[2], b[2])
            same = same and a[3].keys() == b[3].keys()
            same = same and all(_same_argument(a[3][k], b[3][k]) for k in a[3])
        if not same:
            raise CompileError(
                f"compile: operation {position} differs between two calls with the same input "
                f"shapes ({_entry_name(a)} vs {_entry_name(b)}): the step depends on values or "
                "Python state the tape cannot see" + _GRAD_HINT
            )
    if len(first.arrays) != len(second.arrays):
        raise CompileError("compile: the two recordings use different numbers of arrays")
    for slot, (a, b) in enumerate(zip(first.arrays, second.arrays)):
        if first.made[slot] != second.made[slot]:
            raise CompileError(f"compile: array {slot} is made by the step in one call only")
        if not first.made[slot] and not _same_constant(a, b):
            made_by = {id(e[1]): e for e in second.tape if e[0] == "op"}
            user = next(
                (_entry_name(e) for e in second.tape if slot in _reads_and_writes(e, made_by)[0]),
                "a replayed call",
            )
            raise CompileError(
                f"compile: an input of {user} (shape {tuple(b.shape)}) changes between calls but "
                "is not made by a recorded operation (raw array code, a new tensor made from a "
                "Python value, or a parameter replaced instead of updated in place); it would be "
                "replayed stale"
            )


def _same_kwargs(a: dict, b: dict) -> bool:
    def same(x: Any, y: Any) -> bool:
        if isinstance(x, _Slot) or isinstance(y, _Slot):
            return isinstance(x, _Slot) and isinstance(y, _Slot) and x.index == y.index
        if isinstance(x, tuple | list):
            return type(x) is type(y) and len(x) == len(y) and all(map(same, x, y))
        try:
            return bool(x == y)
        except (TypeError, ValueError):
            return x is y

    return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)


# ----------------------------------------------------------------------------------- replaying
def _rebuilt(value: tuple | list, items: list) -> tuple | list:
    """`value`'s type holding `items` (a named tuple takes them as separate arguments)."""
    return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)


def _fill(value: Any, env: list) -> Any:
    if isinstance(value, _Slot):
        return env[value.index]
    if isinstance(value, tuple | list):
        return _rebuilt(value, [_fill(v, env) for v in value])
    return value


def _lowered(fn: Any, arrays: list, out: Any, kwargs: dict) -> Callable | None:
    """A kernel ``kernel(out, *inputs)`` that writes `fn`'s forward result into `out` with the
    same array calls its forward makes (so the values are the same bit for bit), or None.

    Only NumPy and CuPy take ``out=``; only ops whose forward is one or two such calls and keeps
    nothing for backward are lowered. Every other op replays through its own ``forward``.
    """
    if not backend.has_out(out) or getattr(fn, "_saved", None):
        return None
    u = backend.ufuncs_of(out)
    name = type(fn).__name__
    if name in _BINARY_UFUNCS and all(backend.has_out(a) for a in arrays):
        ufunc = getattr(u, _BINARY_UFUNCS[name])
        return lambda o, a, b: ufunc(a, b, out=o)
    if name in _UNARY_UFUNCS and backend.has_out(arrays[0]):
        ufunc = getattr(u, _UNARY_UFUNCS[name])
        return lambda o, x: ufunc(x, out=o)
    if name in ("AddScalar", "MulScalar") and backend.has_out(arrays[0]):
        ufunc, c = (u.add if name == "AddScalar" else u.multiply), kwargs.get("c")
        if isinstance(c, int | float) and not isinstance(c, bool):
            return lambda o, x: ufunc(x, c, out=o)
    if name == "MatMul" and len(arrays) == 2:
        return _lowered_matmul(u, out, *arrays)
    if name == "Linear":
        return _lowered_linear(u, out, arrays)
    return None


_BINARY_UFUNCS = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide"}
_BINARY_UFUNCS["Maximum"] = "maximum"
_UNARY_UFUNCS = {"Neg": "negative", "Exp": "exp", "Log": "log", "Tanh": "tanh", "Sqrt": "sqrt"}


def _rows_of(u: Any, out: Any, columns: int) -> Any:
    """`out` seen as (N, columns) without a copy, or None when that needs one."""
    rows = u.reshape(out, (-1, columns))
    return rows if u.shares_memory(rows, out) else None


def _lowered_matmul(u: Any, out: Any, a: Any, b: Any) -> Callable | None:
    if a.ndim < 2 or b.ndim < 2:
        return None
    if b.ndim == 2 and a.ndim > 2:  # the forward's one (N, k) @ (k, m) GEMM
        rows = _rows_of(u, out, b.shape[-1])
        if rows is None:
            return None
        k = a.shape[-1]
        return lambda o, a, b: u.matmul(u.reshape(a, (-1, k)), b, out=rows)
    return lambda o, a, b: u.matmul(a, b, out=o)


def _lowered_linear(u: Any, out: Any, arrays: list) -> Callable | None:
    x, weight = arrays[0], arrays[1]
    if x.ndim == 0 or (len(arrays) == 3 and arrays[2].dtype != out.dtype):
        return None  # a promoting bias is added out of place by the forward
    rows = _rows_of(u, out, weight.shape[0])
    if rows is None:
        return None
    k = x.shape[-1]
    if len(arrays) == 2:
        return lambda o, x, w: u.matmul(u.reshape(x, (-1, k)), w.T, out=rows)

    def linear(o: Any, x: Any, w: Any, b: Any) -> None:
        u.matmul(u.reshape(x, (-1, k)), w.T, out=rows)
        u.add(rows, b, out=rows)

    return linear


def _kernel_run(kernel: Callable, buffer: Any, in_slots: list[int]) -> Callable[[list], None]:
    """A program item that runs an out= kernel into `buffer` on the current input arrays."""
    if len(in_slots) == 1:
        (a,) = in_slots
        return lambda env: kernel(buffer, env[a])
    if len(in_slots) == 2:
        a, b = in_slots
        return lambda env: kernel(buffer, env[a], env[b])
    return lambda env: kernel(buffer, *[env[i] for i in in_slots])


class Tape:
    """A checked recording, replayed on new input arrays.

    The recording's own arrays are the replay's buffers. Every array an entry made is written
    again, in place, by the same entry on every replay, so an array that is a view of another
    (a reshape, a transpose, ``W.T``) stays that view and need not be made again: those entries
    are dropped. An entry whose result cannot be written in place (a NumPy scalar, a read-only
    broadcast) makes a new array each time, and the views of it are made again too.
    """

    def __init__(
        self, recorder: Recorder, outputs: Any, inputs: list[Tensor], graphs: bool = True
    ) -> None:
        self.entries = recorder.tape
        self.outputs = outputs  # the step's result, with Tensors replaced by slots
        self.env = list(recorder.arrays)  # slot -> its buffer (or its latest array, if dynamic)
        self._inputs = inputs  # the recorded call's tensors: a gradient of one goes to the new
        self._replayed_inputs: list[Tensor] = inputs
        self._roots = [backend.storage_root(a) if hasattr(a, "shape") else None for a in self.env]
        first_slot_of_root: dict[int, int] = {}
        for slot, root in enumerate(self._roots):
            first_slot_of_root.setdefault(root, slot)
        self._first_of_root = first_slot_of_root
        self.graphs = backend.graph_runner(self.env[0]) if self.env and graphs else None
        self.static = [True] * len(self.env)
        self.program: list[Callable[[list], None]] = []
        self.dropped = 0  # entries replaced by the views they recorded
        self.lowered = 0  # ops replayed as out= kernels
        builders = {"op": self._op, "rule": self._rule, "grad": self._grad, "store": self._store}
        builders.update(draw=self._draw, call=self._call)
        self.labels: list[str] = []  # what each program item replays, for reading and profiling
        self._made_by = {id(e[1]): e for e in self.entries if e[0] == "op"}
        items = []
        for position, entry in enumerate(self.entries):
            lowered = self.lowered
            run = builders[entry[0]](entry)
            if run is not None:
                self.program.append(run)
                self.labels.append(
                    _entry_name(entry) + (" (out=)" if self.lowered > lowered else "")
                )
                items.append((run, entry, position in recorder.drawing))
        self.segments = _segments(items, self.static)

    # ------------------------------------------------------------------------ planning
    def _fresh(self, slot: int) -> bool:
        """Whether `slot`'s recorded array owns memory no earlier slot uses: a buffer."""
        return self._first_of_root.get(self._roots[slot]) == slot and backend.is_buffer(
            self.env[slot]
        )

    def _writer(self, slot: int) -> Callable[[Any], None]:
        """How a new result for `slot` is kept: copied into its buffer (so the views of it and
        the graphs captured with it stay valid), or, where it has none, held as it is."""
        env = self.env
        if self._fresh(slot):
            buffer = env[slot]
            return lambda value: backend.copy_into(buffer, value)
        self.static[slot] = False

        def hold(value: Any) -> None:
            env[slot] = value

        return hold

    def _op(self, entry: tuple) -> Callable | None:
        _, fn, in_slots, kwargs, dynamic, out, saved_slots = entry
        env, static = self.env, self.static
        in_roots = {self._roots[i] for i in in_slots}
        if self._roots[out] in in_roots and not saved_slots:
            if all(static[i] for i in in_slots) and not dynamic:
                self.dropped += 1  # a view of arrays that stay where they are: it stays valid
                return None
        elif self._fresh(out) and not dynamic and not saved_slots:
            kernel = _lowered(fn, [env[i] for i in in_slots], env[out], kwargs)
            if kernel is not None:
                self.lowered += 1
                return _kernel_run(kernel, env[out], in_slots)
        write = self._writer(out)
        saved_writes = [(position, self._writer(slot)) for position, slot in saved_slots]
        forward = fn.forward

        def run(env: list) -> None:
            args = kwargs if not dynamic else {k: _fill(v, env) for k, v in kwargs.items()}
            write(forward(*[env[i] for i in in_slots], **args))
            if saved_writes:
                saved = fn._saved
                for position, keep in saved_writes:
                    keep(saved[position])

        return run

    def _rule(self, entry: tuple) -> Callable:
        _, fn, grad_slot, output_slot, refresh, out_slots = entry
        writes = [None if slot is None else self._writer(slot) for slot in out_slots]

        def run(env: list) -> None:
            for tensor, slot in zip(fn.inputs, refresh):
                if slot is not None:
                    tensor.array = env[slot]
            fn.output = Tensor._from_op(env[output_slot], None)
            try:
                grads = fn.backward(Tensor._from_op(env[grad_slot], None))
            finally:
                fn.output = None
            grads = grads if isinstance(grads, tuple | list) else (grads,)
            for grad, write in zip(grads, writes):
                if write is not None:
                    write(grad.array if isinstance(grad, Tensor) else grad)

        return run

    def _grad(self, entry: tuple) -> Callable:
        _, leaf, slot = entry
        position = next((k for k, t in enumerate(self._inputs) if t is leaf), None)

        def run(env: list) -> None:
            # A copy: the buffer is written again by the next replay, the gradient must not be.
            target = leaf if position is None else self._replayed_inputs[position]
            target.grad = Tensor._from_op(backend.copied(env[slot]), None)

        return run

    def _store(self, entry: tuple) -> Callable:
        _, target, source, _ = entry

        def run(env: list) -> None:
            backend.copy_into(env[target], env[source])

        return run

    def _draw(self, entry: tuple) -> Callable:
        _, function, args, slot = entry
        write = self._writer(slot)
        return lambda env: write(function(*args))

    def _call(self, entry: tuple) -> Callable:
        _, function, args, kwargs, slot = entry
        write = None if slot is None else self._writer(slot)

        def run(env: list) -> None:
            result = function(*args, **kwargs)
            if write is not None:
                write(result.array)

        return run

    # ------------------------------------------------------------------------- replaying
    def replay(self, inputs: list[Tensor]) -> Any:
        env = self.env
        self._replayed_inputs = inputs
        with self.graphs if self.graphs is not None else contextlib.nullcontext():
            for position, tensor in enumerate(inputs):
                backend.copy_into(env[position], tensor.array)
            with autograd.no_grad():
                for segment in self.segments:
                    segment.run(env, self.graphs)
        return _rebuild(self.outputs, env)


def _reads_and_writes(entry: tuple, made_by: dict) -> tuple[set, set]:
    """The slots a program item reads and the slots it writes."""
    kind = entry[0]
    if kind == "op":
        _, fn, in_slots, kwargs, _, out, saved_slots = entry
        kwarg_slots = set()

        def walk(value: Any) -> None:
            if isinstance(value, _Slot):
                kwarg_slots.add(value.index)
            elif isinstance(value, tuple | list):
                for v in value:
                    walk(v)

        for value in kwargs.values():
            walk(value)
        return set(in_slots) | kwarg_slots, {out} | {slot for _, slot in saved_slots}
    if kind == "rule":
        _, fn, grad_slot, output_slot, refresh, out_slots = entry
        reads = {grad_slot, output_slot} | {slot for slot in refresh if slot is not None}
        forward = made_by.get(id(fn))
        if forward is not None:  # the rule also reads what its forward saved
            reads |= {slot for _, slot in forward[6]}
        return reads, {slot for slot in out_slots if slot is not None}
    if kind == "store":
        return {entry[1], entry[2]}, {entry[1]}
    return set(), set()


class _Segment:
    """A run of program items: array work that a CUDA graph can hold (`capturable`), or Python
    (a gradient handed to a leaf, a draw, an optimizer's step) that must run every time."""

    def __init__(
        self, runs: list[Callable], capturable: bool, array_work: bool = True, names: tuple = ()
    ) -> None:
        self.runs = runs
        self.names = names  # what each run replays (`_entry_name`), for reading and tests
        self.array_work = array_work
        self.capturable = capturable
        self.graph: Any = None
        self.warm = False  # ran once as Python: kernels are compiled, buffers exist

    def run(self, env: list, graphs: Any) -> None:
        if self.graph is not None:
            graphs.launch(self.graph)
            return
        if graphs is not None and self.capturable and self.warm:
            try:
                self.graph = graphs.capture(lambda: self._run_items(env))
            except Exception:  # something a graph cannot hold: this segment stays Python
                self.capturable = False
            else:
                graphs.launch(self.graph)  # capturing ran nothing: this launch computes
                return
        self._run_items(env)
        self.warm = True

    def _run_items(self, env: list) -> None:
        for run in self.runs:
            run(env)


def _segments(items: list[tuple], static: list[bool]) -> list[_Segment]:
    """Group the program into segments: maximal runs of array items, and Python items.

    An array run can become one graph only if every array it reads from outside itself stays
    the same array from replay to replay (a buffer, not a result held anew each time), and it
    draws no random numbers (a graph would replay the first draw); an op that reads values back
    to the host (`Function.reads_host`) runs between graphs. Handing gradients to leaves
    waits until the end of the run it sits in (nothing in the run reads ``.grad``), so the
    engine's stores between backward ops do not cut the run into pieces."""
    segments: list[_Segment] = []
    runs: list[Callable] = []
    names: list[str] = []
    grads: list[Callable] = []
    reads: set = set()
    writes: set = set()
    capturable = True
    made_by = {id(entry[1]): entry for _, entry, _ in items if entry[0] == "op"}

    def close() -> None:
        nonlocal runs, names, grads, reads, writes, capturable
        if runs:
            outside = reads - writes
            capturable = capturable and all(static[s] for s in outside)
            segments.append(_Segment(runs, capturable, names=tuple(names)))
        if grads:
            segments.append(_Segment(grads, False, array_work=False, names=("grad",) * len(grads)))
        runs, names, grads, reads, writes, capturable = [], [], [], set(), set(), True

    for run, entry, draws in items:
        kind = entry[0]
        if kind == "grad":
            grads.append(run)
            continue
        if kind not in ("op", "rule", "store") or (kind == "op" and entry[1].reads_host()):
            close()  # Python, or an op that reads values back (an index range check)
            name = (_entry_name(entry),)
            segments.append(_Segment([run], capturable=False, array_work=False, names=name))
            continue
        if kind == "store" and grads:
            close()  # a write after a gradient was handed out: keep their order
        item_reads, item_writes = _reads_and_writes(entry, made_by)
        reads |= item_reads - writes
        writes |= item_writes
        capturable = capturable and not draws
        runs.append(run)
        names.append(_entry_name(entry))
    close()
    return segments


def _encode_outputs(value: Any, recorder: Recorder) -> Any:
    if isinstance(value, Tensor):
        return _Slot(recorder._slot(value.array))
    if isinstance(value, tuple | list):
        return type(value)(_encode_outputs(v, recorder) for v in value)
    if isinstance(value, dict):
        return {k: _encode_outputs(v, recorder) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise CompileError(
        f"compile: the step returned a {type(value).__name__}; return tensors, numbers, or "
        "tuples, lists and dicts of them"
    )


def _rebuild(value: Any, env: list) -> Any:
    if isinstance(value, _Slot):  # a copy: the next replay writes into the buffer again
        return Tensor._from_op(backend.copied(env[value.index]), None)
    if isinstance(value, tuple | list):
        return type(value)(_rebuild(v, env) for v in value)
    if isinstance(value, dict):
        return {k: _rebuild(v, env) for k, v in value.items()}
    return value


# -------------------------------------------------------------------------------------- compile
def _signature(args: tuple, kwargs: dict) -> tuple:
    """The cache key: tensors by shape, dtype and device; other arguments by value."""

    def key(value: Any) -> Any:
        if isinstance(value, Tensor):
            return ("tensor", value.shape, str(value.dtype), value.device)
        try:
            hash(value)
            return value
        except TypeError:
            return ("id", id(value))

    return tuple(key(a) for a in args) + tuple((k, key(v)) for k, v in sorted(kwargs.items()))


class CompiledStep:
    """What `compile` returns: call it like the step. ``.tapes`` maps signatures to tapes."""

    def __init__(self, step: Callable, max_signatures: int = 8, cuda_graphs: bool = True) -> None:
        functools.update_wrapper(self, step)
        self.step = step
        self.max_signatures = max_signatures
        self.cuda_graphs = cuda_graphs
        self.tapes: dict[tuple, Tape] = {}
        self._first: dict[tuple, Recorder] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = _signature(args, kwargs)
        inputs = [a for a in args if isinstance(a, Tensor)]
        tape = self.tapes.get(key)
        if tape is not None:
            return tape.replay(inputs)
        recorder, result = self._record(inputs, args, kwargs)
        first = self._first.pop(key, None)
        if first is None:
            self._first[key] = recorder
        else:
            check_same(first, recorder)
            if len(self.tapes) >= self.max_signatures:
                self.tapes.pop(next(iter(self.tapes)))  # the oldest signature goes
            outputs = _encode_outputs(result, recorder)
            self.tapes[key] = Tape(recorder, outputs, inputs, graphs=self.cuda_graphs)
            _release_buffers(result, recorder)
        return result

    def _record(self, inputs: list[Tensor], args: tuple, kwargs: dict) -> tuple[Recorder, Any]:
        if autograd.active_recorder() is not None:
            raise CompileError("compile: a compiled step cannot call another compiled step")
        # The step runs on copies of the inputs' arrays: the recording's arrays become the
        # replay's buffers, and the caller's tensors must not be written by later replays.
        given = [tensor.array for tensor in inputs]
        for tensor in inputs:
            tensor.array = backend.copied(tensor.array)
        recorder = Recorder(inputs)
        previous = autograd.set_recorder(recorder)
        try:
            result = self.step(*args, **kwargs)
            _encode_outputs(result, recorder)  # an unsupported result fails now, not later
        finally:
            autograd.set_recorder(previous)
            written = {e[1] for e in recorder.tape if e[0] == "store"}
            for position, (tensor, array) in enumerate(zip(inputs, given, strict=True)):
                if position in written:
                    backend.copy_into(array, tensor.array)  # the step wrote into its input
                tensor.array = array
        return recorder, result


def _release_buffers(result: Any, recorder: Recorder) -> None:
    """After the recording that became a tape: the tensors it handed out (its result, the
    gradients) get copies of their arrays, which are now buffers that every replay rewrites."""
    made = {id(a) for a, m in zip(recorder.arrays, recorder.made) if m}
    tensors = [t for t in _tensors_in(result)]
    tensors += [e[1].grad for e in recorder.tape if e[0] == "grad" and e[1].grad is not None]
    for tensor in tensors:
        if id(tensor.array) in made:
            tensor.array = backend.copied(tensor.array)


def _tensors_in(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors_in(v)]
    return []


def compile(  # noqa: A001
    step: Callable | None = None, *, max_signatures: int = 8, cuda_graphs: bool = True
) -> Any:
    """Record `step` and replay it on later calls with the same input shapes.

    ``step = ta.compile(train_step)`` (or ``@ta.compile``): the first two calls for each new
    signature run eagerly while recording and checking; later calls replay the recording. On
    CuPy, with `cuda_graphs`, each run of array work between Python calls (the optimizer's step)
    is captured once as a CUDA graph and then launched as one. See docs/performance.md, "How the
    fast path works".
    """
    if step is None:
        return lambda f: CompiledStep(f, max_signatures, cuda_graphs)
    return CompiledStep(step, max_signatures, cuda_graphs)


__all__ = ["CompileError", "CompiledStep", "Recorder", "compile"]
