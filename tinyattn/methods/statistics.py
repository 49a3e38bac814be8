"""Tensor methods, statistics family: order statistics and pairwise distances.

``median``/``nanmedian``, ``kthvalue``, ``quantile``/``nanquantile`` with PyTorch's signatures
and meanings, and the free function ``cdist``. Each is composed: a stable sort (``sort``, which
puts NaN last), a position computed from the sorted values with no gradient (`computed`), and
``gather``, so the gradient reaches the element chosen (for ``quantile``, the two around the
rank, by the interpolation weights) with no derivative math here. Part of the tensor layer:
imports `backend`, `ops` and `methods.common`.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend
from ..errors import TinyattnError
from ..ops import normalize_dim
from ..ops.computed import computed
from .common import TensorBase, ValuesIndices, concat

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")
_CDIST_MODES = (
    "use_mm_for_euclid_dist_if_necessary",
    "use_mm_for_euclid_dist",
    "donot_use_mm_for_euclid_dist",
)


class StatisticsMethods(TensorBase):
    """Order statistics: median, kthvalue, quantile."""

    __slots__ = ()  # every tensor's slots are declared once, in Tensor

    def median(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """PyTorch's median: the lower median, the element at sorted position (n - 1) // 2
        (not the mean of the two middle values). Without `dim`, of all elements (a 0-d tensor;
        NaN if any element is NaN or there are none); with `dim`, the named tuple
        ``(values, indices)`` along it, where a row holding NaN gives NaN and the index of its
        first NaN. The gradient goes to the chosen element.
        Shapes: (B, N).median() -> (); (B, N).median(1) -> (B,) and (B,)."""
        return self._middle("median", dim, keepdim, ignore_nan=False)

    def nanmedian(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """`median` of the values that are not NaN (NaN only where a row is all NaN).
        Shapes: as `median`."""
        return self._middle("nanmedian", dim, keepdim, ignore_nan=True)

    def _middle(self, op: str, dim: int | None, keepdim: bool, ignore_nan: bool) -> Any:
        if dim is None:
            if self.numel() == 0:  # PyTorch: NaN of the input's dtype, no error
                return self.new_full((), math.nan) if _floating(self) else self.sum() * 0
            values = self.reshape(-1)._middle(op, 0, False, ignore_nan).values
            return values.reshape((1,) * self.ndim) if keepdim else values
        flat = self.reshape(1) if self.ndim == 0 else self
        axis = normalize_dim(op, dim, flat.ndim)
        _check_not_empty(op, flat, axis)
        position = computed(_middle_position, flat, axis=axis, ignore_nan=ignore_nan)
        return _picked(flat, axis, position, keepdim or self.ndim == 0)

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
        """The k-th smallest element along `dim` (k counts from 1) and its index, as the named
        tuple ``(values, indices)``; NaN sorts above every number. The gradient goes to the
        chosen element. Shapes: (B, N).kthvalue(k, 1) -> (B,) and (B,)."""
        flat = self.reshape(1) if self.ndim == 0 else self
        axis = normalize_dim("kthvalue", dim, flat.ndim)
        _check_not_empty("kthvalue", flat, axis)
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= flat.shape[axis]:
            raise TinyattnError(
                f"kthvalue: k={k!r} is out of range for dim {dim} of a tensor of shape "
                f"{self.shape} (k counts from 1 to {flat.shape[axis]})"
            )
        position = computed(_kth_position, flat, axis=axis, k=k)
        return _picked(flat, axis, position, keepdim or self.ndim == 0)

    def quantile(
        self,
        q: Any,
        dim: int | None = None,
        keepdim: bool = False,
        *,
        interpolation: str = "linear",
    ) -> TensorBase:
        """The q-th quantiles along `dim` (of all elements when None), PyTorch's definition:
        the element at rank r = q (n - 1) of the sorted values, between ranks by
        `interpolation` ('linear': lerp of the two neighbours by frac(r); 'lower', 'higher':
        floor or ceil of r; 'midpoint': their mean; 'nearest': r rounded half to even). A row
        holding NaN gives NaN. The gradient goes to the neighbours, by their weights.
        Shapes: (B, N).quantile(0.5, 1) -> (B,); a 1-d q of Q values comes first:
        (B, N).quantile(q, 1) -> (Q, B)."""
        return _quantile("quantile", self, q, dim, keepdim, interpolation, ignore_nan=False)

    def nanquantile(
        self,
        q: Any,
        dim: int | None = None,
        keepdim: bool = False,
        *,
        interpolation: str = "linear",
    ) -> TensorBase:
        """`quantile` of the values that are not NaN (n counts them; a row of NaN only gives
        NaN). Shapes: as `quantile`."""
        return _quantile("nanquantile", self, q, dim, keepdim, interpolation, ignore_nan=True)


# ---------------------------------------------------------------------------------- positions
def _middle_position(xp: Any, x: Any, axis: int, ignore_nan: bool) -> Any:
    """The sorted position (NaN sorted last) of the median along `axis`, kept as a dim of 1:
    (n - 1) // 2; with NaN present, the first NaN (median) or the middle of the others
    (nanmedian; a row of NaN only: (n - 1) // 2, as PyTorch's)."""
    n = x.shape[axis]
    if not backend.is_float_array(x):
        return xp.full(_kept(x.shape, axis), (n - 1) // 2, dtype=xp.int64, device=x.device)
    nan_count = xp.sum(xp.astype(xp.isnan(x), xp.int64), axis=axis, keepdims=True)
    if ignore_nan:
        return xp.where(nan_count < n, (n - nan_count - 1) // 2, (n - 1) // 2)
    return xp.where(nan_count > 0, n - nan_count, (n - 1) // 2)


def _kth_position(xp: Any, x: Any, axis: int, k: int) -> Any:
    return xp.full(_kept(x.shape, axis), k - 1, dtype=xp.int64, device=x.device)


def _kept(shape: tuple, axis: int) -> tuple:
    return shape[:axis] + (1,) + shape[axis + 1 :]


def _picked(x: TensorBase, axis: int, position: TensorBase, keepdim: bool) -> ValuesIndices:
    """(values, indices) at sorted `position` along `axis`: the stable sort's order, so equal
    values are taken in index order."""
    order = x.sort(axis)
    values, indices = order.values.gather(axis, position), order.indices.gather(axis, position)
    if not keepdim:
        values, indices = values.squeeze(axis), indices.squeeze(axis)
    return ValuesIndices(values, indices)


def _check_not_empty(op: str, x: TensorBase, axis: int) -> None:
    if x.shape[axis] == 0:
        raise IndexError(
            f"{op}: dim {axis} of a tensor of shape {x.shape} is empty; there is no element to take"
        )


def _floating(x: TensorBase) -> bool:
    return backend.is_floating(backend.namespace(x.array), x.dtype)


# ----------------------------------------------------------------------------------- quantile
def _quantile(
    op: str, x: TensorBase, q: Any, dim: Any, keepdim: bool, interpolation: str, ignore_nan: bool
) -> TensorBase:
    """quantile and nanquantile: sort along the dim (moved last), find each rank, gather."""
    qs = _checked_q(op, x, q, interpolation)
    data = x.reshape(-1) if dim is None else (x.reshape(1) if x.ndim == 0 else x)
    axis = 0 if dim is None else normalize_dim(op, dim, data.ndim)
    if data.numel() == 0:
        raise TinyattnError(f"{op}: input tensor must be non-empty, got shape {x.shape}")
    ordered = data.sort(axis).values.movedim(axis, -1)  # (..., N), NaN last
    ranks = computed(_ranks, ordered, qs.reshape(-1), ignore_nan=ignore_nan)  # (..., Q)
    below, above = ranks.floor(), ranks.ceil()
    if interpolation == "lower":
        result = ordered.gather(-1, below.long())
    elif interpolation == "higher":
        result = ordered.gather(-1, above.long())
    elif interpolation == "nearest":
        result = ordered.gather(-1, ranks.round().long())
    else:  # linear, midpoint: lerp of the two neighbours (the same one where the rank is whole)
        weights = ranks - below if interpolation == "linear" else (above > below).to(x.dtype) / 2
        result = ordered.gather(-1, below.long()).lerp(ordered.gather(-1, above.long()), weights)
    result = result.movedim(-1, 0)  # (Q, ...)
    if keepdim:
        kept = (1,) * x.ndim if dim is None or not x.ndim else _kept(data.shape, axis)
        result = result.reshape(result.shape[:1] + kept)
    return result.squeeze(0) if qs.ndim == 0 else result


def _checked_q(op: str, x: TensorBase, q: Any, interpolation: str) -> TensorBase:
    """q as a 0-d or 1-d tensor of x's dtype, its values checked in [0, 1], as PyTorch does."""
    if not _floating(x):
        raise TinyattnError(
            f"{op}: input tensor must be either float or double dtype, got "
            f"{backend.dtype_name(x.dtype)}"
        )
    if interpolation not in _INTERPOLATIONS:
        raise TinyattnError(
            f"{op}: interpolation must be one of {', '.join(_INTERPOLATIONS)}, got "
            f"{interpolation!r}"
        )
    if isinstance(q, TensorBase):
        if q.dtype != x.dtype:
            raise TinyattnError(
                f"{op}: q tensor must be same dtype as the input tensor, got "
                f"{backend.dtype_name(q.dtype)} and {backend.dtype_name(x.dtype)}"
            )
        if q.ndim > 1:
            raise TinyattnError(f"{op}: q must be a scalar or 1D tensor, got shape {q.shape}")
        qs = q.detach()
    else:
        qs = x.new_tensor(q)
    values = qs.reshape(-1).tolist()
    if not all(0 <= v <= 1 for v in values):  # also refuses NaN
        bad = next(v for v in values if not 0 <= v <= 1)
        raise TinyattnError(f"{op}: q must be in the range [0, 1] but got {bad}")
    return qs


def _ranks(xp: Any, ordered: Any, qs: Any, ignore_nan: bool) -> Any:
    """q (n - 1) per row of `ordered` (sorted along its last dim, NaN last), in its dtype:
    (..., N) and (Q,) -> (..., Q). A row with NaN gets rank n - 1 (its last NaN: the result
    is NaN) for quantile; nanquantile counts only the other values (a row of NaN: rank 0)."""
    n = ordered.shape[-1]
    nan_count = xp.sum(xp.astype(xp.isnan(ordered), xp.int64), axis=-1, keepdims=True)
    if ignore_nan:
        last = xp.astype(xp.clip(n - 1 - nan_count, 0, None), ordered.dtype)
        return qs * last
    ranks = qs * xp.astype(xp.full_like(nan_count, n - 1), ordered.dtype)
    return xp.where(nan_count > 0, xp.asarray(n - 1, dtype=ordered.dtype), ranks)


# -------------------------------------------------------------------------------------- cdist
def cdist(
    x1: TensorBase,
    x2: TensorBase,
    p: float = 2.0,
    compute_mode: str = "use_mm_for_euclid_dist_if_necessary",
) -> TensorBase:
    """p-norm distances between the rows of x1 and of x2, as ``torch.cdist``:
    out[..., i, j] = (sum_k |x1[..., i, k] - x2[..., j, k]|^p)^(1/p); p = 0 counts the
    differing coordinates, p = inf takes the largest difference. For p = 2 the rows'
    values come from the rows' difference, or, as PyTorch's do when `compute_mode` asks for it
    (or allows it and either side has more than 25 rows), from the matrix product
    sqrt(clamp(|a|^2 + |b|^2 - 2 a.b, 0)), which loses digits for near rows; the gradient is the
    difference form's in both, as PyTorch's, and 0 where a distance (or, for p < 1, a
    coordinate's difference) is 0; for p = inf every coordinate tied for the largest difference
    gets the whole gradient, as in PyTorch.
    Shapes: (B, P, M) and (B, R, M) -> (B, P, R) (the batch dims broadcast); (P, M) and (R, M)
    -> (P, R)."""
    _check_cdist(x1, x2, p, compute_mode)
    rows1, rows2 = x1.shape[-2], x2.shape[-2]
    by_product = compute_mode == "use_mm_for_euclid_dist" or (
        compute_mode == _CDIST_MODES[0] and (rows1 > 25 or rows2 > 25)
    )
    difference = x1.unsqueeze(-2) - x2.unsqueeze(-3)  # (..., P, 1, M) - (..., 1, R, M)
    if p == 2:
        direct = difference.norm(2, dim=-1)  # its gradient is 0 at zero distance
        if not by_product:
            return direct
        # PyTorch takes only the values from the product form; its gradient is the direct one.
        return direct + (_euclidean_by_product(x1, x2) - direct).detach()
    if p == 0:  # a count: no gradient flows, as in PyTorch (the zero keeps the graph)
        return (difference != 0).to(x1.dtype).sum(-1) + difference.sum(-1) * 0.0
    if p == 1:
        return difference.abs().sum(-1)
    if p == math.inf:
        return _largest_difference(difference.abs())
    return _zero_safe_power_norm(difference, float(p))


def _euclidean_by_product(x1: TensorBase, x2: TensorBase) -> TensorBase:
    """PyTorch's matrix-product form of the euclidean distance: [-2a, |a|^2, 1] times
    [b, 1, |b|^2] is |a|^2 + |b|^2 - 2 a.b in one matmul. Shapes: (..., P, M), (..., R, M)
    -> (..., P, R)."""
    norm1, norm2 = x1.square().sum(-1, keepdim=True), x2.square().sum(-1, keepdim=True)
    left = concat([x1 * -2.0, norm1, norm1.new_ones(norm1.shape)], axis=-1)  # (..., P, M + 2)
    right = concat([x2, norm2.new_ones(norm2.shape), norm2], axis=-1)  # (..., R, M + 2)
    return (left @ right.mT).clamp_min(0.0).sqrt()


def _largest_difference(size: TensorBase) -> TensorBase:
    """max_k |d_k| over the last dim with PyTorch's gradient: each coordinate that ties for the
    maximum gets the whole gradient (``amax`` would share it among them). The value is the
    detached maximum; the sum adds zero to it and carries the gradient to the tied places."""
    largest = size.amax(-1).detach()
    at_largest = (size == largest.unsqueeze(-1)).detach()
    return largest + ((size - size.detach()) * at_largest).sum(-1)


def _zero_safe_power_norm(difference: TensorBase, p: float) -> TensorBase:
    """(sum |d|^p)^(1/p) over the last dim with gradient 0 where the distance is 0 (PyTorch's
    rule; the power rule would give 0 * inf there): the zero rows take the root of 1 instead,
    and are set back to 0 by a mask that carries no gradient."""
    size = difference.abs()
    if p < 1:  # p |d|^(p - 1) is infinite at d = 0, where PyTorch's gradient is 0
        at_zero = size == 0
        size = size.masked_fill(at_zero, 1.0).pow(p).masked_fill(at_zero, 0.0)
    else:
        size = size.pow(p)
    powered = size.sum(-1)
    is_zero = powered == 0
    safe = powered.masked_fill(is_zero, 1.0)
    return safe.pow(1.0 / p).masked_fill(is_zero, 0.0)


def _check_cdist(x1: TensorBase, x2: TensorBase, p: float, compute_mode: str) -> None:
    if not isinstance(x1, TensorBase) or not isinstance(x2, TensorBase):
        raise TypeError(
            f"cdist: expected two Tensors, got {type(x1).__name__} and {type(x2).__name__}"
        )
    if x1.ndim < 2 or x2.ndim < 2:
        raise TinyattnError(
            f"cdist only supports at least 2D tensors, X1 got: {x1.ndim}D, X2 got: {x2.ndim}D"
        )
    if x1.shape[-1] != x2.shape[-1]:
        raise TinyattnError(
            f"cdist: X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} "
            f"X2: {x2.shape[-1]} (shapes {x1.shape} and {x2.shape})"
        )
    if not (_floating(x1) and _floating(x2)):
        raise TinyattnError(
            f"cdist only supports floating-point dtypes, X1 got: "
            f"{backend.dtype_name(x1.dtype)}, X2 got: {backend.dtype_name(x2.dtype)}"
        )
    if x1.dtype != x2.dtype:
        raise TinyattnError(
            f"cdist: X1 and X2 must have the same dtype, got {backend.dtype_name(x1.dtype)} "
            f"and {backend.dtype_name(x2.dtype)}"
        )
    if isinstance(p, bool) or not isinstance(p, int | float) or not p >= 0:
        raise TinyattnError(f"cdist only supports non-negative p values, got {p!r}")
    if compute_mode not in _CDIST_MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
