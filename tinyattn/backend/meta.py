"""The meta device: arrays with a shape and a dtype but no values (PyTorch's ``device="meta"``).

Part of `backend` (imports NumPy only, for its dtypes and its shape rules). A `MetaArray` is this
module's array, and this module is its array API namespace: every function computes only the
shape and dtype of its result, so every op runs unchanged on meta tensors and a model of any size
costs no memory. The dtype of a result is the one NumPy gives for the same call on 0-d arrays of
the operands' dtypes, and views and basic indexing take their shapes from a NumPy view with zero
strides (no memory either), so the rules are NumPy's own. Reading values is refused, naming the
meta device; a function this module lacks is refused by name (NotImplementedError).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np


class MetaDeviceError(NotImplementedError, AttributeError):
    """An operation that meta arrays cannot run: it needs values, or has no shape rule here.
    Also an AttributeError, so ``hasattr(namespace, name)`` answers False for a missing name."""


def no_values(what: str = "") -> Exception:
    """The error for reading a meta array's values, of PyTorch's type and wording for the read
    `what` names (``"item()"``, ``"numpy()"``; none for a copy to another device)."""
    if what == "numpy()":
        return TypeError(
            "can't convert meta device type tensor to numpy: a meta tensor has no values"
        )
    if what:
        return RuntimeError(f"Tensor.{what} cannot be called on meta tensors")
    return MetaDeviceError(
        "Cannot copy out of meta tensor; no data! (a meta tensor has a shape and a dtype, no "
        "values; a module on the meta device gets storage from Module.to_empty(device=...) or "
        "load_state_dict(state, assign=True))"
    )


def has_values(array: Any) -> bool:
    """Whether `array` holds values: False for a meta array, whose ops skip checks of values
    (an index in range, a class target valid), as PyTorch's meta kernels do."""
    return type(array) is not MetaArray


class MetaArray:
    """An array of `shape` and `dtype` (a NumPy dtype) on the device ``"meta"``, without values."""

    __slots__ = ("shape", "dtype")
    device = "meta"
    __array_priority__ = 100  # NumPy scalars hand `np.float32(2) * meta` to MetaArray

    def __init__(self, shape: tuple, dtype: Any) -> None:
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: math.prod(self.shape))
    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: self.size * self.dtype.itemsize)
    T = property(lambda self: permute_dims(self, tuple(reversed(range(self.ndim)))))
    mT = property(lambda self: matrix_transpose(self))  # noqa: N815  (the array API's name)

    def __array_namespace__(self, api_version: str | None = None) -> Any:
        return sys.modules[__name__]

    def __repr__(self) -> str:
        return f"MetaArray(shape={self.shape}, dtype={self.dtype})"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d meta array")
        return self.shape[0]

    # Values: there are none.
    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        raise no_values()

    def item(self, *args: Any) -> Any:
        raise no_values("item()")

    def tolist(self) -> Any:
        raise no_values("tolist()")

    def __bool__(self) -> bool:
        raise no_values("item()")

    __float__ = __int__ = __index__ = __complex__ = __bool__

    def __iter__(self) -> Any:
        return (self[i] for i in range(len(self)))

    # Shapes of views and copies.
    def __getitem__(self, key: Any) -> MetaArray:
        return MetaArray(_indexed_shape(self.shape, key), self.dtype)

    def __setitem__(self, key: Any, value: Any) -> None:
        target = _indexed_shape(self.shape, key)
        if isinstance(value, MetaArray | np.ndarray):
            np.broadcast_shapes(value.shape, target)  # the value must broadcast to the target

    def reshape(self, *shape: Any, **kwargs: Any) -> MetaArray:
        return reshape(self, shape[0] if len(shape) == 1 else shape)

    def astype(self, dtype: Any, copy: bool = True) -> MetaArray:
        return MetaArray(self.shape, dtype)

    def copy(self) -> MetaArray:
        return MetaArray(self.shape, self.dtype)

    def to_device(self, device: Any, stream: Any = None) -> MetaArray:
        if device != "meta":
            raise no_values()
        return self


