"""The fast path for whole steps: ``ta.compile(step)`` records a step's array work, then replays it.

Imports `backend`, `autograd`, `tensor`, `replay` and the modules beside it. The
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
  backward rule, every gradient stored on a leaf, every assignment the step makes to a leaf's
  ``.grad`` (``zero_grad()``), every in-place write, every random draw made
  outside an op, and calls that must run as Python on every step (``optimizer.step``, gradient
  clipping, a scheduler's ``step``). A `guards.Tracer` notes every Python value the
  step's functions read (`guards`); a replay first checks each is unchanged.
- **Checking.** The two tapes must agree (if they do not, a third call is recorded and compared
  with the second, once: a first call may differ through state made on first use, such as
  gradients that were None): the same ops with the same arguments, and every array
  that no recorded op made (a parameter, a constant mask) either the same array in both calls or
  equal in value. An array that changes between calls without a recorded op making it was made
  by code the tape cannot see (raw array code, or a Python number read from a tensor), and
  replaying it would be silently wrong: that is a `CompileError` naming the op, never a replay.
  Reading a tensor's value into Python (``.item()``, ``bool(x)``, ``.numpy()``) inside the step
  is refused while recording for the same reason, and so are results whose shape depends on
  values (``nonzero``, ``x[mask]``). A call after the caller changed a guarded value, or the
  requires_grad of a tensor the step reads (freezing a layer), records afresh instead, as
  torch.compile recompiles.
- **Replaying.** From then on, `replay.Tape` replays the last recording: its arrays are
  the buffers, each written again in place by the entry that made it. Views of buffers stay
  valid and are not made again; simple ops write with ``out=`` (NumPy, CuPy); the others call
  their ``forward`` and copy the result in; buffers never alive at once share memory. No Tensor
  objects, no graph, no checks; then the gradients, the optimizer, the scheduler. Parameters
  and optimizer state change in place exactly as in eager mode; the returned tensors and
  gradients are copies holding the new values.
- **Fusing.** Where Numba is installed, each run of elementwise and row-wise ops on the host
  replays as one kernel generated from the recorded ops (`fusion`), within a stated tolerance
  of eager instead of bit for bit; ``fuse=False`` replays them one by one.
- **On a GPU,** each run of array work between Python calls is captured once as a CUDA graph and
  then launched as one (`backend.CudaGraphs`).
- **A function without its own backward** (``ta.compile(model)``) is recorded with its backward
  and replays it when the caller's backward reaches its outputs (`graph`).
- **Verifying.** With ``verify_every=N`` every N-th replayed call records again and must equal
  the tape's recording.

What the tape cannot hold is refused when recording, not replayed: see `CompileError`. Python
side effects of the step other than the calls listed above (printing, appending to a list) run
only while recording (and on verifying calls).
"""

from __future__ import annotations

import functools
import os
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any

from .. import autograd, backend
from ..errors import TinyattnError
from ..tensor import Tensor
from . import codegen_cpu
from .fused_runs import FusionMismatchError
from .graph import (
    backward_of_recording,
    record_backward,
    release_buffers,
    replayed_outputs,
    with_graph,
)
from .guards import (
    UNBOUND,
    Guard,
    Tracer,
    changed_between,
    first_changed,
    free_names,
    guard,
)
from .record import CompileError, Recorder, check_same, encode_outputs, returned_values
from .replay import Tape, position_in, written_inputs


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
class CompiledStep:
    """What `compile` returns: call it like the step. ``.tapes`` maps signatures to tapes."""

    def __init__(
        self,
        step: Callable,
        max_signatures: int = 8,
        cuda_graphs: bool = True,
        verify_every: int | None = None,
        fuse: bool | None = None,
    ) -> None:
        if not callable(step):
            raise TypeError(f"compile: step must be a function, got {type(step).__name__}")
        if type(max_signatures) is not int or max_signatures < 1:
            raise TinyattnError(
                f"compile: max_signatures must be a positive int, got {max_signatures!r}"
            )
        if not isinstance(cuda_graphs, bool):
            raise TypeError(f"compile: cuda_graphs must be True or False, got {cuda_graphs!r}")
        # A module keeps its own attributes: `functools.wraps` would copy them onto this object.
        updated = ("__dict__",) if isinstance(step, types.FunctionType | types.MethodType) else ()
        functools.update_wrapper(self, step, updated=updated)
        self.step = step
        # The step's own global and enclosing names are read on every call and keyed, as
        # torch.compile guards on them: a replay runs none of the step's Python, so a learning
        # rate kept in a global and lowered after recording would otherwise stay as recorded.
        # A bound method's object counts the same way: its public attributes (`self.lr`).
        self._globals, self._global_names, self._cells, self._owner = free_names(step)
        self.max_signatures = max_signatures
        self.cuda_graphs = cuda_graphs
        self.verify_every = _verify_every(verify_every)
        self.fuse = _fuse(fuse)
        self._lock = threading.RLock()
        self.tapes: dict[tuple, Tape] = {}
        self._first: dict[tuple, Recorder] = {}  # signatures recorded once, to check
        self._warned = False
        self._unrepeated = 0  # recordings in a row that no second recording confirmed
        self._changes = 0  # recordings in a row for a guarded value that changed
        self._started_over: set[tuple] = set()  # signatures whose first two recordings differed
        # Values the recorded ops depend on (every called module's `_replay_key`), from all
        # recordings so far: their values at each call are part of the key, with grad mode.
        self._modes: list[tuple[Any, str]] = []
        # The tensors whose gradient from before a call some recording added to (gradient
        # accumulation), a step input by its position: whether each holds one, and of what
        # shape and dtype, is part of the key (the tape reads it, or starts it from None).
        self._grad_holders: list[Tensor | int] = []

    def __getattr__(self, name: str) -> Any:
        # A compiled module answers for its module (`cm.eval()`, `cm.parameters()`).
        if name == "step" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.step, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # One call at a time: a replay writes into buffers that another call would share.
        with self._lock:
            return self._call(args, kwargs)

    def _free_values(self) -> tuple:
        """The current values of the step's globals, closure variables and (for a bound
        method) its object's public attributes, as guards."""
        get = self._globals.get
        values = tuple(guard(get(name, UNBOUND)) for name in self._global_names)
        cells = []
        for cell in self._cells:
            try:
                cells.append(guard(cell.cell_contents))
            except ValueError:  # not yet bound in the enclosing function
                cells.append(UNBOUND)
        owner = self._owner or {}
        attributes = tuple((k, guard(v)) for k, v in owner.items() if not k.startswith("_"))
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
            raise CompileError(
                "compile: a compiled step called another compiled step while it was recorded; "
                "the inner one's replay runs array calls the outer recording cannot see. Call "
                "the inner function uncompiled there (`.step` of a compiled step is the "
                "original), or call the compiled one outside the outer step"
            )
        signature, inputs = _flattened(args, kwargs)
        grads = self._grads(inputs)
        key = self._key(signature, inputs, grads)
        tape = self.tapes.get(key)
        if tape is not None:
            changed = first_changed(tape.guards)
            if changed is None and tape.reads_what_it_recorded():
                return self._replay(tape, inputs, args, kwargs)
            del self.tapes[key]  # a value read, a parameter's storage, a hook or a flag changed
            if changed is not None:
                self._count_change(*changed)
        recorder, result = self._record(inputs, args, kwargs)
        learned = self._learn_grads(recorder, inputs, grads)
        if learned != grads:  # the key of this call, now that its gradient holders are known
            grads, key = learned, self._key(signature, inputs, learned)
        return self._settle(recorder, result, signature, inputs, grads, key)

    def _settle(
        self, recorder: Recorder, result: Any, signature: Any, inputs: list, grads: tuple, key: Any
    ) -> Any:
        """After a recording: keep it as the first of its signature, or check it against the
        first one and make the tape that later calls replay."""
        first = self._first.pop(key, None)
        changed = None if first is None else changed_between(first.guards, recorder.guards)
        if changed is None and first is not None:
            changed = _flipped_requires_grad(first, recorder)
        if changed is not None:
            self._count_change(*changed)
        if first is None or changed is not None or _switched_modes(first, recorder):
            if first is not None:  # the same modules in another mode: key on their modes now
                key = self._learn_modes(recorder, signature, inputs, grads, key)
            self._unrepeated += 1
            if len(self._first) >= self.max_signatures:
                self._first.pop(next(iter(self._first)))  # bounded: the oldest goes
            if self._unrepeated > self.max_signatures:
                self._warn_unrepeated()
            self._first[key] = recorder  # the first recording (again, after a change)
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
        return self._make_tape(recorder, result, inputs, key)

    def _make_tape(self, recorder: Recorder, result: Any, inputs: list, key: Any) -> Any:
        """Two recordings agreed: keep the second as the tape of `key`."""
        if len(self.tapes) >= self.max_signatures:
            self.tapes.pop(next(iter(self.tapes)))  # the oldest signature goes
        outputs = encode_outputs(result, recorder)
        tape = self.tapes[key] = Tape(
            recorder, outputs, inputs, graphs=self.cuda_graphs, fuse=self.fuse
        )
        release_buffers(result, recorder)
        tape.checked = recorder
        recorder.arrays = [None if m else a for a, m in zip(recorder.arrays, recorder.made)]
        if tape.graph is not None:  # the caller's backward reaches this call's own graph
            return with_graph(result, recorder, backward_of_recording(tape, recorder))
        return result

    def _replay(self, tape: Tape, inputs: list[Tensor], args: tuple, kwargs: dict) -> Any:
        self._changes = 0
        tape.calls += 1
        if self.verify_every and tape.calls % self.verify_every == 0:
            tape.verified += 1
            return self._verify(tape, inputs, args, kwargs)
        try:
            if tape.graph is None or not autograd.is_grad_enabled():
                return tape.replay(inputs)
            return tape.replay(inputs, given=replayed_outputs(tape, inputs))
        except FusionMismatchError as error:
            self._verification_failed(
                f"ran the fused kernels of call {tape.calls} beside the ops they replace, and "
                f"{error}",
                "Compile with fuse=False to replay the ops one by one, bit for bit as eager",
            )

    def _verify(self, tape: Tape, inputs: list[Tensor], args: tuple, kwargs: dict) -> Any:
        """Record the call again instead of replaying it, and compare with the tape's recording:
        a difference means replays have been stale (a value no guard watches changed)."""
        recorder, result = self._record(inputs, args, kwargs)
        try:
            check_same(tape.checked, recorder)
        except CompileError as error:
            what = str(error).removeprefix("compile: ").split(". ")[0]  # not its advice
            self._verification_failed(
                f"recorded call {tape.calls} of this signature again, and it differs from the "
                f"tape being replayed, so earlier replays may have been stale: {what}",
                "A Python value that no guard watches changed (see 'What the guards cannot "
                "see' in docs/performance.md): pass it as a tensor argument, or read it where "
                "a guard sees it (a global, a closure variable, an argument's attribute)",
            )
        recorder.keep_for_checking()
        if tape.groups:  # the next replay also runs each fused group unfused and compares
            tape.check_fusion[0] = True
        return result

    def explain(self, gpu: bool = False) -> str:
        """What each tape replays as fused kernels: every group's recorded ops, the buffers it
        reads and writes, and the code generated for it (for the CPU, or with `gpu` the CUDA
        source the same group gives). Also printed, like ``torch._dynamo.explain``'s report."""
        from . import codegen_gpu

        generate = codegen_gpu.source if gpu else codegen_cpu.source
        parts = []
        for number, tape in enumerate(self.tapes.values()):
            fused = sum(len(group.items) for group in tape.groups)
            parts.append(
                f"tape {number}: {len(tape.program)} program items, {len(tape.groups)} fused "
                f"groups holding {fused} recorded ops"
                + ("" if self.fuse else " (fusion is off: fuse=False, or Numba is missing)")
            )
            for group in tape.groups:
                parts += [group.describe(), generate(group)]
        if not self.tapes:
            parts.append("nothing recorded yet: call the step (twice) first")
        text = "\n".join(parts)
        print(text)
        return text

    def _verification_failed(self, finding: str, advice: str) -> None:
        raise CompileError(
            f"compile: verification (verify_every={self.verify_every}) {finding}. {advice}"
        ) from None

    def _count_change(self, changed: Guard, now: Any) -> None:
        """A guarded value changed: records again, unless that happened more than
        `max_signatures` times in a row without a replay in between."""
        self._changes += 1
        if self._changes > self.max_signatures:
            raise CompileError(
                f"compile: {changed.describe(now)}; values the step reads changed on "
                f"{self._changes} calls in a row (more than max_signatures="
                f"{self.max_signatures}), and each change records the step again, so nothing "
                "replays. Pass such a value as a tensor argument (its value is then data, not "
                "part of the recording), keep it fixed while the compiled step runs, or raise "
                "max_signatures"
            )

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
        tracer = Tracer()
        try:
            with tracer:
                result = self.step(*args, **kwargs)
            recorder.settle_assignment()  # a `.grad` assigned last (zero_grad at the end)
            encode_outputs(result, recorder)  # an unsupported result fails now, not later
            recorder.returned = returned_values(result)
            if backend.reseeds() != reseeds:
                raise CompileError(
                    "compile: the step seeds or sets the random generator (manual_seed, "
                    "set_rng_state); a replay would not, and would draw other numbers than "
                    "eager; seed before calling the step instead"
                )
            record_backward(recorder, result, inputs)
        finally:
            autograd.set_recorder(previous)
            recorder.mode_values = [getattr(owner, name) for owner, name in recorder.modes]
            recorder.flags = [(t, t.requires_grad) for t in recorder.owners.values()]
            written = dict(written_inputs(recorder.tape, recorder.arrays, len(inputs)))
            for position, (tensor, array) in enumerate(zip(inputs, given, strict=True)):
                if position in written:
                    backend.copy_into(array, tensor.array)  # the step wrote into its input
                tensor.array = array
        recorder.guards = tracer.guards
        return recorder, result


