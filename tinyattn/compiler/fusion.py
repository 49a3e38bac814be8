"""Fusion for ``ta.compile``: a run of elementwise and row-wise items as one generated kernel.

Imports `backend`, `ops` and `fused_runs` (the program items that call a kernel); `replay` calls
`fuse_program` while it builds a tape's program, and the code generators (`codegen_cpu`,
`codegen_gpu`) turn the `Group` descriptions made here into source.

A replay of NumPy calls makes one pass over memory per op: ``x * w + b`` reads x, writes a
temporary, reads it back and writes the result. A fused kernel makes one pass for the whole run,
keeping values in registers between items. The description of a run is plain data (a `Group`:
its items with op names, value names and parameters, and the buffers it reads and writes with
their slots, shapes and dtypes), written once; a generator turns it into one library's source.
Rounding may differ from the unfused replay (sums accumulate in another order, ``exp`` comes
from another library): a fused value equals eager's within `tolerance`.

Which runs fuse: consecutive op entries with one result shape and float dtype (the views a
replay drops do not interrupt a run), each writing a buffer of its own, on the host. A row-wise
item (softmax, log-softmax, LayerNorm) ends its run; the elementwise items before it are its
prologue, computed row by row just before it. Cross-entropy is a rows group of its own, over
its logits' rows, whose kernel also sums the rows' losses into its one result. An item with an
operand that overlaps a buffer the run writes, other than as that very buffer, starts a new
run: a fused loop reads and writes every buffer at one index at a time, which only equal
layouts make safe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import backend, ops
from .fused_runs import arguments, fused_run, over
from .fused_runs import tolerance as tolerance  # the contract a fused value meets

# Op class -> the item's op name. By class, not by name: a user's Function "Exp" is not ours.
POINTWISE = {
    ops.Add: "add",
    ops.Sub: "sub",
    ops.Mul: "mul",
    ops.Div: "div",
    ops.Maximum: "maximum",
    ops.Minimum: "minimum",
    ops.Neg: "neg",
    ops.Exp: "exp",
    ops.Log: "log",
    ops.Tanh: "tanh",
    ops.Sqrt: "sqrt",
    ops.Relu: "relu",
    ops.Where: "where",
    ops.AddScalar: "add_scalar",
    ops.MulScalar: "mul_scalar",
    ops.DivScalar: "div_scalar",
    ops.RSubScalar: "rsub_scalar",
    ops.Gelu: "gelu",
}
ROWWISE = {ops.Softmax: "softmax", ops.LogSoftmax: "log_softmax", ops.LayerNorm: "layer_norm"}
ROWWISE[ops.CrossEntropy] = "cross_entropy"  # a row each target, and the loss over all rows
FLOATS = ("float32", "float64")
# A group worth a kernel call: two items or more, or one that is many NumPy passes on its own.
ALONE = {"gelu", "softmax", "log_softmax", "layer_norm", "cross_entropy"}


@dataclass(frozen=True)
class Item:
    """One recorded op inside a group: ``outputs = op(inputs, **params)`` on value names."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, name: str) -> Any:
        return dict(self.params)[name]

    def __str__(self) -> str:
        params = "".join(f", {k}={v!r}" for k, v in self.params)
        return f"{', '.join(self.outputs)} = {self.op}({', '.join(self.inputs)}{params})"


@dataclass
class Buffer:
    """An array a group reads or writes: its parameter name in the kernel, the value it holds,
    its slot on the tape, its shape and dtype, and `per_row` for a value with one element per
    row (LayerNorm's rstd)."""

    name: str
    value: str
    slot: int
    shape: tuple[int, ...]
    dtype: str
    per_row: bool = False
    stored: bool = True  # False: read by nothing after the group, kept in a register only
    walks: tuple[int, ...] = ()  # the loops along which it changes (not broadcast along)


