"""Recording for ``ta.compile``: the `Recorder` that writes a step's tape, and `check_same`.

Imports `backend`, `tensor`, `replay` and `replay_kernels`; `compiler` drives it. While a step is
recorded, `Function.apply`, the engine and the backend report every op, backward rule, gradient,
in-place write, draw and replayed call to the thread's `Recorder`, which keeps them as entries of
a tape over numbered slots (an array per slot). Two recordings of one signature can share one tape
only if `check_same` finds them alike: the same entries with the same arguments, and every array
no entry made the same array or equal in value. Whatever would replay wrongly raises
`CompileError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import backend
from ..tensor import Tensor
from .replay import entry_name, let_go, position_in, reads_and_writes
from .replay_kernels import Slot, rebuilt


class CompileError(RuntimeError):
    """A step cannot be replayed faithfully; the message says which op or call and why."""


class OutputOf:
    """One output of an op with several outputs (a split's pieces), taped as an op of its own:
    its forward runs the op's forward and keeps output `index`. A piece that is a view of its
    input is then dropped from the replay like any other view. One subclass per op class, so
    that two recordings' entries compare by the op they come from."""

    __slots__ = ("fn", "index", "inputs", "_saved")
    _classes: dict[type, type] = {}

    @classmethod
    def of(cls, fn: Any, index: int) -> OutputOf:
        kind = cls._classes.get(type(fn))
        if kind is None:
            name = f"{type(fn).__name__}Output"
            kind = cls._classes[type(fn)] = type(name, (cls,), {"__slots__": ()})
        entry = kind()
        entry.fn, entry.index, entry.inputs, entry._saved = fn, index, fn.inputs, None
        return entry

    @property
    def _seq(self) -> int:  # `let_go` releases graph nodes: this one releases its op's
        return self.fn._seq

    @property
    def name(self) -> str:
        return f"{self.fn.name} output {self.index}"

    def forward(self, *arrays: Any, **kwargs: Any) -> Any:
        return self.fn.forward(*arrays, **kwargs)[self.index]

    def reads_host(self) -> bool:
        return self.fn.reads_host()

    def release(self, entirely: bool = True) -> None:
        self.inputs = None
        if hasattr(self.fn, "_seq"):
            self.fn.release(entirely=True)


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
        self.flags: list[tuple[Tensor, bool]] = []  # each owner and its requires_grad, at the end
        # (leaf, slot): a gradient the leaf held before the call, which backward added to. Like
        # an input, each replay reads the leaf's gradient of the moment into this slot.
        self.grads_read: list[tuple[Tensor, int]] = []
        self.grads_set: dict[int, Tensor] = {}  # tensors whose .grad the step assigned
        # The leaf whose .grad the step assigned last (``p.grad = None`` in ``zero_grad``): the
        # setter reports before it stores the value, so the next report records the assignment.
        self._assigned: Tensor | None = None
        # Arrays the step made from Python values (ta.zeros, ta.tensor(data)), by id (kept
        # alive, so ids stay unique), and of those the slots written in place, with the values
        # they had before the first write: a replay starts each from those values again, as
        # eager makes the array anew on every call (a one-hot built by index assignment).
        self.made_from_values: dict[int, Any] = {}
        self.fresh: dict[int, Any] = {}
        self.reached: set[int] = set()  # ids of the graph nodes whose rule the step's backward ran
        self.in_hook = 0  # > 0 while a gradient hook runs
        self.hooked: list[Tensor] = []  # gradients handed to hooks replayed as calls
        self.hook_host_reads = 0  # values hooks read into Python
        self.guards: list = []  # the Python values the step's code read (`guards`)
        # A function whose backward runs outside it (``ta.compile(model)``): the recorded
        # backward from seed gradients, kept after the forward's entries (`replay.GraphPart`).
        self.graph: Any = None
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
        self.settle_assignment()
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
        if type(data) is tuple:
            self._several_outputs(fn, data, in_slots, template, dynamic)
            return data
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

    def _several_outputs(
        self, fn: Any, data: tuple, in_slots: list, template: dict, dynamic: bool
    ) -> None:
        """An op with several outputs is recorded as one entry per output (`OutputOf`)."""
        if getattr(fn, "_saved", None):
            raise CompileError(
                f"compile: {fn.name} has several outputs and saves values for its backward, "
                "which ta.compile cannot yet replay; run this step eagerly"
            )
        for index, array in enumerate(data):
            out = self._new_slot(array, made=True)
            self.tape.append(("op", OutputOf.of(fn, index), in_slots, template, dynamic, out, []))

    def rule(self, fn: Any, grad: Any, output: Any, run: Callable[[], tuple]) -> tuple:
        """Run one backward rule. Ops inside it are recorded as usual; a rule that uses arrays
        no recorded op made (raw array code) is recorded as one call of the rule instead."""
        if self.suspended:
            return run()
        self.settle_assignment()
        self.reached.add(id(fn))
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
        if isinstance(grad, list | tuple):  # several outputs: one gradient slot is not enough
            raise CompileError(
                f"compile: {fn.name} backward is the rule of an op with several outputs, which "
                "ta.compile cannot yet replay as one call (an output without a gradient, or a "
                "rule on raw arrays); use every output, or run this step eagerly"
            )
        del self.tape[mark:]  # replay the rule itself, with its inputs' arrays refreshed
        for slot in range(first_slot, len(self.arrays)):
            self.made[slot] = True  # arrays of the dropped entries: nothing reads them now
        refresh = []
        for tensor in fn.inputs:  # (a `ReleasedConstant` an op did not keep has no array)
            slot = self.slot_of.get(id(getattr(tensor, "array", None)))
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
        self.settle_assignment()
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
                    "not follow what it computed from the value. Compute the new gradient with "
                    "tensor ops only, or return None from the hook (it then replays as a call)"
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
        if self.suspended:
            return
        if self._assigned is leaf:
            self._assigned = None  # the engine's own store, which this entry records
        self.settle_assignment()
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
        """``tensor.grad`` is about to be assigned (by the step, or by the engine, which then
        reports `set_grad`). A leaf's assignment is part of the step's effects: ``zero_grad()``
        after ``optimizer.step()`` leaves None in eager, so a replay must too."""
        if self.suspended:
            return
        self.settle_assignment()
        self.grads_set[id(tensor)] = tensor
        if tensor.is_leaf:  # a non-leaf's .grad (retain_grad) dies with the call's graph
            self._assigned = tensor

    def settle_assignment(self) -> None:
        """Record the ``.grad`` assignment reported last, now that the setter has stored its
        value: None, or the assigned tensor's array (new zeros from ``zero_grad(set_to_none=
        False)``, a constant; a gradient computed by recorded ops, a buffer)."""
        leaf, self._assigned = self._assigned, None
        if leaf is not None:
            grad = leaf._grad
            self.tape.append(("assign", leaf, None if grad is None else self._slot(grad.array)))

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
        self.settle_assignment()
        self.tape.append(("draw", function, args, self._new_slot(result, made=True)))

    def call(self, function: Callable, args: tuple, kwargs: dict) -> Any:
        """Run a call that replays as Python (an optimizer step); record it with its result."""
        if self.suspended:
            return function(*args, **kwargs)
        self.settle_assignment()
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
                "whose array cannot be written (a 0-d NumPy scalar); a replay could not repeat "
                "it. Write out of place (y = y + v), or keep the value in a tensor of shape (1,)"
            )
        self.settle_assignment()
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
        # The forward's graph of a function whose backward runs outside it is the caller's to
        # backward through (and to free); only the recorded backward's ops are let go.
        let_go(self.tape if self.graph is None else self.tape[self.graph.split :])
        self.arrays = [None if made else a for a, made in zip(self.arrays, self.made, strict=True)]

    def python_write(self, what: str) -> None:
        if not self.suspended:
            raise CompileError(
                f"compile: the step sets {what} while it is recorded; a replay runs no Python "
                "of the step and would keep the recorded value (a learning rate set by hand "
                "would never change again). Set it outside the step, before calling it, or use "
                "an lr_scheduler, whose step() is replayed"
            )

    def module_hooks(self, module: str) -> None:
        if not self.suspended:
            raise CompileError(
                f"compile: the step calls a {module} with module hooks (register_forward_hook "
                "and the like) while it is recorded; a replay runs no Python of the step, so "
                "the hooks would run only once. Remove them (handle.remove()) before compiling, "
                "or call the model uncompiled while they are needed"
            )

    def host_read(self, what: str) -> None:
        if self.in_hook:
            self.hook_host_reads += 1
            return
        if self.suspended:
            return
        if "depends on the values" in what:  # nonzero(), x[mask]: a shape no tape can fix
            raise CompileError(
                f"compile: the step calls {what} while it is recorded; a replay keeps the "
                "recorded shape, and the next batch may need another. Use an op of fixed shape "
                "(ta.where, masked_fill, a mask multiplied in), or call it outside the step"
            )
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
            "values or Python state, so no single recording can replay it. Take the branch "
            "outside the step (compile each branch as a step of its own), or pass what decides "
            "it as an argument (each value then records its own tape)"
        )
    for position, (a, b) in enumerate(zip(first.tape, second.tape)):
        if not _same_entry(a, b):
            raise CompileError(
                f"compile: operation {position} differs between two calls with the same input "
                f"shapes ({entry_name(a)} vs {entry_name(b)}{_difference(a, b)}): the step "
                "depends on values or Python state the tape cannot see. Pass such a value as a "
                "tensor argument (its value is then data), or keep it fixed while the compiled "
                "step runs"
            )
    _check_arrays(first, second)


