"""The exception types tinyattn raises for a call it refuses.

A refused call (a bad shape, dtype, device or argument) raises `TinyattnError`, which is both a
`ValueError`, Python's convention for a bad argument, and a `RuntimeError`, the type PyTorch
raises for most of the same calls: a program written for PyTorch that catches RuntimeError
catches it, and so does code that catches ValueError. A dim or an index out of range raises
`DimError`, also an `IndexError`, as PyTorch's does. The message names the op and what it got.
Imports nothing of tinyattn: every layer may raise these, and refuse PyTorch names with `refusing`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class TinyattnError(ValueError, RuntimeError):
    """A call tinyattn refuses: a ValueError and, as PyTorch raises, a RuntimeError."""


class DimError(TinyattnError, IndexError):
    """A dim or an index out of range: an IndexError too, as in PyTorch."""


__all__ = ["DimError", "TinyattnError"]


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
