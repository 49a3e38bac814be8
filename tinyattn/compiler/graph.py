"""Compiled functions in the caller's graph: ``ta.compile(model)`` with backward outside.

Imports `autograd`, `backend`, `tensor`, `replay` and `record`; `compiler` uses it. A
function or module that runs no backward itself (``cm = ta.compile(model)``; then
``F.cross_entropy(cm(x), y).backward()``) is recorded with its backward, from seed gradients of
its outputs to the gradients of its inputs and parameters, as an AOT-autograd split makes it:
a replay runs the forward and returns tensors whose graph is one `CompiledCall` node; the
caller's backward reaching that node replays the recorded backward. A node's backward needs the
buffers of its own replay: it refuses to run after a later replay or twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import autograd, backend
from ..ops.compiled import CompiledCall, CompiledOutput
from ..tensor import Tensor
from .record import CompileError, Recorder
from .replay import GraphPart, Tape, position_in


def attach(arrays: list, wrt: list[Tensor], run: Callable[[list], tuple]) -> list[Tensor]:
    """Tensors holding `arrays` whose graph is one node over `wrt`; ``run(grads)`` (one array or
    None per output) gives that node's input gradients."""
    if len(arrays) == 1:
        return [CompiledCall.apply(*wrt, output=arrays[0], backward=lambda g: run([g]))]
    holder: list = [None] * len(arrays)

    def drain(_: Any) -> tuple:
        grads = list(holder)
        holder[:] = [None] * len(holder)
        return run(grads)

    xp = backend.namespace(arrays[0])
    anchor = CompiledCall.apply(*wrt, output=xp.zeros((), dtype=arrays[0].dtype), backward=drain)
    return [
        CompiledOutput.apply(anchor, output=array, index=k, holder=holder)
        for k, array in enumerate(arrays)
    ]


def record_backward(recorder: Recorder, result: Any, inputs: list[Tensor]) -> None:
    """After a function's forward was recorded: when it ran no backward itself and returns
    tensors in the graph (grad mode on), record its backward too, from seed gradients of those
    outputs to the gradients of the inputs and parameters that require grad."""
    outputs = _unique([t for t in tensors_in(result) if t.requires_grad])
    if not outputs or not autograd.is_grad_enabled():
        return
    if any(entry[0] in ("rule", "grad", "hook") for entry in recorder.tape):
        for output in outputs:  # a whole training step: its own backward is on the tape
            _check_no_graph_left(output, recorder.reached)
        return
    wrt = [t for t in inputs if t.requires_grad]
    wrt = _unique(wrt + [t for t in recorder.owners.values() if t.requires_grad])
    for tensor in wrt:
        _check_reachable(tensor)
    split = len(recorder.tape)
    seeds = [out.constant(_ones(out.array)) for out in outputs]
    grads = autograd.grad(outputs, wrt, grad_outputs=seeds, allow_unused=True)
    if any(entry[0] in ("grad", "hook") for entry in recorder.tape[split:]):
        raise CompileError(
            "compile: the compiled function's backward runs gradient hooks or keeps a "
            "gradient (retain_grad) inside it; with its backward outside (ta.compile(model)) "
            "the replay cannot run them. Compile the whole training step instead (its hooks "
            "replay), or remove the hook"
        )
    recorder.graph = GraphPart(
        split,
        [recorder._slot(out.array) for out in outputs],
        [_slot_if_read(recorder, seed.array) for seed in seeds],
        [None if g is None else recorder._slot(g.array) for g in grads],
        [_position_or_tensor(t, inputs) for t in wrt],
    )
    recorder.graph.eager = (outputs, wrt)  # the recording's own graph, for its own backward


def _check_no_graph_left(output: Tensor, reached: set[int]) -> None:
    """Refuse a result of a step that runs its own backward when the caller could backward
    through it to a tensor that requires grad by a path that backward did not take (``return
    aux_loss`` beside ``loss.backward()``): a replay returns results without a graph. A path
    through a node the step's backward ran is no loss, as eager has freed that node too."""
    stack, seen = [output], set()
    while stack:
        tensor = stack.pop()
        fn = tensor._ctx
        if fn is None:
            if tensor.requires_grad:
                raise CompileError(
                    f"compile: the step runs its own backward and returns a tensor of shape "
                    f"{tuple(output.shape)} that requires grad through a graph that backward "
                    f"did not use (it reaches a tensor of shape {tuple(tensor.shape)} that "
                    "requires grad); a replay returns tensors without a graph, so a backward "
                    "through it after the call would fail where eager's works. Run that "
                    "backward inside the step, return the tensor detached (.detach()), or "
                    "compile only the forward (ta.compile(model)) and run backward outside"
                )
            continue
        if id(fn) in reached or id(fn) in seen or fn.inputs is None:
            continue
        seen.add(id(fn))
        stack.extend(t for t in fn.inputs if t.requires_grad)


