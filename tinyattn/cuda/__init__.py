"""tinyattn.cuda: PyTorch's ``torch.cuda`` queries mapped onto the CuPy backend.

``is_available()`` is the backend probe's answer (CuPy importable, a device found, a kernel
ran) and never raises. tinyattn draws every random number on the host (so all devices start
from the same numbers), hence ``manual_seed`` and ``manual_seed_all`` seed that one host
generator, exactly as ``ta.manual_seed`` does; without a GPU they still do (PyTorch ignores
them silently there, and the host RNG is what tinyattn's GPU runs use anyway).
"""

from __future__ import annotations

import re
from typing import Any

from .. import backend


def is_available() -> bool:
    """True when the CuPy backend can run on a CUDA device; never raises."""
    try:
        return backend.cupy_status()[0] is not None
    except Exception:  # the probe itself never raises; this guards a broken install
        return False


def device_count() -> int:
    """The number of CUDA devices CuPy sees (0 without a usable GPU)."""
    if not is_available():
        return 0
    found = re.search(r"on (\d+) device", backend.cupy_status()[1])
    return int(found.group(1)) if found else 1


def manual_seed(seed: int) -> None:
    """Seed tinyattn's host generator (the one every device's random numbers come from)."""
    backend.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    """The same as manual_seed: tinyattn has one generator for all devices."""
    backend.manual_seed(seed)


def current_device() -> int:
    if not is_available():
        raise RuntimeError("cuda.current_device: no usable CUDA device (" + status() + ")")
    return 0


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """False: tinyattn has no bfloat16 dtype on any device (NumPy and CuPy have none)."""
    return False


def synchronize(device: Any = None) -> None:
    """Wait for the GPU's queued work to finish (PyTorch's ``torch.cuda.synchronize``)."""
    if not is_available():
        raise RuntimeError("cuda.synchronize: no usable CUDA device (" + status() + ")")
    backend.synchronize()


def __getattr__(name: str) -> Any:
    # `torch.cuda.amp.GradScaler` reads the submodule as an attribute; load it on first use.
    if name == "amp":
        import importlib

        return importlib.import_module(".amp", __name__)
    raise AttributeError(f"module 'tinyattn.cuda' has no attribute {name!r}")


def status() -> str:
    """The backend probe's reason: why CUDA is or is not usable."""
    return backend.cupy_status()[1]


__all__ = [
    "current_device",
    "device_count",
    "is_available",
    "is_bf16_supported",
    "manual_seed",
    "manual_seed_all",
    "synchronize",
]
