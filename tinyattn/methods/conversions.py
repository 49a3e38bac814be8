"""Tensor methods, conversions family: host values, devices and dtypes.

``numpy()``, ``item()``, ``float(x)``/``int(x)``/``bool(x)``, ``tolist()``, ``to(device|dtype)``,
``cpu()``/``cuda()``, ``is_cuda``, the dtype shorthands (``float()``, ``long()``, ``byte()`` ...),
``type()``, ``__index__`` and ``__format__`` (one-element tensors as list indices, 0-d ones in
f-strings), and the ``new_*`` constructors that copy a tensor's dtype and device. Part of the
tensor layer: imports `backend`, `autograd`, `ops` and `methods.common`. A cast is the Cast op
(its gradient casts back); a move between devices is the ToDevice op.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..autograd import (
    check_host_read,
)
from ..errors import TinyattnError
from ..ops import (
    Cast,
    ToDevice,
)
from .common import HOST_ARRAY, TensorBase, checked_shape, filled, new_leaf, shape_arg


class ConversionMethods(TensorBase):
    """Conversions: host values, devices, dtypes and the new_* constructors."""

    __slots__ = ()  # every tensor's slots are declared once, in Tensor

    def numpy(self, *, force: bool = False) -> Any:
        """The values as a NumPy array, as PyTorch gives them: on the CPU the tensor's own
        storage (a write through either shows in the other; the version counter does not see
        it), from any other device a host copy. Refused for a tensor that requires grad, whose
        values the graph may have saved; ``force=True`` detaches and always copies."""
        check_host_read("numpy()")
        if force:
            return backend.to_numpy(self.array, "numpy()").copy()
        if self.requires_grad:
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. "
                "Use tensor.detach().numpy() instead."
            )
        host = backend.to_numpy(self.array, "numpy()")
        if backend.is_host_array(self.array) and host is not self.array:
            self.array = host  # a NumPy scalar (0-d) becomes a 0-d array both can write
        return host

    def item(self) -> float | int | bool:
        """The single value of a one-element tensor as a Python number."""
        if self.numel() != 1:
            raise TinyattnError(
                f"item: only one-element tensors can be converted to a Python number, "
                f"got shape {self.shape}"
            )
        check_host_read("item(), float(), int() or bool()")
        return backend.to_numpy(self.array, "item()").reshape(()).item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise TinyattnError(
                f"bool: the truth value of a tensor of shape {self.shape} is ambiguous; "
                "use (x > 0).numpy().any() or .all() on the host"
            )
        return bool(self.item())

    def __index__(self) -> int:
        """A one-element integer (or bool) tensor as a Python int, so it can bound a slice or
        index a list (``items[i]``, ``x[:n]``, ``range(n)``), as in PyTorch."""
        if self.numel() != 1 or backend.dtype_name(self.dtype) not in _INDEX_DTYPES:
            raise TypeError(
                "__index__: only integer tensors of a single element can be converted to an "
                f"index, got {backend.dtype_name(self.dtype)} of shape {self.shape}"
            )
        return int(self.item())

    def __format__(self, spec: str) -> str:
        """A 0-d tensor formats as its value (``f"{loss:.4f}"``, and ``f"{loss}"`` gives the
        number); any other tensor takes only the empty spec (its ``str``), as in PyTorch."""
        if self.ndim == 0:
            return format(self.item(), spec)
        if spec:
            raise TypeError(
                f"unsupported format string {spec!r} passed to Tensor.__format__ (a tensor of "
                f"shape {self.shape}; only 0-d tensors take a format spec)"
            )
        return str(self)

    @property
    def is_cuda(self) -> bool:
        """Whether the tensor is on a CUDA device (CuPy)."""
        return self.device.startswith("cuda")

    @property
    def is_meta(self) -> bool:
        """Whether the tensor is on the meta device: a shape and a dtype, no values."""
        return self.device == "meta"

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        if not isinstance(self.array, HOST_ARRAY):
            raise TypeError(
                f"__array__: cannot convert a tensor on device '{self.device}' to NumPy "
                "implicitly; call .numpy() for an explicit copy"
            )
        check_host_read("conversion to a NumPy array")
        return self.array if dtype is None else self.array.astype(dtype)

    def to(
        self,
        *args: Any,
        device: Any = None,
        dtype: Any = None,
        non_blocking: bool = False,
        copy: bool = False,
    ) -> TensorBase:
        """A copy on another device (``'cpu'``, ``'cuda'``, ``'cuda:1'``) or with another dtype.

        PyTorch's forms: ``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(other)``
        (`other`'s device and dtype), the same as keywords, and ``copy=True`` for a new tensor
        even when nothing changes. `non_blocking` is accepted; every copy has finished when
        `to` returns, one of the orders a non-blocking copy allows. Both moves are
        differentiable: the gradient flows back to this tensor's device and dtype.
        """
        device, dtype, copy = _to_targets(args, device, dtype, copy)
        result = self if device is None else self._to_device(device)
        if dtype is not None:
            result = result._cast(dtype)
        return result.clone() if copy and result is self else result

    def _to_device(self, device: Any) -> TensorBase:
        if device == self.device or backend.is_on(self.array, device):
            return self  # already there, as PyTorch returns the tensor itself
        return ToDevice.apply(self, device=device)

    def pin_memory(self, device: Any = None) -> TensorBase:
        """A host copy for fast transfers to the GPU, as PyTorch's; refused without one (as
        PyTorch refuses). The copy is ordinary host memory: pinning only changes speed."""
        if backend.cupy_status()[0] is None:
            raise RuntimeError(
                "pin_memory: cannot access an accelerator device when none is available"
            )
        if self.device != "cpu":
            raise RuntimeError(f"pin_memory: cannot pin a tensor on '{self.device}', only CPU ones")
        return self.clone()

    def _cast(self, dtype: Any) -> TensorBase:
        xp = backend.namespace(self.array)
        if isinstance(dtype, str):
            dtype = backend.dtype_of_name(xp, dtype)
        if dtype == self.array.dtype:
            return self
        if self.requires_grad and not backend.is_floating(xp, dtype):
            return self.detach()._cast(dtype)  # an integer copy carries no gradient
        return Cast.apply(self, dtype=dtype)

    def type(self, dtype: Any = None) -> Any:
        """With a dtype: a copy converted to it (``x.type(ta.long)``); without: the type name."""
        if dtype is None:
            return f"tinyattn.{_TYPE_NAMES.get(backend.dtype_name(self.dtype), 'Tensor')}"
        return self._cast(dtype)

    def type_as(self, other: TensorBase) -> TensorBase:
        """This tensor with `other`'s dtype and device (PyTorch's type names a device too)."""
        moved = self if self.device == other.device else self.to(other.device)
        return moved._cast(backend.dtype_name(other.dtype))

    def tolist(self) -> Any:
        """The values as (nested) Python lists of numbers (a host copy)."""
        check_host_read("tolist()")
        return backend.to_numpy(self.array).tolist()

    # Each is a call above (or two), so its gradient of any order is theirs.
    def cpu(self) -> TensorBase:
        """``to('cpu')``: this tensor itself when it is there already."""
        return self.to("cpu")

    def cuda(self, device: Any = None, non_blocking: bool = False) -> TensorBase:
        """``to('cuda')``; an int `device` is ``'cuda:N'``; `non_blocking` as in `to`."""
        return self.to(f"cuda:{device}" if isinstance(device, int) else device or "cuda")

    def new_full(
        self,
        size: Any,
        fill_value: float,
        *,
        dtype: Any = None,
        device: Any = None,
        requires_grad: bool = False,
    ) -> TensorBase:
        """A new tensor of `size` filled with `fill_value`, this tensor's dtype and device unless
        given (the ``new_*`` family, as in PyTorch)."""
        if not hasattr(fill_value, "__float__"):
            raise TypeError(
                f"new_full: the fill value must be a number, got {type(fill_value).__name__}"
            )
        shape = checked_shape("new_full", shape_arg((size,)))
        dtype, device = dtype or self.dtype, device or self.device
        return filled(self._from_op, shape, fill_value, dtype, device, requires_grad)

    def new_zeros(
        self, *size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
    ) -> TensorBase:
        return self.new_full(
            shape_arg(size), 0, dtype=dtype, device=device, requires_grad=requires_grad
        )

    def new_ones(
        self, *size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False
    ) -> TensorBase:
        return self.new_full(
            shape_arg(size), 1, dtype=dtype, device=device, requires_grad=requires_grad
        )

    new_empty = new_zeros  # tinyattn's empty is zeros (PyTorch leaves the values unset)

    def new_tensor(
        self, data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
    ) -> TensorBase:
        """A copy of `data` with this tensor's dtype and device unless given."""
        dtype, device = dtype or self.dtype, device or self.device
        return new_leaf(self._from_op, data, dtype, device, requires_grad)

    # The dtype shorthands come last: in the class body above, `float`, `int` and `bool` still
    # name Python's types (the annotations use them).

    def float(self) -> TensorBase:
        return self._cast("float32")

    def double(self) -> TensorBase:
        return self._cast("float64")

    def half(self) -> TensorBase:
        return self._cast("float16")

    def long(self) -> TensorBase:
        return self._cast("int64")

    def int(self) -> TensorBase:
        return self._cast("int32")

    def bool(self) -> TensorBase:
        return self._cast("bool")

    def byte(self) -> TensorBase:
        return self._cast("uint8")