@dataclass
class Group:
    """A run of items fused into one kernel.

    `kind` is "pointwise" (every item elementwise over `shape`) or "rows" (elementwise items
    computed row by row, then one row-wise item over the last axis). `inputs` are read,
    `outputs` written (each an item's value). `loops` is the iteration shape after merging the
    axes every buffer walks alike (a (32, 32, 64) chain of whole arrays is one loop of 65536);
    a rows group keeps the row as its last loop.
    """

    kind: str
    shape: tuple[int, ...]
    dtype: str
    items: list[Item] = field(default_factory=list)
    inputs: list[Buffer] = field(default_factory=list)
    outputs: list[Buffer] = field(default_factory=list)
    loops: tuple[int, ...] = ()
    axes: tuple[tuple[int, ...], ...] = ()  # the axes of `shape` each loop walks
    labels: list[str] = field(default_factory=list)  # the recorded ops, in order

    def buffers(self) -> list[Buffer]:
        """The kernel's parameters, in order: inputs, then the stored outputs."""
        return [*self.inputs, *(b for b in self.outputs if b.stored)]

    def dtype_of(self, value: str) -> str:
        """The dtype of a value: its buffer's, or the group's float dtype for an item's."""
        return next((b.dtype for b in self.inputs if b.value == value), self.dtype)

    def array_of(self, value: str) -> str:
        """The kernel parameter that holds a value (a row-wise item reads its row there)."""
        return next(b.name for b in (*self.inputs, *self.outputs) if b.value == value)

    def describe(self) -> str:
        """The group as text: its shape, what it reads and writes, and its items."""
        lines = [f"{self.kind} group of {len(self.items)} items ({', '.join(self.labels)})"]
        lines.append(f"  over {self.shape} {self.dtype}, loops {self.loops}")
        stored = [b for b in self.outputs if b.stored]
        for role, buffers in (("reads", self.inputs), ("writes", stored)):
            for b in buffers:
                lines.append(f"  {role} {b.name} = {b.value}: slot {b.slot}, {b.shape} {b.dtype}")
        kept = [b.value for b in self.outputs if not b.stored]
        if kept:
            lines.append(f"  keeps in registers only: {', '.join(kept)} (read by nothing after)")
        lines += [f"  {item}" for item in self.items]
        return "\n".join(lines)


# ----------------------------------------------------------------------------------- planning
def item_parts(fn: Any, kwargs: dict) -> tuple[str, tuple] | None:
    """(op name, params) of a recorded op a group can hold, or None."""
    kind = type(fn)
    op = POINTWISE.get(kind) or ROWWISE.get(kind)
    if op is None:
        return None
    if op.endswith("_scalar"):
        c = kwargs.get("c", 0.0 if op == "add_scalar" else 1.0)
        return (op, (("c", c),)) if type(c) in (float, int) else None
    if op in ("softmax", "log_softmax"):
        return op, (("axis", fn.axis),)
    if op == "layer_norm":
        return op, (("eps", fn.eps),)
    if op == "cross_entropy":
        ignore, smoothing = kwargs.get("ignore_index", -100), kwargs.get("smoothing", 0.0)
        reduction = kwargs.get("reduction", "mean")
        if reduction not in ("mean", "sum") or not (ignore is None or type(ignore) is int):
            return None
        params = (("ignore_index", ignore), ("smoothing", float(smoothing)))
        return op, (*params, ("reduction", reduction))
    return op, ()


def fusable(tape: Any, entry: tuple) -> tuple[str, tuple] | None:
    """The op name and params of an entry a group can hold, or None: an op of the table whose
    arrays are NumPy's, whose result and saved values are buffers of their own in a float
    dtype, and whose arrays fit what the generated code assumes."""
    if entry[0] != "op" or entry[4] or id(entry[1]) in tape._ruled:
        return None
    _, fn, in_slots, kwargs, _, out, saved = entry
    parts = item_parts(fn, kwargs)
    env = tape.env
    writes = [out, *(slot for _, slot in saved)]
    if parts is None or not all(backend.is_host_array(env[s]) for s in (*in_slots, *writes)):
        return None
    if parts[0] == "cross_entropy":  # one value from all rows
        ok = _fits_cross_entropy(parts, [env[s] for s in in_slots], env[out], saved, env)
        return parts if ok and all(tape._fresh(slot) for slot in writes) else None
    if env[out].ndim == 0 or env[out].size == 0 or str(env[out].dtype) not in FLOATS:
        return None  # a 0-d result is one value: nothing to fuse a loop over
    if not all(tape._fresh(slot) for slot in writes):
        return None
    return parts if _fits_code(parts, [env[s] for s in in_slots], env[out], saved, env) else None


