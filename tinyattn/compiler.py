"""The fast path for whole steps: ``ta.compile(step)`` records a step's array work, then replays it.

Imports `backend`, `autograd`, `tensor`, `replay` and `replay_kernels` (the replay half). The
reference path (Tensor ops building a graph, the engine walking it) pays Python costs per op
that small models feel: a Tensor object per result, argument checks, graph nodes, the engine's
bookkeeping. A training step does the same array work every time its inputs have the same
shapes, so it can be written down once and replayed:

- **Recording.** The first two calls with a new signature (the shapes, dtypes, devices and
  ``requires_grad`` of the tensor arguments, wherever they sit in the arguments, the other
  arguments' values, the step function's globals and closure variables (the entries of a
  small settings dict or namespace among them, and a bound method's object's public
  attributes), grad mode, and the
  mode, settings, parameters, buffers and submodules of every module the step calls) run
  eagerly, on private copies of the
  inputs' arrays, while a `Recorder` writes a tape: every op's ``forward`` on its arrays, every
  backward rule, every gradient stored on a leaf, every in-place write, every random draw made
  outside an op, and calls that must run as Python on every step (``optimizer.step``, gradient
  clipping, a scheduler's ``step``).
- **Checking.** The two tapes must agree (if they do not, a third call is recorded and compared
  with the second, once: a first call may differ through state made on first use, such as
  gradients that were None): the same ops with the same arguments, and every array
  that no recorded op made (a parameter, a constant mask) either the same array in both calls or
  equal in value. An array that changes between calls without a recorded op making it was made
  by code the tape cannot see (raw array code, or a Python number read from a tensor), and
  replaying it would be silently wrong: that is a `CompileError` naming the op, never a replay.
  Reading a tensor's value into Python (``.item()``, ``bool(x)``, ``.numpy()``) inside the step
  is refused while recording for the same reason, and so are results whose shape depends on
  values (``nonzero``, ``x[mask]``).
- **Replaying.** From then on, `replay.Tape` replays the last recording: its arrays are
  the buffers, each written again in place by the entry that made it. Views of buffers stay
  valid and are not made again; simple ops write with ``out=`` (NumPy, CuPy); the others call
  their ``forward`` and copy the result in; buffers never alive at once share memory. No Tensor
  objects, no graph, no checks; then the gradients, the optimizer, the scheduler. Parameters
  and optimizer state change in place exactly as in eager mode; the returned tensors and
  gradients are copies holding the new values.
- **On a GPU,** each run of array work between Python calls is captured once as a CUDA graph and
  then launched as one (`backend.CudaGraphs`).

What the tape cannot hold is refused when recording, not replayed: see `CompileError`. Python
side effects of the step other than the calls listed above (printing, appending to a list) run
only while recording.
"""

from __future__ import annotations

import argparse
import dis
import functools
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any

from . import autograd, backend
from .replay import Tape, entry_name, let_go, position_in, reads_and_writes, written_inputs
from .replay_kernels import Slot, rebuilt
from .tensor import Tensor