class CompiledModule(CompiledStep):
    """What `compile` returns for a module: PyTorch's ``OptimizedModule`` names. Its module is
    ``_orig_mod``, so ``state_dict()``, ``named_parameters()`` and ``named_buffers()`` name every
    entry ``_orig_mod.<name>``, as PyTorch's do; ``load_state_dict`` takes those keys (and, where
    PyTorch would refuse them, the module's own keys too). Other attributes are the module's."""

    _PREFIX = "_orig_mod"

    @property
    def _orig_mod(self) -> Any:
        return self.step

    def state_dict(
        self, destination: dict | None = None, prefix: str = "", keep_vars: bool = False
    ) -> dict[str, Any]:
        return self.step.state_dict(destination, f"{prefix}{self._PREFIX}.", keep_vars)

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> Any:
        start = f"{self._PREFIX}."
        own = {k.removeprefix(start): v for k, v in state_dict.items()}
        return self.step.load_state_dict(own, strict)

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Any:
        inner = f"{prefix}.{self._PREFIX}" if prefix else self._PREFIX
        return self.step.named_parameters(inner, recurse, remove_duplicate)

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Any:
        inner = f"{prefix}.{self._PREFIX}" if prefix else self._PREFIX
        return self.step.named_buffers(inner, recurse)


