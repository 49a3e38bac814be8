"""PyTorch's checkpoint format: the zip that torch.save writes, read and written on host arrays.

Part of the backend layer (it makes NumPy arrays from raw storage bytes); tinyattn.serialization
is the public door and hands in what this layer may not import (how to make a Tensor, which
globals are allowed). The zip holds ``<name>/data.pkl`` (the pickled value; each tensor is a
call of ``torch._utils._rebuild_tensor_v2`` on a storage named by a persistent id
``("storage", torch.FloatStorage, key, location, numel)``), ``<name>/data/<key>`` (each storage's
raw bytes), ``<name>/byteorder`` and ``<name>/version``. The pickle is read by torch_pickle's
stack machine, never by `pickle`. A file is untrusted input, as in files.py: the archive is
checked as an .npz is (names, stored sizes, inflation) before anything is read, a storage must
be exactly the bytes data.pkl declares for it, entries are read in CHUNK-sized pieces, and a
tensor's offset, sizes and strides must stay inside its storage.
"""

from __future__ import annotations

import os
import zipfile
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from reprlib import repr as short  # a hostile value's repr, cut short (a deep one cannot recurse)
from typing import Any

import numpy as np

from ..errors import TinyattnError
from .files import CHUNK, _check_archive
from .torch_pickle import Global, PersistentId, PickleReader, PickleWriter, Reduce

# torch.save's storage classes for the dtypes tinyattn has (bfloat16 is widened to float32).
STORAGE_DTYPES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
}  # fmt: skip
_STORAGE_OF = {dtype: name for name, dtype in STORAGE_DTYPES.items()}
_LITTLE = {"float64": "<f8", "float32": "<f4", "float16": "<f2", "bfloat16": "<u2",
           "int64": "<i8", "int32": "<i4", "int16": "<i2", "int8": "i1", "uint8": "u1",
           "bool": "?"}  # fmt: skip
ALIGNMENT = 64  # where torch.save puts each storage's first byte, so that mmap can map it


@dataclass
class TorchHooks:
    """What the reader needs from the layers above: ``tensor(array, requires_grad, location)``
    makes a Tensor viewing `array`; ``parameter(tensor, requires_grad)`` a Parameter of it;
    ``device(name)`` a device; ``resolve(module, name)`` any global outside PyTorch's own
    weights-only set (allowed ones, or an error); ``buildable(cls)`` whether an instance of a
    class the file did not name may be given state (one allowed by add_safe_globals)."""

    tensor: Callable[[np.ndarray, bool, str], Any]
    parameter: Callable[[Any, bool], Any]
    device: Callable[[str], Any]
    resolve: Callable[[str, str], Any]
    buildable: Callable[[type], bool]


@dataclass
class _Storage:
    array: np.ndarray  # 1-D, of the storage's dtype (bfloat16 widened, native byte order)
    dtype: str
    location: str


class _MissingDtype(str):
    """A torch dtype tinyattn lacks (``torch.uint16``), as a value; a tensor of it is refused."""


def is_torch_zip(file: Any) -> bool:
    """Whether the zip in the binary `file` is torch.save's (it holds ``<name>/data.pkl``)."""
    try:
        with zipfile.ZipFile(file) as archive:
            return any(name.rpartition("/")[2] == "data.pkl" for name in archive.namelist())
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):
        return False  # a damaged zip: the .npz reader names what is wrong with it
    finally:
        file.seek(0)


# ------------------------------------------------------------------------------------ reading
def load_torch_zip(file: Any, hooks: TorchHooks, mmap_path: str | None = None) -> Any:
    """The value a torch.save zip holds. With `mmap_path` (the file's path), storages are
    copy-on-write maps of the file (PyTorch's ``mmap=True``) instead of copies read into memory."""
    size = file.seek(0, os.SEEK_END)
    file.seek(0)
    with zipfile.ZipFile(file) as archive:
        infos = archive.infolist()
        _check_archive(infos, size)
        pickled = next(info for info in infos if info.filename.rpartition("/")[2] == "data.pkl")
        prefix = pickled.filename.rpartition("/")[0]
        reader = _StorageReader(archive, prefix, _byteorder(archive, prefix), mmap_path)
        data = bytes(_read(archive, pickled, np.empty(pickled.file_size, np.uint8)))
        known = _torch_globals(hooks)

        def resolve(module: str, name: str) -> Any:
            found = known.get(f"{module}.{name}")
            return found if found is not None else hooks.resolve(module, name)

        shown = repr(pickled.filename)
        return PickleReader(data, resolve, reader.load, shown, hooks.buildable).load()


