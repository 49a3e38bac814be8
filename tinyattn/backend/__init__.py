"""Backend layer: which array library and which device.

This package is the ONLY place that imports NumPy as the host library, CuPy, or array_api_strict
(files.py: the checkpoint formats; cuda_graphs.py: CUDA graphs, handed the CuPy module).
Every other module works with the array API namespace returned by :func:`namespace` and never
branches on the backend. What the array API standard lacks lives here: device parsing,
host <-> device transfer, the host random generator, scatter-add, and the cached "is CuPy
usable" probe.

Devices: ``"cpu"`` (NumPy), ``"cuda"`` / ``"cuda:N"`` (CuPy), ``"meta"`` (meta.py: shapes, no
values), and the test-only ``"strict"`` / ``"strict:deviceN"`` (array_api_strict on a non-default
device: it refuses implicit conversion to NumPy and mixing devices, exactly as CuPy does).
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import TinyattnError
from . import meta, windows
from .cuda_graphs import CudaGraphs  # re-exported: backend.CudaGraphs

DEFAULT_FLOAT = np.float32
# The host array type; Tensor uses it to skip device checks between two host arrays.
HOST_ARRAY = np.ndarray
# Host arrays and NumPy's 0-d results of the float dtypes: where Tensor's operators check nothing.
HOST_TYPES = frozenset({np.ndarray, np.float16, np.float32, np.float64})
HOST_FLOATS = frozenset({np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)})

# Dtype names accepted wherever a dtype is asked for; resolved per namespace by `dtype_of_name`.
DTYPE_NAMES = ("float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool")
_host_rng = np.random.default_rng(0)


# ------------------------------------------------------------------------------------ allocator
# Whether keep_freed_memory() has changed malloc's settings in this process. False after a plain
# `import tinyattn`: the library never changes its host program's allocator unless asked.
HOST_MEMORY_KEPT = False


def keep_freed_memory() -> bool:
    """Opt in: ask glibc to keep freed memory for reuse rather than hand it back to the OS.

    A tape keeps every op's output alive until backward, then frees them in a burst. glibc serves
    blocks above its mmap threshold (128 KiB at first) with fresh pages and returns freed memory
    at the heap's top to the OS, so the next step's arrays page-fault on every 4 KiB page they
    touch: `x @ W.T + b` at (1024, 256) took 790 us instead of 270, and the overhead chain on
    (256, 256) ran 3x slower (docs/performance.md). PyTorch's caching allocator avoids the same
    cost. With this, blocks up to 32 MiB (glibc's largest threshold) come from the heap, and up
    to 1 GiB of free heap stays in the process for reuse.
    It changes malloc for the whole process, so it is never done at import: call it once at the
    start of a script, or set TINYATTN_KEEP_FREED_MEMORY=1 to have `import tinyattn` call it.
    Linux with glibc only (elsewhere it does nothing). Returns whether the setting is in effect."""
    global HOST_MEMORY_KEPT
    if HOST_MEMORY_KEPT or not sys.platform.startswith("linux"):
        return HOST_MEMORY_KEPT
    try:
        mallopt = ctypes.CDLL(None).mallopt  # glibc; musl and other libcs have none
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # from glibc's <malloc.h>
    HOST_MEMORY_KEPT = bool(mallopt(m_mmap_threshold, 32 << 20)) and bool(
        mallopt(m_trim_threshold, 1 << 30)
    )
    return HOST_MEMORY_KEPT


if os.environ.get("TINYATTN_KEEP_FREED_MEMORY") == "1":  # asked for by the user's environment
    keep_freed_memory()


# ----------------------------------------------------------------------------------------- probe
@functools.cache
def cupy_status() -> tuple[Any, str]:
    """Return ``(cupy_namespace | None, reason)``; never raises, cached for the process.

    Importing CuPy is not enough (it imports without a driver), so the probe also counts devices
    and runs one tiny compiled kernel with a reduction and a device-to-host copy."""
    try:
        import cupy  # noqa: PLC0415  (lazy: CuPy is optional and slow to import)
    except Exception as exc:  # ImportError, or a broken install
        return None, f"CuPy is not importable ({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return None, f"CuPy {cupy.__version__} is installed but no CUDA device is usable ({exc})"
    if count < 1:
        return None, f"CuPy {cupy.__version__} is installed but sees no CUDA device"
    try:
        probe = cupy.arange(4, dtype=cupy.float32)
        if float((probe * 2).sum()) != 12.0:
            return None, "CuPy ran a test kernel but got a wrong result"
    except Exception as exc:
        return (
            None,
            f"CuPy sees {count} device(s) but cannot run kernels ({type(exc).__name__}: {exc})",
        )
    import array_api_compat.cupy as cupy_namespace  # noqa: PLC0415

    return cupy_namespace, f"CuPy {cupy.__version__} on {count} device(s)"


@functools.cache
def synchronize() -> None:
    """Wait until the current CuPy device has finished its queued work (None: nothing queued)."""
    cupy = cupy_status()[0]
    if cupy is not None:
        cupy.cuda.Device().synchronize()


def _compat():
    """array-api-compat, imported on first use: NumPy arrays never need it (import time)."""
    import array_api_compat  # noqa: PLC0415

    return array_api_compat


def _is_cupy_array(array: Any) -> bool:
    return type(array).__module__.startswith("cupy") and _compat().is_cupy_array(array)


@functools.cache
def _strict():
    try:
        import array_api_strict  # noqa: PLC0415  (test-only backend)
    except ImportError as exc:
        raise RuntimeError(
            "the 'strict' device needs the array-api-strict package (pip install tinyattn[test])"
        ) from exc
    return array_api_strict


# ---------------------------------------------------------------------------------------- devices
def resolve_device(spec: Any) -> tuple[Any, Any]:
    """Parse a device spec into ``(namespace, native_device)``.

    Raises a ValueError for an unknown spec and a RuntimeError saying why when CUDA is unusable.
    """
    if spec is None or spec == "cpu":
        return np, "cpu"
    if spec == "meta":
        return meta, "meta"
    if not isinstance(spec, str):
        return namespace_of_device(spec)
    name, _, index = spec.partition(":")
    if name == "cuda":
        if index and not index.isdigit():
            raise TinyattnError(f"unknown device {spec!r}: expected 'cuda' or 'cuda:N', N an int")
        xp, reason = cupy_status()
        if xp is None:
            raise RuntimeError(f"device {spec!r} is not available: {reason}")
        import cupy  # noqa: PLC0415  (only reached when the probe succeeded)

        ordinal = int(index or 0)
        if ordinal >= cupy.cuda.runtime.getDeviceCount():
            raise RuntimeError(f"device {spec!r} does not exist: CuPy sees fewer devices")
        return xp, cupy.cuda.Device(ordinal)
    if name == "strict":
        strict = _strict()
        try:
            return strict, strict.Device(index or "device1")
        except ValueError:
            raise TinyattnError(
                f"unknown device {spec!r}: the strict devices are 'strict' ('strict:device1') "
                "and 'strict:device2'"
            ) from None
    raise TinyattnError(f"unknown device {spec!r}: expected 'cpu', 'cuda', 'cuda:N' or 'strict'")


def namespace_of_device(device: Any) -> tuple[Any, Any]:
    """Inverse of `device_name` for native device objects (CuPy or strict devices)."""
    if type(device).__module__.startswith("array_api_strict"):
        return _strict(), device
    return resolve_device(device_name(device))


def device_name(device: Any) -> str:
    """A short, printable name: ``'cpu'``, ``'meta'``, ``'cuda:0'``, ``'strict:device1'``."""
    if device == "cpu" or device == "meta":
        return str(device)
    if type(device).__module__.startswith("array_api_strict"):
        return "strict:" + str(device).split("'")[1]
    return f"cuda:{device.id}"


class _DeviceKey:
    """A device as a cache key: CuPy's ``Device`` is unhashable, so the key compares names."""

    __slots__ = ("device", "name")

    def __init__(self, device: Any) -> None:
        self.device, self.name = device, device_name(device)

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _DeviceKey) and other.name == self.name


