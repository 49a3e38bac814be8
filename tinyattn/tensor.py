"""Tensor layer: the Tensor class, its operators and methods, and the factory functions.

Imports `backend`, `autograd` and `ops`. A Tensor is an array plus its place in the graph: ``_ctx``
is the Function that produced it (None for leaves). Every method here validates its arguments
(shapes, devices, dtypes: errors name the op) and then calls one op's ``apply``; no derivative math
lives here. A Python number is not a graph input: ``x * 2.0`` records one ``MulScalar`` node
with the single input ``x`` (likewise ``/``, ``+``, ``-``, ``**`` and their reflected forms), and
the result keeps ``x``'s dtype, so ``float32_tensor * 2.0`` stays float32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import backend
from .autograd import RemovableHandle, default_root_grad, run_backward
from .ops import (
    Abs,
    Add,
    AddScalar,
    BroadcastTo,
    Cast,
    Clip,
    Concat,
    Div,
    DivScalar,
    Exp,
    GetItem,
    Log,
    MatMul,
    Max,
    Maximum,
    Mean,
    Min,
    Mul,
    MulScalar,
    Neg,
    Permute,
    Pow,
    PowScalar,
    RDivScalar,
    Relu,
    Reshape,
    RPowScalar,
    RSubScalar,
    Sigmoid,
    Sqrt,
    Sub,
    Sum,
    SumTo,
    Tanh,
    ToDevice,
    Where,
    broadcast_shapes,
    check_reshape,
    matmul_shape,
    normalize_axes,
)

_HOST_ARRAY = backend.HOST_ARRAY
# Python numbers that go straight to the array library as the other operand of a float tensor.
_SCALARS = (float, int)
_is_float = backend.is_float_array


class Tensor:
    """An n-dimensional array that records the operations applied to it, for reverse mode."""

    __slots__ = ("data", "grad", "requires_grad", "_ctx", "_hooks", "__weakref__")
    # NumPy must hand `ndarray * Tensor` to Tensor.__rmul__ instead of broadcasting over it.
    __array_ufunc__ = None

    def __init__(
        self, data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
    ) -> None:
        if isinstance(data, Tensor):
            data = data.data
        self.data = backend.asarray(data, dtype=dtype, device=_device_spec(data, device))
        self.grad = None
        self._ctx = None
        self._hooks = None
        self.requires_grad = False
        if requires_grad:
            self.requires_grad_()

    @staticmethod
    def _from_op(data: Any, ctx: Any) -> Tensor:
        """Wrap an op's result without copying or validating (the hot path).

        Always a plain Tensor, also when an input was a subclass such as Parameter: the result
        of an operation on a parameter is not a parameter.
        """
        out = Tensor.__new__(Tensor)
        out.data = data
        out.grad = None
        out._ctx = ctx
        out._hooks = None
        out.requires_grad = ctx is not None
        return out

    def constant(self, array: Any) -> Tensor:
        """Wrap an array as a constant (no grad) Tensor; used by backward rules."""
        return Tensor._from_op(array, None)

    def _ones_like_constant(self) -> Tensor:
        xp = backend.namespace(self.data)
        return self.constant(xp.ones(self.shape, dtype=self.data.dtype, device=self.data.device))

    # ------------------------------------------------------------------------------- properties
    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return self.data.size

    @property
    def dtype(self) -> Any:
        return self.data.dtype

    @property
    def device(self) -> str:
        return backend.device_name(backend.device_of(self.data))

    @property
    def is_leaf(self) -> bool:
        return self._ctx is None

    @property
    def grad_fn(self) -> Any:
        return self._ctx

    @property
    def mT(self) -> Tensor:  # noqa: N802  (the array API name)
        """The last two axes swapped (a batch of matrix transposes)."""
        if self.ndim < 2:
            raise ValueError(f"mT: needs at least 2 dimensions, got shape {self.shape}")
        return self.swapaxes(-1, -2)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len: a 0-d tensor has no length (its shape is ())")
        return self.shape[0]

    def __repr__(self) -> str:
        body = repr(backend.to_numpy(self.data)).replace("array(", "tensor(", 1)
        extras = []
        if self.device != "cpu":
            extras.append(f"device='{self.device}'")
        if self._ctx is not None:
            extras.append(f"grad_fn={self._ctx.name}")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return body[:-1] + "".join(", " + e for e in extras) + ")" if extras else body

    # ----------------------------------------------------------------------------- conversions
    def numpy(self) -> Any:
        """A host NumPy copy of the values (an explicit device-to-host transfer on GPU)."""
        return backend.to_numpy(self.data).copy()

    def item(self) -> float | int | bool:
        """The single value of a one-element tensor as a Python number."""
        if self.size != 1:
            raise ValueError(
                f"item: only one-element tensors can be converted to a Python number, "
                f"got shape {self.shape}"
            )
        return backend.to_numpy(self.data).reshape(()).item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(
                f"bool: the truth value of a tensor of shape {self.shape} is ambiguous; "
                "use (x > 0).numpy().any() or .all() on the host"
            )
        return bool(self.item())

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        if not isinstance(self.data, _HOST_ARRAY):
            raise TypeError(
                f"__array__: cannot convert a tensor on device '{self.device}' to NumPy "
                "implicitly; call .numpy() for an explicit copy"
            )
        return self.data if dtype is None else self.data.astype(dtype)

    def to(self, target: Any) -> Tensor:
        """A copy on another device (``'cpu'``, ``'cuda'``, ``'cuda:1'``) or with another dtype.

        Both are differentiable: the gradient flows back to this tensor's device and dtype.
        """
        if isinstance(target, str) and target not in backend.DTYPE_NAMES:
            return self if target == self.device else ToDevice.apply(self, device=target)
        if isinstance(target, bool | int | float) or target is None:
            raise TypeError(
                f"to: expected a device ('cpu', 'cuda', 'cuda:N') or a dtype name "
                f"({', '.join(backend.DTYPE_NAMES)}), got {target!r}"
            )
        return self._cast(target)

    def _cast(self, dtype: Any) -> Tensor:
        xp = backend.namespace(self.data)
        if isinstance(dtype, str):
            dtype = backend.dtype_of_name(xp, dtype)
        if dtype == self.data.dtype:
            return self
        if self.requires_grad and not backend.is_floating(xp, dtype):
            return self.detach()._cast(dtype)  # an integer copy carries no gradient
        return Cast.apply(self, dtype=dtype)

    def float(self) -> Tensor:
        return self._cast("float32")

    def double(self) -> Tensor:
        return self._cast("float64")

    # ---------------------------------------------------------------------------------- autograd
    def detach(self) -> Tensor:
        """The same values, cut from the graph (shares memory)."""
        return type(self)._from_op(self.data, None)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Mark a leaf as a parameter to differentiate with respect to."""
        if self._ctx is not None and not requires_grad:
            raise RuntimeError(
                "requires_grad_: cannot turn off requires_grad on a non-leaf tensor; use detach()"
            )
        if requires_grad and not backend.is_floating(backend.namespace(self.data), self.dtype):
            raise TypeError(
                f"requires_grad_: only floating-point tensors can require gradients, got dtype "
                f"{backend.dtype_name(self.dtype)}"
            )
        self.requires_grad = bool(requires_grad)
        return self

    def backward(
        self, grad: Any = None, retain_graph: bool | None = None, create_graph: bool = False
    ) -> None:
        """Accumulate d(self)/d(leaf) (times `grad`) into the ``.grad`` of every leaf in the graph.

        `grad` may be omitted for a one-element tensor. The graph is freed afterwards unless
        ``retain_graph=True``; ``create_graph=True`` records the backward pass for higher order.
        """
        seed = default_root_grad(self, grad, "backward")
        retain = create_graph if retain_graph is None else retain_graph
        run_backward([self], [seed], retain, create_graph)

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> RemovableHandle:
        """Call ``hook(grad)`` when this tensor's gradient is computed.

        A Tensor returned by the hook replaces the gradient.
        """
        if not self.requires_grad:
            raise RuntimeError(
                "register_hook: cannot register a hook on a tensor that does not require grad"
            )
        if self._hooks is None:
            self._hooks = []
        self._hooks.append(hook)
        return RemovableHandle(self._hooks, hook)

    def zero_grad(self) -> None:
        self.grad = None

    # ------------------------------------------------------------------------------ arithmetic
    def _operand(self, other: Any, op: str) -> Tensor:
        """Turn the other operand into a Tensor on this tensor's device, checking devices."""
        if isinstance(other, Tensor):
            # Two NumPy arrays need no check; NumPy scalars (0-d results) report device 'cpu'.
            if (
                type(self.data) is not _HOST_ARRAY or type(other.data) is not _HOST_ARRAY
            ) and other.data.device != self.data.device:
                raise RuntimeError(
                    f"{op}: tensors are on different devices ('{self.device}' and "
                    f"'{other.device}'); move one with .to(device)"
                )
            return other
        if isinstance(other, bool | int | float):
            xp = backend.namespace(self.data)
            dtype = self.data.dtype
            if isinstance(other, float) and not backend.is_floating(xp, dtype):
                dtype = backend.dtype_of_name(xp, "float32")
            return type(self)._from_op(
                xp.asarray(other, dtype=dtype, device=self.data.device), None
            )
        if isinstance(other, list | tuple) or hasattr(other, "__array_interface__"):
            return Tensor(other, device=self.device)
        raise TypeError(f"{op}: unsupported operand type {_type_name(other)}")

    def _binary(self, function: type, other: Any, op: str, reverse: bool = False) -> Tensor:
        other = self._operand(other, op)
        a, b = (other, self) if reverse else (self, other)
        if a.data.shape != b.data.shape:
            broadcast_shapes(op, a.data.shape, b.data.shape)
        if a.data.dtype != b.data.dtype:
            a, b = _promote(a, b, op)
        if function is Div and not _is_float(a.data):
            # True division of integers gives the default float dtype on every backend (NumPy
            # would give float64, array_api_strict refuses), as in PyTorch.
            a, b = a._cast("float32"), b._cast("float32")
        return function.apply(a, b)

    # A Python number with a float tensor takes the scalar ops (no constant tensor, no sum_to).
    def __add__(self, other: Any) -> Tensor:
        if type(other) in _SCALARS and _is_float(self.data):
            return AddScalar.apply(self, c=other)
        return self._binary(Add, other, "add")

    def __radd__(self, other: Any) -> Tensor:
        if type(other) in _SCALARS and _is_float(self.data):
            return AddScalar.apply(self, c=other)
        return self._binary(Add, other, "add", reverse=True)

    def __sub__(self, other: Any) -> Tensor:
        if type(other) in _SCALARS and _is_float(self.data):
            return AddScalar.apply(self, c=-other)
        return self._binary(Sub, other, "sub")

    def __rsub__(self, other: Any) -> Tensor:
        if type(other) in _SCALARS and _is_float(self.data):
            return RSubScalar.apply(self, c=other)
        return self._binary(Sub, other, "sub", reverse=True)

    def __mul__(self, other: Any) -> Tensor:
        if type(other) in _SCALARS and _is_float(self.data):
            return MulScalar.apply(self, c=other)
        return self._binary(Mul, other, "mul")

    def __rmul__(self, other: Any) -> Tensor:
        if type(other) in _SCALARS and _is_float(self.data):
            return MulScalar.apply(self, c=other)
        return self._binary(Mul, other, "mul", reverse=True)

    def __truediv__(self, other: Any) -> Tensor:
        if type(other) in _SCALARS and _is_float(self.data):
            return DivScalar.apply(self, c=other)
        return self._binary(Div, other, "div")

    def __rtruediv__(self, other: Any) -> Tensor:
        if type(other) in _SCALARS and _is_float(self.data):
            return RDivScalar.apply(self, c=other)
        return self._binary(Div, other, "div", reverse=True)

    def __pow__(self, other: Any) -> Tensor:
        if type(other) in _SCALARS and _is_float(self.data):
            return PowScalar.apply(self, c=other)
        return self._binary(Pow, other, "pow")

    def __rpow__(self, other: Any) -> Tensor:
        if type(other) in _SCALARS and _is_float(self.data):
            return RPowScalar.apply(self, c=other)
        return self._binary(Pow, other, "pow", reverse=True)

    def __matmul__(self, other: Any) -> Tensor:
        other = self._operand(other, "matmul")
        matmul_shape(self.shape, other.shape)
        a, b = _promote(self, other, "matmul") if self.dtype != other.dtype else (self, other)
        return MatMul.apply(a, b)

    def __rmatmul__(self, other: Any) -> Tensor:
        return self._operand(other, "matmul").__matmul__(self)

    def __abs__(self) -> Tensor:
        return self.abs()

    def __neg__(self) -> Tensor:
        return Neg.apply(self)

    def __pos__(self) -> Tensor:
        return self

    def maximum(self, other: Any) -> Tensor:
        return self._binary(Maximum, other, "maximum")

    # Comparisons give bool tensors and carry no gradient. __eq__ stays identity-based (hashable).
    def _compare(self, other: Any, op: str, compare: Callable) -> Tensor:
        other = self._operand(other, op)
        if self.data.shape != other.data.shape:
            broadcast_shapes(op, self.shape, other.shape)
        a = self
        if a.data.dtype != other.data.dtype:  # strict (like CuPy's type rules) will not mix them
            a, other = _promote(a.detach(), other.detach(), op)
        return type(self)._from_op(compare(a.data, other.data), None)

    def __lt__(self, other: Any) -> Tensor:
        return self._compare(other, "lt", lambda a, b: a < b)

    def __le__(self, other: Any) -> Tensor:
        return self._compare(other, "le", lambda a, b: a <= b)

    def __gt__(self, other: Any) -> Tensor:
        return self._compare(other, "gt", lambda a, b: a > b)

    def __ge__(self, other: Any) -> Tensor:
        return self._compare(other, "ge", lambda a, b: a >= b)

    def eq(self, other: Any) -> Tensor:
        """Elementwise equality as a bool tensor (``==`` itself compares identity)."""
        return self._compare(other, "eq", lambda a, b: a == b)

    # ----------------------------------------------------------------------------------- unary
    def _unary(self, function: type, op: str) -> Tensor:
        if not backend.is_floating(backend.namespace(self.data), self.data.dtype):
            raise TypeError(
                f"{op}: expected a floating-point tensor, "
                f"got dtype {backend.dtype_name(self.dtype)}"
            )
        return function.apply(self)

    def exp(self) -> Tensor:
        return self._unary(Exp, "exp")

    def log(self) -> Tensor:
        return self._unary(Log, "log")

    def sqrt(self) -> Tensor:
        return self._unary(Sqrt, "sqrt")

    def tanh(self) -> Tensor:
        return self._unary(Tanh, "tanh")

    def sigmoid(self) -> Tensor:
        return self._unary(Sigmoid, "sigmoid")

    def relu(self) -> Tensor:
        return self._unary(Relu, "relu")

    def abs(self) -> Tensor:
        return Abs.apply(self)

    def clip(self, min: float | None = None, max: float | None = None) -> Tensor:  # noqa: A002
        """Clamp into [min, max]; the gradient passes where min <= x <= max."""
        if min is None and max is None:
            raise ValueError("clip: at least one of min and max must be given")
        if min is not None and max is not None and min > max:
            raise ValueError(f"clip: min ({min}) must not exceed max ({max})")
        if isinstance(min, float) or isinstance(max, float):
            if not backend.is_floating(backend.namespace(self.data), self.data.dtype):
                return self._cast("float32").clip(min, max)  # float bounds: a float result
        return Clip.apply(self, low=min, high=max)

    clamp = clip

    # ------------------------------------------------------------------------------- reductions
    def sum(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return Sum.apply(self, axis=axis, keepdims=keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return self._unary_reduce(Mean, "mean", axis, keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return Max.apply(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return Min.apply(self, axis=axis, keepdims=keepdims)

    def _unary_reduce(self, function: type, op: str, axis: Any, keepdims: bool) -> Tensor:
        if not backend.is_floating(backend.namespace(self.data), self.data.dtype):
            raise TypeError(
                f"{op}: expected a floating-point tensor, "
                f"got dtype {backend.dtype_name(self.dtype)}"
            )
        return function.apply(self, axis=axis, keepdims=keepdims)

    def var(self, axis: Any = None, keepdims: bool = False, correction: float = 0) -> Tensor:
        """Variance, ``sum((x - mean)**2) / (N - correction)``; NumPy's default correction=0.

        Composed from mean, sub, mul and sum, so its gradient ``2 (x - mean) / (N - correction)``
        and every higher derivative come from those ops.
        """
        if not backend.is_floating(backend.namespace(self.data), self.data.dtype):
            raise TypeError(
                f"var: expected a floating-point tensor, got dtype {backend.dtype_name(self.dtype)}"
            )
        axes = normalize_axes("var", axis, self.ndim)
        count = 1
        for a in axes:
            count *= self.shape[a]
        if count - correction <= 0:
            raise ValueError(
                f"var: {count} element(s) with correction={correction} leave no degrees of freedom"
            )
        centered = self - self.mean(axis=axes, keepdims=True)
        return (centered * centered).sum(axis=axes, keepdims=keepdims) * (
            1.0 / (count - correction)
        )

    # ------------------------------------------------------------------------------------ shape
    def reshape(self, *shape: Any) -> Tensor:
        shape = _shape_arg(shape)
        if shape == self.shape:
            return self
        return Reshape.apply(self, shape=check_reshape(self.shape, shape))

    view = reshape

    def permute(self, *axes: Any) -> Tensor:
        """Reorder the axes: ``y.shape[i] == x.shape[axes[i]]``."""
        axes = _shape_arg(axes)
        if sorted(a % self.ndim if self.ndim else a for a in axes) != list(range(self.ndim)):
            raise ValueError(
                f"permute: axes {axes} are not a permutation of a tensor with shape {self.shape}"
            )
        return Permute.apply(self, axes=tuple(a % self.ndim for a in axes))

    def transpose(self, *axes: Any) -> Tensor:
        """NumPy's transpose: reverse the axes, or permute them when ``axes`` are given."""
        axes = _shape_arg(axes) or tuple(reversed(range(self.ndim)))
        return self.permute(*axes)

    def swapaxes(self, axis1: int, axis2: int) -> Tensor:
        a, b = (
            normalize_axes("swapaxes", axis1, self.ndim)[0],
            normalize_axes("swapaxes", axis2, self.ndim)[0],
        )
        axes = list(range(self.ndim))
        axes[a], axes[b] = axes[b], axes[a]
        return Permute.apply(self, axes=tuple(axes))

    def expand_dims(self, axis: int) -> Tensor:
        """Insert a size-1 axis at position `axis` of the result."""
        ndim = self.ndim + 1
        if not -ndim <= axis < ndim:
            raise ValueError(
                f"expand_dims: axis {axis} is out of range for a result with {ndim} dimensions"
            )
        axis %= ndim
        return Reshape.apply(self, shape=self.shape[:axis] + (1,) + self.shape[axis:])

    unsqueeze = expand_dims

    def squeeze(self, axis: Any = None) -> Tensor:
        """Remove size-1 axes (all of them, or the given ones, which must have size 1)."""
        if axis is None:
            axes = tuple(i for i, n in enumerate(self.shape) if n == 1)
        else:
            axes = normalize_axes("squeeze", axis, self.ndim)
            for a in axes:
                if self.shape[a] != 1:
                    raise ValueError(
                        f"squeeze: axis {a} of shape {self.shape} has size {self.shape[a]}, not 1"
                    )
        return Reshape.apply(
            self, shape=tuple(n for i, n in enumerate(self.shape) if i not in axes)
        )

    def broadcast_to(self, *shape: Any) -> Tensor:
        shape = _shape_arg(shape)
        if shape == self.shape:
            return self
        if len(shape) < self.ndim or broadcast_shapes("broadcast_to", self.shape, shape) != shape:
            raise ValueError(f"broadcast_to: cannot broadcast shape {self.shape} to {shape}")
        return BroadcastTo.apply(self, shape=shape)

    expand = broadcast_to

    def sum_to(self, shape: tuple) -> Tensor:
        """Sum over broadcast axes so the result has `shape` (the adjoint of broadcast_to)."""
        shape = tuple(shape)
        if shape == self.shape:
            return self
        return SumTo.apply(self, shape=shape)

    def __getitem__(self, key: Any) -> Tensor:
        return GetItem.apply(self, key=_index_key(self, key))


# ------------------------------------------------------------------------------------- helpers
def _shape_arg(args: tuple) -> tuple:
    """Accept both ``f(2, 3)`` and ``f((2, 3))``."""
    if len(args) == 1 and isinstance(args[0], list | tuple):
        return tuple(args[0])
    return tuple(args)


def _type_name(value: Any) -> str:
    """'str', or 'array_api_strict.Array' / 'torch.Tensor' for another library's array, with a
    hint: such arrays are not converted implicitly (that would hide a device transfer)."""
    module = type(value).__module__.split(".")[0]
    if module == "builtins":
        return type(value).__name__
    return f"{module}.{type(value).__name__}; wrap it with ta.tensor(array, device=...)"


def _device_spec(data: Any, device: Any) -> Any:
    if device is not None:
        return device
    if isinstance(data, _HOST_ARRAY) or isinstance(data, int | float | bool | list | tuple):
        return None
    if not hasattr(data, "device"):
        return None
    try:
        return backend.device_name(backend.device_of(data))
    except AttributeError:  # another library's device (a torch tensor): copy through the host
        return None


def _promote(a: Tensor, b: Tensor, op: str) -> tuple[Tensor, Tensor]:
    """Cast both operands to their common dtype (array API rules; ints meet floats as floats)."""
    xp = backend.namespace(a.data)
    a_float, b_float = backend.is_floating(xp, a.dtype), backend.is_floating(xp, b.dtype)
    if a_float and not b_float:
        return a, b._cast(a.dtype)
    if b_float and not a_float:
        return a._cast(b.dtype), b
    a_bool, b_bool = backend.dtype_name(a.dtype) == "bool", backend.dtype_name(b.dtype) == "bool"
    if a_bool != b_bool:  # True + 1 == 2 as in NumPy and PyTorch (strict alone refused it)
        return (a._cast(b.dtype), b) if a_bool else (a, b._cast(a.dtype))
    try:
        common = xp.result_type(a.dtype, b.dtype)
    except TypeError as exc:
        raise TypeError(
            f"{op}: dtypes {backend.dtype_name(a.dtype)} and {backend.dtype_name(b.dtype)} "
            "cannot be combined"
        ) from exc
    return a._cast(common), b._cast(common)


def _index_key(tensor: Tensor, key: Any) -> Any:
    """Unwrap Tensors and lists in an indexing key into arrays on the tensor's device."""
    parts = key if isinstance(key, tuple) else (key,)
    converted = []
    for part in parts:
        if isinstance(part, Tensor):
            if part.ndim == 0:
                part = int(part.item())
            else:
                part = tensor._operand(part, "getitem").data
        elif hasattr(part, "__array_interface__") and part.ndim == 0 and part.dtype.kind in "iu":
            part = int(part)  # a NumPy integer scalar indexes like an int on every backend
        elif isinstance(part, list) or hasattr(part, "__array_interface__"):
            empty = isinstance(part, list) and not part  # x[[]] selects nothing, as in NumPy
            part = backend.asarray(part, dtype="int64" if empty else None, device=tensor.device)
        elif not (part is None or part is Ellipsis or isinstance(part, int | slice)):
            if hasattr(part, "__index__"):
                part = int(part)
            else:
                raise IndexError(f"getitem: unsupported index type {type(part).__name__}")
        if hasattr(part, "dtype") and backend.dtype_name(part.dtype) == "bool":
            raise IndexError("getitem: boolean mask indexing is not supported; use ta.where")
        converted.append(part)
    return tuple(converted)


# ----------------------------------------------------------------------------------- factories
def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A new leaf tensor holding a copy of `data` (floats default to float32)."""
    return Tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)


def from_numpy(array: Any, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor from a NumPy array, keeping its dtype."""
    if not isinstance(array, _HOST_ARRAY):
        raise TypeError(f"from_numpy: expected a NumPy array, got {type(array).__name__}")
    return Tensor(array, device=device, requires_grad=requires_grad)


def _filled(shape: Any, value: float, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    shape = _shape_arg(shape if isinstance(shape, tuple) else (shape,))
    xp, native = backend.resolve_device(device)
    dtype = backend.dtype_of_name(xp, backend.dtype_name(dtype) if dtype is not None else "float32")
    data = xp.full(shape, value, dtype=dtype, device=native)
    return (
        Tensor._from_op(data, None).requires_grad_(requires_grad)
        if requires_grad
        else Tensor._from_op(data, None)
    )


def _checked_shape(op: str, shape: tuple) -> tuple:
    """Sizes must be non-negative ints (NumPy's own error names neither the op nor the shape)."""
    for n in shape:
        if isinstance(n, bool) or not hasattr(n, "__index__"):
            raise TypeError(f"{op}: sizes must be ints, got shape {shape!r}")
        if n < 0:
            raise ValueError(f"{op}: sizes must be non-negative, got shape {shape!r}")
    return tuple(int(n) for n in shape)


def zeros(
    *shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    return _filled(_checked_shape("zeros", _shape_arg(shape)), 0, dtype, device, requires_grad)


def ones(*shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _filled(_checked_shape("ones", _shape_arg(shape)), 1, dtype, device, requires_grad)


def full(
    shape: Any, value: float, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    if not hasattr(value, "__float__"):
        raise TypeError(f"full: the fill value must be a number, got {type(value).__name__}")
    shape = _checked_shape("full", _shape_arg((shape,)))
    return _filled(shape, value, dtype, device, requires_grad)


def zeros_like(other: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    return _filled(other.shape, 0, dtype or other.dtype, other.device, requires_grad)


def ones_like(other: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    return _filled(other.shape, 1, dtype or other.dtype, other.device, requires_grad)


def arange(
    start: float, stop: float | None = None, step: float = 1, dtype: Any = None, device: Any = None
) -> Tensor:
    """Evenly spaced values in [start, stop); integers give int64, floats float32."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError(f"arange: step must not be zero (start={start}, stop={stop})")
    if dtype is None:
        all_ints = all(isinstance(v, int) for v in (start, stop, step))
        dtype = "int64" if all_ints else "float32"
    xp, native = backend.resolve_device(device)
    dtype = backend.dtype_of_name(xp, backend.dtype_name(dtype))
    return Tensor._from_op(xp.arange(start, stop, step, dtype=dtype, device=native), None)


def randn(
    *shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """Standard normal samples from the host generator seeded by ``ta.manual_seed``."""
    shape = _checked_shape("randn", _shape_arg(shape))
    out = Tensor._from_op(backend.random_array("normal", shape, dtype, device), None)
    return out.requires_grad_() if requires_grad else out


def rand(*shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Uniform samples in [0, 1) from the host generator seeded by ``ta.manual_seed``."""
    shape = _checked_shape("rand", _shape_arg(shape))
    out = Tensor._from_op(backend.random_array("uniform", shape, dtype, device), None)
    return out.requires_grad_() if requires_grad else out


# ---------------------------------------------------------------------------- free functions
def where(cond: Tensor, a: Any, b: Any) -> Tensor:
    """Elementwise ``a if cond else b`` with broadcasting; gradients flow to a and b only."""
    if not isinstance(cond, Tensor) or backend.dtype_name(cond.dtype) != "bool":
        raise TypeError(f"where: cond must be a bool Tensor, got {_describe(cond)}")
    anchor = next((t for t in (a, b) if isinstance(t, Tensor)), None)
    if anchor is None:
        anchor = Tensor(0.0, device=cond.device)
    a, b = anchor._operand(a, "where"), anchor._operand(b, "where")
    anchor._operand(cond, "where")
    broadcast_shapes("where", broadcast_shapes("where", cond.shape, a.shape), b.shape)
    if a.dtype != b.dtype:
        a, b = _promote(a, b, "where")
    return Where.apply(cond, a, b)


def _describe(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of dtype {backend.dtype_name(value.dtype)}"
    return type(value).__name__


def maximum(a: Tensor, b: Any) -> Tensor:
    if not isinstance(a, Tensor):
        a, b = b, a
    return a.maximum(b)


def _tensor_list(op: str, tensors: Sequence[Tensor]) -> list[Tensor]:
    """A non-empty list of Tensors, or an error naming the op and the first bad element."""
    if isinstance(tensors, Tensor):
        raise TypeError(f"{op}: expected a sequence of Tensors, got a single Tensor")
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{op}: expected at least one tensor")
    for position, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: element {position} is a {type(t).__name__}, not a Tensor")
    return tensors


def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors along an existing axis; all other axes must match."""
    tensors = _tensor_list("concat", tensors)
    first = tensors[0]
    axis = normalize_axes("concat", axis, first.ndim)[0]
    for position, t in enumerate(tensors[1:], start=1):
        first._operand(t, "concat")
        if t.ndim != first.ndim or any(
            m != n for i, (m, n) in enumerate(zip(t.shape, first.shape)) if i != axis
        ):
            raise ValueError(
                f"concat: tensor {position} has shape {t.shape}, which does not match shape "
                f"{first.shape} of tensor 0 outside axis {axis}"
            )
    if len({t.dtype for t in tensors}) > 1:
        target = first
        for t in tensors[1:]:
            target, _ = _promote(t, target, "concat")
        tensors = [t._cast(target.dtype) for t in tensors]
    return Concat.apply(*tensors, axis=axis)


def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join same-shape tensors along a new axis."""
    tensors = _tensor_list("stack", tensors)
    for position, t in enumerate(tensors[1:], start=1):
        tensors[0]._operand(t, "stack")  # a device mismatch names stack, not concat
        if t.shape != tensors[0].shape:
            raise ValueError(
                f"stack: tensor {position} has shape {t.shape}, "
                f"but tensor 0 has shape {tensors[0].shape}"
            )
    axis = normalize_axes("stack", axis, tensors[0].ndim + 1)[0]  # an axis of the result
    return concat([t.expand_dims(axis) for t in tensors], axis=axis)