def unknown_globals(file: Any) -> list[str]:
    """The globals the data.pkl of a torch.save zip names outside PyTorch's weights-only set, as
    ``module.name`` strings, read by disassembling it (nothing is imported or run)."""
    import _compat_pickle  # noqa: PLC0415
    import pickletools  # noqa: PLC0415

    data = _pickle_bytes(file)[0]
    known = _torch_globals(TorchHooks(*(None,) * 5))
    found = set()
    try:
        for opcode, argument, _ in pickletools.genops(data):
            if opcode.name == "GLOBAL":
                module, name = argument.split(" ", 1)
                module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
                found.add(f"{_compat_pickle.IMPORT_MAPPING.get(module, module)}.{name}")
    except ValueError as exc:
        raise TinyattnError(f"its data.pkl is not a complete pickle ({exc})") from None
    return sorted(found - set(known))


def _pickle_bytes(file: Any) -> tuple[bytes, str]:
    """The checked bytes of a torch.save zip's data.pkl, and the entry's name."""
    size = file.seek(0, os.SEEK_END)
    file.seek(0)
    with zipfile.ZipFile(file) as archive:
        infos = archive.infolist()
        _check_archive(infos, size)
        pickled = next(info for info in infos if info.filename.rpartition("/")[2] == "data.pkl")
        data = bytes(_read(archive, pickled, np.empty(pickled.file_size, np.uint8)))
    return data, pickled.filename


def _byteorder(archive: zipfile.ZipFile, prefix: str) -> str:
    try:
        info = archive.getinfo(f"{prefix}/byteorder")
    except KeyError:
        return "little"  # files from before PyTorch 1.10 have none: they were little-endian
    order = bytes(_read(archive, info, np.empty(min(info.file_size, 16), np.uint8))).decode()
    if order not in ("little", "big"):
        raise TinyattnError(f"entry {info.filename!r} says byte order {short(order)}")
    return order


def _read(archive: zipfile.ZipFile, info: zipfile.ZipInfo, into: np.ndarray) -> np.ndarray:
    """The entry's bytes into the uint8 array `into`, CHUNK bytes at a time, never past it."""
    buffer, done = memoryview(into), 0
    with archive.open(info) as member:
        while done < len(buffer):
            got = member.readinto(buffer[done : done + CHUNK])
            if not got:
                raise TinyattnError(f"entry {info.filename!r} ends after {done} bytes")
            done += got
    return into


