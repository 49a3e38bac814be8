"""Autograd, the one seam for what watches it: `Listener`, and `active`, the one test.

Everything that watches the engine without being the idea of it attaches here: the recorder of
``ta.compile`` (`recording`), anomaly mode (`grad_mode`), the backward page's observer
(``viz.animate_backward``), forward-mode AD's tangents (``forward_ad``), and ``amp.autocast``'s
casts. ``Function.apply`` reads `active` once per op and the walk once per rule: while nobody
listens it is None, and the path a learner reads pays that one test and nothing else. A
listener sees six moments; five are given as a `run` callable that does the plain thing, so it
can act before, after, or instead, and one, ``inputs``, may change what an op runs on:

- ``inputs(fn, inputs, kwargs) -> inputs``: the Tensors an op runs on and records, in ``apply``
  before its forward (``amp.autocast`` casts them by the op's policy; the rest return them);
- ``forward(fn, inputs, kwargs, run) -> arrays``: an op's forward, in ``apply``;
- ``made(fn, result)``: the Tensor (or tuple of Tensors) ``apply`` returns;
- ``rule(fn, output, grad, run) -> gradients``: a backward rule, in the walk (`run` returns one
  gradient or None per input, as `engine` passes them on);
- ``hook(hook, grad) -> result`` and ``deliver(leaf, run)``: a tensor hook called by the walk,
  and a leaf's ``.grad`` set by it;
- ``custom(fn, args, kwargs, run) -> outputs``: the whole ``apply`` of a custom Function in
  PyTorch's protocol (vmap runs it by the Function's own vmap support).

`listen` adds a listener and returns a handle whose ``remove()`` takes it away; listeners
added later run inside earlier ones.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Listener:
    """Something that watches the engine: override the moments it watches (see the module)."""

    def inputs(self, fn: Any, inputs: tuple, kwargs: dict) -> tuple:
        return inputs

    def forward(self, fn: Any, inputs: tuple, kwargs: dict, run: Callable[[], Any]) -> Any:
        return run()

    def made(self, fn: Any, result: Any) -> None:
        pass

    def rule(self, fn: Any, output: Any, grad: Any, run: Callable[[], tuple]) -> tuple:
        return run()

    def hook(self, hook: Callable, grad: Any) -> Any:
        return hook(grad)

    def deliver(self, leaf: Any, run: Callable[[], None]) -> None:
        run()

    def custom(self, fn: Any, args: tuple, kwargs: dict, run: Callable[[], Any]) -> Any:
        return run()

    def keeps_graph(self) -> bool:
        """Whether the walk must keep the nodes it ran (a recorder replays their rules later)."""
        return False


class _All(Listener):
    """Several listeners as one: each moment nests them, the first added outermost."""

    def __init__(self, listeners: tuple) -> None:
        self.listeners = listeners

    def inputs(self, fn: Any, inputs: tuple, kwargs: dict) -> tuple:
        for listener in self.listeners:
            inputs = listener.inputs(fn, inputs, kwargs)
        return inputs

    def forward(self, fn: Any, inputs: tuple, kwargs: dict, run: Callable[[], Any]) -> Any:
        for listener in reversed(self.listeners):
            run = _bind(listener.forward, fn, inputs, kwargs, run)
        return run()

    def made(self, fn: Any, result: Any) -> None:
        for listener in self.listeners:
            listener.made(fn, result)

    def rule(self, fn: Any, output: Any, grad: Any, run: Callable[[], tuple]) -> tuple:
        for listener in reversed(self.listeners):
            run = _bind(listener.rule, fn, output, grad, run)
        return run()

    def hook(self, hook: Callable, grad: Any) -> Any:
        for listener in reversed(self.listeners):
            hook = _bind_hook(listener, hook)
        return hook(grad)

    def deliver(self, leaf: Any, run: Callable[[], None]) -> None:
        for listener in reversed(self.listeners):
            run = _bind(listener.deliver, leaf, run)
        run()

    def custom(self, fn: Any, args: tuple, kwargs: dict, run: Callable[[], Any]) -> Any:
        for listener in reversed(self.listeners):
            run = _bind(listener.custom, fn, args, kwargs, run)
        return run()

    def keeps_graph(self) -> bool:
        return any(listener.keeps_graph() for listener in self.listeners)


def _bind(moment: Callable, *args: Any) -> Callable[[], Any]:
    return lambda: moment(*args)


def _bind_hook(listener: Listener, hook: Callable) -> Callable[[Any], Any]:
    return lambda grad: listener.hook(hook, grad)


# `active` is read by apply and the walk: None, one listener, or `_All` of several.
active: Listener | None = None
_listening: list[Listener] = []
_lock = threading.Lock()  # two threads adding or removing listeners at once


class _Handle:
    """What `listen` returns: ``remove()`` stops the listener (a second call does nothing)."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener

    def remove(self) -> None:
        global active
        with _lock:
            if self.listener in _listening:
                _listening.remove(self.listener)
            active = _combined()


def listen(listener: Listener) -> _Handle:
    """Start telling `listener` what the engine does; ``.remove()`` on the result stops it."""
    global active
    with _lock:
        _listening.append(listener)
        active = _combined()
    return _Handle(listener)


def _combined() -> Listener | None:
    if not _listening:
        return None
    return _listening[0] if len(_listening) == 1 else _All(tuple(_listening))
