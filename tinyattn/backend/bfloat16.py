"""bfloat16 rounding on float32 arrays: NumPy and CuPy have no bfloat16 dtype, so a value that
PyTorch would store as bfloat16 is kept here as the float32 holding the same number.

A bfloat16 is the top 16 bits of a float32 (same exponent, 8 significant bits), so rounding is
integer arithmetic on the float32's bits: add half of the dropped part (ties to even) and clear
the low 16 bits. Used by `optim.Muon`, whose Newton-Schulz iteration runs in bfloat16 in
PyTorch.
"""

from __future__ import annotations

from typing import Any

from . import namespace

_LOW_HALF = 0xFFFF0000


def round_to_bfloat16(array: Any) -> Any:
    """A float32 array of the bfloat16 values nearest to `array`'s (ties to even), as PyTorch's
    float32 -> bfloat16 conversion rounds; NaN stays NaN and infinities stay infinite."""
    xp = namespace(array)
    array = xp.asarray(array, dtype=xp.float32)
    bits = xp.astype(array.view(xp.uint32), xp.uint64)  # room for the carry of the rounding
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & _LOW_HALF
    result = xp.astype(rounded, xp.uint32).view(xp.float32)
    return xp.where(xp.isnan(array), array, result)
