"""Reductions (sum, mean, prod, max, min) and the two broadcasting ops (broadcast_to, sum_to).

Every reduction takes ``axis`` (None, an int or a tuple of ints) and ``keepdims``. Backward first
puts the reduced axes back as size-1 axes (a reshape), then broadcasts: so the gradient rules of
all reductions share one helper, `_unreduce`.
"""

from __future__ import annotations

import math
from typing import Any

from .. import kernels
from ..autograd import Function
from ..backend import is_half, namespace
from ..errors import DimError, TinyattnError
from ..kernels import sum_array
from .scan import running_product


def normalize_axes(op: str, axis: Any, ndim: int) -> tuple[int, ...]:
    """Turn ``axis`` into a sorted tuple of non-negative ints, or raise naming the op."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axes = (axis,)
    elif isinstance(axis, tuple | list):
        axes = tuple(axis)
    else:  # a float or a string would otherwise fail deep inside with "not iterable"
        raise TypeError(f"{op}: axis must be an int or a tuple of ints, got {axis!r}")
    result = []
    for a in axes:
        if not isinstance(a, int) or isinstance(a, bool):
            raise TypeError(f"{op}: axis must be an int or a tuple of ints, got {axis!r}")
        if not -ndim <= a < max(ndim, 1):
            raise DimError(f"{op}: axis {a} is out of range for a tensor with {ndim} dimension(s)")
        result.append(a % ndim if ndim else 0)
    if len(set(result)) != len(result):
        raise TinyattnError(f"{op}: repeated axis in {axis!r}")
    return tuple(sorted(result))


def normalize_dim(op: str, dim: Any, ndim: int) -> int:
    """Turn one dim into a non-negative int, or raise naming the op. A tuple, a list or None is
    a TypeError here, as in PyTorch, where `normalize_axes` would read it as several dims."""
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"{op}: dim must be an int, got {dim!r}")
    return normalize_axes(op, dim, ndim)[0]


def reduction_axes(op: str, axis: Any, ndim: int) -> tuple[int, ...]:
    """The axes a reduction sums over: as `normalize_axes`, but a 0-d tensor reduces nothing.

    PyTorch lets a 0-d tensor be reduced over axis 0 or -1 (returning it unchanged); NumPy has
    no such axis. So the axis is checked against one virtual axis, then dropped.
    """
    if ndim:
        return normalize_axes(op, axis, ndim)
    try:
        normalize_axes(op, axis, 1)
    except ValueError:
        raise DimError(
            f"{op}: axis {axis!r} is not valid for a 0-d tensor, which takes axis 0 or -1"
        ) from None
    return ()


def kept_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    """The shape a reduction over `axes` has with keepdims=True."""
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _unreduce(grad: Any, input_shape: tuple, axes: tuple) -> Any:
    """Spread the gradient of a reduced output back over the input's shape."""
    return grad.reshape(kept_shape(input_shape, axes)).broadcast_to(input_shape)


def _reduce_like(fn: Function, tangent: Any) -> Any:
    """The tangent summed over fn's axes, with the axes kept where fn's output keeps them."""
    keepdims = fn.output.ndim == fn.inputs[0].ndim  # (with no axes the two agree anyway)
    return Sum.apply(tangent, axis=fn.axes, keepdims=keepdims)


def summed(x: Any, axes: tuple, keepdims: bool = False) -> Any:
    """`Sum`'s forward on an array, over normalised `axes`.
    Shapes: x (...) -> x's shape without `axes` (with 1 there for keepdims)."""
    if is_half(x):  # PyTorch's CPU kernels accumulate float16 in float32, rounding once
        xp = namespace(x)
        return xp.astype(sum_array(xp.astype(x, xp.float32), axes, keepdims), x.dtype)
    return sum_array(x, axes, keepdims)


