"""Tensor methods, reductions family: sums, means, extremes, norms, scans.

``sum``, ``mean``, ``prod``, ``var``/``std``, ``norm``, ``max``/``min`` (with indices when a
dimension is given), ``amax``/``amin``, ``argmax``/``argmin``, ``all``/``any``, ``logsumexp``,
``cumsum``/``cumprod``, ``cummax``/``cummin``/``logcumsumexp``, ``std_mean``/``var_mean``,
``count_nonzero``, ``trace``, and the scatter reductions (``scatter_reduce``, ``index_put`` with
``accumulate``). NumPy's ``axis``/``keepdims`` and
PyTorch's ``dim``/``keepdim`` are both accepted (`merged_dims`). Part of the tensor layer: imports
`backend`, `autograd`, `ops` and `methods.common`.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from .. import backend
from ..errors import TinyattnError
from ..ops import (
    Cumsum,
    Max,
    Mean,
    Min,
    Norm,
    Prod,
    Sum,
    normalize_axes,
    normalize_dim,
)
from ..ops.computed import computed
from ..ops.cumulative import running_extreme_positions, running_logsumexp
from ..ops.reductions import reduction_axes
from ..ops.scan import running_product
from .common import (
    TensorBase,
    ValuesIndices,
    concat,
    describe,
    is_float,
    merged_dims,
    where,
)


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
    ) -> TensorBase:
        """Sum over axes; bool and integer tensors sum to int64, as in PyTorch; `dtype` casts
        the input first (`_accumulated`)."""
        axis, keepdims = merged_dims("sum", axis, keepdims, dim, keepdim)
        axis = _every_dim_if_empty(axis)
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
    ) -> TensorBase:
        """Product over axes (all by default), in the dtype `sum` would use. The gradient is
        exact where elements are zero (`ops.Prod`)."""
        axis, keepdims = merged_dims("prod", axis, keepdims, dim, keepdim)
        axis = _every_dim_if_empty(axis)
        return Prod.apply(_accumulated(self, dtype, "prod"), axis=axis, keepdims=keepdims)

    def mean(
        self,
        axis: Any = None,
        keepdims: bool = False,
        *,
        dim: Any = None,
        keepdim: Any = None,
        dtype: Any = None,
    ) -> TensorBase:
        """Mean over axes, of a float tensor (or with `dtype`, of the input cast to it)."""
        axis, keepdims = merged_dims("mean", axis, keepdims, dim, keepdim)
        axis = _every_dim_if_empty(axis)
        source = self if dtype is None else _accumulated(self, dtype, "mean")
        backend.check_floating("mean", source.array)
        return Mean.apply(source, axis=axis, keepdims=keepdims)

    def norm(self, p: Any = "fro", dim: Any = None, keepdim: bool = False) -> TensorBase:
        """The p-norm over `dim` (every element by default): 2 (or ``'fro'``), 1, inf, -inf or
        any other number p, (sum |x|^p)^(1/p) (p = 0 counts nonzero elements). The 2-norm's
        gradient is 0 where the norm is 0, as in PyTorch."""
        backend.check_floating("norm", self.array)
        dim = _every_dim_if_empty(dim)
        axis = None if dim is None or not self.ndim else normalize_axes("norm", dim, self.ndim)
        if p in ("fro", 2):
            return Norm.apply(self, axis=axis, keepdims=keepdim)
        if p == 1:
            return self.abs().sum(axis, keepdims=keepdim)
        if p in (math.inf, -math.inf):
            return (self.abs().amax if p > 0 else self.abs().amin)(axis, keepdims=keepdim)
        if isinstance(p, int | float) and not isinstance(p, bool):
            if p == 0:  # the count of nonzero elements (PyTorch's 0-"norm"): zero gradient
                count = (self != 0).to(self.dtype) + self * 0.0
                return count.sum(axis, keepdims=keepdim)
            return _power_norm(self, p, axis, keepdim)
        raise TinyattnError(f"norm: p={p!r} is not supported; use a number, 'fro', inf or -inf")

    def amax(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: Any = None
    ) -> TensorBase:
        """The largest value over axes (a tuple allowed); tied maxima share the gradient."""
        axis, keepdims = merged_dims("amax", axis, keepdims, dim, keepdim)
        axis = _every_dim_if_empty(axis)
        if self.ndim:  # an error names amax, not the op (a 0-d tensor: Max checks axis 0 or -1)
            axis = normalize_axes("amax", axis, self.ndim)
        return Max.apply(self, axis=axis, keepdims=keepdims)

    def amin(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: Any = None
    ) -> TensorBase:
        """The smallest value over axes (a tuple allowed); tied minima share the gradient."""
        axis, keepdims = merged_dims("amin", axis, keepdims, dim, keepdim)
        axis = _every_dim_if_empty(axis)
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
        if isinstance(axis, TensorBase):
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
        indices = self._arg_extreme("argmax" if op == "max" else "argmin", axis, True, None, None)
        values = self.gather(axis, indices)
        if not keepdims:
            values, indices = values.squeeze(axis), indices.squeeze(axis)
        return ValuesIndices(values, indices)

    def all(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: Any = None
    ) -> TensorBase:
        """Whether every element (over axes, or all) is non-zero: a bool tensor, no gradient."""
        return self._logical_reduce("all", axis, keepdims, dim, keepdim)

    def any(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: Any = None
    ) -> TensorBase:
        """Whether any element (over axes, or all) is non-zero: a bool tensor, no gradient."""
        return self._logical_reduce("any", axis, keepdims, dim, keepdim)

    def _logical_reduce(
        self, op: str, axis: Any, keepdims: bool, dim: Any, keepdim: Any
    ) -> TensorBase:
        axis, keepdims = merged_dims(op, axis, keepdims, dim, keepdim)
        # Unlike sum's, PyTorch's all/any read dim=() as no dims: x tested elementwise.
        axes = None if axis is None else reduction_axes(op, axis, self.ndim)
        result = computed(_any_or_all, self, name=op, axes=axes, keepdims=keepdims)
        # PyTorch keeps uint8 for a uint8 input (its old mask dtype); every other input is bool
        return result._cast("uint8") if backend.dtype_name(self.dtype) == "uint8" else result

    def argmax(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: Any = None
    ) -> TensorBase:
        """Index of the first largest value (of the flattened tensor when no dim), int64."""
        _refuse_bool("argmax", self)
        return self._arg_extreme("argmax", axis, keepdims, dim, keepdim)

    def argmin(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: Any = None
    ) -> TensorBase:
        """Index of the first smallest value (of the flattened tensor when no dim), int64."""
        _refuse_bool("argmin", self)
        return self._arg_extreme("argmin", axis, keepdims, dim, keepdim)

    def _arg_extreme(
        self, op: str, axis: Any, keepdims: bool, dim: Any, keepdim: Any
    ) -> TensorBase:
        axis, keepdims = merged_dims(op, axis, keepdims, dim, keepdim)
        if self.numel() == 0:
            raise TinyattnError(f"{op}: cannot reduce an empty tensor of shape {self.shape}")
        flat = axis is None or self.ndim == 0
        if flat:
            if axis is not None:  # a 0-d tensor takes dim 0 or -1, as in PyTorch
                reduction_axes(op, axis, 0)
            axis, keepdims = 0, keepdims and self.ndim == 0  # PyTorch: a flat index, 0-d
        else:
            axis = normalize_dim(op, axis, self.ndim)
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
    ) -> TensorBase:
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
    ) -> TensorBase:
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
    ) -> TensorBase:
        """log(sum(exp(x))) along dim, shifted by the (detached) maximum so exp cannot overflow."""
        dim, keepdim = merged_dims("logsumexp", dim, keepdim, axis, keepdims)
        if not backend.is_float_array(self.array):  # an integer tensor's is float32, as in PyTorch
            return self._cast("float32").logsumexp(dim, keepdim)
        if _every_dim_if_empty(dim) is None:
            # PyTorch reads dim=() as every dim but then refuses the reduced shape unless kept.
            if self.ndim and not keepdim:
                raise RuntimeError(
                    f"logsumexp: dim={dim!r} reduces every dim of shape {self.shape} only with "
                    "keepdim=True (as in PyTorch); pass dim=tuple(range(x.ndim)) instead"
                )
            dim = None
        axes = reduction_axes("logsumexp", dim, self.ndim)  # a 0-d tensor: itself
        shift = self.detach().amax(axis=axes, keepdims=True)
        # An all -inf row: shift by 0 so the result is -inf, not NaN (inf - inf).
        shift = where(shift.abs() == float("inf"), 0.0, shift)
        total = (self - shift).exp().sum(axis=axes, keepdims=True).log() + shift
        return total if keepdim else total.squeeze(axes)

    def cumsum(self, dim: int, *, axis: Any = None, dtype: Any = None) -> TensorBase:
        """Running sum along dim, in the dtype `sum` would use."""
        dim, _ = merged_dims("cumsum", dim, False, axis, None)
        source = _accumulated(self, dtype, "cumsum")
        if not self.ndim:  # a 0-d tensor takes dim 0 or -1, as in PyTorch: itself, 0-d
            reduction_axes("cumsum", dim, 0)
            return Cumsum.apply(source.reshape(1), axis=0).reshape(())
        return Cumsum.apply(source, axis=normalize_dim("cumsum", dim, self.ndim))

    def cumprod(self, dim: int, *, axis: Any = None, dtype: Any = None) -> TensorBase:
        """Running product along dim, in the dtype `sum` would use, composed of Tensor products
        (`ops.scan.running_product`): exact gradients where elements are zero. float16 runs in
        float32, each product rounded once, as PyTorch's CPU kernel."""
        dim, _ = merged_dims("cumprod", dim, False, axis, None)
        source = _accumulated(self, dtype, "cumprod")
        if backend.is_half(source.array):
            return source._cast("float32").cumprod(dim)._cast("float16")
        axis = normalize_dim("cumprod", dim, max(self.ndim, 1))
        if not self.ndim:  # a 0-d tensor takes dim 0 or -1, as in PyTorch: itself
            return running_product(source.reshape(1), 0).reshape(())
        return running_product(source, axis)

    def cummax(self, dim: int) -> ValuesIndices:
        """Running maximum along dim: ``(values, indices)``, the index of the latest of equal
        maxima (a NaN, once met, wins), as PyTorch's. The values are gathered at the indices,
        so the gradient goes back to the element each copies. Shapes: x (...) -> two of (...)."""
        return self._running_extreme("cummax", dim, largest=True)

    def cummin(self, dim: int) -> ValuesIndices:
        """Running minimum along dim: ``(values, indices)``, as `cummax`."""
        return self._running_extreme("cummin", dim, largest=False)

    def _running_extreme(self, op: str, dim: int, largest: bool) -> ValuesIndices:
        axis = normalize_dim(op, dim, max(self.ndim, 1))
        source = self.reshape(1) if not self.ndim else self  # 0-d: dim 0 or -1, itself
        indices = computed(running_extreme_positions, source, axis=axis, largest=largest)
        values = source.gather(axis, indices)
        if not self.ndim:
            values, indices = values.reshape(()), indices.reshape(())
        return ValuesIndices(values, indices)

    def logcumsumexp(self, dim: int) -> TensorBase:
        """log(sum_{j <= i} exp(x_j)) along dim, never forming a large exponential (doubling
        with logaddexp, `ops.cumulative.running_logsumexp`). Shapes: x (...) -> (...)."""
        backend.check_floating("logcumsumexp", self.array)
        axis = normalize_dim("logcumsumexp", dim, max(self.ndim, 1))
        if not self.ndim:
            return running_logsumexp(self.reshape(1), 0).reshape(())
        return running_logsumexp(self, axis)

    def var_mean(
        self, dim: Any = None, correction: float = 1, keepdim: bool = False, **kwargs: Any
    ) -> tuple[TensorBase]:
        """``(var, mean)`` over dim with PyTorch's arguments (`var`'s ``correction``,
        ``unbiased``, ``keepdim``): two tensors."""
        variance = self.var(dim, correction, keepdim, **kwargs)
        dim, keepdim = merged_dims("var_mean", dim, keepdim, kwargs.get("axis"), None)
        return variance, self.mean(dim=dim, keepdim=kwargs.get("keepdims") or keepdim)

    def std_mean(
        self, dim: Any = None, correction: float = 1, keepdim: bool = False, **kwargs: Any
    ) -> tuple[TensorBase]:
        """``(std, mean)`` over dim, with `std`'s arguments: two tensors."""
        deviation = self.std(dim, correction, keepdim, **kwargs)
        dim, keepdim = merged_dims("std_mean", dim, keepdim, kwargs.get("axis"), None)
        return deviation, self.mean(dim=dim, keepdim=kwargs.get("keepdims") or keepdim)

    def scatter_reduce(
        self,
        dim: int,
        index: TensorBase,
        src: TensorBase,
        reduce: str,
        *,
        include_self: bool = True,
    ) -> TensorBase:
        """Out of place: each place ``out[index[i][j]][j]`` (dim 0; and so on) reduced with the
        ``src[i][j]`` sent there, by "sum", "prod", "mean", "amax" or "amin"; with
        ``include_self`` the tensor's own value takes part. Places nothing is sent to keep it.

        Composed of where and the reductions over a one-hot layout (index's elements times the
        size of `dim`), so the gradients are theirs: tied extremes share it, as in PyTorch.
        Shapes: x (...); index and src of x's ndim, index no larger than src -> x's shape."""
        if reduce not in _SCATTER_REDUCTIONS:
            raise RuntimeError(
                f"scatter_reduce: reduce argument must be one of {', '.join(_SCATTER_REDUCTIONS)}"
                f", got {reduce!r}"
            )
        axis, index, values = _scatter_operands("scatter_reduce", self, dim, index, src)
        region = tuple(slice(0, n) if d != axis else slice(None) for d, n in enumerate(index.shape))
        reduced = _scatter_region(values, index, axis, reduce, self[region], include_self)
        return _embedded(self, reduced.to(self.dtype), index.shape, axis)

    def _scatter_with_reduce(
        self, op: str, dim: int, index: TensorBase, src: Any, reduce: str
    ) -> TensorBase:
        """``scatter(..., reduce="add" | "multiply")``: scatter_reduce with the tensor's own
        values included; a number `src` is sent to every place index names."""
        if reduce not in ("add", "multiply"):
            raise RuntimeError(
                f"{op}: reduce argument must be either add or multiply, got {reduce!r}"
            )
        if not isinstance(src, TensorBase):
            index = self._operand(index, op)
            src = self._operand(src, op).to(self.dtype).broadcast_to(index.shape)
        return self.scatter_reduce(dim, index, src, "sum" if reduce == "add" else "prod")

    def index_put(self, indices: Any, values: Any, accumulate: bool = False) -> TensorBase:
        """Out of place: ``out[indices] = values`` (``indices`` a tuple of index tensors, as in
        PyTorch), or ``+=`` with `accumulate`, where repeated places add up.

        Shapes: x (...), values broadcastable to x[indices]'s shape -> x's shape."""
        if not isinstance(indices, tuple | list):
            raise TypeError(
                f"index_put: indices must be a tuple of Tensors, got {describe(indices)}"
            )
        key = tuple(indices)
        target = self[key]  # the checks (IndexError) and the shape values broadcast to
        values = self._operand(values, "index_put")
        if values.dtype != self.dtype:  # PyTorch casts neither way (x[key] = v does cast)
            raise RuntimeError(
                f"index_put: values ({backend.dtype_name(values.dtype)}) and this tensor "
                f"({backend.dtype_name(self.dtype)}) must have the same dtype"
            )
        values = values.broadcast_to(target.shape)
        if not accumulate:
            out = self.clone()
            out[key] = values
            return out
        # The place each selected element came from, found by indexing a tensor of positions.
        positions = computed(_positions_of, self, name="index_put")[key].reshape(-1)
        flat = self.reshape(-1)
        return flat.index_add(0, positions, values.reshape(-1)).reshape(self.shape)

    def trace(self) -> TensorBase:
        """The sum of the main diagonal of a matrix;  dL/dx = g * I.  Shapes: (r, c) -> ()."""
        if self.ndim != 2:
            raise TinyattnError(f"trace: expected a 2-D tensor, got shape {self.shape}")
        return self.diag().sum()

    def count_nonzero(self, dim: int | tuple | None = None) -> TensorBase:
        """The number of nonzero entries (over `dim`, or all), as int64.
        Shapes: (...) -> () or the shape without `dim`."""
        return (self != 0).sum(dim=dim)