class CompileError(RuntimeError):
    """A step cannot be replayed faithfully; the message says which op or call and why."""


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
        self.modes: list[tuple[Any, str]] = []  # (object, attribute): flags the ops depend on
        self.mode_values: list[Any] = []  # their values when the recording ended
        self.returned: list[Any] = []  # the Python values (not tensors) the step returned
        self.owners: dict[int, Tensor] = {}  # constant slot -> the tensor it was read from
        # (leaf, slot): a gradient the leaf held before the call, which backward added to. Like
        # an input, each replay reads the leaf's gradient of the moment into this slot.
        self.grads_read: list[tuple[Tensor, int]] = []
        self.grads_set: dict[int, Tensor] = {}  # tensors whose .grad the step assigned
        # Arrays the step made from Python values (ta.zeros, ta.tensor(data)), by id (kept
        # alive, so ids stay unique), and of those the slots written in place, with the values
        # they had before the first write: a replay starts each from those values again, as
        # eager makes the array anew on every call (a one-hot built by index assignment).
        self.made_from_values: dict[int, Any] = {}
        self.fresh: dict[int, Any] = {}
        self.in_hook = 0  # > 0 while a gradient hook runs
        self.hooked: list[Tensor] = []  # gradients handed to hooks replayed as calls
        self.hook_host_reads = 0  # values hooks read into Python
        self.inputs = inputs
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
                return rebuilt(value, [walk(v) for v in value])
            if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, type):
                found = True
                return Slot(self._slot(value))
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
        read_grads = {slot for _, slot in self.grads_read}
        for tensor, slot in zip(inputs, in_slots):
            if not self.made[slot] and slot not in read_grads:
                self.owners.setdefault(slot, tensor)  # a parameter, a buffer: it must keep this
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

    def hook(self, hook: Callable, grad: Tensor) -> Any:
        """Run a gradient hook. One that returns a new gradient is recorded like a rule, by the
        ops it runs; one that returns None is kept for its side effects (it stores or logs the
        gradient), so its ops are dropped and a replay calls it, with that call's gradient."""
        if self.suspended:
            return hook(grad)
        mark, first_slot = len(self.tape), len(self.arrays)
        self.in_hook += 1  # reading values into Python is allowed in a hook replayed as a call
        reads_before = self.hook_host_reads
        try:
            result = hook(grad)
        finally:
            self.in_hook -= 1
        if result is not None:
            if self.hook_host_reads != reads_before:
                raise CompileError(
                    f"compile: the gradient hook {getattr(hook, '__qualname__', hook)} reads a "
                    "tensor's value into Python and returns a new gradient; the replay could "
                    "not follow what it computed from the value"
                )
            return result
        del self.tape[mark:]
        for slot in range(first_slot, len(self.arrays)):
            self.made[slot] = True  # arrays of the dropped entries: nothing reads them now
        self.tape.append(("hook", hook, self._slot(grad.array)))
        self.hooked.append(grad)  # the hook may keep it: it gets a copy if this becomes a tape
        return None

    def set_grad(self, leaf: Tensor, grad: Tensor) -> None:
        """The engine stored `grad` as ``leaf.grad``."""
        if not self.suspended:
            self.tape.append(("grad", leaf, self._slot(grad.array)))

    def read_grad(self, leaf: Tensor, grad: Tensor) -> None:
        """Backward is about to add to `leaf`'s gradient: one from before the call (gradient
        accumulation over several calls) is an input of the tape, read anew by every replay."""
        if self.suspended or id(leaf) in self.grads_set:
            return  # a gradient the step set (zero_grad(set_to_none=False)): a constant
        slot = self._slot(grad.array)
        if not self.made[slot] and all(s != slot for _, s in self.grads_read):
            self.grads_read.append((leaf, slot))

    def grad_set(self, tensor: Tensor) -> None:
        if not self.suspended:
            self.grads_set[id(tensor)] = tensor

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
        slot = self._slot(target)
        if not self.made[slot] and id(target) in self.made_from_values:
            self.fresh.setdefault(slot, backend.copied(target))  # before the first write
        self.tape.append(("store", slot, self._slot(source), op))

    def created(self, array: Any) -> None:
        if not self.suspended:
            self.made_from_values[id(array)] = array

    def mode(self, owner: Any, name: str) -> None:
        """A value the recorded ops depend on (a module's ``_replay_key``): part of the key."""
        if not self.suspended and not any(o is owner and n == name for o, n in self.modes):
            self.modes.append((owner, name))

    def keep_for_checking(self) -> None:
        """Keep only what `check_same` compares with the next recording (the entries, which
        arrays were made, the constants): the recording's arrays and graph are freed while the
        next call records, as a backward would free them (the caller may keep the result)."""
        let_go(self.tape)
        self.arrays = [None if made else a for a, made in zip(self.arrays, self.made, strict=True)]

    def python_write(self, what: str) -> None:
        if not self.suspended:
            raise CompileError(
                f"compile: the step sets {what} while it is recorded; a replay runs no Python "
                "of the step and would keep the recorded value (a learning rate set by hand "
                "would never change again). Set it outside the step, before calling it, or use "
                "an lr_scheduler, whose step() is replayed"
            )

    def host_read(self, what: str) -> None:
        if self.in_hook:
            self.hook_host_reads += 1
            return
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


