"""The pickle inside a torch.save file (its data.pkl), read and written one opcode at a time.

Part of the backend layer, used only by torch_format.py (the zip around it); imports nothing of
tinyattn but its errors. The reader is a stack machine over the opcodes torch.save writes
(pickle protocol 2) and the plain-data opcodes of protocols 3 and 4, as PyTorch's weights-only
unpickler is; it never imports a module: each global the stream names goes to a `resolve`
function it is given, and only what that returned is ever called or built. Any other opcode is
refused by name. The writer emits protocol 2, as torch.save does. Neither walks the data by
recursion when reading, so a hostile nesting costs the stack machine only list entries.
"""

from __future__ import annotations

import _compat_pickle  # how protocol 2 spells Python 3's module names ("__builtin__")
import pickletools  # the opcodes' names, for messages
import struct
from collections import Counter, OrderedDict
from collections.abc import Callable
from reprlib import repr as short  # a hostile value's repr, cut short (a deep one cannot recurse)
from typing import Any, NamedTuple

from ..errors import TinyattnError

_CODES = {info.name: ord(code) for code, info in pickletools.code2op.items()}
_STOP = _CODES["STOP"]


class Global(NamedTuple):
    """A class or function, written by its import path (``GLOBAL module name``)."""

    module: str
    name: str


class Reduce(NamedTuple):
    """``func(*args)``, then BUILD with `state` unless it is None (pickle's reduce tuple)."""

    func: Global
    args: tuple
    state: Any = None


class PersistentId(NamedTuple):
    """A value stored outside the pickle (torch.save's storages): pickle's BINPERSID."""

    pid: tuple


# ------------------------------------------------------------------------------------ reading
_OPS: dict[int, Callable[[PickleReader], None]] = {}


def _op(*names: str) -> Callable:
    def register(method: Callable) -> Callable:
        _OPS.update({_CODES[name]: method for name in names})
        return method

    return register