class _StorageReader:
    """persistent_load for data.pkl: each storage once, checked against its entry."""

    def __init__(self, archive: Any, prefix: str, byteorder: str, mmap_path: str | None):
        self._archive, self._prefix, self._byteorder = archive, prefix, byteorder
        self._mmap_path = mmap_path
        self._storages: dict[str, _Storage] = {}

    def load(self, pid: Any) -> _Storage:
        if not (type(pid) is tuple and len(pid) == 5 and pid[0] in ("storage", b"storage")):
            raise TinyattnError(f"data.pkl names a persistent id {short(pid)}, not a storage")
        _, dtype, key, location, numel = pid
        if not (isinstance(dtype, str) and isinstance(key, str) and isinstance(location, str)):
            raise TinyattnError(f"data.pkl names a malformed storage {short(pid)}")
        if type(numel) is not int or numel < 0:
            raise TinyattnError(f"storage {key!r} declares {short(numel)} elements")
        known = self._storages.get(key)
        if known is None:
            known = self._storages[key] = _Storage(self._array(key, dtype, numel), dtype, location)
        elif known.dtype != dtype:
            raise TinyattnError(f"storage {key!r} is named as {known.dtype} and as {dtype}")
        return known

    def _array(self, key: str, dtype: str, numel: int) -> np.ndarray:
        name = f"{self._prefix}/data/{key}"
        try:
            info = self._archive.getinfo(name)
        except KeyError:
            raise TinyattnError(
                f"data.pkl names storage {key!r}, but there is no entry {name!r}"
            ) from None
        layout = np.dtype(_LITTLE[dtype]).newbyteorder("<" if self._byteorder == "little" else ">")
        if info.file_size != numel * layout.itemsize:
            raise TinyattnError(
                f"storage {key!r} holds {numel} {dtype} elements ({numel * layout.itemsize} "
                f"bytes) by data.pkl, but entry {name!r} declares {info.file_size} bytes"
            )
        if self._mmap_path is not None:
            raw = self._mapped_bytes(info)
        else:
            raw = _read(self._archive, info, np.empty(info.file_size, np.uint8))
        array = raw.view(layout)
        if not layout.isnative:
            array = array.astype(layout.newbyteorder("="))
        if dtype == "bfloat16":  # the top half of a float32: widened exactly
            array = (array.astype(np.uint32) << 16).view(np.float32)
        return array

    def _mapped_bytes(self, info: zipfile.ZipInfo) -> np.ndarray:
        """The entry's bytes as a copy-on-write map of the file (one map per storage, so a
        tensor's memory is its storage's alone), when the entry is stored as it is."""
        with open(self._mmap_path, "rb") as file:
            file.seek(info.header_offset)
            header = file.read(30)
            size = file.seek(0, os.SEEK_END)
        if info.compress_type != zipfile.ZIP_STORED or header[:4] != b"PK\x03\x04":
            raise TinyattnError(f"entry {info.filename!r} is compressed: load it without mmap")
        start = info.header_offset + 30 + int.from_bytes(header[26:28], "little")
        start += int.from_bytes(header[28:30], "little")
        if start + info.file_size > size:
            raise TinyattnError(f"entry {info.filename!r} runs past the end of the file")
        if info.file_size == 0:  # mmap cannot map nothing
            return np.empty(0, np.uint8)
        return np.memmap(self._mmap_path, np.uint8, "c", start, (info.file_size,))


def _tensor(
    storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any = False, *rest: Any
) -> np.ndarray:
    """The strided view of a storage that ``_rebuild_tensor_v2`` describes, checked to lie in it."""
    if not isinstance(storage, _Storage):
        raise TinyattnError(f"a tensor is rebuilt from a {type(storage).__name__}, not a storage")
    numbers = (offset, *size, *stride)
    if not all(type(n) is int and n >= 0 for n in numbers) or len(size) != len(stride):
        raise TinyattnError(
            f"a tensor has offset {short(offset)}, size {short(size)} and stride {short(stride)}"
        )
    array = storage.array
    last = offset + sum((n - 1) * step for n, step in zip(size, stride, strict=True))
    if (0 not in size and last >= len(array)) or offset > len(array):
        raise TinyattnError(
            f"a tensor of size {tuple(size)}, stride {tuple(stride)} and offset {offset} reaches "
            f"element {last} of a storage of {len(array)}"
        )
    if 0 in size:
        return np.empty(tuple(size), array.dtype)
    steps = tuple(step * array.itemsize for step in stride)
    # A view whose .base is the storage array: its tensors share one root, for saving and for
    # tinyattn's own view bookkeeping (as_strided's base would be a stand-in object).
    return np.ndarray(tuple(size), array.dtype, array, offset * array.itemsize, steps)


