"""The replay half of ``ta.compile``: a checked recording as a program of array calls.

Imports `backend`, `autograd`, `tensor` and `replay_kernels` (the out= kernels); `compiler` (which
records and checks) builds a `Tape` from its second recording. The recording's own arrays are the
buffers: every replay writes each result into the array the recording made for it, so views of
buffers stay valid and are not made again, simple ops write with ``out=``, and addresses stay
fixed for CUDA graphs. Buffers never alive at once share one array (`MemoryPlan`). The program
is cut into segments, runs of array work and the Python between them; on CuPy each run of array
work is captured once as a CUDA graph and launched as one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from .. import autograd, backend, ops
from ..tensor import Tensor
from . import codegen_cpu
from .fusion import fuse_program
from .replay_kernels import (
    Slot,
    filler,
    kernel_run,
    lowered,
    lowered_index_add,
    lowered_take,
    slots_in,
)


def entry_name(entry: tuple) -> str:
    kind = entry[0]
    if kind in ("op", "rule"):
        return f"{type(entry[1]).__name__} {'forward' if kind == 'op' else 'backward'}"
    if kind == "call":
        return f"call of {getattr(entry[1], '__qualname__', entry[1])}"
    if kind == "store":
        return f"the in-place {entry[3]}"
    if kind == "hook":
        return f"hook {getattr(entry[1], '__qualname__', entry[1])}"
    if kind == "assign":
        return "assignment to .grad"
    if kind == "fused":
        return f"fused {entry[1].kind} ({', '.join(entry[1].labels)})"
    return kind


def position_in(tensor: Any, inputs: list) -> int | None:
    """Where `tensor` (by identity) is among a step's inputs, or None."""
    return next((k for k, t in enumerate(inputs) if t is tensor), None)


