"""Optim layer: what the optimizers of adam_variants.py, classic.py, lbfgs.py and muon.py share.

Imports the Optimizer base beside it. These optimizers keep every key of PyTorch's parameter
groups (``maximize``, ``foreach``, ``capturable``, ``differentiable`` included), so their
``state_dict()`` has PyTorch's layout and a PyTorch state dict loads without dropping a flag.
``maximize=True`` is supported (the gradient is negated first, as in PyTorch); ``foreach``,
``capturable`` and ``differentiable`` are accepted and change nothing: these run the per-tensor
loop only. PyTorch keeps some per-parameter numbers as float32 0-d tensors (NAdam's
``mu_product``, ASGD's ``eta`` and ``mu``); here they are Python floats rounded to float32, so a
float64 run follows PyTorch's to the last bits.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from ..errors import TinyattnError
from ..tensor import Tensor
from .optimizer import Optimizer, _plain


def float32(value: float) -> float:
    """`value` rounded to float32, as PyTorch stores it in a float32 0-d state tensor."""
    return struct.unpack("f", struct.pack("f", value))[0]


def check_range(op: str, name: str, value: Any, low: float, high: float | None = None) -> None:
    """PyTorch's ValueError for a hyper-parameter outside [low, high], naming op and value."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)
    if not ok or value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise TinyattnError(f"{op}: invalid {name} value {value!r} (must be {bound})")


def check_betas(op: str, betas: Any) -> tuple[float, float]:
    """A pair (beta1, beta2), each in [0, 1)."""
    if not isinstance(betas, tuple | list) or len(betas) != 2:
        raise TinyattnError(f"{op}: betas must be a pair (beta1, beta2), got {betas!r}")
    for index, beta in enumerate(betas):
        check_range(op, f"beta parameter at index {index}", beta, 0.0)
        if beta >= 1.0:
            raise TinyattnError(f"{op}: invalid beta parameter at index {index}: {beta!r}")
    return tuple(betas)


def check_flags(op: str, group: dict[str, Any]) -> None:
    """The flags every group of these optimizers holds: bools, and foreach None or a bool."""
    for name in ("maximize", "capturable", "differentiable"):
        if name in group and not isinstance(group[name], bool):
            raise TinyattnError(f"{op}: {name} must be a bool, got {group[name]!r}")
    if group.get("foreach") is not None and not isinstance(group["foreach"], bool):
        raise TinyattnError(f"{op}: invalid foreach {group['foreach']!r} (None, True or False)")


class LoopOptimizer(Optimizer):
    """An Optimizer with PyTorch's full parameter-group keys, the per-tensor loop only, and
    `scalar_keys`: per-parameter state numbers that are Python floats here (0-d tensors in
    PyTorch's state dicts)."""

    scalar_keys: tuple[str, ...] = ()

    def _converted_state(self, op: str, saved: dict) -> dict[Tensor, dict[str, Any]]:
        """The base conversion, with the scalar keys taken out first and put back as floats."""
        numbers: dict[Any, dict[str, float]] = {}
        arrays: dict[Any, dict[str, Any]] = {}
        for index, entries in saved.items():
            entries = dict(entries)
            numbers[index] = {
                key: float(_plain(entries.pop(key))) for key in self.scalar_keys if key in entries
            }
            arrays[index] = entries
        converted = super()._converted_state(op, arrays)
        params = self._all_params()
        for index, values in numbers.items():
            converted.setdefault(params[int(index)], {}).update(values)
        return converted