def _difference(a: tuple, b: tuple) -> str:
    """What differs between two op entries of one kind: their keyword arguments, or inputs."""
    if a[0] != "op" or b[0] != "op" or type(a[1]) is not type(b[1]):
        return ""
    if a[2] != b[2]:
        return f"; inputs from slots {a[2]} vs {b[2]}"
    changed = [
        k for k in a[3].keys() | b[3].keys() if not _same_kwargs({k: a[3].get(k)}, {k: b[3].get(k)})
    ]
    return "".join(f"; {k}={a[3].get(k)!r} vs {k}={b[3].get(k)!r}" for k in sorted(changed))


def _same_entry(a: tuple, b: tuple) -> bool:
    """Whether two recordings' entries at one position replay alike."""
    if a[0] != b[0] or (a[0] in ("op", "rule") and type(a[1]) is not type(b[1])):
        return False
    if a[0] == "op":
        return a[2] == b[2] and _same_kwargs(a[3], b[3])
    if a[0] == "assign":  # the same value: None, or the same slot
        return a[2] == b[2]
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
        raise CompileError(
            f"compile: two calls with the same input shapes read different numbers of arrays "
            f"({len(first.arrays)} and {len(second.arrays)}): the step makes or reads arrays "
            "depending on values or Python state the tape cannot see. Keep what the step reads "
            "the same from call to call, or pass it as a tensor argument"
        )
    read_grads = _grad_holders(first)
    if read_grads != _grad_holders(second):
        raise CompileError(
            "compile: two calls with the same input shapes added to the gradients of different "
            "tensors held from before the call (gradient accumulation over calls); a replay "
            "reads one set of them. Give every accumulated tensor a gradient, or clear them "
            "all (zero_grad()), before each call"
        )
    inputs_of_grads = {slot for _, slot in first.grads_read}  # read anew by every replay
    if first.graph is not None:  # seed gradients: written by each backward replay
        inputs_of_grads.update(s for s in first.graph.seed_slots if s is not None)
    if first.fresh.keys() != second.fresh.keys():
        raise CompileError(
            "compile: two calls with the same input shapes wrote in place into different arrays "
            "they made from Python values; a replay repeats one set of writes. Make the same "
            "writes on every call, or write out of place"
        )
    for slot, (a, b) in enumerate(zip(first.arrays, second.arrays)):
        if first.made[slot] != second.made[slot]:
            raise CompileError(
                f"compile: array {slot} is made by a recorded op in one call and read as it is "
                "(a parameter, a constant) in the other; the step depends on Python state the "
                "tape cannot see. Keep what the step reads the same from call to call"
            )
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
                "replayed stale. Make it with tensor ops inside the step, pass it as a tensor "
                "argument, or update the parameter in place (with ta.no_grad(): p.copy_(new))"
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


def returned_values(value: Any) -> list[Any]:
    """The Python values among a step's results (a replay returns them as recorded)."""
    if isinstance(value, Tensor):
        return []
    if isinstance(value, tuple | list):
        return [v for item in value for v in returned_values(item)]
    if isinstance(value, dict):
        return [v for item in value.values() for v in returned_values(item)]
    return [value]


def encode_outputs(value: Any, recorder: Recorder) -> Any:
    if isinstance(value, Tensor):
        return Slot(recorder._slot(value.array))
    if isinstance(value, tuple | list):
        return type(value)(encode_outputs(v, recorder) for v in value)
    if isinstance(value, dict):
        return {k: encode_outputs(v, recorder) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise CompileError(
        f"compile: the step returned a {type(value).__name__}; return tensors, numbers, or "
        "tuples, lists and dicts of them"
    )
