"""Autograd, what ``ta.compile`` watches: the recorder, one per recording thread.

`ta.compile` records a step by installing a Recorder for its thread (`set_recorder`). Ops and
the walk reach it through the engine's one seam (`listeners`: `_Recording` below, listening
while some thread records); the calls below report to it directly, and `recorder` is their
one test: None while no thread records. Everything a replay must see is declared here, in
one place: a random draw (the backend's draw hook), an in-place write (`note_store`), a new
array (`note_created`), a ``.grad`` set by hand (`note_grad_set`), a module's mode
(`note_mode`), a Python call to run again on every replay (`replayed_call`), and the host
reads and Python writes a replay cannot repeat (`check_host_read`, `check_python_write`), and
the functional transforms a replay cannot repeat (`note_transform`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .. import backend
from . import listeners

# ------------------------------------------------------------------------- recording a step
# `recorder` is None while no thread records, else `_ThisThread`, which hands each report to the
# reporting thread's recorder, or does nothing on a thread that records nothing (work another
# thread does meanwhile is its own, not the step's).
_recording: dict[int, Any] = {}  # thread id -> its Recorder
_recording_lock = threading.Lock()  # two threads starting or ending recordings at once
recorder: Any = None


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

    call = _report("call", lambda function, args, kwargs: function(*args, **kwargs))
    created, grad_set, draw = _report("created"), _report("grad_set"), _report("draw")
    store, host_read = _report("store"), _report("host_read")
    python_write, module_hooks = _report("python_write"), _report("module_hooks")
    mode = _report("mode")


class _Recording(listeners.Listener):
    """The recorders' listener: an op's forward, a rule, a hook and a leaf's ``.grad`` go to the
    calling thread's recorder, which runs them itself and notes their array calls."""

    def forward(self, fn: Any, inputs: tuple, kwargs: dict, run: Callable[[], Any]) -> Any:
        recorder = _recording.get(threading.get_ident())
        return run() if recorder is None else recorder.forward(fn, inputs, kwargs)

    def rule(self, fn: Any, output: Any, grad: Any, run: Callable[[], tuple]) -> tuple:
        recorder = _recording.get(threading.get_ident())
        return run() if recorder is None else recorder.rule(fn, grad, output, run)

    def hook(self, hook: Callable, grad: Any) -> Any:
        recorder = _recording.get(threading.get_ident())
        return hook(grad) if recorder is None else recorder.hook(hook, grad)

    def deliver(self, leaf: Any, run: Callable[[], None]) -> None:
        recorder = _recording.get(threading.get_ident())
        if recorder is not None and leaf.grad is not None:
            recorder.read_grad(leaf, leaf.grad)  # a gradient from before: the tape's input
        run()
        if recorder is not None:
            recorder.set_grad(leaf, leaf.grad)

    def keeps_graph(self) -> bool:
        return True  # a recording replays the rules later (and a walk may not know its thread's)


_listening: Any = None  # the handle of `_Recording` while some thread records


def set_recorder(new: Any) -> Any:
    """Install the recorder `new` (or None) for the calling thread; returns the one it replaces."""
    global recorder, _listening
    ident = threading.get_ident()
    with _recording_lock:
        previous = _recording.pop(ident, None)
        if new is not None:
            _recording[ident] = new
        recorder = _ThisThread if _recording else None
        backend.set_draw_hook(_ThisThread.draw if _recording else None)
        if _recording and _listening is None:
            _listening = listeners.listen(_Recording())
        elif not _recording and _listening is not None:
            _listening.remove()
            _listening = None
    return previous


def active_recorder() -> Any:
    """The calling thread's recorder, or None."""
    return _recording.get(threading.get_ident())


def replayed_call(function: Callable) -> Callable:
    """Mark a function whose Python must run on every replay of a compiled step (an optimizer's
    step, gradient clipping, a scheduler): while recording it runs as one recorded call."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if recorder is None:
            return function(*args, **kwargs)
        # A generator (model.parameters()) would be empty on replay: keep its items.
        args = tuple(list(a) if isinstance(a, Iterator) else a for a in args)
        return recorder.call(function, args, kwargs)

    return wrapper


def note_store(target: Any, source: Any, op: str = "in-place write") -> None:
    """Called by in-place writes (``x[...] = v``, ``x.add_(y)``): a recording notes the write, so
    that a replay writes again, into the same array, at the same point of the step."""
    if recorder is not None:
        recorder.store(target, source, op)


def note_created(array: Any) -> None:
    """Called by the factories (``zeros``, ``tensor(data)``, ...): a recording tells an array the
    step made from Python values from one that existed before the call."""
    if recorder is not None:
        recorder.created(array)


def note_grad_set(tensor: Any) -> None:
    """Called when a tensor's ``.grad`` is assigned: a recording tells a gradient held from
    before the call (an input of the tape) from one the step made (``zero_grad``)."""
    if recorder is not None:
        recorder.grad_set(tensor)


def note_mode(owner: Any, name: str) -> None:
    """Called by ``nn.Module.__call__``: the ops a recording sees depend on ``owner.<name>`` (a
    module's ``_replay_key``: its mode and what it holds), so a compiled step keys its tapes on
    that value and records again when it changes (``model.eval()``) instead of replaying."""
    if recorder is not None:
        recorder.mode(owner, name)


def check_host_read(what: str) -> None:
    """Called where a tensor's value reaches Python (item, bool, numpy): refused in a recording."""
    if recorder is not None:
        recorder.host_read(what)


def check_python_write(what: str) -> None:
    """Called where the step sets Python state that replayed calls read (an optimizer's
    learning rate): refused in a recording, outside the calls a replay runs as Python."""
    if recorder is not None:
        recorder.python_write(what)


def note_transform(name: str) -> None:
    """Called by each functional transform (``tinyattn.func``'s ``vmap``, ``grad``, ``jvp``, ...
    and ``tinyattn.autograd.functional``'s): a recording refuses the step, naming `name`,
    since a replay repeats array calls, not the transform's Python. (Inside a call that every
    replay runs as Python, the recorder is suspended and the transform runs as it is.)"""
    current = active_recorder() if recorder is not None else None
    if current is not None and not getattr(current, "suspended", False):
        raise RuntimeError(
            f"ta.compile cannot record a step that calls the functional transform {name}: a "
            f"replay repeats the step's array calls, not {name}'s Python (its levels, batching "
            f"and graph of gradients). Call {name} outside the compiled function"
        )