class Tape:
    """A checked recording (a `compiler.Recorder`), replayed on new input arrays.

    The recording's own arrays are the replay's buffers. Every array an entry made is written
    again, in place, by the same entry on every replay, so an array that is a view of another
    (a reshape, a transpose, ``W.T``) stays that view and need not be made again: those entries
    are dropped. An entry whose result cannot be written in place (a NumPy scalar, a read-only
    broadcast) makes a new array each time, and the views of it are made again too.
    """

    def __init__(
        self,
        recorder: Any,
        outputs: Any,
        inputs: list[Tensor],
        graphs: bool = True,
        fuse: bool = False,
    ) -> None:
        self.entries = recorder.tape
        self.fuse = fuse  # runs of elementwise items as generated kernels (`fusion`)
        self.check_fusion = [False]  # set: the next replay checks each fused group (`verify`)
        # A function whose backward runs outside it: the entries from `graph.split` on are the
        # recorded backward, replayed by `replay_backward` when the caller's backward reaches
        # the call; `replays` numbers the forward replays (a backward checks its own is last).
        self.graph: GraphPart | None = recorder.graph
        self.replays = 0
        self.calls = 0  # calls that found this tape (replayed, or recorded again to verify it)
        self.verified = 0  # of those, the calls that recorded again (`verify_every`)
        self.guards: list = recorder.guards  # Python values the step read (guards)
        self.checked: Any = None  # the recording it was built from, trimmed (verification)
        self.outputs = outputs  # the step's result, with Tensors replaced by slots
        self.env = list(recorder.arrays)  # slot -> its buffer (or its latest array, if dynamic)
        # Gradients from before the call that backward added to: each replay copies the leaf's
        # gradient of the moment into the slot, a private copy (the recorded array is the old
        # gradient tensor's, which its holder may still read).
        self._grads_read = [
            (leaf, slot, position_in(leaf, inputs)) for leaf, slot in recorder.grads_read
        ]
        for _, slot, _ in self._grads_read:
            self.env[slot] = backend.copied(self.env[slot])
        # Arrays the step made from Python values and then wrote into: each replay starts them
        # from the values they were made with, as eager makes them anew (a private copy: the
        # recorded one may still be held).
        self._remade = list(recorder.fresh.items())
        for slot, _ in self._remade:
            self.env[slot] = backend.copied(self.env[slot])
        self._inputs = inputs  # the recorded call's tensors: a gradient of one goes to the new
        self._replayed_inputs: list[Tensor] = inputs
        self._handed: list[Tensor] = []  # gradients handed out by this replay, on buffers
        self._roots = [backend.storage_root(a) if hasattr(a, "shape") else None for a in self.env]
        first_slot_of_root: dict[int, int] = {}
        for slot, root in enumerate(self._roots):
            first_slot_of_root.setdefault(root, slot)
        self._first_of_root = first_slot_of_root
        counts: dict[int, int] = {}
        for root in self._roots:
            counts[root] = counts.get(root, 0) + 1
        self._shared = [counts[root] > 1 for root in self._roots]  # a view uses its memory
        self.graphs = backend.graph_runner(self.env[0]) if self.env and graphs else None
        self._made_by = {id(e[1]): e for e in self.entries if e[0] == "op"}
        self._drawing = recorder.drawing
        # Ops whose backward is replayed as a rule: the rule reads their inputs and saved values.
        self._ruled = {id(e[1]) for e in self.entries if e[0] == "rule"}
        # (constant slot, the tensor holding it, whether it required grad, its hooks)
        read_grads = {slot for _, slot, _ in self._grads_read} | dict(self._remade).keys()
        self._owners = [
            (slot, t, t.requires_grad, list(t._hooks or ()))
            for slot, t in recorder.owners.items()
            if slot not in read_grads
        ]
        self._written_inputs = written_inputs(self.entries, self.env, len(inputs))
        # The graph of the recording this tape is built from is also the caller's, whose
        # backward (through a function compiled without its backward) may still come: it is
        # let go at the first replay instead.
        self._unreleased = self.graph is not None
        if not self._unreleased:
            let_go(self.entries, keep=self._ruled)
        self.last_use: dict[int, int] = {}  # slot -> the last entry reading it (fusion)
        if fuse:  # a fused kernel stores only the results read after its run
            _, last, read_first, pinned = _lives(self, recorder.made, len(inputs))
            self.last_use = {s: p for s, p in last.items() if s not in pinned | read_first}
        self._build()
        # Pass two: with the program's writers known, buffers whose lifetimes do not overlap
        # share memory, and the program is built again on the shared buffers.
        plan = MemoryPlan(self, recorder.made, len(inputs))
        if plan.shared or plan.moved:
            self.env = plan.env
            self._build()
        self.shared_buffers = plan.shared  # slots whose memory another slot also uses
        if self.graphs is None:
            self._release_after_last_use(plan.last_use)

    def _build(self) -> None:
        """Turn the entries into program items on the current buffers (`env`)."""
        self.static = [True] * len(self.env)
        self.program: list[Callable[[list], None]] = []
        self.dropped = 0  # entries replaced by the views they recorded
        self.lowered = 0  # ops replayed as out= kernels
        builders = {"op": self._op, "rule": self._rule, "grad": self._grad, "store": self._store}
        builders.update(draw=self._draw, call=self._call, hook=self._hook, assign=self._assign)
        self.labels: list[str] = []  # what each program item replays, for reading and profiling
        self._item_of: dict[int, int] = {}  # entry position -> its program item
        built = []
        for position, entry in enumerate(self.entries):
            lowered = self.lowered
            run = builders[entry[0]](entry)
            if run is not None:
                label = entry_name(entry) + (" (out=)" if self.lowered > lowered else "")
                built.append((position, run, entry, position in self._drawing, label))
        # Runs of elementwise and row-wise items as one generated kernel each (`fusion`).
        program = [([position], *rest) for position, *rest in built]
        self.groups: list = []
        if self.fuse:
            program, self.groups = fuse_program(self, built, codegen_cpu.compile_kernel)
        items = []
        for positions, run, entry, draws, label in program:
            for position in positions:
                self._item_of[position] = len(self.program)
            self.program.append(run)
            self.labels.append(label)
            items.append((run, entry, draws))
        self._items = items
        self._cut(items)

    def _cut(self, items: list[tuple]) -> None:
        """The segments of the program: all of it, or the forward's and the backward's."""
        split = len(self.entries) if self.graph is None else self.graph.split
        position_of = {item: position for position, item in self._item_of.items()}
        forward = [item for k, item in enumerate(items) if position_of[k] < split]
        backward = [item for k, item in enumerate(items) if position_of[k] >= split]
        self.segments = _segments(forward, self.static)
        self.backward_segments = _segments(backward, self.static)

    def _release_after_last_use(self, last_use: dict[int, int]) -> None:
        """Forget each result held anew on every replay once its last reader has run, so the
        array library can hand its memory to the next result while it is still in cache."""
        after: dict[int, list[int]] = {}
        for slot, position in last_use.items():
            item = self._item_of.get(position)
            if item is not None and not self.static[slot]:
                after.setdefault(item, []).append(slot)
        for item, slots in after.items():
            self.program[item] = _then_forget(self.program[item], slots)
        items = [(self.program[k], entry, draws) for k, (_, entry, draws) in enumerate(self._items)]
        self._cut(items)

    # ------------------------------------------------------------------------ planning
    def _fresh(self, slot: int) -> bool:
        """Whether `slot`'s recorded array owns memory no earlier slot uses: a buffer."""
        return self._first_of_root.get(self._roots[slot]) == slot and backend.is_buffer(
            self.env[slot]
        )

    def _writer(self, slot: int) -> Callable[[Any], None]:
        """How a new result for `slot` is kept: copied into its buffer when something needs that
        buffer's address (a recorded view of it, a CUDA graph), else held as it is (no copy;
        the views of a held slot are made again, and no graph reads it from outside)."""
        env = self.env
        if self._fresh(slot) and (self.graphs is not None or self._shared[slot]):
            buffer = env[slot]
            return lambda value: backend.copy_into(buffer, value)
        self.static[slot] = False

        def hold(value: Any) -> None:
            env[slot] = value

        return hold

    def _op(self, entry: tuple) -> Callable | None:
        _, fn, in_slots, kwargs, dynamic, out, saved_slots = entry
        env = self.env
        if _is_view_of_input(self, entry):
            if _is_dropped_view(self, entry):
                self.dropped += 1  # a view of arrays that stay where they are: it stays valid
                return None
        elif self._fresh(out) and (saved := self._saved_buffers(fn, saved_slots)) is not None:
            if dynamic:  # lowered ops with an array among their arguments: x[index], its adjoint
                run = None
                if not saved:
                    lower = lowered_index_add if type(fn) is ops.IndexAdd else lowered_take
                    run = lower(fn, kwargs, env[in_slots[0]], env[out], in_slots[0])
            else:
                kernel = lowered(fn, [env[i] for i in in_slots], env[out], kwargs, saved)
                run = None if kernel is None else kernel_run(kernel, env[out], in_slots)
            if run is not None:
                if id(fn) in self._ruled:  # its replayed rule reads the buffers written here
                    by_position = dict(zip([p for p, _ in saved_slots], saved, strict=True))
                    fn._saved = tuple(by_position[p] for p in range(len(saved)))
                self.lowered += 1
                return run
        write = self._writer(out)
        saved_writes = [(position, self._writer(slot)) for position, slot in saved_slots]
        forward = fn.forward
        fillers = {k: filler(v) for k, v in kwargs.items()} if dynamic else {}

        def run(env: list) -> None:
            args = kwargs if not dynamic else {k: fill(env) for k, fill in fillers.items()}
            write(forward(*[env[i] for i in in_slots], **args))
            if saved_writes:
                saved = fn._saved
                for position, keep in saved_writes:
                    keep(saved[position])

        return run

    def _saved_buffers(self, fn: Any, saved_slots: list) -> list | None:
        """The buffers a lowered kernel writes `fn`'s saved values into (none when it saves
        none), or None when they must come from its `forward`: a replayed rule reads them from
        ``fn._saved``, or a buffer is not the array's own memory."""
        if not saved_slots:
            return []
        if not all(self._fresh(slot) for _, slot in saved_slots):
            return None
        if id(fn) in self._ruled and sorted(position for position, _ in saved_slots) != list(
            range(len(fn._saved or ()))
        ):  # a replayed rule reads fn._saved: the buffers must be all of it
            return None
        return [self.env[slot] for _, slot in saved_slots]

    def _rule(self, entry: tuple) -> Callable:
        _, fn, grad_slot, output_slot, refresh, out_slots = entry
        writes = [None if slot is None else self._writer(slot) for slot in out_slots]

        def run(env: list) -> None:
            # The rule reads its inputs' arrays: this replay's, for the time of the call. They
            # are given back after it, because an input may be the caller's own tensor (a step's
            # argument from the recorded call), whose values must not change.
            given = [(t, t.array) for t, slot in zip(fn.inputs, refresh) if slot is not None]
            for tensor, slot in zip(fn.inputs, refresh):
                if slot is not None:
                    tensor.array = env[slot]
            fn.output = Tensor._from_op(env[output_slot], None)
            try:
                grads = fn.backward(Tensor._from_op(env[grad_slot], None))
            finally:
                fn.output = None
                for tensor, array in given:
                    tensor.array = array
            grads = grads if isinstance(grads, tuple | list) else (grads,)
            for grad, write in zip(grads, writes):
                if write is not None:
                    write(grad.array if isinstance(grad, Tensor) else grad)

        return run

    def _grad(self, entry: tuple) -> Callable:
        _, leaf, slot = entry
        position = position_in(leaf, self._inputs)

        def run(env: list) -> None:
            # The buffer itself while the replay runs, as eager's .grad is the engine's array:
            # the step's own in-place writes to it (p.grad.zero_()) and the calls replayed as
            # Python (clip_grad_norm_) act on what the recorded ops read. The replay gives it
            # a copy when it ends: the next replay writes the buffer again.
            target = leaf if position is None else self._replayed_inputs[position]
            grad = None if slot is None else Tensor._from_op(env[slot], None)
            if autograd.recording.recorder is None:
                target._grad = grad  # the buffer has the leaf's shape, dtype and device
            else:  # another thread records: the setter tells its recording
                target.grad = grad
            if grad is not None:
                self._handed.append(grad)

        return run

    def _assign(self, entry: tuple) -> Callable:
        """The step assigned a leaf's ``.grad`` (``zero_grad()``): None, or the recorded value's
        slot, handed over as the engine's gradients are."""
        return self._grad(entry)

    def _hook(self, entry: tuple) -> Callable:
        _, hook, slot = entry

        def run(env: list) -> None:
            # A copy, as eager hands the hook a gradient of its own (it may keep it).
            if hook(Tensor._from_op(backend.copied(env[slot]), None)) is not None:
                raise RuntimeError(
                    f"compile: the gradient hook {getattr(hook, '__qualname__', hook)} returned "
                    "a tensor on a replay but None while the step was recorded; a replay "
                    "calls a hook that returned None for its side effects only, and cannot use "
                    "its result. Make the hook return None on every call, or a tensor on every "
                    "call (its ops are then recorded)"
                )

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
    def reads_what_it_recorded(self) -> bool:
        """Whether every parameter and buffer the tape reads is as it was recorded: it still
        holds the array it recorded (``p.data = t`` or ``module.to(...)`` gives a tensor a new
        one: the tape would read the old one), still requires grad as it did (a layer frozen
        after compiling must get no gradient, and the tape would hand it one), and has the
        same gradient hooks (one registered later would not run in a replay)."""
        env = self.env
        return all(
            tensor.array is env[slot]
            and tensor.requires_grad == wanted
            and (tensor._hooks == hooks if tensor._hooks or hooks else True)
            for slot, tensor, wanted, hooks in self._owners
        )

    def replay(self, inputs: list[Tensor], given: Callable[[list], dict] | None = None) -> Any:
        """Run the program (a function's forward only, with `graph`) on new inputs; returns the
        step's result, holding copies of the buffers, or for the slots in ``given(env)`` the
        tensors it gives (a forward's outputs in the caller's graph)."""
        env = self.env
        self._replayed_inputs = inputs
        self.replays += 1
        if self._unreleased:
            self._unreleased = False
            let_go(self.entries, keep=self._ruled)
        with self.graphs if self.graphs is not None else contextlib.nullcontext():
            for position, tensor in enumerate(inputs):
                backend.copy_into(env[position], tensor.array)
            for leaf, slot, position in self._grads_read:
                holder = leaf if position is None else inputs[position]
                backend.copy_into(env[slot], holder._grad.array)
            for slot, made_with in self._remade:
                backend.copy_into(env[slot], made_with)
            try:
                with autograd.no_grad():
                    for segment in self.segments:
                        segment.run(env, self.graphs)
            finally:
                self.check_fusion[0] = False  # checked once, after a verifying call
                for grad in self._handed:  # the gradients handed out get memory of their own
                    grad.array = backend.copied(grad.array)
                self._handed.clear()
            for position, writes in self._written_inputs:
                # The step wrote into this input in place: so does its replay, as eager would.
                backend.copy_into(inputs[position].array, env[position])
                inputs[position]._version_counter[0] += writes
        return rebuild(self.outputs, env, given(env) if given is not None else {})

    def replay_backward(self, grads: list) -> list:
        """Run the recorded backward of a function on its outputs' gradients (arrays, None for
        zeros): the gradients of its inputs and parameters, as copies (None where unused)."""
        env, graph = self.env, self.graph
        with self.graphs if self.graphs is not None else contextlib.nullcontext():
            for slot, grad in zip(graph.seed_slots, grads, strict=True):
                if slot is None:
                    continue  # nothing in the backward reads this output's gradient
                if grad is None:
                    env[slot][...] = 0
                else:
                    backend.copy_into(env[slot], grad)
            with autograd.no_grad():
                for segment in self.backward_segments:
                    segment.run(env, self.graphs)
            return [
                None if slot is None else backend.copied(env[slot]) for slot in graph.grad_slots
            ]


