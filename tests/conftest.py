"""Shared fixtures: every backend-aware test takes `device` and runs once per backend.

Backends: ``numpy`` (device "cpu"), ``strict`` (array_api_strict on a non-default device: any
implicit NumPy conversion or device mixing fails as it would on CuPy), and ``cupy`` (device
"cuda", skipped with the probe's reason when no GPU is usable). Select a subset with
``TINYATTN_TEST_BACKENDS=numpy,strict``.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import sys
from pathlib import Path

# The suite's arrays are small: one BLAS thread is faster than two fighting over a shared 2-core
# machine (measured 13x on a busy one). Set before NumPy loads; a user's own setting wins.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

import tinyattn as ta  # noqa: E402

# Hypothesis profiles. "ci" (the default) keeps the property tests that take the profile's
# example count, above all the op table's `check_grads` (tests/test_ops.py), to a few examples
# each; "thorough" is Hypothesis's own 100. Pick one with TINYATTN_HYPOTHESIS_PROFILE=thorough
# (or pytest's --hypothesis-profile=thorough).
settings.register_profile("ci", max_examples=5, deadline=None)
settings.register_profile("thorough", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("TINYATTN_HYPOTHESIS_PROFILE", "ci"))

BACKENDS = {"numpy": "cpu", "strict": "strict", "cupy": "cuda"}
SELECTED = [
    name.strip()
    for name in os.environ.get("TINYATTN_TEST_BACKENDS", "numpy,strict,cupy").split(",")
    if name.strip()
]


def _params():
    params = []
    for name in SELECTED:
        marks = []
        if name == "cupy":
            module, reason = ta.cupy_status()
            if module is None:
                marks.append(pytest.mark.skip(reason=f"cupy backend: {reason}"))
        params.append(pytest.param(BACKENDS[name], id=name, marks=marks))
    return params


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
