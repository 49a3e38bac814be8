"""Functional transforms, vmap's machinery: batched tensors and the listener that batches ops.

Inside ``vmap`` a batched tensor is an ordinary Tensor whose ``array`` is a `Batched`: the
*physical* Tensor (the batch dim first, as a graph of ordinary ops) and the vmap level it belongs
to. The Tensor reports the *logical* shape (the physical one without its batch dim), so every
Tensor method and free function checks and normalises its arguments as for one sample, and the
op reaches ``Function.apply`` unchanged. There the vmap listener (`_Vmapping`, on the engine's one
seam) runs the op's batching rule instead of its forward: the rule calls ordinary ops on the
physical Tensors (which record the graph) and its result is wrapped as a new `Batched`.

An op declares its rule beside its forward, as ``vmap_rule``: one of the kinds below by name
("elementwise", "reduction", ...) or a staticmethod ``vmap_rule(values, batched, kwargs, size)``.
An op without one runs once per sample (a loop over ``x[i]``) and a warning names it.

Nested vmaps nest the wrappers: a level-2 `Batched` holds a Tensor that is batched at level 1,
so a rule's ops on it meet the listener again, one level down. Gradients never see `Batched`:
``grad`` under vmap differentiates the physical graph (`tinyattn.func.transforms`).
Imports `autograd`, `backend` and `ops.batching` (the Tensors it handles bring their methods;
a custom Function applied per sample is stacked by `methods.common.stack`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from .. import backend
from ..autograd import forward_ad, listeners
from ..autograd.torch_protocol import vmap_support
from ..ops import batching

# ------------------------------------------------------------------------- batched arrays


class Batched:
    """What a batched Tensor holds as its ``array``: `value`, a Tensor whose dim 0 is the batch
    of vmap level `level`. Shapes: value (B, *shape) -> shape."""

    __slots__ = ("value", "level")

    def __init__(self, value: Any, level: int) -> None:
        self.value, self.level = value, level

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape[1:])

    @property
    def ndim(self) -> int:
        return self.value.ndim - 1

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def dtype(self) -> Any:
        return self.value.dtype

    @property
    def device(self) -> Any:
        return backend.device_of(physical_array(self))

    def __array_namespace__(self, api_version: Any = None) -> Any:
        return backend.namespace(physical_array(self))

    # Value checks before an op (targets in range, an index's bounds) compare a tensor's array
    # with numbers: every sample's values are checked at once, on the physical array.
    __lt__ = lambda self, other: physical_array(self) < other  # noqa: E731
    __le__ = lambda self, other: physical_array(self) <= other  # noqa: E731
    __gt__ = lambda self, other: physical_array(self) > other  # noqa: E731
    __ge__ = lambda self, other: physical_array(self) >= other  # noqa: E731
    __eq__ = lambda self, other: physical_array(self) == other  # noqa: E731
    __ne__ = lambda self, other: physical_array(self) != other  # noqa: E731
    __hash__ = None

    def min(self, *args: Any, **kwargs: Any) -> Any:  # an index's bounds, over every sample
        return physical_array(self).min()

    def max(self, *args: Any, **kwargs: Any) -> Any:
        return physical_array(self).max()

    def __repr__(self) -> str:
        return f"Batched(level={self.level}, shape={self.shape}, batch={self.value.shape[0]})"


def physical_array(array: Any) -> Any:
    """The backend array under any number of `Batched` levels."""
    while type(array) is Batched:
        array = array.value.array
    return array


def is_batched(tensor: Any) -> bool:
    return type(getattr(tensor, "array", None)) is Batched


def level_of(tensor: Any) -> int:
    """The highest vmap level `tensor` is batched at, or -1."""
    array = getattr(tensor, "array", None)
    return array.level if type(array) is Batched else -1


def wrap(value: Any, level: int) -> Any:
    """A batched Tensor of `level` over the physical Tensor `value` (batch dim first)."""
    return value._from_op(Batched(value, level), None)


def unwrap(tensor: Any, level: int) -> Any:
    """The physical Tensor of `tensor` at `level`, or None if it is not batched there."""
    array = tensor.array
    if type(array) is Batched and array.level == level:
        return array.value
    return None


# ----------------------------------------------------------------------------- the levels
class _Level:
    """One active vmap: its number, batch size and randomness mode."""

    __slots__ = ("number", "size", "randomness")

    def __init__(self, number: int, size: int, randomness: str) -> None:
        self.number, self.size, self.randomness = number, size, randomness


_numbers = itertools.count(1)
_state = threading.local()  # .levels: the calling thread's active vmaps, innermost last
_listening: list[Any] = []  # the listener's handle while some thread vmaps
_users = [0]
_lock = threading.Lock()


def active_levels() -> list[_Level]:
    levels = getattr(_state, "levels", None)
    if levels is None:
        levels = _state.levels = []
    return levels


def find_level(number: int) -> _Level:
    for level in active_levels():
        if level.number == number:
            return level
    raise RuntimeError(
        f"vmap: a tensor batched by a vmap that has returned (level {number}) was used; "
        "return it from the vmapped function instead of keeping it"
    )


@contextlib.contextmanager
def entered_level(size: int, randomness: str) -> Iterator[_Level]:
    """A new vmap level for this thread while the block runs (and the vmap listener and draw
    hook while any thread has one)."""
    level = _Level(next(_numbers), size, randomness)
    with _lock:
        _users[0] += 1
        if _users[0] == 1:
            _listening.append(listeners.listen(_Vmapping()))
            if backend.draw_hook is None:  # (a recording refuses vmap: it has none then)
                backend.set_draw_hook(_draw)
    active_levels().append(level)
    try:
        yield level
    finally:
        active_levels().remove(level)
        with _lock:
            _users[0] -= 1
            if _users[0] == 0:
                _listening.pop().remove()
                if backend.draw_hook is _draw:
                    backend.set_draw_hook(None)


def _draw(function: Any, args: tuple, result: Any) -> None:
    """Every random draw while some thread vmaps: one made by the function itself (a factory
    such as ``randn``) or by an op without a rule must agree with the vmaps' `randomness`."""
    levels = active_levels()
    drawing = getattr(_state, "drawing", None)
    if not levels or drawing == "rule":
        return
    modes = {level.randomness for level in levels}
    name = "a random factory" if drawing is None else drawing
    if "error" in modes:
        check_random(name, levels[-1])
    if drawing is None and "different" in modes:
        raise RuntimeError(
            "vmap: randomness='different' cannot batch a random factory (randn, rand, ...) "
            "called inside the function: draw the batch of values outside vmap and pass it in "
            "with an in_dim, or use randomness='same'"
        )
    if drawing is not None and "same" in modes:
        raise RuntimeError(
            f"vmap: randomness='same' cannot batch {drawing}, which has no batching rule and "
            "would draw once per sample; use randomness='different' or call it outside vmap"
        )


