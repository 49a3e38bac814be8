"""Factory functions: new tensors from data, shapes and random draws.

``tensor``, ``from_numpy``, ``as_tensor``, ``zeros``/``ones``/``empty``/``full`` and their
``_like`` forms, ``arange``, ``linspace``, ``eye``, ``rand``/``randn``/``randint``/``randperm``,
and PyTorch's legacy typed constructors (``FloatTensor``, ``LongTensor`` ...).
The layer just above `tensor` (imports `backend`, `autograd`, `tensor` and `methods.common`).
Floats default to float32; random draws come from the host generator that ``ta.manual_seed``
seeds, so CPU and GPU runs start from the same numbers.
"""

from __future__ import annotations

from typing import Any

from . import backend
from .autograd import (
    note_created,
)
from .backend import promotion
from .errors import TinyattnError
from .methods.common import HOST_ARRAY, checked_shape, filled, new_leaf, shape_arg
from .tensor import Tensor


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A new leaf tensor holding a copy of `data` in its own dtype: Python floats are float32,
    Python ints int64, bools bool, and an array keeps its dtype (`dtype` chooses another)."""
    if isinstance(data, Tensor):
        data = data.array
    return new_leaf(Tensor._from_op, data, dtype, device, requires_grad)


def from_numpy(array: Any, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor from a NumPy array, keeping its dtype."""
    if not isinstance(array, HOST_ARRAY):
        raise TypeError(f"from_numpy: expected a NumPy array, got {type(array).__name__}")
    return tensor(array, device=device, requires_grad=requires_grad)