class GraphPart:
    """Where a recording of a function whose backward runs outside it (``ta.compile(model)``)
    keeps that backward: entries from `split` on, reading the outputs' gradients from
    `seed_slots` and leaving the gradients of `wrt` (step inputs by position, or tensors such as
    parameters) in `grad_slots`; `outputs` are the slots of the outputs that carry a graph."""

    def __init__(self, split: int, outputs: list, seeds: list, grads: list, wrt: list) -> None:
        self.split, self.out_slots, self.seed_slots = split, outputs, seeds
        self.grad_slots, self.wrt = grads, wrt
        self.eager: tuple = ()  # (outputs, wrt) of the recording's own graph


def written_inputs(entries: list[tuple], arrays: list, inputs: int) -> list[tuple[int, int]]:
    """(position, writes) for each of the first `inputs` slots that the recorded in-place
    writes reach, directly or through a view of it (``x.add_(1)``, ``x[1:].zero_()``), with the
    number of such writes: the caller's tensor gets the new values and its version goes up as
    many times, as eager would."""
    roots = [backend.storage_root(arrays[p]) for p in range(inputs)]
    writes = [0] * inputs
    for entry in entries:
        if entry[0] == "store":
            target = backend.storage_root(arrays[entry[1]])
            for position, root in enumerate(roots):
                writes[position] += root == target
    return [(position, count) for position, count in enumerate(writes) if count]