def _every_dim_if_empty(axis: Any) -> Any:
    """None (every dim) for an empty dim list: PyTorch's sum, mean, amax, var, norm and the
    like reduce over every dim for ``dim=()`` or ``dim=[]`` (NumPy's over none)."""
    return None if isinstance(axis, tuple | list) and not axis else axis


def _accumulated(tensor: TensorBase, dtype: Any = None, op: str = "sum") -> TensorBase:
    """What sums and products run on: the tensor cast to `dtype` when given, else bool and
    integer tensors as int64 (PyTorch's rule: no overflow of small integer types), floats as
    they are."""
    if dtype is not None:
        if isinstance(dtype, str) and dtype not in backend.DTYPE_NAMES:
            raise TinyattnError(
                f"{op}: unknown dtype {dtype!r}: expected one of {', '.join(backend.DTYPE_NAMES)}"
            )
        return tensor._cast(dtype)
    if is_float(tensor.array) or backend.dtype_name(tensor.dtype) == "int64":
        return tensor
    return tensor._cast("int64")


def _variance(
    tensor: TensorBase, op: str, axis: Any, keepdims: bool, correction: float
) -> TensorBase:
    """sum((x - mean)**2) / (N - correction) over `axis`; with N <= correction, PyTorch's
    warning (its text) and its division by 0: NaN where the squares sum to 0, else inf."""
    backend.check_floating(op, tensor.array)
    axis = _every_dim_if_empty(axis)
    if backend.is_half(tensor.array):  # PyTorch computes a float16 variance in float32
        wide = _squares_over_freedom(tensor._cast("float32"), op, axis, keepdims, correction)
        return wide._cast("float16")
    return _squares_over_freedom(tensor, op, axis, keepdims, correction)


