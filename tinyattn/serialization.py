"""Serialization layer: ta.save / ta.load of tensors, state dicts and whole modules.

Imports `backend`, `tensor` and `checkpoint_tree` (the manifest tree and the allowlist); the file
formats are read and written by `backend`. Invariants: pickle is never written or accepted
(arrays only, plus a JSON manifest); a save to a path is atomic (a temp file in the same
directory, fsync, os.replace), so a failed save leaves the old file intact; a save through a
symbolic link replaces the link's target (the link keeps pointing at the new weights); a special
file (a device, a FIFO, a directory) is refused, never replaced; a new file gets the permissions
the umask allows, an existing one keeps its own.

Two formats, chosen by the file name: ``.safetensors`` (a flat ``{name: Tensor}`` state dict, the
format PyTorch programs exchange weights in, read by ``safetensors.torch.load_file``) and, for
everything else, tinyattn's .npz checkpoint. A file object (``io.BytesIO``) is written as an .npz
checkpoint; `load` tells the formats apart by their first bytes.

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
  ``{"device": name}``; ``{"global": class}`` (a class or function, by import path);
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
`checkpoint_tree.MAX_DEPTH` levels of JSON, which a load would refuse.

Loading follows PyTorch's ``weights_only=True`` (the default): besides the plain node kinds, only
`checkpoint_tree.PLAIN_GLOBALS` (Tensor, Parameter, the hook lists of a Module) and the globals
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
from typing import Any, BinaryIO

from . import backend
from .backend.files import json_depth
from .checkpoint_tree import (
    MAX_DEPTH,
    PLAIN_GLOBALS,
    TreeReader,
    TreeWriter,
    UnsafeGlobalError,
    add_safe_globals,
    clear_safe_globals,
    get_safe_globals,
    globals_in,
    safe_globals,
)
from .creation import tensor
from .errors import TinyattnError
from .tensor import Tensor

FORMAT = "tinyattn-checkpoint"
VERSION = 2  # the newest version written; version 1 files (and trees) read as before
_VERSIONS = (1, 2)


def save(obj: Any, f: str | os.PathLike | BinaryIO) -> None:
    """Write `obj` to the path or binary file object `f` (PyTorch's ``torch.save(obj, f)``).

    A path ending in ``.safetensors`` takes a flat state dict (``{str: Tensor}``) in the
    safetensors format; any other path, and any file object (``io.BytesIO``), a tinyattn .npz
    checkpoint of `obj` (a state dict, an optimizer state dict, or any nesting of dicts, lists,
    Tensors and numbers). A path is written atomically; a bad path raises an error that starts
    with ``save:``.
    """
    if hasattr(f, "write"):
        f.write(_npz_payload(obj))
        return
    path = _save_path(f)
    payload = _safetensors_payload(obj) if path.endswith(".safetensors") else _npz_payload(obj)
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
    writer = TreeWriter(reserved=backend.NPZ_METADATA_ENTRY)
    try:
        tree = writer.node(obj, "")  # all type errors surface before any file is touched
    except RecursionError:  # the writer recurses: a value this deep is far past MAX_DEPTH
        raise _too_deep() from None
    metadata = json.dumps({"format": FORMAT, "version": writer.version, "tree": tree})
    if json_depth(metadata, MAX_DEPTH) > MAX_DEPTH:  # a load would refuse it: refuse it now
        raise _too_deep()
    buffer = io.BytesIO()
    backend.save_npz(buffer, writer.arrays, metadata)
    return buffer.getvalue()


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
        return backend.safetensors_bytes(arrays, {"format": "pt"})
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
    """Read a file written by `save` (or any safetensors file) from a path or a binary file
    object; tensors go to `device` (or PyTorch's spelling, `map_location`: a device name or
    ``ta.device``), else the CPU.

    A .safetensors file gives a flat ``{name: Tensor}`` dict; bfloat16 tensors in it (as
    PyTorch writes them) load as float32, exactly. ``weights_only`` has PyTorch's meaning for
    the classes and functions a .npz checkpoint names (a saved Module): with True (the default,
    also for None) only tinyattn's plain-data classes and the globals allowed by
    `add_safe_globals` or a `safe_globals` block load, any other raises `UnsafeGlobalError`
    naming it; with False the modules the file names are imported. ``mmap`` is accepted for
    PyTorch's sake and changes nothing. A truncated, corrupt or foreign file raises ValueError
    naming the path and the reason (a ``torch.save`` file: that it is one, and how to convert
    it). A file is untrusted input: sizes are checked before memory is taken (an .npz may not
    inflate to more than `backend.files.MAX_INFLATION` times its size beyond 64 MiB), and a
    manifest may nest `checkpoint_tree.MAX_DEPTH` levels deep.
    """
    device = _load_device(device, map_location)
    allow_only_safe = weights_only is not False
    if hasattr(f, "read"):
        data, shown = f.read(), "the file object"
        if not data.startswith(b"PK"):
            return _from_safetensors(data, shown, device)
        return _from_npz(io.BytesIO(data), shown, device, allow_only_safe)
    shown = os.fspath(f)
    if _is_safetensors(shown):
        try:
            with open(shown, "rb") as file:
                data = file.read()
        except FileNotFoundError:
            raise FileNotFoundError(f"load: no file at {shown!r}") from None
        return _from_safetensors(data, repr(shown), device)
    return _from_npz(shown, repr(shown), device, allow_only_safe)


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
        arrays = backend.load_safetensors(data)
    except ValueError as exc:
        raise TinyattnError(f"load: {shown}: {exc}") from None
    return {name: tensor(array, device=device) for name, array in arrays.items()}


def get_unsafe_globals_in_checkpoint(f: str | os.PathLike | BinaryIO) -> list[str]:
    """The classes and functions a checkpoint names that a weights_only load refuses unless
    they are allowed, as ``"module.qualname"`` strings (PyTorch's function of that name): what
    to pass to `safe_globals` for a trusted file. Nothing is imported."""
    if hasattr(f, "read"):
        data, shown = f.read(), "the file object"
        if not data.startswith(b"PK"):
            return []  # safetensors: tensors only
        header = _header(io.BytesIO(data), shown)[1]
    else:
        shown = os.fspath(f)
        if _is_safetensors(shown):
            return []
        header = _header(shown, repr(shown))[1]
    names = globals_in(header.get("tree")) - PLAIN_GLOBALS
    return sorted(name.replace(":", ".") for name in names)


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
        arrays, metadata = backend.load_npz(source)
    except FileNotFoundError:
        raise FileNotFoundError(f"load: no file at {shown}") from None
    except ValueError as exc:
        raise TinyattnError(f"load: {shown} is not a readable tinyattn checkpoint: {exc}") from None
    if metadata is None:
        raise TinyattnError(
            f"load: {shown} is an .npz archive but not a tinyattn checkpoint (no "
            f"{backend.NPZ_METADATA_ENTRY!r} entry); read plain archives with numpy.load"
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