def check_same(first: Recorder, second: Recorder) -> None:
    """Raise CompileError unless two recordings of one signature can share one tape."""
    if first.returned != second.returned:
        raise CompileError(
            f"compile: the step returned Python values that changed between calls "
            f"({first.returned} and {second.returned}); a replay would return the first ones "
            "again: return them as tensors (a norm from clip_grad_norm_, not a float)"
        )
    if len(first.tape) != len(second.tape):
        raise CompileError(
            f"compile: two calls with the same input shapes ran different operations "
            f"({len(first.tape)} and {len(second.tape)} recorded steps): the step branches on "
            "values or Python state, so no single recording can replay it"
        )
    for position, (a, b) in enumerate(zip(first.tape, second.tape)):
        if not _same_entry(a, b):
            raise CompileError(
                f"compile: operation {position} differs between two calls with the same input "
                f"shapes ({entry_name(a)} vs {entry_name(b)}): the step depends on values or "
                "Python state the tape cannot see"
            )
    _check_arrays(first, second)


def _same_entry(a: tuple, b: tuple) -> bool:
    """Whether two recordings' entries at one position replay alike."""
    if a[0] != b[0] or (a[0] in ("op", "rule") and type(a[1]) is not type(b[1])):
        return False
    if a[0] == "op":
        return a[2] == b[2] and _same_kwargs(a[3], b[3])
    if a[0] == "hook":  # a lambda made in the step is a new object on each call
        return a[1] is b[1] or getattr(a[1], "__code__", a) is getattr(b[1], "__code__", b)
    if a[0] == "call":
        return (
            a[1] == b[1]
            and _same_argument(a[2], b[2])
            and a[3].keys() == b[3].keys()
            and all(_same_argument(a[3][k], b[3][k]) for k in a[3])
        )
    return True


def _check_arrays(first: Recorder, second: Recorder) -> None:
    """The two recordings' arrays: made by the same entries, and every constant the same."""
    if len(first.arrays) != len(second.arrays):
        raise CompileError("compile: the two recordings use different numbers of arrays")
    read_grads = _grad_holders(first)
    if read_grads != _grad_holders(second):
        raise CompileError(
            "compile: two calls with the same input shapes added to the gradients of different "
            "tensors held from before the call"
        )
    inputs_of_grads = {slot for _, slot in first.grads_read}  # read anew by every replay
    if first.fresh.keys() != second.fresh.keys():
        raise CompileError(
            "compile: two calls with the same input shapes wrote in place into different arrays "
            "they made from Python values"
        )
    for slot, (a, b) in enumerate(zip(first.arrays, second.arrays)):
        if first.made[slot] != second.made[slot]:
            raise CompileError(f"compile: array {slot} is made by the step in one call only")
        if slot in inputs_of_grads:
            continue
        if slot in first.fresh:  # written in place: compared as the step made it
            a, b = first.fresh[slot], second.fresh[slot]
        if not first.made[slot] and not _same_constant(a, b):
            made_by = {id(e[1]): e for e in second.tape if e[0] == "op"}
            user = next(
                (entry_name(e) for e in second.tape if slot in reads_and_writes(e, made_by)[0]),
                "a replayed call",
            )
            raise CompileError(
                f"compile: an input of {user} (shape {tuple(b.shape)}) changes between calls but "
                "is not made by a recorded operation (raw array code, a new tensor made from a "
                "Python value, or a parameter replaced instead of updated in place); it would be "
                "replayed stale"
            )


