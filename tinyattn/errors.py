"""The exception types tinyattn raises for a call it refuses.

A refused call (a bad shape, dtype, device or argument) raises `TinyattnError`, which is both a
`ValueError`, Python's convention for a bad argument, and a `RuntimeError`, the type PyTorch
raises for most of the same calls: a program written for PyTorch that catches RuntimeError
catches it, and so does code that catches ValueError. A dim or an index out of range raises
`DimError`, also an `IndexError`, as PyTorch's does. The message names the op and what it got.
Imports nothing: every layer may raise these.
"""

from __future__ import annotations


class TinyattnError(ValueError, RuntimeError):
    """A call tinyattn refuses: a ValueError and, as PyTorch raises, a RuntimeError."""


class DimError(TinyattnError, IndexError):
    """A dim or an index out of range: an IndexError too, as in PyTorch."""


__all__ = ["DimError", "TinyattnError"]