def _check_reachable(tensor: Tensor) -> None:
    if not tensor.is_leaf:
        raise CompileError(
            f"compile: the compiled function reads a tensor of shape {tuple(tensor.shape)} "
            "that requires grad and was computed outside it (it has a graph of its own); the "
            "replayed backward stops at the function's inputs and parameters. Compile the "
            "whole computation (the model, or the training step), or pass a leaf "
            "(x.detach().requires_grad_()) and carry its gradient on yourself"
        )
    if tensor._hooks:
        raise CompileError(
            f"compile: a tensor of shape {tuple(tensor.shape)} that the compiled function reads "
            "has gradient hooks; with the function's backward outside it (ta.compile(model)) "
            "its gradient would pass the hooks twice. Compile the whole training step instead, "
            "or register the hook after calling the function"
        )


def with_graph(result: Any, recorder: Recorder, run: Callable[[list], tuple]) -> Any:
    """The recording's result with its graph outputs in the caller's graph by one node."""
    outputs, wrt = recorder.graph.eager
    attached = attach([t.array for t in outputs], wrt, run)
    return _replaced(result, {id(t): a for t, a in zip(outputs, attached, strict=True)})


def backward_of_recording(tape: Tape, recorder: Recorder) -> Callable[[list], tuple]:
    """The backward of the call whose recording became `tape`: through that recording's own
    graph, kept (the tape replays some of its rules) until the tape first replays."""
    outputs, wrt = recorder.graph.eager
    generation = tape.replays

    def run(grads: list) -> tuple:
        _check_backward(tape, generation)
        seeds = [o.constant(_zeros(o.array) if g is None else g) for o, g in zip(outputs, grads)]
        found = autograd.grad(
            outputs, wrt, grad_outputs=seeds, retain_graph=True, allow_unused=True
        )
        return tuple(None if g is None else g.array for g in found)

    return run


def replayed_outputs(tape: Tape, inputs: list[Tensor]) -> Callable[[list], dict]:
    """``given(env)`` for `Tape.replay`: the replay's graph outputs as tensors of one node."""

    def given(env: list) -> dict:
        graph, generation, done = tape.graph, tape.replays, [False]
        wrt = [inputs[w] if isinstance(w, int) else w for w in graph.wrt]

        def run(grads: list) -> tuple:
            _check_backward(tape, generation)
            if done[0]:
                raise CompileError(
                    "compile: backward ran twice through one call of a compiled function "
                    "(retain_graph=True kept the caller's graph), but its replay's buffers "
                    "serve one backward; call the function again before a second backward, "
                    "or call it uncompiled"
                )
            done[0] = True
            return tuple(tape.replay_backward(grads))

        arrays = [backend.copied(env[slot]) for slot in graph.out_slots]
        return dict(zip(graph.out_slots, attach(arrays, wrt, run), strict=True))

    return given


def _check_backward(tape: Tape, generation: int) -> None:
    if autograd.is_grad_enabled():
        raise CompileError(
            "compile: backward with create_graph=True (a gradient of a gradient) reached a "
            "compiled function, whose recorded backward builds no graph; call the function "
            "uncompiled for higher-order gradients"
        )
    if tape.replays != generation:
        raise CompileError(
            "compile: backward reached a call of a compiled function after a later call with "
            "the same signature replayed it, which overwrote the values this call kept for its "
            "backward. Run backward before calling the compiled function again (as a training "
            "loop does), or compile the whole training step"
        )


def _ones(array: Any) -> Any:
    xp = backend.namespace(array)
    return xp.ones(array.shape, dtype=array.dtype, device=array.device)


def _zeros(array: Any) -> Any:
    xp = backend.namespace(array)
    return xp.zeros(array.shape, dtype=array.dtype, device=array.device)


def _slot_if_read(recorder: Recorder, array: Any) -> int | None:
    slot = recorder.slot_of.get(id(array))
    return slot if slot is not None and recorder.arrays[slot] is array else None


def _position_or_tensor(tensor: Tensor, inputs: list[Tensor]) -> int | Tensor:
    position = position_in(tensor, inputs)
    return tensor if position is None else position


def _unique(tensors: list[Tensor]) -> list[Tensor]:
    return list({id(t): t for t in tensors}.values())


def _replaced(value: Any, tensors: dict[int, Tensor]) -> Any:
    if isinstance(value, Tensor):
        return tensors.get(id(value), value)
    if isinstance(value, tuple | list):
        return type(value)(_replaced(v, tensors) for v in value)
    if isinstance(value, dict):
        return {k: _replaced(v, tensors) for k, v in value.items()}
    return value


def release_buffers(result: Any, recorder: Recorder) -> None:
    """After the recording that became a tape: the tensors it handed out (its result, the
    gradients, those given to hooks) get copies of their arrays, which are now buffers that
    every replay rewrites."""
    made = {id(a) for a, m in zip(recorder.arrays, recorder.made) if m}
    tensors = [t for t in tensors_in(result)]
    leaves = [e[1] for e in recorder.tape if e[0] in ("grad", "assign")]
    tensors += [leaf.grad for leaf in leaves if leaf.grad is not None]
    tensors += recorder.hooked
    for tensor in tensors:
        if id(tensor.array) in made:
            tensor.array = backend.copied(tensor.array)


def tensors_in(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []
