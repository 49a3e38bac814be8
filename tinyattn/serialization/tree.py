"""Serialization, part 2: the manifest tree of a checkpoint, and the allowlist of globals.

A tool on top of the layers, beside `serialization` (which writes and reads the files and
describes the format); imports `backend`, `devices`, `errors` and `tensor`. `TreeWriter` turns
a Python value into the JSON tree and a dict of arrays; `TreeReader` turns them back. Nothing
here runs pickle: an object is rebuilt as pickle rebuilds a plain class instance
(``cls.__new__(cls)``, then its attributes, or ``__setstate__``), from a class named by its
import path and allowed by the rules of `resolve_global`.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from pickle import UnpicklingError  # the exception type only, as PyTorch raises; never unpickles
from typing import Any

from .. import backend
from ..devices import device as Device
from ..errors import TinyattnError
from ..tensor import Tensor

_VALUES = (bool, int, float, str, type(None))
# A Module's registries: their entries get state_dict-style names ("encoder.weight").
_REGISTRIES = ("_parameters", "_buffers", "_modules")
# How deeply a manifest's JSON may nest. The reader walks the tree by recursion, at most two
# Python frames per level (a frozenset: node, its reader, _read_set, the list comprehension), so
# 256 levels stay inside Python's default limit of 1000 frames even when load is called from
# deep in a program. A saved module costs 7 levels per level of submodules, a nested list 2:
# real checkpoints need a few dozen. The save refuses a deeper tree, so whatever saves loads.
MAX_DEPTH = 256
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: made at run time (a `class` statement, or C code)
_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: set on C types, never on `class` ones

# Globals every load accepts: tinyattn's plain-data classes (PyTorch's weights_only set holds
# its tensor classes and containers the same way). Module classes are not among them.
PLAIN_GLOBALS = {
    "tinyattn.tensor:Tensor",
    "tinyattn.nn.module:Parameter",
    "tinyattn.nn.module_hooks:_Hooks",
}


class UnsafeGlobalError(TinyattnError, UnpicklingError):
    """A load met a class or function that is not allowed (PyTorch raises UnpicklingError)."""


# ------------------------------------------------------------------------------- allowlist
_safe_globals: dict[str, Any] = {}  # "module:qualname" -> the allowed object


def global_name(obj: Any) -> str:
    """The import path ``module:qualname`` under which files name a class or function."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise TypeError(f"{obj!r} has no import path (__module__ and __qualname__)")
    return f"{module}:{qualname}"


def _allowlist_entries(objects: Iterable[Any]) -> Iterator[tuple[str, Any]]:
    for entry in objects:
        if isinstance(entry, tuple):  # (object, "module.qualname"): a file's name for it
            if len(entry) != 2 or not isinstance(entry[1], str):
                raise TypeError(f"add_safe_globals: expected (object, name), got {entry!r}")
            obj, name = entry
            yield (name if ":" in name else _colon_form(name, obj)), obj
        else:
            yield global_name(entry), entry


def _colon_form(dotted: str, obj: Any) -> str:
    """PyTorch's ``module.qualname`` spelling, split where the object's module ends."""
    module = getattr(obj, "__module__", "") or ""
    if dotted.startswith(module + "."):
        return f"{module}:{dotted[len(module) + 1 :]}"
    module, _, qualname = dotted.rpartition(".")
    return f"{module}:{qualname}"


def add_safe_globals(safe_globals: list) -> None:
    """Allow these classes and functions in every later load (PyTorch's name). An entry is the
    object, or ``(object, "module.qualname")`` for a file that names it otherwise."""
    _safe_globals.update(_allowlist_entries(safe_globals))


def get_safe_globals() -> list:
    """The objects allowed by `add_safe_globals` and open `safe_globals` blocks."""
    return list(_safe_globals.values())


def clear_safe_globals() -> None:
    """Forget every allowed global (tinyattn's plain-data classes stay allowed)."""
    _safe_globals.clear()


@contextlib.contextmanager
def safe_globals(safe_globals: list) -> Iterator[None]:
    """``with safe_globals([...]):`` allows these globals inside the block only; the allowlist
    is restored as it was when the block ends, however it ends."""
    saved = dict(_safe_globals)
    add_safe_globals(safe_globals)
    try:
        yield
    finally:
        _safe_globals.clear()
        _safe_globals.update(saved)


def import_global(name: str) -> Any:
    """The object at ``module:qualname``, importing the module (an error says what failed)."""
    module_name, colon, qualname = name.partition(":")
    if not colon or not module_name or not qualname:
        raise TinyattnError(f"{name!r} is not an import path of the form 'module:qualname'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise TinyattnError(
            f"{name!r}: module {module_name!r} cannot be imported ({type(exc).__name__}: {exc})"
        ) from None
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise TinyattnError(f"{name!r}: {obj!r} has no attribute {part!r}")
        obj = getattr(obj, part)
    return obj


def resolve_global(name: str, weights_only: bool) -> Any:
    """The class or function a file names: tinyattn's plain-data classes always, allowlisted
    objects by name (without importing anything), any other only with ``weights_only=False``."""
    if name in PLAIN_GLOBALS:
        return import_global(name)
    if name in _safe_globals:
        return _safe_globals[name]
    if not weights_only:
        return import_global(name)
    dotted = name.replace(":", ".")
    raise UnsafeGlobalError(
        f"the file names the global {dotted} (written {name!r}), which a weights_only load "
        "does not allow. If you trust this file, allow it with "
        f"ta.serialization.add_safe_globals([{dotted}]) or inside "
        f"`with ta.serialization.safe_globals([{dotted}]):`, or load with weights_only=False, "
        "which imports every module the file names"
    )


