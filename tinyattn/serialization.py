"""Serialization layer: ta.save / ta.load of state dicts (nested ones too) as .npz files.

Imports `backend` and `tensor`; NumPy's file format is read and written by `backend`. Invariants:
pickle is never written or accepted (arrays only, plus a JSON manifest); a save is atomic (a temp
file in the same directory, fsync, os.replace), so a failed save leaves the old file intact.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from . import backend
from .tensor import Tensor

# The format: an uncompressed .npz. Each Tensor is an entry named by its dotted path in the
# nested structure ("q_proj.weight", "state.0.exp_avg"), so `numpy.load(path)` reads the arrays
# without tinyattn. The entry "__metadata__" holds UTF-8 JSON {"format": FORMAT, "version":
# VERSION, "tree": node}, where a node is {"dict": [[key, node], ...]} (str or int keys, order
# kept), {"list": [node, ...]}, {"tuple": [...]}, {"value": number | str | bool | None} or
# {"tensor": entry name}. The file is written exactly at `path` (no suffix is added).
FORMAT = "tinyattn-checkpoint"
VERSION = 1


def _encode(value: Any, path: str, arrays: dict[str, Any]) -> Any:
    """The JSON tree of `value`, putting its arrays into `arrays` under dotted names."""
    if isinstance(value, Tensor) or backend.is_host_array(value):
        name = path or "tensor"
        if name in arrays or name == backend.NPZ_METADATA_ENTRY:
            raise ValueError(f"save: two entries would share the name {name!r}; rename a key")
        arrays[name] = value.data if isinstance(value, Tensor) else value
        return {"tensor": name}
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            if not isinstance(key, str | int) or isinstance(key, bool):
                raise TypeError(f"save: key {key!r} at {path or 'the top'!r} is not a str or int")
            items.append([key, _encode(item, f"{path}.{key}" if path else str(key), arrays)])
        return {"dict": items}
    if isinstance(value, list | tuple):
        kind = "list" if isinstance(value, list) else "tuple"
        return {
            kind: [
                _encode(v, f"{path}.{i}" if path else str(i), arrays) for i, v in enumerate(value)
            ]
        }
    if value is None or isinstance(value, bool | int | float | str):
        return {"value": value}
    raise TypeError(
        f"save: cannot save a {type(value).__name__} at {path or 'the top'!r}; expected Tensors, "
        "numbers, strings, None, and dicts, lists or tuples of them"
    )


def save(obj: Any, path: str | os.PathLike) -> None:
    """Write `obj` (a state dict, an optimizer state dict, or any nesting of dicts, lists,
    Tensors and numbers) to `path` as a tinyattn .npz checkpoint, atomically."""
    arrays: dict[str, Any] = {}
    tree = _encode(obj, "", arrays)  # all type errors surface before any file is touched
    metadata = json.dumps({"format": FORMAT, "version": VERSION, "tree": tree})
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):  # else the error would name the temporary file
        raise FileNotFoundError(f"save: directory {directory!r} does not exist (saving {path!r})")
    import tempfile  # noqa: PLC0415  (imported when saving: keeps `import tinyattn` fast)

    handle, temporary = tempfile.mkstemp(
        prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory
    )
    try:
        with os.fdopen(handle, "wb") as file:
            backend.save_npz(file, arrays, metadata)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)  # atomic on POSIX and Windows: readers see old or new
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _well_formed(kind: str, body: Any) -> bool:
    if kind == "tensor":
        return isinstance(body, str)
    if kind == "dict":
        return isinstance(body, list) and all(
            isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str | int)
            for pair in body
        )
    if kind in ("list", "tuple"):
        return isinstance(body, list)
    return kind != "value" or body is None or isinstance(body, bool | int | float | str)


def _decode(tree: Any, arrays: dict[str, Any], device: Any, path: str) -> Any:
    if not isinstance(tree, dict) or len(tree) != 1:
        raise ValueError(f"load: {path}: malformed manifest node {tree!r}")
    ((kind, body),) = tree.items()
    if not _well_formed(kind, body):  # a damaged manifest must not fail with a raw TypeError
        raise ValueError(f"load: {path}: malformed manifest node {tree!r:.80}")
    if kind == "tensor":
        if body not in arrays:
            raise ValueError(f"load: {path}: the manifest names entry {body!r}, which is missing")
        return Tensor(arrays[body], device=device)
    if kind == "dict":
        return {key: _decode(item, arrays, device, path) for key, item in body}
    if kind in ("list", "tuple"):
        items = [_decode(item, arrays, device, path) for item in body]
        return items if kind == "list" else tuple(items)
    if kind == "value":
        return body
    raise ValueError(f"load: {path}: unknown manifest node kind {kind!r}")


def load(path: str | os.PathLike, device: Any = None) -> Any:
    """Read a checkpoint written by `save`; tensors are created on `device` (default "cpu").

    A truncated, corrupt or foreign file raises ValueError naming the path and the reason.
    """
    shown = os.fspath(path)
    try:
        arrays, metadata = backend.load_npz(shown)
    except FileNotFoundError:
        raise FileNotFoundError(f"load: no file at {shown!r}") from None
    except ValueError as exc:
        raise ValueError(f"load: {shown!r} is not a readable tinyattn checkpoint: {exc}") from None
    if metadata is None:
        raise ValueError(
            f"load: {shown!r} is an .npz archive but not a tinyattn checkpoint (no "
            f"{backend.NPZ_METADATA_ENTRY!r} entry); read plain archives with numpy.load"
        )
    try:
        header = json.loads(metadata)
    except json.JSONDecodeError as exc:
        raise ValueError(f"load: {shown!r} has a corrupt manifest ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"load: {shown!r} is not a tinyattn checkpoint (format {header!r:.80})")
    if header.get("version") != VERSION:
        raise ValueError(
            f"load: {shown!r} has checkpoint version {header.get('version')!r}; this tinyattn "
            f"reads version {VERSION}"
        )
    return _decode(header.get("tree"), arrays, device, shown)


__all__ = ["load", "save"]
