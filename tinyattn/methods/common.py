"""What the Tensor method families share, below the Tensor class.

The families (one file each in this package) are mixin classes that tinyattn/tensor.py joins into
``Tensor``; they cannot import tensor.py (it imports them), so they recognise a tensor by the
common base `TensorBase`, named ``Tensor`` in their annotations and ``isinstance`` checks (every
TensorBase is a tinyattn Tensor: nothing else derives from it). New tensors are made through
``tensor._from_op``. Also here: the free functions the methods themselves call (``where``,
``concat``, ``stack``), the dtype promotion rule (`promote`), and argument helpers. Imports
`backend`, `autograd` and `ops` only.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .. import backend
from ..autograd import note_created
from ..backend import promotion
from ..errors import TinyattnError
from ..ops import (
    Atan2,
    Concat,
    Div,
    Pow,
    Sub,
    Where,
    broadcast_shapes,
    normalize_axes,
)
from ..ops.rounding import FloorDivide, Remainder

HOST_ARRAY = backend.HOST_ARRAY
HOST_TYPES, HOST_FLOATS = backend.HOST_TYPES, backend.HOST_FLOATS
# Python numbers that go straight to the array library as the other operand of a float tensor.
SCALARS = (float, int)
is_float = backend.is_float_array


class TensorBase:
    """The root of Tensor's method families: every tinyattn Tensor is one, and nothing else.

    It holds no state (Tensor declares the slots); it exists so that the families, which sit
    below the Tensor class, can name and recognise a tensor."""

    __slots__ = ()


class ValuesIndices(NamedTuple):
    """What ``max(dim)``, ``min(dim)`` and ``topk`` return, as PyTorch's named tuples do."""

    values: TensorBase
    indices: TensorBase


def merged_dims(op: str, axis: Any, keepdims: Any, dim: Any, keepdim: Any) -> tuple[Any, bool]:
    """Merge NumPy's (axis, keepdims) with PyTorch's (dim, keepdim) spellings."""
    if dim is not None:
        if axis is not None:
            raise TypeError(f"{op}: got both axis={axis!r} and dim={dim!r}; give one")
        axis = dim
    if keepdim is not None:
        keepdims = keepdim
    return axis, bool(keepdims)


def check_integral(op: str, tensor: TensorBase, bools: bool = True) -> None:
    name = backend.dtype_name(tensor.dtype)
    if name == "bool" and not bools:  # shifts: integers only, as in PyTorch
        raise TypeError(f"{op}: expected an integer tensor, got dtype bool")
    if name != "bool" and not name.startswith(("int", "uint")):
        raise TypeError(f"{op}: expected a bool or integer tensor, got dtype {name}")


def shape_arg(args: tuple) -> tuple:
    """Accept both ``f(2, 3)`` and ``f((2, 3))``."""
    if len(args) == 1 and isinstance(args[0], list | tuple):
        return tuple(args[0])
    return tuple(args)


def type_name(value: Any) -> str:
    """'str', or 'array_api_strict.Array' / 'torch.Tensor' for another library's array, with a
    hint: such arrays are not converted implicitly (that would hide a device transfer)."""
    module = type(value).__module__.split(".")[0]
    if module == "builtins":
        return type(value).__name__
    return f"{module}.{type(value).__name__}; wrap it with ta.tensor(array, device=...)"


def by_mask(a: TensorBase, b: TensorBase) -> bool:
    """Whether ``a * b`` is a float tensor times a bool mask that the array library multiplies
    as it is (NumPy and CuPy: the float dtype, each value times 0 or 1), so no float copy of
    the mask is made: a pass over memory fewer, in eager and in a compiled step."""
    names = backend.dtype_name(a.dtype), backend.dtype_name(b.dtype)
    if "bool" not in names or not backend.has_out(a.array):
        return False  # the strict stand-in refuses bool with float: the mask is cast
    other = b if names[0] == "bool" else a
    return backend.is_floating(backend.namespace(other.array), other.dtype)


def promote(a: TensorBase, b: TensorBase, op: str) -> tuple[TensorBase]:
    """Both operands cast to the dtype PyTorch's rule gives them (`result_type`): the higher
    category wins (bool < integer < floating); within one, a 0-d tensor or a Python number
    does not widen a tensor with dimensions (``float32 tensor * 0-d float64`` is float32)."""
    name = result_type(a, b)
    return a._cast(name), b._cast(name)


def result_type(*operands: Any) -> str:
    """The dtype name of an op of `operands` (Tensors and Python numbers), by PyTorch's rule:
    the one home of type promotion is backend/promotion.py."""
    return promotion.result_type(*operands, names=backend.dtype_name)


