"""Serialization layer: ta.save / ta.load of tensors, state dicts and whole modules.

Imports `backend`, `tensor` and `tree` (the manifest tree and the allowlist); the file
formats are read and written by `backend`. Invariants: `pickle` never runs on a file (the .npz
checkpoint holds arrays and a JSON manifest; PyTorch's format is read opcode by opcode); a save
to a path is atomic (a temp file in the same directory, fsync, os.replace), so a failed save
leaves the old file intact; a save through a symbolic link replaces the link's target (the link
keeps pointing at the new weights); a special file (a device, a FIFO, a directory) is refused,
never replaced; a new file gets the permissions the umask allows, an existing one keeps its own.

Three formats, chosen by the file name (a file object's ``.name``, if it has one): PyTorch's own
for ``.pt``, ``.pth``, ``.pth.tar``, ``.bin`` and ``.ckpt`` (the zip torch.save writes, read by
``torch.load(f, weights_only=True)``: state dicts and plain containers only, anything else is
refused; see backend/torch_format.py), ``.safetensors`` (a flat ``{name: Tensor}`` state dict,
read by ``safetensors.torch.load_file``) and, for everything else and a file object without a
name (``io.BytesIO``), tinyattn's .npz checkpoint, which also holds whole modules. `load` tells
the formats apart by their content, so any name loads. A torch.save file's pickle is read by a
stack machine that runs only PyTorch's weights-only set of globals (backend/torch_pickle.py),
never by `pickle`.

The .npz checkpoint is an uncompressed NumPy .npz archive, written exactly at the path given.
Each tensor is one array entry, named by its dotted path in the saved value ("q_proj.weight",
"state.0.exp_avg"; inside a Module, the state_dict key: its ``_parameters``, ``_buffers`` and
``_modules`` add no name part; "#2", "#3" is appended where a name repeats), so
``numpy.load(path)`` reads the arrays without tinyattn. The entry "__metadata__" holds UTF-8
JSON ``{"format": "tinyattn-checkpoint", "version": 1 or 2, "tree": node}``. A node is a JSON
object with one key, its kind:

- version 1 (how a tree of dicts, lists, tuples, plain values and plain tensors is written):
  ``{"dict": [[key, node], ...]}`` (str or int keys, order kept), ``{"list": [node, ...]}``,
  ``{"tuple": [node, ...]}``, ``{"value": number | str | bool | null}`` and
  ``{"tensor": entry}`` (a Tensor that requires no grad; the same entry named twice is one
  tensor, so a tensor saved in two places loads as one object).
- version 2 adds: ``{"tensor": [entry, class, requires_grad]}`` (a Parameter, a Tensor subclass,
  or a tensor that requires grad); ``{"items": [[key_node, node], ...]}`` (a dict with other
  keys); ``{"ordered_dict": [[key_node, node], ...]}``; ``{"set": [...]}``,
  ``{"frozenset": [...]}``; ``{"complex": [real, imag]}``; ``{"bytes": hex}``;
  ``{"device": name}``; ``{"ndarray": [entry, scalar]}`` (a NumPy array, or with true a NumPy
  scalar, loaded back as NumPy's); ``{"global": class}`` (a class or function, by import path);
  ``{"object": {"id": n, "class": class, "dict": [[name, node], ...], "slots": [[name, node],
  ...], "state": node}}`` (an instance; "dict", "slots" and "state" are each optional) and
  ``{"ref": n}`` (the object with that id again, written earlier in depth-first order).

A class is written ``"module:qualname"``. An object is saved as pickle saves a plain instance:
its ``__getstate__()``, or its instance dict and set ``__slots__`` (a Module drops only the cache
its `_replay_key` rebuilds); it is rebuilt as pickle rebuilds one, without ``__init__``:
``cls.__new__(cls)``, then ``__setstate__(state)`` where the class defines it, else the dict is
put into ``__dict__`` and each of the class's own slots set (a file naming any other slot, such
as ``__class__``, is refused). Objects and tensors keep their identity within a file
(shared submodules, weight tying, an object that refers to itself); a list, dict or set is
stored by value, so one reached twice loads as two equal containers, and one inside itself is
refused. Views are not kept: a tensor that viewed another loads with its own memory. Tensors
load on `device` (default the CPU), without gradients. Refused at save: functions and classes not
reachable by their import path (lambdas, local functions), bound methods, and instances of
builtin or extension types or of classes with their own ``__reduce__`` (a generator, a file, an
Enum); the error names the value's path; and a value nested deeper than the manifest's
`tree.MAX_DEPTH` levels of JSON, which a load would refuse.

Loading follows PyTorch's ``weights_only=True`` (the default): besides the plain node kinds, only
`tree.PLAIN_GLOBALS` (Tensor, Parameter, the hook lists of a Module) and the globals
allowed with `add_safe_globals` or inside a `safe_globals` block are resolved, by name and
without importing anything; any other class or function raises `UnsafeGlobalError` (a
``pickle.UnpicklingError`` and a ValueError) naming it and how to allow it.
``weights_only=False`` imports each module the file names. That runs the module's top-level
code and the class's ``__new__`` and ``__setstate__``, so load such files only from sources you
trust, as with PyTorch; no pickle bytecode is ever run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import zipfile
import zlib
from typing import Any, BinaryIO

from .. import backend
from ..backend import files, torch_format
from ..backend.files import json_depth
from ..creation import tensor
from ..devices import device as Device
from ..errors import TinyattnError
from ..tensor import Tensor
from .tree import (
    MAX_DEPTH,
    PLAIN_GLOBALS,
    TreeReader,
    TreeWriter,
    UnsafeGlobalError,
    add_safe_globals,
    clear_safe_globals,
    get_safe_globals,
    global_name,
    globals_in,
    import_global,
    resolve_global,
    safe_globals,
)

FORMAT = "tinyattn-checkpoint"
VERSION = 2  # the newest version written; version 1 files (and trees) read as before
_VERSIONS = (1, 2)
# Names under which `save` writes PyTorch's format (the names PyTorch programs give checkpoints).
TORCH_SUFFIXES = (".pt", ".pth", ".pth.tar", ".bin", ".ckpt")
# Modules no load ever takes a global from, whatever is allowed (PyTorch's blocklist).
_BLOCKED_MODULES = ("sys", "os", "posix", "nt")


def save(obj: Any, f: str | os.PathLike | BinaryIO) -> None:
    """Write `obj` to the path or binary file object `f` (PyTorch's ``torch.save(obj, f)``),
    in the format the name says (a file object's ``.name``, if it has one):

    - ``.pt``, ``.pth``, ``.pth.tar``, ``.bin``, ``.ckpt``: PyTorch's own format, which
      ``torch.load(f, weights_only=True)`` reads: a state dict, an optimizer state dict, or any
      nesting of dicts, lists, tuples, sets, Tensors, Parameters, numbers, strings and devices
      (NumPy arrays are written as PyTorch writes them, which its loader reads once allowed).
      Anything else (a whole Module) is refused, never written in a format PyTorch cannot read.
    - ``.safetensors``: a flat state dict (``{str: Tensor}``).
    - any other name, and a file object without one (``io.BytesIO``): a tinyattn .npz
      checkpoint of `obj`, also of a whole Module.

    A path is written atomically; a bad path raises an error that starts with ``save:``.
    """
    name = os.fsdecode(f) if isinstance(f, str | bytes | os.PathLike) else getattr(f, "name", "")
    name = name if isinstance(name, str) else ""
    if name.endswith(TORCH_SUFFIXES):
        make = _torch_payload
    elif name.endswith(".safetensors"):
        make = _safetensors_payload
    else:
        make = _npz_payload
    if hasattr(f, "write"):
        f.write(make(obj))
        return
    path = _save_path(f)
    payload = make(obj)
    try:
        _write_atomically(path, lambda file: file.write(payload))
    except OSError as exc:
        if str(exc).startswith("save:"):
            raise
        error = type(exc)(f"save: cannot write {path!r}: {exc.strerror or exc}")
        error.errno = exc.errno  # the same kind of OSError, with the message first
        raise error from None


def _save_path(f: Any) -> str:
    """`f` as a path string, or a ``save:`` error saying why it is none."""
    if not isinstance(f, str | bytes | os.PathLike):
        raise TypeError(
            f"save: expected a path (str or os.PathLike) or a binary file object, got "
            f"{type(f).__name__}"
        )
    path = os.fsdecode(f)
    if not path or "\0" in path:
        raise TinyattnError(
            f"save: {path!r} is not a file path; give a file name such as 'model.npz'"
        )
    return path


def _npz_payload(obj: Any) -> bytes:
    """The bytes of a tinyattn .npz checkpoint of `obj`."""
    writer = TreeWriter(reserved=files.NPZ_METADATA_ENTRY)
    try:
        tree = writer.node(obj, "")  # all type errors surface before any file is touched
    except RecursionError:  # the writer recurses: a value this deep is far past MAX_DEPTH
        raise _too_deep() from None
    metadata = json.dumps({"format": FORMAT, "version": writer.version, "tree": tree})
    if json_depth(metadata, MAX_DEPTH) > MAX_DEPTH:  # a load would refuse it: refuse it now
        raise _too_deep()
    buffer = io.BytesIO()
    files.save_npz(buffer, {k: backend.to_numpy(v) for k, v in writer.arrays.items()}, metadata)
    return buffer.getvalue()


def _torch_payload(obj: Any) -> bytes:
    """The bytes of a file in PyTorch's format (backend.torch_format) holding `obj`."""
    buffer = io.BytesIO()
    try:
        torch_format.save_torch_zip(buffer, obj, _tensor_parts, _device_name)
    except RecursionError:  # the pickle writer recurses once per level of nesting
        raise TypeError("save: the value nests too deeply to write; flatten it") from None
    except TypeError as exc:
        if "PyTorch's format" not in str(exc):
            raise
        raise TypeError(
            f"{exc}. Save model.state_dict() (PyTorch's way), or the whole object to a .npz "
            "path (tinyattn's own format, which PyTorch cannot read)"
        ) from None
    return buffer.getvalue()


def _tensor_parts(value: Any) -> tuple[Any, bool, bool, str] | None:
    """(host array, requires_grad, is a Parameter, location) of a tensor, for torch_format."""
    if not isinstance(value, Tensor):
        return None
    name = global_name(type(value))
    if name not in PLAIN_GLOBALS:
        raise TypeError(f"save: a {type(value).__name__} (a Tensor subclass) has no torch class")
    if value._ctx is not None and value.requires_grad:
        raise RuntimeError(
            "save: a tensor that requires grad and is not a leaf cannot be saved, as in "
            "PyTorch; save tensor.detach()"
        )
    location = str(value.device) if str(value.device).startswith("cuda") else "cpu"
    parameter = name == "tinyattn.nn.module:Parameter"
    return backend.to_numpy(value.array), value.requires_grad, parameter, location


def _device_name(value: Any) -> str | None:
    return str(value) if isinstance(value, Device) else None


def _too_deep() -> TypeError:
    return TypeError(
        f"save: the value nests deeper than the {MAX_DEPTH} levels of JSON a manifest may have "
        "(a module costs 7 levels per level of submodules, a list 2); flatten it"
    )


def _safetensors_payload(obj: Any) -> bytes:
    """The bytes of a safetensors file holding the flat state dict `obj`."""
    if not isinstance(obj, dict):
        raise TypeError(
            f"save: a .safetensors file holds a flat {{name: Tensor}} state dict, got a "
            f"{type(obj).__name__}; save other objects to a .npz path"
        )
    arrays = {}
    for key, value in obj.items():
        if not isinstance(key, str) or not isinstance(value, Tensor):
            raise TypeError(
                f"save: a .safetensors file holds only str -> Tensor entries; entry {key!r} is a "
                f"{type(value).__name__}. Save nested objects (optimizer state) to a .npz path"
            )
        arrays[key] = value.array
    try:
        return files.safetensors_bytes(
            {k: backend.to_numpy(v) for k, v in arrays.items()}, {"format": "pt"}
        )
    except ImportError:
        raise ImportError(
            "save: writing .safetensors files needs the safetensors package "
            "(pip install safetensors)"
        ) from None


def _target_of(path: str) -> str:
    """Where a save to `path` must write: through symbolic links, to a regular file only."""
    target = os.path.realpath(path) if os.path.islink(path) else path
    if os.path.lexists(target) and not os.path.isfile(target):
        kind = "a directory" if os.path.isdir(target) else "not a regular file"
        shown = path if target == path else f"{path!r} -> {target!r}"
        raise TinyattnError(f"save: {shown!r} is {kind}; refusing to replace it with a checkpoint")
    directory = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(directory):  # else the error would name the temporary file
        raise FileNotFoundError(f"save: directory {directory!r} does not exist (saving {path!r})")
    return target


def _new_file_mode(target: str) -> int:
    """An existing file keeps its permissions; a new one gets 0o666 less the umask."""
    if os.path.exists(target):
        return os.stat(target).st_mode & 0o7777
    return 0o666 & ~_umask()


def _umask() -> int:
    # Linux shows the umask in /proc without changing it; os.umask() must set it to read it,
    # which for a moment changes it for every thread, so it is only the fallback.
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_atomically(path: str, write: Any) -> None:
    """Call ``write(file)`` on a temporary file beside the target, then rename it over it."""
    target = _target_of(path)
    import tempfile  # noqa: PLC0415  (imported when saving: keeps `import tinyattn` fast)

    directory = os.path.dirname(os.path.abspath(target))
    handle, temporary = tempfile.mkstemp(
        prefix="." + os.path.basename(target) + ".", suffix=".tmp", dir=directory
    )
    try:
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fchmod(file.fileno(), _new_file_mode(target))  # mkstemp made it 0600
            os.fsync(file.fileno())
        os.replace(temporary, target)  # atomic on POSIX and Windows: readers see old or new
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def load(
    f: str | os.PathLike | BinaryIO,
    device: Any = None,
    *,
    map_location: Any = None,
    weights_only: bool | None = None,
    mmap: bool | None = None,
) -> Any:
    """Read a file written by `save`, by ``torch.save`` (its zip format, PyTorch's default), or
    any safetensors file, from a path or a binary file object; tensors go to `device` (or
    PyTorch's spelling, `map_location`: a device name, ``ta.device``, or a dict from saved
    locations to devices), else to the CPU (a torch.save file: to the device it names).

    A .safetensors file gives a flat ``{name: Tensor}`` dict; bfloat16 tensors in it or in a
    torch.save file load as float32, exactly. ``weights_only`` has PyTorch's meaning: with True
    (the default, also for None) a file may name only PyTorch's weights-only globals (tensors,
    storages, dtypes, OrderedDict, ...), tinyattn's plain-data classes, and the globals allowed
    by `add_safe_globals` or a `safe_globals` block; any other raises `UnsafeGlobalError`
    naming it, before anything is imported or called. With False the modules the file names
    are imported. Tensors of a torch.save file that share a storage load as views of one array;
    ``mmap=True`` maps such a file's storages from a path instead of reading them (elsewhere it
    changes nothing). A truncated, corrupt or foreign file raises ValueError naming the path and
    the reason. A file is untrusted input: sizes are checked before memory is taken (an archive
    may not inflate to more than `backend.files.MAX_INFLATION` times its size beyond 64 MiB), and
    a manifest may nest `tree.MAX_DEPTH` levels deep.
    """
    allow_only_safe = weights_only is not False
    if hasattr(f, "read"):
        data, shown = f.read(), "the file object"
        if _is_torch_zip(io.BytesIO(data)):
            return _from_torch(io.BytesIO(data), shown, device, map_location, allow_only_safe)
        device = _load_device(device, map_location)
        if not data.startswith(b"PK"):
            return _from_safetensors(data, shown, device)
        return _from_npz(io.BytesIO(data), shown, device, allow_only_safe)
    shown = os.fspath(f)
    if _is_torch_zip(shown):
        with open(shown, "rb") as file:
            mapped = shown if mmap else None
            return _from_torch(file, repr(shown), device, map_location, allow_only_safe, mapped)
    device = _load_device(device, map_location)
    if _is_safetensors(shown):
        try:
            with open(shown, "rb") as file:
                data = file.read()
        except FileNotFoundError:
            raise FileNotFoundError(f"load: no file at {shown!r}") from None
        return _from_safetensors(data, repr(shown), device)
    return _from_npz(shown, repr(shown), device, allow_only_safe)


def _is_torch_zip(source: Any) -> bool:
    """Whether a path or file object holds torch.save's zip (a zip with <name>/data.pkl)."""
    try:
        with (
            open(source, "rb")
            if isinstance(source, str)
            else contextlib.nullcontext(source) as file
        ):
            head = file.read(4)
            file.seek(0)
            return head == b"PK\x03\x04" and torch_format.is_torch_zip(file)
    except OSError:
        return False


def _from_torch(
    file: Any, shown: str, device: Any, map_location: Any, weights_only: bool, mapped: Any = None
) -> Any:
    place = _placement(device, map_location)

    def make_tensor(array: Any, requires_grad: bool, location: str) -> Tensor:
        target = place(location)
        if target is not None and str(target) != "cpu":
            try:
                array = backend.to_device(array, target)
            except RuntimeError as exc:
                raise RuntimeError(
                    f"load: {shown}: a tensor was saved on {location!r}, which is not available "
                    f"here ({exc}); load it with map_location='cpu'"
                ) from None
        tensor = Tensor._from_op(array, None)  # no copy: one storage's tensors stay its views
        return tensor.requires_grad_() if requires_grad else tensor

    def make_parameter(tensor: Any, requires_grad: bool) -> Tensor:
        if not isinstance(tensor, Tensor):
            raise TinyattnError(f"a Parameter of a {type(tensor).__name__}")
        tensor.__class__ = import_global("tinyattn.nn.module:Parameter")  # the same slots
        return tensor.requires_grad_(requires_grad)

    def resolve(module: str, name: str) -> Any:
        if module.partition(".")[0] in _BLOCKED_MODULES:
            raise UnsafeGlobalError(
                f"the file names the global {module}.{name}; no load takes a global from "
                f"module {module}, even when it is allowed"
            )
        return resolve_global(f"{module}:{name}", weights_only)

    def buildable(cls: type) -> bool:  # PyTorch's rule: an allowed class, named or not
        return not weights_only or any(cls is allowed for allowed in get_safe_globals())

    hooks = torch_format.TorchHooks(make_tensor, make_parameter, Device, resolve, buildable)
    try:
        return torch_format.load_torch_zip(file, hooks, mapped)
    except TinyattnError as exc:  # the same type (UnsafeGlobalError stays one), with the file
        raise type(exc)(f"load: {shown}: {exc}") from None
    except (
        zipfile.BadZipFile,
        EOFError,
        OSError,
        ValueError,
        NotImplementedError,
        zlib.error,
    ) as exc:
        raise TinyattnError(
            f"load: {shown} is not a complete torch.save zip ({type(exc).__name__}: {exc})"
        ) from None


def _placement(device: Any, map_location: Any) -> Any:
    """Where a tensor saved at a location goes: `device`, or `map_location` (a device, or a
    dict from saved locations to devices), else the saved location (PyTorch's rule)."""
    if isinstance(map_location, dict):
        if device is not None:
            raise TypeError("load: give device= or map_location=, not both")
        return lambda location: map_location.get(location, location)
    target = _load_device(device, map_location)
    return (lambda location: location) if target is None else (lambda location: target)


def _load_device(device: Any, map_location: Any) -> Any:
    """`device`, or PyTorch's `map_location` when it names a device."""
    if map_location is None:
        return device
    if device is not None:
        raise TypeError("load: give device= or map_location=, not both")
    if isinstance(map_location, dict):
        # These files hold host arrays: their one location is "cpu".
        return map_location.get("cpu")
    if not isinstance(map_location, str):
        raise TypeError(
            f"load: map_location must be a device ('cpu', 'cuda:0', ta.device(...)) or a dict "
            f"of them, got {type(map_location).__name__}; move the tensors afterwards instead"
        )
    return map_location


def _from_safetensors(data: bytes, shown: str, device: Any) -> dict[str, Tensor]:
    try:
        arrays = files.load_safetensors(data)
    except ValueError as exc:
        raise TinyattnError(f"load: {shown}: {exc}") from None
    return {name: tensor(array, device=device) for name, array in arrays.items()}


def get_unsafe_globals_in_checkpoint(f: str | os.PathLike | BinaryIO) -> list[str]:
    """The classes and functions a checkpoint (tinyattn's .npz, or a torch.save zip) names that
    a weights_only load refuses unless they are allowed, as ``"module.qualname"`` strings
    (PyTorch's function of that name): what to pass to `safe_globals` for a trusted file.
    Nothing is imported."""
    if hasattr(f, "read"):
        data, shown = f.read(), "the file object"
        if _is_torch_zip(io.BytesIO(data)):
            return _torch_globals(io.BytesIO(data), shown)
        if not data.startswith(b"PK"):
            return []  # safetensors: tensors only
        header = _header(io.BytesIO(data), shown)[1]
    else:
        shown = os.fspath(f)
        if _is_torch_zip(shown):
            with open(shown, "rb") as file:
                return _torch_globals(file, repr(shown))
        if _is_safetensors(shown):
            return []
        header = _header(shown, repr(shown))[1]
    names = globals_in(header.get("tree")) - PLAIN_GLOBALS
    return sorted(name.replace(":", ".") for name in names)


def _torch_globals(file: Any, shown: str) -> list[str]:
    try:
        return torch_format.unknown_globals(file)
    except TinyattnError as exc:
        raise TinyattnError(f"{shown}: {exc}") from None


def _from_npz(source: Any, shown: str, device: Any, weights_only: bool) -> Any:
    arrays, header = _header(source, shown)
    reader = TreeReader(arrays, device, header["version"], weights_only)
    try:
        return reader.node(header.get("tree"))
    except TinyattnError as exc:  # the same type (UnsafeGlobalError stays one), with the file
        raise type(exc)(f"load: {shown}: {exc}") from None


def _header(source: Any, shown: str) -> tuple[dict, dict]:
    """The arrays and the checked manifest header of a tinyattn .npz checkpoint."""
    try:
        arrays, metadata = files.load_npz(source)
    except FileNotFoundError:
        raise FileNotFoundError(f"load: no file at {shown}") from None
    except ValueError as exc:
        raise TinyattnError(f"load: {shown} is not a readable tinyattn checkpoint: {exc}") from None
    if metadata is None:
        raise TinyattnError(
            f"load: {shown} is an .npz archive but not a tinyattn checkpoint (no "
            f"{files.NPZ_METADATA_ENTRY!r} entry); read plain archives with numpy.load"
        )
    if json_depth(metadata, MAX_DEPTH) > MAX_DEPTH:  # json.loads and the reader recurse
        raise TinyattnError(
            f"load: {shown} has a manifest nested deeper than {MAX_DEPTH} levels, the most "
            "tinyattn reads (and writes): a damaged or hostile file"
        )
    try:
        header = json.loads(metadata)
    except json.JSONDecodeError as exc:
        raise TinyattnError(f"load: {shown} has a corrupt manifest ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise TinyattnError(f"load: {shown} is not a tinyattn checkpoint (format {header!r:.80})")
    version = header.get("version")
    if type(version) is not int or version not in _VERSIONS:
        raise TinyattnError(
            f"load: {shown} has checkpoint version {version!r}; this tinyattn reads versions "
            f"{' and '.join(map(str, _VERSIONS))}"
        )
    return arrays, header


def _is_safetensors(path: str) -> bool:
    """By name, or by content: 8 bytes of header length, then the JSON header's '{'."""
    if path.endswith(".safetensors"):
        return True
    try:
        with open(path, "rb") as file:
            start = file.read(9)
    except OSError:
        return False
    return len(start) == 9 and start[8:9] == b"{" and not start.startswith(b"PK")


__all__ = [
    "UnsafeGlobalError",
    "add_safe_globals",
    "clear_safe_globals",
    "get_safe_globals",
    "get_unsafe_globals_in_checkpoint",
    "load",
    "safe_globals",
    "save",
]