def _fits_code(parts: tuple, inputs: list, y: Any, saved: list, env: list) -> bool:
    """Whether the op's arrays are what its generated code assumes."""
    op, params = parts
    x = inputs[0]
    if op == "gelu":
        return len(saved) == 1 and x.dtype == y.dtype and str(y.dtype) == "float32"
    if op in ("softmax", "log_softmax"):
        axis = dict(params)["axis"]
        return not saved and axis % y.ndim == y.ndim - 1 and x.shape == y.shape
    if op == "layer_norm":
        rows = (*y.shape[:-1], 1)
        kept = len(saved) == 2 and [p for p, _ in saved] == [0, 1]
        if not kept or env[saved[1][1]].shape != rows or env[saved[0][1]].shape != y.shape:
            return False
        affine = inputs[1:]
        same = all(a.dtype == y.dtype for a in (x, *affine, env[saved[1][1]]))
        return 1 <= len(affine) <= 2 and same and all(a.shape == y.shape[-1:] for a in affine)
    if saved:
        return False
    u = backend.ufuncs_of(y)
    for array in inputs:
        if str(array.dtype) not in (*FLOATS, "bool") or array.ndim > y.ndim:
            return False
        if u.broadcast_shapes(array.shape, y.shape) != y.shape:
            return False
    return True


def _fits_cross_entropy(parts: tuple, inputs: list, y: Any, saved: list, env: list) -> bool:
    """Logits (..., C) in a float dtype, integer targets (...), a 0-d loss, and the saved
    log-probabilities and target rows (and, for a mean, the count of kept targets)."""
    x, targets = inputs
    if x.ndim < 2 or x.size == 0 or str(x.dtype) not in FLOATS or y.shape != ():
        return False
    if targets.dtype.kind not in "iu" or targets.shape != x.shape[:-1]:
        return False
    kept = [(0, x.shape), (1, x.shape)] + [(2, ())] * (dict(parts[1])["reduction"] == "mean")
    if [(p, env[slot].shape) for p, slot in saved] != kept:
        return False
    return all(env[slot].dtype == x.dtype for _, slot in saved) and y.dtype == x.dtype