def let_go(entries: list[tuple], keep: set[int] | frozenset = frozenset()) -> None:
    """Free what a recording's ops hold once their entries are only replayed (or dropped).

    The recording keeps its graph whole (a rule it replays needs its node's inputs), and the
    ops run inside backward rules keep the input Tensors they were called with: as long as the
    tape, or a tensor the recording handed out, lived, so would the recording's arrays. Graph
    nodes are released whole (a backward keeps one that saved nothing, to walk it again); the
    other ops (replayed by `forward`, which takes arrays) drop their inputs. `keep`: ids of the
    Functions whose rules are replayed.
    """
    for entry in entries:
        fn = entry[1]
        if entry[0] != "op" or id(fn) in keep:
            continue
        if hasattr(fn, "_seq"):  # a graph node (Function.apply numbered it): all of it
            fn.release(entirely=True)
        else:  # a replay sets its saved values again, right before it reads them
            fn.inputs = None
            fn._saved = None


def reads_and_writes(entry: tuple, made_by: dict) -> tuple[set, set]:
    """The slots a program item reads and the slots it writes."""
    kind = entry[0]
    if kind == "op":
        _, fn, in_slots, kwargs, _, out, saved_slots = entry
        kwarg_slots = set()

        def walk(value: Any) -> None:
            if isinstance(value, Slot):
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
    if kind == "fused":  # a fused group: the buffers its kernel reads and writes
        return set(entry[2]), set(entry[3])
    return set(), set()


