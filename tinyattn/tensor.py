"""Tensor layer: the Tensor class, its operators and methods, and the factory functions.

Imports `backend`, `autograd` and `ops`. A Tensor is an array plus its place in the graph: ``_ctx``
is the Function that produced it (None for leaves). Every method here validates its arguments
(shapes, devices, dtypes: errors name the op) and then calls one op's ``apply`` or composes other
methods; no derivative math lives here. The elementwise methods and operators (``x.exp()``,
``x + y``, ``x < y``) are not written out: `_registered_ops` makes them from the registration
table in ops/table.py, which the op-table tests read too. Names follow PyTorch (``size()``,
``transpose(d0, d1)``, ``max(dim)`` with indices, elementwise ``==``); NumPy's ``axis`` and
``keepdims`` are accepted beside ``dim`` and ``keepdim``. A Python number is not a graph input:
``x * 2.0`` records one ``MulScalar`` node with the single input ``x`` (likewise ``/``, ``+``,
``-``, ``**`` and their reflected forms), and the result keeps ``x``'s dtype, so
``float32_tensor * 2.0`` stays float32.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from . import backend
from .autograd import (
    RETAIN_GRAD,
    RemovableHandle,
    check_host_read,
    default_root_grad,
    is_grad_enabled,
    no_grad,
    note_created,
    note_grad_set,
    note_store,
    run_backward,
)
from .ops import (
    Atan2,
    BroadcastTo,
    Cast,
    Clip,
    Clone,
    Concat,
    Cumsum,
    Div,
    Flip,
    GetItem,
    IndexAdd,
    MatMul,
    Max,
    Mean,
    Min,
    Mul,
    Neg,
    Norm,
    Permute,
    Prod,
    Reshape,
    Sign,
    Sum,
    SumTo,
    ToDevice,
    Where,
    broadcast_shapes,
    check_reshape,
    matmul_shape,
    normalize_axes,
)
from .ops.computed import array_call, computed
from .ops.indexing import parse_key
from .ops.reductions import reduction_axes
from .ops.scan import running_product
from .ops.table import BINARY, LOGICAL, UNARY, Binary, Logical, Unary

_HOST_ARRAY = backend.HOST_ARRAY
# Python numbers that go straight to the array library as the other operand of a float tensor.
_SCALARS = (float, int)
_LN2 = math.log(2.0)
_is_float = backend.is_float_array


# --------------------------------------------------------------------------- generated methods
# Each registered op (ops/table.py) becomes a method, its operators and a free function. The
# closures keep the hot path short: a Python number with a float tensor goes straight to the
# scalar Function (no constant tensor, no sum_to).
def _unary_method(spec: Unary) -> Callable:
    function, name, floats_only = spec.function, spec.name, spec.floats_only

    def method(self: Tensor) -> Tensor:
        if floats_only:
            backend.check_floating(name, self.array)
        return function.apply(self)

    return _named(method, name, function.__doc__)


def _binary_method(spec: Binary, name: str, reverse: bool = False) -> Callable:
    function, op = spec.function, spec.name
    scalar = spec.reflected_scalar if reverse else spec.scalar
    sign = -1 if spec.negate_scalar and not reverse else 1

    def method(self: Tensor, other: Any) -> Tensor:
        if scalar is not None and type(other) in _SCALARS and _is_float(self.array):
            return scalar.apply(self, c=sign * other)
        return self._binary(function, other, op, reverse)

    return _named(method, name, function.__doc__)


def _logical_method(spec: Logical, name: str, reverse: bool = False) -> Callable:
    op, reference, integral = spec.name, spec.reference, spec.integral
    operator = name.startswith("__")

    def method(self: Tensor, other: Any) -> Tensor:
        if operator and (other is None or isinstance(other, str)):
            return NotImplemented  # x == None is False, as in PyTorch, not an error
        return self._logical(other, op, reference, integral, reverse)

    return _named(method, name, f"Elementwise {reference} as a bool tensor (no gradient).")


def _named(method: Callable, name: str, doc: str | None) -> Callable:
    method.__name__ = name
    method.__qualname__ = f"Tensor.{name}"
    method.__doc__ = doc
    return method


def _registered_methods() -> dict[str, Callable]:
    """Every method the op tables define: x.name(...), and __op__/__rop__ for operators."""
    methods = {spec.name: _unary_method(spec) for spec in UNARY}
    for spec in BINARY:
        methods[spec.name] = _binary_method(spec, spec.name)
        if spec.dunder:
            methods[f"__{spec.dunder}__"] = _binary_method(spec, f"__{spec.dunder}__")
            reflected = f"__r{spec.dunder}__"
            methods[reflected] = _binary_method(spec, reflected, reverse=True)
    for spec in LOGICAL:
        methods[spec.name] = _logical_method(spec, spec.name)
        if spec.dunder:
            methods[f"__{spec.dunder}__"] = _logical_method(spec, f"__{spec.dunder}__")
        if spec.reflected:
            reflected = f"__r{spec.dunder}__"
            methods[reflected] = _logical_method(spec, reflected, reverse=True)
    return methods


# Unary ops that also have an in-place form, ``x.exp_()``: the out-of-place result stored back.
IN_PLACE_UNARY = ("abs", "neg", "exp", "log", "sqrt", "tanh", "sigmoid", "relu")


def _in_place_method(name: str) -> Callable:
    op = f"{name}_"

    def method(self: Tensor) -> Tensor:
        return self._inplace(op, getattr(self, name))

    return _named(method, op, f"``x.{name}()`` written into x, in place (its version goes up).")


def _registered_ops(cls: type) -> type:
    """Class decorator: give Tensor the methods and operators of the op tables, and the
    in-place forms of `IN_PLACE_UNARY`."""
    for name, method in _registered_methods().items():
        setattr(cls, name, method)
    for name in IN_PLACE_UNARY:
        setattr(cls, f"{name}_", _in_place_method(name))
    return cls


def _free_function(name: str) -> Callable:
    """``tinyattn.name(input, *args)``: the method ``input.name(*args)`` (a number first, as in
    ``tinyattn.pow(2.0, x)``, is turned into a tensor beside the other operand)."""

    def function(input: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002  (PyTorch's name)
        if not isinstance(input, Tensor):
            anchor = next((a for a in args if isinstance(a, Tensor)), None)
            if anchor is None:
                raise TypeError(f"{name}: expected a Tensor, got {type(input).__name__}")
            input = anchor._operand(input, name)  # noqa: A001
        return getattr(input, name)(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"``tinyattn.{name}(x, ...)`` is ``x.{name}(...)``."
    return function


@_registered_ops
class Tensor:
    """An n-dimensional array that records the operations applied to it, for reverse mode."""

    # `_version_counter` is a one-element list holding the version, shared by a tensor and its
    # views (reshape, permute, basic indexing) so that an in-place change through one is seen
    # through all; `_version` reads it.
    __slots__ = (
        "array",
        "_grad",
        "requires_grad",
        "_ctx",
        "_hooks",
        "_version_counter",
        "__weakref__",
    )
    # NumPy must hand `ndarray * Tensor` to Tensor.__rmul__ instead of broadcasting over it.
    __array_ufunc__ = None

    def __init__(
        self, data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
    ) -> None:
        if isinstance(data, Tensor):
            data = data.array
        self.array = backend.asarray(data, dtype=dtype, device=_device_spec(data, device))
        note_created(self.array)
        self._grad = None
        self._ctx = None
        self._hooks = None
        self._version_counter = [0]
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
        out.array = data
        out._grad = None
        out._ctx = ctx
        out._hooks = None
        out._version_counter = [0]
        out.requires_grad = ctx is not None
        return out

    # ------------------------------------------------------------------ gradient and version
    @property
    def grad(self) -> Tensor | None:
        """The accumulated gradient (a Tensor of this tensor's shape, dtype and device) or None.

        Backward fills it in for leaves, and for a non-leaf only after `retain_grad`; reading it
        on any other non-leaf warns, as PyTorch does (the None is almost always a mistake)."""
        if self._grad is None and self._ctx is not None and not self.retains_grad:
            warnings.warn(
                f"the .grad of a non-leaf tensor (made by {self._ctx.name}) was read: backward "
                "stores gradients only in leaves, so it is None. Call .retain_grad() on it "
                "before backward to keep its gradient, or read the leaf's .grad instead",
                UserWarning,
                stacklevel=2,
            )
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None and not (
            isinstance(value, Tensor)
            and type(value.array) is _HOST_ARRAY
            and type(self.array) is _HOST_ARRAY
            and value.array.shape == self.array.shape
            and value.array.dtype == self.array.dtype
        ):  # NumPy gradients from the engine pass the quick test above; the rest is checked
            _check_assigned_grad(self, value)
        note_grad_set(self)
        self._grad = value

    @property
    def _version(self) -> int:
        """How many in-place changes this tensor's storage has had (PyTorch's ``_version``)."""
        return self._version_counter[0]

    def constant(self, array: Any) -> Tensor:
        """Wrap an array as a constant (no grad) Tensor; used by backward rules."""
        return Tensor._from_op(array, None)

    def _ones_like_constant(self) -> Tensor:
        xp = backend.namespace(self.array)
        return self.constant(xp.ones(self.shape, dtype=self.array.dtype, device=self.array.device))

    # ------------------------------------------------------------------------------- properties
    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def ndim(self) -> int:
        return self.array.ndim

    @property
    def dtype(self) -> Any:
        return self.array.dtype

    @property
    def device(self) -> str:
        return backend.device_name(backend.device_of(self.array))

    @property
    def data(self) -> Tensor:
        """PyTorch's ``.data``: the same values as a detached Tensor that shares this storage.

        Writes through it change this tensor, but the version checks do not see them (it has its
        own counter): the one unchecked escape hatch, as in PyTorch. The raw backend array
        (NumPy, CuPy) is ``x.array``.
        """
        return Tensor._from_op(self.array, None)

    @data.setter
    def data(self, value: Tensor) -> None:
        """``x.data = t``: x holds t's storage (its shape and dtype may change), as in PyTorch."""
        if not isinstance(value, Tensor):
            raise TypeError(
                f"data: assign a Tensor (x.data = t), got {type(value).__name__}; the raw array "
                "is x.array"
            )
        self._operand(value, "data")  # the same device
        self.array = value.array

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
        body = repr(backend.to_numpy(self.array)).replace("array(", "tensor(", 1)
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
        check_host_read("numpy()")
        return backend.to_numpy(self.array).copy()

    def item(self) -> float | int | bool:
        """The single value of a one-element tensor as a Python number."""
        if self.numel() != 1:
            raise ValueError(
                f"item: only one-element tensors can be converted to a Python number, "
                f"got shape {self.shape}"
            )
        check_host_read("item(), float(), int() or bool()")
        return backend.to_numpy(self.array).reshape(()).item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ValueError(
                f"bool: the truth value of a tensor of shape {self.shape} is ambiguous; "
                "use (x > 0).numpy().any() or .all() on the host"
            )
        return bool(self.item())

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        if not isinstance(self.array, _HOST_ARRAY):
            raise TypeError(
                f"__array__: cannot convert a tensor on device '{self.device}' to NumPy "
                "implicitly; call .numpy() for an explicit copy"
            )
        check_host_read("conversion to a NumPy array")
        return self.array if dtype is None else self.array.astype(dtype)

    def to(self, target: Any) -> Tensor:
        """A copy on another device (``'cpu'``, ``'cuda'``, ``'cuda:1'``) or with another dtype.

        Both are differentiable: the gradient flows back to this tensor's device and dtype.
        """
        if isinstance(target, str) and target not in backend.DTYPE_NAMES:
            if target == self.device or backend.is_on(self.array, target):
                return self  # already there, as PyTorch returns the tensor itself
            return ToDevice.apply(self, device=target)
        if isinstance(target, bool | int | float) or target is None:
            raise TypeError(
                f"to: expected a device ('cpu', 'cuda', 'cuda:N') or a dtype name "
                f"({', '.join(backend.DTYPE_NAMES)}), got {target!r}"
            )
        return self._cast(target)

    def _cast(self, dtype: Any) -> Tensor:
        xp = backend.namespace(self.array)
        if isinstance(dtype, str):
            dtype = backend.dtype_of_name(xp, dtype)
        if dtype == self.array.dtype:
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
        """The same values, cut from the graph (shares memory and the version counter)."""
        out = type(self)._from_op(self.array, None)
        out._version_counter = self._version_counter  # in-place changes through it are seen
        return out

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Mark a leaf as a parameter to differentiate with respect to."""
        if self._ctx is not None and not requires_grad:
            raise RuntimeError(
                "requires_grad_: cannot turn off requires_grad on a non-leaf tensor; use detach()"
            )
        if requires_grad and not backend.is_floating(backend.namespace(self.array), self.dtype):
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

    def retain_grad(self) -> None:
        """Keep this non-leaf tensor's gradient in ``.grad`` during backward, as a leaf's is
        kept (for a leaf that requires grad it does nothing). The gradient stored is the one the
        tensor's hooks leave, whatever the order they were registered in, as in PyTorch."""
        if not self.requires_grad:
            raise RuntimeError(
                "retain_grad: cannot keep the gradient of a tensor that does not require grad"
            )
        if self._ctx is None:
            return
        if self._hooks is None:
            self._hooks = []
        if RETAIN_GRAD not in self._hooks:
            self._hooks.append(RETAIN_GRAD)

    @property
    def retains_grad(self) -> bool:
        """Whether `retain_grad` was called on this non-leaf tensor (False for a leaf)."""
        return self._ctx is not None and self._hooks is not None and RETAIN_GRAD in self._hooks

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
    # The elementwise methods and operators (x.exp(), x + y, x < y, x & y ...) are generated from
    # the registration table in ops/table.py by `_registered_ops` below this class.
    def _operand(self, other: Any, op: str) -> Tensor:
        """Turn the other operand into a Tensor on this tensor's device, checking devices."""
        if isinstance(other, Tensor):
            # Two NumPy arrays need no check; NumPy scalars (0-d results) report device 'cpu'.
            if (
                type(self.array) is not _HOST_ARRAY or type(other.array) is not _HOST_ARRAY
            ) and other.array.device != self.array.device:
                raise RuntimeError(
                    f"{op}: tensors are on different devices ('{self.device}' and "
                    f"'{other.device}'); move one with .to(device)"
                )
            return other
        if isinstance(other, bool | int | float):
            xp = backend.namespace(self.array)
            dtype = self.array.dtype
            if isinstance(other, float) and not backend.is_floating(xp, dtype):
                dtype = backend.dtype_of_name(xp, "float32")
            return type(self)._from_op(
                xp.asarray(other, dtype=dtype, device=self.array.device), None
            )
        if isinstance(other, list | tuple) or hasattr(other, "__array_interface__"):
            return Tensor(other, device=self.device)
        raise TypeError(f"{op}: unsupported operand type {_type_name(other)}")

    def _binary(self, function: type, other: Any, op: str, reverse: bool = False) -> Tensor:
        other = self._operand(other, op)
        a, b = (other, self) if reverse else (self, other)
        if a.array.shape != b.array.shape:
            broadcast_shapes(op, a.array.shape, b.array.shape)
        if a.array.dtype != b.array.dtype and not (function is Mul and _by_mask(a, b)):
            a, b = _promote(a, b, op)
        if (function is Div or function is Atan2) and not _is_float(a.array):
            # True division (and atan2) of integers gives the default float dtype on every
            # backend (NumPy would give float64, array_api_strict refuses), as in PyTorch.
            a, b = a._cast("float32"), b._cast("float32")
        return function.apply(a, b)

    def _logical(
        self, other: Any, op: str, name: str, integral: bool, reverse: bool = False
    ) -> Tensor:
        """A comparison or bitwise op (the array API function `name`): no gradient."""
        other = self._operand(other, op)
        a, b = (other, self) if reverse else (self, other)
        if a.array.shape != b.array.shape:
            broadcast_shapes(op, a.shape, b.shape)
        if a.array.dtype != b.array.dtype:  # strict (like CuPy's type rules) will not mix them
            a, b = _promote(a.detach(), b.detach(), op)
        if integral:
            _check_integral(op, a)
        return computed(array_call, a, b, name=name)

    # Tensors are compared elementwise by ==, but hashed by identity: a tensor stays usable as a
    # dict key or set member (the engine keys its gradient table by tensor).
    __hash__ = object.__hash__

    def __invert__(self) -> Tensor:
        """``~x``: logical not of a bool tensor, bitwise not of an integer one (no gradient)."""
        _check_integral("bitwise_not", self)
        return computed(array_call, self, name="bitwise_invert")

    bitwise_not = __invert__

    def logical_not(self) -> Tensor:
        return self.bool().__invert__()

    def logical_and(self, other: Any) -> Tensor:
        """Elementwise `x and y` of the truth values (nonzero is True), as bool.
        Shapes: x and y broadcast together."""
        return self.bool() & self._operand(other, "logical_and").bool()

    def logical_or(self, other: Any) -> Tensor:
        """Elementwise `x or y` of the truth values (nonzero is True), as bool.
        Shapes: x and y broadcast together."""
        return self.bool() | self._operand(other, "logical_or").bool()

    def logical_xor(self, other: Any) -> Tensor:
        """Elementwise exclusive or of the truth values (nonzero is True), as bool.
        Shapes: x and y broadcast together."""
        return self.bool() ^ self._operand(other, "logical_xor").bool()

    def __matmul__(self, other: Any) -> Tensor:
        other = self._operand(other, "matmul")
        matmul_shape(self.shape, other.shape)
        a, b = _promote(self, other, "matmul") if self.dtype != other.dtype else (self, other)
        return MatMul.apply(a, b)

    def __rmatmul__(self, other: Any) -> Tensor:
        return self._operand(other, "matmul").__matmul__(self)

    matmul = __matmul__

    def __abs__(self) -> Tensor:
        return self.abs()

    def __neg__(self) -> Tensor:
        return Neg.apply(self)

    neg = __neg__

    def __pos__(self) -> Tensor:
        return self

    def minimum(self, other: Any) -> Tensor:
        """Elementwise minimum, -maximum(-x, -y): tied elements share the gradient."""
        return -(-self).maximum(-self._operand(other, "minimum"))

    def clip(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
        """Clamp into [min, max] (numbers, or tensors that broadcast); the gradient passes where
        min <= x <= max, and to a tensor bound where it is the value taken, as in PyTorch."""
        if min is None and max is None:
            raise ValueError("clip: at least one of min and max must be given")
        if isinstance(min, Tensor) or isinstance(max, Tensor):
            return self._clip_by_tensors(min, max)
        if min is not None and max is not None and min > max:
            raise ValueError(f"clip: min ({min}) must not exceed max ({max})")
        if isinstance(min, float) or isinstance(max, float):
            if not _is_float(self.array):
                return self._cast("float32").clip(min, max)  # float bounds: a float result
        return Clip.apply(self, low=min, high=max)

    clamp = clip

    def _clip_by_tensors(self, low: Any, high: Any) -> Tensor:
        """clip with tensor bounds: max(x, low), then min(., high), each a `where` that gives
        the gradient to x on ties (PyTorch's rule: x passes where low <= x <= high)."""
        out = self
        if low is not None:
            low = self._operand(low, "clip")
            broadcast_shapes("clip", self.shape, low.shape)
            out = where(out < low, low, out)
        if high is not None:
            high = self._operand(high, "clip")
            broadcast_shapes("clip", self.shape, high.shape)
            out = where(out > high, high, out)
        return out

    def softmax(self, dim: int = -1) -> Tensor:
        """``exp(x) / sum(exp(x))`` along `dim` (tinyattn.functional.softmax)."""
        from .functional import softmax  # noqa: PLC0415  (the layer above: resolved at call)

        return softmax(self, axis=dim)

    def log_softmax(self, dim: int = -1) -> Tensor:
        """``x - logsumexp(x)`` along `dim` (tinyattn.functional.log_softmax)."""
        from .functional import log_softmax  # noqa: PLC0415

        return log_softmax(self, axis=dim)

    def masked_fill(self, mask: Tensor, value: float) -> Tensor:
        """A copy with `value` where the bool `mask` (broadcast to this shape) is True."""
        if not isinstance(mask, Tensor) or backend.dtype_name(mask.dtype) != "bool":
            raise TypeError(f"masked_fill: mask must be a bool Tensor, got {_describe(mask)}")
        broadcast = broadcast_shapes("masked_fill", self.shape, mask.shape)
        if broadcast != self.shape:
            raise ValueError(
                f"masked_fill: mask of shape {mask.shape} does not broadcast to {self.shape}"
            )
        if isinstance(value, Tensor):
            value = value.to(self.dtype)
        return where(mask, value, self)

    # ------------------------------------------------------------------------------- reductions
    # NumPy's `axis`/`keepdims` and PyTorch's `dim`/`keepdim` are both accepted (`_dims`).
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
        axis, keepdims = _dims("sum", axis, keepdims, dim, keepdim)
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
        axis, keepdims = _dims("prod", axis, keepdims, dim, keepdim)
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
        axis, keepdims = _dims("mean", axis, keepdims, dim, keepdim)
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
        axis, keepdims = _dims("amax", axis, keepdims, dim, keepdim)
        if self.ndim:  # an error names amax, not the op (a 0-d tensor: Max checks axis 0 or -1)
            axis = normalize_axes("amax", axis, self.ndim)
        return Max.apply(self, axis=axis, keepdims=keepdims)

    def amin(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: Any = None
    ) -> Tensor:
        """The smallest value over axes (a tuple allowed); tied minima share the gradient."""
        axis, keepdims = _dims("amin", axis, keepdims, dim, keepdim)
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
        axis, keepdims = _dims(op, axis, keepdims, dim, keepdim)
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
        axis, keepdims = _dims(op, axis, keepdims, dim, keepdim)
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
        axis, keepdims = _dims(op, axis, keepdims, dim, keepdim)
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
        and every higher derivative come from those ops.
        """
        axis, keepdims = _dims("var", dim, keepdim, axis, keepdims)
        if isinstance(correction, bool):  # x.var(dim, False): PyTorch's positional `unbiased`
            correction = int(correction)
        if unbiased is not None:
            correction = int(unbiased)
        backend.check_floating("var", self.array)
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
        dim, keepdim = _dims("std", dim, keepdim, axis, keepdims)
        if isinstance(correction, bool):  # x.std(dim, True): PyTorch's positional `unbiased`
            correction = int(correction)
        if unbiased is not None:
            correction = int(unbiased)
        variance = self.var(axis=dim, keepdims=keepdim, correction=correction)
        spread = variance != 0  # NaN too: a NaN variance gives a NaN deviation
        return where(spread, variance, 1.0).sqrt() * spread

    def logsumexp(
        self, dim: Any, keepdim: bool = False, *, axis: Any = None, keepdims: Any = None
    ) -> Tensor:
        """log(sum(exp(x))) along dim, shifted by the (detached) maximum so exp cannot overflow."""
        dim, keepdim = _dims("logsumexp", dim, keepdim, axis, keepdims)
        backend.check_floating("logsumexp", self.array)
        axes = normalize_axes("logsumexp", dim, self.ndim)
        shift = self.detach().amax(axis=axes, keepdims=True)
        # An all -inf row: shift by 0 so the result is -inf, not NaN (inf - inf).
        shift = where(shift.abs() == float("inf"), 0.0, shift)
        total = (self - shift).exp().sum(axis=axes, keepdims=True).log() + shift
        return total if keepdim else total.squeeze(axes)

    def cumsum(self, dim: int, *, axis: Any = None, dtype: Any = None) -> Tensor:
        """Running sum along dim, in the dtype `sum` would use."""
        dim, _ = _dims("cumsum", dim, False, axis, None)
        source = _accumulated(self, dtype, "cumsum")
        return Cumsum.apply(source, axis=normalize_axes("cumsum", dim, self.ndim)[0])

    def cumprod(self, dim: int, *, axis: Any = None, dtype: Any = None) -> Tensor:
        """Running product along dim, in the dtype `sum` would use, composed of Tensor products
        (`ops.scan.running_product`): exact gradients where elements are zero."""
        dim, _ = _dims("cumprod", dim, False, axis, None)
        source = _accumulated(self, dtype, "cumprod")
        axis = normalize_axes("cumprod", dim, max(self.ndim, 1))[0]
        if not self.ndim:  # a 0-d tensor takes dim 0 or -1, as in PyTorch: itself
            return running_product(source.reshape(1), 0).reshape(())
        return running_product(source, axis)

    # ------------------------------------------------------------------------------------ shape
    def size(self, dim: int | None = None) -> Any:
        """The shape (PyTorch's ``x.size()``), or the length of one dimension: ``x.size(0)``."""
        if dim is None:
            return self.shape
        return self.shape[normalize_axes("size", dim, self.ndim)[0]]

    def numel(self) -> int:
        """The number of elements."""
        return math.prod(self.array.shape)

    def dim(self) -> int:
        """The number of dimensions (``ndim``)."""
        return self.array.ndim

    def reshape(self, *shape: Any) -> Tensor:
        """The same values in a new shape; one size may be -1 (inferred)."""
        shape = _shape_arg(shape)
        if shape == self.shape:
            return self
        return Reshape.apply(self, shape=check_reshape(self.shape, shape))

    view = reshape

    def contiguous(self) -> Tensor:
        """This tensor itself: every tinyattn array is laid out so that reshape works."""
        return self

    def clone(self) -> Tensor:
        """A copy in new memory that stays in the graph (the gradient passes through)."""
        return Clone.apply(self)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge dims start_dim..end_dim into one."""
        if self.ndim == 0:
            return self.reshape(1)
        start, end = (normalize_axes("flatten", d, self.ndim)[0] for d in (start_dim, end_dim))
        if start > end:
            raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        return self.reshape(self.shape[:start] + (-1,) + self.shape[end + 1 :])

    def permute(self, *axes: Any, dims: Any = None) -> Tensor:
        """Reorder the axes: ``y.shape[i] == x.shape[axes[i]]``."""
        axes = _shape_arg(axes if dims is None else (dims,))
        if sorted(a % self.ndim if self.ndim else a for a in axes) != list(range(self.ndim)):
            raise ValueError(
                f"permute: axes {axes} are not a permutation of a tensor with shape {self.shape}"
            )
        return Permute.apply(self, axes=tuple(a % self.ndim for a in axes))

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        """Swap two dimensions (PyTorch's meaning; a full reordering is ``permute``)."""
        return self.swapaxes(dim0, dim1)

    @property
    def T(self) -> Tensor:  # noqa: N802  (PyTorch's and NumPy's name)
        """All dimensions reversed (the matrix transpose of a 2-d tensor)."""
        return self.permute(*reversed(range(self.ndim)))

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

    def unsqueeze(self, dim: int) -> Tensor:
        return self.expand_dims(dim)

    def squeeze(self, axis: Any = None, *, dim: Any = None) -> Tensor:
        """Remove size-1 axes (all of them, or the given ones, which must have size 1)."""
        axis, _ = _dims("squeeze", axis, False, dim, None)
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

    def expand(self, *sizes: Any) -> Tensor:
        """broadcast_to, where -1 keeps a dimension's size (PyTorch's expand)."""
        sizes = _shape_arg(sizes)
        lead = len(sizes) - self.ndim
        return self.broadcast_to(
            tuple(self.shape[i - lead] if n == -1 and i >= lead else n for i, n in enumerate(sizes))
        )

    def repeat(self, *sizes: Any) -> Tensor:
        """Tile the tensor `sizes[i]` times along dim i (PyTorch's repeat, NumPy's tile).

        Composed from reshape and broadcast_to: (a, b) -> (1, a, 1, b) -> (r, a, s, b) ->
        (r a, s b), so the gradient (a sum over the copies) comes from those ops.
        """
        sizes = _checked_shape("repeat", _shape_arg(sizes))
        if len(sizes) < self.ndim:
            raise ValueError(
                f"repeat: {len(sizes)} repeat count(s) for a tensor with {self.ndim} dimensions"
            )
        shape = (1,) * (len(sizes) - self.ndim) + self.shape
        spread = tuple(n for size in shape for n in (1, size))
        tiled = tuple(n for count, size in zip(sizes, shape) for n in (count, size))
        out = self.reshape(spread).broadcast_to(tiled)
        return out.reshape(tuple(count * size for count, size in zip(sizes, shape)))

    def flip(self, *dims: Any, **keywords: Any) -> Tensor:
        """The values in reverse order along `dims` (``flip(0, 1)``, ``flip((0, 1))``,
        ``flip(dims=[0])``)."""
        axes = normalize_axes("flip", _shape_arg(dims or (keywords.pop("dims", ()),)), self.ndim)
        if keywords:
            raise TypeError(f"flip: unexpected keyword argument(s) {sorted(keywords)}")
        return Flip.apply(self, axes=axes) if axes else self

    def split(self, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
        """Pieces of `split_size` along dim (the last may be shorter), or of the listed sizes."""
        axis = normalize_axes("split", dim, self.ndim)[0]
        length = self.shape[axis]
        if isinstance(split_size_or_sections, int):
            step = split_size_or_sections
            if step <= 0:
                raise ValueError(f"split: split_size must be positive, got {step}")
            sizes = [min(step, length - start) for start in range(0, length, step)] or [0]
        else:
            sizes = list(split_size_or_sections)
            if sum(sizes) != length:
                raise ValueError(
                    f"split: sizes {sizes} sum to {sum(sizes)}, not to the length {length} of "
                    f"dim {dim} of shape {self.shape}"
                )
        pieces, start = [], 0
        for size in sizes:
            pieces.append(self[(slice(None),) * axis + (slice(start, start + size),)])
            start += size
        return tuple(pieces)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """At most `chunks` pieces of equal size ceil(n / chunks) along dim."""
        if chunks <= 0:
            raise ValueError(f"chunk: chunks must be positive, got {chunks}")
        length = self.shape[normalize_axes("chunk", dim, self.ndim)[0]]
        return self.split(max(1, -(-length // chunks)), dim)

    def tril(self, diagonal: int = 0) -> Tensor:
        """Zeros above the `diagonal`-th diagonal of the last two dims."""
        return where(_band(self, diagonal, lower=True), self, 0)

    def triu(self, diagonal: int = 0) -> Tensor:
        """Zeros below the `diagonal`-th diagonal of the last two dims."""
        return where(_band(self, diagonal, lower=False), self, 0)

    def sum_to(self, shape: tuple) -> Tensor:
        """Sum over broadcast axes so the result has `shape` (the adjoint of broadcast_to)."""
        shape = tuple(shape)
        if shape == self.shape:
            return self
        return SumTo.apply(self, shape=shape)

    # -------------------------------------------------------------------------------- indexing
    def __getitem__(self, key: Any) -> Tensor:
        mask = _bool_mask(key)
        if mask is not None:
            return self._masked_select(mask)
        key = _index_key(self, key)
        if sum(1 for part in key if _is_index_array(part)) > 1:
            return self._index_arrays(key)
        return GetItem.apply(self, key=key)

    def _index_arrays(self, key: tuple) -> Tensor:
        """``x[i, j]``, ``x[:, i, j]``: adjacent index arrays, broadcast together, become one
        index into their dims merged into one (row-major), so GetItem gathers once."""
        at = [position for position, part in enumerate(key) if _is_index_array(part)]
        first, last = at[0], at[-1]
        if last - first + 1 != len(at) or any(not isinstance(p, slice) for p in key[:first]):
            raise IndexError(
                "getitem: several index arrays are supported when they are adjacent and only "
                "slices come before them (x[i, j], x[:, i, j]); index in two steps otherwise"
            )
        if last >= self.ndim:
            raise IndexError(f"getitem: too many indices for a tensor of shape {self.shape}")
        xp = backend.namespace(self.array)
        shape = ()
        for part in key[first : last + 1]:
            shape = broadcast_shapes("getitem", shape, part.shape)
        for axis in range(first, last + 1):
            _wrapped_index(xp, key[axis], self.shape[axis], axis)  # dtype and range checks
        parts = [Tensor._from_op(part, None) for part in key[first : last + 1]]
        flat = computed(_merged_index, *parts, sizes=self.shape[first : last + 1], shape=shape)
        merged = self.reshape(self.shape[:first] + (-1,) + self.shape[last + 1 :])
        return merged[key[:first] + (flat,) + key[last + 1 :]]

    def _masked_select(self, mask: Tensor) -> Tensor:
        """``x[mask]``: the elements where the bool mask (over the leading dims) is True."""
        mask = self._operand(mask, "getitem")
        if mask.shape != self.shape[: mask.ndim]:
            raise IndexError(
                f"getitem: a bool mask of shape {mask.shape} does not match the leading "
                f"dimensions of shape {self.shape}"
            )
        check_host_read("x[mask] with a bool mask (its length depends on the values)")
        (flat,) = backend.nonzero(backend.namespace(mask.array).reshape(mask.array, (-1,)))
        rows = self.reshape((-1,) + self.shape[mask.ndim :])
        return rows[Tensor._from_op(flat, None)]

    def gather(self, dim: int, index: Tensor) -> Tensor:
        """``out[i][j][k] = x[index[i][j][k]][j][k]`` for dim 0 (and so on): values picked
        along `dim`; index has this tensor's ndim and no larger sizes. The gradient adds back.
        """
        index = self._operand(index, "gather")
        axis = normalize_axes("gather", dim, self.ndim)[0]
        _check_index("gather", self, axis, index)
        positions = computed(_flat_positions, index, shape=self.shape, axis=axis)
        return self.reshape(-1)[positions].reshape(index.shape)

    def scatter(self, dim: int, index: Tensor, src: Any) -> Tensor:
        """Out of place: a copy with ``out[index[i][j]][j] = src[i][j]`` (dim 0; and so on).

        The gradient of this tensor is zero at the written places; `src` gets the gradient
        gathered from them. Repeated target places are refused (PyTorch leaves them undefined).
        """
        positions, key, values = self._scatter_places("scatter", dim, index, src)
        _check_unique("scatter", positions)
        placed = IndexAdd.apply(values, shape=(self.numel(),), key=key)
        hits = IndexAdd.apply(self.constant(_ones(positions)), shape=(self.numel(),), key=key)
        written = (hits > 0).reshape(self.shape)
        return where(written, placed.reshape(self.shape), self)

    def scatter_add(self, dim: int, index: Tensor, src: Tensor) -> Tensor:
        """Out of place: a copy with ``src[i][j]`` added at ``out[index[i][j]][j]`` (dim 0; and
        so on); repeated places add up.  dL/dx = g, dL/dsrc = g gathered at the places.

        Shapes: x (...); index and src of x's ndim, index no larger than src -> x's shape."""
        _, key, values = self._scatter_places("scatter_add", dim, index, src)
        return self + IndexAdd.apply(values, shape=(self.numel(),), key=key).reshape(self.shape)

    def _scatter_places(self, op: str, dim: int, index: Any, src: Any) -> tuple[Any, Any, Tensor]:
        """What scatter and scatter_add share: the flat places `index` names along `dim`
        (checked), their key, and src's values for them in this tensor's dtype, flat (a tensor
        cut to index's shape, or a number repeated)."""
        index = self._operand(index, op)
        axis = normalize_axes(op, dim, self.ndim)[0]
        _check_index(op, self, axis, index)
        positions = computed(_flat_positions, index, shape=self.shape, axis=axis).array
        if isinstance(src, Tensor):
            src = self._operand(src, op)
            if src.ndim != index.ndim or any(n > m for n, m in zip(index.shape, src.shape)):
                raise ValueError(
                    f"{op}: src of shape {src.shape} is smaller than index of shape "
                    f"{index.shape} (it needs index's ndim and at least its sizes)"
                )
            src = src[tuple(slice(0, n) for n in index.shape)]
        else:
            src = self._operand(src, op).broadcast_to(index.shape)
        return positions, parse_key(positions, (self.numel(),)), src.to(self.dtype).reshape(-1)

    def index_add(self, dim: int, index: Tensor, source: Tensor, alpha: float = 1) -> Tensor:
        """Out of place: a copy with ``alpha * source``'s slices along `dim` added at the
        positions `index` names (repeats add up).  dL/dx = g, dL/dsource = alpha * g[index].

        Shapes: x (..., n, ...), index (k,) integers, source (..., k, ...) -> x's shape."""
        index, source = self._operand(index, "index_add"), self._operand(source, "index_add")
        axis = normalize_axes("index_add", dim, self.ndim)[0]
        name = backend.dtype_name(index.dtype)
        if not name.startswith(("int", "uint")) or index.ndim != 1:
            raise TypeError(
                f"index_add: index must be a 1-D integer tensor, got shape {index.shape} and "
                f"dtype {name}"
            )
        expected = self.shape[:axis] + (index.shape[0],) + self.shape[axis + 1 :]
        if source.shape != expected:
            raise ValueError(
                f"index_add: source of shape {source.shape} does not fit: {index.shape[0]} "
                f"entries along dim {axis} of a tensor of shape {self.shape} need {expected}"
            )
        key = parse_key((slice(None),) * axis + (index.array,), self.shape)
        source = source.to(self.dtype) if alpha == 1 else source.to(self.dtype) * alpha
        return self + IndexAdd.apply(source, shape=self.shape, key=key)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """The diagonal `offset` of the matrices that dims `dim1` and `dim2` span (above the
        main one for offset > 0), as a new last dim, as PyTorch orders it.
        dL/dx = g on that diagonal, 0 elsewhere.

        Shapes: (..., r, ..., c, ...) -> (the other dims..., the diagonal's length)."""
        if type(offset) is not int:
            raise TypeError(f"diagonal: offset must be an int, got {offset!r}")
        if self.ndim < 2:
            raise ValueError(f"diagonal: needs at least 2 dimensions, got shape {self.shape}")
        first, second = (normalize_axes("diagonal", d, self.ndim)[0] for d in (dim1, dim2))
        if first == second:
            raise ValueError(f"diagonal: dim1 and dim2 must differ, got {dim1} and {dim2}")
        rest = [d for d in range(self.ndim) if d not in (first, second)]
        moved = self.permute(*rest, first, second)
        rows, columns = moved.shape[-2:]
        start_row, start_column = max(-offset, 0), max(offset, 0)
        length = max(min(rows - start_row, columns - start_column), 0)
        steps = arange(length, device=self.device)
        return moved[(slice(None),) * (self.ndim - 2) + (steps + start_row, steps + start_column)]

    def topk(
        self,
        k: int,
        dim: int = -1,
        largest: bool = True,
        sorted: bool = True,  # noqa: A002
    ) -> ValuesIndices:
        """The k largest (or smallest) values along dim, in order, and their indices."""
        axis = normalize_axes("topk", dim, self.ndim)[0] if self.ndim else 0
        length = self.shape[axis] if self.ndim else 1
        if not 0 <= k <= length:
            raise ValueError(f"topk: k={k} is out of range for dim {dim} of shape {self.shape}")
        indices = computed(_top_order, self, axis=axis, k=k, largest=largest)
        return ValuesIndices(self.gather(axis, indices) if self.ndim else self, indices)

    def nonzero(self, as_tuple: bool = False) -> Any:
        """The indices of the non-zero elements: an (n, ndim) int64 tensor, or one per dim."""
        check_host_read("nonzero() (its shape depends on the values)")
        found = tuple(Tensor._from_op(i, None) for i in backend.nonzero(self.array))
        return found if as_tuple else stack(found, axis=1)

    def unique(
        self,
        sorted: bool = True,  # noqa: A002  (PyTorch's name)
        return_inverse: bool = False,
        return_counts: bool = False,
        dim: int | None = None,
    ) -> Any:
        """The distinct values, sorted (with `dim`, the distinct slices along it), and with
        `return_inverse` / `return_counts` the tuple (values, inverse, counts) PyTorch returns:
        inverse gives each element's (slice's) position in the values. No gradient flows
        through it. Shapes: (...) -> (k,), inverse (...), counts (k,)."""
        check_host_read("unique() (its length depends on the values)")
        axis = None if dim is None else normalize_axes("unique", dim, self.ndim)[0]
        values, inverse, counts = (
            Tensor._from_op(a, None) for a in backend.unique(self.array, axis)
        )
        extra = [t for t, wanted in ((inverse, return_inverse), (counts, return_counts)) if wanted]
        return (values, *extra) if extra else values

    def bincount(self, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
        """How often each of 0, 1, ..., max (or minlength - 1, if larger) occurs in this 1-D
        tensor of non-negative integers, int64; with `weights`, their sums per value instead:
        y[b] = sum of weights[i] where x[i] = b, so dL/dweights[i] = g[x[i]] (PyTorch has no
        gradient here). Shapes: (n,) -> (max(x) + 1 or minlength,)."""
        if self.ndim != 1:
            raise ValueError(f"bincount: expected a 1-D tensor, got shape {self.shape}")
        _check_integral("bincount", self)
        if type(minlength) is not int or minlength < 0:
            raise ValueError(f"bincount: minlength must be an int >= 0, got {minlength!r}")
        check_host_read("bincount() (its length depends on the values)")
        if self.numel() and int(self.min().item()) < 0:
            raise ValueError(
                f"bincount: values must be >= 0, got a minimum of {int(self.min().item())}"
            )
        length = max(int(self.max().item()) + 1 if self.numel() else 0, minlength)
        if weights is None:
            return Tensor._from_op(backend.bincount(self.array, length), None)
        weights = self._operand(weights, "bincount")
        if weights.shape != self.shape:
            raise ValueError(
                f"bincount: weights of shape {weights.shape} for input of shape {self.shape}"
            )
        if not _is_float(weights.array):
            weights = weights._cast("float64")  # PyTorch gives double for integer weights
        key = parse_key(self.array, (length,))
        return IndexAdd.apply(weights, shape=(length,), key=key)

    def multinomial(self, num_samples: int, replacement: bool = False) -> Tensor:
        """Category indices drawn with these (unnormalised) weights, per row, from the host
        generator seeded by ``ta.manual_seed``; without replacement they are distinct."""
        if self.ndim not in (1, 2):
            raise ValueError(f"multinomial: expected 1-d or 2-d weights, got shape {self.shape}")
        host = backend.to_numpy(self.array).reshape(-1, self.shape[-1])
        if not (host >= 0).all() or not (host.sum(axis=1) > 0).all():
            raise ValueError("multinomial: weights must be non-negative with a positive sum")
        if not replacement and num_samples > int((host > 0).sum(axis=1).min()):
            raise ValueError(
                f"multinomial: cannot draw {num_samples} distinct categories without "
                f"replacement from a row with fewer non-zero weights (shape {self.shape})"
            )
        drawn = backend.multinomial(host, num_samples, replacement)
        drawn = backend.asarray(drawn, device=self.device)
        out = Tensor._from_op(drawn, None)
        return out.reshape(num_samples) if self.ndim == 1 else out

    # ----------------------------------------------------------------------- dtypes and values
    def type(self, dtype: Any = None) -> Any:
        """With a dtype: a copy converted to it (``x.type(ta.long)``); without: the type name."""
        if dtype is None:
            return f"tinyattn.{_TYPE_NAMES.get(backend.dtype_name(self.dtype), 'Tensor')}"
        return self._cast(dtype)

    def type_as(self, other: Tensor) -> Tensor:
        """This tensor with `other`'s dtype and device (PyTorch's type names a device too)."""
        moved = self if self.device == other.device else self.to(other.device)
        return moved._cast(backend.dtype_name(other.dtype))

    def long(self) -> Tensor:
        return self._cast("int64")

    def int(self) -> Tensor:
        return self._cast("int32")

    def bool(self) -> Tensor:
        return self._cast("bool")

    def tolist(self) -> Any:
        """The values as (nested) Python lists of numbers (a host copy)."""
        check_host_read("tolist()")
        return backend.to_numpy(self.array).tolist()

    # -------------------------------------------------- PyTorch's spellings of composed calls
    # Each is a call above (or two), so its gradient of any order is theirs.
    def cpu(self) -> Tensor:
        """``to('cpu')``: this tensor itself when it is there already."""
        return self.to("cpu")

    def cuda(self, device: Any = None) -> Tensor:
        """``to('cuda')``; an int `device` is ``'cuda:N'``."""
        return self.to(f"cuda:{device}" if isinstance(device, int) else device or "cuda")

    def t(self) -> Tensor:
        """A matrix transposed; a tensor of 0 or 1 dims as it is (PyTorch's t())."""
        if self.ndim > 2:
            raise ValueError(
                f"t: expects a tensor of at most 2 dims, got shape {self.shape}; use "
                "transpose(dim0, dim1) or mT"
            )
        return self.transpose(0, 1) if self.ndim == 2 else self

    def _products(self, op: str, other: Any, dims: tuple[int, int], inner: bool = True) -> Tensor:
        other = self._operand(other, op)
        if (self.ndim, other.ndim) != dims:
            raise ValueError(
                f"{op}: expects tensors of {dims[0]} and {dims[1]} dims, got shapes "
                f"{self.shape} and {other.shape}"
            )
        # No broadcasting of batches (bmm), and inner sizes that meet: as PyTorch checks them.
        meets = other.shape[0] if other.ndim == 1 else other.shape[-2]
        if inner and (self.shape[-1] != meets or self.shape[:-2] != other.shape[:-2]):
            raise ValueError(f"{op}: shapes {self.shape} and {other.shape} do not fit together")
        return other

    def mm(self, other: Any) -> Tensor:
        """(n, k) @ (k, m)."""
        return self @ self._products("mm", other, (2, 2))

    def bmm(self, other: Any) -> Tensor:
        """(b, n, k) @ (b, k, m)."""
        return self @ self._products("bmm", other, (3, 3))

    def mv(self, vec: Any) -> Tensor:
        """(n, k) @ (k,) -> (n,)."""
        return self @ self._products("mv", vec, (2, 1))

    def dot(self, other: Any) -> Tensor:
        """sum(a * b) of two vectors, a 0-d tensor."""
        return self @ self._products("dot", other, (1, 1))

    def outer(self, other: Any) -> Tensor:
        """out[i, j] = a[i] * b[j]."""
        other = self._products("outer", other, (1, 1), inner=False)
        return self.reshape(-1, 1) * other.reshape(1, -1)

    def view_as(self, other: Tensor) -> Tensor:
        return self.reshape(*other.shape)

    reshape_as = view_as

    def expand_as(self, other: Tensor) -> Tensor:
        return self.expand(*other.shape)

    def new_full(
        self,
        size: Any,
        fill_value: float,
        *,
        dtype: Any = None,
        device: Any = None,
        requires_grad: bool = False,
    ) -> Tensor:
        """A new tensor of `size` filled with `fill_value`, this tensor's dtype and device unless
        given (the ``new_*`` family, as in PyTorch)."""
        return full(size, fill_value, dtype or self.dtype, device or self.device, requires_grad)

    def new_zeros(
        self, *size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
    ) -> Tensor:
        return self.new_full(
            _shape_arg(size), 0, dtype=dtype, device=device, requires_grad=requires_grad
        )

    def new_ones(
        self, *size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
    ) -> Tensor:
        return self.new_full(
            _shape_arg(size), 1, dtype=dtype, device=device, requires_grad=requires_grad
        )

    new_empty = new_zeros  # tinyattn's empty is zeros (PyTorch leaves the values unset)

    def new_tensor(
        self, data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
    ) -> Tensor:
        """A copy of `data` with this tensor's dtype and device unless given."""
        return tensor(
            data,
            dtype=dtype or self.dtype,
            device=device or self.device,
            requires_grad=requires_grad,
        )

    def sign(self) -> Tensor:
        """-1, 0 or 1 by the sign of each element; its gradient is zero, as in PyTorch (a
        float result requires grad when the input does). Shapes: any."""
        if _is_float(self.array):
            return Sign.apply(self)
        return computed(array_call, self, name="sign")

    def isnan(self) -> Tensor:
        return computed(array_call, self, name="isnan")

    def isinf(self) -> Tensor:
        return computed(array_call, self, name="isinf")

    def isfinite(self) -> Tensor:
        return computed(array_call, self, name="isfinite")

    def square(self) -> Tensor:
        return self * self

    def reciprocal(self) -> Tensor:
        """1 / x (a float result for an integer tensor)."""
        return 1.0 / self

    def rsqrt(self) -> Tensor:
        """1 / sqrt(x)."""
        return 1.0 / self.sqrt()

    def clamp_min(self, min: float) -> Tensor:  # noqa: A002  (PyTorch's name)
        return self.clip(min=min)

    def clamp_max(self, max: float) -> Tensor:  # noqa: A002  (PyTorch's name)
        return self.clip(max=max)

    def frac(self) -> Tensor:
        """x - trunc(x), the fractional part with the sign of x;  dL/dx = g.  Shapes: any."""
        backend.check_floating("frac", self.array)
        return self - self.trunc()

    def lerp(self, end: Any, weight: Any) -> Tensor:
        """start + weight * (end - start), start being this tensor; `weight` a number or a
        tensor. For weights of 0.5 and more it is end - (end - start) * (1 - weight), the form
        PyTorch's kernel uses, so that weight 1 gives exactly `end`.
        dL/dstart = g (1 - w), dL/dend = g w, dL/dw = g (end - start).
        Shapes: start, end and weight broadcast together."""
        backend.check_floating("lerp", self.array)
        end = self._operand(end, "lerp")
        shape = broadcast_shapes("lerp", self.shape, end.shape)
        if type(weight) in _SCALARS:
            if weight < 0.5:
                return self + weight * (end - self)
            return end - (end - self) * (1.0 - weight)
        weight = self._operand(weight, "lerp")
        broadcast_shapes("lerp", shape, weight.shape)
        difference = end - self
        return where(weight < 0.5, self + weight * difference, end - difference * (1.0 - weight))

    def addmm(self, mat1: Tensor, mat2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
        """beta * input + alpha * (mat1 @ mat2), input (this tensor) broadcast to the product's
        shape; with beta = 0 the input is not read (a NaN in it does not reach the result).

        Shapes: mat1 (n, m), mat2 (m, p), input broadcastable to (n, p) -> (n, p)."""
        first = self._operand(mat1, "addmm")
        product = first @ first._products("addmm", mat2, (2, 2))
        if self.ndim > 2 or broadcast_shapes("addmm", self.shape, product.shape) != product.shape:
            raise ValueError(
                f"addmm: input of shape {self.shape} does not broadcast to the product's shape "
                f"{product.shape}"
            )
        if alpha != 1:
            product = product * alpha
        if beta == 0:
            return product
        return (self if beta == 1 else self * beta) + product

    def addcmul(self, tensor1: Any, tensor2: Any, value: float = 1) -> Tensor:
        """x + value * t1 * t2 (Adam's second-moment update);  dL/dx = g,
        dL/dt1 = value * g * t2, dL/dt2 = value * g * t1.  Shapes: all three broadcast."""
        backend.check_floating("addcmul", self.array)
        t1, t2 = self._operand(tensor1, "addcmul"), self._operand(tensor2, "addcmul")
        broadcast_shapes("addcmul", self.shape, broadcast_shapes("addcmul", t1.shape, t2.shape))
        return self + (t1 * t2 if value == 1 else t1 * value * t2)

    def addcdiv(self, tensor1: Any, tensor2: Any, value: float = 1) -> Tensor:
        """x + value * t1 / t2 (Adam's parameter update);  dL/dx = g,
        dL/dt1 = value * g / t2, dL/dt2 = -value * g * t1 / t2^2.  Shapes: all three broadcast."""
        backend.check_floating("addcdiv", self.array)
        t1, t2 = self._operand(tensor1, "addcdiv"), self._operand(tensor2, "addcdiv")
        broadcast_shapes("addcdiv", self.shape, broadcast_shapes("addcdiv", t1.shape, t2.shape))
        return self + (t1 / t2 if value == 1 else t1 * value / t2)

    def diag(self, diagonal: int = 0) -> Tensor:
        """A 1-D tensor v -> the square matrix with v on diagonal `diagonal` (0 the main one,
        above it positive), zeros elsewhere; a 2-D tensor -> that diagonal of it, as 1-D.

        Shapes: (n,) -> (n + |k|, n + |k|);  (r, c) -> (the diagonal's length,)."""
        if type(diagonal) is not int:
            raise TypeError(f"diag: diagonal must be an int, got {diagonal!r}")
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise ValueError(f"diag: expected a 1-D or 2-D tensor, got shape {self.shape}")
        n = self.shape[0]
        size = n + abs(diagonal)
        # Row i of the result's n nonzero rows holds v[i] at column i + max(k, 0): a one-hot
        # matrix times v, padded with |k| zero rows (below for k >= 0, above for k < 0).
        columns = arange(size, device=self.device)
        one_hot = columns == (arange(n, device=self.device) + max(diagonal, 0)).unsqueeze(1)
        rows = self.unsqueeze(1) * one_hot
        if diagonal == 0:
            return rows
        padding = zeros((abs(diagonal), size), dtype=self.dtype, device=self.device)
        return cat([rows, padding] if diagonal > 0 else [padding, rows], dim=0)

    def trace(self) -> Tensor:
        """The sum of the main diagonal of a matrix;  dL/dx = g * I.  Shapes: (r, c) -> ()."""
        if self.ndim != 2:
            raise ValueError(f"trace: expected a 2-D tensor, got shape {self.shape}")
        return self.diag().sum()

    def count_nonzero(self, dim: int | tuple | None = None) -> Tensor:
        """The number of nonzero entries (over `dim`, or all), as int64.
        Shapes: (...) -> () or the shape without `dim`."""
        return (self != 0).sum(dim=dim)

    def logaddexp(self, other: Any) -> Tensor:
        """log(e^x + e^y) without overflow: the larger plus log1p(exp(smaller - larger)), the
        exponent clipped at 0 in each branch so that the branch not taken cannot overflow.
        dL/dx = g * sigmoid(x - y), dL/dy = g * sigmoid(y - x) (1/2 each at ties).
        Shapes: x and y broadcast together."""
        backend.check_floating("logaddexp", self.array)
        other = self._operand(other, "logaddexp")
        broadcast_shapes("logaddexp", self.shape, other.shape)
        # Two equal infinities: inf - inf would be NaN (with a warning), but the result is that
        # infinity, so their difference is taken as 0.
        same_infinity = (self == other) & self.isinf()
        difference = where(same_infinity, 0.0, other) - where(same_infinity, 0.0, self)
        if_self = self + difference.clip(max=0.0).exp().log1p()
        if_other = other + (-difference).clip(max=0.0).exp().log1p()
        return where(difference <= 0, if_self, if_other)

    def logaddexp2(self, other: Any) -> Tensor:
        """log2(2^x + 2^y): logaddexp in base 2;  dL/dx = g * 2^x / (2^x + 2^y).
        Shapes: x and y broadcast together."""
        backend.check_floating("logaddexp2", self.array)
        other = self._operand(other, "logaddexp2")
        broadcast_shapes("logaddexp2", self.shape, other.shape)
        return (self * _LN2).logaddexp(other * _LN2) * (1.0 / _LN2)

    def tile(self, *dims: Any) -> Tensor:
        """The tensor repeated dims[i] times along dim i; fewer dims than dimensions count from
        the last (ones are put in front), as PyTorch's tile and NumPy's; the gradient sums the
        copies. Shapes: (..., n_i, ...) -> (..., dims_i * n_i, ...)."""
        dims = _shape_arg(dims)
        return self.repeat(*((1,) * (self.ndim - len(dims)) + tuple(dims)))

    def repeat_interleave(self, repeats: Any, dim: int | None = None) -> Tensor:
        """Each entry along `dim` repeated `repeats` times in place (``[a, b] -> [a, a, b, b]``);
        `repeats` an int or a 1-D integer tensor of one count per entry; with no dim the tensor
        is flattened first. The gradient sums the copies back.

        Shapes: (..., n, ...) -> (..., sum of the repeats, ...)."""
        source = self.reshape(-1) if dim is None else self
        axis = 0 if dim is None else dim
        size = source.shape[axis] if -source.ndim <= axis < source.ndim else 0
        key = source._along("repeat_interleave", axis)
        if type(repeats) is int:
            if repeats < 0:
                raise ValueError(f"repeat_interleave: repeats must be >= 0, got {repeats}")
            index = arange(size * repeats, device=self.device) // max(repeats, 1)
            return source[(*key, index)]
        repeats = self._operand(repeats, "repeat_interleave")
        _check_integral("repeat_interleave", repeats)
        if repeats.ndim > 1 or (repeats.ndim == 1 and repeats.shape[0] not in (1, size)):
            raise ValueError(
                f"repeat_interleave: repeats of shape {repeats.shape} for {size} entries along "
                f"dim {axis}; give one count, or one per entry"
            )
        counts = repeats.reshape(-1).tolist()
        counts = counts * size if len(counts) == 1 else counts  # one count for every entry
        if any(count < 0 for count in counts):
            raise ValueError(f"repeat_interleave: repeats must be >= 0, got {counts}")
        positions = [entry for entry, count in enumerate(counts) for _ in range(count)]
        return source[(*key, tensor(positions, dtype="int64", device=self.device))]

    def nan_to_num(
        self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None
    ) -> Tensor:
        """NaN, +inf and -inf replaced by `nan`, `posinf` and `neginf` (by default 0 and the
        dtype's largest and lowest finite values);  dL/dx = g where x was finite, 0 elsewhere.
        Shapes: any."""
        for name, value in (("nan", nan), ("posinf", posinf), ("neginf", neginf)):
            if value is not None and type(value) not in _SCALARS:
                raise TypeError(f"nan_to_num: {name} must be a number, got {value!r}")
        if not _is_float(self.array):
            return self.clone()
        largest = backend.largest_finite(self.dtype)
        posinf = largest if posinf is None else posinf
        neginf = -largest if neginf is None else neginf
        out = where(self.isnan(), nan, self)
        out = where(self == math.inf, posinf, out)
        return where(self == -math.inf, neginf, out)

    def diff(
        self, n: int = 1, dim: int = -1, prepend: Tensor | None = None, append: Tensor | None = None
    ) -> Tensor:
        """The n-th forward difference along `dim`: out[i] = x[i + 1] - x[i], n times, after
        `prepend` and `append` are joined on (as PyTorch's and NumPy's diff).

        Shapes: (..., m, ...) -> (..., m + extra - n, ...)."""
        if type(n) is not int or n < 0:
            raise ValueError(f"diff: n must be an int >= 0, got {n!r}")
        key = self._along("diff", dim)
        parts = [self._operand(t, "diff") for t in (prepend, self, append) if t is not None]
        out = cat(parts, dim=dim) if len(parts) > 1 else self
        for _ in range(n):
            if out.shape[dim] == 0:
                break
            out = out[(*key, slice(1, None))] - out[(*key, slice(None, -1))]
        return out

    def masked_select(self, mask: Tensor) -> Tensor:
        """The elements where the bool `mask` is True, as 1-D (mask and tensor broadcast
        together); the gradient goes back to those elements.
        Shapes: x, mask broadcast to S -> (the number of True elements of the mask over S,)."""
        mask = self._operand(mask, "masked_select")
        if backend.dtype_name(mask.dtype) != "bool":
            raise TypeError(
                f"masked_select: mask must be a bool tensor, got {backend.dtype_name(mask.dtype)}"
            )
        shape = broadcast_shapes("masked_select", self.shape, mask.shape)
        return self.broadcast_to(shape)[mask.broadcast_to(shape)]

    def _along(self, op: str, dim: int) -> tuple:
        """The indexing key's leading full slices up to `dim` (checked)."""
        if not -self.ndim <= dim < self.ndim:
            raise IndexError(f"{op}: dim {dim} is out of range for shape {self.shape}")
        return (slice(None),) * (dim % self.ndim)

    def select(self, dim: int, index: int) -> Tensor:
        """``x[..., index, ...]`` at `dim`: that dimension removed."""
        return self[(*self._along("select", dim), index)]

    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        """`length` entries of `dim` from `start` (a view)."""
        size = self.shape[dim] if -self.ndim <= dim < self.ndim else 0
        start = start + size if start < 0 else start
        if length < 0 or not 0 <= start <= start + length <= size:
            raise IndexError(
                f"narrow: start {start} and length {length} do not fit dim {dim} of shape "
                f"{self.shape}"
            )
        return self[(*self._along("narrow", dim), slice(start, start + length))]

    def unbind(self, dim: int = 0) -> tuple[Tensor, ...]:
        """The slices along `dim`, that dimension removed from each."""
        key = self._along("unbind", dim)
        return tuple(self[(*key, i)] for i in range(self.shape[dim]))

    def index_select(self, dim: int, index: Tensor) -> Tensor:
        """The entries of `dim` at the positions of the 1-D integer tensor `index`."""
        if not isinstance(index, Tensor) or index.ndim != 1:
            raise ValueError(f"index_select: index must be a 1-D integer Tensor, got {index!r}")
        _check_integral("index_select", index)
        return self[(*self._along("index_select", dim), index)]

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> ValuesIndices:
        """(values, indices) along `dim`, ascending unless `descending`: ``topk`` of the whole
        dimension, so equal values keep their index order (``stable=True``'s order, given
        whatever `stable` says)."""
        if not self.ndim:
            return self.topk(1, dim, largest=descending)
        axis = normalize_axes("sort", dim, self.ndim)[0]
        return self.topk(self.shape[axis], axis, largest=descending)

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
        return self.sort(dim, descending).indices

    def roll(self, shifts: Any, dims: Any = None) -> Tensor:
        """Entries moved `shifts` places along `dims` (wrapping around); without `dims`, along
        the flattened tensor, then reshaped back."""
        if dims is None:
            return self.reshape(-1).roll(shifts, 0).reshape(*self.shape)
        shifts, dims = (shifts, dims) if isinstance(dims, tuple | list) else ((shifts,), (dims,))
        if len(shifts) != len(dims):
            raise ValueError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
        out = self
        for shift, dim in zip(shifts, dims, strict=True):
            dim = normalize_axes("roll", dim, self.ndim)[0]
            size = out.shape[dim]
            keep = (size - shift % size) % size if size else 0
            if keep:
                out = concat([out.narrow(dim, keep, size - keep), out.narrow(dim, 0, keep)], dim)
        return out

    def isclose(
        self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
    ) -> Tensor:
        """``|x - other| <= atol + rtol * |other|`` elementwise (equal infinities are close; NaNs
        are close to each other only with `equal_nan`)."""
        other = self._operand(other, "isclose")
        broadcast_shapes("isclose", self.shape, other.shape)
        a, b = (self, other) if self.dtype == other.dtype else _promote(self, other, "isclose")
        options = {"rtol": float(rtol), "atol": float(atol), "equal_nan": bool(equal_nan)}
        return computed(_isclose, a.detach(), b.detach(), **options)

    def allclose(
        self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
    ) -> bool:
        """Whether every element is close (``isclose``): a Python bool."""
        return bool(self.isclose(other, rtol, atol, equal_nan).all())

    def movedim(self, source: int, destination: int) -> Tensor:
        """Dimension `source` moved to position `destination`, the others in order."""
        source, destination = (
            normalize_axes("movedim", d, self.ndim)[0] for d in (source, destination)
        )
        order = list(range(self.ndim))
        order.insert(destination, order.pop(source))
        return self.permute(*order)

    # ========================================================================================
    # In-place operations. Each writes into this tensor's existing array (so views and the
    # array behind ``.array`` see the change) and adds one to its version, which backward checks
    # before it uses a value saved in forward. They record no graph, so in grad mode they refuse
    # a tensor that requires grad (a leaf with PyTorch's message) and a value that requires
    # grad; under ``ta.no_grad()`` they work on anything (``w -= lr * w.grad`` keeps ``w``).
    # ========================================================================================
    def _inplace(
        self, op: str, compute: Callable[[], Any], *values: Any, cast: bool = False
    ) -> Tensor:
        """Check that `op` may run, compute the new values out of place, and store them."""
        _check_inplace(self, op, values)
        with no_grad():
            result = compute()
        if result.shape != self.shape:
            raise RuntimeError(
                f"{op}: the result has shape {result.shape}, which does not fit in place in a "
                f"tensor of shape {self.shape} (in-place operations cannot broadcast their target)"
            )
        if not cast:
            _check_inplace_dtype(op, self, result)
        self._store(op, result.array)
        return self

    def _store(self, op: str, array: Any) -> None:
        """Write `array` (this tensor's shape) into the existing storage and bump the version."""
        xp = backend.namespace(self.array)
        note_store(self.array, array, op)  # a compiled step's recording notes the write
        if array.dtype != self.array.dtype:
            array = xp.astype(array, self.array.dtype)
        if not hasattr(type(self.array), "__setitem__"):
            self.array = array  # a NumPy scalar (a 0-d result) is immutable: nothing aliases it
        else:
            try:
                self.array[...] = array
            except ValueError as exc:  # a broadcast view (expand, broadcast_to) is read-only
                raise RuntimeError(
                    f"{op}: cannot write into this tensor of shape {self.shape}: its storage is "
                    f"read-only ({exc}); a broadcast result (expand, broadcast_to) shares one "
                    "element among many places, so write into a copy instead"
                ) from exc
        self._version_counter[0] += 1

    def __iadd__(self, other: Any) -> Tensor:
        return self._inplace("add_", lambda: self + other, other)

    def __isub__(self, other: Any) -> Tensor:
        return self._inplace("sub_", lambda: self - other, other)

    def __imul__(self, other: Any) -> Tensor:
        return self._inplace("mul_", lambda: self * other, other)

    def __itruediv__(self, other: Any) -> Tensor:
        return self._inplace("div_", lambda: self / other, other)

    def add_(self, other: Any, alpha: float = 1) -> Tensor:
        """``self += alpha * other``, in place."""
        return self._inplace("add_", lambda: self + (other if alpha == 1 else other * alpha), other)

    def sub_(self, other: Any, alpha: float = 1) -> Tensor:
        """``self -= alpha * other``, in place."""
        return self._inplace("sub_", lambda: self - (other if alpha == 1 else other * alpha), other)

    def mul_(self, other: Any) -> Tensor:
        return self._inplace("mul_", lambda: self * other, other)

    def div_(self, other: Any) -> Tensor:
        return self._inplace("div_", lambda: self / other, other)

    def copy_(self, src: Any) -> Tensor:
        """Copy `src` into this tensor (broadcast to its shape, cast to its dtype and device)."""
        if isinstance(src, Tensor) and src.device != self.device:
            src = src.detach().to(self.device)
        return self._inplace(
            "copy_", lambda: self._operand(src, "copy_").broadcast_to(self.shape), src, cast=True
        )

    def fill_(self, value: Any) -> Tensor:
        """Set every element to `value` (a number or a one-element tensor)."""
        return self._inplace(
            "fill_",
            lambda: self._operand(value, "fill_").reshape(()).broadcast_to(self.shape),
            value,
            cast=True,
        )

    def zero_(self) -> Tensor:
        return self.fill_(0)

    def clamp_(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
        return self._inplace("clamp_", lambda: self.clip(min, max), min, max)

    clip_ = clamp_

    def pow_(self, exponent: Any) -> Tensor:
        return self._inplace("pow_", lambda: self**exponent, exponent)

    def addcmul_(self, tensor1: Any, tensor2: Any, value: float = 1) -> Tensor:
        return self._inplace(
            "addcmul_", lambda: self.addcmul(tensor1, tensor2, value=value), tensor1, tensor2
        )

    def addcdiv_(self, tensor1: Any, tensor2: Any, value: float = 1) -> Tensor:
        return self._inplace(
            "addcdiv_", lambda: self.addcdiv(tensor1, tensor2, value=value), tensor1, tensor2
        )

    def lerp_(self, end: Any, weight: Any) -> Tensor:
        return self._inplace("lerp_", lambda: self.lerp(end, weight), end, weight)

    def scatter_add_(self, dim: int, index: Tensor, src: Tensor) -> Tensor:
        return self._inplace("scatter_add_", lambda: self.scatter_add(dim, index, src), src)

    def index_add_(self, dim: int, index: Tensor, source: Tensor, alpha: float = 1) -> Tensor:
        return self._inplace(
            "index_add_", lambda: self.index_add(dim, index, source, alpha=alpha), source
        )

    def masked_fill_(self, mask: Tensor, value: Any) -> Tensor:
        """Set the elements where the bool `mask` (broadcast to this shape) is True to `value`."""
        return self._inplace("masked_fill_", lambda: where(mask, value, self), value, cast=True)

    def index_fill_(self, dim: int, index: Any, value: Any) -> Tensor:
        """Set the slices ``index`` along dimension `dim` to `value`."""
        axis = normalize_axes("index_fill_", dim, max(self.ndim, 1))[0]
        hit = _positions_hit("index_fill_", self, axis, index)
        return self._inplace("index_fill_", lambda: where(hit, value, self), value, cast=True)

    def scatter_(self, dim: int, index: Tensor, src: Any) -> Tensor:
        """``self[..., index[i, j], ...] = src[i, j]`` along `dim` (PyTorch's scatter_).

        `src` is a tensor at least as large as `index` or a number. Where an index repeats, the
        written value is unspecified in PyTorch; here it is the mean of the values sent there.
        """
        return self._inplace("scatter_", lambda: _scattered(self, dim, index, src), src, cast=True)

    def __setitem__(self, key: Any, value: Any) -> None:
        """``x[key] = value``: basic slices, steps, integer lists or arrays, a bool mask."""
        self._inplace("setitem", lambda: _assigned(self, key, value), value, cast=True)


# ------------------------------------------------------------------------------------- helpers
class ValuesIndices(NamedTuple):
    """What ``max(dim)``, ``min(dim)`` and ``topk`` return, as PyTorch's named tuples do."""

    values: Tensor
    indices: Tensor


_TYPE_NAMES = {
    "float32": "FloatTensor",
    "float64": "DoubleTensor",
    "float16": "HalfTensor",
    "int64": "LongTensor",
    "int32": "IntTensor",
    "int16": "ShortTensor",
    "int8": "CharTensor",
    "uint8": "ByteTensor",
    "bool": "BoolTensor",
}


def _dims(op: str, axis: Any, keepdims: Any, dim: Any, keepdim: Any) -> tuple[Any, bool]:
    """Merge NumPy's (axis, keepdims) with PyTorch's (dim, keepdim) spellings."""
    if dim is not None:
        if axis is not None:
            raise TypeError(f"{op}: got both axis={axis!r} and dim={dim!r}; give one")
        axis = dim
    if keepdim is not None:
        keepdims = keepdim
    return axis, bool(keepdims)


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
    if _is_float(tensor.array) or backend.dtype_name(tensor.dtype) == "int64":
        return tensor
    return tensor._cast("int64")


def _check_integral(op: str, tensor: Tensor) -> None:
    name = backend.dtype_name(tensor.dtype)
    if name != "bool" and not name.startswith(("int", "uint")):
        raise TypeError(f"{op}: expected a bool or integer tensor, got dtype {name}")


def _ones(array: Any) -> Any:
    xp = backend.namespace(array)
    return xp.ones(array.shape, dtype=xp.float32, device=array.device)


def _band(tensor: Tensor, diagonal: int, lower: bool) -> Tensor:
    """The bool mask of tril (lower) or triu over the last two dims of `tensor`."""
    if tensor.ndim < 2:
        raise ValueError(
            f"{'tril' if lower else 'triu'}: needs at least 2 dimensions, got shape {tensor.shape}"
        )
    rows, cols = tensor.shape[-2:]
    xp = backend.namespace(tensor.array)
    offset = (
        xp.arange(cols, device=tensor.array.device)[None, :]
        - xp.arange(rows, device=tensor.array.device)[:, None]
    )
    return Tensor._from_op(offset <= diagonal if lower else offset >= diagonal, None)


def _check_index(op: str, tensor: Tensor, axis: int, index: Tensor) -> None:
    """gather/scatter: an integer index of the same ndim, no larger, values in range."""
    name = backend.dtype_name(index.dtype)
    if not name.startswith(("int", "uint")):
        raise TypeError(f"{op}: index must be an integer tensor, got dtype {name}")
    if index.ndim != tensor.ndim or any(
        n > m for d, (n, m) in enumerate(zip(index.shape, tensor.shape)) if d != axis
    ):
        raise ValueError(
            f"{op}: index of shape {index.shape} does not fit a tensor of shape {tensor.shape} "
            f"along dim {axis} (same ndim, no larger size in the other dims)"
        )
    if index.numel():
        xp = backend.namespace(index.array)
        low, high = int(xp.min(index.array)), int(xp.max(index.array))
        if low < 0 or high >= tensor.shape[axis]:
            raise IndexError(
                f"{op}: index {low if low < 0 else high} is out of range for dim {axis} of "
                f"size {tensor.shape[axis]}"
            )


# ------------------------------------------------------------------ array code of `computed` ops
# Each runs as one `Computed` op (ops/computed.py), so a compiled step computes it again from
# the new values on every replay.


def _any_or_all(xp: Any, x: Any, name: str, axes: Any, keepdims: bool) -> Any:
    nonzero = x if backend.dtype_name(x.dtype) == "bool" else x != 0
    return getattr(xp, name)(nonzero, axis=axes, keepdims=keepdims)


def _arg_extreme_of(xp: Any, x: Any, name: str, axis: int, keepdims: bool, flat: bool) -> Any:
    found = getattr(xp, name)(xp.reshape(x, (-1,)) if flat else x, axis=axis, keepdims=keepdims)
    return xp.astype(xp.asarray(found), xp.int64)


def _merged_index(xp: Any, *parts: Any, sizes: tuple, shape: tuple) -> Any:
    """Adjacent index arrays as one row-major index into their dims merged into one."""
    flat = xp.zeros(shape, dtype=xp.int64, device=parts[0].device)
    for part, size in zip(parts, sizes, strict=True):
        index = xp.astype(part, xp.int64)
        flat = flat * size + xp.broadcast_to(xp.where(index < 0, index + size, index), shape)
    return flat


def _top_order(xp: Any, x: Any, axis: int, k: int, largest: bool) -> Any:
    """The positions of the k largest (or smallest) along `axis`, ties in index order."""
    keys = x if backend.is_float_array(x) else xp.astype(x, xp.float64)
    # A stable sort of -x puts the largest first and keeps ties in index order.
    order = xp.argsort(-keys if largest else keys, axis=axis, stable=True)
    return xp.astype(order[(slice(None),) * axis + (slice(0, k), Ellipsis)], xp.int64)


def _isclose(xp: Any, a: Any, b: Any, rtol: float, atol: float, equal_nan: bool) -> Any:
    close = a == b  # equal infinities, which the difference below cannot tell
    if backend.is_float_array(a):
        if equal_nan:
            close = close | (xp.isnan(a) & xp.isnan(b))
        finite = xp.isfinite(a) & xp.isfinite(b)
        a, b = xp.where(finite, a, 0.0), xp.where(finite, b, 0.0)  # no inf - inf warnings
        close = close | (finite & (xp.abs(a - b) <= atol + rtol * xp.abs(b)))
    else:
        close = close | (xp.abs(a - b) <= atol + rtol * xp.abs(b))
    return close


def _slices_hit(xp: Any, index: Any, size: int, shape: tuple) -> Any:
    """A bool array of `shape`, True on the positions (along its one long axis) index names."""
    flat = xp.reshape(xp.astype(index, xp.int64), (-1,))
    flat = xp.where(flat < 0, flat + size, flat)
    hit = xp.any(xp.arange(size, device=flat.device)[:, None] == flat[None, :], axis=1)
    return xp.reshape(hit, shape)


def _put(xp: Any, x: Any, values: Any, positions: Any) -> Any:
    """x with x.flat[positions] = values (the last one wins where a position repeats)."""
    targets = xp.reshape(positions, (-1,))
    values = xp.astype(xp.reshape(values, (-1,)), x.dtype)
    flat = xp.reshape(xp.asarray(x, copy=True), (-1,))
    try:
        flat[targets] = values
    except IndexError:  # array_api_strict has no integer-array assignment: match one-hot
        match = xp.arange(flat.shape[0], device=targets.device)[:, None] == targets[None, :]
        first = xp.argmax(xp.astype(match, xp.int8), axis=1)
        flat = xp.where(xp.any(match, axis=1), xp.take(values, first), flat)
    return xp.reshape(flat, x.shape)


def _scatter_mean(xp: Any, x: Any, index: Any, values: Any, axis: int, integral: bool) -> Any:
    """x after scatter_ along `axis`: each written place gets the mean of the values sent there
    (their sum for an integer or bool tensor, where a mean would not fit)."""
    size = x.shape[axis]
    idx = xp.astype(index, xp.int64)
    idx = xp.where(idx < 0, idx + size, idx)
    values = xp.astype(values, x.dtype)
    # One-hot along a new last axis: match[..., i, ..., j] says index[..., i, ...] == j.
    match = idx[..., None] == xp.arange(size, device=idx.device)
    zero = xp.zeros((), dtype=values.dtype, device=values.device)
    count = xp.sum(xp.astype(match, values.dtype), axis=axis)
    total = xp.sum(xp.where(match, values[..., None], zero), axis=axis)
    order = [*range(axis), total.ndim - 1, *range(axis, total.ndim - 1)]  # j back to `axis`
    count, total = xp.permute_dims(count, tuple(order)), xp.permute_dims(total, tuple(order))
    hit = count > 0
    one = xp.ones((), dtype=values.dtype, device=values.device)
    mean = total if integral else total / xp.where(hit, count, one)
    region = tuple(slice(0, n) for n in index.shape)
    written = region[:axis] + (slice(None),) + region[axis + 1 :]
    full_hit = xp.zeros(x.shape, dtype=xp.bool, device=hit.device)
    full_hit[written] = hit
    full_values = xp.zeros(x.shape, dtype=x.dtype, device=hit.device)
    full_values[written] = xp.astype(mean, x.dtype)
    return xp.where(full_hit, full_values, x)


def _flat_positions(xp: Any, index: Any, shape: tuple, axis: int) -> Any:
    """Row-major positions in a flattened `shape` of the elements gather/scatter address."""
    positions = xp.zeros(index.shape, dtype=xp.int64, device=index.device)
    stride = 1
    for d in reversed(range(len(shape))):
        if d == axis:
            coordinate = xp.astype(index, xp.int64)
        else:
            along = [1] * index.ndim
            along[d] = index.shape[d]
            coordinate = xp.reshape(xp.arange(index.shape[d], device=index.device), tuple(along))
        positions = positions + coordinate * stride
        stride *= shape[d]
    return xp.reshape(positions, (-1,))


def _check_unique(op: str, positions: Any) -> None:
    xp = backend.namespace(positions)
    ordered = xp.sort(positions)
    if positions.shape[0] > 1 and bool(xp.any(ordered[1:] == ordered[:-1])):
        raise ValueError(
            f"{op}: the index writes the same place twice, where PyTorch leaves the result "
            "undefined; use unique indices"
        )


def _is_index_array(part: Any) -> bool:
    return hasattr(part, "shape") and part.ndim > 0


def _wrapped_index(xp: Any, index: Any, size: int, axis: int) -> Any:
    """An integer index array as int64 in [0, size), or an IndexError naming the axis."""
    if not backend.dtype_name(index.dtype).startswith(("int", "uint")):
        raise IndexError(
            f"getitem: index arrays must be integers, got dtype {backend.dtype_name(index.dtype)}"
        )
    index = xp.astype(index, xp.int64)
    if math.prod(index.shape):
        low, high = int(xp.min(index)), int(xp.max(index))
        if low < -size or high >= size:
            bad = low if low < -size else high
            raise IndexError(f"getitem: index {bad} is out of range for axis {axis} of size {size}")
    return xp.where(index < 0, index + size, index)


def _bool_mask(key: Any) -> Tensor | None:
    """The mask of ``x[mask]``: a bool Tensor as the whole key, else None."""
    if isinstance(key, Tensor) and backend.dtype_name(key.dtype) == "bool" and key.ndim > 0:
        return key
    return None


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


def _check_assigned_grad(tensor: Tensor, value: Any) -> None:
    """``x.grad = value`` must be a Tensor of x's shape, dtype and device, as in PyTorch."""
    if not isinstance(value, Tensor):
        raise TypeError(
            f"assigned grad expected to be a Tensor or None but got {_type_name(value)} "
            f"(for a tensor of shape {tensor.shape})"
        )
    for what, got, expected in (
        ("shape", value.shape, tensor.shape),
        ("dtype", backend.dtype_name(value.dtype), backend.dtype_name(tensor.dtype)),
        ("device", value.device, tensor.device),
    ):
        if got != expected:
            shape = "" if what == "shape" else f" (shape {tensor.shape})"
            raise RuntimeError(
                f"assigned grad has {what} {got!r}, but the tensor has {what} {expected!r}{shape}"
            )


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


def _by_mask(a: Tensor, b: Tensor) -> bool:
    """Whether ``a * b`` is a float tensor times a bool mask that the array library multiplies
    as it is (NumPy and CuPy: the float dtype, each value times 0 or 1), so no float copy of
    the mask is made: a pass over memory fewer, in eager and in a compiled step."""
    names = backend.dtype_name(a.dtype), backend.dtype_name(b.dtype)
    if "bool" not in names or not backend.has_out(a.array):
        return False  # the strict stand-in refuses bool with float: the mask is cast
    other = b if names[0] == "bool" else a
    return backend.is_floating(backend.namespace(other.array), other.dtype)


def _promote(a: Tensor, b: Tensor, op: str) -> tuple[Tensor, Tensor]:
    """Cast both operands to their common dtype (array API rules; ints meet floats as floats)."""
    xp = backend.namespace(a.array)
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
                part = tensor._operand(part, "getitem").array
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
            raise IndexError(
                "getitem: a bool mask must be the whole key, as a bool Tensor (x[mask]); "
                "combine masks with slices via ta.where"
            )
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
    note_created(data)
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


def empty(
    *shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """A new tensor of the shape; tinyattn fills it with zeros (PyTorch leaves it unset)."""
    return _filled(_checked_shape("empty", _shape_arg(shape)), 0, dtype, device, requires_grad)


def full(
    shape: Any, value: float, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    if not hasattr(value, "__float__"):
        raise TypeError(f"full: the fill value must be a number, got {type(value).__name__}")
    shape = _checked_shape("full", _shape_arg((shape,)))
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
    if step == 0:
        raise ValueError(f"arange: step must not be zero (start={start}, end={end})")
    if dtype is None:
        all_ints = all(isinstance(v, int) for v in (start, end, step))
        dtype = "int64" if all_ints else "float32"
    xp, native = backend.resolve_device(device)
    dtype = backend.dtype_of_name(xp, backend.dtype_name(dtype))
    out = Tensor._from_op(xp.arange(start, end, step, dtype=dtype, device=native), None)
    note_created(out.array)
    return out.requires_grad_() if requires_grad else out


def randn(
    *shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """Standard normal samples from the host generator seeded by ``ta.manual_seed``."""
    shape = _checked_shape("randn", _shape_arg(shape))
    out = Tensor._from_op(backend.random_array("normal", shape, dtype, device), None)
    return out.requires_grad_() if requires_grad else out


def randint(
    low: int,
    high: Any = None,
    size: Any = None,
    *,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """Integers uniform in [low, high) of shape `size` (``randint(high, size)`` starts at 0),
    from the host generator seeded by ``ta.manual_seed``; int64 unless `dtype` says."""
    if size is None and isinstance(high, tuple | list):
        low, high, size = 0, low, high
    if size is None:
        raise TypeError("randint: the size (a tuple) is required, e.g. randint(0, 10, (2, 3))")
    if high is None or high <= low:
        raise ValueError(f"randint: need low < high, got low={low}, high={high}")
    shape = _checked_shape("randint", _shape_arg((size,)))
    return Tensor._from_op(backend.random_integers(low, high, shape, dtype, device), None)


def randperm(
    n: int, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """0 .. n-1 in a random order, from the host generator seeded by ``ta.manual_seed``; int64
    unless `dtype` says."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"randperm: n must be an int >= 0, got {n!r}")
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
        raise ValueError(f"linspace: steps must be an int >= 0, got {steps!r}")
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
            raise ValueError(f"eye: {name} must be an int >= 0, got {value!r}")
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
    shape = _checked_shape("rand", _shape_arg(shape))
    out = Tensor._from_op(backend.random_array("uniform", shape, dtype, device), None)
    return out.requires_grad_() if requires_grad else out


# ---------------------------------------------------------------------------- free functions
def where(cond: Tensor, a: Any = None, b: Any = None) -> Any:
    """Elementwise ``a if cond else b`` with broadcasting; gradients flow to a and b only.
    With `cond` alone, the indices of its non-zero elements, one tensor per dimension
    (``cond.nonzero(as_tuple=True)``, as PyTorch's one-argument where)."""
    if a is None and b is None and isinstance(cond, Tensor):
        return cond.nonzero(as_tuple=True)
    if a is None or b is None:
        raise TypeError("where: give both a and b, or neither (the indices of cond's non-zeros)")
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


def concat(tensors: Sequence[Tensor], axis: int = 0, *, dim: int | None = None) -> Tensor:
    """Join tensors along an existing axis; all other axes must match."""
    axis = axis if dim is None else dim
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


def cat(tensors: Sequence[Tensor], dim: int = 0, *, axis: int | None = None) -> Tensor:
    """PyTorch's name of `concat`."""
    return concat(tensors, axis=dim if axis is None else axis)


def stack(tensors: Sequence[Tensor], axis: int = 0, *, dim: int | None = None) -> Tensor:
    """Join same-shape tensors along a new axis."""
    axis = axis if dim is None else dim
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


def is_tensor(value: Any) -> bool:
    return isinstance(value, Tensor)


def equal(a: Tensor, b: Tensor) -> bool:
    """PyTorch's ``torch.equal``: True when both have the same shape and the same values."""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError(f"equal: expected two Tensors, got {_describe(a)} and {_describe(b)}")
    if a.shape != b.shape:
        return False
    return bool((a == b).all().item()) if a.numel() else True


# The free functions that are a Tensor method with the tensor first: ta.exp(x) is x.exp().
FUNCTIONS = {
    name: _free_function(name)
    for name in (
        *(spec.name for spec in (*UNARY, *BINARY, *LOGICAL)),
        *("amax", "amin", "argmax", "argmin", "chunk", "clone", "cumsum", "flatten", "flip"),
        *("gather", "logsumexp", "masked_fill", "matmul", "max", "mean", "min", "minimum"),
        *("multinomial", "nonzero", "numel", "permute", "reshape", "scatter", "softmax"),
        *("log_softmax", "split", "squeeze", "std", "sum", "topk", "transpose", "tril", "triu"),
        *("unsqueeze", "var", "clip", "clamp", "relu", "logical_not", "bitwise_not", "neg"),
        *("all", "any"),
        *("mm", "bmm", "mv", "dot", "outer", "t", "sign", "isnan", "isinf", "isfinite"),
        *("square", "reciprocal", "rsqrt", "clamp_min", "clamp_max", "select", "narrow"),
        *("unbind", "index_select", "movedim", "sort", "argsort", "roll", "isclose"),
        *("allclose", "norm", "frac", "lerp", "addmm", "diag", "tile", "repeat_interleave"),
        *("nan_to_num", "diff", "masked_select", "prod", "cumprod", "unique", "bincount"),
        *("swapaxes", "broadcast_to", "detach", "trace", "count_nonzero", "logaddexp"),
        *("logaddexp2", "logical_and", "logical_or", "logical_xor", "addcmul", "addcdiv"),
        *("scatter_add", "index_add", "diagonal"),
        *(f"{name}_" for name in IN_PLACE_UNARY),
        *("clamp_", "clip_", "fill_", "zero_"),
    )
}


# ------------------------------------------------------------------------- in-place helpers
# Used by the in-place section at the end of the Tensor class: the checks every in-place
# operation makes, and the out-of-place values that indexing writes compute.
def _check_inplace(tensor: Tensor, op: str, values: tuple) -> None:
    """In grad mode an in-place change may not touch the graph: refuse it with the reason."""
    if not is_grad_enabled():
        return
    if tensor.requires_grad and tensor._ctx is None:
        raise RuntimeError(
            f"{op}: a leaf Variable that requires grad is being used in an in-place operation. "
            "Update parameters inside `with ta.no_grad():`."
        )
    if tensor.requires_grad:
        raise RuntimeError(
            f"{op}: the tensor of shape {tensor.shape} is part of a graph (made by "
            f"{tensor._ctx.name}), and in-place operations record no graph; write it out of "
            "place (y = y + v; ta.where for masked writes) or change it under ta.no_grad()"
        )
    for value in values:
        if isinstance(value, Tensor) and value.requires_grad:
            raise RuntimeError(
                f"{op}: the value (shape {value.shape}) requires grad, but an in-place write "
                "records no graph and would drop its gradient; build the tensor out of place "
                "(ta.where, ta.concat, ta.stack) or pass value.detach()"
            )


def _dtype_kind(tensor: Tensor) -> int:
    """0 bool, 1 integer, 2 floating: a result may be stored in place only into its kind or up."""
    if backend.dtype_name(tensor.dtype) == "bool":
        return 0
    return 2 if backend.is_floating(backend.namespace(tensor.array), tensor.dtype) else 1


def _check_inplace_dtype(op: str, tensor: Tensor, result: Tensor) -> None:
    if _dtype_kind(result) > _dtype_kind(tensor):
        raise RuntimeError(
            f"{op}: result type {backend.dtype_name(result.dtype)} can't be cast to the desired "
            f"output type {backend.dtype_name(tensor.dtype)} (shape {tensor.shape})"
        )


def _int_index(op: str, tensor: Tensor, index: Any, size: int, axis: int) -> Any:
    """An index (Tensor, list or array) as a flat, range-checked integer array (no negatives)."""
    index = tensor._operand(index, op)
    xp = backend.namespace(index.array)
    if not xp.isdtype(index.dtype, "integral"):
        raise IndexError(
            f"{op}: index must hold integers, got dtype {backend.dtype_name(index.dtype)}"
        )
    flat = xp.reshape(index.array, (-1,))
    if flat.shape[0]:
        low, high = int(xp.min(flat)), int(xp.max(flat))
        if low < -size or high >= size:
            bad = low if low < -size else high
            raise IndexError(
                f"{op}: index {bad} is out of range for dimension {axis} of size {size}"
            )
    return xp.where(flat < 0, flat + size, flat)


def _positions_hit(op: str, tensor: Tensor, axis: int, index: Any) -> Tensor:
    """A bool Tensor, True on the slices of dimension `axis` that `index` names."""
    size = tensor.shape[axis] if tensor.ndim else 1
    _int_index(op, tensor, index, size, axis)  # dtype and range checks
    shape = [1] * tensor.ndim
    if tensor.ndim:
        shape[axis] = size
    return computed(_slices_hit, tensor._operand(index, op), size=size, shape=tuple(shape))


def _scattered(tensor: Tensor, dim: int, index: Any, src: Any) -> Tensor:
    """The values of `tensor` after ``scatter_(dim, index, src)``, computed out of place (as one
    op, so a compiled step writes the new values on every replay)."""
    xp = backend.namespace(tensor.array)
    axis = normalize_axes("scatter_", dim, tensor.ndim)[0]
    index = tensor._operand(index, "scatter_")
    if index.ndim != tensor.ndim or any(
        i > n for d, (i, n) in enumerate(zip(index.shape, tensor.shape)) if d != axis
    ):
        raise RuntimeError(
            f"scatter_: index of shape {index.shape} does not fit a tensor of shape "
            f"{tensor.shape} (same number of dimensions, no larger outside dimension {axis})"
        )
    _int_index("scatter_", tensor, index, tensor.shape[axis], axis)  # dtype and range checks
    if isinstance(src, Tensor):
        tensor._operand(src, "scatter_")
        if src.ndim != index.ndim or any(s < i for s, i in zip(src.shape, index.shape)):
            raise RuntimeError(
                f"scatter_: src of shape {src.shape} is smaller than index of shape {index.shape}"
            )
        values = src[tuple(slice(0, n) for n in index.shape)]
    else:
        values = tensor.constant(
            xp.full(index.shape, src, dtype=tensor.dtype, device=tensor.array.device)
        )
    return computed(
        _scatter_mean, tensor, index, values, axis=axis, integral=_dtype_kind(tensor) < 2
    )


def _bool_key(tensor: Tensor, key: Any) -> Tensor | None:
    """The key as a bool Tensor when it is a boolean mask, else None."""
    if isinstance(key, list) and key and all(isinstance(k, bool) for k in key):
        key = Tensor(key, device=tensor.device)
    elif hasattr(key, "__array_interface__") and key.dtype.kind == "b":
        key = Tensor(key, device=tensor.device)
    if isinstance(key, Tensor) and backend.dtype_name(key.dtype) == "bool":
        return tensor._operand(key, "setitem")
    return None


def _assigned(tensor: Tensor, key: Any, value: Any) -> Tensor:
    """The values of `tensor` after ``tensor[key] = value``, computed out of place (as one op,
    so a compiled step writes the new values on every replay)."""
    value = tensor._operand(value, "setitem")
    mask = _bool_key(tensor, key)
    if mask is not None:
        return _mask_assigned(tensor, mask, value)
    xp = backend.namespace(tensor.array)
    size = tensor.numel()
    # Which flat positions x[key] reads: indexing a tensor of positions gives every check
    # (ranges, shapes) of x[key] and the places to write.
    positions = xp.reshape(xp.arange(size, device=tensor.array.device), tensor.shape)
    selected = Tensor._from_op(positions, None)[key]
    if value.shape != selected.shape:
        value = value.broadcast_to(selected.shape)
    if not selected.numel():
        return tensor.detach()
    return computed(_put, tensor, value, selected)


def _mask_assigned(tensor: Tensor, mask: Tensor, value: Tensor) -> Tensor:
    """``x[mask] = value``: a number, a value broadcast over the masked rows, or one per row."""
    xp = backend.namespace(tensor.array)
    if mask.shape != tensor.shape[: mask.ndim]:
        raise IndexError(
            f"setitem: a mask of shape {mask.shape} does not match the shape {tensor.shape} "
            "of the tensor (it must equal its leading dimensions)"
        )
    rest = tensor.shape[mask.ndim :]
    if value.ndim <= len(rest):  # the same value for every selected row
        return where(mask.reshape(mask.shape + (1,) * len(rest)), value, tensor)
    check_host_read("x[mask] = rows (how many rows it takes depends on the values)")
    cond = xp.reshape(mask.array, mask.shape + (1,) * len(rest))
    flags = xp.reshape(mask.array, (-1,))
    count = int(xp.sum(xp.astype(flags, xp.int64)))
    if value.shape != (count, *rest):
        raise RuntimeError(
            f"setitem: the mask selects {count} row(s) of shape {rest}, but the value has "
            f"shape {value.shape}"
        )
    if count == 0:
        return tensor.detach()
    order = xp.cumulative_sum(xp.astype(flags, xp.int64)) - 1  # row i takes value[order[i]]
    rows = xp.take(xp.reshape(value.array, (count, -1)), xp.where(order < 0, 0, order), axis=0)
    gathered = xp.astype(xp.reshape(rows, tensor.shape), tensor.dtype)
    return Tensor._from_op(xp.where(cond, gathered, tensor.array), None)