def cache_per_device(maxsize: int) -> Callable[[Callable], Callable]:
    """`functools.lru_cache` for a function whose last argument is a device, any backend's."""

    def wrap(fn: Callable) -> Callable:
        @functools.lru_cache(maxsize=maxsize)
        def cached(*args: Any) -> Any:
            device = args[-1]
            return fn(*args[:-1], device.device if type(device) is _DeviceKey else device)

        @functools.wraps(fn)
        def call(*args: Any) -> Any:
            device = args[-1]  # NumPy's is the string 'cpu': hashed as it is, on the hot path
            return cached(*args[:-1], device if type(device) is str else _DeviceKey(device))

        call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return call

    return wrap


def namespace(array: Any) -> Any:
    """The array API namespace of an array (NumPy itself for NumPy arrays)."""
    return _NUMPY_TYPES.get(type(array)) or _namespace_met(array)


_NUMPY_TYPES: dict[type, Any] = {}  # NumPy's array and scalar types met so far -> NumPy


def _namespace_met(array: Any) -> Any:
    """`namespace` of an array type not yet met. NumPy 2 implements the standard itself (its
    own module avoids a wrapper layer per call); other libraries through array-api-compat."""
    if type(array) is np.ndarray or isinstance(array, np.generic):
        _NUMPY_TYPES[type(array)] = np
        return np
    return _compat().array_namespace(array)