def _grad_holders(recorder: Recorder) -> list[tuple]:
    """Whose earlier gradient each read slot held: a step input by position, else the tensor."""
    holders = []
    for leaf, slot in recorder.grads_read:
        position = position_in(leaf, recorder.inputs)
        holders.append((("input", position) if position is not None else id(leaf), slot))
    return holders


def _same_kwargs(a: dict, b: dict) -> bool:
    def same(x: Any, y: Any) -> bool:
        if isinstance(x, Slot) or isinstance(y, Slot):
            return isinstance(x, Slot) and isinstance(y, Slot) and x.index == y.index
        if isinstance(x, tuple | list):
            return type(x) is type(y) and len(x) == len(y) and all(map(same, x, y))
        try:
            return bool(x == y)
        except (TypeError, ValueError):
            return x is y

    return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)


def _returned_values(value: Any) -> list[Any]:
    """The Python values among a step's results (a replay returns them as recorded)."""
    if isinstance(value, Tensor):
        return []
    if isinstance(value, tuple | list):
        return [v for item in value for v in _returned_values(item)]
    if isinstance(value, dict):
        return [v for item in value.values() for v in _returned_values(item)]
    return [value]


def _encode_outputs(value: Any, recorder: Recorder) -> Any:
    if isinstance(value, Tensor):
        return Slot(recorder._slot(value.array))
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


# -------------------------------------------------------------------------------------- compile
def _flattened(args: tuple, kwargs: dict) -> tuple[tuple, list[Tensor]]:
    """(the cache key of a call, its tensor inputs). Tensors are inputs wherever they sit in the
    arguments, inside tuples, lists and dicts too (``step(batch)`` with ``batch = (x, y)``), in
    the order they are met, keyword arguments by name; the key holds each by shape, dtype,
    device and requires_grad, the containers by type and layout, and other arguments by
    value."""
    inputs: list[Tensor] = []

    def key(value: Any) -> Any:
        if isinstance(value, Tensor):
            inputs.append(value)
            # The library first: dtypes of two libraries are never compared with each other.
            # requires_grad too: whether backward hands the input a gradient is on the tape.
            array = value.array
            return (
                "tensor",
                type(array),
                value.device,
                array.shape,
                array.dtype,
                value.requires_grad,
            )
        if isinstance(value, tuple | list):
            return (type(value), tuple(key(v) for v in value))
        if isinstance(value, dict):
            return (type(value), tuple((k, key(v)) for k, v in value.items()))
        try:
            hash(value)
            return value
        except TypeError:
            return ("id", id(value))

    signature = tuple(key(a) for a in args) + tuple((k, key(kwargs[k])) for k in sorted(kwargs))
    return signature, inputs


# Values a guard keeps as themselves: compared by value, so a new number records again.
_PLAIN = (int, float, complex, bool, str, bytes, type(None))
_UNBOUND = object()


def _free_names(step: Callable) -> tuple[dict, tuple[str, ...], tuple, Any]:
    """(the globals of `step`'s function, the names its code loads from them, its closure
    cells, the object a bound method is bound to): what a replay would otherwise freeze.
    Nested code (a comprehension, a lambda) reads the same globals, so its names count too.
    Empty for a callable that is not a function."""
    function = getattr(step, "__func__", step)
    owner = getattr(step, "__self__", None)
    code = getattr(function, "__code__", None)
    if not isinstance(code, types.CodeType):
        return {}, (), (), None
    names: set[str] = set()
    codes = [code]
    while codes:
        current = codes.pop()
        # Only names loaded as globals: co_names also holds attribute names (`optimizer.step`
        # beside a loop's global `step` counter must not count).
        names.update(i.argval for i in dis.get_instructions(current) if i.opname == "LOAD_GLOBAL")
        codes.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    cells = tuple(function.__closure__ or ())
    return function.__globals__, tuple(sorted(names)), cells, getattr(owner, "__dict__", None)


