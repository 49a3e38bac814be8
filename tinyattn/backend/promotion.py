"""PyTorch's type promotion, written once: the dtype an op of several operands computes in.

Every op that meets operands of two dtypes asks `result_type`; no op relies on the array
library's own rule, which differs (NumPy makes ``int32 + float32`` float64 and ``bool + 3``
bool; PyTorch makes them float32 and int64). The rule works on dtype *names*, so it is the same
for NumPy, CuPy and the strict stand-in.

The rule, as PyTorch's ``torch.result_type``:

- Each dtype has a *category*: bool < integer < floating.
- Operands fall into three groups, by priority: tensors with dimensions, 0-d tensors, and
  Python numbers (a Python bool counts as bool, an int as int64, a float as the default
  float32). Within a group, dtypes combine pairwise by `promote_types`.
- A lower group changes the result only when its category is higher than every higher
  group's: ``float32 tensor * 0-d float64`` is float32, ``uint8 tensor + (-2)`` stays uint8
  (the number wraps, as it does in C), but ``int8 tensor * 2.5`` and ``bool tensor * 3`` rise
  to the number's category: float32 and int64.

True division and the other always-float ops (``exp`` of an integer, ``sqrt``, ``atan2``) give
the default float32 when the promoted dtype is not floating: that step is theirs, not this
module's. Imports nothing of tinyattn: the layers above call it with dtype names.
"""

from __future__ import annotations

import functools
import math
from typing import Any

# bool < integer < floating; within a category the bit width orders the dtypes.
CATEGORY = {
    "bool": 0,
    "uint8": 1,
    "int8": 1,
    "int16": 1,
    "int32": 1,
    "int64": 1,
    "float16": 2,
    "float32": 2,
    "float64": 2,
}
_BITS = {"bool": 1, "uint8": 8, "int8": 8, "int16": 16, "int32": 32, "int64": 64}
_BITS.update(float16=16, float32=32, float64=64)
DEFAULT_FLOAT = "float32"


@functools.cache
def promote_types(a: str, b: str) -> str:
    """The smallest dtype both `a` and `b` convert to without losing their category.

    bool with anything is the other; an integer with a float is the float (``int64 + float16``
    is float16, as in PyTorch; NumPy says float64); uint8 with a signed integer is the wider
    of int16 and that integer; otherwise the wider of the two."""
    if a == b:
        return a
    category_a, category_b = CATEGORY[a], CATEGORY[b]
    if category_a != category_b:
        return a if category_a > category_b else b
    if "uint8" in (a, b):  # no unsigned dtype holds int8's negatives: widen to a signed one
        signed = b if a == "uint8" else a
        return "int16" if _BITS[signed] <= 16 else signed
    return a if _BITS[a] >= _BITS[b] else b


def _number_dtype(value: bool | int | float) -> str:
    if isinstance(value, bool):
        return "bool"
    return "int64" if isinstance(value, int) else DEFAULT_FLOAT


def _combine(higher: str | None, lower: str | None) -> str | None:
    """The result of a higher-priority group and a lower one (PyTorch's combine_categories)."""
    if higher is None:
        return lower
    if lower is None or CATEGORY[higher] >= CATEGORY[lower]:
        return higher
    return promote_types(higher, lower)


def result_type(*operands: Any, names: Any = None) -> str:
    """The dtype name an op of these operands computes in, by PyTorch's rule (module docstring).

    Each operand is a Python bool, int or float, or anything with ``dtype`` and ``ndim``
    (a Tensor, a backend array). `names` maps a dtype object to its name (``dtype_name``);
    without it, ``str(dtype)`` must be the name."""
    groups: list[str | None] = [None, None, None]  # with dimensions, 0-d, Python numbers
    for operand in operands:
        if isinstance(operand, bool | int | float):
            group, dtype = 2, _number_dtype(operand)
        else:
            group = 0 if operand.ndim else 1
            dtype = names(operand.dtype) if names is not None else str(operand.dtype)
        current = groups[group]
        groups[group] = dtype if current is None else promote_types(current, dtype)
    result = _combine(groups[0], _combine(groups[1], groups[2]))
    if result is None:
        raise TypeError("result_type: no operands")
    return result


def can_cast(source: str, target: str) -> bool:
    """Whether an op's result of dtype `source` may be written into a `target` tensor in place:
    never down a category (a float into an integer tensor, a number into a bool one)."""
    return CATEGORY[source] <= CATEGORY[target]


def number_as(
    value: bool | int | float, dtype: str, op: str, checked: bool = False
) -> bool | int | float:
    """The Python number `value` as a `dtype` element holds it, as PyTorch converts a number.

    An operand of arithmetic (``checked=False``) wraps into an integer dtype's range as C
    integers do (``uint8``: -1 is 255; int32: 2**40 is 0). A value written into a tensor
    (``checked=True``: fill_, x[i] = v, full, masked_fill) must fit instead: PyTorch refuses
    300 for uint8 and 1e10 for float16 (an unsigned dtype takes down to minus its maximum, as
    c10's overflow check does). Either way a float becomes an integer by truncation toward
    zero (2.7 is 2), NaN and the infinities fit no integer and raise RuntimeError naming `op`,
    and any nonzero number is True in bool."""
    if dtype == "bool":
        return bool(value)
    if CATEGORY[dtype] == 2:
        value = float(value)
        if checked and math.isfinite(value) and abs(value) > _FLOAT_MAX[dtype]:
            raise _overflow(op, value, dtype)
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _overflow(op, value, dtype)
        value = int(value)  # truncates toward zero
    value, bits = int(value), _BITS[dtype]
    if checked:
        low, high = (-255, 255) if dtype == "uint8" else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        if not low <= value <= high:
            raise _overflow(op, value, dtype)
    value %= 1 << bits
    if dtype != "uint8" and value >= 1 << (bits - 1):
        value -= 1 << bits  # two's complement
    return value


_FLOAT_MAX = {"float16": 65504.0, "float32": 3.4028234663852886e38, "float64": math.inf}


def _overflow(op: str, value: Any, dtype: str) -> RuntimeError:
    return RuntimeError(f"{op}: value {value} cannot be converted to type {dtype} without overflow")