# ------------------------------------------------------------------------------------- dtypes
def _stand_in(value: Any) -> Any:
    """A value of `value`'s dtype for NumPy to compute a result dtype from: a 0-d array for an
    array, a Python number of the same kind for a number (NumPy keeps those weak, as ours are)."""
    if isinstance(value, MetaArray | np.ndarray | np.generic):
        return np.ones((), dtype=value.dtype)
    if isinstance(value, bool | int | float | complex):
        return type(value)(1)
    raise TypeError(f"meta: unsupported operand type {type(value).__name__}")


def result_type(*operands: Any) -> np.dtype:
    """The dtype NumPy gives the operands together (dtypes and Python numbers taken as such)."""
    return np.result_type(
        *(v if isinstance(v, np.dtype | type) else _stand_in(v) for v in operands)
    )


def astype(x: MetaArray, dtype: Any, /, *, copy: bool = True, device: Any = None) -> MetaArray:
    return MetaArray(x.shape, dtype)


isdtype, can_cast, finfo, iinfo, errstate = np.isdtype, np.can_cast, np.finfo, np.iinfo, np.errstate
nan, inf, pi, e, newaxis = np.nan, np.inf, np.pi, np.e, np.newaxis
_DTYPES = {
    name: getattr(np, name)
    for name in (
        "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 "
        "complex64 complex128"
    ).split()
}


# -------------------------------------------------------------------------------- elementwise
def _shape_of(value: Any) -> tuple:
    return tuple(getattr(value, "shape", ()))


def _elementwise(function: Any, name: str) -> Any:
    """The meta form of an elementwise NumPy function: the broadcast shape, NumPy's dtype."""

    def meta_function(*operands: Any, **kwargs: Any) -> MetaArray:
        operands = tuple(v for v in operands if v is not None)  # clip(x, None, high)
        shape = np.broadcast_shapes(*(_shape_of(v) for v in operands))
        with np.errstate(all="ignore"):
            result = function(*(_stand_in(v) for v in operands))
        return MetaArray(shape, np.asarray(result).dtype)

    meta_function.__name__ = meta_function.__qualname__ = name
    meta_function.__doc__ = f"The shape and dtype of ``{name}``'s result (operands broadcast)."
    return meta_function


# The array API's names; NumPy's where they differ.
_UNARY = (
    "abs acos acosh asin asinh atan atanh bitwise_invert ceil conj cos cosh exp expm1 floor imag "
    "isfinite isinf isnan log log10 log1p log2 logical_not negative positive real reciprocal "
    "round sign signbit sin sinh sqrt square tan tanh trunc"
).split()
_BINARY = (
    "add atan2 bitwise_and bitwise_left_shift bitwise_or bitwise_right_shift bitwise_xor clip "
    "copysign divide equal floor_divide fmax fmin greater greater_equal hypot less less_equal "
    "logaddexp logical_and logical_or logical_xor maximum minimum multiply nextafter not_equal "
    "pow remainder subtract"
).split()
_NUMPY_NAMES = {
    "bitwise_invert": "invert",
    "bitwise_left_shift": "left_shift",
    "bitwise_right_shift": "right_shift",
    "pow": "power",
}
_ELEMENTWISE = {
    name: _elementwise(getattr(np, _NUMPY_NAMES.get(name, name)), name) for name in _UNARY + _BINARY
}


def where(condition: Any, x1: Any, x2: Any, /) -> MetaArray:
    """The three operands' broadcast shape; the dtype of x1 and x2 together."""
    shape = np.broadcast_shapes(_shape_of(condition), _shape_of(x1), _shape_of(x2))
    return MetaArray(shape, result_type(x1, x2))


# -------------------------------------------------------------------------- views and indexing
def _proxy(shape: tuple) -> np.ndarray:
    """A read-only NumPy view of `shape` whose strides are all zero: one byte of memory whatever
    its shape, so NumPy's own view and indexing rules give a meta result's shape for free."""
    return np.broadcast_to(np.zeros((), dtype=np.bool_), shape)


def _view_rule(function: Any, name: str) -> Any:
    def meta_function(x: MetaArray, /, *args: Any, **kwargs: Any) -> MetaArray:
        return MetaArray(function(_proxy(x.shape), *args, **kwargs).shape, x.dtype)

    meta_function.__name__ = meta_function.__qualname__ = name
    meta_function.__doc__ = f"The shape of ``{name}``'s result (NumPy's rule, on a stride-0 view)."
    return meta_function


