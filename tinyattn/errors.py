"""The exception types tinyattn raises for a call it refuses.

A refused call (a bad shape, dtype, device or argument) raises `TinyattnError`, which is both a
`ValueError`, Python's convention for a bad argument, and a `RuntimeError`, the type PyTorch
raises for most of the same calls: a program written for PyTorch that catches RuntimeError
catches it, and so does code that catches ValueError. A dim or an index out of range raises
`DimError`, also an `IndexError`, as PyTorch's does. The message names the op and what it got.
Imports nothing of tinyattn: every layer may raise these, and refuse PyTorch names with `refusing`.
The engine's two refusals of a backward (a value changed in place, a released graph) build
their messages here, so that the engine's module keeps to its own work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class TinyattnError(ValueError, RuntimeError):
    """A call tinyattn refuses: a ValueError and, as PyTorch raises, a RuntimeError."""


class DimError(TinyattnError, IndexError):
    """A dim or an index out of range: an IndexError too, as in PyTorch."""


__all__ = ["DimError", "TinyattnError"]


def modified_in_place_message(op: str, what: str, shape: tuple, current: int, expected: int) -> str:
    """Why a backward rule refuses to run: a value it reads was changed in place since."""
    return (
        "one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: {op}'s {what} of shape {tuple(shape)} is at version "
        f"{current}; expected version {expected}. Make the change out of "
        "place (y = y + 1 instead of y += 1), or after backward()."
    )


def freed_graph_message(op: str) -> str:
    """Why a backward through a released node is refused."""
    return (
        f"{op}: trying to backward through the graph a second time (or to use its saved "
        "values after they were freed). Pass retain_graph=True to the first backward() or grad() "
        "call if you need to backward through the graph again."
    )


def refusing(qualified: str, reason: str) -> Callable[..., Any]:
    """A stand-in for a PyTorch function tinyattn does not have: it keeps the name (so a
    program that imports it loads) and raises NotImplementedError naming it when called.
    `qualified` is PyTorch's full name (``torch.distributed.barrier``), `reason` the way out."""
    name = qualified.rpartition(".")[2]

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{qualified}: {reason}")

    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"Raises NotImplementedError: tinyattn has no ``{name}``."
    return refuse
