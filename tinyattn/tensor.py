"""Tensor layer: what a tensor is.

A Tensor is an array (NumPy or CuPy, ``x.array``) plus its place in the graph: ``_ctx`` is the
Function that produced it (None for leaves), ``requires_grad`` says whether gradients flow to it,
``grad`` holds a leaf's accumulated gradient, and a version counter, shared with its views,
counts in-place writes. ``backward`` hands the graph to the engine in autograd.py.

The arithmetic operators and elementwise methods (``x + y``, ``x.exp()``, ``x < y``) are not
written out: `_registered_ops` makes them from the registration table in ops/table.py, which the
op-table tests read too. A Python number is not a graph input: ``x * 2.0`` records one
``MulScalar`` node with the single input ``x``, and the result keeps ``x``'s dtype. Every other
method lives in a family file under tinyattn/methods/ (arithmetic, reductions, shape, indexing,
in-place, conversions), joined here as mixin classes. Imports `backend`, `autograd`, `ops` and
`methods`; no derivative math lives here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from . import autograd, backend, devices
from .autograd import (
    RETAIN_GRAD,
    RemovableHandle,
    default_root_grad,
    note_created,
    note_grad_set,
    recording,
    run_backward,
)
from .methods.arithmetic import ArithmeticMethods
from .methods.common import (
    HOST_ARRAY,
    HOST_FLOATS,
    HOST_TYPES,
    SCALARS,
    by_mask,
    check_integral,
    checked_shape,
    device_spec,
    integer_operands,
    is_float,
    named,
    new_leaf,
    number_operand,
    promote,
    refuse_bool_subtraction,
    result_type,
    type_name,
)
from .methods.conversions import ConversionMethods
from .methods.indexing import IndexingMethods
from .methods.inplace import InPlaceMethods
from .methods.layouts import LayoutMethods
from .methods.missing import with_missing_names
from .methods.reductions import ReductionMethods
from .methods.shape import ShapeMethods
from .methods.statistics import StatisticsMethods
from .ops import (
    Atan2,
    Div,
    MatMul,
    Mul,
    Neg,
    Pow,
    Sub,
    broadcast_shapes,
    matmul_shape,
)
from .ops.computed import array_call, computed
from .ops.rounding import FloorDivide, Remainder
from .ops.table import BINARY, LOGICAL, UNARY, Binary, Logical, Unary

# Ops that compute in floats whatever their operands' dtypes (the default float32 for integers),
# and the ops with a rule of their own for integer or bool operands (common.integer_operands).
_TRUE_DIVISIONS = (Div, Atan2)
_INTEGER_RULES = frozenset((Sub, Div, Atan2, Pow, FloorDivide, Remainder))


# --------------------------------------------------------------------------- generated methods
# Each registered op (ops/table.py) becomes a method, its operators and a free function. The
# closures keep the hot path short: a Python number with a float tensor goes straight to the
# scalar Function (no constant tensor, no sum_to).
def _unary_method(spec: Unary) -> Callable:
    function, name, integers, bool_error = spec.function, spec.name, spec.integers, spec.bool_error

    def method(self: Tensor) -> Tensor:
        if is_float(self.array):
            return function.apply(self)
        if integers == "float":  # exp(int) is a float32, as PyTorch computes it
            return function.apply(self._cast("float32"))
        if backend.dtype_name(self.dtype) == "bool":
            raise bool_error(f"{name}: not implemented for bool tensors")
        return self.clone() if integers == "keep" else function.apply(self)

    return named(method, name, function.__doc__)


def _binary_method(spec: Binary, name: str, reverse: bool = False) -> Callable:
    function, op = spec.function, spec.name
    scalar = spec.reflected_scalar if reverse else spec.scalar
    sign = -1 if spec.negate_scalar and not reverse else 1

    def method(self: Tensor, other: Any) -> Tensor:
        if isinstance(other, Tensor) and not reverse:
            x, y = self.array, other.array
            # Two host float tensors of one dtype and shape: nothing to promote, broadcast or
            # move, so the op applies at once (the common case); `_binary` has the rules.
            if type(x) in HOST_TYPES and type(y) in HOST_TYPES and x.dtype is y.dtype:
                if x.shape == y.shape and x.dtype in HOST_FLOATS:
                    return function.apply(self, other)
        elif scalar is not None and type(other) in SCALARS:
            x = self.array  # a host float array without the general test's call (common)
            if x.dtype in HOST_FLOATS if type(x) in HOST_TYPES else is_float(x):
                return scalar.apply(self, c=sign * other)
        return self._binary(function, other, op, reverse)

    return named(method, name, function.__doc__)


def _logical_method(spec: Logical, name: str, reverse: bool = False) -> Callable:
    op, reference, integral = spec.name, spec.reference, spec.integral
    operator = name.startswith("__")

    def method(self: Tensor, other: Any) -> Tensor:
        if operator and (other is None or isinstance(other, str)):
            return NotImplemented  # x == None is False, as in PyTorch, not an error
        return self._logical(other, op, reference, integral, reverse)

    return named(method, name, f"Elementwise {reference} as a bool tensor (no gradient).")


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


def _registered_ops(cls: type) -> type:
    """Class decorator: give Tensor the methods and operators of the op tables (a family's
    own method of the same name, such as ``div`` with ``rounding_mode``, is kept)."""
    for name, method in _registered_methods().items():
        if not any(name in vars(family) for family in cls.__mro__[1:-1]):
            setattr(cls, name, method)
    return cls


@with_missing_names
@_registered_ops
class Tensor(
    ArithmeticMethods,
    ReductionMethods,
    StatisticsMethods,
    ShapeMethods,
    IndexingMethods,
    InPlaceMethods,
    ConversionMethods,
    LayoutMethods,
):
    """An n-dimensional array that records the operations applied to it, for reverse mode."""

    # `_version_counter` is a one-element list holding the version, shared by a tensor and its
    # views (reshape, permute, basic indexing) so that an in-place change through one is seen
    # through all; `_version` reads it. A view made in the graph keeps `_view`: (its base, the
    # version its history was made at), so an in-place write through it can move the base's
    # history too, and a view whose base changed since gets its history again (methods/inplace).
    __slots__ = (
        "array",
        "_grad",
        "requires_grad",
        "_ctx",
        "_hooks",
        "_version_counter",
        "_view",
        "_rebased",
        "__weakref__",
    )
    # NumPy must hand `ndarray * Tensor` to Tensor.__rmul__ instead of broadcasting over it.
    __array_ufunc__ = None

    def __init__(
        self, *data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
    ) -> None:
        """PyTorch's legacy constructor; `tinyattn.tensor` (which keeps the data's dtype) is
        the one to use. ``Tensor(2, 3)`` is a (2, 3) float32 tensor (of zeros: PyTorch leaves
        it unset), ``Tensor()`` an empty one; ``Tensor([1, 0])`` and ``Tensor(int_array)`` hold
        float32 values, whatever the data's own dtype; ``Tensor(t)`` of a tensor is a copy in
        t's dtype. `dtype` chooses another dtype in every form."""
        if len(data) == 1 and not _is_size(data[0]):
            data = data[0]
            if isinstance(data, Tensor):
                data = data.array
            elif dtype is None:
                dtype = "float32"
        else:
            shape = checked_shape("Tensor", data) if data else (0,)
            data = backend.host_zeros(shape)  # float64 zeros, cast below
            dtype = "float32" if dtype is None else dtype
        self.array = backend.asarray(data, dtype=dtype, device=device_spec(data, device))
        note_created(self.array)
        self._grad = None
        self._ctx = None
        self._hooks = None
        self._version_counter = [0]
        self._view = self._rebased = None
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
        out._ctx = ctx
        out._grad = out._hooks = out._view = out._rebased = None
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
            and type(value.array) is HOST_ARRAY
            and type(self.array) is HOST_ARRAY
            and value.array.shape == self.array.shape
            and value.array.dtype == self.array.dtype
        ):  # NumPy gradients from the engine pass the quick test above; the rest is checked
            _check_assigned_grad(self, value)
        if recording.recorder is not None:  # ta.compile records a step's .grad assignments
            note_grad_set(self)
        self._grad = value

    @property
    def _version(self) -> int:
        """How many in-place changes this tensor's storage has had (PyTorch's ``_version``)."""
        return self._version_counter[0]

    def constant(self, array: Any) -> Tensor:
        """Wrap an array as a constant (no grad) Tensor; used by backward rules."""
        return Tensor._from_op(array, None)

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
    def device(self) -> devices.device:
        return devices.of_name(backend.device_name(backend.device_of(self.array)))

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

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len: a 0-d tensor has no length (its shape is ())")
        return self.shape[0]

    def __repr__(self) -> str:
        if self.device == "meta":  # no values to show: PyTorch's form
            dtype = backend.dtype_name(self.dtype)
            dtype = "" if dtype == "float32" else f", dtype=tinyattn.{dtype}"
            body = f"tensor(..., device='meta', size={self.shape}{dtype})"
        else:
            body = repr(backend.to_numpy(self.array)).replace("array(", "tensor(", 1)
        extras = []
        if self.device != "cpu" and self.device != "meta":
            extras.append(f"device='{self.device}'")
        if self._ctx is not None:
            extras.append(f"grad_fn={self._ctx.name}")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return body[:-1] + "".join(", " + e for e in extras) + ")" if extras else body

    # ----------------------------------------------------------------------------- conversions

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
        run_backward([self], [default_root_grad(self, grad)], retain_graph, create_graph)

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

    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]) -> Any:
        """Call ``hook(self)`` in backward once this leaf's ``.grad`` holds its gradient (the
        engine hands it over as soon as every node that read the leaf has run)."""
        return autograd.hooks.register_post_accumulate_grad_hook(self, hook)

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
                type(self.array) is not HOST_ARRAY or type(other.array) is not HOST_ARRAY
            ) and other.array.device != self.array.device:
                raise RuntimeError(
                    f"{op}: tensors are on different devices ('{self.device}' and "
                    f"'{other.device}'); move one with .to(device)"
                )
            return other
        if isinstance(other, bool | int | float):
            if is_float(self.array):  # a float tensor keeps its dtype with any number
                xp = backend.namespace(self.array)
                return Tensor._from_op(
                    xp.asarray(other, dtype=self.array.dtype, device=self.array.device), None
                )
            # int8 tensor * 2.5 meets a float32 2.5; uint8 tensor + (-2) a uint8 254, as in PyTorch
            return number_operand(self, other, result_type(self, other), op)
        if isinstance(other, list | tuple) or hasattr(other, "__array_interface__"):
            return new_leaf(Tensor._from_op, other, None, self.device, False)
        if getattr(type(other), "is_sparse", False) is True and op in ("add", "sub", "matmul"):
            return self._operand(other.to_dense(), op)  # dense + sparse is dense in PyTorch
        raise TypeError(f"{op}: unsupported operand type {type_name(other)}")

    def _binary(self, function: type, other: Any, op: str, reverse: bool = False) -> Tensor:
        # The common case, two float tensors of one dtype, pays two tests below; the rules for
        # integers, bools and Python numbers (promotion, true division, ZeroDivisionError)
        # run only where a dtype differs or is not floating.
        given = other
        if function in _TRUE_DIVISIONS and not isinstance(other, Tensor):
            if not is_float(self.array):
                self = self._cast("float32")  # int / -2 is a float division by -2.0, not by 254
        elif function is Sub and (other is True or other is False):
            refuse_bool_subtraction(op, other)
        other = self._operand(other, op)
        a, b = (other, self) if reverse else (self, other)
        if a.array.shape != b.array.shape:
            broadcast_shapes(op, a.array.shape, b.array.shape)
        if a.array.dtype != b.array.dtype and not (function is Mul and by_mask(a, b)):
            if function is Sub:
                refuse_bool_subtraction(op, a, b)
            a, b = promote(a, b, op)
        if function in _INTEGER_RULES and not is_float(a.array):
            number = given if isinstance(given, bool | int | float) else None
            a, b = integer_operands(function, a, b, op, number, reverse)
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
            a, b = promote(a.detach(), b.detach(), op)
        if integral:
            check_integral(op, a, bools=integral is True)
        return computed(array_call, a, b, name=name)

    # Tensors are compared elementwise by ==, but hashed by identity: a tensor stays usable as a
    # dict key or set member (the engine keys its gradient table by tensor).
    __hash__ = object.__hash__

    def __invert__(self) -> Tensor:
        """``~x``: logical not of a bool tensor, bitwise not of an integer one (no gradient)."""
        check_integral("bitwise_not", self)
        return computed(array_call, self, name="bitwise_invert")

    bitwise_not = __invert__

    def __matmul__(self, other: Any) -> Tensor:
        other = self._operand(other, "matmul")
        matmul_shape(self.shape, other.shape)
        if self.dtype != other.dtype:
            if is_float(self.array) and is_float(other.array):  # as PyTorch: no silent widening
                raise RuntimeError(
                    f"matmul: expected both operands to have the same dtype, but got "
                    f"{backend.dtype_name(self.dtype)} and {backend.dtype_name(other.dtype)}; "
                    "cast one with .to(dtype)"
                )
            a, b = promote(self, other, "matmul")
            return MatMul.apply(a, b)
        return MatMul.apply(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return self._operand(other, "matmul").__matmul__(self)

    matmul = __matmul__

    def __abs__(self) -> Tensor:
        return self.abs()

    def __neg__(self) -> Tensor:
        if not is_float(self.array) and backend.dtype_name(self.dtype) == "bool":
            raise RuntimeError(
                "neg: negating a bool tensor is not supported; to invert a mask use ~mask or "
                "mask.logical_not()"
            )
        return Neg.apply(self)

    neg = __neg__

    def __pos__(self) -> Tensor:
        return self

    # ------------------------------------------------------------------------------- reductions

    # ------------------------------------------------------------------------------------ shape

    # -------------------------------------------------------------------------------- indexing

    # ----------------------------------------------------------------------- dtypes and values

    # -------------------------------------------------- PyTorch's spellings of composed calls


# The engine wraps each op's result with this; a plain function of autograd's own, its call is
# cheaper than looking up a staticmethod on the input Tensor.
autograd.use_tensor_class(Tensor._from_op)


# ------------------------------------------------------------------------------------- helpers
def _is_size(value: Any) -> bool:
    """Whether a lone argument of ``Tensor(...)`` is a size (an int, not a bool), not data."""
    return isinstance(value, int) and not isinstance(value, bool)


def _check_assigned_grad(tensor: Tensor, value: Any) -> None:
    """``x.grad = value`` must be a Tensor of x's shape, dtype and device, as in PyTorch."""
    if not isinstance(value, Tensor):
        raise TypeError(
            f"assigned grad expected to be a Tensor or None but got {type_name(value)} "
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