# ---------------------------------------------------------------------------- the listener
class _Vmapping(listeners.Listener):
    """Runs an op's batching rule when some input is batched; otherwise the plain forward."""

    def forward(self, fn: Any, inputs: tuple, kwargs: dict, run: Callable[[], Any]) -> Any:
        number = max([level_of(t) for t in inputs], default=-1)
        if number < 0:
            return run()
        return batch_op(type(fn), inputs, kwargs, find_level(number))

    def custom(self, fn: Any, args: tuple, kwargs: dict, run: Callable[[], Any]) -> Any:
        number = max([level_of(a) for a in args if hasattr(a, "_ctx")], default=-1)
        if number < 0:
            return run()
        outputs, several = batch_custom(fn, args, kwargs, find_level(number))
        logical = tuple(wrap(o, number) for o in outputs)
        return logical if several else logical[0]

    def made(self, fn: Any, result: Any) -> None:
        # The graph lives in the physical Tensors; the logical result is not a node of it. So
        # do the tangents of forward mode: the rule's ops carried them on the physical Tensors.
        for out in result if type(result) is tuple else (result,):
            if type(out.array) is Batched:
                out._ctx, out.requires_grad = None, False
                for index, tangent in forward_ad.carried(out.array.value):
                    forward_ad.carry(out, index, _renested(tangent, out.array.level))


