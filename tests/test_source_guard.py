"""Source guard: the backend boundary and the portability rules hold in the code itself.

An AST scan (so comments, strings and docstrings never trip it):
- only the ``tinyattn/backend/`` package imports NumPy, CuPy, array_api_strict or array_api_compat;
- ops, functional and nn code uses none of the calls that break on a non-NumPy device or that
  read past the array API: ``.T`` (``.mT`` is the array API spelling), ``.item()`` (a hidden
  device sync), ``from_dlpack``, and ``._array`` (array_api_strict's private NumPy array);
- no function with a ``device`` parameter is cached by ``functools.lru_cache``/``cache``:
  CuPy's ``Device`` is unhashable (array_api_strict's is not, so the stand-in cannot catch it),
  and ``backend.cache_per_device`` is the cache for those.
The scanner itself is tested on planted violations, so a broken scanner cannot pass silently.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tinyattn"
BACKEND = PACKAGE / "backend"  # the package: __init__.py, files.py, cuda_graphs.py
BACKEND_LIBRARIES = {"numpy", "cupy", "cupyx", "array_api_strict", "array_api_compat"}


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _portable_sources() -> list[Path]:
    """ops, kernels, functional and nn: the code that must run unchanged on every device."""
    portable = ("ops", "nn", "functional", "functional.py", "kernels.py")
    return [path for path in _sources() if path.relative_to(PACKAGE).parts[0] in portable]


def _imported_module(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    if (  # importlib.import_module("numpy") or __import__("numpy")
        isinstance(node, ast.Call)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and getattr(node.func, "attr", getattr(node.func, "id", None))
        in ("import_module", "__import__")
    ):
        return [node.args[0].value]
    return []


def backend_imports(source: str, filename: str = "<source>") -> list[str]:
    """Every import of a backend library in `source`, as 'file:line: module'."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        for module in _imported_module(node):
            if module.split(".")[0] in BACKEND_LIBRARIES:
                found.append(f"{filename}:{node.lineno}: imports {module}")
    return found


def non_portable_uses(source: str, filename: str = "<source>") -> list[str]:
    """Every ``.T``, ``.item()``, ``from_dlpack`` and ``._array`` in `source`."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        name = None
        if isinstance(node, ast.Attribute) and node.attr in ("T", "_array", "from_dlpack"):
            name = "." + node.attr
        elif isinstance(node, ast.Name) and node.id == "from_dlpack":
            name = "from_dlpack"
        elif isinstance(node, ast.alias) and node.name.split(".")[-1] == "from_dlpack":
            name = "from_dlpack"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "item"
        ):
            name = ".item()"
        if name is not None:
            found.append(f"{filename}:{getattr(node, 'lineno', '?')}: uses {name}")
    return found


def device_keyed_caches(source: str, filename: str = "<source>") -> list[str]:
    """Every function with a ``device`` parameter under a functools cache decorator."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.FunctionDef):
            continue
        if "device" not in [arg.arg for arg in node.args.args + node.args.kwonlyargs]:
            continue
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name in ("lru_cache", "cache"):
                found.append(f"{filename}:{node.lineno}: {node.name} caches on a device")
    return found


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# ----------------------------------------------------------------------------- the package
def test_no_functools_cache_is_keyed_on_a_device():
    found = [hit for path in _sources() for hit in device_keyed_caches(_read(path), str(path))]
    assert not found, "use backend.cache_per_device (CuPy devices are unhashable):\n" + "\n".join(
        found
    )


def test_cache_per_device_takes_an_unhashable_device():
    from tinyattn import backend

    class Device:  # as CuPy's: compared by id, not hashable
        __hash__ = None

        def __init__(self, number):
            self.id = number

    calls = []

    @backend.cache_per_device(maxsize=4)
    def made(n, device):
        calls.append((n, getattr(device, "id", device)))
        return (n, device)

    zero, one = Device(0), Device(1)
    assert made(3, zero) == (3, zero) and made(3, zero) == (3, zero)
    assert made(3, one)[1] is one and made(3, "cpu") == (3, "cpu")
    assert calls == [(3, 0), (3, 1), (3, "cpu")]  # made once per device


def test_the_package_is_scanned():
    names = {path.relative_to(PACKAGE).as_posix() for path in _sources()}
    assert {"backend/__init__.py", "autograd/engine.py", "tensor.py", "ops/elementwise.py"} <= names
    assert "ops/elementwise.py" in {p.relative_to(PACKAGE).as_posix() for p in _portable_sources()}


def test_backend_is_the_only_module_importing_array_libraries():
    found = [
        problem
        for path in _sources()
        if BACKEND not in path.parents
        for problem in backend_imports(_read(path), path.relative_to(PACKAGE.parent).as_posix())
    ]
    assert not found, "import these only in tinyattn/backend/:\n" + "\n".join(found)
    # the backend does import them: the scan sees imports
    assert backend_imports(_read(BACKEND / "__init__.py"))


def test_portable_code_avoids_non_portable_calls():
    found = [
        problem
        for path in _portable_sources()
        for problem in non_portable_uses(_read(path), path.relative_to(PACKAGE.parent).as_posix())
    ]
    assert not found, "not portable across array libraries:\n" + "\n".join(found)


# ------------------------------------------------------------------------- the scanner itself
IMPORT_CASES = [
    # (source, number of backend imports the scanner must report)
    ("import numpy as np", 1),
    ("import numpy.linalg", 1),
    ("from numpy import asarray", 1),
    ("import cupy, os", 1),
    ("from cupyx.scipy import special", 1),
    ("def f():\n    import array_api_strict\n", 1),
    ("import array_api_compat.numpy as xp", 1),
    ("import importlib\nxp = importlib.import_module('cupy')", 1),
    ("np = __import__('numpy')", 1),
    ("from . import backend\nfrom .backend import namespace", 0),
    ("import numbers\nimport math", 0),
    ('"""Uses numpy: import numpy as np."""\n# import cupy', 0),
]


@pytest.mark.parametrize("source,count", IMPORT_CASES, ids=[c[0] for c in IMPORT_CASES])
def test_scanner_finds_backend_imports(source, count):
    assert len(backend_imports(source)) == count


USE_CASES = [
    ("y = x.T", 1),
    ("y = x.array.T @ w", 1),
    ("value = loss.item()", 1),
    ("value = xp.max(x).item()", 1),
    ("y = xp.from_dlpack(x)", 1),
    ("from numpy import from_dlpack", 1),
    ("raw = x._array", 1),
    ("y = x.mT\nz = xp.matrix_transpose(x)", 0),
    ("items = d.items()\nT = 3\nself.T_max = T", 0),
    ("'''call .item() and .T here'''", 0),
]


@pytest.mark.parametrize("source,count", USE_CASES, ids=[c[0] for c in USE_CASES])
def test_scanner_finds_non_portable_uses(source, count):
    assert len(non_portable_uses(source)) == count


CACHE_CASES = [
    ("@functools.lru_cache(maxsize=4)\ndef f(xp, n, device): pass", 1),
    ("@lru_cache\ndef f(n, *, device): pass", 1),
    ("@functools.cache\ndef f(device): pass", 1),
    ("@backend.cache_per_device(maxsize=4)\ndef f(xp, n, device): pass", 0),
    ("@functools.cache\ndef f(xp, dtype): pass", 0),
]


@pytest.mark.parametrize("source,count", CACHE_CASES, ids=[c[0] for c in CACHE_CASES])
def test_scanner_finds_device_keyed_caches(source, count):
    assert len(device_keyed_caches(source)) == count