_VIEWS = {
    name: _view_rule(function, name)
    for name, function in {
        "broadcast_to": np.broadcast_to,
        "expand_dims": np.expand_dims,
        "flip": np.flip,
        "matrix_transpose": np.matrix_transpose,
        "moveaxis": np.moveaxis,
        "permute_dims": np.permute_dims,
        "squeeze": np.squeeze,
        "swapaxes": np.swapaxes,
    }.items()
}


def reshape(x: MetaArray, /, shape: Any, *, copy: bool | None = None) -> MetaArray:
    """NumPy's rule (one -1 inferred; the sizes must agree), on a stride-0 view: no memory."""
    return MetaArray(_proxy(x.shape).reshape(shape).shape, x.dtype)


def roll(x: MetaArray, /, shift: Any, *, axis: Any = None) -> MetaArray:
    return MetaArray(x.shape, x.dtype)


def _is_array_index(part: Any) -> bool:
    return isinstance(part, MetaArray | np.ndarray | list)


def _indexed_shape(shape: tuple, key: Any) -> tuple:
    """The shape of ``array[key]``. Basic indexing is a view of the stride-0 proxy. Integer arrays
    (advanced indexing) are indexed twice with stand-ins whose every dimension is 1 and 0: the
    positions where the two results differ are where the arrays' broadcast shape goes (NumPy's
    placement rule), and neither result holds more than the sliced dimensions."""
    parts = key if isinstance(key, tuple) else (key,)
    arrays = [np.asarray(p) if isinstance(p, list) else p for p in parts if _is_array_index(p)]
    if not arrays:
        return _proxy(shape)[key].shape
    if any(a.dtype == np.bool_ for a in arrays):
        raise MetaDeviceError(
            "indexing with a boolean mask is not supported on the meta device: the result's "
            "shape depends on the mask's values"
        )

    def stand_ins(size: int) -> tuple:
        return tuple(
            np.zeros((size,) * np.ndim(p), dtype=np.intp) if _is_array_index(p) else p
            for p in parts
        )

    ones, zeros = _proxy(shape)[stand_ins(1)].shape, _proxy(shape)[stand_ins(0)].shape
    block = np.broadcast_shapes(*(a.shape for a in arrays))
    start = next((i for i, (a, b) in enumerate(zip(ones, zeros)) if a != b), len(ones))
    return ones[:start] + block + ones[start + len(block) :]


def take(x: MetaArray, indices: Any, /, *, axis: int | None = None) -> MetaArray:
    """x's shape with axis `axis` replaced by the indices' shape (the flattened x without one)."""
    if axis is None:
        return MetaArray(indices.shape, x.dtype)
    axis = np.lib.array_utils.normalize_axis_index(axis, x.ndim)
    return MetaArray(x.shape[:axis] + tuple(indices.shape) + x.shape[axis + 1 :], x.dtype)


def concat(arrays: Any, /, *, axis: int | None = 0) -> MetaArray:
    """The shapes must agree except along `axis`, where their lengths add up."""
    arrays = list(arrays)
    if axis is None:
        arrays, axis = [reshape(a, (-1,)) for a in arrays], 0
    first = arrays[0].shape
    axis = np.lib.array_utils.normalize_axis_index(axis, len(first))
    for a in arrays[1:]:
        if len(a.shape) != len(first) or a.shape[:axis] + a.shape[axis + 1 :] != (
            first[:axis] + first[axis + 1 :]
        ):
            raise ValueError(f"concat: the shapes {first} and {a.shape} differ outside axis {axis}")
    length = sum(a.shape[axis] for a in arrays)
    return MetaArray(first[:axis] + (length,) + first[axis + 1 :], result_type(*arrays))


def stack(arrays: Any, /, *, axis: int = 0) -> MetaArray:
    """Equal shapes, stacked along a new axis."""
    arrays = list(arrays)
    if any(a.shape != arrays[0].shape for a in arrays):
        raise ValueError(f"stack: expected equal shapes, got {[a.shape for a in arrays]}")
    return concat([expand_dims(a, axis=axis) for a in arrays], axis=axis)