def _squares_over_freedom(
    tensor: TensorBase, op: str, axis: Any, keepdims: bool, correction: float
) -> TensorBase:
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


def _refuse_bool(op: str, x: TensorBase) -> None:
    if backend.dtype_name(x.dtype) == "bool":  # max(dim) of a bool tensor is fine: its values
        raise RuntimeError(f"{op}: does not support bool input; cast it with .long()")


def _arg_extreme_of(xp: Any, x: Any, name: str, axis: int, keepdims: bool, flat: bool) -> Any:
    found = getattr(xp, name)(xp.reshape(x, (-1,)) if flat else x, axis=axis, keepdims=keepdims)
    return xp.astype(xp.asarray(found), xp.int64)


_SCATTER_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _power_norm(x: TensorBase, p: float, axis: Any, keepdim: bool) -> TensorBase:
    """(sum |x|^p)^(1/p). For p > 0 a zero element and a zero norm get a zero gradient, as in
    PyTorch, where the plain formula gives 0 * inf = NaN: the powers see 1 there, masked out."""
    magnitude = x.abs()
    if p < 0:
        return (magnitude**p).sum(axis, keepdims=keepdim) ** (1.0 / p)
    nonzero = magnitude != 0
    total = where(nonzero, where(nonzero, magnitude, 1.0) ** p, 0.0).sum(axis, keepdims=keepdim)
    spread = total != 0
    return where(spread, where(spread, total, 1.0) ** (1.0 / p), 0.0)


