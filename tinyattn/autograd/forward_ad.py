"""Autograd, forward mode: dual tensors (``torch.autograd.forward_ad``).

Reverse mode walks the graph backwards from a scalar; forward mode carries a tangent beside each
primal through the same ops, one Jacobian-vector product per op: for ``y = f(x)`` and a tangent
``dx`` the op's ``jvp`` rule returns ``dy = J_f(x) dx``. Part of `autograd`: imports `backend`,
`listeners` and `function`, nothing above. Invariants:
- tangents live here, in one dict per open level keyed by the primal Tensor's identity (weakly:
  a dying primal drops its entry), never on the Tensor, so the reverse-only path pays nothing;
- while a level is open a `Listener` watches ``Function.apply`` (its ``made`` moment) and calls
  the op's ``jvp(self, *tangents)`` when some input has a tangent; with no level open
  ``listeners.active`` is what it was before, None on the ordinary path;
- a JVP rule is written with Tensor ops, so it composes: the tangent of a tangent (nested
  levels), and a reverse graph through the tangent when grad mode records one;
- grad mode does not stop forward mode (as in PyTorch); an integer or bool output gets no
  tangent; exiting a level drops every tangent it held.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple

from .. import backend
from . import listeners, recording
from .grad_mode import no_grad


class UnpackedDualTensor(NamedTuple):
    """What `unpack_dual` returns: the primal (a view without the tangent) and the tangent."""

    primal: Any
    tangent: Any


class _Level:
    """One dual level: the tangent of each primal that has one at this level."""

    __slots__ = ("index", "tangents")

    def __init__(self, index: int) -> None:
        self.index = index
        # id(primal) -> (weak reference to the primal, its tangent)
        self.tangents: dict[int, tuple[weakref.ref, Any]] = {}

    def get(self, tensor: Any) -> Any:
        entry = self.tangents.get(id(tensor))
        return None if entry is None or entry[0]() is not tensor else entry[1]

    def set(self, tensor: Any, tangent: Any) -> None:
        key, tangents = id(tensor), self.tangents

        def forget(ref: weakref.ref, key: int = key) -> None:
            entry = tangents.get(key)
            if entry is not None and entry[0] is ref:
                del tangents[key]

        tangents[key] = (weakref.ref(tensor, forget), tangent)


_levels: list[_Level] = []  # open levels, innermost last (global, as PyTorch's are)
# How many of the open levels (the outermost ones) the listener carries tangents for now. While
# level k's jvp rule runs it is k: the rule computes on the primals, and its own ops carry only
# the outer levels' tangents (a tangent of a tangent), never level k's (which would recurse).
# 0 inside a custom Function's forward, which PyTorch runs without forward AD.
_watched = [0]
_handle: Any = None  # the listener's handle while a level is open


# ------------------------------------------------------------------------------------ levels
def enter_dual_level() -> int:
    """Open a new dual level and return its index (PyTorch's: one level at a time)."""
    if _levels:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    return _enter()


def exit_dual_level(*, level: int | None = None) -> None:
    """Close the innermost level (which `level` must name, if given); its tangents are dropped."""
    if not _levels:
        raise RuntimeError("Dual level must be a positive number.")
    if level is not None and level != _levels[-1].index:
        raise RuntimeError(
            "Trying to exit a forward AD level that was not the last one that was created. "
            "This is not supported."
        )
    _exit()


@contextlib.contextmanager
def dual_level() -> Iterator[int]:
    """``with dual_level():`` opens a level for `make_dual` and closes it on exit."""
    index = enter_dual_level()
    try:
        yield index
    finally:
        exit_dual_level(level=index)


@contextlib.contextmanager
def nested_level() -> Iterator[int]:
    """A level inside the open ones, for transforms that nest forward mode (``func.jvp`` in
    ``func.jvp``): a tangent of a tangent is the second derivative along both directions.
    PyTorch's public API refuses nesting; this is tinyattn's door for its own transforms."""
    index = _enter()
    try:
        yield index
    finally:
        if _levels and _levels[-1].index == index:
            _exit()


def _enter() -> int:
    global _handle
    _levels.append(_Level(len(_levels)))
    _watched[0] = len(_levels)
    if _handle is None:
        _handle = listeners.listen(_TANGENTS)
    return _levels[-1].index


def _exit() -> None:
    global _handle
    _levels.pop().tangents.clear()
    _watched[0] = min(_watched[0], len(_levels))
    if not _levels and _handle is not None:
        _handle.remove()  # the ordinary path is back to one test of None
        _handle = None


def _level(level: int | None, what: str) -> _Level | None:
    if level is None:
        return _levels[-1] if _levels else None
    if not 0 <= level < len(_levels):
        raise RuntimeError(f"Invalid level given to {what}")
    return _levels[level]


@contextlib.contextmanager
def tangents_on(pairs: list) -> Iterator[Any]:
    """A new level (inside any open one) in which each (tensor, tangent) of `pairs` is dual in
    place, with no view made: for checkers, whose function reads the tensors it was given (a
    module's parameters). Yields `tangent_of` for that level."""
    with nested_level() as index:
        for tensor, tangent in pairs:
            _levels[index].set(tensor, tangent)
        yield lambda tensor: _levels[index].get(tensor)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No tangents are computed inside (a custom Function's forward; its jvp gives them)."""
    with _watching(0):
        yield


@contextlib.contextmanager
def _watching(count: int) -> Iterator[None]:
    before, _watched[0] = _watched[0], count
    try:
        yield
    finally:
        _watched[0] = before


# --------------------------------------------------------------------------- dual tensors
def make_dual(tensor: Any, tangent: Any, *, level: int | None = None) -> Any:
    """A view of `tensor` whose tangent at `level` (the innermost by default) is `tangent`.

    Shapes: tangent.shape == tensor.shape. Backward through the result reaches `tensor`; the
    tangent itself is carried, not differentiated through."""
    found = _level(level, "_make_dual")
    if found is None:
        raise RuntimeError(
            "Trying to create a dual Tensor for forward AD but no level exists, make sure to "
            "enter_dual_level() first."
        )
    for what, value in (("primal", tensor), ("tangent", tangent)):
        if not _is_floating(value):
            raise ValueError(
                f"Expected {what} to be floating point or complex, but got: {_dtype_of(value)}"
            )
    if tuple(tangent.shape) != tuple(tensor.shape):
        raise RuntimeError(
            "Trying to set a forward gradient that has a different size than that of the "
            f"original Tensor, this is not supported. Tensor is of size {list(tensor.shape)} "
            f"while the given forward gradient is of size {list(tangent.shape)}."
        )
    if tangent.device != tensor.device:
        raise RuntimeError(
            f"make_dual: the tangent is on {tangent.device} but the primal on {tensor.device}"
        )
    dual = _alias(tensor)  # other levels' tangents travel through its jvp
    found.set(dual, tangent)
    return dual


def unpack_dual(tensor: Any, *, level: int | None = None) -> UnpackedDualTensor:
    """(primal, tangent) of `tensor` at `level`: the primal is a view carrying no tangent at
    that level; the tangent is None where there is none (and outside every level)."""
    found = _level(level, "_unpack_dual")
    if found is None:
        return UnpackedDualTensor(tensor, None)
    tangent = found.get(tensor)
    if tangent is None:
        return UnpackedDualTensor(tensor, None)
    with paused():  # the primal view must not inherit the tangent it is unpacked from
        primal = _alias(tensor)
    for other in _levels:
        if other is not found and other.get(tensor) is not None:
            other.set(primal, other.get(tensor))
    return UnpackedDualTensor(primal, tangent)


def tangent_of(tensor: Any, level: int | None = None) -> Any:
    """The tangent of `tensor` at `level` (innermost by default), or None: no view is made."""
    found = _level(level, "tangent_of")
    return None if found is None else found.get(tensor)


def is_active() -> bool:
    """Whether a dual level is open."""
    return bool(_levels)


def carried(tensor: Any) -> list[tuple[int, Any]]:
    """(level, tangent) for each watched level at which `tensor` has a tangent."""
    return [
        (lv.index, lv.get(tensor)) for lv in _levels[: _watched[0]] if lv.get(tensor) is not None
    ]


def carry(tensor: Any, level: int, tangent: Any) -> None:
    """File `tangent` as `tensor`'s at `level`, for a transform that computed it itself (vmap
    runs an op's batching rule, whose own ops carry the tangents of the batch); an op whose
    outputs all have theirs is not given its jvp rule again."""
    _levels[level].set(tensor, tangent)


# --------------------------------------------------------------------------------- in place
RANDOM_FILLS = ("normal_", "uniform_")  # new values that do not depend on the old: tangent 0


def in_place_tangents(tensor: Any, op: str, compute: Any, values: tuple) -> list | None:
    """Before an in-place op writes ``compute(tensor)`` into `tensor`: the new tangent at each
    level where `tensor`, its base or a value has one, as (level, tangent) pairs; None (at once)
    when no level is open. Through a view of a dual base the view's tangent must be a view of
    the base's, which the write then reaches; otherwise it is refused rather than left stale.
    (A base without a tangent keeps none: PyTorch's would get one.)"""
    if not _levels:
        return None
    view = tensor._view
    base = view[0] if view is not None and view[0] is not tensor else None
    involved = [
        level
        for level in _levels[: _watched[0]]
        if level.get(tensor) is not None
        or (base is not None and level.get(base) is not None)
        or any(level.get(v) is not None for v in values if hasattr(v, "_ctx"))
    ]
    if not involved:
        return None
    for level in involved:
        if base is not None and not _shares_tangent(level, tensor, base):
            raise RuntimeError(
                f"{op}: an in-place write with forward AD into a view of a dual tensor, where "
                "the view's tangent is not a view of its base's tangent, is not supported: "
                "write into the base, or take the view of the dual tensor itself"
            )
    if op in RANDOM_FILLS:
        xp = backend.namespace(tensor.array)
        return [(level, tensor.constant(xp.zeros_like(tensor.array))) for level in involved]
    result = compute(tensor)  # out of place: the same op's jvp rule gives the new tangent
    return [(level, level.get(result)) for level in involved]


def store_tangents(tensor: Any, tangents: list) -> None:
    """After the write: each new tangent goes into `tensor`'s tangent in place, as PyTorch's
    does (its views see it), or becomes its tangent where it had none or one in a graph."""
    for level, new in tangents:
        if new is None:
            xp = backend.namespace(tensor.array)
            new = tensor.constant(xp.zeros_like(tensor.array))
        old = level.get(tensor)
        if old is None or old.requires_grad:
            level.set(tensor, new)
            continue
        with no_grad(), paused():
            try:
                old.copy_(new)
            except RuntimeError:  # a read-only tangent (an expanded zero): replaced instead
                level.set(tensor, new)


def _shares_tangent(level: _Level, view: Any, base: Any) -> bool:
    view_tangent, base_tangent = level.get(view), level.get(base)
    if base_tangent is None:
        return True  # nothing of the base's to keep in step
    if view_tangent is None:
        return False
    return backend.is_view_of(view_tangent.array, base_tangent.array)


# --------------------------------------------------------------------------- the listener
class _Tangents(listeners.Listener):
    """Calls an op's jvp rule when some input has a tangent, and files the output's tangent."""

    def made(self, fn: Any, result: Any) -> None:
        for level in _levels[: _watched[0]]:
            tangents = [level.get(t) for t in fn.inputs]
            if any(t is not None for t in tangents) and not _filed(level, result):
                _propagate(level, fn, result, tangents)


def _filed(level: _Level, result: Any) -> bool:
    """Whether every output already has its tangent at `level` (`carry` filed them)."""
    return all(
        level.get(out) is not None for out in (result if type(result) is tuple else (result,))
    )


_TANGENTS = _Tangents()


def _propagate(level: _Level, fn: Any, result: Any, tangents: list) -> None:
    """Run fn's jvp for `level` and file the tangent of each floating output."""
    # A replay of ta.compile repeats array calls: it would not file tangents again.
    recording.note_transform("forward_ad")
    outputs = result if type(result) is tuple else (result,)
    if not any(_is_floating(out) for out in outputs):
        return  # an index, a mask: nothing to carry
    lent = getattr(fn, "output", None)
    fn.output = result  # as the engine lends it to backward
    try:
        with _watching(level.index):
            produced = fn.jvp(*tangents)
    finally:
        fn.output = lent
    produced = produced if type(result) is tuple else (produced,)
    if not isinstance(produced, tuple | list) or len(produced) != len(outputs):
        count = len(produced) if isinstance(produced, tuple | list) else 1
        raise RuntimeError(
            f"{fn.name}.jvp returned {count} tangent(s) for {len(outputs)} output(s): "
            "return one per output (None where there is none)"
        )
    for out, tangent in zip(outputs, produced):
        if tangent is not None and _is_floating(out):
            level.set(out, _fitted(fn, out, tangent))


def _fitted(fn: Any, out: Any, tangent: Any) -> Any:
    """The tangent as a Tensor of the output's shape (an array from a rule is wrapped)."""
    if not hasattr(tangent, "_ctx"):
        tangent = out.constant(tangent)
    if tuple(tangent.shape) != tuple(out.shape):
        raise RuntimeError(
            f"{fn.name}.jvp returned a tangent of shape {tuple(tangent.shape)} for an output "
            f"of shape {tuple(out.shape)}: a tangent has its primal's shape"
        )
    return tangent


def _is_floating(tensor: Any) -> bool:
    array = getattr(tensor, "array", None)
    return array is not None and backend.is_floating(backend.namespace(array), array.dtype)


def _dtype_of(value: Any) -> str:
    array = getattr(value, "array", None)
    return type(value).__name__ if array is None else backend.dtype_name(array.dtype)


# ------------------------------------------------------------------------------- the alias
def _alias(tensor: Any) -> Any:
    """A view of `tensor` with the same shape, ``tensor[...]`` (a GetItem node, through the
    tensor's own method: autograd sits below the ops), whose backward reaches `tensor`, whose
    jvp carries `tensor`'s tangents at the other levels, and which vmap batches."""
    return tensor[...]


__all__ = [
    "UnpackedDualTensor",
    "dual_level",
    "enter_dual_level",
    "exit_dual_level",
    "make_dual",
    "unpack_dual",
]