def is_host_array(array: Any) -> bool:
    return isinstance(array, np.ndarray | np.generic)


# ---------------------------------------------------------------------- buffers of compiled steps
# `ta.compile` replays a step by writing every result into the array the recording made (its
# buffer), so views of it stay valid and nothing is allocated; these hide each library's spelling.


def _host_view(array: Any) -> Any:
    """The NumPy array behind an array of the strict stand-in (the array itself otherwise)."""
    return getattr(array, "_array", array) if not is_host_array(array) else array


def storage_root(array: Any) -> int:
    """An id shared by an array and every view of it (the array that owns the memory)."""
    array = _host_view(array)
    while getattr(array, "base", None) is not None and hasattr(array.base, "shape"):
        array = array.base
    return id(array)


def is_buffer(array: Any) -> bool:
    """Whether results can be written into `array` in place (a NumPy scalar cannot)."""
    if isinstance(array, np.generic):
        return False
    flags = getattr(_host_view(array), "flags", None)
    return bool(getattr(flags, "writeable", True))  # CuPy's flags have no `writeable`


def repeats_or_is_read_only(array: Any) -> bool:
    """Whether `array` cannot be written, or repeats an element along an axis (stride 0: a
    broadcast view, where one write would reach every copy)."""
    strides = getattr(_host_view(array), "strides", None) or ()
    return not is_buffer(array) or (0 in strides and array.size > 1)


def own_memory(array: Any, handed: dict[int, list]) -> Any:
    """`array`, or a copy, that a leaf's ``.grad`` may own: writable, repeating no element (no
    zero stride), reaching no byte of `handed`'s arrays (memory root -> those handed out)."""
    if isinstance(array, np.generic):  # a NumPy scalar (a 0-d result): new, but not writable
        return np.asarray(array)
    host = base = getattr(array, "_array", array)  # the strict stand-in's NumPy array
    while getattr(base, "base", None) is not None and hasattr(base.base, "shape"):
        base = base.base  # storage_root's walk, inline: this runs for every leaf
    if repeats_or_is_read_only(array) or windows.overlaps(host, handed.get(id(base), ())):
        array = namespace(array).asarray(array, copy=True)
        host = base = getattr(array, "_array", array)
    handed.setdefault(id(base), []).append(host)
    return array


def owns_plain_memory(array: Any) -> bool:
    """Whether `array` owns its memory, writable and row-major: any other array of its shape,
    dtype and library can stand in for it (a view, a transposed result or a scalar cannot)."""
    host = _host_view(array)
    if not is_buffer(array) or getattr(host, "base", None) is not None:
        return False
    return bool(getattr(getattr(host, "flags", None), "c_contiguous", False))


def shares_elements(array: Any) -> bool:
    """Whether two elements of `array` are one memory location (a broadcast view: a zero stride
    on an axis longer than 1). NumPy marks such a view read-only and refuses the write itself;
    CuPy does not, and would write each location several times."""
    if type(array) is np.ndarray or not hasattr(array, "strides"):
        return False
    return any(stride == 0 and n > 1 for stride, n in zip(array.strides, array.shape))


def copy_into(target: Any, source: Any) -> None:
    """``target[...] = source`` (broadcast and cast to target's dtype), in place."""
    if isinstance(target, np.ndarray) or _is_cupy_array(target):
        _copyto_of(target)(target, source, casting="unsafe")
        return
    xp = namespace(target)
    if source.dtype != target.dtype:
        source = xp.astype(source, target.dtype)
    target[...] = source


def _copyto_of(array: Any) -> Any:
    if isinstance(array, np.ndarray):
        return np.copyto
    import cupy  # noqa: PLC0415  (only reached for CuPy arrays)

    return cupy.copyto


def empty_like(array: Any) -> Any:
    """A new array of `array`'s shape, dtype and device, its values not set."""
    return namespace(array).empty_like(array)


def reshape(array: Any, shape: tuple) -> Any:
    """``xp.reshape(array, shape)``: a view where the layout allows, else a copy. A NumPy array
    goes through its own method: NumPy's module function wraps it in Python, 1.5 us against
    0.3 a call, and a training step of the benchmark models makes about 200 of them."""
    if isinstance(array, np.ndarray):
        return array.reshape(shape)
    return namespace(array).reshape(array, shape)