def globals_in(tree: Any) -> set[str]:
    """Every class and function name in a manifest tree (walked without recursion)."""
    found, stack = set(), [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in ("class", "global") and isinstance(value, str):
                    found.add(value)
                elif key == "tensor" and isinstance(value, list) and len(value) == 3:
                    found.add(str(value[1]))
                else:
                    stack.append(value)
    return found


# ------------------------------------------------------------------------------------ writing
def _rebuildable(cls: type) -> bool:
    """A class whose instances pickle rebuilds from attributes alone: made by `class`
    statements down to `object` (no builtin base holding hidden contents), no own __reduce__."""
    for base in cls.__mro__[:-1]:
        # Since Python 3.12 some C types (io.BytesIO) are heap types too; only the
        # immutable flag tells them from classes written in Python.
        if not base.__flags__ & _HEAP_TYPE or base.__flags__ & _IMMUTABLE_TYPE:
            return False
        if "__reduce__" in vars(base) or "__reduce_ex__" in vars(base):
            return False
    return True


def _slot_names(cls: type) -> Iterator[str]:
    for base in cls.__mro__:
        slots = vars(base).get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            private = name.startswith("__") and not name.endswith("__")
            yield f"_{base.__name__.lstrip('_')}{name}" if private else name


def state_of(obj: Any) -> Any:
    """What pickle saves of a plain instance: its ``__getstate__()``, or by default the
    instance dict (None if empty) and, if it has set __slots__, ``(dict, {slot: value})``."""
    own = getattr(type(obj), "__getstate__", None)
    if own is not None and own is not getattr(object, "__getstate__", None):
        return obj.__getstate__()
    attributes = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
    slots = {name: getattr(obj, name) for name in _slot_names(type(obj)) if hasattr(obj, name)}
    return (attributes or None, slots) if slots else (attributes or None)


class TreeWriter:
    """`node(value)` is the JSON tree of `value`; its arrays collect in `arrays`. `version` is
    1 while only version-1 node kinds were written, else 2."""

    def __init__(self, reserved: str) -> None:
        self.arrays: dict[str, Any] = {}
        self.version = 1
        self._reserved = reserved  # the manifest's own entry name
        self._tensors: dict[int, dict] = {}  # id(tensor) -> its node (a second use repeats it)
        self._objects: dict[int, int] = {}  # id(object) -> memo id
        self._kept: list[Any] = []  # keeps each remembered value alive, so ids stay unique
        self._open: set[int] = set()  # containers being written (one inside itself is refused)

    def node(self, value: Any, path: str) -> Any:
        if isinstance(value, Tensor):
            return self._tensor(value, path)
        if backend.is_host_array(value):  # loads back as NumPy's, as PyTorch pickles it
            self.version = 2
            name = self._entry_name(path)
            self.arrays[name] = value
            return {"ndarray": [name, not isinstance(value, backend.HOST_ARRAY)]}
        if type(value) in _VALUES:
            return {"value": value}
        writer = _CONTAINER_WRITERS.get(type(value))
        if writer is not None:
            return self._container(writer, value, path)
        simple = _SIMPLE_WRITERS.get(type(value))
        if simple is not None:
            self.version = 2
            return simple(value)
        if isinstance(value, type | types.FunctionType | types.BuiltinFunctionType):
            return self._global(value, path)
        return self._object(value, path)

    def _entry_name(self, path: str) -> str:
        name, number = path or "tensor", 1
        while name in self.arrays or name == self._reserved:
            number += 1
            name = f"{path or 'tensor'}#{number}"
        return name

    def _tensor(self, value: Any, path: str) -> dict:
        known = self._tensors.get(id(value))
        if known is not None:
            return known  # the same tensor again: the reader gives back the same object
        name = self._entry_name(path)
        self.arrays[name] = value.array if isinstance(value, Tensor) else value
        node: dict = {"tensor": name}
        if isinstance(value, Tensor) and (type(value) is not Tensor or value.requires_grad):
            self.version = 2
            node = {"tensor": [name, self._name_of(type(value), path), value.requires_grad]}
        self._tensors[id(value)] = node
        self._kept.append(value)
        return node

    def _container(self, writer: Any, value: Any, path: str) -> dict:
        if id(value) in self._open:
            raise TypeError(
                f"save: the {type(value).__name__} at {path or 'the top'!r} contains itself; "
                "containers are stored by value, so a cycle must pass through an object"
            )
        self._open.add(id(value))
        try:
            return writer(self, value, path)
        finally:
            self._open.discard(id(value))

    def _name_of(self, obj: Any, path: str) -> str:
        """`obj`'s import path, checked as pickle checks it: importing it gives `obj` back."""
        try:
            name = global_name(obj)
            module = sys.modules.get(name.partition(":")[0])
            found = import_global(name) if module is None else _walk(module, name)
        except (TypeError, TinyattnError):
            found = None
        if found is not obj:
            shown = getattr(obj, "__qualname__", None) or type(obj).__name__
            raise TypeError(
                f"save: cannot save {shown!r} at {path or 'the top'!r}: files name functions and "
                "classes by import path, and this one is not reachable by its own (a lambda, a "
                "function defined inside another, or a bound method); define it at the top "
                "level of a module"
            )
        return name

    def _global(self, value: Any, path: str) -> dict:
        self.version = 2
        return {"global": self._name_of(value, path)}

    def _object(self, value: Any, path: str) -> dict:
        self.version = 2
        known = self._objects.get(id(value))
        if known is not None:
            return {"ref": known}
        cls = type(value)
        if not _rebuildable(cls):
            raise TypeError(
                f"save: cannot save a {cls.__name__} at {path or 'the top'!r}: tinyattn's files "
                "hold tensors, numbers, strings, containers, and instances of Python classes "
                "rebuilt from their attributes; this class is built in or has its own "
                "__reduce__, which the pickle-free format does not run"
            )
        memo = self._objects[id(value)] = len(self._objects)
        self._kept.append(value)
        body = {"id": memo, "class": self._name_of(cls, path)}
        body.update(self._state(value, path))
        return {"object": body}

    def _state(self, value: Any, path: str) -> dict:
        state = state_of(value)
        if state is None:
            return {}
        if isinstance(state, dict) and all(isinstance(key, str) for key in state):
            return {"dict": self._attributes(state, path)}
        if (
            isinstance(state, tuple)
            and len(state) == 2
            and isinstance(state[0], dict | type(None))
            and isinstance(state[1], dict)
        ):
            return {
                "dict": self._attributes(state[0] or {}, path),
                "slots": self._attributes(state[1], path),
            }
        if not _own_setstate(type(value)):
            raise TypeError(
                f"save: {type(value).__name__}.__getstate__ at {path or 'the top'!r} returned "
                f"a {type(state).__name__}, which only a __setstate__ could apply"
            )
        return {"state": self.node(state, path)}

    def _attributes(self, attributes: dict, path: str) -> list:
        return [
            [name, self.node(item, path if name in _REGISTRIES else _join(path, name))]
            for name, item in attributes.items()
        ]


def _walk(module: Any, name: str) -> Any:
    obj = module
    for part in name.partition(":")[2].split("."):
        obj = getattr(obj, part, None)
    return obj


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _write_dict(writer: TreeWriter, value: dict, path: str) -> dict:
    if all(isinstance(key, str | int) and not isinstance(key, bool) for key in value):
        return {"dict": [[key, writer.node(item, _join(path, key))] for key, item in value.items()]}
    writer.version = 2
    return {"items": _write_pairs(writer, value, path)}


def _write_pairs(writer: TreeWriter, value: dict, path: str) -> list:
    return [
        [writer.node(key, _join(path, "key")), writer.node(item, _join(path, key))]
        for key, item in value.items()
    ]


def _write_ordered(writer: TreeWriter, value: OrderedDict, path: str) -> dict:
    writer.version = 2
    return {"ordered_dict": _write_pairs(writer, value, path)}


def _write_sequence(writer: TreeWriter, value: Any, path: str) -> dict:
    kind = type(value).__name__  # list, tuple, set or frozenset
    if kind in ("set", "frozenset"):
        writer.version = 2
    return {kind: [writer.node(item, _join(path, i)) for i, item in enumerate(value)]}


_CONTAINER_WRITERS: dict[type, Any] = {
    dict: _write_dict,
    OrderedDict: _write_ordered,
    list: _write_sequence,
    tuple: _write_sequence,
    set: _write_sequence,
    frozenset: _write_sequence,
}
_SIMPLE_WRITERS: dict[type, Any] = {
    complex: lambda value: {"complex": [value.real, value.imag]},
    bytes: lambda value: {"bytes": value.hex()},
    Device: lambda value: {"device": str(value)},
}


# ------------------------------------------------------------------------------------ reading
class TreeReader:
    """`node(tree)` rebuilds the value a `TreeWriter` wrote; `version` limits the node kinds."""

    def __init__(self, arrays: dict, device: Any, version: int, weights_only: bool) -> None:
        self._arrays = arrays
        self._device = device
        self._readers = _READERS_V1 if version == 1 else _READERS
        self._weights_only = weights_only
        self._tensors: dict[str, Tensor] = {}  # entry name -> the tensor made from it
        self._objects: dict[int, Any] = {}  # memo id -> the object

    def node(self, tree: Any) -> Any:
        if not isinstance(tree, dict) or len(tree) != 1:
            raise TinyattnError(f"malformed manifest node {tree!r:.80}")
        ((kind, body),) = tree.items()
        reader = self._readers.get(kind)
        if reader is None:
            raise TinyattnError(f"unknown manifest node kind {kind!r}")
        well_formed, read = reader
        if not well_formed(body):  # a damaged manifest must not fail with a raw TypeError
            raise TinyattnError(f"malformed manifest node {tree!r:.80}")
        return read(self, body)

    def tensor(self, body: Any) -> Tensor:
        name, class_name, requires_grad = (body, None, False) if isinstance(body, str) else body
        known = self._tensors.get(name)
        if known is not None:
            return known
        if name not in self._arrays:
            raise TinyattnError(f"the manifest names entry {name!r}, which is missing")
        if class_name is None:
            tensor = Tensor(self._arrays[name], dtype=self._arrays[name].dtype, device=self._device)
        else:
            cls = self.global_(class_name)
            if not (isinstance(cls, type) and issubclass(cls, Tensor)):
                raise TinyattnError(f"the tensor {name!r} names {class_name!r}, not a Tensor class")
            tensor = cls.__new__(cls)  # as pickle: the subclass's __init__ is not run
            Tensor.__init__(
                tensor, self._arrays[name], dtype=self._arrays[name].dtype, device=self._device
            )
            tensor.requires_grad_(requires_grad)
        self._tensors[name] = tensor
        return tensor

    def ndarray(self, name: str, scalar: bool) -> Any:
        if name not in self._arrays:
            raise TinyattnError(f"the manifest names entry {name!r}, which is missing")
        return self._arrays[name][()] if scalar else self._arrays[name]

    def global_(self, name: str) -> Any:
        return resolve_global(name, self._weights_only)

    def object_(self, body: dict) -> Any:
        cls = self.global_(body["class"])
        if not isinstance(cls, type) or not _rebuildable(cls) or issubclass(cls, Tensor):
            raise TinyattnError(
                f"the manifest names {body['class']!r} as an object's class, but it is "
                f"{'not a class' if not isinstance(cls, type) else 'not a plain Python class'}"
            )
        if body["id"] in self._objects:
            raise TinyattnError(f"the manifest defines object {body['id']} twice")
        obj = cls.__new__(cls)
        self._objects[body["id"]] = obj  # before its attributes: they may refer back to it
        self._set_state(obj, body)
        return obj

    def _set_state(self, obj: Any, body: dict) -> None:
        attributes = {name: self.node(item) for name, item in body.get("dict", [])}
        slots = {name: self.node(item) for name, item in body.get("slots", [])}
        if "state" in body:
            state = self.node(body["state"])
        elif "slots" in body:
            state = (attributes or None, slots)
        else:
            state = attributes or None
        if state is not None and _own_setstate(type(obj)):
            obj.__setstate__(state)
            return
        if "state" in body:
            raise TinyattnError(f"{type(obj).__name__} has no __setstate__ for its saved state")
        if attributes:
            _instance_dict(obj).update(attributes)
        own_slots = set(_slot_names(type(obj)))
        for name, value in slots.items():
            if name not in own_slots:  # e.g. "__class__": setattr would change the object's class
                raise TinyattnError(
                    f"the manifest sets slot {name!r} of a {type(obj).__name__}, whose slots are "
                    f"{sorted(own_slots)}"
                )
            setattr(obj, name, value)  # as pickle sets slot values

    def ref(self, memo: int) -> Any:
        if memo not in self._objects:
            raise TinyattnError(f"the manifest refers to object {memo} before defining it")
        return self._objects[memo]


def _instance_dict(obj: Any) -> dict:
    """The instance dict the manifest's attributes go into; a class with only slots has none."""
    try:
        return vars(obj)
    except TypeError:
        raise TinyattnError(
            f"the manifest gives instance attributes to a {type(obj).__name__}, whose instances "
            "have no __dict__ (only __slots__)"
        ) from None


def _own_setstate(cls: type) -> bool:
    own = getattr(cls, "__setstate__", None)
    return own is not None and own is not getattr(object, "__setstate__", None)


def _pairs(body: Any) -> bool:
    return isinstance(body, list) and all(
        isinstance(pair, list) and len(pair) == 2 for pair in body
    )


def _named_pairs(body: Any) -> bool:
    return _pairs(body) and all(isinstance(pair[0], str) for pair in body)


def _object_body(body: Any) -> bool:
    return (
        isinstance(body, dict)
        and isinstance(body.get("id"), int)
        and isinstance(body.get("class"), str)
        and set(body) <= {"id", "class", "dict", "slots", "state"}
        and all(_named_pairs(body[key]) for key in ("dict", "slots") if key in body)
    )


def _tensor_body(body: Any) -> bool:
    if isinstance(body, str):
        return True
    return (
        isinstance(body, list)
        and len(body) == 3
        and isinstance(body[0], str)
        and isinstance(body[1], str)
        and isinstance(body[2], bool)
    )


def _ndarray_body(body: Any) -> bool:
    return (
        isinstance(body, list)
        and len(body) == 2
        and isinstance(body[0], str)
        and isinstance(body[1], bool)
    )


def _read_items(reader: TreeReader, body: list, kind: type) -> Any:
    out = kind()
    for key_node, item in body:
        key, value = reader.node(key_node), reader.node(item)
        try:
            out[key] = value
        except TypeError:
            raise TinyattnError(f"the manifest has an unhashable key {key!r:.60}") from None
    return out


def _read_set(reader: TreeReader, body: list) -> set:
    items = [reader.node(item) for item in body]
    try:
        return set(items)
    except TypeError:
        raise TinyattnError(f"the manifest has an unhashable set item in {items!r:.60}") from None


_READERS_V1: dict[str, tuple[Any, Any]] = {
    "dict": (
        lambda body: _pairs(body) and all(isinstance(pair[0], str | int) for pair in body),
        lambda reader, body: {key: reader.node(item) for key, item in body},
    ),
    "list": (
        lambda body: isinstance(body, list),
        lambda reader, body: [reader.node(item) for item in body],
    ),
    "tuple": (
        lambda body: isinstance(body, list),
        lambda reader, body: tuple(reader.node(item) for item in body),
    ),
    "value": (lambda body: type(body) in _VALUES, lambda reader, body: body),
    "tensor": (lambda body: isinstance(body, str), TreeReader.tensor),
}
_READERS: dict[str, tuple[Any, Any]] = {
    **_READERS_V1,
    "tensor": (_tensor_body, TreeReader.tensor),
    "items": (_pairs, lambda reader, body: _read_items(reader, body, dict)),
    "ordered_dict": (_pairs, lambda reader, body: _read_items(reader, body, OrderedDict)),
    "set": (lambda body: isinstance(body, list), lambda reader, body: _read_set(reader, body)),
    "frozenset": (
        lambda body: isinstance(body, list),
        lambda reader, body: frozenset(_read_set(reader, body)),
    ),
    "complex": (
        lambda body: (
            isinstance(body, list)
            and len(body) == 2
            and all(type(part) in (int, float) for part in body)
        ),
        lambda reader, body: complex(*body),
    ),
    "bytes": (
        lambda body: (
            isinstance(body, str) and len(body) % 2 == 0 and set(body) <= set("0123456789abcdef")
        ),
        lambda reader, body: bytes.fromhex(body),
    ),
    "device": (lambda body: isinstance(body, str), lambda reader, body: Device(body)),
    "global": (lambda body: isinstance(body, str), TreeReader.global_),
    "object": (_object_body, TreeReader.object_),
    "ref": (lambda body: type(body) is int, TreeReader.ref),
    "ndarray": (  # a NumPy array, or a NumPy scalar (True), as saved
        _ndarray_body,
        lambda reader, body: reader.ndarray(*body),
    ),
}

__all__ = [
    "MAX_DEPTH",
    "PLAIN_GLOBALS",
    "TreeReader",
    "TreeWriter",
    "UnsafeGlobalError",
    "add_safe_globals",
    "clear_safe_globals",
    "get_safe_globals",
    "global_name",
    "globals_in",
    "safe_globals",
]