class PickleReader:
    """``PickleReader(data, resolve, persistent_load, shown).load()``: the value pickled in
    `data`. ``resolve(module, name)`` gives the object for a global (or raises); only objects it
    gave are called (REDUCE) or instantiated (NEWOBJ), and only instances of classes it gave or
    that ``buildable(cls)`` allows are given state (BUILD), besides the OrderedDicts and
    Counters a state dict is made of."""

    def __init__(
        self,
        data: bytes,
        resolve: Callable,
        persistent_load: Callable,
        shown: str,
        buildable: Callable[[type], bool] = lambda cls: False,
    ) -> None:
        self._data = data
        self._buildable = buildable  # classes allowed without being named (add_safe_globals)
        self._at = 0
        self._resolve = resolve
        self._persistent_load = persistent_load
        self._shown = shown
        self._stack: list[Any] = []
        self._marks: list[list[Any]] = []
        self._memo: dict[int, Any] = {}
        self._resolved: dict[int, Any] = {}  # id -> object `resolve` gave (kept: ids stay unique)

    def load(self) -> Any:
        while True:
            start = self._at
            code = self._read(1)[0]
            method = _OPS.get(code)
            if method is None:
                raise TinyattnError(
                    f"{self._shown} uses the pickle opcode {_name(code)} at byte {start}, which "
                    "a weights-only load does not run (it reads protocol 2, as torch.save writes)"
                )
            try:
                if code == _STOP:
                    return self._stack.pop()  # the value the stream built
                method(self)
            except (IndexError, KeyError, TypeError, ValueError, AttributeError) as exc:
                if isinstance(exc, TinyattnError):
                    raise
                raise TinyattnError(
                    f"{self._shown} is malformed at byte {start} ({_name(code)}: "
                    f"{type(exc).__name__}: {exc})"
                ) from None

    # -- reading the stream
    def _read(self, count: int) -> bytes:
        if self._at + count > len(self._data):
            raise TinyattnError(
                f"{self._shown} ends at byte {len(self._data)}, inside an opcode that needs "
                f"{count} bytes from byte {self._at}"
            )
        chunk = self._data[self._at : self._at + count]
        self._at += count
        return chunk

    def _unpack(self, layout: str) -> Any:
        return struct.unpack(layout, self._read(struct.calcsize(layout)))[0]

    def _line(self) -> str:
        end = self._data.find(b"\n", self._at, self._at + 1024)  # a global's name, not a book
        if end < 0:
            raise TinyattnError(f"{self._shown} has an unterminated global name at {self._at}")
        text = self._read(end + 1 - self._at)[:-1]
        return text.decode("utf-8")

    def _pop_mark(self) -> list[Any]:
        items = self._stack
        self._stack = self._marks.pop()
        return items

    def _global(self, module: str, name: str) -> None:
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        obj = self._resolve(module, name)
        self._resolved[id(obj)] = obj
        self._stack.append(obj)

    def _check_resolved(self, obj: Any, what: str, name: str = "") -> None:
        if id(obj) not in self._resolved:
            raise TinyattnError(
                f"{self._shown} {what} {name or type(obj).__name__} that is not a global it "
                "named; a weights-only load calls nothing else"
            )

    # -- the opcodes: protocol, globals and calls
    @_op("PROTO")
    def _proto(self) -> None:
        self._read(1)

    @_op("FRAME")
    def _frame(self) -> None:
        self._read(8)

    @_op("STOP")
    def _stop(self) -> None:
        pass  # `load` returns the value on the stack

    @_op("GLOBAL")
    def _global_line(self) -> None:
        module = self._line()
        self._global(module, self._line())

    @_op("STACK_GLOBAL")
    def _stack_global(self) -> None:
        name, module = self._stack.pop(), self._stack.pop()
        if not isinstance(module, str) or not isinstance(name, str):
            raise TypeError("STACK_GLOBAL needs two strings")
        self._global(module, name)

    @_op("REDUCE")
    def _reduce(self) -> None:
        args = self._stack.pop()
        self._check_resolved(self._stack[-1], "calls a")
        if type(args) is not tuple:
            raise TypeError(f"REDUCE arguments are a {type(args).__name__}, not a tuple")
        self._stack[-1] = self._stack[-1](*args)

    @_op("NEWOBJ")
    def _newobj(self) -> None:
        args, cls = self._stack.pop(), self._stack.pop()
        self._check_resolved(cls, "instantiates a")
        if not isinstance(cls, type) or type(args) is not tuple:
            raise TypeError(f"NEWOBJ of {short(cls)}")
        self._stack.append(cls.__new__(cls, *args))

    @_op("BUILD")
    def _build(self) -> None:
        state, obj = self._stack.pop(), self._stack[-1]
        if type(obj) in (OrderedDict, Counter):  # a state dict's _metadata
            if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
                raise TypeError(f"BUILD of an {type(obj).__name__} with {short(state)}")
            obj.__dict__.update(state)
            return
        if not self._buildable(type(obj)):
            self._check_resolved(type(obj), "gives state to a", type(obj).__name__)
        _set_state(obj, state)

    @_op("BINPERSID")
    def _persistent(self) -> None:
        self._stack.append(self._persistent_load(self._stack.pop()))

    # -- the memo
    @_op("BINPUT")
    def _binput(self) -> None:
        self._memo[self._read(1)[0]] = self._stack[-1]

    @_op("LONG_BINPUT")
    def _long_binput(self) -> None:
        self._memo[self._unpack("<I")] = self._stack[-1]

    @_op("MEMOIZE")
    def _memoize(self) -> None:
        self._memo[len(self._memo)] = self._stack[-1]

    @_op("BINGET")
    def _binget(self) -> None:
        self._stack.append(self._memo[self._read(1)[0]])

    @_op("LONG_BINGET")
    def _long_binget(self) -> None:
        self._stack.append(self._memo[self._unpack("<I")])

    # -- containers
    @_op("MARK")
    def _mark(self) -> None:
        self._marks.append(self._stack)
        self._stack = []

    @_op("EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET")
    def _empty(self) -> None:
        kind = {")": tuple, "]": list, "}": dict, "\x8f": set}[chr(self._data[self._at - 1])]
        self._stack.append(kind())

    @_op("TUPLE")
    def _tuple(self) -> None:
        items = tuple(self._pop_mark())  # before `self._stack` is read: popping replaces it
        self._stack.append(items)

    @_op("TUPLE1", "TUPLE2", "TUPLE3")
    def _short_tuple(self) -> None:
        count = self._data[self._at - 1] - _CODES["TUPLE1"] + 1
        if len(self._stack) < count:
            raise IndexError(f"a tuple of {count} from a stack of {len(self._stack)}")
        items = tuple(self._stack[len(self._stack) - count :])
        del self._stack[len(self._stack) - count :]
        self._stack.append(items)

    @_op("APPEND")
    def _append(self) -> None:
        item = self._stack.pop()
        _require(self._stack[-1], list, "APPEND").append(item)

    @_op("APPENDS")
    def _appends(self) -> None:
        items = self._pop_mark()
        _require(self._stack[-1], list, "APPENDS").extend(items)

    @_op("SETITEM")
    def _setitem(self) -> None:
        value, key = self._stack.pop(), self._stack.pop()
        _require(self._stack[-1], dict, "SETITEM")[key] = value

    @_op("SETITEMS")
    def _setitems(self) -> None:
        items = self._pop_mark()
        target = _require(self._stack[-1], dict, "SETITEMS")
        for index in range(0, len(items) - 1, 2):
            target[items[index]] = items[index + 1]

    @_op("ADDITEMS")
    def _additems(self) -> None:
        items = self._pop_mark()
        _require(self._stack[-1], set, "ADDITEMS").update(items)

    # -- numbers and strings
    @_op("NONE")
    def _none(self) -> None:
        self._stack.append(None)

    @_op("NEWTRUE", "NEWFALSE")
    def _bool(self) -> None:
        self._stack.append(self._data[self._at - 1] == _CODES["NEWTRUE"])

    @_op("BININT1")
    def _binint1(self) -> None:
        self._stack.append(self._read(1)[0])

    @_op("BININT2")
    def _binint2(self) -> None:
        self._stack.append(self._unpack("<H"))

    @_op("BININT")
    def _binint(self) -> None:
        self._stack.append(self._unpack("<i"))

    @_op("LONG1")
    def _long1(self) -> None:
        self._stack.append(int.from_bytes(self._read(self._read(1)[0]), "little", signed=True))

    @_op("BINFLOAT")
    def _binfloat(self) -> None:
        self._stack.append(self._unpack(">d"))

    @_op("BINUNICODE", "SHORT_BINUNICODE")
    def _unicode(self) -> None:
        short = self._data[self._at - 1] == _CODES["SHORT_BINUNICODE"]
        size = self._read(1)[0] if short else self._unpack("<I")
        self._stack.append(str(self._read(size), "utf-8", "surrogatepass"))

    @_op("BINBYTES", "SHORT_BINBYTES", "SHORT_BINSTRING")
    def _bytes(self) -> None:
        long = self._data[self._at - 1] == _CODES["BINBYTES"]
        size = self._unpack("<I") if long else self._read(1)[0]
        self._stack.append(bytes(self._read(size)))


