"""Autograd's modes: grad mode and anomaly mode, per thread, and the anomaly checks.

Below `autograd` (which re-exports every public name here): imports only `backend`. The only
global state of the graph machinery lives here, one copy per thread (``threading.local``), so a
``no_grad`` block in one thread never changes what another thread records. The anomaly checks
take a node duck-typed (its ``name``, ``inputs`` and ``backward``); this module knows no Function.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

from .. import backend
from . import listeners


# ------------------------------------------------------------------------- grad mode, per thread
class _Modes(threading.local):
    """The only global state, one copy per thread; class attributes are each thread's defaults."""

    grad_enabled = True  # whether ops record a graph
    anomaly = False  # whether every forward and backward result is checked for NaN/Inf
    in_rule = False  # set by the engine while a backward rule runs in anomaly mode


_modes = _Modes()
# How many threads are inside detect_anomaly, and how many have grad mode off: while none is
# (almost always, and grad mode is on in every thread while a model trains), the hot paths skip
# the thread-local lookup (about 100 ns) with one test of a plain global. A thread changes only
# its own mode, so the count is right whenever a thread reads it about itself. (A thread that
# ends with grad mode off leaves the count above 0: every op then reads the thread-local, as
# right as before, only slower.)
_anomaly_threads = 0
_grad_off_threads = 0
_anomaly_lock = threading.Lock()  # `+= 1` on a global is not atomic between threads


def is_grad_enabled() -> bool:
    return _grad_off_threads == 0 or _modes.grad_enabled


def _set_grad_mode(mode: bool) -> bool:
    """Set this thread's grad mode and return the one before, keeping `_grad_off_threads`."""
    global _grad_off_threads
    previous = _modes.grad_enabled
    if mode != previous:
        with _anomaly_lock:
            # Counted before the mode goes off and after it comes back on: the count is never
            # 0 while this thread's mode is off.
            if mode:
                _modes.grad_enabled = True
                _grad_off_threads -= 1
            else:
                _grad_off_threads += 1
                _modes.grad_enabled = False
    return previous


class set_grad_enabled(contextlib.ContextDecorator):  # noqa: N801  (PyTorch's name)
    """Turn graph recording on or off for this thread; as a context manager, restore on exit.

    Like PyTorch, ``ta.set_grad_enabled(False)`` called alone switches the mode at once.
    """

    def __init__(self, mode: bool) -> None:
        self._mode = bool(mode)
        self._previous = _set_grad_mode(self._mode)

    def __call__(self, function: Callable) -> Callable:
        _set_grad_mode(self._previous)  # used as a decorator: change nothing until a call
        return super().__call__(function)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        _set_grad_mode(self._previous)

    def _recreate_cm(self) -> set_grad_enabled:  # a decorated function gets a fresh one per call
        return type(self)(self._mode)


class no_grad(contextlib.ContextDecorator):  # noqa: N801  (named like the PyTorch context manager)
    """``with ta.no_grad():`` (or ``@ta.no_grad()``): ops inside record no graph (this thread)."""

    _mode = False

    def __enter__(self) -> None:
        self._previous = _set_grad_mode(self._mode)

    def __exit__(self, *exc: object) -> None:
        _set_grad_mode(self._previous)

    def _recreate_cm(self) -> no_grad:  # one decorated function may run in two threads at once
        return type(self)()


class enable_grad(no_grad):  # noqa: N801
    """Turn recording back on inside a ``no_grad`` block."""

    _mode = True


class AnomalyError(RuntimeError):
    """A NaN or Inf appeared in a forward or backward result while anomaly mode was on."""


class detect_anomaly(contextlib.ContextDecorator):  # noqa: N801
    """``with ta.detect_anomaly():`` check every forward and backward result for NaN/Inf.

    The first non-finite value raises AnomalyError naming the op (for backward: the op whose
    rule produced it) and the line of user code that created that op in forward. In forward,
    a NaN or Inf that an op only carries from its inputs (the -inf of a masked attention score)
    is not reported: the op that introduced it is. Off by default and per thread; when off it
    costs one flag test per op.
    """

    def __enter__(self) -> None:
        global _anomaly_threads, _anomaly_listening
        self._previous, _modes.anomaly = _modes.anomaly, True
        with _anomaly_lock:
            _anomaly_threads += 1
            if _anomaly_listening is None:
                _anomaly_listening = listeners.listen(_Anomaly())

    def __exit__(self, *exc: object) -> None:
        global _anomaly_threads, _anomaly_listening
        _modes.anomaly = self._previous
        with _anomaly_lock:
            _anomaly_threads -= 1
            if _anomaly_threads == 0 and _anomaly_listening is not None:
                _anomaly_listening.remove()
                _anomaly_listening = None

    def _recreate_cm(self) -> detect_anomaly:
        return type(self)()


def is_anomaly_enabled() -> bool:
    return _modes.anomaly


def _user_frame() -> str:
    """Where user code called into tinyattn: the innermost frame outside the package."""
    package = os.path.dirname(os.path.dirname(__file__))  # tinyattn/
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


def _introduced(fn: Any, data: Any) -> str | None:
    """'NaN' or 'Inf' if the output has one and none of the inputs had that kind, else None.

    An op that only carries a value it was given did not produce it: attention fills masked
    scores with -inf on purpose, and log_softmax of a fully masked row is -inf.
    """
    for kind, test in (("NaN", "isnan"), ("Inf", "isinf")):
        if _has(data, test) and not any(_has(t.array, test) for t in fn.inputs):
            return kind
    return None


def _check_forward(fn: Any, data: Any) -> None:
    if _modes.in_rule:
        return  # ops run by a backward rule are checked as that rule's result, by the engine
    fn._trace = _user_frame()
    for k, array in enumerate(data if type(data) is tuple else (data,)):
        bad = _introduced(fn, array)
        if bad is not None:
            which = f"output {k}" if type(data) is tuple else "output"
            raise AnomalyError(
                f"{fn.name} forward produced {bad} ({which} shape {tuple(array.shape)}), "
                f"created at {fn._trace}"
            )


def _check_backward(fn: Any, position: int, grad: Any) -> None:
    bad = _nonfinite(grad)
    if bad is not None:
        where = getattr(fn, "_trace", None) or "(created before anomaly mode was on)"
        raise AnomalyError(
            f"{fn.name} backward produced {bad} in the gradient of input {position} "
            f"(shape {tuple(grad.shape)}); the {fn.name} op was created at {where}"
        )


class _Anomaly(listeners.Listener):
    """Anomaly mode's listener (while some thread is inside ``detect_anomaly``): it checks each
    op's result and each rule's gradients on the threads that asked."""

    def forward(self, fn: Any, inputs: tuple, kwargs: dict, run: Callable[[], Any]) -> Any:
        data = run()
        if _modes.anomaly:
            _check_forward(fn, data)
        return data

    def rule(self, fn: Any, output: Any, grad: Any, run: Callable[[], tuple]) -> tuple:
        if not _modes.anomaly:
            return run()
        previous, _modes.in_rule = _modes.in_rule, True  # ops it runs are checked as its result
        try:
            grads = run()
        finally:
            _modes.in_rule = previous
        for position, given in enumerate(grads):
            if given is not None and fn.inputs[position].requires_grad:
                _check_backward(fn, position, getattr(given, "array", given))
        return grads


_anomaly_listening: Any = None  # the handle of `_Anomaly` while some thread is in anomaly mode