def _torch_globals(hooks: TorchHooks) -> dict[str, Any]:
    """PyTorch's weights-only globals, each as a function of tinyattn's own."""

    def rebuild_v2(storage, offset, size, stride, requires_grad=False, *rest):
        return hooks.tensor(_tensor(storage, offset, size, stride), requires_grad, storage.location)

    def rebuild_v3(storage, offset, size, stride, requires_grad, hooks_, dtype, *rest):
        if isinstance(dtype, _MissingDtype) or dtype not in _LITTLE:
            raise TinyattnError(f"a tensor has dtype {dtype}, which tinyattn does not have")
        if storage.dtype != "uint8":
            raise TinyattnError(f"a {dtype} tensor is rebuilt from a {storage.dtype} storage")
        typed = _Storage(storage.array.view(_LITTLE[dtype]), dtype, storage.location)
        return rebuild_v2(typed, offset, size, stride, requires_grad)

    def from_type(func, new_type, args, state):
        if state or new_type not in ("torch.Tensor", "torch.nn.parameter.Parameter"):
            raise TinyattnError(
                f"a tensor of class {short(new_type)} with attributes {short(state)}"
            )
        tensor = func(*args)
        return tensor if new_type == "torch.Tensor" else hooks.parameter(tensor, True)

    found: dict[str, Any] = {
        "collections.OrderedDict": OrderedDict,
        "collections.Counter": Counter,
        "torch._utils._rebuild_tensor_v2": rebuild_v2,
        "torch._utils._rebuild_tensor": rebuild_v2,
        "torch._utils._rebuild_tensor_v3": rebuild_v3,
        "torch._utils._rebuild_parameter": lambda data, grad, *rest: hooks.parameter(data, grad),
        "torch._utils._rebuild_parameter_with_state": _parameter_with_state(hooks),
        "torch._tensor._rebuild_from_type_v2": from_type,
        "torch.Tensor": "torch.Tensor",
        "torch.nn.parameter.Parameter": "torch.nn.parameter.Parameter",
        "torch.Size": lambda sizes=(): tuple(int(n) for n in sizes),
        "torch.device": lambda *parts: hooks.device(":".join(str(part) for part in parts)),
        "_codecs.encode": _encode,
        "builtins.bytearray": lambda data=b"": bytearray(_bytes_only(data)),
        "builtins.set": set,
        "builtins.complex": complex,
        "torch.storage.UntypedStorage": "uint8",
    }
    for storage, dtype in STORAGE_DTYPES.items():
        found[f"torch.{storage}"] = dtype
    for dtype in ("float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8"):
        found[f"torch.{dtype}"] = dtype
    found["torch.bool"] = "bool"
    for missing in ("bfloat16", "uint16", "uint32", "uint64", "complex64", "complex128"):
        found[f"torch.{missing}"] = _MissingDtype(f"torch.{missing}")
    return found


def _parameter_with_state(hooks: TorchHooks) -> Callable:
    def rebuild(data: Any, requires_grad: bool, backward_hooks: Any, state: Any) -> Any:
        if state:
            raise TinyattnError(f"a Parameter with attributes {short(state)}")
        return hooks.parameter(data, requires_grad)

    return rebuild