# --------------------------------------------------------------------------------- reductions
def _reduction(function: Any, name: str, keeps_dtype: bool = False) -> Any:
    """The meta form of a reduction: the axes removed (or kept as 1); NumPy's dtype for it."""

    def meta_function(
        x: MetaArray, /, *, axis: Any = None, keepdims: bool = False, **kwargs: Any
    ) -> MetaArray:
        axes = range(x.ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
        axes = np.lib.array_utils.normalize_axis_tuple(tuple(axes), x.ndim)
        shape = tuple(
            1 if i in axes else n for i, n in enumerate(x.shape) if keepdims or i not in axes
        )
        dtype = kwargs.get("dtype")
        if dtype is None:
            dtype = x.dtype if keeps_dtype else function(np.ones(1, dtype=x.dtype)).dtype
        return MetaArray(shape, dtype)

    meta_function.__name__ = meta_function.__qualname__ = name
    meta_function.__doc__ = f"The shape and dtype of ``{name}``'s result (the axes reduced)."
    return meta_function


_REDUCTIONS = {
    "sum": _reduction(np.sum, "sum"),
    "prod": _reduction(np.prod, "prod"),
    "mean": _reduction(np.mean, "mean"),
    "var": _reduction(np.var, "var"),
    "std": _reduction(np.std, "std"),
    "max": _reduction(np.max, "max", keeps_dtype=True),
    "min": _reduction(np.min, "min", keeps_dtype=True),
    "any": _reduction(np.any, "any"),
    "all": _reduction(np.all, "all"),
    "argmax": _reduction(np.argmax, "argmax"),
    "argmin": _reduction(np.argmin, "argmin"),
}


def cumulative_sum(
    x: MetaArray, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False
) -> MetaArray:
    shape = list(x.shape)
    if include_initial:
        shape[axis if axis is not None else 0] += 1
    return MetaArray(shape, dtype or np.cumulative_sum(np.ones(1, dtype=x.dtype)).dtype)


def sort(x: MetaArray, /, *, axis: int = -1, **kwargs: Any) -> MetaArray:
    return MetaArray(x.shape, x.dtype)


def argsort(x: MetaArray, /, *, axis: int = -1, **kwargs: Any) -> MetaArray:
    return MetaArray(x.shape, np.intp)


# ----------------------------------------------------------------------------- linear algebra
def matmul(x1: MetaArray, x2: MetaArray, /) -> MetaArray:
    """(..., n, k) @ (..., k, m) -> (..., n, m), the leading axes broadcast; a 1-d operand is a
    row (left) or a column (right) whose axis is dropped from the result."""
    if x1.ndim == 0 or x2.ndim == 0:
        raise ValueError("matmul: a 0-d operand has no matrix axes")
    left = (1,) + x1.shape if x1.ndim == 1 else x1.shape
    right = x2.shape + (1,) if x2.ndim == 1 else x2.shape
    if left[-1] != right[-2]:
        raise ValueError(
            f"matmul: shapes {x1.shape} and {x2.shape} do not align ({left[-1]} != {right[-2]})"
        )
    shape = np.broadcast_shapes(left[:-2], right[:-2]) + (left[-2], right[-1])
    shape = shape[:-2] + shape[-2 : -1 if x2.ndim == 1 else None]
    if x1.ndim == 1:
        shape = shape[:-2] + shape[-1:] if x2.ndim > 1 else shape[:-1]
    return MetaArray(shape, result_type(x1, x2))


def vecdot(x1: MetaArray, x2: MetaArray, /, *, axis: int = -1) -> MetaArray:
    shape = np.broadcast_shapes(x1.shape, x2.shape)
    axis = np.lib.array_utils.normalize_axis_index(axis, len(shape))
    return MetaArray(shape[:axis] + shape[axis + 1 :], result_type(x1, x2))


# ----------------------------------------------------------------------------------- creation
def _size(shape: Any) -> tuple:
    return (int(shape),) if isinstance(shape, int | np.integer) else tuple(int(n) for n in shape)


def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: Any = None) -> MetaArray:
    """A meta array of obj's shape and dtype (`dtype` if given); obj's values are not kept."""
    if not isinstance(obj, MetaArray):
        obj = np.asarray(obj)  # host data: its shape and dtype, then it is dropped
    return MetaArray(obj.shape, obj.dtype if dtype is None else dtype)


