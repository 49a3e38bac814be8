"""Shared fixtures: every backend-aware test takes `device` and runs once per backend.

Backends: ``numpy`` (device "cpu"), ``strict`` (array_api_strict on a non-default device: any
implicit NumPy conversion or device mixing fails as it would on CuPy), and ``cupy`` (device
"cuda"). When no GPU is usable the cupy cases are dropped at collection rather than reported as
thousands of skips: one line at the end of the run gives their number and the probe's reason.
Select a subset with ``TINYATTN_TEST_BACKENDS=numpy,strict``.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import shutil
import sys
from pathlib import Path

# The suite's arrays are small: one BLAS thread is faster than two fighting over a shared 2-core
# machine (measured 13x on a busy one). Set before NumPy loads; a user's own setting wins.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
# Where Numba is installed, ta.compile fuses runs of elementwise ops into generated kernels,
# which round differently from eager; the suite compares compiled steps with eager bit for bit,
# so it replays unfused unless a test asks for fusion (tests/test_fusion*.py pass fuse=True).
os.environ.setdefault("TINYATTN_COMPILE_FUSE", "0")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

import tinyattn as ta  # noqa: E402

# Hypothesis profiles. "quick" (the default) keeps the property tests that take the profile's
# example count, above all the op table's `check_grads` (tests/test_ops.py), to a few examples
# each; "thorough" is Hypothesis's own 100. Pick one with TINYATTN_HYPOTHESIS_PROFILE=thorough
# (or pytest's --hypothesis-profile=thorough, which wins: the plugin loads it after this file).
settings.register_profile("quick", max_examples=5, deadline=None)
settings.register_profile("thorough", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("TINYATTN_HYPOTHESIS_PROFILE", "quick"))

BACKENDS = {"numpy": "cpu", "strict": "strict", "cupy": "cuda"}
SELECTED = [
    name.strip()
    for name in os.environ.get("TINYATTN_TEST_BACKENDS", "numpy,strict,cupy").split(",")
    if name.strip()
]


def _params():
    return [pytest.param(BACKENDS[name], id=name) for name in SELECTED]


def _cupy_unusable() -> str | None:
    """The probe's reason when the cupy backend is selected but cannot run here, else None."""
    if "cupy" not in SELECTED:
        return None
    module, reason = ta.cupy_status()
    return None if module is not None else reason


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the cases of the device fixture's cupy parameter when CuPy cannot run: they would
    only be skipped, one skip line per test function. Counted for the closing summary."""
    reason = _cupy_unusable()
    if reason is None:
        return
    dropped = [item for item in items if _on_cupy(item)]
    if not dropped:
        return
    items[:] = [item for item in items if not _on_cupy(item)]
    config.hook.pytest_deselected(items=dropped)
    config.stash[CUPY_DROPPED] = len(dropped)
    if hasattr(config, "workeroutput"):  # a pytest-xdist worker: tell the controller
        config.workeroutput["tinyattn_cupy_dropped"] = len(dropped)


def _on_cupy(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("device") == BACKENDS["cupy"]


CUPY_DROPPED = pytest.StashKey[int]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist's controller collects nothing itself: it takes the workers' count."""
    dropped = getattr(node, "workeroutput", {}).get("tinyattn_cupy_dropped")
    if dropped is not None:
        node.config.stash[CUPY_DROPPED] = dropped


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    dropped = config.stash.get(CUPY_DROPPED, 0)
    if dropped:
        reason = _cupy_unusable()
        terminalreporter.write_line(f"cupy backend: {dropped} cases deselected, not run: {reason}")


@pytest.fixture(params=_params())
def device(request):
    """The device string of one backend; strict also forbids data-dependent shapes."""
    if request.param == "strict":
        import array_api_strict

        flags = array_api_strict.ArrayAPIStrictFlags(
            boolean_indexing=False, data_dependent_shapes=False
        )
        with flags:
            yield request.param
    else:
        yield request.param


@pytest.fixture
def no_cyclic_gc():
    """Reference counting alone must free graphs: the cyclic collector is off for the test."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@pytest.fixture(scope="session")
def copy_task():
    """examples/copy_task.py as a module, loaded once (the one a test module already loaded, if
    any: its dataclasses look their module up in sys.modules)."""
    if "copy_task" not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "examples" / "copy_task.py"
        spec = importlib.util.spec_from_file_location("copy_task", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["copy_task"] = module
        spec.loader.exec_module(module)
    return sys.modules["copy_task"]


# ------------------------------------------------------------------ a real browser
def _chromium_path() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no system Chromium on PATH (Debian/Ubuntu: apt-get install chromium)")


@pytest.fixture(scope="module")
def browser():
    """The system's Chromium driven by Playwright (the pages' browser tests); skips, saying
    why, without either."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright is not installed (pip install -e '.[browser]')"
    )
    executable = _chromium_path()
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable)
        yield launched
        launched.close()