def _encode(text: Any, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode(text, "latin1")``: how protocol 2 writes bytes."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise TinyattnError(f"_codecs.encode of a {type(text).__name__} as {short(encoding)}")
    return text.encode("latin-1")


def _bytes_only(data: Any) -> bytes:
    if not isinstance(data, bytes):  # bytearray(10**12) would allocate what it says
        raise TinyattnError(f"bytearray of a {type(data).__name__}, not of bytes")
    return data


# ------------------------------------------------------------------------------------ writing
TensorParts = Callable[[Any], "tuple[np.ndarray, bool, bool, str] | None"]


def save_torch_zip(file: Any, obj: Any, tensor_parts: TensorParts, device_name: Callable) -> None:
    """Write `obj` to the binary `file` as torch.save does. ``tensor_parts(value)`` is (host
    array, requires_grad, is a Parameter, location) for a tinyattn tensor, else None;
    ``device_name(value)`` a device's name, else None. Tensors whose arrays view one NumPy array
    share its storage, as views of one tensor do in PyTorch; other values PyTorch's weights-only
    loader could not read raise TypeError naming their path."""
    storages = _StorageTable()

    def leaf(value: Any, path: str) -> Reduce | Global:
        parts = tensor_parts(value)
        if parts is not None:
            return storages.tensor(*parts, path)
        if isinstance(value, np.ndarray | np.generic | np.dtype):
            return _numpy_reduce(value, path)
        if isinstance(value, type) and value in (np.ndarray, np.dtype):
            return Global("numpy", value.__name__)
        name = device_name(value)
        if name is not None:
            return Reduce(Global("torch", "device"), (name,))
        raise TypeError(
            f"save: cannot write the {type(value).__name__} at {path or 'the top'!r} in "
            "PyTorch's format, which torch.load(weights_only=True) reads only for tensors, "
            "numbers, strings, bytes, devices and dicts, lists, tuples and sets of them"
        )

    data = PickleWriter(leaf).dumps(obj)
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        _record(archive, "data.pkl", data)
        _record(archive, ".format_version", b"1")
        _record(archive, ".storage_alignment", str(ALIGNMENT).encode())
        _record(archive, "byteorder", b"little")
        for key, array in storages.arrays.items():
            _record(archive, f"data/{key}", array)
        _record(archive, "version", b"3\n")


class _StorageTable:
    """The storages of a save: one per (NumPy array that owns the memory, dtype) that tensors
    view, when the owner is contiguous; else one per tensor (a contiguous copy of it)."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}  # key -> the 1-d array to write
        self._keys: dict[tuple[int, str], str] = {}  # (id(owner), dtype) -> key
        self._kept: list[np.ndarray] = []  # owners stay alive, so their ids stay unique

    def tensor(
        self, array: np.ndarray, requires_grad: bool, parameter: bool, location: str, path: str
    ) -> Reduce:
        dtype = array.dtype.name
        if dtype not in _STORAGE_OF:
            raise TypeError(f"save: the tensor at {path!r} has dtype {dtype}")
        owner, offset, strides = _storage_view(array)
        key = self._keys.get((id(owner), dtype))
        if key is None:
            key = self._keys[(id(owner), dtype)] = str(len(self.arrays))
            self.arrays[key] = owner.reshape(-1).view(array.dtype.newbyteorder("="))
            self._kept.append(owner)
        numel = self.arrays[key].size
        storage = ("storage", Global("torch", _STORAGE_OF[dtype]), key, location, numel)
        hooks = Reduce(Global("collections", "OrderedDict"), ())
        args = (PersistentId(storage), offset, array.shape, strides, requires_grad, hooks)
        rebuilt = Reduce(Global("torch._utils", "_rebuild_tensor_v2"), args)
        if not parameter:
            return rebuilt
        hooks = Reduce(Global("collections", "OrderedDict"), ())
        return Reduce(Global("torch._utils", "_rebuild_parameter"), (rebuilt, requires_grad, hooks))


def _storage_view(array: np.ndarray) -> tuple[np.ndarray, int, tuple[int, ...]]:
    """(owner, offset, strides), offset and strides in elements, such that `array` is that view
    of the owner's bytes read as its dtype; the owner is a contiguous copy when it cannot be."""
    owner = array
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    item = array.itemsize
    if owner.flags.c_contiguous and owner.nbytes % item == 0 and array.dtype.isnative:
        start = array.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
        steps = array.strides
        if start >= 0 and start % item == 0 and all(s >= 0 and s % item == 0 for s in steps):
            return owner, start // item, tuple(s // item for s in steps)
    own = np.array(array, order="C", dtype=array.dtype.newbyteorder("="))
    return own, 0, tuple(s // item for s in own.strides)


def _numpy_reduce(value: Any, path: str) -> Reduce:
    """A NumPy array, scalar or dtype as NumPy pickles itself (as torch.save writes it)."""
    if getattr(value, "dtype", value).hasobject:
        raise TypeError(f"save: the NumPy value at {path!r} holds Python objects")
    func, args, *state = value.__reduce__()
    return Reduce(Global(func.__module__, func.__name__), args, state[0] if state else None)


def _record(archive: zipfile.ZipFile, name: str, data: bytes | np.ndarray) -> None:
    """One stored member ``archive/<name>``, its first byte at a multiple of ALIGNMENT (an
    extra field of zeros pads the local header, as torch.save pads it)."""
    full = f"archive/{name}"
    info = zipfile.ZipInfo(full, date_time=(1980, 1, 1, 0, 0, 0))
    view = memoryview(data if isinstance(data, bytes) else data.reshape(-1).view(np.uint8))
    info.file_size = len(view)
    zip64 = info.file_size > zipfile.ZIP64_LIMIT
    header = 30 + len(full.encode()) + 4 + (20 if zip64 else 0)
    pad = -(archive.fp.tell() + header) % ALIGNMENT
    info.extra = b"FB" + pad.to_bytes(2, "little") + bytes(pad)
    with archive.open(info, "w", force_zip64=zip64) as member:
        for start in range(0, len(view), CHUNK):
            member.write(view[start : start + CHUNK])


__all__ = [
    "STORAGE_DTYPES",
    "TorchHooks",
    "is_torch_zip",
    "load_torch_zip",
    "save_torch_zip",
    "unknown_globals",
]