class _Builder:
    """Collects one group while `fuse_program` walks the program."""

    def __init__(self, tape: Any, shape: tuple, dtype: str) -> None:
        self.tape = tape
        self.group = Group("pointwise", shape, dtype)
        self.value_of: dict[int, str] = {}  # slot -> value name (inputs and results)
        self.written: dict[int, int] = {}  # storage root -> the slot written there
        self.read: dict[int, list[int]] = {}  # storage root -> the slots read there
        self.members: list[tuple] = []  # (position, run, entry, label): the items replaced

    def fits(self, entry: tuple) -> bool:
        """Whether the entry's op can join: its result has the group's shape and dtype, the
        group has no row-wise item yet, and every operand that overlaps a buffer the group
        writes (or every result that overlaps one it reads) is laid out as that buffer: the
        same element at the same index. A later result may then reuse an earlier one's memory
        (the replay's memory plan), and a read of a written buffer takes its value from the
        register instead."""
        _, _, in_slots, _, _, out, saved = entry
        env, group = self.tape.env, self.group
        if group.kind == "rows" or env[out].shape != group.shape:
            return False
        if str(env[out].dtype) != group.dtype:
            return False
        if type(entry[1]) is ops.CrossEntropy:  # over its logits' shape: a group of its own
            return False
        for slot in in_slots:
            writer = self.written.get(backend.storage_root(env[slot]))
            if writer is not None and not _same_layout(env[writer], env[slot]):
                return False
        for slot in (out, *(s for _, s in saved)):
            root = backend.storage_root(env[slot])
            writer = self.written.get(root)
            if writer is not None and not _same_layout(env[writer], env[slot]):
                return False
            if any(not _same_layout(env[r], env[slot]) for r in self.read.get(root, ())):
                return False
        return True

    def add(self, position: int, run: Callable, entry: tuple, parts: tuple, label: str) -> None:
        _, fn, in_slots, _, _, out, saved = entry
        env, group = self.tape.env, self.group
        names = [self._read(slot) for slot in in_slots]
        op, params = parts
        if op == "cross_entropy":  # one target per row
            group.inputs[-1].per_row = True
            params = (*params, ("classes", group.shape[-1]))
        values = []
        for slot in (out, *(s for _, s in sorted(saved, key=lambda pair: pair[0]))):
            value = self.value_of[slot] = f"v{len(group.outputs)}"
            self.written[backend.storage_root(env[slot])] = slot
            per_row = env[slot].shape != group.shape  # LayerNorm's rstd: one value per row
            name = f"out{len(group.outputs)}"
            group.outputs.append(Buffer(name, value, slot, env[slot].shape, group.dtype, per_row))
            values.append(value)
        if op in ROWWISE.values():
            group.kind = "rows"
        group.items.append(Item(op, tuple(names), tuple(values), params))
        group.labels.append(type(fn).__name__)
        self.members.append((position, run, entry, label))

    def _read(self, slot: int) -> str:
        env, group = self.tape.env, self.group
        writer = self.written.get(backend.storage_root(env[slot]))
        if writer is not None:  # written earlier in the group: its value is in a register
            return self.value_of[writer]
        if slot not in self.value_of:
            value, name = f"x{len(group.inputs)}", f"in{len(group.inputs)}"
            array = env[slot]
            group.inputs.append(Buffer(name, value, slot, array.shape, str(array.dtype)))
            self.value_of[slot] = value
            self.read.setdefault(backend.storage_root(array), []).append(slot)
        return self.value_of[slot]


def _same_layout(a: Any, b: Any) -> bool:
    """Whether two arrays are one memory seen one way (one index, one element)."""
    return a.shape == b.shape and a.strides == b.strides and _address(a) == _address(b)


def _address(array: Any) -> int:
    return array.__array_interface__["data"][0]


def fuse_program(tape: Any, built: list[tuple], compile_kernel: Callable) -> tuple[list, list]:
    """The program with each run of fusable items replaced by one fused item.

    `built` holds (position, run, entry, draws, label) for each program item in order; the
    result holds (positions, run, entry, draws, label), a fused item's entry being ``("fused",
    group, reads, writes)``, and the list of groups made. `compile_kernel(group, arguments)`
    returns the kernel compiled for those arguments, or None.
    """
    split = len(tape.entries) if tape.graph is None else tape.graph.split
    program: list[tuple] = []
    groups: list[Group] = []
    builder: _Builder | None = None

    def close() -> None:
        nonlocal builder
        if builder is not None:
            program.extend(_finished(tape, builder, compile_kernel, groups))
        builder = None

    for position, run, entry, draws, label in built:
        parts = None if draws else fusable(tape, entry)
        if parts is None:
            close()
            program.append(([position], run, entry, draws, label))
            continue
        crosses = builder is not None and (builder.members[0][0] < split) != (position < split)
        if builder is None or crosses or not builder.fits(entry):
            close()
            # The group walks its result; cross-entropy's rows are its logits'.
            out = tape.env[entry[2][0] if parts[0] == "cross_entropy" else entry[5]]
            builder = _Builder(tape, out.shape, str(out.dtype))
        builder.add(position, run, entry, parts, label)
    close()
    return program, groups