class MemoryPlan:
    """Which buffers can share memory: the replay's version of an allocator handing freed memory
    back, planned once instead of on every call.

    A recording keeps every result in its own array, so a step touches all of them once per
    replay and little of it is still in cache when it is read again. A result lives from the
    entry that writes it to the last entry that reads it, or reads a view of it (a reshape, the
    heads of an attention, a transpose): an array and its views are one family with one life.
    Two families whose arrays have the same shape, dtype and library and whose lives do not
    overlap can be one array; the later family's views are then made again, once, on that
    array. Left out of sharing, because they are read or written where the tape cannot see: the
    inputs, arrays the step did not make (parameters, optimizer state), the target of an
    in-place write, anything returned or handed out as a gradient, results of Python calls and
    draws, and arrays that are not row-major or whose views the tape did not make (a view made
    inside an op's forward). `last_use` gives, for every slot with a known life, the entry
    position after which nothing reads it.
    """

    def __init__(self, tape: Tape, made: list[bool], inputs: int) -> None:
        self.env = list(tape.env)
        self.shared: set[int] = set()
        self.moved: set[int] = set()  # owners given new memory of their own
        first, last, read_first, pinned = _lives(tape, made, inputs)
        self.last_use = {s: p for s, p in last.items() if s not in pinned and s not in read_first}
        free: dict[tuple, list[tuple[int, Any]]] = {}  # key -> (free after, buffer)
        for start, end, owner, views, plain in _families(tape, first, last, pinned | read_first):
            array = tape.env[owner]
            if not plain:
                self._move(owner, views)
                continue
            key = (type(array), tuple(array.shape), str(array.dtype), str(array.device))
            pool = free.setdefault(key, [])
            found = next((k for k, (until, _) in enumerate(pool) if until < start), None)
            made_again = None if found is None else self._views_on(owner, pool[found][1], views)
            if made_again is None:
                # A buffer of its own, which later slots may share: new memory, with the
                # family's views made again on it, so that no tensor the recording handed out
                # (one a hook kept, one appended to a list) is written by the replays.
                pool.append((end, self._move(owner, views)))
                continue
            pool[found] = (end, pool[found][1])
            for slot, value in made_again.items():  # the owner's new memory, and its views
                self.env[slot] = value
            self.shared.add(owner)

    def _move(self, owner: int, views: list[tuple] | None) -> Any:
        """Give `owner`'s family new memory of its own, its views made again on it, so that no
        tensor the recording handed out (one a hook kept, one appended to a list) is written by
        the replays; returns the owner's array (the recorded one where the views cannot be made
        again on new memory)."""
        array = self.env[owner]
        own = self._views_on(owner, backend.empty_like(array), views)
        if own is None:
            return array
        for slot, value in own.items():
            self.env[slot] = value
        self.moved.add(owner)
        return own[owner]

    def _views_on(
        self, owner: int, buffer: Any, views: list[tuple] | None
    ) -> dict[int, Any] | None:
        """{slot: array} for the family of `owner` moved to `buffer`: the owner's slot holds
        `buffer`, and each view is made again on it by the op that made it (in tape order); or
        None when that cannot be done (a view that would not land in `buffer`)."""
        if views is None:
            return None
        root, made = backend.storage_root(buffer), {owner: buffer}
        for entry in views:
            _, fn, in_slots, kwargs, _, out, _ = entry
            view = fn.forward(*[made.get(i, self.env[i]) for i in in_slots], **kwargs)
            if not hasattr(view, "shape") or backend.storage_root(view) != root:
                return None
            made[out] = view
        return made