class VmapInfo(NamedTuple):
    """What a custom Function's static ``vmap(info, in_dims, *args)`` is given, as PyTorch's."""

    batch_size: int
    randomness: str


def batch_custom(fn: Any, args: tuple, kwargs: dict, level: _Level) -> tuple:
    """A custom Function in PyTorch's protocol applied to arguments batched at `level`, by its
    vmap support: its static ``vmap`` on the physical arguments (their batch dims in
    `in_dims`), or with ``generate_vmap_rule`` one apply per sample, stacked. Either way the
    physical graph holds its nodes. Returns (outputs, whether forward returned a tuple)."""
    cls = type(fn)
    physical = [unwrap(a, level.number) if hasattr(a, "_ctx") else None for a in args]
    if vmap_support(cls) == "rule":
        in_dims = tuple(None if p is None else 0 for p in physical)
        given = [a if p is None else p for a, p in zip(args, physical)]
        info = VmapInfo(level.size, level.randomness)
        output, out_dims = cls.vmap(info, in_dims, *given, **kwargs)
        several = isinstance(output, tuple)
        outputs = output if several else (output,)
        dims = out_dims if isinstance(out_dims, tuple) else (out_dims,) * len(outputs)
        moved = [
            batching.expanded(o, level.size) if d is None else o.movedim(d, 0)
            for o, d in zip(outputs, dims)
        ]
        return tuple(moved), several
    samples = []
    for i in range(level.size):
        sample = [a if p is None else p[i] for a, p in zip(args, physical)]
        samples.append(cls.apply(*sample, **kwargs))
    from ..methods.common import stack

    several = isinstance(samples[0], tuple)
    columns = zip(*samples) if several else [samples]
    return tuple(stack(list(column), 0) for column in columns), several


def _physical_tangent(tangent: Any, level: _Level) -> Any:
    """A batched input's tangent as its physical Tensor's at `level` (`_renested` undone): its
    own physical Tensor there, the same for every sample where it is not batched there, and
    under an inner vmap's batch dim, level by level. Shapes: *s -> (B_level, *s)."""
    top = level_of(tangent)
    if top == level.number:
        return tangent.array.value
    if top < level.number:
        return batching.expanded(tangent, level.size)
    inner = _physical_tangent(tangent.array.value, level)  # (B_level, B_top, *s) below `top`
    return wrap(inner.movedim(0, 1), top)


def _renested(tangent: Any, level: int) -> Any:
    """The tangent of a physical result of `level` as the logical result's. A tangent batched by
    a vmap inside `level`'s (a jvp whose tangents an inner vmap batches, on a primal an outer one
    batches) has that inner batch dim outermost: it goes back under `level`'s, level by level.
    Shapes: (B_level, *s) -> *s; an inner level's (B_inner, B_level, *s) -> (B_inner, *s)."""
    top = level_of(tangent)
    if top <= level:
        return wrap(tangent, level)
    inner = tangent.array.value  # (B_top, B_level, *s), as the levels below `top` see it
    return wrap(_renested(inner.movedim(1, 0), level), top)


def batch_op(cls: type, inputs: tuple, kwargs: dict, level: _Level) -> Any:
    """The op `cls` on `inputs`, some batched at `level`: its rule on the physical Tensors, the
    result wrapped again. Shapes: each batched input (B, ...) -> result (B, ...)."""
    values = [unwrap(t, level.number) for t in inputs]
    batched = tuple(v is not None for v in values)
    values = [t if v is None else v for t, v in zip(inputs, values)]
    values, batched = _physical_tangents(inputs, values, batched, level)
    rule = rule_of(cls)
    if rule is None:
        result = loop_fallback(cls, values, batched, kwargs, level)
    else:
        if rule in batching.RANDOM:
            check_random(cls.__name__, level)
            kwargs = {**kwargs, "randomness": level.randomness}
        kind = batching.KINDS[rule] if isinstance(rule, str) else rule
        _state.drawing = "rule"  # the rule draws as `randomness` says
        try:
            result = kind(cls, values, batched, kwargs, level.size)
        finally:
            _state.drawing = None
        if result is NotImplemented:  # the rule declines these arguments
            result = loop_fallback(cls, values, batched, kwargs, level)
    if type(result) is tuple:
        return tuple(Batched(r, level.number) for r in result)
    return Batched(result, level.number)