def reshape_view(array: Any, shape: tuple) -> Any:
    """``array`` in `shape` as a view of the same memory, or None when its strides cannot express
    that shape without a copy (PyTorch's ``view`` refuses those; ``reshape`` copies). A NumPy
    scalar (an op's 0-d result) is immutable: a copy of it serves as a view."""
    if math.prod(array.shape) == 0 or isinstance(array, meta.MetaArray | np.generic):
        return namespace(array).reshape(array, shape)
    host = _host_view(array)
    if isinstance(host, np.ndarray):
        view = host.reshape(shape)
        if not np.may_share_memory(view, host):
            return None
        return view if host is array else namespace(array).reshape(array, shape)
    view = namespace(array).reshape(array, shape)  # CuPy: a copy has its own pointer
    return view if view.data.ptr == array.data.ptr else None


def is_view_of(result: Any, source: Any) -> bool:
    """Whether `result` is a view of `source`'s memory (both views of one allocation)."""
    if result is source:
        return True
    if type(result) is np.ndarray:  # NumPy keeps a view's base as the array owning the memory
        base = result.base
        return base is not None and (base is source or base is source.base)
    base = getattr(result, "base", None)
    if base is None and not hasattr(result, "_array"):
        return False  # owns its memory (a CuPy copy)
    return storage_root(result) == storage_root(source)


def positions_in(view: Any, base: Any) -> Any:
    """For each element of `view`, its flat (row-major) position in `base`, as an int64 array of
    view's shape; None when some element of `view` is not in `base`'s memory. Both are views of
    one allocation; the arithmetic is on their element offsets from its start."""
    host_view, host_base = _host_view(view), _host_view(base)
    xp = namespace(view)
    root = host_base
    while getattr(root, "base", None) is not None and hasattr(root.base, "shape"):
        root = root.base
    lookup = np.full(int(root.size), -1, dtype=np.int64)
    lookup[_offsets(host_base, root).ravel()] = np.arange(host_base.size)
    found = lookup[_offsets(host_view, root)]
    if found.size and found.min() < 0:
        return None
    return xp.asarray(found, device=view.device)


