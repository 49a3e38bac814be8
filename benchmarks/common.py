"""What the benchmarks that run each measurement in its own process share: the children's
environment, the BLAS they report, and examples/gpt.py loaded under either library.

Imported by compiled.py and generate.py (run by hand, never as tests).
"""

from __future__ import annotations

import os
import statistics
import time
import types
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# This machine forces OpenBLAS's older Haswell kernel through these two; a user's machine with
# the same CPU runs the native one, so every child starts without them.
REMOVED = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
GPT_EXAMPLE = ROOT / "examples" / "gpt.py"
# The example's three import lines, and PyTorch's (the example promises it runs with these).
PORT = {
    "import tinyattn as torch": "import torch",
    "import tinyattn.nn as nn": "import torch.nn as nn",
    "import tinyattn.nn.functional as F": "import torch.nn.functional as F",
}


def child_env(threads: int, keep_freed_memory: bool = False) -> dict:
    """The environment of one measurement process: the native OpenBLAS kernel, `threads` BLAS
    threads, the project importable, and (when asked) tinyattn's allocator setting."""
    env = {k: v for k, v in os.environ.items() if k not in REMOVED}
    env.update(OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    env.update(MKL_NUM_THREADS=str(threads))
    if keep_freed_memory:
        env["TINYATTN_KEEP_FREED_MEMORY"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def blas_info() -> list[dict]:
    """The BLAS libraries loaded in this process, as threadpoolctl reports them (or [])."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    keep = ("internal_api", "version", "architecture", "num_threads", "threading_layer")
    return [{k: i.get(k) for k in keep} for i in threadpool_info() if i["user_api"] == "blas"]


def gpt_example(library: str) -> types.ModuleType:
    """examples/gpt.py as a module; with `library` "torch", its import lines are PyTorch's."""
    source = GPT_EXAMPLE.read_text()
    if library == "torch":
        for ours, theirs in PORT.items():
            source = source.replace(ours, theirs)
    module = types.ModuleType(f"gpt_{library}")
    module.__file__ = str(GPT_EXAMPLE)
    exec(compile(source, str(GPT_EXAMPLE), "exec"), module.__dict__)  # noqa: S102
    return module


def median_seconds(run: Callable[[], object], warmup: int, repeats: int) -> float:
    """The median wall time of `run` over `repeats` calls, after `warmup` untimed ones (a
    compiled step records its first two calls)."""
    for _ in range(warmup):
        run()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