def _physical_tangents(inputs: tuple, values: list, batched: tuple, level: _Level) -> tuple:
    """Forward mode: each batched input's tangents filed on its physical Tensor too, so that
    the rule's ops carry them (the logical op's jvp never runs: its forward did not). An input
    the same for every sample whose tangent varies over the batch (a jvp's tangent batched by
    this vmap, on a primal it does not batch) takes part as batched, its samples aligned with
    its tangent's. Returns the (values, batched) the rule gets."""
    values, flags = list(values), list(batched)
    for k, tensor in enumerate(inputs):
        carried = forward_ad.carried(tensor)
        if not flags[k] and any(_batched_at(t, level.number) for _, t in carried):
            values[k], flags[k] = batching.expanded(tensor, level.size), True
            for index, tangent in carried:  # replaces the expand's own (unaligned) tangent
                forward_ad.carry(values[k], index, _physical_tangent(tangent, level))
        elif flags[k]:
            for index, tangent in carried:
                if forward_ad.tangent_of(values[k], index) is None:
                    forward_ad.carry(values[k], index, _physical_tangent(tangent, level))
    return values, tuple(flags)


def _batched_at(tensor: Any, number: int) -> bool:
    """Whether `tensor` is batched at vmap level `number`, at any depth of its nesting."""
    array = tensor.array
    while type(array) is Batched:
        if array.level == number:
            return True
        array = array.value.array
    return False


_rules: dict[type, Any] = {}


def rule_of(cls: type) -> Any:
    """The batching rule `cls` declares: its own ``vmap_rule`` (a custom Function's), else its
    entry in its op module's ``VMAP_RULES`` table (a kind's name), else None."""
    own = getattr(cls, "vmap_rule", None)
    if own is not None:
        return own
    if not _rules:
        from ..ops import (
            conv,
            division,
            elementwise,
            fused,
            indexing,
            losses,
            movement,
            reductions,
            rounding,
            scan,
            shape,
            softmax,
            special,
            targets,
            trig,
        )
        from ..ops.computed import VMAP_RULES as COMPUTED_RULES

        for module in (elementwise, trig, rounding, division, special, reductions, shape):
            _rules.update(getattr(module, "VMAP_RULES", {}))
        for module in (softmax, scan, fused, indexing, movement, losses, targets, conv):
            _rules.update(getattr(module, "VMAP_RULES", {}))
        _rules.update(COMPUTED_RULES)  # (the package's name `computed` is the function)
    return _rules.get(cls)


def check_random(name: str, level: _Level) -> None:
    if level.randomness == "error":
        raise RuntimeError(
            f"vmap: called random operation {name} while in randomness error mode. Please "
            "either use the 'same' or 'different' randomness flags on vmap or perform the "
            "randomness operation out of vmap"
        )


def loop_fallback(cls: type, values: list, batched: tuple, kwargs: dict, level: _Level) -> Any:
    """The op once per sample, the results stacked: for ops that declare no batching rule."""
    warnings.warn(
        f"vmap: there is no batching rule for {cls.__name__}, so it runs once per sample "
        f"({level.size} times) in a Python loop; declare vmap_rule on {cls.__name__} to batch it",
        UserWarning,
        stacklevel=4,
    )
    samples = []
    _state.drawing = cls.__name__  # a draw in it is one sample's: see `_draw`
    try:
        for i in range(level.size):
            args = [v[i] if b else v for v, b in zip(values, batched)]
            samples.append(cls.apply(*args, **kwargs))
    finally:
        _state.drawing = None
    if type(samples[0]) is tuple:
        return tuple(_stack([s[k] for s in samples]) for k in range(len(samples[0])))
    return _stack(samples)


def _stack(tensors: list) -> Any:
    """Tensors of one shape stacked on a new dim 0 (as ops, so the graph holds)."""
    from ..methods.common import stack

    return stack(tensors, 0)
