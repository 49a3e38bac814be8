"""What the benchmarks that run each measurement in its own process share: the children's
environment, the BLAS they report, and examples/gpt.py loaded under either library.

Imported by bench.py, compiled.py, generate.py and per_op.py (run by hand, never as tests).
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
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


def cpu_model() -> str:
    """The CPU's model name and the vector extensions the BLAS kernels care about."""
    name, flags = platform.processor() or platform.machine(), ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    flags = " ".join(f for f in ("avx2", "fma", "avx512f", "avx512bw") if f in have)
                    break
    except OSError:
        pass
    return f"{name} ({flags or 'flags unknown'}), {os.cpu_count()} CPUs"


def torch_blas(torch: types.ModuleType) -> list[str]:
    """PyTorch's BLAS and CPU kernels, from ``torch.__config__`` (its own GEMMs do not show in
    threadpoolctl), and its thread count."""
    keep = ("BLAS_INFO", "CPU capability usage", "USE_MKL", "USE_OPENMP")
    parts = [
        p.strip().removeprefix("- ").removeprefix("Build settings: ")
        for line in torch.__config__.show().splitlines()
        for p in line.split(",")
    ]
    return [p for p in parts if p.startswith(keep)] + [f"threads {torch.get_num_threads()}"]


def machine_report() -> list[str]:
    """The lines every benchmark prints above its tables: the CPU, NumPy's BLAS (threadpoolctl,
    in a fresh process so that this one's thread limits do not show) and PyTorch's, if
    installed."""
    lines = [f"CPU: {cpu_model()}; Python {platform.python_version()}"]
    probe = (
        "import json, numpy; from common import blas_info; "
        "print(json.dumps([numpy.__version__, blas_info()]))"
    )
    env = {k: v for k, v in os.environ.items() if k not in REMOVED}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(__file__).parent), env.get("PYTHONPATH")])
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False
    )
    try:
        version, blas = __import__("json").loads(done.stdout)
        described = "; ".join(
            f"{b['internal_api']} {b['version']} ({b['architecture']}, {b['num_threads']} threads"
            f" by default)"
            for b in blas
        )
        lines.append(f"NumPy {version} BLAS: {described or 'threadpoolctl not installed'}")
    except ValueError:
        lines.append("NumPy BLAS: could not be probed")
    try:
        import torch
    except ImportError:
        lines.append("PyTorch: not installed")
    else:
        lines.append(f"PyTorch {torch.__version__}: " + ", ".join(torch_blas(torch)))
    return lines


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


def timed_range(call: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    """(median, min, max) seconds of `call` over `repeats` calls, after one warm-up call."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times)


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


CHAIN_OPS = 100  # elementwise ops in `per_op_chain`'s forward


def per_op_chain(library: str, shape: tuple) -> Callable[[], object]:
    """The per-op benchmark's chain in `library`, imported here and only it: y = x; 50 times
    y = y * 1.0001 + 0.0001 (`CHAIN_OPS` elementwise ops) on float32 values that require grad,
    then y.sum().backward(). "numpy" is the floor: the same forward calls and the backward's 50
    products written out, with no graph."""
    import numpy as np

    host = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    if library == "numpy":

        def numpy_chain() -> object:
            ys = [host]
            for _ in range(50):
                ys.append(ys[-1] * np.float32(1.0001) + np.float32(0.0001))
            grad = np.ones_like(host)
            for _ in range(50):
                grad = grad * np.float32(1.0001)
            return grad

        return numpy_chain
    lib = __import__(library)  # tinyattn or torch: the same two calls
    x = lib.tensor(host, requires_grad=True)

    def chain() -> None:
        y = x
        for _ in range(50):
            y = y * 1.0001 + 0.0001
        y.sum().backward()
        x.grad = None

    return chain