def _offsets(array: Any, root: Any) -> Any:
    """Each element's offset, in elements, from the start of `root`'s memory (host arrays)."""
    item = array.itemsize
    start = (_address(array) - _address(root)) // item
    offsets = np.full(array.shape, start, dtype=np.int64)
    for axis, (size, stride) in enumerate(zip(array.shape, array.strides)):
        shape = [1] * array.ndim
        shape[axis] = size
        offsets = offsets + (np.arange(size, dtype=np.int64) * (stride // item)).reshape(shape)
    return offsets


def _address(array: Any) -> int:
    """Where an array's first element is in memory (NumPy or CuPy)."""
    if _is_cupy_array(array):
        return array.data.ptr
    return array.__array_interface__["data"][0]


def diagonal_view(array: Any, offset: int, axis1: int, axis2: int) -> Any:
    """The diagonal `offset` of the matrices that axes axis1 and axis2 span, as a new last
    axis: a view that can be written through (NumPy marks its diagonal views read-only)."""
    if _is_cupy_array(array):
        return array.diagonal(offset, axis1, axis2)
    host = _host_view(array)
    view = np.diagonal(host, offset, axis1, axis2)
    view.flags.writeable = host.flags.writeable
    return (
        view if host is array else namespace(array).asarray(view, device=array.device, copy=False)
    )


def sliding_windows(array: Any, window: tuple, step: tuple, dilation: tuple) -> Any:
    """Every window of the trailing ``len(window)`` axes, as new trailing axes: a read-only
    strided view on NumPy and CuPy, stacked slices elsewhere (windows.py). Window o of an axis
    holds its elements o * step + k * dilation, k < window.
    Shapes: (*lead, *size) -> (*lead, *counts, *window)."""
    if isinstance(array, np.ndarray) or _is_cupy_array(array):
        return windows.strided(ufuncs_of(array), array, window, step, dilation)
    return windows.stacked(namespace(array), array, window, step, dilation)


window_counts = windows.counts  # how many windows fit: sliding_windows' counts


def broadcast_view(array: Any, shape: tuple) -> Any:
    """``broadcast_to(array, shape)`` for `array` of as many axes, made directly on NumPy."""
    return windows.broadcast(namespace(array), array, shape)


def is_contiguous(array: Any) -> bool:
    """Whether `array` is laid out row-major without gaps (PyTorch's ``is_contiguous()``)."""
    flags = getattr(_host_view(array), "flags", None)
    return bool(getattr(flags, "c_contiguous", True)) if flags is not None else True


def contiguous_copy(array: Any) -> Any:
    """A row-major copy of `array` in new memory (``xp.asarray(copy=True)`` keeps a transposed
    layout on NumPy)."""
    host = _host_view(array)
    if isinstance(host, np.ndarray) and host is array:
        return np.array(array, order="C", copy=True)
    if _is_cupy_array(array):
        return ufuncs_of(array).array(array, order="C", copy=True)
    # The strict stand-in: a row-major NumPy copy behind it, on the array's own device.
    return namespace(array).asarray(np.array(host, order="C", copy=True), device=array.device)


def copied(array: Any) -> Any:
    """A new array with `array`'s values (a NumPy scalar stays as it is: it cannot change)."""
    if isinstance(array, np.generic):
        return array
    if isinstance(array, np.ndarray):
        return array.copy()
    return namespace(array).asarray(array, copy=True)


def squared_norm(array: Any) -> Any:
    """The sum of the squares of all elements, a 0-d array of the array's dtype: one dot
    product of the flattened array with itself (no temporary of its size, as x * x would be)."""
    xp = namespace(array)
    flat = xp.reshape(array, (-1,))
    return xp.asarray(xp.vecdot(flat, flat))


def multiply_into(target: Any, factor: Any) -> None:
    """``target *= factor`` in place, in target's dtype (factor a number or a 0-d array)."""
    if has_out(target):
        ufuncs_of(target).multiply(target, factor, out=target)
        return
    target[...] = target * factor


def clip_into(array: Any, low: float, high: float) -> Any:
    """``array`` clipped to [low, high], with NaN sent to ``low``; in place where the library
    takes ``out=``, else a new array."""
    if isinstance(array, np.ndarray):
        # NumPy's fmax and fmin against a scalar go value by value, where clip runs a vector
        # loop: with the NaN found afterwards it took 23 us against 54 on 32,768 float32 values
        # (an AVX2 CPU), with the same result.
        array.clip(low, high, out=array)
        np.copyto(array, low, where=np.isnan(array))
        return array
    if has_out(array):  # CuPy: fmax and fmin pass over NaN, one fused kernel each
        u = ufuncs_of(array)
        u.fmax(array, low, out=array)
        return u.fmin(array, high, out=array)
    xp = namespace(array)
    return xp.minimum(xp.where(array >= low, array, low), high)


def take_in_range(table: Any, index: Any) -> Any:
    """``table[index]`` for a 1-d table and an integer index array known to lie in range.

    NumPy's take checks every index against the bounds unless told to wrap them; wrapping
    changes nothing for indices in range, and the method skips np.take's dispatch: 11.8 us
    against 13.9 (np.take, wrapping) and 14 or more (checking) on 8,192 float32 values.
    """
    if isinstance(table, np.ndarray):
        return table.take(index, mode="wrap")
    xp = namespace(table)  # the standard's take wants a 1-d index
    return xp.reshape(xp.take(table, xp.reshape(index, (-1,))), index.shape)


def has_out(array: Any) -> bool:
    """Whether the array's library takes ``out=`` in its ufuncs and matmul (NumPy, CuPy)."""
    return isinstance(array, np.ndarray) or _is_cupy_array(array)


def ufuncs_of(array: Any) -> Any:
    """The module whose functions take ``out=`` for this array: numpy or cupy."""
    if isinstance(array, np.ndarray):
        return np
    import cupy  # noqa: PLC0415  (only reached for CuPy arrays)

    return cupy


def graph_runner(array: Any) -> Any:
    """A `CudaGraphs` for a CuPy array's device, or None: NumPy and the strict stand-in have no
    graphs, so a compiled step replays its program call by call there."""
    if not _is_cupy_array(array):
        return None
    import cupy  # noqa: PLC0415  (only reached for CuPy arrays)

    return CudaGraphs(cupy)


# ------------------------------------------------------------------------------------- conversion
def asarray(data: Any, dtype: Any = None, device: Any = None) -> Any:
    """Build an array on `device` (a spec) from Python data, a NumPy array, or a backend array.

    Python floats become float32 (the default float dtype), as in PyTorch; NumPy arrays keep
    their dtype. Ragged or non-numeric data raise a TypeError or ValueError naming the problem.
    """
    xp, native = resolve_device(device)
    if isinstance(data, meta.MetaArray) and xp is meta:  # shapes only: nothing to copy
        return meta.asarray(data, dtype=dtype)
    if not is_host_array(data) and not isinstance(data, (int, float, bool, list, tuple)):
        if hasattr(data, "shape") and hasattr(data, "dtype"):
            data = to_numpy(data)  # an explicit transfer from another device or library
        else:
            raise TypeError(f"tensor: cannot build a tensor from {type(data).__name__}")
    try:
        host = np.asarray(data)
    except ValueError as exc:
        raise TinyattnError(
            f"tensor: data is ragged (nested sequences of unequal length): {exc}"
        ) from None
    if host.dtype == np.uint64 and not is_host_array(data):  # Python ints from 2**63 up
        raise TinyattnError(f"tensor: a value of {np.max(host)} overflows int64, as in PyTorch")
    if host.dtype.kind not in "biuf":
        raise TypeError(f"tensor: data must be numeric or bool, got NumPy dtype {host.dtype}")
    if dtype is None and host.dtype == np.float64 and not is_host_array(data):
        dtype = "float32"  # Python floats become the default float dtype
    if isinstance(dtype, str):
        dtype = dtype_of_name(xp, dtype)
    if xp is np:
        return host.astype(dtype, copy=True) if dtype is not None else host.copy()
    if dtype is not None:
        host = host.astype(dtype_name(dtype))
    return _onto(xp, host, native)


def _onto(xp: Any, host: np.ndarray, native: Any) -> Any:
    """A device array with `host`'s values, never sharing its memory: CuPy copies to the GPU;
    the strict stand-in wraps NumPy memory, so it is asked for a copy (a tensor built from an
    array, or moved to a device, is a new tensor there, as in PyTorch)."""
    if xp is sys.modules.get("array_api_strict"):
        return xp.asarray(host, device=native, copy=True)
    return xp.asarray(host, device=native)


def to_numpy(array: Any, what: str = "") -> np.ndarray:
    """The one device-to-host path; refused for meta arrays, naming the read `what` ("item()")."""
    if isinstance(array, np.ndarray | np.generic):
        return np.asarray(array)  # the array itself; a 0-d array for a NumPy scalar
    if _is_cupy_array(array):
        return array.get()
    if isinstance(array, meta.MetaArray):
        raise meta.no_values(what)
    strict = _strict()
    # A copy, as CuPy's: moved to its CPU device, a strict array may still share its buffer.
    return np.array(strict.asarray(array, device=strict.Device("CPU_DEVICE")), copy=True)


def is_on(array: Any, device: Any) -> bool:
    """Whether `array` is already on the device a spec names ('strict' is 'strict:device1')."""
    xp, native = resolve_device(device)
    return namespace(array) is xp and device_of(array) == native


def to_device(array: Any, device: Any) -> Any:
    """Move an array to another device (through the host when the libraries differ)."""
    if is_on(array, device):
        return array
    xp, native = resolve_device(device)
    if xp is not np:
        return _onto(xp, to_numpy(array), native)
    host = to_numpy(array)  # CuPy's is a copy; the stand-in's may be its own memory
    return host if _is_cupy_array(array) else host.copy()


def device_of(array: Any) -> Any:
    return "cpu" if is_host_array(array) else array.device


def dtype_of_name(xp: Any, name: str) -> Any:
    if name == "bfloat16":
        raise TinyattnError(
            "dtype bfloat16 is not supported: NumPy and CuPy have no bfloat16 arrays; "
            "use float32 or float16"
        )
    if name not in DTYPE_NAMES:
        raise TinyattnError(f"unknown dtype {name!r}: expected one of {', '.join(DTYPE_NAMES)}")
    return getattr(xp, name)


def largest_finite(dtype: Any) -> float:
    """The largest finite value of a floating dtype (``finfo(dtype).max``), on any backend."""
    return float(np.finfo(dtype_name(dtype)).max)


def type_limits(dtype: Any) -> dict:
    """The limits of a dtype by name, from NumPy: for a float its finfo (bits, eps, max, min,
    tiny, smallest_normal, resolution), for an integer its iinfo (bits, max, min)."""
    name = dtype_name(dtype)
    if np.dtype(name).kind == "f":
        info = np.finfo(name)
        limits = {field: float(getattr(info, field)) for field in ("eps", "max", "min", "tiny")}
        # PyTorch's resolution is the Python float 10**-precision, not NumPy's rounded one.
        resolution = 10.0**-info.precision
        return {
            "bits": info.bits,
            **limits,
            "smallest_normal": limits["tiny"],
            "resolution": resolution,
        }
    info = np.iinfo(name)
    return {"bits": info.bits, "max": int(info.max), "min": int(info.min)}


def dtype_name(dtype: Any) -> str:
    """'float32' for np.float32, np.dtype('float32'), array_api_strict.float32 and CuPy alike."""
    if isinstance(dtype, str):
        return dtype
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype).rsplit(".", 1)[-1]


def quiet_invalid() -> Any:
    """A context in which NumPy does not warn of invalid values (0 * inf), for an op that forms
    such a product on purpose and replaces it (CuPy and the strict namespace never warn)."""
    return np.errstate(invalid="ignore")


_HALF_TYPE = type(np.dtype("float16"))  # CuPy arrays carry NumPy dtypes; strict has no float16


def is_half(array: Any) -> bool:
    """Whether an array is float16: the one dtype PyTorch's CPU kernels widen to float32 for
    sums, norms, softmax and layer norm. A type test: never compares dtypes across libraries."""
    return type(array.dtype) is _HALF_TYPE


_FLOATING: dict = {}
_last_dtype: Any = None
_last_is_float = False


def is_float_array(array: Any) -> bool:
    """Whether an array has a real floating dtype (one dict lookup once the dtype is known)."""
    global _last_dtype, _last_is_float
    dtype = array.dtype
    if dtype is _last_dtype:  # a training loop sees one dtype over and over
        return _last_is_float
    known = _FLOATING.get((type(dtype), dtype))
    if known is None:
        known = is_floating(namespace(array), dtype)
    _last_dtype, _last_is_float = dtype, known
    return known


def is_floating(xp: Any, dtype: Any) -> bool:
    """Whether `dtype` is a real floating dtype (cached: isdtype is slow for a hot path)."""
    # Keyed with the dtype's type: NumPy and array_api_strict dtypes must never be compared.
    key = (type(dtype), dtype)
    known = _FLOATING.get(key)
    if known is None:
        known = _FLOATING[key] = bool(xp.isdtype(dtype, "real floating"))
    return known


def check_floating(op: str, array: Any) -> None:
    """Raise ``TypeError('op: expected a floating-point tensor, got dtype D')`` unless floating.

    The one spelling of "this op needs a float input": gradients exist only for real floats.
    """
    if not is_float_array(array):
        raise TypeError(
            f"{op}: expected a floating-point tensor, got dtype {dtype_name(array.dtype)}"
        )


# ------------------------------------------------------------------------------------------- RNG
def manual_seed(seed: int) -> None:
    """Seed the host generator that every random factory and init draws from."""
    global _host_rng, _reseeds
    _host_rng = np.random.default_rng(seed)
    _reseeds += 1


# How many times the generator was seeded or set: a compiled step refuses a step that does it
# (a replay would not, and would draw on from where the last draw left off).
_reseeds = 0


def reseeds() -> int:
    """How many times `manual_seed` or `set_rng_state` has run in this process."""
    return _reseeds


def get_rng_state() -> dict[str, Any]:
    """A snapshot of the host generator that every random factory, init and dropout mask draws
    from: a plain dict of strings and integers (NumPy's bit-generator state), so `ta.save`, json
    and pickle store it as it is. PyTorch's `get_rng_state` returns a uint8 tensor instead; the
    meaning is the same: `set_rng_state(state)` makes the draws that follow repeat exactly.
    """
    return _host_rng.bit_generator.state  # a fresh dict on every call: later draws leave it be


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the host generator to `state`, a snapshot taken by :func:`get_rng_state`."""
    current = _host_rng.bit_generator.state
    if not isinstance(state, dict):
        raise TypeError(
            f"set_rng_state: expected the dict returned by get_rng_state(), got "
            f"{type(state).__name__}"
        )
    if set(state) != set(current) or state.get("bit_generator") != current["bit_generator"]:
        raise TinyattnError(
            f"set_rng_state: expected a {current['bit_generator']} state with keys "
            f"{sorted(current)} (from get_rng_state()), got keys {sorted(map(str, state))}"
        )
    try:
        _host_rng.bit_generator.state = state
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        raise TinyattnError(f"set_rng_state: not a valid generator state: {exc}") from None
    global _reseeds
    _reseeds += 1


def host_rng() -> np.random.Generator:
    return _host_rng


def make_rng(seed: int) -> np.random.Generator:
    """An independent host generator (gradcheck's cotangents and directions)."""
    return np.random.default_rng(seed)


def host_zeros(shape: tuple) -> np.ndarray:
    return np.zeros(shape, dtype=np.float64)


draw_hook: Any = None  # set while ta.compile records a step


def set_draw_hook(hook: Any) -> None:
    """While ta.compile records a step, every draw is reported to `hook(function, args, result)`
    so that a replay draws anew (a function of None: the draw cannot be replayed)."""
    global draw_hook
    draw_hook = hook


def random_array(kind: str, shape: tuple, dtype: Any, device: Any) -> Any:
    """Draw on the host (so every device starts from the same numbers), then transfer."""
    xp, native = resolve_device(device)
    if isinstance(dtype, str):
        dtype = dtype_of_name(np, dtype)
    dtype = np.dtype(DEFAULT_FLOAT if dtype is None else dtype_name(dtype))
    if kind == "normal":
        host = _host_rng.standard_normal(shape)
    elif kind == "uniform":
        host = _host_rng.random(shape)
    else:
        raise TinyattnError(f"unknown random kind {kind!r}")
    host = host.astype(dtype)
    result = host if xp is np else xp.asarray(host, device=native)
    if draw_hook is not None:
        draw_hook(random_array, (kind, shape, dtype, device), result)
    return result


def bernoulli_mask(shape: tuple, keep: float, like: Any) -> Any:
    """A boolean keep-mask for dropout, drawn on the host and moved next to `like`."""
    host = _host_rng.random(shape) < keep
    xp = namespace(like)
    result = host if xp is np else xp.asarray(host, device=like.device)
    if draw_hook is not None:
        draw_hook(bernoulli_mask, (shape, keep, like), result)
    return result


# -------------------------------------------------------------------------------------- layout
def contiguous(array: Any) -> Any:
    """The same values laid out row-major (C order): a copy unless they already are.

    The array API has no memory layout; NumPy and CuPy do, and reductions and matrix products
    run several times faster on some layouts than others. Other namespaces get `array` back.
    """
    if isinstance(array, np.ndarray):
        return np.ascontiguousarray(array)
    if _is_cupy_array(array):
        import cupy  # noqa: PLC0415  (only reached with a CuPy array, so CuPy is importable)

        return cupy.ascontiguousarray(array)
    return array


# ----------------------------------------------------------------------------------- scatter-add
# Above this many one-hot entries (n indices x N rows), scatter with add.at instead.
ONE_HOT_LIMIT = 1 << 20


def scatter_add(target: Any, indices: Any, values: Any) -> Any:
    """Return ``target`` with ``values[i]`` added to row ``indices[i]`` (repeats summed).

    Shapes: target (N, *rest), indices (n,), values (n, *rest). NumPy and CuPy use ``add.at``
    (CuPy's atomics) for large problems; small ones, and other namespaces, use a one-hot matmul,
    O(n * N * rest) but one BLAS call: 20x faster than NumPy's add.at for an embedding gradient of
    1024 tokens over a vocabulary of 16.
    """
    xp = namespace(target)
    small = indices.shape[0] * target.shape[0] <= ONE_HOT_LIMIT
    if (xp is np or _is_cupy_array(target)) and not small:
        out = target.copy()
        xp.add.at(out, indices, values)
        return out
    rows = target.shape[0]
    rest = values.shape[1:]
    flat_values = xp.reshape(values, (values.shape[0], math.prod(rest)))
    one_hot = xp.astype(
        indices[:, None] == xp.arange(rows, device=target.device)[None, :], values.dtype
    )
    added = xp.reshape(xp.matrix_transpose(one_hot) @ flat_values, (rows, *rest))
    return target + added


# ------------------------------------------------------------------------------------ sampling
def multinomial(probabilities: np.ndarray, num_samples: int, replacement: bool) -> np.ndarray:
    """Draw `num_samples` category indices per row of (rows, categories) host weights from the
    seeded host generator; without replacement each row's indices are distinct. int64."""
    if draw_hook is not None:
        draw_hook(None, ("multinomial",), None)
    rows = []
    for weights in probabilities:
        p = weights.astype(np.float64) / weights.astype(np.float64).sum()
        rows.append(_host_rng.choice(len(p), size=num_samples, replace=replacement, p=p))
    return np.asarray(rows, dtype=np.int64).reshape(len(rows), num_samples)


def random_permutation(n: int, dtype: Any, device: Any) -> Any:
    """0 .. n-1 in a random order from the seeded host generator, moved to `device`."""
    xp, native = resolve_device(device)
    host = _host_rng.permutation(n).astype(dtype_name(dtype or "int64"))
    result = host if xp is np else xp.asarray(host, device=native)
    if draw_hook is not None:
        draw_hook(random_permutation, (n, dtype, device), result)
    return result


def random_integers(low: int, high: int, shape: tuple, dtype: Any, device: Any) -> Any:
    """Integers uniform in [low, high) from the seeded host generator, moved to `device`."""
    xp, native = resolve_device(device)
    host = _host_rng.integers(low, high, size=shape).astype(dtype_name(dtype or "int64"))
    result = host if xp is np else xp.asarray(host, device=native)
    if draw_hook is not None:
        draw_hook(random_integers, (low, high, shape, dtype, device), result)
    return result


# Results whose shape depends on the values, and host-computed ranges: in their own file.
from .data_dependent import bincount, evenly_spaced, nonzero, unique  # noqa: E402, F401
