"""Guards of ``ta.compile``: the Python values a recording read, and whether they still hold.

Imports `tensor` only (for the Tensor type); `compiler` uses it. A replay runs none of the step's
Python, so every Python value the recorded code read must be the same when a tape replays: plain
values (numbers, strings, bools, None, tuples of them) compared by value, anything else by
identity. `guard` keys one value; `Tracer` follows every Python function the step runs while it
is recorded and notes each value read through a chain of globals, closure cells, arguments and
attributes or constant subscripts (`cfg.optim.lr`, ``config["optim"]["lr"]``, ``self.scale``).
"""

from __future__ import annotations

import argparse
import dis
import gc
import operator
import os
import sys
import sysconfig
import threading
import types
from collections.abc import Callable
from typing import Any

from ..tensor import Tensor

# Values a guard keeps as themselves: compared by value, so a new number records again.
PLAIN = (int, float, complex, bool, str, bytes, type(None))
_PLAIN_TYPES = frozenset(PLAIN)
_NAMESPACES = (types.SimpleNamespace, argparse.Namespace)
UNBOUND = object()
# A dict or namespace of settings (`config["lr"]`, `args.lr`) up to this size
# is keyed by its entries too, one level deep; a larger one (a vocabulary) only by identity, as
# reading it on every call would cost more than the replay saves.
SETTINGS_SIZE = 64