def _lives(tape: Tape, made: list[bool], inputs: int) -> tuple[dict, dict, set, set]:
    """(first write, last read or write) of every slot the tape touches, by entry position; the
    slots read before any write (state carried from call to call); and the pinned slots, read
    or written where the tape cannot see (see `MemoryPlan`)."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    read_first: set[int] = set()
    pinned = set(range(inputs)) | {slot for slot, m in enumerate(made) if not m}
    made_by = tape._made_by
    for position, entry in enumerate(tape.entries):
        kind = entry[0]
        if kind in ("grad", "assign", "draw", "call", "hook"):
            slot = entry[2] if kind in ("grad", "assign", "hook") else entry[-1]
            if slot is not None:
                pinned.add(slot)
            continue
        reads, writes = reads_and_writes(entry, made_by)
        if kind == "rule" and id(entry[1]) in made_by:
            # A rule may read anything its forward read or kept (its own state, not slots).
            reads |= reads_and_writes(made_by[id(entry[1])], made_by)[0]
        if kind == "store":
            pinned.add(entry[1])
        for slot in reads:
            if slot not in first:
                read_first.add(slot)
            last[slot] = position
        for slot in writes:
            first.setdefault(slot, position)
            last[slot] = max(last.get(slot, position), position)
    pinned.update(slots_in(tape.outputs))
    if tape.graph is not None:  # a backward's results, copied out after it ends
        pinned.update(s for s in tape.graph.grad_slots if s is not None)
    return first, last, read_first, pinned


def _families(tape: Tape, first: dict, last: dict, excluded: set) -> list[tuple]:
    """(start, end, owner, views) for every array the tape makes that may share memory, by
    start: the owner is the slot whose array owns the memory, start its first write, end the
    last use of it or any view of it, and views the entries that made those views (dropped
    from the program, made again on a new buffer), or None where one cannot be made again."""
    members: dict[int, list[int]] = {}
    for slot, root in enumerate(tape._roots):
        if root is not None:
            members.setdefault(root, []).append(slot)
    view_entry = {}
    for entry in tape.entries:
        if entry[0] == "op" and _is_dropped_view(tape, entry):
            view_entry[entry[5]] = entry
    families = []
    for root, slots in members.items():
        owner = tape._first_of_root[root]
        if any(s in excluded or s not in first or not tape.static[s] for s in slots):
            continue
        views: list[tuple] | None = [view_entry.get(s) for s in slots if s != owner]
        if any(entry is None for entry in views):
            views = None  # a member the tape did not make as a view of the owner
        end = max(last[s] for s in slots)
        # Whether its memory may serve a later family: the owner's array owns row-major memory
        # (a forward's result may be a reshaped view of an array the tape never saw).
        plain = backend.owns_plain_memory(tape.env[owner])
        families.append((first[owner], end, owner, views, plain))
    families.sort(key=lambda family: family[:3])
    return families


def _is_view_of_input(tape: Tape, entry: tuple) -> bool:
    """Whether an op entry's result shares memory with one of its inputs (and keeps nothing)."""
    _, _, in_slots, _, _, out, saved_slots = entry
    roots = tape._roots
    return not saved_slots and roots[out] in {roots[i] for i in in_slots}


