"""nn.utils: gradient clipping with PyTorch's names, ``clip_grad_norm_`` and ``clip_grad_value_``.

Both change the gradients in place, as PyTorch does: a tensor holding ``p.grad`` sees the new
values, and its version goes up (backward gives each leaf a gradient of its own, so scaling one
never changes another's). The arithmetic follows PyTorch's: the norm of the per-tensor norms
(for the 2-norm, the square root of the summed squares, each tensor's by one dot product), then
``grad * min(1, max_norm / (total + 1e-6))`` in the gradients' dtype.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from .. import backend
from ..autograd import replayed_call
from ..errors import TinyattnError
from ..tensor import Tensor


def _with_grads(op: str, parameters: Any) -> list[Tensor]:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    for position, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"{op}: parameter {position} is a {type(p).__name__}, not a Tensor")
    return [p for p in params if p.grad is not None]


@replayed_call  # a compiled step runs it on every replay
def clip_grad_norm_(
    parameters: Iterable[Tensor] | Tensor,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: Any = None,
) -> Tensor:
    """Scale all gradients together so their joint norm is at most max_norm; returns the
    total norm before clipping as a 0-d Tensor (PyTorch's rule and return value)."""
    op = "clip_grad_norm_"
    if isinstance(max_norm, bool) or not isinstance(max_norm, int | float) or max_norm < 0:
        raise TinyattnError(f"{op}: max_norm must be a number >= 0, got {max_norm!r}")
    norm_type = float(norm_type)
    if not (norm_type > 0):
        raise TinyattnError(f"{op}: norm_type must be > 0 (or inf), got {norm_type}")
    grads = _with_grads(op, parameters)
    if not grads:
        return Tensor(0.0)
    xp = backend.namespace(grads[0].grad.array)
    devices = {g.grad.device for g in grads}
    if len(devices) > 1:
        raise RuntimeError(f"{op}: gradients are on several devices {sorted(devices)}")
    dtype = grads[0].grad.array.dtype
    if norm_type == math.inf:
        norms = [xp.max(xp.abs(p.grad.array)) for p in grads]
        total = xp.max(xp.stack([xp.astype(n, dtype) for n in norms]))
    elif norm_type == 2.0:
        squares = [xp.astype(backend.squared_norm(p.grad.array), dtype) for p in grads]
        total = xp.sqrt(xp.sum(xp.stack(squares)))
    else:
        norms = [xp.sum(xp.abs(p.grad.array) ** norm_type) ** (1.0 / norm_type) for p in grads]
        stacked = xp.stack([xp.astype(n, dtype) for n in norms])
        total = xp.sum(stacked**norm_type) ** (1.0 / norm_type)
    total_float = float(total)
    if error_if_nonfinite and not math.isfinite(total_float):
        raise RuntimeError(
            f"{op}: the total norm of order {norm_type} of the gradients is non-finite "
            f"({total_float}); set error_if_nonfinite=False to clip anyway"
        )
    coefficient = xp.clip(max_norm / (total + 1e-6), max=1.0)
    for p in grads:  # in place, as PyTorch: a tensor holding p.grad sees the clipped values
        grad = p.grad
        scale = xp.astype(coefficient, grad.array.dtype)
        if backend.is_buffer(grad.array):
            backend.multiply_into(grad.array, scale)
            grad._version_counter[0] += 1
        else:  # a 0-d NumPy scalar cannot be written: _store replaces it
            grad._store(op, grad.array * scale)
    return Tensor._from_op(total, None)


@replayed_call  # a compiled step runs it on every replay
def clip_grad_value_(
    parameters: Iterable[Tensor] | Tensor, clip_value: float, foreach: Any = None
) -> None:
    """Clamp every gradient element into [-clip_value, clip_value]."""
    op = "clip_grad_value_"
    if isinstance(clip_value, bool) or not isinstance(clip_value, int | float):
        raise TypeError(f"{op}: clip_value must be a number, got {clip_value!r}")
    clip_value = float(clip_value)
    for p in _with_grads(op, parameters):  # in place, as PyTorch
        xp = backend.namespace(p.grad.array)
        p.grad._store(op, xp.clip(p.grad.array, -clip_value, clip_value))


__all__ = ["clip_grad_norm_", "clip_grad_value_"]