class Same:
    """A key part equal only to one for the very same object. It holds the object, so that
    the id cannot be reused by a new one while the key lives (an id alone could be)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is Same and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)

    def __repr__(self) -> str:
        return f"<{type(self.value).__name__} object at {id(self.value):#x}>"


class _NaN:
    """The key part of a float NaN: NaN != NaN, so a NaN a step reads (``xp.nan`` in an array
    library's own code) would otherwise count as changed on every call."""

    def __repr__(self) -> str:
        return "nan"


NAN = _NaN()


def guard(value: Any) -> Any:
    """A value's part of a cache key: plain values (and tuples of them) by value, anything
    else by identity (a tensor compared by value would be an op); a small dict or namespace
    by identity and by its entries, each plain by value or else by identity. A list only by
    identity: a step appending to one (a loss history) must still replay; its entries are
    guarded where the code reads them with a constant index (``lrs[0]``)."""
    kind = type(value)  # by the type, not isinstance: no __class__ lookup on every call
    if kind in _PLAIN_TYPES or issubclass(kind, PLAIN):
        return NAN if value != value else value
    if kind is tuple:
        return tuple(guard(v) for v in value)
    entries = value if kind is dict else None
    if issubclass(kind, _NAMESPACES):
        entries = vars(value)
    if entries is not None and len(entries) <= SETTINGS_SIZE:
        return (Same(value), tuple((shallow(k), shallow(v)) for k, v in entries.items()))
    return Same(value)


def shallow(value: Any) -> Any:
    """A plain value (or a tuple of them) by value, anything else by identity."""
    if isinstance(value, PLAIN):
        return NAN if value != value else value
    if type(value) is tuple and all(isinstance(v, PLAIN) for v in value):
        return tuple(shallow(v) for v in value)
    return Same(value)


def free_names(step: Callable) -> tuple[dict, tuple[str, ...], tuple, Any]:
    """(the globals of `step`'s function, the names its code loads from them, its closure
    cells, the object a bound method is bound to): what a replay would otherwise freeze.
    Nested code (a comprehension, a lambda) reads the same globals, so its names count too.
    Empty for a callable that is not a function."""
    function = getattr(step, "__func__", step)
    owner = getattr(step, "__self__", None)
    code = getattr(function, "__code__", None)
    if not isinstance(code, types.CodeType):
        return {}, (), (), None
    names: set[str] = set()
    codes = [code]
    while codes:
        current = codes.pop()
        # Only names loaded as globals: co_names also holds attribute names (`optimizer.step`
        # beside a loop's global `step` counter must not count).
        names.update(i.argval for i in dis.get_instructions(current) if i.opname == "LOAD_GLOBAL")
        codes.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    cells = tuple(function.__closure__ or ())
    return function.__globals__, tuple(sorted(names)), cells, getattr(owner, "__dict__", None)


# ------------------------------------------------------------------------------ deep guards
class Guard:
    """One value the recorded code read: `read()` gives its current key part, `value` the one
    recorded, `expression` and `where` say what it is and which function read it."""

    __slots__ = ("read", "value", "expression", "where", "site")

    def __init__(self, read: Callable[[], Any], value: Any, expression: str, where: str) -> None:
        self.read, self.value, self.expression, self.where = read, value, expression, where
        self.site: tuple = ()  # (root kind, id of the root, path): the same read in two calls

    def describe(self, now: Any) -> str:
        return f"`{self.expression}` ({self.where}) was {_shown(self.value)}, now {_shown(now)}"


def _shown(value: Any) -> str:
    if isinstance(value, tuple) and value and isinstance(value[0], Same):
        value = value[0]  # a small container: its identity says enough
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def first_changed(guards: list[Guard]) -> tuple[Guard, Any] | None:
    """The first guard whose value changed (with its new key part), or None: the replay's check."""
    for g in guards:
        now = g.read()
        if now != g.value:
            return g, now
    return None


def changed_between(first: list[Guard], second: list[Guard]) -> tuple[Guard, Any] | None:
    """A read that two recordings made of the same root and path, with different values."""
    seen = {g.site: g for g in first}
    for g in second:
        before = seen.get(g.site)
        if before is not None and before.value != g.value:
            return before, g.value
    return None


def _follow(value: Any, path: tuple) -> Any:
    for kind, name in path:
        value = getattr(value, name) if kind == "attr" else value[name]
    return value


def _reader(path: tuple) -> Callable[[Any], Any]:
    """``read(root)``: the value at the end of `path` (C getters where the path allows)."""
    if path and all(kind == "attr" for kind, _ in path):
        return operator.attrgetter(".".join(name for _, name in path))
    if len(path) == 1:
        return operator.itemgetter(path[0][1])
    return lambda root: _follow(root, path)


def _text(root: str, path: tuple) -> str:
    return root + "".join(f".{n}" if kind == "attr" else f"[{n!r}]" for kind, n in path)


_LIBRARY = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # tinyattn/
_SKIPPED = tuple(
    os.path.abspath(p) + os.sep
    for p in {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    if p
)
_ROOTS = {"LOAD_GLOBAL": "global", "LOAD_DEREF": "deref", "LOAD_FAST": "fast"}
_ROOTS.update(LOAD_FAST_CHECK="fast", LOAD_FAST_BORROW="fast")
_METHOD_FLAG = sys.version_info >= (3, 12)  # LOAD_ATTR's low bit marks a method load
# id(code) -> (code, its chains); () for code that is not followed. By id: hashing a code object
# hashes its bytecode, on every call; the code is kept, so its id is not reused.
_chains: dict[int, tuple] = {}


def chains_of(code: types.CodeType) -> tuple:
    """(root kind, root name, path, line) for every chain the code reads: a global, closure
    variable or argument followed by attribute loads and constant subscripts. Method loads end a
    chain (the method's own code is followed when it runs). () for tinyattn's own code (its
    state is keyed by the modules' `_replay_key` and the tape) and the standard library's and
    installed packages'."""
    found = _chains.get(id(code))
    if found is None:
        found = _chains[id(code)] = (code, _read_chains(code))
    return found[1]


def _array_libraries() -> tuple[str, ...]:
    """The folders of the array libraries loaded so far, wherever they are installed (a folder
    on PYTHONPATH is not one of sysconfig's): their code reads module constants only."""
    folders = []
    for name in ("numpy", "cupy", "cupyx", "array_api_compat", "array_api_strict"):
        module = sys.modules.get(name)
        if getattr(module, "__file__", None):
            folders.append(os.path.dirname(os.path.abspath(module.__file__)) + os.sep)
    return tuple(folders)


def _read_chains(code: types.CodeType) -> tuple:
    name = os.path.abspath(code.co_filename) if not code.co_filename.startswith("<") else ""
    if not name or name.startswith(_LIBRARY) or name.startswith(_SKIPPED):
        return ()
    if name.startswith(_array_libraries()):
        return ()
    arguments = set(code.co_varnames[: _argument_count(code)])
    instructions = list(dis.get_instructions(code))
    chains, line = [], code.co_firstlineno
    for k, instruction in enumerate(instructions):
        line = getattr(instruction, "line_number", None) or instruction.starts_line or line
        kind = _ROOTS.get(instruction.opname)
        if kind is None or not isinstance(instruction.argval, str):
            continue
        if kind == "fast" and instruction.argval not in arguments:
            continue  # a local assigned in the body: not known when the function starts
        path = _path_after(instructions, k + 1)
        if path or kind != "fast":
            chains.append((kind, instruction.argval, path, line))
    return tuple(dict.fromkeys(chains))


def _argument_count(code: types.CodeType) -> int:
    count = code.co_argcount + code.co_kwonlyargcount
    return count + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs


def _path_after(instructions: list, k: int) -> tuple:
    path = []
    while k < len(instructions):
        instruction = instructions[k]
        if instruction.opname == "LOAD_ATTR":
            if _METHOD_FLAG and instruction.arg & 1:
                break  # a method: its code is followed when it is called
            path.append(("attr", instruction.argval))
            k += 1
            continue
        following = instructions[k + 1] if k + 1 < len(instructions) else None
        if (
            instruction.opname in ("LOAD_CONST", "LOAD_SMALL_INT")
            and following is not None
            and (following.opname == "BINARY_SUBSCR" or following.argrepr == "[]")
            and isinstance(instruction.argval, int | str | tuple)
        ):
            path.append(("item", instruction.argval))
            k += 2
            continue
        break
    return tuple(path)


class Tracer:
    """Follows the Python functions a step runs while it is recorded (``sys.settrace``, this
    thread only, called once as each function starts; a debugger's tracer keeps working) and
    keeps a `Guard` for each chain their code reads, with its value when the function started.

    A garbage collection can start inside any allocation of the step; the functions it runs (the
    process's ``gc.callbacks``, finalizers) are not the step's and are not followed: a profiler's
    callback that reads a clock would otherwise be a guard that changes at every call."""

    def __init__(self) -> None:
        self.guards: list[Guard] = []
        self._sites: set[tuple] = set()
        self._functions: dict[types.CodeType, list] = {}
        self._previous: Any = None
        self.roots: dict[int, Any] = {}  # id -> an argument whose attributes a guard reads
        self._thread = 0
        self._collecting = False

    def __enter__(self) -> Tracer:
        self._previous = sys.gettrace()
        self._thread = threading.get_ident()
        # First and last in the list: the flag is up before any other callback's "start" and
        # down after every "stop".
        gc.callbacks.insert(0, self._gc_starts)
        gc.callbacks.append(self._gc_stops)
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.settrace(self._previous)
        for callback in (self._gc_starts, self._gc_stops):
            if callback in gc.callbacks:
                gc.callbacks.remove(callback)
        self._collecting = False
        # Arguments that died with the step (a dict it made and passed to a helper) cannot
        # change any more: their guards would only keep them alive. Such a root is held by
        # `roots`, by its reader's closure and by getrefcount's own argument, nothing else.
        dead = set()
        for key in list(self.roots):
            if sys.getrefcount(self.roots[key]) <= 3:
                dead.add(key)
        self.guards = [g for g in self.guards if g.site[:2] not in {("object", k) for k in dead}]
        self.roots.clear()

    def _gc_starts(self, phase: str, info: dict) -> None:
        if phase == "start" and threading.get_ident() == self._thread:
            self._collecting = True

    def _gc_stops(self, phase: str, info: dict) -> None:
        if phase == "stop" and threading.get_ident() == self._thread:
            self._collecting = False

    def _trace(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        """The global trace function: called as each function starts (no line events)."""
        if not self._collecting and frame.f_code not in _GC_FLAGS:
            chains = chains_of(frame.f_code)
            if chains:
                self._visit(frame, chains)
        return None if self._previous is None else self._previous(frame, event, arg)

    def _visit(self, frame: types.FrameType, chains: tuple) -> None:
        code = frame.f_code
        where = f"read by {code.co_qualname} at {os.path.basename(code.co_filename)}"
        local = frame.f_locals
        for kind, name, path, line in chains:
            root = self._root(frame, local, kind, name, path)
            if root is None:
                continue
            start, read, site = root
            site = (*site, path)
            if site in self._sites:
                continue
            self._sites.add(site)
            try:
                if _through_tensor(start(), path):
                    continue  # a tensor's attributes (shape, T) are the tape's business
                value = read()
            except Exception:  # noqa: BLE001 (not there yet: set later in the function)
                continue
            kept = Guard(read, value, _text(name, path), f"{where}:{line}")
            kept.site = site
            self.guards.append(kept)

    def _root(self, frame: Any, local: dict, kind: str, name: str, path: tuple) -> Any:
        """(root value, read, site) for a chain, or None where it is not followed."""
        follow = _reader(path) if path else None
        if kind == "global":
            names = frame.f_globals
            if name not in names:
                return None  # a builtin
            start = lambda: names.get(name, UNBOUND)  # noqa: E731
            return start, _reading(start, follow), ("global", id(names), name)
        if kind == "deref" and name in frame.f_code.co_freevars:
            cell = self._cell(frame, local, name)
            if cell is not None:
                start = lambda: _contents(cell)  # noqa: E731
                return start, _reading(start, follow), ("cell", id(cell), name)
        if not path or name not in local:
            return None
        root = local[name]
        if isinstance(root, (Tensor, *PLAIN)):
            return None  # the tape follows tensors; a plain argument is fixed by its caller
        self.roots[id(root)] = root
        start = lambda: root  # noqa: E731
        return start, _reading(start, follow), ("object", id(root), name)

    def _cell(self, frame: Any, local: dict, name: str) -> Any:
        """The closure cell a function's free variable `name` lives in: its function is found
        among the code object's referrers, by the values its cells hold now."""
        code = frame.f_code
        functions = self._functions.get(code)
        if functions is None:
            functions = [f for f in gc.get_referrers(code) if isinstance(f, types.FunctionType)]
            self._functions[code] = functions
        cells = [
            dict(zip(code.co_freevars, f.__closure__ or (), strict=False)).get(name)
            for f in functions
            if f.__code__ is code
        ]
        value = local.get(name, UNBOUND)
        matching = [c for c in cells if c is not None and _contents(c) is value]
        return matching[0] if len(matching) == 1 else None


_GC_FLAGS = {Tracer._gc_starts.__code__, Tracer._gc_stops.__code__}


def _reading(start: Callable[[], Any], follow: Any) -> Callable[[], Any]:
    """``read()``: the key part of the value at the end of the chain, now."""
    if follow is None:
        return lambda: guard(start())

    def read() -> Any:
        try:
            return guard(follow(start()))
        except Exception:  # noqa: BLE001 (an attribute deleted, a key removed: records again)
            return UNBOUND

    return read


def _through_tensor(value: Any, path: tuple) -> bool:
    """Whether the chain passes through a tensor before its end."""
    for step in path:
        if isinstance(value, Tensor):
            return True
        value = _follow(value, (step,))
    return False


def _contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # not yet bound in the enclosing function
        return UNBOUND