def _is_module(step: Any) -> bool:
    """A module by what it answers (this layer does not import `nn`)."""
    return all(
        callable(getattr(step, name, None))
        for name in ("state_dict", "load_state_dict", "named_parameters", "named_buffers")
    )


def _verify_every(value: int | None) -> int:
    """`verify_every`, or TINYATTN_COMPILE_VERIFY where it is None; 0 turns verification off."""
    if value is None:
        text = os.environ.get("TINYATTN_COMPILE_VERIFY", "").strip() or "0"
        if not text.isdigit():
            raise TinyattnError(
                f"compile: TINYATTN_COMPILE_VERIFY must be a whole number of calls, got {text!r}"
            )
        return int(text)
    if type(value) is not int or value < 0:
        raise TinyattnError(f"compile: verify_every must be an int >= 0, got {value!r}")
    return value


def _fuse(value: bool | None) -> bool:
    """`fuse`, or where it is None: on when Numba can be imported, unless the environment
    variable TINYATTN_COMPILE_FUSE is 0."""
    if value is None:
        text = os.environ.get("TINYATTN_COMPILE_FUSE", "").strip() or "1"
        if text not in ("0", "1"):
            raise TinyattnError(f"compile: TINYATTN_COMPILE_FUSE must be 0 or 1, got {text!r}")
        return text == "1" and codegen_cpu.available()
    if not isinstance(value, bool):
        raise TypeError(f"compile: fuse must be True, False or None, got {value!r}")
    if value and not codegen_cpu.available():
        raise TinyattnError(
            "compile: fuse=True needs Numba, which is not installed; install tinyattn[fast] "
            "(or pip install numba), or leave fuse=None to fuse only where it is installed"
        )
    return value