class _Same:
    """A key part equal only to one for the very same object. It holds the object, so that
    the id cannot be reused by a new one while the key lives (an id alone could be)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


# A dict or namespace of settings (`config["lr"]`, `args.lr`) up to this size is keyed by its
# entries too, one level deep; a larger one (a vocabulary) only by identity, as reading it on
# every call would cost more than the replay saves.
_SETTINGS_SIZE = 64


def _guard(value: Any) -> Any:
    """A global's or closure variable's part of the cache key: plain values (and tuples of
    them) by value, anything else by identity (a tensor compared by value would be an op); a
    small dict or namespace by identity and by its entries, each plain by value or else by
    identity."""
    if isinstance(value, _PLAIN):
        return value
    if type(value) is tuple:
        return tuple(_guard(v) for v in value)
    entries = value if type(value) is dict else None
    if isinstance(value, types.SimpleNamespace | argparse.Namespace):
        entries = vars(value)
    if entries is not None and len(entries) <= _SETTINGS_SIZE:
        return (_Same(value), tuple((_shallow(k), _shallow(v)) for k, v in entries.items()))
    return _Same(value)


def _shallow(value: Any) -> Any:
    """A plain value (or a tuple of them) by value, anything else by identity."""
    if isinstance(value, _PLAIN) or (
        type(value) is tuple and all(isinstance(v, _PLAIN) for v in value)
    ):
        return value
    return _Same(value)


class CompiledStep:
    """What `compile` returns: call it like the step. ``.tapes`` maps signatures to tapes."""

    def __init__(self, step: Callable, max_signatures: int = 8, cuda_graphs: bool = True) -> None:
        if not callable(step):
            raise TypeError(f"compile: step must be a function, got {type(step).__name__}")
        if type(max_signatures) is not int or max_signatures < 1:
            raise ValueError(
                f"compile: max_signatures must be a positive int, got {max_signatures!r}"
            )
        if not isinstance(cuda_graphs, bool):
            raise TypeError(f"compile: cuda_graphs must be True or False, got {cuda_graphs!r}")
        functools.update_wrapper(self, step)
        self.step = step
        # The step's own global and enclosing names are read on every call and keyed, as
        # torch.compile guards on them: a replay runs none of the step's Python, so a learning
        # rate kept in a global and lowered after recording would otherwise stay as recorded.
        # A bound method's object counts the same way: its public attributes (`self.lr`).
        self._globals, self._global_names, self._cells, self._owner = _free_names(step)
        self.max_signatures = max_signatures
        self.cuda_graphs = cuda_graphs
        self._lock = threading.RLock()
        self.tapes: dict[tuple, Tape] = {}
        self._first: dict[tuple, Recorder] = {}  # signatures recorded once, to check
        self._warned = False
        self._unrepeated = 0  # recordings in a row that no second recording confirmed
        self._started_over: set[tuple] = set()  # signatures whose first two recordings differed
        # Values the recorded ops depend on (every called module's `_replay_key`), from all
        # recordings so far: their values at each call are part of the key, with grad mode.
        self._modes: list[tuple[Any, str]] = []
        # The tensors whose gradient from before a call some recording added to (gradient
        # accumulation), a step input by its position: whether each holds one, and of what
        # shape and dtype, is part of the key (the tape reads it, or starts it from None).
        self._grad_holders: list[Tensor | int] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # One call at a time: a replay writes into buffers that another call would share.
        with self._lock:
            return self._call(args, kwargs)

    def _free_values(self) -> tuple:
        """The current values of the step's globals, closure variables and (for a bound
        method) its object's public attributes, as guards."""
        get = self._globals.get
        values = tuple(_guard(get(name, _UNBOUND)) for name in self._global_names)
        cells = []
        for cell in self._cells:
            try:
                cells.append(_guard(cell.cell_contents))
            except ValueError:  # not yet bound in the enclosing function
                cells.append(_UNBOUND)
        owner = self._owner or {}
        attributes = tuple((k, _guard(v)) for k, v in owner.items() if not k.startswith("_"))
        return values + tuple(cells) + attributes

    def _key(self, signature: tuple, inputs: list[Tensor], grads: tuple) -> tuple:
        modes = tuple(getattr(owner, name) for owner, name in self._modes)
        # Which inputs are one tensor passed twice: a recording of step(a, a) reads one buffer
        # for both, so step(b, c) must not replay it.
        first: dict[int, int] = {}
        same = tuple(first.setdefault(id(tensor), k) for k, tensor in enumerate(inputs))
        mode = ("modes", autograd.is_grad_enabled(), modes)
        return (*signature, ("same", same), mode, ("grads", grads), ("free", self._free_values()))

    def _grads(self, inputs: list[Tensor]) -> tuple:
        """What the known gradient holders hold before this call: None, or the kind of array
        ("absent" for an input position this call does not have)."""
        kinds = []
        for holder in self._grad_holders:
            if isinstance(holder, int):
                if holder >= len(inputs):
                    kinds.append("absent")
                    continue
                holder = inputs[holder]
            kinds.append(_grad_kind(holder._grad))
        return tuple(kinds)

    def _learn_grads(self, recorder: Recorder, inputs: list[Tensor], grads: tuple) -> tuple:
        """The grads part of the call's key once the tensors whose earlier gradient this
        recording added to are known holders (before the call, each new one held the gradient
        the recording read)."""
        for leaf, slot in recorder.grads_read:
            position = position_in(leaf, inputs)
            holder = leaf if position is None else position
            if not any(h is holder for h in self._grad_holders):
                self._grad_holders.append(holder)
                grads += (_array_kind(recorder.arrays[slot]),)
        return grads

    def _call(self, args: tuple, kwargs: dict) -> Any:
        if autograd.active_recorder() is not None:  # a replay inside it would go unrecorded
            raise CompileError("compile: a compiled step cannot call another compiled step")
        signature, inputs = _flattened(args, kwargs)
        grads = self._grads(inputs)
        key = self._key(signature, inputs, grads)
        tape = self.tapes.get(key)
        if tape is not None:
            if tape.reads_what_it_recorded():
                return tape.replay(inputs)
            del self.tapes[key]  # a parameter was given new storage, frozen or hooked since
        recorder, result = self._record(inputs, args, kwargs)
        learned = self._learn_grads(recorder, inputs, grads)
        if learned != grads:  # the key of this call, now that its gradient holders are known
            grads, key = learned, self._key(signature, inputs, learned)
        first = self._first.pop(key, None)
        if first is None or _switched_modes(first, recorder):
            if first is not None:  # the same modules in another mode: key on their modes now
                key = self._learn_modes(recorder, signature, inputs, grads, key)
            self._unrepeated += 1
            if len(self._first) >= self.max_signatures:
                self._first.pop(next(iter(self._first)))  # bounded: the oldest goes
            if self._unrepeated > self.max_signatures:
                self._warn_unrepeated()
            self._first[key] = recorder  # the first recording (again, after a mode switch)
            recorder.keep_for_checking()
            return result
        try:
            check_same(first, recorder)
        except CompileError:
            if key in self._started_over:
                raise
            # The first call of a signature may differ from the later ones through state made
            # on first use: gradients that were None (and from then on are zeroed in place, by
            # zero_grad(set_to_none=False)), a buffer built lazily. Compare the next two.
            self._started_over.add(key)
            self._first[key] = recorder
            recorder.keep_for_checking()
            return result
        self._unrepeated = 0
        key = self._learn_modes(recorder, signature, inputs, grads, key)
        if len(self.tapes) >= self.max_signatures:
            self.tapes.pop(next(iter(self.tapes)))  # the oldest signature goes
        outputs = _encode_outputs(result, recorder)
        self.tapes[key] = Tape(recorder, outputs, inputs, graphs=self.cuda_graphs)
        _release_buffers(result, recorder)
        return result

    def _learn_modes(
        self, recorder: Recorder, signature: tuple, inputs: list[Tensor], grads: tuple, key: tuple
    ) -> tuple:
        """The call's key once the recording's modes are part of every key (a recording that
        met modules not seen before adds their modes)."""
        known = self._modes
        new = [(o, n) for o, n in recorder.modes if not any(o is p and n == q for p, q in known)]
        if not new:
            return key
        self._modes = known + new
        return self._key(signature, inputs, grads)

    def _warn_unrepeated(self) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"compile: {self._unrepeated} calls in a row recorded a signature that no "
                "later call repeated, so nothing replays: an argument that changes on every "
                "call (a Python number such as a learning rate, a new object) is part of the "
                "signature, and so are the globals and enclosing variables the step function "
                "reads, a bound method's object's attributes (a counter the step keeps on "
                "self), and the called modules' modes and plain settings (a counter a forward "
                "keeps on its module); pass such a value as a tensor, or keep it out of the "
                "step's arguments, names, object and modules",
                RuntimeWarning,
                stacklevel=4,
            )

    def _record(self, inputs: list[Tensor], args: tuple, kwargs: dict) -> tuple[Recorder, Any]:
        # The step runs on copies of the inputs' arrays: the recording's arrays become the
        # replay's buffers, and the caller's tensors must not be written by later replays.
        given = [tensor.array for tensor in inputs]
        for tensor in inputs:
            tensor.array = backend.copied(tensor.array)
        recorder = Recorder(inputs)
        previous = autograd.set_recorder(recorder)
        reseeds = backend.reseeds()
        try:
            result = self.step(*args, **kwargs)
            _encode_outputs(result, recorder)  # an unsupported result fails now, not later
            recorder.returned = _returned_values(result)
            if backend.reseeds() != reseeds:
                raise CompileError(
                    "compile: the step seeds or sets the random generator (manual_seed, "
                    "set_rng_state); a replay would not, and would draw other numbers than "
                    "eager; seed before calling the step instead"
                )
        finally:
            autograd.set_recorder(previous)
            recorder.mode_values = [getattr(owner, name) for owner, name in recorder.modes]
            written = dict(written_inputs(recorder.tape, recorder.arrays, len(inputs)))
            for position, (tensor, array) in enumerate(zip(inputs, given, strict=True)):
                if position in written:
                    backend.copy_into(array, tensor.array)  # the step wrote into its input
                tensor.array = array
        return recorder, result


