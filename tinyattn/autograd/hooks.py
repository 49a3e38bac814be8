"""Gradient hooks: the `RemovableHandle` that ``register_hook`` returns, the `RETAIN_GRAD`
mark of ``retain_grad``, and the check of what a hook returns.

Below `autograd` (which runs the hooks in its engine and re-exports these names); imports only
`backend`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from .. import backend


class _RetainGrad:
    """The mark `Tensor.retain_grad` puts among a non-leaf tensor's hooks. The engine does not
    call it: once the hooks have run, it stores a copy of the tensor's gradient in ``.grad`` (or
    adds to the one there), as it does for a leaf. A copy, because the same array flows on to
    the inputs' gradients, and ``p.grad.zero_()`` must not change it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "retain_grad"


RETAIN_GRAD = _RetainGrad()


def _check_hook_result(tensor: Any, hook: Callable, result: Any) -> None:
    """A hook's replacement must be a Tensor like the tensor (SGD would spread a wrong one)."""
    name = getattr(hook, "__name__", type(hook).__name__)
    if not hasattr(result, "_ctx"):
        kind = type(result)
        raise TypeError(
            f"hook '{name}' returned a {kind.__module__}.{kind.__qualname__} for the gradient of "
            f"a tensor of shape {tuple(tensor.shape)}; a hook must return a Tensor or None"
        )
    for what, got, expected in (
        ("shape", tuple(result.shape), tuple(tensor.shape)),
        ("dtype", backend.dtype_name(result.dtype), backend.dtype_name(tensor.dtype)),
        ("device", result.device, tensor.device),
    ):
        if got != expected:
            raise RuntimeError(
                f"hook '{name}' returned a gradient with {what} {got!r} for a tensor of shape "
                f"{tuple(tensor.shape)} ({what} {expected!r}); a hook must keep the gradient's "
                "shape, dtype and device"
            )


class RemovableHandle:
    """Returned by ``register_hook``; ``handle.remove()`` unregisters the hook."""

    __slots__ = ("_hooks", "_hook")

    def __init__(self, hooks: list, hook: Callable) -> None:
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        with contextlib.suppress(ValueError):
            self._hooks.remove(self._hook)


# ------------------------------------------------------------------ post-accumulate-grad hooks
# PyTorch's ``Tensor.register_post_accumulate_grad_hook``: ``hook(leaf)`` runs once the leaf's
# ``.grad`` holds this backward's gradient. The engine hands such a leaf its gradient as soon as
# every node that read it has run (not at the end of the walk), so that work on the gradient
# (DistributedDataParallel's all-reduce) overlaps the rest of backward.


class PostAccumulateGradHook:
    """The mark a post-accumulate hook leaves among a leaf's hooks. As a gradient hook it does
    nothing (returns None); `run_post_accumulate` calls the user's hook with the leaf."""

    __slots__ = ("hook",)

    def __init__(self, hook: Callable[[Any], None]) -> None:
        self.hook = hook

    def __call__(self, grad: Any) -> None:
        return None


live = [0]  # post-accumulate hooks registered and not removed, in the whole process


class _PostAccumulateHandle(RemovableHandle):
    __slots__ = ()

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)
            live[0] -= 1


def register_post_accumulate_grad_hook(tensor: Any, hook: Callable[[Any], None]) -> Any:
    """Add `hook` to leaf `tensor`: ``hook(tensor)`` after its ``.grad`` is accumulated."""
    if tensor._ctx is not None or not tensor.requires_grad:
        raise RuntimeError(
            "register_post_accumulate_grad_hook: post accumulate grad hooks cannot be "
            "registered on non-leaf tensors or tensors that do not require grad"
        )
    if tensor._hooks is None:
        tensor._hooks = []
    mark = PostAccumulateGradHook(hook)
    tensor._hooks.append(mark)
    live[0] += 1
    return _PostAccumulateHandle(tensor._hooks, mark)


def run_post_accumulate(leaf: Any) -> None:
    """Call the post-accumulate hooks of `leaf` (its ``.grad`` is now complete)."""
    for mark in list(leaf._hooks):
        if type(mark) is PostAccumulateGradHook:
            mark.hook(leaf)


class EarlyLeaves:
    """The leaves with post-accumulate hooks in a graph, by when their gradient is complete.

    Nodes run newest first (by creation number), so a leaf's gradient is complete once the
    oldest node that read it has run: before the walk runs node number s, every leaf whose
    oldest reader is newer than s is done. One scan of the graph finds those readers."""

    def __init__(self, roots: Any) -> None:
        oldest: dict[Any, int] = {}
        seen: set[int] = set()
        stack = [root._ctx for root in roots if root._ctx is not None]
        while stack:
            fn = stack.pop()
            if id(fn) in seen or fn.inputs is None:
                continue
            seen.add(id(fn))
            for tensor in fn.inputs:
                if tensor._ctx is not None:
                    stack.append(tensor._ctx)
                elif tensor._hooks and any(
                    type(h) is PostAccumulateGradHook for h in tensor._hooks
                ):
                    oldest[tensor] = min(oldest.get(tensor, fn._seq), fn._seq)
        # Newest oldest-reader last, so that `due` pops from the end.
        self._order = sorted(oldest.items(), key=lambda item: item[1])

    def __bool__(self) -> bool:
        return bool(self._order)

    def due(self, seq: int) -> list[Any]:
        """The leaves complete before node number `seq` runs (each given once)."""
        done = []
        while self._order and self._order[-1][1] > seq:
            done.append(self._order.pop()[0])
        return done


def early_leaves(roots: Any, capture: Any = None) -> EarlyLeaves | None:
    """An `EarlyLeaves` when some post-accumulate hook is registered and the walk accumulates
    into ``.grad`` (`capture` None); else None: no scan."""
    return EarlyLeaves(roots) if live[0] and capture is None else None


def leaves_reached(outputs: Any) -> set[int]:
    """The ids of the leaves the graph of `outputs` reads (DistributedDataParallel's
    ``find_unused_parameters`` scan: a parameter not among them gets no gradient)."""
    return {id(leaf) for leaf in graph_leaves(outputs)}


def graph_leaves(outputs: Any) -> Iterator[Any]:
    """The leaves the graph of `outputs` reads, one by one as a scan meets them (a leaf read by
    several nodes comes once per reader): a generator, so a caller may stop at the first."""
    seen: set[int] = set()
    stack = [tensor._ctx for tensor in outputs if tensor._ctx is not None]
    while stack:
        fn = stack.pop()
        if id(fn) in seen or fn.inputs is None:
            continue
        seen.add(id(fn))
        for tensor in fn.inputs:
            if tensor._ctx is None:
                yield tensor
            else:
                stack.append(tensor._ctx)
