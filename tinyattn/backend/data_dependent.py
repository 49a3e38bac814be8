"""Backend results whose shape depends on the values (nonzero, unique, bincount), found on the
host where the array library cannot, and ranges computed once on the host (evenly_spaced).

Part of the backend package: the only place besides its `__init__` that imports NumPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _is_cupy_array, dtype_name, namespace, resolve_device, to_numpy


def nonzero(array: Any) -> tuple[Any, ...]:
    """``xp.nonzero(array)`` (one int64 index array per dimension, on the array's device).

    The result's length depends on the values, which the strict backend refuses (as some
    accelerator libraries do): there the indices are found on the host and moved back.
    """
    xp = namespace(array)
    if xp is np or _is_cupy_array(array):
        return tuple(xp.astype(i, xp.int64) for i in xp.nonzero(array))
    found = np.nonzero(to_numpy(array))
    return tuple(xp.asarray(i.astype(np.int64), device=array.device) for i in found)


def unique(array: Any, axis: int | None) -> tuple[Any, Any, Any]:
    """NumPy's unique of the values (sorted; with an axis, the distinct slices along it), the
    inverse (where each element, or slice, went; the input's shape without an axis) and the
    counts, int64, on the array's device. The length depends on the values, so they are found
    on the host (a GPU array is copied there), as `nonzero` does on the strict backend."""
    host = to_numpy(array)
    values, inverse, counts = np.unique(
        host, return_inverse=True, return_counts=True, axis=axis, equal_nan=False
    )
    inverse = inverse.reshape(host.shape if axis is None else (-1,)).astype(np.int64)
    xp, device = namespace(array), array.device
    return tuple(xp.asarray(a, device=device) for a in (values, inverse, counts.astype(np.int64)))


def bincount(array: Any, length: int) -> Any:
    """How often each of 0 .. length - 1 occurs in the 1-D integer array (int64, on its device;
    counted on the host, as `unique`)."""
    counts = np.bincount(to_numpy(array), minlength=length).astype(np.int64)
    return namespace(array).asarray(counts, device=array.device)


def evenly_spaced(start: float, end: float, steps: int, dtype: Any, device: Any) -> Any:
    """`steps` values from `start` to `end` inclusive, computed in float64 on the host and
    rounded once to `dtype` (so every device gets the same values), then moved to `device`."""
    xp, native = resolve_device(device)
    host = np.linspace(start, end, steps, dtype=np.float64).astype(dtype_name(dtype))
    return host if xp is np else xp.asarray(host, device=native)