def _finished(tape: Any, builder: _Builder, compile_kernel: Callable, groups: list) -> list:
    """The program items of a collected run: one fused item, or its items as they were (one
    plain item alone, or a kernel that could not be made)."""
    group, members = builder.group, builder.members
    unfused = [([position], run, entry, False, label) for position, run, entry, label in members]
    if len(members) == 1 and group.items[0].op not in ALONE:
        return unfused
    group.loops, group.axes = loops_of(group, tape.env)
    _mark_stored(tape, group, members[-1][0])
    _mark_walks(tape, group)
    was_static = [tape.static[b.slot] for b in group.outputs]
    for buffer in group.outputs:
        tape.static[buffer.slot] = True  # the kernel writes into the buffer itself
    args, dynamic = arguments(group, tape)
    kernel = compile_kernel(group, args)
    if kernel is None:
        for buffer, static in zip(group.outputs, was_static, strict=True):
            tape.static[buffer.slot] = static
        return unfused
    groups.append(group)
    run = fused_run(group, kernel, args, dynamic, tape, [run for _, run, _, _ in members])
    reads = {b.slot for b in group.inputs}
    writes = {b.slot for b in group.outputs}
    label = f"fused {group.kind} ({', '.join(group.labels)})"
    return [([p for p, *_ in members], run, ("fused", group, reads, writes), False, label)]


def _mark_walks(tape: Any, group: Group) -> None:
    """Each buffer's loops: those along which its stride is not 0. A kernel indexes a bias by
    the row's position only, so its view is contiguous and the loop vectorizes."""
    u = backend.ufuncs_of(tape.env[group.outputs[0].slot])
    last = len(group.loops) - 1
    for buffer in (*group.inputs, *group.outputs):
        strides = over(u, tape.env[buffer.slot], group.shape, buffer.per_row).strides
        loop_strides = [strides[axes[-1]] if axes else 0 for axes in group.axes]
        walks = [k for k, stride in enumerate(loop_strides) if stride != 0]
        if buffer.per_row:  # one value per row, however the row loop's stride reads
            walks = [k for k in walks if k != last]
        buffer.walks = tuple(walks)


def _mark_stored(tape: Any, group: Group, end: int) -> None:
    """Store only the results read after the group's last entry (`end`), directly or through a
    view of their memory; a row-wise item reads its input and writes its results in memory,
    so those are stored too."""
    family: dict[int, list[int]] = {}
    for slot, root in enumerate(tape._roots):
        family.setdefault(root, []).append(slot)
    last_use = tape.last_use
    rows = [item for item in group.items if item.op in ROWWISE.values()]
    kept = {value for item in rows for value in (*item.inputs, *item.outputs)}
    kept.add(group.items[-1].outputs[0])  # a kernel with nothing to store has no loops
    for buffer in group.outputs:
        members = family.get(tape._roots[buffer.slot], [buffer.slot])
        dead = all(s in last_use and last_use[s] <= end for s in members)
        buffer.stored = not dead or buffer.value in kept


# --------------------------------------------------------------------------------- the loops
def loops_of(group: Group, env: list) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """(the group's iteration shape, the axes of `shape` each loop walks): adjacent axes merged
    wherever every buffer steps through them as through one axis (the outer's stride is the
    inner's times its length), axes of length 1 dropped. A rows group keeps its last axis (the
    row) apart, as its last loop."""
    shape = group.shape
    u = backend.ufuncs_of(env[group.outputs[0].slot])
    buffers = (*group.inputs, *group.outputs)
    strides = [over(u, env[b.slot], shape, b.per_row).strides for b in buffers]
    rows = group.kind == "rows"
    row_axis = len(shape) - 1
    axes = [a for a in range(len(shape)) if shape[a] != 1 or (rows and a == row_axis)]
    merged: list[list[int]] = []
    for axis in axes:
        inner_of_last = merged[-1][-1] if merged else None
        joins = (
            inner_of_last is not None
            and not (rows and axis == row_axis)
            and all(s[inner_of_last] == s[axis] * shape[axis] for s in strides)
        )
        if joins:
            merged[-1].append(axis)
        else:
            merged.append([axis])
    if not merged:
        return (1,), ((),)
    loops = tuple(_product(shape[a] for a in walked) for walked in merged)
    return loops, tuple(tuple(walked) for walked in merged)


def _product(values: Any) -> int:
    total = 1
    for value in values:
        total *= value
    return total
