"""``torch.backends.mps``: tinyattn has no Apple GPU (MPS) backend."""

from __future__ import annotations


def is_available() -> bool:
    """False: there is no MPS device in tinyattn."""
    return False


def is_built() -> bool:
    """False: tinyattn is not built with MPS."""
    return False


__all__ = ["is_available", "is_built"]
