"""Strided views: sliding windows over the trailing axes of an array, for convolution and
pooling, and broadcasts.

Handed the array module by `backend.sliding_windows`: NumPy and CuPy get a strided view (no
copy: each window offset is one more stride), other array API namespaces a stack of strided
slices, one per window offset. `backend.broadcast_view` makes NumPy's broadcast views directly,
and `extent` says which bytes of its memory a view reaches.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np


def broadcast(xp: Any, array: Any, shape: tuple) -> Any:
    """``xp.broadcast_to(array, shape)``, `array` of the same number of axes. For a contiguous
    NumPy array the same read-only view is made directly, an ndarray over its memory with
    stride 0 on each broadcast axis: 0.5 us, where NumPy's broadcast_to (Python around an
    iterator) takes 4 us."""
    if type(array) is not np.ndarray or not array.flags.c_contiguous or array.ndim != len(shape):
        return xp.broadcast_to(array, shape)
    strides = tuple(
        0 if n == 1 and size != 1 else stride
        for n, size, stride in zip(array.shape, shape, array.strides, strict=True)
    )
    view = np.ndarray(shape, array.dtype, array, 0, strides)
    view.flags.writeable = False  # as broadcast_to's: a write would reach every copy at once
    return view


def counts(size: tuple, window: tuple, step: tuple, dilation: tuple) -> tuple:
    """Windows along each axis: (size - dilation * (window - 1) - 1) // step + 1."""
    return tuple(
        (n - d * (k - 1) - 1) // s + 1
        for n, k, s, d in zip(size, window, step, dilation, strict=True)
    )


def strided(module: Any, array: Any, window: tuple, step: tuple, dilation: tuple) -> Any:
    """The windows as a read-only view: window o, offset k of an axis sits at
    o * step + k * dilation, so its strides are the axis stride times step and times dilation."""
    lead = array.ndim - len(window)
    found = counts(array.shape[lead:], window, step, dilation)
    axis_strides = array.strides[lead:]
    # Windows overlap in memory: a write through the view would reach several windows, so
    # NumPy's is read-only (CuPy's as_strided has no such flag).
    read_only = {"writeable": False} if module.__name__ == "numpy" else {}
    return module.lib.stride_tricks.as_strided(
        array,
        shape=array.shape[:lead] + found + tuple(window),
        strides=array.strides[:lead]
        + tuple(t * s for t, s in zip(axis_strides, step, strict=True))
        + tuple(t * d for t, d in zip(axis_strides, dilation, strict=True)),
        **read_only,
    )


def stacked(xp: Any, array: Any, window: tuple, step: tuple, dilation: tuple) -> Any:
    """The windows by slicing (a copy): one strided slice per window offset, stacked last."""
    lead = array.ndim - len(window)
    found = counts(array.shape[lead:], window, step, dilation)
    slices = []
    for offset in itertools.product(*(range(k) for k in window)):
        index = tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s)
            for o, d, n, s in zip(offset, dilation, found, step, strict=True)
        )
        slices.append(array[(slice(None),) * lead + index])
    joined = xp.stack(slices, axis=-1)  # (*lead, *counts, prod(window))
    return xp.reshape(joined, joined.shape[:-1] + tuple(window))


def extent(array: Any) -> tuple[int, int]:
    """[first byte, end) of the memory a NumPy, CuPy or strict stand-in array reaches, by its
    pointer, shape and strides: views of one array whose extents do not meet share no element."""
    array = getattr(array, "_array", array)  # the strict stand-in's NumPy array
    interface = getattr(array, "__array_interface__", None)  # NumPy arrays and scalars
    start = interface["data"][0] if interface is not None else array.data.ptr  # CuPy
    low = high = start
    for size, stride in zip(array.shape, array.strides, strict=True):
        if size == 0:
            return start, start
        if stride > 0:
            high += (size - 1) * stride
        else:
            low += (size - 1) * stride
    return low, high + array.itemsize


def overlaps(array: Any, others: list) -> bool:
    """Whether `array` reaches a byte that one of `others` reaches (by their extents)."""
    if not others:  # the common case: the first array of its memory, no extent needed
        return False
    low, high = extent(array)
    return any(low < end and start < high for start, end in map(extent, others))
