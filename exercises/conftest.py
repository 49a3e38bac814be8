"""Grading the exercises: ``python -m pytest exercises`` grades your files in this folder;
``python -m pytest exercises --solutions`` runs the same graders on exercises/solutions/, where
every grader must pass (a wrong reference solution or a broken grader shows), and
``python -m pytest exercises --stubs`` on the untouched files of a fresh checkout, where every
grader must fail by reaching a stub's ``NotImplementedError`` (a grader that cannot fail, or
that never calls the learner's code, shows). CI runs both."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent
_loaded: dict[Path, ModuleType] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--solutions",
        action="store_true",
        default=False,
        help="grade the reference solutions in exercises/solutions/ instead of your own files",
    )
    parser.addoption(
        "--stubs",
        action="store_true",
        default=False,
        help="grade the untouched stubs: a grader passes when the stub fails it "
        "(NotImplementedError), and fails when the stub passes it",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--stubs"):
        if config.getoption("--solutions"):
            raise pytest.UsageError("--stubs and --solutions grade different files: pick one")
        stub = pytest.mark.xfail(
            raises=NotImplementedError, strict=True, reason="a stub must fail every grader"
        )
        for item in items:
            item.add_marker(stub)


def _load(path: Path) -> ModuleType:
    if path not in _loaded:  # one module per file: its Function classes are made once
        name = f"graded_{path.parent.name}_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _loaded[path] = module
    return _loaded[path]


@pytest.fixture
def exercise(request: pytest.FixtureRequest):
    """``exercise("ex01_mul_div")``: the module being graded (yours, or the solution)."""
    folder = HERE / "solutions" if request.config.getoption("--solutions") else HERE
    return lambda name: _load(folder / f"{name}.py")
