"""Tensor methods, reductions family: sums, means, extremes, norms, scans.

``sum``, ``mean``, ``prod``, ``var``/``std``, ``norm``, ``max``/``min`` (with indices when a
dimension is given), ``amax``/``amin``, ``argmax``/``argmin``, ``all``/``any``, ``logsumexp``,
``cumsum``/``cumprod``, ``count_nonzero`` and ``trace``. NumPy's ``axis``/``keepdims`` and
PyTorch's ``dim``/``keepdim`` are both accepted (`merged_dims`). Part of the tensor layer: imports
`backend`, `autograd`, `ops` and `methods.common`.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from .. import backend
from ..ops import (
    Cumsum,
    Max,
    Mean,
    Min,
    Norm,
    Prod,
    Sum,
    normalize_axes,
)
from ..ops.computed import computed
from ..ops.reductions import reduction_axes
from ..ops.scan import running_product
from .common import Tensor, TensorBase, ValuesIndices, is_float, merged_dims, where


class ReductionMethods(TensorBase):
    """Reductions: sums, means, extremes, norms and scans."""

    __slots__ = ()  # every tensor's slots are declared once, in Tensor

    # NumPy's `axis`/`keepdims` and PyTorch's `dim`/`keepdim` are both accepted (`merged_dims`).
    def sum(
        self,
        axis: Any = None,
        keepdims: bool = False,
        *,
        dim: Any = None,
        keepdim: Any = None,
        dtype: Any = None,
    ) -> Tensor:
        """Sum over axes; bool and integer tensors sum to int64, as in PyTorch; `dtype` casts
        the input first (`_accumulated`)."""
        axis, keepdims = merged_dims("sum", axis, keepdims, dim, keepdim)
        source = _accumulated(self, dtype)
        out = Sum.apply(source, axis=axis, keepdims=keepdims)
        # NumPy and the array API widen an int32 sum to int64; an asked-for dtype is kept.
        return out if out.dtype == source.dtype else out._cast(backend.dtype_name(source.dtype))

    def prod(
        self,
        axis: Any = None,
        keepdims: bool = False,
        *,
        dim: Any = None,
        keepdim: Any = None,
        dtype: Any = None,
    ) -> Tensor:
        """Product over axes (all by default), in the dtype `sum` would use. The gradient is
        exact where elements are zero (`ops.Prod`)."""
        axis, keepdims = merged_dims("prod", axis, keepdims, dim, keepdim)
        return Prod.apply(_accumulated(self, dtype, "prod"), axis=axis, keepdims=keepdims)

    def mean(
        self,
        axis: Any = None,
        keepdims: bool = False,
        *,
        dim: Any = None,
        keepdim: Any = None,
        dtype: Any = None,
    ) -> Tensor:
        """Mean over axes, of a float tensor (or with `dtype`, of the input cast to it)."""
        axis, keepdims = merged_dims("mean", axis, keepdims, dim, keepdim)
        source = self if dtype is None else _accumulated(self, dtype, "mean")
        backend.check_floating("mean", source.array)
        return Mean.apply(source, axis=axis, keepdims=keepdims)

    def norm(self, p: Any = "fro", dim: Any = None, keepdim: bool = False) -> Tensor:
        """The p-norm over `dim` (every element by default): 2 (or ``'fro'``), 1, inf or -inf.
        The 2-norm's gradient is 0 where the norm is 0, as in PyTorch."""
        backend.check_floating("norm", self.array)
        axis = None if dim is None or not self.ndim else normalize_axes("norm", dim, self.ndim)
        if p in ("fro", 2):
            return Norm.apply(self, axis=axis, keepdims=keepdim)
        if p == 1:
            return self.abs().sum(axis, keepdims=keepdim)
        if p in (math.inf, -math.inf):
            return (self.abs().amax if p > 0 else self.abs().amin)(axis, keepdims=keepdim)
        raise ValueError(f"norm: p={p!r} is not supported; use 2 (or 'fro'), 1, inf or -inf")

    def amax(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: Any = None
    ) -> Tensor:
        """The largest value over axes (a tuple allowed); tied maxima share the gradient."""
        axis, keepdims = merged_dims("amax", axis, keepdims, dim, keepdim)
        if self.ndim:  # an error names amax, not the op (a 0-d tensor: Max checks axis 0 or -1)
            axis = normalize_axes("amax", axis, self.ndim)
        return Max.apply(self, axis=axis, keepdims=keepdims)

    def amin(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: Any = None
    ) -> Tensor:
        """The smallest value over axes (a tuple allowed); tied minima share the gradient."""
        axis, keepdims = merged_dims("amin", axis, keepdims, dim, keepdim)
        if self.ndim:  # an error names amin, not the op (a 0-d tensor: Min checks axis 0 or -1)
            axis = normalize_axes("amin", axis, self.ndim)
        return Min.apply(self, axis=axis, keepdims=keepdims)

    def max(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: Any = None
    ) -> Any:
        """PyTorch's max: no dim, the largest value; ``max(dim)``, the named tuple
        ``(values, indices)`` along dim (the gradient goes to the index); ``max(other)``,
        the elementwise maximum."""
        return self._extreme("max", axis, keepdims, dim, keepdim)

    def min(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: Any = None
    ) -> Any:
        """PyTorch's min: the smallest value, ``(values, indices)`` along a dim, or elementwise."""
        return self._extreme("min", axis, keepdims, dim, keepdim)

    def _extreme(self, op: str, axis: Any, keepdims: bool, dim: Any, keepdim: Any) -> Any:
        axis, keepdims = merged_dims(op, axis, keepdims, dim, keepdim)
        if isinstance(axis, Tensor):
            return self.maximum(axis) if op == "max" else self.minimum(axis)
        if axis is None:
            return Max.apply(self) if op == "max" else Min.apply(self)
        if not isinstance(axis, int) or isinstance(axis, bool):
            raise TypeError(
                f"{op}: dim must be an int (got {axis!r}); for several dims use a{op}(dims)"
            )
        if self.ndim == 0:  # PyTorch: the value itself and index 0, for dim 0 or -1
            values = (Max if op == "max" else Min).apply(self, axis=axis, keepdims=keepdims)
            return ValuesIndices(values, self._arg_extreme("arg" + op, axis, keepdims, None, None))
        indices = self.argmax(axis, True) if op == "max" else self.argmin(axis, True)
        values = self.gather(axis, indices)
        if not keepdims:
            values, indices = values.squeeze(axis), indices.squeeze(axis)
        return ValuesIndices(values, indices)

    def all(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: Any = None
    ) -> Tensor:
        """Whether every element (over axes, or all) is non-zero: a bool tensor, no gradient."""
        return self._logical_reduce("all", axis, keepdims, dim, keepdim)

    def any(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: Any = None
    ) -> Tensor:
        """Whether any element (over axes, or all) is non-zero: a bool tensor, no gradient."""
        return self._logical_reduce("any", axis, keepdims, dim, keepdim)

    def _logical_reduce(self, op: str, axis: Any, keepdims: bool, dim: Any, keepdim: Any) -> Tensor:
        axis, keepdims = merged_dims(op, axis, keepdims, dim, keepdim)
        axes = None if axis is None else reduction_axes(op, axis, self.ndim)
        return computed(_any_or_all, self, name=op, axes=axes, keepdims=keepdims)

    def argmax(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: Any = None
    ) -> Tensor:
        """Index of the first largest value (of the flattened tensor when no dim), int64."""
        return self._arg_extreme("argmax", axis, keepdims, dim, keepdim)

    def argmin(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: Any = None
    ) -> Tensor:
        """Index of the first smallest value (of the flattened tensor when no dim), int64."""
        return self._arg_extreme("argmin", axis, keepdims, dim, keepdim)

    def _arg_extreme(self, op: str, axis: Any, keepdims: bool, dim: Any, keepdim: Any) -> Tensor:
        axis, keepdims = merged_dims(op, axis, keepdims, dim, keepdim)
        if self.numel() == 0:
            raise ValueError(f"{op}: cannot reduce an empty tensor of shape {self.shape}")
        flat = axis is None or self.ndim == 0
        if flat:
            if axis is not None:  # a 0-d tensor takes dim 0 or -1, as in PyTorch
                reduction_axes(op, axis, 0)
            axis, keepdims = 0, keepdims and self.ndim == 0  # PyTorch: a flat index, 0-d
        else:
            axis = normalize_axes(op, axis, self.ndim)[0]
        return computed(_arg_extreme_of, self, name=op, axis=axis, keepdims=keepdims, flat=flat)

    def var(
        self,
        dim: Any = None,
        correction: float = 1,
        keepdim: bool = False,
        *,
        axis: Any = None,
        keepdims: Any = None,
        unbiased: bool | None = None,
    ) -> Tensor:
        """Variance, ``sum((x - mean)**2) / (N - correction)``; PyTorch's default correction=1
        (the unbiased estimate; NumPy's ``var`` defaults to 0, pass ``correction=0`` for it).
        PyTorch's positional ``x.var(dim, unbiased)`` and ``unbiased=`` are accepted too.

        Composed from mean, sub, mul and sum, so its gradient ``2 (x - mean) / (N - correction)``
        and every higher derivative come from those ops. With no degrees of freedom left
        (N <= correction) it warns and divides by 0, as PyTorch: NaN for one element.
        """
        axis, keepdims = merged_dims("var", dim, keepdim, axis, keepdims)
        if isinstance(correction, bool):  # x.var(dim, False): PyTorch's positional `unbiased`
            correction = int(correction)
        if unbiased is not None:
            correction = int(unbiased)
        return _variance(self, "var", axis, keepdims, correction)

    def std(
        self,
        dim: Any = None,
        correction: float = 1,
        keepdim: bool = False,
        *,
        axis: Any = None,
        keepdims: Any = None,
        unbiased: bool | None = None,
    ) -> Tensor:
        """Standard deviation, sqrt(var); PyTorch's default correction=1 (``unbiased=True``).
        Where the variance is 0 (a constant slice) the gradient is 0, as PyTorch's, not
        g / (2 sqrt(0)) = inf times 0 = NaN: the square root sees 1 there, and is masked out."""
        dim, keepdim = merged_dims("std", dim, keepdim, axis, keepdims)
        if isinstance(correction, bool):  # x.std(dim, True): PyTorch's positional `unbiased`
            correction = int(correction)
        if unbiased is not None:
            correction = int(unbiased)
        variance = _variance(self, "std", dim, keepdim, correction)
        spread = variance != 0  # NaN too: a NaN variance gives a NaN deviation
        return where(spread, variance, 1.0).sqrt() * spread

    def logsumexp(
        self, dim: Any, keepdim: bool = False, *, axis: Any = None, keepdims: Any = None
    ) -> Tensor:
        """log(sum(exp(x))) along dim, shifted by the (detached) maximum so exp cannot overflow."""
        dim, keepdim = merged_dims("logsumexp", dim, keepdim, axis, keepdims)
        backend.check_floating("logsumexp", self.array)
        axes = reduction_axes("logsumexp", dim, self.ndim)  # a 0-d tensor: itself
        shift = self.detach().amax(axis=axes, keepdims=True)
        # An all -inf row: shift by 0 so the result is -inf, not NaN (inf - inf).
        shift = where(shift.abs() == float("inf"), 0.0, shift)
        total = (self - shift).exp().sum(axis=axes, keepdims=True).log() + shift
        return total if keepdim else total.squeeze(axes)

    def cumsum(self, dim: int, *, axis: Any = None, dtype: Any = None) -> Tensor:
        """Running sum along dim, in the dtype `sum` would use."""
        dim, _ = merged_dims("cumsum", dim, False, axis, None)
        source = _accumulated(self, dtype, "cumsum")
        if not self.ndim:  # a 0-d tensor takes dim 0 or -1, as in PyTorch: itself, 0-d
            reduction_axes("cumsum", dim, 0)
            return Cumsum.apply(source.reshape(1), axis=0).reshape(())
        return Cumsum.apply(source, axis=normalize_axes("cumsum", dim, self.ndim)[0])

    def cumprod(self, dim: int, *, axis: Any = None, dtype: Any = None) -> Tensor:
        """Running product along dim, in the dtype `sum` would use, composed of Tensor products
        (`ops.scan.running_product`): exact gradients where elements are zero. float16 runs in
        float32, each product rounded once, as PyTorch's CPU kernel."""
        dim, _ = merged_dims("cumprod", dim, False, axis, None)
        source = _accumulated(self, dtype, "cumprod")
        if backend.is_half(source.array):
            return source._cast("float32").cumprod(dim)._cast("float16")
        axis = normalize_axes("cumprod", dim, max(self.ndim, 1))[0]
        if not self.ndim:  # a 0-d tensor takes dim 0 or -1, as in PyTorch: itself
            return running_product(source.reshape(1), 0).reshape(())
        return running_product(source, axis)

    def trace(self) -> Tensor:
        """The sum of the main diagonal of a matrix;  dL/dx = g * I.  Shapes: (r, c) -> ()."""
        if self.ndim != 2:
            raise ValueError(f"trace: expected a 2-D tensor, got shape {self.shape}")
        return self.diag().sum()

    def count_nonzero(self, dim: int | tuple | None = None) -> Tensor:
        """The number of nonzero entries (over `dim`, or all), as int64.
        Shapes: (...) -> () or the shape without `dim`."""
        return (self != 0).sum(dim=dim)