def _name(code: int) -> str:
    info = pickletools.code2op.get(chr(code))
    return f"{info.name} ({code:#04x})" if info is not None else f"{code:#04x} (no opcode)"


def _require(target: Any, kind: type, opcode: str) -> Any:
    if not isinstance(target, kind) or (kind is dict and type(target) not in _DICTS):
        raise TypeError(f"{opcode} on a {type(target).__name__}")
    return target


_DICTS = (dict, OrderedDict, Counter)  # what SETITEMS may fill, as in PyTorch's loader


def _set_state(obj: Any, state: Any) -> None:
    """What pickle's BUILD does to an allowed object: __setstate__, else dict and slots."""
    setstate = getattr(obj, "__setstate__", None)
    if setstate is not None:
        setstate(state)
        return
    slots = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slots = state
    if state:
        obj.__dict__.update(state)
    for name, value in (slots or {}).items():
        setattr(obj, name, value)


# ------------------------------------------------------------------------------------ writing
class PickleWriter:
    """``PickleWriter(leaf).dumps(value)``: protocol-2 pickle bytes of `value`. Dicts (str, int,
    float, bool, None or tuple keys), OrderedDicts, lists, tuples, sets, numbers, strings and
    bytes are written as pickle writes them; any other value goes to ``leaf(value, path)``,
    which returns a `Reduce` or a `Global` (or raises TypeError naming `path`). A value reached
    twice is written once and then fetched from the memo, as pickle does."""

    def __init__(self, leaf: Callable[[Any, str], Reduce | Global]) -> None:
        self._leaf = leaf
        self._out = bytearray()
        self._memo: dict[int, int] = {}
        self._kept: list[Any] = []  # memoized values stay alive, so their ids stay unique
        self._open: set[int] = set()  # tuples being written: one inside itself is refused

    def dumps(self, value: Any) -> bytes:
        self._out += b"\x80\x02"  # PROTO 2
        self.save(value, "")
        self._out += b"."  # STOP
        return bytes(self._out)

    def save(self, value: Any, path: str) -> None:
        kind = type(value)
        if value is None or kind in (bool, int, float, str):
            self._atom(value)
        elif id(value) in self._memo:
            self._get(self._memo[id(value)])
        elif kind in (list, dict, OrderedDict, set, tuple, bytes, complex):
            self._container(value, path)
        elif kind is Global:
            self._out += f"c{value.module}\n{value.name}\n".encode()
        elif kind is Reduce:
            self._reduce(value, path)
        elif kind is PersistentId:
            self.save(value.pid, path)
            self._out += b"Q"  # BINPERSID
        else:  # a tensor, an array, a device: written as `leaf` describes it, once
            self.save(self._leaf(value, path), path)
            self._put(value)

    def _atom(self, value: Any) -> None:
        if value is None or type(value) is bool:
            self._out += {None: b"N", True: b"\x88", False: b"\x89"}[value]
        elif type(value) is int:
            self._int(value)
        elif type(value) is float:
            self._out += b"G" + struct.pack(">d", value)
        else:
            encoded = value.encode("utf-8", "surrogatepass")
            self._out += b"X" + struct.pack("<I", len(encoded)) + encoded

    def _int(self, value: int) -> None:
        if 0 <= value < 256:
            self._out += b"K" + bytes([value])
        elif 0 <= value < 65536:
            self._out += b"M" + struct.pack("<H", value)
        elif -(2**31) <= value < 2**31:
            self._out += b"J" + struct.pack("<i", value)
        else:
            encoded = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
            if len(encoded) > 255:
                raise TypeError(f"save: an int of {value.bit_length()} bits is past protocol 2")
            self._out += b"\x8a" + bytes([len(encoded)]) + encoded

    def _container(self, value: Any, path: str) -> None:
        kind = type(value)
        if kind is tuple:
            self._tuple(value, path)
        elif kind in (bytes, complex, set):  # as protocol 2 writes them: a call of a builtin
            args = (value.real, value.imag) if kind is complex else (list(value),)
            if kind is bytes:  # _codecs.encode(text, "latin1"): how protocol 2 spells bytes
                func, args = Global("_codecs", "encode"), (value.decode("latin-1"), "latin1")
            else:
                func = Global("builtins", kind.__name__)
            self._reduce(Reduce(func, args), path)
            self._put(value)
        else:
            if kind is OrderedDict:
                self._reduce(Reduce(Global("collections", "OrderedDict"), ()), path)
            else:
                self._out += b"]" if kind is list else b"}"
            self._put(value)
            self._items(value, path)
            if kind is OrderedDict and vars(value):  # a state dict's _metadata, as pickle does
                self.save(vars(value), path)
                self._out += b"b"  # BUILD

    def _items(self, value: Any, path: str) -> None:
        self._out += b"("  # MARK
        if isinstance(value, list):
            for index, item in enumerate(value):
                self.save(item, _join(path, index))
            self._out += b"e"  # APPENDS
            return
        for key, item in value.items():
            if not (key is None or type(key) in (bool, int, float, str, tuple)):
                raise TypeError(
                    f"save: the dict at {path or 'the top'!r} has a {type(key).__name__} key "
                    f"{short(key)}; PyTorch's format takes str, number, None or tuple keys"
                )
            self.save(key, _join(path, "key"))
            self.save(item, _join(path, key))
        self._out += b"u"  # SETITEMS

    def _tuple(self, value: tuple, path: str) -> None:
        if id(value) in self._open:
            raise TypeError(f"save: the tuple at {path or 'the top'!r} contains itself")
        self._open.add(id(value))
        if len(value) <= 3:
            for index, item in enumerate(value):
                self.save(item, _join(path, index))
            self._out += b")\x85\x86\x87"[len(value) : len(value) + 1]
        else:
            self._out += b"("
            for index, item in enumerate(value):
                self.save(item, _join(path, index))
            self._out += b"t"
        self._open.discard(id(value))
        self._put(value)

    def _reduce(self, reduce: Reduce, path: str) -> None:
        self.save(reduce.func, path)
        self.save(tuple(reduce.args), path)
        self._out += b"R"  # REDUCE
        if reduce.state is not None:
            self.save(reduce.state, path)
            self._out += b"b"  # BUILD

    def _put(self, value: Any) -> None:
        index = self._memo[id(value)] = len(self._memo)
        self._kept.append(value)
        self._out += b"q" + bytes([index]) if index < 256 else b"r" + struct.pack("<I", index)

    def _get(self, index: int) -> None:
        self._out += b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index)


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


__all__ = ["Global", "PersistentId", "PickleReader", "PickleWriter", "Reduce"]