def integer_operands(
    function: type, a: TensorBase, b: TensorBase, op: str, number: Any = None, reverse: bool = False
) -> tuple[TensorBase]:
    """Operands of one integer or bool dtype, made ready for `function` as PyTorch computes it:
    true division and atan2 in the default float32; floor division, remainder and shifts
    refused on bool (PyTorch has no bool kernel for them); an integer divisor of zero refused,
    where NumPy would give 0; an integer to a negative Python-number power refused (a tensor
    exponent may be negative: ``Pow`` gives PyTorch's 0, 1 or -1 there). `number` is the
    Python number the caller turned into an operand, if any (`reverse`: it came first)."""
    if function is Div or function is Atan2:
        return a._cast("float32"), b._cast("float32")
    if function is Sub:
        refuse_bool_subtraction(op, a)  # one dtype here: a bool a means a bool b
        return a, b
    if function is Pow:
        if backend.dtype_name(a.dtype) == "bool" and (number is None or reverse):
            # PyTorch's one bool power is a bool tensor to a Python bool (x ** True is x)
            raise NotImplementedError(f"{op}: not implemented for bool tensors")
        if number is not None and not reverse and number < 0:
            raise RuntimeError(f"{op}: Integers to negative integer powers are not allowed.")
        return a, b
    if function in _INTEGER_DIVISIONS:
        check_integer_divisor(op, a, b)
    return a, b


def check_integer_divisor(op: str, a: TensorBase, b: TensorBase) -> None:
    """Refuse a bool division (PyTorch has no bool kernel) and an integer divisor of zero."""
    if backend.dtype_name(a.dtype) == "bool":
        raise NotImplementedError(f"{op}: not implemented for bool tensors; cast them with .long()")
    if b.numel() and not bool(backend.namespace(b.array).all(b.array)):
        raise RuntimeError(f"{op}: ZeroDivisionError (an integer divisor is zero)")


def refuse_bool_subtraction(op: str, *operands: Any) -> None:
    """PyTorch refuses ``-`` with a bool operand (a mask is inverted with ``~``, not ``1 - m``)."""
    for operand in operands:
        if (
            operand is True
            or operand is False
            or (isinstance(operand, TensorBase) and backend.dtype_name(operand.dtype) == "bool")
        ):
            raise RuntimeError(
                f"{op}: subtraction with a bool operand is not supported; to invert a mask use "
                "~mask or mask.logical_not(), or cast it first with .long() or .float()"
            )


_INTEGER_DIVISIONS = (FloorDivide, Remainder)


def checked_shape(op: str, shape: tuple) -> tuple:
    """Sizes must be non-negative ints (NumPy's own error names neither the op nor the shape)."""
    sizes = []
    for n in shape:
        try:  # operator.index, not int(): a float (or a float tensor) is no size
            size = operator.index(n) if not isinstance(n, bool) else None
        except TypeError:
            size = None
        if size is None:
            raise TypeError(f"{op}: sizes must be ints, got shape {shape!r}")
        if size < 0:
            raise TinyattnError(f"{op}: sizes must be non-negative, got shape {shape!r}")
        sizes.append(size)
    return tuple(sizes)


def where(cond: TensorBase, a: Any = None, b: Any = None) -> Any:
    """Elementwise ``a if cond else b`` with broadcasting; gradients flow to a and b only.
    With `cond` alone, the indices of its non-zero elements, one tensor per dimension
    (``cond.nonzero(as_tuple=True)``, as PyTorch's one-argument where)."""
    if a is None and b is None and isinstance(cond, TensorBase):
        return cond.nonzero(as_tuple=True)
    if a is None or b is None:
        raise TypeError("where: give both a and b, or neither (the indices of cond's non-zeros)")
    if not isinstance(cond, TensorBase) or backend.dtype_name(cond.dtype) != "bool":
        raise TypeError(f"where: cond must be a bool Tensor, got {describe(cond)}")
    # The result's dtype is PyTorch's promotion of a and b, Python numbers included:
    # where(c, 1, 0) is int64, where(c, 1.0, 0) float32, where(c, int_tensor, 2.5) float32.
    anchor = next((t for t in (a, b) if isinstance(t, TensorBase)), cond)
    a, b = (t if isinstance(t, bool | int | float) else anchor._operand(t, "where") for t in (a, b))
    name = result_type(a, b)
    a, b = (number_operand(anchor, t, name, "where") for t in (a, b))
    anchor._operand(cond, "where")
    broadcast_shapes("where", broadcast_shapes("where", cond.shape, a.shape), b.shape)
    return Where.apply(cond, a, b)


def number_operand(
    anchor: TensorBase, value: Any, name: str, op: str, checked: bool = False
) -> TensorBase:
    """`value` (a Tensor or a Python number) as a Tensor of dtype `name` on anchor's device; a
    number is converted as PyTorch converts it (`promotion.number_as`: an operand wraps, a value
    written into a tensor (`checked`) must fit; 2.7 is 2 in an integer dtype, NaN raises)."""
    if not isinstance(value, bool | int | float):
        return anchor._operand(value, op)._cast(name)
    xp = backend.namespace(anchor.array)
    number = promotion.number_as(value, name, op, checked)
    array = xp.asarray(number, dtype=backend.dtype_of_name(xp, name), device=anchor.array.device)
    return anchor._from_op(array, None)


def written_value(tensor: TensorBase, value: Any, op: str) -> TensorBase:
    """A value about to be written into `tensor` (fill_, x[i] = v): a Python number in the
    tensor's dtype, checked to fit as PyTorch checks it (NaN into an integer tensor raises);
    anything else as an operand, cast when it is stored."""
    if isinstance(value, bool | int | float):
        return number_operand(tensor, value, backend.dtype_name(tensor.dtype), op, checked=True)
    return tensor._operand(value, op)