def _accumulated(tensor: Tensor, dtype: Any = None, op: str = "sum") -> Tensor:
    """What sums and products run on: the tensor cast to `dtype` when given, else bool and
    integer tensors as int64 (PyTorch's rule: no overflow of small integer types), floats as
    they are."""
    if dtype is not None:
        if isinstance(dtype, str) and dtype not in backend.DTYPE_NAMES:
            raise ValueError(
                f"{op}: unknown dtype {dtype!r}: expected one of {', '.join(backend.DTYPE_NAMES)}"
            )
        return tensor._cast(dtype)
    if is_float(tensor.array) or backend.dtype_name(tensor.dtype) == "int64":
        return tensor
    return tensor._cast("int64")


def _variance(tensor: Tensor, op: str, axis: Any, keepdims: bool, correction: float) -> Tensor:
    """sum((x - mean)**2) / (N - correction) over `axis`; with N <= correction, PyTorch's
    warning (its text) and its division by 0: NaN where the squares sum to 0, else inf."""
    backend.check_floating(op, tensor.array)
    if backend.is_half(tensor.array):  # PyTorch computes a float16 variance in float32
        wide = _squares_over_freedom(tensor._cast("float32"), op, axis, keepdims, correction)
        return wide._cast("float16")
    return _squares_over_freedom(tensor, op, axis, keepdims, correction)