_INDEX_DTYPES = ("int64", "int32", "int16", "int8", "uint8", "bool")

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


def _is_dtype(target: Any) -> bool:
    """A dtype name ('float32', and 'bfloat16' so that it is refused as a dtype) or object."""
    if isinstance(target, str):
        return target in backend.DTYPE_NAMES or target == "bfloat16"
    return not isinstance(target, bool | int | float) and target is not None


def _to_targets(args: tuple, device: Any, dtype: Any, copy: bool) -> tuple[Any, Any, bool]:
    """(device, dtype, copy) from `to`'s positional forms and keywords; None where unchanged.
    Positional flags come after the targets: non_blocking, then copy."""
    flags = [target for target in args if isinstance(target, bool)]
    copy = copy or (len(flags) > 1 and flags[1])
    for target in args:
        if isinstance(target, TensorBase):
            device, dtype = target.device, target.dtype
        elif isinstance(target, bool):
            continue
        elif isinstance(target, str) and not _is_dtype(target):
            device = target
        elif _is_dtype(target):
            dtype = target
        else:
            raise TypeError(
                f"to: expected a device ('cpu', 'cuda', 'cuda:N') or a dtype name "
                f"({', '.join(backend.DTYPE_NAMES)}), got {target!r}"
            )
    return device, dtype, copy