def _grad_kind(grad: Tensor | None) -> tuple | None:
    return None if grad is None else _array_kind(grad.array)


def _array_kind(array: Any) -> tuple:
    return (type(array), backend.device_of(array), array.shape, array.dtype)


def _switched_modes(first: Recorder, second: Recorder) -> bool:
    """Whether the two recordings called the same modules (by identity) in another mode or
    holding other parameters: the caller switched between the calls (``model.eval()``), so the
    second recording starts over rather than being checked against the first. Other modules
    in each call (made inside the step) are left to `check_same`."""
    if len(first.modes) != len(second.modes):
        return False
    if any(a[0] is not b[0] or a[1] != b[1] for a, b in zip(first.modes, second.modes)):
        return False
    return first.mode_values != second.mode_values


def _release_buffers(result: Any, recorder: Recorder) -> None:
    """After the recording that became a tape: the tensors it handed out (its result, the
    gradients, those given to hooks) get copies of their arrays, which are now buffers that
    every replay rewrites."""
    made = {id(a) for a, m in zip(recorder.arrays, recorder.made) if m}
    tensors = [t for t in _tensors_in(result)]
    tensors += [e[1].grad for e in recorder.tape if e[0] == "grad" and e[1].grad is not None]
    tensors += recorder.hooked
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
    signature run eagerly while recording and checking (three, when the first call differs
    from the second through state made on first use); later calls replay the recording. On
    CuPy, with `cuda_graphs`, each run of array work between Python calls (the optimizer's step)
    is captured once as a CUDA graph and then launched as one. See docs/performance.md, "How the
    fast path works".
    """
    if step is None:
        return lambda f: CompiledStep(f, max_signatures, cuda_graphs)
    return CompiledStep(step, max_signatures, cuda_graphs)


__all__ = ["CompileError", "CompiledStep", "Recorder", "compile"]