def _filled(shape: Any, value: float, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    shape = shape_arg(shape if isinstance(shape, tuple) else (shape,))
    return filled(Tensor._from_op, shape, value, dtype, device, requires_grad)


def zeros(
    *shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    return _filled(checked_shape("zeros", shape_arg(shape)), 0, dtype, device, requires_grad)


def ones(*shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _filled(checked_shape("ones", shape_arg(shape)), 1, dtype, device, requires_grad)


def empty(
    *shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """A new tensor of the shape; tinyattn fills it with zeros (PyTorch leaves it unset)."""
    return _filled(checked_shape("empty", shape_arg(shape)), 0, dtype, device, requires_grad)


def full(
    shape: Any, value: float, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    if not hasattr(value, "__float__"):
        raise TypeError(f"full: the fill value must be a number, got {type(value).__name__}")
    shape = checked_shape("full", shape_arg((shape,)))
    if dtype is None:  # PyTorch's inference: a bool fills bool, an int int64, a float float32
        dtype = "bool" if isinstance(value, bool) else "int64" if isinstance(value, int) else None
    return _filled(shape, value, dtype, device, requires_grad)


def zeros_like(other: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    return _filled(other.shape, 0, dtype or other.dtype, other.device, requires_grad)


def empty_like(other: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """A new tensor of other's shape, dtype and device; tinyattn fills it with zeros (PyTorch
    leaves it unset)."""
    return zeros_like(other, dtype, requires_grad)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """`data` as a tensor: a Tensor itself when it already has the dtype and device asked for
    (else converted with ``.to``, which keeps the graph), anything else copied into a new leaf
    as `tensor` does (unlike PyTorch, a NumPy array's memory is not shared)."""
    if isinstance(data, Tensor):
        if device is not None:
            data = data.to(device)
        return data if dtype is None else data.to(dtype)
    return tensor(data, dtype=dtype, device=device)


def ones_like(other: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    return _filled(other.shape, 1, dtype or other.dtype, other.device, requires_grad)


def arange(
    start: float,
    end: float | None = None,
    step: float = 1,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """Evenly spaced values in [start, end); integers give int64, floats float32."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        all_ints = all(isinstance(v, int) for v in (start, end, step))
        dtype = "int64" if all_ints else "float32"
    name = backend.dtype_name(dtype)
    if promotion.CATEGORY.get(name) == 1:  # PyTorch converts the bounds to the dtype first:
        start, end, step = (int(v) for v in (start, end, step))  # (0, 3, 0.5) has step 0
    if step == 0:
        raise TinyattnError(f"arange: step must be nonzero (start={start}, end={end})")
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise TinyattnError(
            f"arange: upper bound and lower bound inconsistent with step sign "
            f"(start={start}, end={end}, step={step})"
        )
    xp, native = backend.resolve_device(device)
    dtype = backend.dtype_of_name(xp, name)
    out = Tensor._from_op(xp.arange(start, end, step, dtype=dtype, device=native), None)
    note_created(out.array)
    return out.requires_grad_() if requires_grad else out


def _drawn(kind: str, shape: tuple, dtype: Any, device: Any) -> Tensor:
    """Samples of `kind` from the host generator; none on the meta device, which holds no values
    (the generator is left as it was, as PyTorch leaves it)."""
    if device is not None and backend.resolve_device(device)[0] is backend.meta:
        return _filled(shape, 0, dtype, device, False)
    return Tensor._from_op(backend.random_array(kind, shape, dtype, device), None)


def randn(
    *shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """Standard normal samples from the host generator seeded by ``ta.manual_seed``."""
    shape = checked_shape("randn", shape_arg(shape))
    out = _drawn("normal", shape, dtype, device)
    return out.requires_grad_() if requires_grad else out


def randint(
    low: int = 0,
    high: Any = None,
    size: Any = None,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """Integers uniform in [low, high) of shape `size`, from the host generator seeded by
    ``ta.manual_seed``; int64 unless `dtype` says. A lone bound is `high`, as in PyTorch:
    ``randint(10, (3,))``, ``randint(10, size=(3,))`` and ``randint(high=10, size=(3,))`` all
    draw from [0, 10)."""
    if size is None and isinstance(high, tuple | list):
        low, high, size = 0, low, high
    elif high is None:
        low, high = 0, low
    if requires_grad:
        raise RuntimeError("randint: only floating-point tensors can require gradients")
    if size is None:
        raise TypeError("randint: the size (a tuple) is required, e.g. randint(0, 10, (2, 3))")
    if high is None or high <= low:
        raise TinyattnError(f"randint: need low < high, got low={low}, high={high}")
    shape = checked_shape("randint", shape_arg((size,)))
    return Tensor._from_op(backend.random_integers(low, high, shape, dtype, device), None)


def randperm(
    n: int, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """0 .. n-1 in a random order, from the host generator seeded by ``ta.manual_seed``; int64
    unless `dtype` says."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise TinyattnError(f"randperm: n must be an int >= 0, got {n!r}")
    if requires_grad:
        raise RuntimeError("randperm: an integer tensor cannot require grad")
    return Tensor._from_op(backend.random_permutation(n, dtype, device), None)


def linspace(
    start: float,
    end: float,
    steps: int,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """`steps` evenly spaced values from `start` to `end`, both included; float32 unless
    `dtype` says."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise TinyattnError(f"linspace: steps must be an int >= 0, got {steps!r}")
    if dtype is not None and backend.dtype_name(dtype) == "bool":
        raise NotImplementedError("linspace: not implemented for dtype bool (as in PyTorch)")
    data = backend.evenly_spaced(float(start), float(end), steps, dtype or "float32", device)
    out = Tensor._from_op(data, None)
    note_created(data)
    return out.requires_grad_() if requires_grad else out


def eye(
    n: int,
    m: int | None = None,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """The (n, m) identity (m = n unless given): ones on the diagonal; float32 unless `dtype`
    says."""
    for name, value in (("n", n), ("m", n if m is None else m)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TinyattnError(f"eye: {name} must be an int >= 0, got {value!r}")
    xp, native = backend.resolve_device(device)
    dtype = backend.dtype_of_name(xp, backend.dtype_name(dtype) if dtype else "float32")
    out = Tensor._from_op(xp.eye(n, m, dtype=dtype, device=native), None)
    note_created(out.array)
    return out.requires_grad_() if requires_grad else out


def full_like(
    other: Tensor, fill_value: float, dtype: Any = None, requires_grad: bool = False
) -> Tensor:
    return _filled(other.shape, fill_value, dtype or other.dtype, other.device, requires_grad)


def rand_like(other: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """Uniform samples in [0, 1) of `other`'s shape, dtype and device."""
    return rand(*other.shape, dtype=dtype or other.dtype, device=other.device).requires_grad_(
        requires_grad
    )


def randn_like(other: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """Standard normal samples of `other`'s shape, dtype and device."""
    return randn(*other.shape, dtype=dtype or other.dtype, device=other.device).requires_grad_(
        requires_grad
    )


def rand(*shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Uniform samples in [0, 1) from the host generator seeded by ``ta.manual_seed``."""
    shape = checked_shape("rand", shape_arg(shape))
    out = _drawn("uniform", shape, dtype, device)
    return out.requires_grad_() if requires_grad else out


# --------------------------------------------------------------------- legacy typed constructors
class _LegacyTensorType(type):
    """The type of ``FloatTensor``, ``LongTensor`` ...: calling one makes a tensor of its dtype,
    and ``isinstance(x, ta.LongTensor)`` asks whether x is an int64 Tensor, as in PyTorch."""

    dtype: str

    def __call__(cls, *args: Any, device: Any = None) -> Tensor:
        """``LongTensor([1, 2])`` (data, converted), ``FloatTensor(2, 3)`` (a new tensor of
        that shape: zeros here, unset in PyTorch), ``FloatTensor()`` (shape (0,)),
        ``LongTensor(t)`` (t itself, sharing memory, when t is int64)."""
        op = cls.__name__
        if len(args) == 1 and isinstance(args[0], Tensor):
            return _legacy_from_tensor(op, cls.dtype, args[0], device)
        if len(args) == 1 and (isinstance(args[0], list | tuple) or getattr(args[0], "ndim", 0)):
            return Tensor(args[0], dtype=cls.dtype, device=device)
        shape = checked_shape(op, args) if args else (0,)
        return zeros(*shape, dtype=cls.dtype, device=device)

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, Tensor) and backend.dtype_name(instance.dtype) == cls.dtype


def _legacy_from_tensor(op: str, dtype: str, data: Tensor, device: Any) -> Tensor:
    if backend.dtype_name(data.dtype) != dtype or (device is not None and device != data.device):
        raise TypeError(
            f"{op}: expected a {dtype} tensor on {device or data.device}, got "
            f"{backend.dtype_name(data.dtype)} on {data.device}; use t.to(...) to convert"
        )
    return data.detach()  # PyTorch returns a tensor sharing t's memory


def _legacy_type(name: str, dtype: str) -> _LegacyTensorType:
    doc = f"PyTorch's legacy ``torch.{name}``: tensors of dtype {dtype} (see _LegacyTensorType)."
    return _LegacyTensorType(name, (), {"dtype": dtype, "__doc__": doc, "__module__": __name__})


FloatTensor = _legacy_type("FloatTensor", "float32")
DoubleTensor = _legacy_type("DoubleTensor", "float64")
LongTensor = _legacy_type("LongTensor", "int64")
IntTensor = _legacy_type("IntTensor", "int32")
ByteTensor = _legacy_type("ByteTensor", "uint8")
BoolTensor = _legacy_type("BoolTensor", "bool")