def describe(value: Any) -> str:
    if isinstance(value, TensorBase):
        return f"a tensor of dtype {backend.dtype_name(value.dtype)}"
    return type(value).__name__


def tensor_list(op: str, tensors: Sequence[TensorBase]) -> list[TensorBase]:
    """A non-empty list of Tensors, or an error naming the op and the first bad element."""
    if isinstance(tensors, TensorBase):
        raise TypeError(f"{op}: expected a sequence of Tensors, got a single Tensor")
    tensors = list(tensors)
    if not tensors:
        raise TinyattnError(f"{op}: expected at least one tensor")
    for position, t in enumerate(tensors):
        if not isinstance(t, TensorBase):
            raise TypeError(f"{op}: element {position} is a {type(t).__name__}, not a Tensor")
    return tensors


def concat(tensors: Sequence[TensorBase], axis: int = 0, *, dim: int | None = None) -> TensorBase:
    """Join tensors along an existing axis; all other axes must match."""
    axis = axis if dim is None else dim
    tensors = tensor_list("concat", tensors)
    first = tensors[0]
    axis = normalize_axes("concat", axis, first.ndim)[0]
    for position, t in enumerate(tensors[1:], start=1):
        first._operand(t, "concat")
        if t.ndim != first.ndim or any(
            m != n for i, (m, n) in enumerate(zip(t.shape, first.shape)) if i != axis
        ):
            raise TinyattnError(
                f"concat: tensor {position} has shape {t.shape}, which does not match shape "
                f"{first.shape} of tensor 0 outside axis {axis}"
            )
    if len({t.dtype for t in tensors}) > 1:
        target = first
        for t in tensors[1:]:
            target, _ = promote(t, target, "concat")
        tensors = [t._cast(target.dtype) for t in tensors]
    return Concat.apply(*tensors, axis=axis)


def stack(tensors: Sequence[TensorBase], axis: int = 0, *, dim: int | None = None) -> TensorBase:
    """Join same-shape tensors along a new axis."""
    axis = axis if dim is None else dim
    tensors = tensor_list("stack", tensors)
    for position, t in enumerate(tensors[1:], start=1):
        tensors[0]._operand(t, "stack")  # a device mismatch names stack, not concat
        if t.shape != tensors[0].shape:
            raise TinyattnError(
                f"stack: tensor {position} has shape {t.shape}, "
                f"but tensor 0 has shape {tensors[0].shape}"
            )
    axis = normalize_axes("stack", axis, tensors[0].ndim + 1)[0]  # an axis of the result
    return concat([t.expand_dims(axis) for t in tensors], axis=axis)


def named(method: Callable, name: str, doc: str | None) -> Callable:
    method.__name__ = name
    method.__qualname__ = f"Tensor.{name}"
    method.__doc__ = doc
    return method


def device_spec(data: Any, device: Any) -> Any:
    """Where a new tensor of `data` goes when no device is given: a device array stays on its
    device; host data and other libraries' arrays (copied through the host) go to the default."""
    if device is not None:
        return device
    if isinstance(data, HOST_ARRAY) or isinstance(data, int | float | bool | list | tuple):
        return None
    if not hasattr(data, "device"):
        return None
    try:
        return backend.device_name(backend.device_of(data))
    except AttributeError:  # another library's device (a torch tensor): copy through the host
        return None


def filled(
    wrap: Callable, shape: tuple, value: Any, dtype: Any, device: Any, requires_grad: bool
) -> TensorBase:
    """A new leaf of `shape` filled with `value` (float32 unless `dtype` says); `wrap` is
    ``Tensor._from_op``, passed in because this module sits below the Tensor class."""
    xp, native = backend.resolve_device(device)
    name = backend.dtype_name(dtype) if dtype is not None else "float32"
    resolved = backend.dtype_of_name(xp, name)  # an unknown dtype is named before the value
    if isinstance(value, bool | int | float):  # full_like(int64 tensor, 2.7) holds 2, as PyTorch
        value = promotion.number_as(value, name, "full", checked=True)
    data = xp.full(shape, value, dtype=resolved, device=native)
    note_created(data)
    out = wrap(data, None)
    return out.requires_grad_() if requires_grad else out


def new_leaf(wrap: Callable, data: Any, dtype: Any, device: Any, requires_grad: bool) -> TensorBase:
    """A new leaf holding a copy of `data`, as ``tinyattn.tensor(data, ...)`` makes it."""
    array = backend.asarray(data, dtype=dtype, device=device_spec(data, device))
    note_created(array)
    out = wrap(array, None)
    return out.requires_grad_() if requires_grad else out


def index_range(like: TensorBase, n: int) -> TensorBase:
    """``arange(n)`` as int64 on `like`'s device: the positions an index is built from."""
    xp = backend.namespace(like.array)
    return like._from_op(xp.arange(n, dtype=xp.int64, device=like.array.device), None)
