"""Running extremes and the running log-sum-exp along one axis (cummax, cummin, logcumsumexp).

Neither has a derivative rule of its own. cummax and cummin find, on arrays, the position of the
running extreme (`running_extreme_positions`); the values are then ``x.gather(axis, positions)``,
so the gradient is Gather's: each output's gradient goes back to the element it copied, as in
PyTorch. logcumsumexp is Hillis and Steele's doubling (the scheme of `scan.running_product`) with
``logaddexp`` in place of the product: no exponential of a large number is ever formed, and every
gradient comes from logaddexp.
"""

from __future__ import annotations

from typing import Any

from ..backend import is_float_array
from .shape import Concat


def running_extreme_positions(xp: Any, x: Any, axis: int, largest: bool) -> Any:
    """int64 positions i_k of max (or min) over x_0..x_k along `axis`, PyTorch's choice: of equal
    values the latest, and a NaN beats every number (the latest NaN).

    Doubling: after round s each entry holds the best of the 2**s entries ending at it; a
    candidate from further back wins only when strictly better, so ties keep the later index.
    Shapes: x (...) -> positions (...), the same shape.
    """
    n = x.shape[axis]
    along = [1] * x.ndim
    along[axis] = n
    positions = xp.reshape(xp.arange(n, dtype=xp.int64, device=x.device), tuple(along))
    positions = xp.broadcast_to(positions, x.shape)
    values, lead, step = x, (slice(None),) * axis, 1
    while step < n:
        earlier, later = (*lead, slice(0, n - step), ...), (*lead, slice(step, None), ...)
        before, current = values[earlier], values[later]
        better = before > current if largest else before < current
        if is_float_array(x):
            better = better | (xp.isnan(before) & ~xp.isnan(current))
        head = (*lead, slice(0, step), ...)
        values = xp.concat([values[head], xp.where(better, before, current)], axis=axis)
        chosen = xp.where(better, positions[earlier], positions[later])
        positions = xp.concat([positions[head], chosen], axis=axis)
        step *= 2
    return positions


def running_logsumexp(x: Any, axis: int) -> Any:
    """log(sum_{j <= i} exp(x_j)) along `axis` of the Tensor x, by doubling with logaddexp:
    round s adds (in log space) to every entry the one 2**s places before it.

    Shapes: x (...) -> the same shape.
    """
    n = x.shape[axis]
    lead = (slice(None),) * axis
    step = 1
    while step < n:
        head = x[(*lead, slice(0, step))]
        tail = x[(*lead, slice(step, None))].logaddexp(x[(*lead, slice(0, n - step))])
        x = Concat.apply(head, tail, axis=axis)
        step *= 2
    return x