def _squares_over_freedom(
    tensor: Tensor, op: str, axis: Any, keepdims: bool, correction: float
) -> Tensor:
    """`_variance` in the tensor's own dtype."""
    axes = reduction_axes(op, axis, tensor.ndim)
    freedom = math.prod(tensor.shape[a] for a in axes) - correction
    if freedom <= 0:
        warnings.warn(
            f"{op}(): degrees of freedom is <= 0. Correction should be strictly less than the "
            "reduction factor (input numel divided by output numel).",
            UserWarning,
            stacklevel=4,  # the caller of var or std
        )
    centered = tensor - tensor.mean(axis=axes, keepdims=True)
    squares = (centered * centered).sum(axis=axes, keepdims=keepdims)
    if freedom > 0:
        return squares * (1.0 / freedom)
    with backend.quiet_invalid():  # 0 * inf = NaN is the answer here, not a slip to warn of
        return squares * math.inf


def _any_or_all(xp: Any, x: Any, name: str, axes: Any, keepdims: bool) -> Any:
    nonzero = x if backend.dtype_name(x.dtype) == "bool" else x != 0
    return getattr(xp, name)(nonzero, axis=axes, keepdims=keepdims)


def _arg_extreme_of(xp: Any, x: Any, name: str, axis: int, keepdims: bool, flat: bool) -> Any:
    found = getattr(xp, name)(xp.reshape(x, (-1,)) if flat else x, axis=axis, keepdims=keepdims)
    return xp.astype(xp.asarray(found), xp.int64)