def full(shape: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> MetaArray:
    return MetaArray(_size(shape), np.asarray(fill_value).dtype if dtype is None else dtype)


def zeros(shape: Any, *, dtype: Any = None, device: Any = None) -> MetaArray:
    return MetaArray(_size(shape), np.float64 if dtype is None else dtype)


ones = empty = zeros


def zeros_like(x: MetaArray, /, *, dtype: Any = None, device: Any = None) -> MetaArray:
    return MetaArray(x.shape, x.dtype if dtype is None else dtype)


ones_like = empty_like = zeros_like


def full_like(x: MetaArray, /, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Any:
    return zeros_like(x, dtype=dtype)


def arange(
    start: Any, /, stop: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None
) -> MetaArray:
    if stop is None:
        start, stop = 0, start
    length = max(0, math.ceil((stop - start) / step))
    return MetaArray((length,), np.asarray(start + stop + step).dtype if dtype is None else dtype)


def eye(
    n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype: Any = None, device: Any = None
) -> MetaArray:
    return zeros((n_rows, n_rows if n_cols is None else n_cols), dtype=dtype)


def linspace(start: Any, stop: Any, /, num: int, *, dtype: Any = None, **kwargs: Any) -> MetaArray:
    return zeros((num,), dtype=dtype)


# ----------------------------------------------------------------- the namespace and operators
def __getattr__(name: str) -> Any:
    """The elementwise functions, views, reductions and dtypes by name; anything else refused."""
    for table in (_ELEMENTWISE, _VIEWS, _REDUCTIONS, _DTYPES):
        if name in table:
            return table[name]
    raise MetaDeviceError(
        f"{name}: not supported on the meta device (a meta tensor has a shape and a dtype but "
        "no values; this operation needs values or has no shape rule for meta tensors)"
    )


def _operator(function: Any, reflected: bool = False) -> Any:
    if reflected:
        return lambda self, other: function(other, self)
    return lambda self, other: function(self, other)


def _in_place(function: Any) -> Any:
    def operator(self: MetaArray, other: Any) -> MetaArray:
        result = function(self, other)
        if result.shape != self.shape:  # as NumPy: an in-place result must fit its target
            raise ValueError(
                f"meta: cannot write a result of shape {result.shape} into {self.shape}"
            )
        return self

    return operator


_FUNCTIONS = {**_ELEMENTWISE, **_VIEWS, "matmul": matmul}
for _dunder, _name in {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "truediv": "divide",
    "floordiv": "floor_divide",
    "mod": "remainder",
    "pow": "pow",
    "matmul": "matmul",
    "and": "bitwise_and",
    "or": "bitwise_or",
    "xor": "bitwise_xor",
    "lshift": "bitwise_left_shift",
    "rshift": "bitwise_right_shift",
}.items():
    setattr(MetaArray, f"__{_dunder}__", _operator(_FUNCTIONS[_name]))
    setattr(MetaArray, f"__r{_dunder}__", _operator(_FUNCTIONS[_name], reflected=True))
    setattr(MetaArray, f"__i{_dunder}__", _in_place(_FUNCTIONS[_name]))
for _dunder, _name in {
    "eq": "equal",
    "ne": "not_equal",
    "lt": "less",
    "le": "less_equal",
    "gt": "greater",
    "ge": "greater_equal",
}.items():
    setattr(MetaArray, f"__{_dunder}__", _operator(_FUNCTIONS[_name]))
for _dunder, _name in {
    "neg": "negative",
    "pos": "positive",
    "abs": "abs",
    "invert": "bitwise_invert",
}.items():
    setattr(MetaArray, f"__{_dunder}__", _FUNCTIONS[_name])
MetaArray.__hash__ = object.__hash__  # a class with __eq__ must say how it hashes
expand_dims = _VIEWS["expand_dims"]
permute_dims = _VIEWS["permute_dims"]
matrix_transpose = _VIEWS["matrix_transpose"]
