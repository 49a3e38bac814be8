"""PyTorch's ``torch.accelerator``: which accelerator (if any) this process can use.

Imports `backend` and `devices`. tinyattn's one accelerator type is CUDA through CuPy.
"""

from __future__ import annotations

from . import backend
from .devices import device


def is_available() -> bool:
    """True when the CuPy backend can run on a CUDA device; never raises."""
    try:
        return backend.cupy_status()[0] is not None
    except Exception:  # the probe never raises; this guards a broken install
        return False


def current_accelerator() -> device | None:
    """``device("cuda")`` when a GPU is usable, else None (PyTorch's answer without one)."""
    return device("cuda") if is_available() else None


__all__ = ["current_accelerator", "is_available"]