def _grad_kind(grad: Tensor | None) -> tuple | None:
    return None if grad is None else _array_kind(grad.array)


def _array_kind(array: Any) -> tuple:
    # The device's name: CuPy's Device is unhashable, and this kind is part of a dict key.
    return (type(array), backend.device_name(backend.device_of(array)), array.shape, array.dtype)


def _flipped_requires_grad(first: Recorder, second: Recorder) -> tuple[Guard, bool] | None:
    """A tensor both recordings read from outside the step (a parameter, a captured tensor)
    whose requires_grad the caller switched between them (freezing a layer), as a change of a
    guarded value: the second recording starts over, as torch.compile recompiles, rather than
    failing the comparison of two tapes that rightly differ (one sends the tensor a gradient)."""
    before = {id(t): flag for t, flag in first.flags}
    for tensor, flag in second.flags:
        was = before.get(id(tensor), flag)
        if was != flag:
            what = f"requires_grad of a tensor of shape {tuple(tensor.shape)} the step reads"
            changed = Guard(lambda t=tensor: t.requires_grad, was, what, "set between calls")
            return changed, flag
    return None


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


def compile(  # noqa: A001
    step: Callable | None = None,
    *,
    max_signatures: int = 8,
    cuda_graphs: bool = True,
    verify_every: int | None = None,
    fuse: bool | None = None,
) -> Any:
    """Record `step` (a training step, a function, a module) and replay it on later calls.

    ``step = ta.compile(train_step)`` (or ``@ta.compile``): the first two calls for each new
    signature run eagerly while recording and checking (three, when the first call differs
    from the second through state made on first use); later calls replay the recording.
    ``cm = ta.compile(model)``: a function or module that runs no backward itself returns
    tensors in the caller's graph, whose backward replays the recorded backward. A module's
    compiled form is a `CompiledModule`, whose state-dict keys start ``_orig_mod.`` as
    PyTorch's. On CuPy, with
    `cuda_graphs`, each run of array work between Python calls (the optimizer's step) is
    captured once as a CUDA graph and then launched as one. `verify_every` = N records every
    N-th replayed call again and raises `CompileError` if it differs from the tape (None: the
    TINYATTN_COMPILE_VERIFY environment variable, else off); with fusion, the replay after each
    such call also runs every fused group unfused and compares. `fuse` replays each run of
    elementwise and row-wise ops as one generated kernel (`fusion`; None: where Numba is
    installed, unless TINYATTN_COMPILE_FUSE=0); ``.explain()`` prints the groups and their
    code. See docs/performance.md, "How the fast path works".
    """
    if step is None:
        return lambda f: compile(
            f,
            max_signatures=max_signatures,
            cuda_graphs=cuda_graphs,
            verify_every=verify_every,
            fuse=fuse,
        )
    kind = CompiledModule if _is_module(step) else CompiledStep
    return kind(step, max_signatures, cuda_graphs, verify_every, fuse)


__all__ = ["CompileError", "CompiledModule", "CompiledStep", "Recorder", "compile"]