def _positions_of(xp: Any, x: Any, name: str) -> Any:
    """The row-major position of every element of x, in x's shape (int64)."""
    count = 1
    for n in x.shape:
        count *= n
    return xp.reshape(xp.arange(count, dtype=xp.int64, device=x.device), x.shape)


def _scatter_operands(op: str, x: TensorBase, dim: int, index: Any, src: Any) -> tuple:
    """The axis, the checked integer index and src cut to index's shape in x's dtype."""
    axis = normalize_dim(op, dim, max(x.ndim, 1))
    index = x._operand(index, op)
    if not isinstance(src, TensorBase):
        raise TypeError(f"{op}: src must be a Tensor, got {describe(src)}")
    src = x._operand(src, op)
    if src.dtype != x.dtype:  # PyTorch casts neither way
        raise RuntimeError(
            f"{op}: expected src's dtype {backend.dtype_name(src.dtype)} to equal this tensor's, "
            f"{backend.dtype_name(x.dtype)}"
        )
    if not backend.dtype_name(index.dtype).startswith(("int", "uint")):
        raise RuntimeError(f"{op}: index must be an int64 tensor, got {describe(index)}")
    fits = index.ndim == x.ndim == src.ndim and all(
        i <= s and (d == axis or i <= n)
        for d, (i, s, n) in enumerate(zip(index.shape, src.shape, x.shape))
    )
    if not fits:
        raise RuntimeError(
            f"{op}: index of shape {index.shape} must have the ndim of self {x.shape} and src "
            f"{src.shape}, and be no larger than src, nor than self outside dim {axis}"
        )
    if index.numel():
        xp = backend.namespace(index.array)
        low, high = int(xp.min(index.array)), int(xp.max(index.array))
        if low < 0 or high >= x.shape[axis]:
            raise IndexError(
                f"{op}: index {low if low < 0 else high} is out of bounds for dimension {axis} "
                f"with size {x.shape[axis]}"
            )
    return axis, index, src[tuple(slice(0, n) for n in index.shape)].to(x.dtype)


