"""Host buffers for the collective engines: the arrays MPI reads and writes.

Part of `backend` (the one place that imports NumPy): `tinyattn.distributed` hands a tensor's
array here and gets a row-major host array that MPI can use as a buffer, and writes the result
back into the tensor's own memory afterwards. A host array that is already row-major is used as
it is (no copy); a view with gaps, or an array on a GPU, is staged through a host copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import copy_into, is_host_array, namespace, to_numpy


def host_buffer(array: Any) -> np.ndarray:
    """`array` itself when MPI can write it in place (host, row-major), else a host copy."""
    if isinstance(array, np.ndarray) and array.flags.c_contiguous and array.flags.writeable:
        return array
    return np.ascontiguousarray(to_numpy(array))


def host_empty(shape: tuple, like: Any) -> np.ndarray:
    """A new row-major host array of `shape` and `like`'s dtype (values not set)."""
    return np.empty(shape, dtype=np.dtype(str(like.dtype)))


def write_back(target: Any, host: np.ndarray) -> None:
    """``target[...] = host``, onto target's device; nothing to do when they are one array."""
    if host is target:
        return
    if is_host_array(target):
        np.copyto(target, host.reshape(target.shape), casting="unsafe")
        return
    copy_into(target, namespace(target).asarray(host.reshape(target.shape)))


def host_dtype_kind(array: Any) -> str:
    """NumPy's kind letter of `array`'s dtype: 'b' bool, 'i'/'u' integer, 'f' float."""
    return np.dtype(str(array.dtype)).kind