class Sum(Function):
    """y = sum of x over axes;  dL/dx = g broadcast back over the summed axes;
    dy = dx summed over the same axes."""

    __slots__ = ("axes",)
    backward_reads = ()

    def forward(self, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        self.axes = reduction_axes("sum", axis, x.ndim)
        return summed(x, self.axes, keepdims)

    def backward(self, grad: Any) -> Any:
        return _unreduce(grad, self.inputs[0].shape, self.axes)

    def jvp(self, tangent: Any) -> Any:
        return _reduce_like(self, tangent)

    def backward_arrays(self, g: Any) -> tuple | None:
        shape = self.inputs[0].shape  # the same view, without the reshape's and broadcast's
        spread = kernels.spread_array(g, kept_shape(shape, self.axes), shape)
        return None if spread is None else (spread,)


class Prod(Function):
    """y = product of x over axes;  dL/dx_i = g * prod_{j != i} x_j (the product of the others);
    dy = sum over the axes of dx_i * prod_{j != i} x_j.

    The product of the others is the running product from the front times the one from the back
    (`running_product`), not y / x_i: exact where x has zeros, and made of Tensor products, so
    the rule differentiates again.
    Shapes: x (...) -> y (the axes removed, or kept as 1 with keepdims).
    """

    __slots__ = ("axes",)

    def forward(self, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        self.axes = reduction_axes("prod", axis, x.ndim)
        xp = namespace(x)
        # asarray: NumPy returns a NumPy scalar for a full reduction.
        return xp.asarray(xp.prod(x, axis=self.axes, keepdims=keepdims, dtype=x.dtype))

    def backward(self, grad: Any) -> Any:
        x, axes = self.inputs[0], self.axes
        if not axes:
            return grad.reshape(x.shape)
        return _unreduce(grad, x.shape, axes) * _product_of_others(x, axes)

    def jvp(self, tangent: Any) -> Any:
        if not self.axes:  # y is a copy of x
            return tangent.clone()
        return _reduce_like(self, tangent * _product_of_others(self.inputs[0], self.axes))


def _product_of_others(x: Any, axes: tuple) -> Any:
    """Each element's product of the others in its slice over `axes`, in x's shape.
    Shapes: x (...) -> (...), the same."""
    kept = [a for a in range(x.ndim) if a not in axes]
    order = (*kept, *axes)
    rows = x.permute(*order).reshape((*[x.shape[a] for a in kept], -1))
    last = rows.ndim - 1
    before = running_product(rows, last, exclusive=True)
    after = running_product(rows.flip(last), last, exclusive=True).flip(last)
    others = (before * after).reshape(tuple(x.shape[a] for a in order))
    inverse = sorted(range(x.ndim), key=order.__getitem__)
    return others.permute(*inverse)


class Mean(Function):
    """y = mean of x over axes (N elements each);  dL/dx = g / N broadcast back;
    dy = the mean of dx over the same axes.

    Over an empty axis (N = 0) the mean is NaN and the gradient is empty, as in PyTorch. A
    float16 mean is summed and divided in float32, then rounded once, as PyTorch's.
    """

    __slots__ = ("axes",)
    backward_reads = ()

    def forward(self, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        self.axes = reduction_axes("mean", axis, x.ndim)
        xp = namespace(x)
        count = math.prod(x.shape[a] for a in self.axes)
        if count and (x.dtype == xp.float32 or x.dtype == xp.float64):
            # asarray: NumPy turns a 0-d array divided by a number into a NumPy scalar.
            return xp.asarray(sum_array(x, self.axes, keepdims) / count)
        if not count:  # 0 / 0, without NumPy's "mean of empty slice" warning
            shape = kept_shape(x.shape, self.axes)
            if not keepdims:
                shape = tuple(n for i, n in enumerate(x.shape) if i not in self.axes)
            return xp.full(shape, math.nan, dtype=x.dtype, device=x.device)
        if is_half(x):
            wide = sum_array(xp.astype(x, xp.float32), self.axes, keepdims) / count
            return xp.astype(xp.asarray(wide), x.dtype)
        return xp.asarray(xp.mean(x, axis=self.axes, keepdims=keepdims))

    def backward(self, grad: Any) -> Any:
        shape = self.inputs[0].shape
        count = math.prod(shape[a] for a in self.axes)
        # With count 0 the input has no elements: the (empty) gradient needs no factor.
        return _unreduce(grad, shape, self.axes) * (1.0 / count if count else 0.0)

    def jvp(self, tangent: Any) -> Any:
        # Mean itself, not a sum times 1 / N: an empty mean's tangent is NaN, as its value.
        keepdims = self.output.ndim == self.inputs[0].ndim
        return Mean.apply(tangent, axis=self.axes, keepdims=keepdims)


class Norm(Function):
    """y = sqrt(sum of x^2) over axes, the 2-norm;  dL/dx = g * x / y broadcast back, and 0
    where y = 0 (the subgradient PyTorch takes there, where the formula would give 0 / 0);
    dy = sum of x * dx over axes / y, and 0 where y = 0 (as PyTorch's forward AD).
    float16 is squared and summed in float32 (x^2 passes float16's 65504 from |x| = 256 on).

    Shapes: x (any) -> x with `axes` removed (kept as 1 with keepdims).
    """

    __slots__ = ("axes",)
    backward_reads = ("inputs", "output")

    def forward(self, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        self.axes = reduction_axes("norm", axis, x.ndim)
        xp = namespace(x)
        if is_half(x):
            wide = xp.astype(x, xp.float32)
            return xp.astype(
                xp.sqrt(xp.asarray(sum_array(wide * wide, self.axes, keepdims))), x.dtype
            )
        return xp.sqrt(xp.asarray(sum_array(x * x, self.axes, keepdims)))

    def backward(self, grad: Any) -> Any:
        x = self.inputs[0]
        norm = _unreduce(self.output, x.shape, self.axes)
        # Where the norm is 0 its slice of x is all zeros: dividing by 1 there gives the 0.
        return _unreduce(grad, x.shape, self.axes) * x / norm.masked_fill(norm == 0, 1.0)

    def jvp(self, tangent: Any) -> Any:
        y = self.output
        # Where y = 0 its slice of x is all zeros, so the sum is 0: dividing by 1 keeps it.
        return _reduce_like(self, self.inputs[0] * tangent) / y.masked_fill(y == 0, 1.0)


class Max(Function):
    """y = max of x over axes;  dL/dx = g at the maxima, split evenly between tied maxima;
    dy = dx at the maximum, the mean of dx over tied maxima (PyTorch's forward AD for amax).

    The convention of PyTorch's ``amax`` and full ``max()``: k tied maxima get g / k each, a
    symmetric subgradient. (PyTorch's ``max(dim)`` gives all of g to the one index it returns.)
    Central differences agree only at a two-way tie: a tied element's one-sided derivatives are
    1 (step up) and 0 (step down), so they see 1/2 whatever k is; at [2, 2, 2, 1] the rule gives
    1/3. ``gradcheck(..., allow_kinks=True)`` accepts any value between the one-sided ones.
    Shapes: x (any) -> x with `axes` removed (kept as 1 with keepdims).
    """

    __slots__ = ("axes",)
    reduce_name = "max"

    def forward(self, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        self.axes = reduction_axes(self.reduce_name, axis, x.ndim)
        if x.size == 0:
            raise TinyattnError(
                f"{self.reduce_name}: cannot reduce an empty tensor of shape {x.shape}"
            )
        xp = namespace(x)
        return xp.asarray(getattr(xp, self.reduce_name)(x, axis=self.axes, keepdims=keepdims))

    def backward(self, grad: Any) -> Any:
        share = grad.constant(self._share(grad.dtype))
        return _unreduce(grad, self.inputs[0].shape, self.axes) * share

    def jvp(self, tangent: Any) -> Any:
        return _reduce_like(self, tangent * tangent.constant(self._share(tangent.dtype)))

    def _share(self, dtype: Any) -> Any:
        """1 / k at each of the k tied extremes of a slice, 0 elsewhere: an array in x's shape
        (a constant of both rules: it moves only where ties form or break)."""
        x = self.inputs[0].array
        xp = namespace(x)
        extreme = xp.reshape(self.output.array, kept_shape(x.shape, self.axes))
        hits = xp.astype(x == extreme, dtype)
        return hits / xp.sum(hits, axis=self.axes, keepdims=True)


class Min(Max):
    """y = min of x over axes;  dL/dx = g at the minima, split evenly between tied minima;
    dy = dx at the minimum, the mean of dx over tied minima."""

    __slots__ = ()
    reduce_name = "min"


class BroadcastTo(Function):
    """y = x broadcast to `shape` (NumPy rules);  dL/dx = g summed back to x's shape;
    dy = dx broadcast to `shape`."""

    __slots__ = ()
    backward_reads = ()
    shares_storage = True

    def forward(self, x: Any, shape: tuple = ()) -> Any:
        return namespace(x).broadcast_to(x, shape)

    def backward(self, grad: Any) -> Any:
        return grad.sum_to(self.inputs[0].shape)

    def jvp(self, tangent: Any) -> Any:
        return BroadcastTo.apply(tangent, shape=self.output.shape)


def sum_to_axes(shape: tuple, target: tuple) -> tuple[int, ...]:
    """The axes of an array of `shape` that summing it down to `target` sums over (the leading
    axes it lacks, and those where it has size 1), or raise naming sum_to."""
    lead = len(shape) - len(target)
    if lead < 0 or any(n not in (1, shape[lead + i]) for i, n in enumerate(target)):
        raise TinyattnError(
            f"sum_to: cannot sum a tensor of shape {shape} to shape {target}: {target} must "
            f"broadcast to {shape} (each size 1 or equal, no more axes)"
        )
    return tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(target) if n == 1 and shape[lead + i] != 1
    )


def summed_to(x: Any, shape: tuple) -> Any:
    """x summed down to `shape`: a new array (or a view), never x itself, even when the shapes
    match, so that an op's output is never its input's array."""
    axes = sum_to_axes(x.shape, shape)
    summed = sum_array(x, axes, keepdims=True) if axes else x
    return namespace(x).reshape(summed, shape)


class SumTo(Function):
    """y = x summed down to `shape` (the inverse of broadcasting);  dL/dx = g broadcast back;
    dy = dx summed down to `shape`."""

    __slots__ = ()
    backward_reads = ()

    def forward(self, x: Any, shape: tuple = ()) -> Any:
        return summed_to(x, shape)

    def backward(self, grad: Any) -> Any:
        return grad.broadcast_to(self.inputs[0].shape)

    def jvp(self, tangent: Any) -> Any:
        return SumTo.apply(tangent, shape=self.output.shape)


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`.
VMAP_RULES = {
    **dict.fromkeys((Sum, Prod, Mean, Norm, Max, Min), "reduction"),
    BroadcastTo: "broadcast_to",
    SumTo: "sum_to",
}