def _one_hot_along(xp: Any, index: Any, size: int) -> Any:
    """match[..., j] = (index[...] == j) for j < size: a bool array of index's shape + (size,)."""
    return xp.astype(index, xp.int64)[..., None] == xp.arange(size, device=index.device)


def _scatter_region(
    values: TensorBase,
    index: TensorBase,
    axis: int,
    reduce: str,
    own: TensorBase,
    include_self: bool,
) -> TensorBase:
    """The region index covers (index's sizes, all of `axis`) after the reduction; `own` is
    x's values there, kept where nothing is sent."""
    match = computed(_one_hot_along, index, size=own.shape[axis])  # (..., k at axis, ..., n)
    candidates, count = values.unsqueeze(-1), match.sum(axis)
    hit = (count > 0).movedim(-1, axis)
    if include_self:  # x's own value is one more candidate: (..., 1 at axis, ..., n)
        mine = own.movedim(axis, -1).unsqueeze(axis)
        candidates = concat([candidates.broadcast_to(match.shape), mine], axis)
        match = concat([match, computed(_all_true, mine)], axis)
        count = count + 1
    if reduce in ("sum", "mean"):
        out = where(match, candidates, 0).sum(axis)
        if reduce == "mean":
            out = out / count.clip(min=1) if is_float(out.array) else out // count.clip(min=1)
    elif reduce == "prod":
        out = where(match, candidates, 1).prod(axis)
    else:
        out = _masked_extreme(candidates, match, axis, reduce)
    return where(hit, out.movedim(-1, axis), own)