def _is_dropped_view(tape: Tape, entry: tuple) -> bool:
    """Whether `Tape._op` drops this entry: a view of arrays that stay where they are."""
    _, _, in_slots, _, dynamic, _, _ = entry
    return _is_view_of_input(tape, entry) and not dynamic and all(tape.static[i] for i in in_slots)


def _then_forget(run: Callable[[list], None], slots: list[int]) -> Callable[[list], None]:
    def run_and_forget(env: list) -> None:
        run(env)
        for slot in slots:
            env[slot] = None

    return run_and_forget


class _Segment:
    """A run of program items: array work that a CUDA graph can hold (`capturable`), or Python
    (a gradient handed to a leaf, a draw, an optimizer's step) that must run every time."""

    def __init__(
        self, runs: list[Callable], capturable: bool, array_work: bool = True, names: tuple = ()
    ) -> None:
        self.runs = runs
        self.names = names  # what each run replays (`entry_name`), for reading and tests
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
        if kind in ("grad", "assign"):  # in their order: a leaf's assignment follows its store
            grads.append(run)
            continue
        if kind not in ("op", "rule", "store", "fused") or (kind == "op" and entry[1].reads_host()):
            close()  # Python, or an op that reads values back (an index range check)
            name = (entry_name(entry),)
            segments.append(_Segment([run], capturable=False, array_work=False, names=name))
            continue
        if kind == "store" and grads:
            close()  # a write after a gradient was handed out: keep their order
        item_reads, item_writes = reads_and_writes(entry, made_by)
        reads |= item_reads - writes
        writes |= item_writes
        capturable = capturable and not draws
        runs.append(run)
        names.append(entry_name(entry))
    close()
    return segments


def rebuild(value: Any, env: list, given: dict) -> Any:
    """The step's result with each slot's tensor: the one `given` for it, or a copy of its
    buffer (the next replay writes into the buffer again)."""
    if isinstance(value, Slot):
        tensor = given.get(value.index)
        return (
            tensor
            if tensor is not None
            else Tensor._from_op(backend.copied(env[value.index]), None)
        )
    if isinstance(value, tuple | list):
        return type(value)(rebuild(v, env, given) for v in value)
    if isinstance(value, dict):
        return {k: rebuild(v, env, given) for k, v in value.items()}
    return value
