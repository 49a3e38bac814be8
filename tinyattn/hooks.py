"""Gradient hooks: the `RemovableHandle` that ``register_hook`` returns, the `RETAIN_GRAD`
mark of ``retain_grad``, and the check of what a hook returns.

Below `autograd` (which runs the hooks in its engine and re-exports these names); imports only
`backend`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from . import backend


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