def _all_true(xp: Any, x: Any) -> Any:
    return xp.ones(x.shape, dtype=xp.bool, device=x.device)


def _masked_extreme(
    candidates: TensorBase, match: TensorBase, axis: int, reduce: str
) -> TensorBase:
    """amax or amin over `axis` of the candidates where match is True; a place with none gets
    any value (it is not used). A float fills with -inf (+inf), which ties with nothing real."""
    largest = reduce == "amax"
    if is_float(candidates.array):
        fill = -math.inf if largest else math.inf
    else:  # integers carry no gradient: any candidate value is a neutral fill
        detached = candidates.detach()
        fill = (detached.amin() if largest else detached.amax()).item()
    filled = where(match, candidates, fill)
    return filled.amax(axis) if largest else filled.amin(axis)


def _embedded(x: TensorBase, region: TensorBase, index_shape: tuple, axis: int) -> TensorBase:
    """x with the region scatter wrote (index's sizes, all of `axis`) in place: the rest of x
    joined on, one dimension at a time."""
    out = region
    for d in range(x.ndim):
        if d == axis or index_shape[d] == x.shape[d]:
            continue
        rest = tuple(
            slice(None)
            if e < d
            else slice(index_shape[d], None)
            if e == d
            else (slice(None) if e == axis else slice(0, index_shape[e]))
            for e in range(x.ndim)
        )
        out = concat([out, x[rest]], d)
    return out
