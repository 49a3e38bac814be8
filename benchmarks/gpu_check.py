"""The GPU check: one command that runs tinyattn's CuPy path end to end and writes one report.

Run through benchmarks/gpu_check.sh (which first installs what is missing, without network):

    benchmarks/gpu_check.sh OUTDIR [WHEELDIR]       # on a machine with CuPy and a GPU
    benchmarks/gpu_check.sh --rehearse OUTDIR       # every part on the CPU, tiny sizes

or directly: ``python benchmarks/gpu_check.py [--rehearse [--tiny]] [--only PART ...]
[--without-torch] OUTDIR`` (the script passes what follows ``--`` on to it).

Parts, each in its own process under its own time limit (a part that fails or runs out of time
is reported and the next one runs; the report, written by gpu_report.py, is rewritten after
every part):

- env: date, GPU, driver, CUDA, CuPy, NumPy and PyTorch versions;
- losses: eager and compiled (`ta.compile`) training from the same seed must give the same
  losses bit for bit (compiled.py's small LM and bench model);
- steps: a training step of the same two models, tinyattn eager and compiled against PyTorch
  CUDA eager (compiled.py's models);
- attention: scaled_dot_product_attention forward + backward at T = 8192 (B 1, H 4, D 16)
  against PyTorch's;
- generate: per-token greedy generation with the KV cache (generate.py: eager, compiled,
  PyTorch), which must write the same tokens;
- copy: examples/copy_task.py on the device;
- tests: the suite's CuPy cases (pytest -k cupy), counted as they finish.

The rehearsal runs every part on the CPU where CuPy is absent: tinyattn on the `strict` test
device, PyTorch on the CPU, the `strict` test cases of two files, tiny sizes, and a stand-in
for CUDA-graph capture (a "graph" is the captured function, run again at each launch), so
that the compiled steps take the capture-and-launch path. Its numbers say nothing about a
GPU; the report judges only the correctness targets there. ``--tiny`` is smaller still, with
tinyattn on NumPy: tests/test_gpu_check.py runs it, with ``--without-torch``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.abc
import importlib.metadata
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpu_report import ENV_KEYS, MODELS, PARTS, render_report

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Test files that exercise the GPU-specific code run first, so a run stopped by its time
# limit has counted them; the rest follow in name order.
FIRST_TESTS = (
    "test_compile.py",
    "test_fast_paths.py",
    "test_fused.py",
    "test_attention_blockwise.py",
    "test_kv_cache.py",
    "test_optim_foreach.py",
    "test_engine.py",
    "test_torch_parity.py",
    "test_ops.py",
)


@dataclass(frozen=True)
class Plan:
    """What each part runs: the devices, sizes, repeats and time limits (seconds)."""

    rehearse: bool
    device: str  # tinyattn's device
    torch_device: str
    limits: dict
    tiny: bool = False
    with_torch: bool = True
    sizes: dict = field(default_factory=dict)  # overrides of compiled.py's model sizes
    loss_steps: int = 12
    warmup: int = 10  # a compiled step records 2 calls, captures on the 4th, launches after
    repeats: int = 30
    rounds: int = 3
    attention_length: int = 8192
    attention_repeats: int = 10
    generation: dict = field(default_factory=dict)  # overrides of generate.py's CONFIG
    generation_repeats: int = 10
    copy_steps: int = 300
    test_keyword: str = "cupy"
    test_files: tuple = ()  # () is every test file, FIRST_TESTS first


# 450 s in all. The first part on a fresh machine also compiles CuPy's kernels (cached on disk
# for the parts after it), hence the losses' margin.
GPU_LIMITS = {
    "env": 30,
    "losses": 60,
    "steps": 75,
    "autocast": 30,
    "attention": 40,
    "generate": 40,
    "copy": 45,
    "tests": 130,
}
GPU = Plan(rehearse=False, device="cuda", torch_device="cuda", limits=GPU_LIMITS)
REHEARSAL = Plan(
    rehearse=True,
    device="strict",
    torch_device="cpu",
    limits=GPU_LIMITS | {"tests": 60},
    sizes={"batch": 4, "T": 8},
    loss_steps=6,
    warmup=4,
    repeats=3,
    rounds=2,
    attention_length=256,
    attention_repeats=2,
    generation={"prompt": 4, "new": 6},
    generation_repeats=2,
    copy_steps=5,
    test_keyword="strict",
    test_files=("test_kv_cache.py", "test_fused.py"),
)
# The smallest rehearsal, for the project's own test of this script: on NumPy, several times
# faster than the strict device's checked arrays.
TINY = replace(
    REHEARSAL,
    tiny=True,
    device="cpu",
    sizes={"batch": 2, "T": 4},
    loss_steps=4,
    repeats=1,
    rounds=1,
    attention_length=32,
    attention_repeats=1,
    generation={"prompt": 3, "new": 2},
    generation_repeats=1,
    copy_steps=1,
    test_files=("test_fused.py",),
)


# ------------------------------------------------------------------ CUDA-graph capture, counted
GRAPHS = {"captures": 0, "failed_captures": 0, "launches": 0}


class FakeGraphs:
    """The rehearsal's stand-in for `backend.CudaGraphs`: a "graph" is the captured function,
    run again at each launch (as tests/test_compile.py fakes it)."""

    def __enter__(self) -> FakeGraphs:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def capture(self, run):
        return run

    def launch(self, graph) -> None:
        graph()


class CountingGraphs:
    """Wraps a graph runner and counts its captures (made and failed) and launches: a capture
    that fails leaves its segment as Python calls, slower but with the same results."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __enter__(self) -> CountingGraphs:
        self.inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)

    def capture(self, run):
        try:
            graph = self.inner.capture(run)
        except BaseException as exc:
            GRAPHS["failed_captures"] += 1
            GRAPHS.setdefault("first_failure", f"{type(exc).__name__}: {exc}"[:300])
            raise
        GRAPHS["captures"] += 1
        return graph

    def launch(self, graph) -> None:
        GRAPHS["launches"] += 1
        self.inner.launch(graph)


def count_graphs(rehearse: bool) -> None:
    """Route every compiled step's graph runner through CountingGraphs (the rehearsal: around
    FakeGraphs, on every device)."""
    import tinyattn as ta

    real = ta.backend.graph_runner

    def runner(array):
        inner = FakeGraphs() if rehearse else real(array)
        return None if inner is None else CountingGraphs(inner)

    ta.backend.graph_runner = runner


def graphs_since(before: dict) -> dict:
    counts = {k: GRAPHS[k] - before.get(k, 0) for k in GRAPHS if k != "first_failure"}
    if "first_failure" in GRAPHS:
        counts["first_failure"] = GRAPHS["first_failure"]
    return counts


# ------------------------------------------------------------------------------------ parts
class NoTorch(importlib.abc.MetaPathFinder):
    """--without-torch: `import torch` raises ModuleNotFoundError. (Not a None entry in
    sys.modules: array-api-compat looks up `sys.modules["torch"].Tensor` when one exists.)"""

    def find_spec(self, name: str, path=None, target=None):
        if name.partition(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r} (--without-torch)", name=name)
        return None


def _torch():
    """PyTorch, or None when it is not installed or left out (its columns show "-")."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def part_env(plan: Plan, limit: float) -> dict:
    """Date, machine, and the versions of everything the check runs on."""
    import numpy as np

    import tinyattn as ta

    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "tinyattn": f"{ta.__version__} ({Path(ta.__file__).parent})",
        "gpu": None,
    }
    info |= _cupy_info(ta) | _torch_info(cuda=not plan.rehearse) | _nvidia_smi()
    if not plan.with_torch:
        info["torch"] = "left out (--without-torch)"
    return info


def _cupy_info(ta) -> dict:
    module, reason = ta.cupy_status()
    if module is None:
        return {"cupy": f"not usable: {reason}"}
    import cupy as module  # the array API wrapper that cupy_status returns has no version

    runtime = module.cuda.runtime
    name = runtime.getDeviceProperties(0)["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)

    def version(number: int) -> str:  # CUDA's 12040 is 12.4
        return f"{number // 1000}.{number % 1000 // 10}"

    return {
        "cupy": module.__version__,
        "gpu": name,
        "cuda_driver_api": version(runtime.driverGetVersion()),
        "cuda_runtime": version(runtime.runtimeGetVersion()),
    }


def _torch_info(cuda: bool) -> dict:
    """PyTorch's version; with `cuda` (importing it, seconds), its CUDA build and device."""
    if not cuda:
        return {"torch": _version("torch")}
    torch = _torch()
    if torch is None:
        return {"torch": "not installed"}
    info = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    info["torch_cuda_available"] = torch.cuda.is_available()
    if info["torch_cuda_available"]:
        info["torch_gpu"] = torch.cuda.get_device_name()
    return info


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _nvidia_smi() -> dict:
    if shutil.which("nvidia-smi") is None:
        return {"driver": "nvidia-smi not found"}
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    try:
        done = subprocess.run(query, capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return {"driver": "nvidia-smi did not answer within 20 s"}
    return {"driver": done.stdout.strip() or done.stderr.strip()}


def part_losses(plan: Plan, limit: float) -> dict:
    """compiled.check_losses on both models: eager and compiled from the same seed."""
    import compiled

    count_graphs(plan.rehearse)
    out = {}
    for model in MODELS:
        before = dict(GRAPHS)
        worst, exact = compiled.check_losses(
            model, steps=plan.loss_steps, device=plan.device, sizes=plan.sizes
        )
        out[model] = {"max_relative_difference": worst, "bit_for_bit": exact}
        out[model]["graphs"] = graphs_since(before)
    return {"steps": plan.loss_steps, "models": out}


def _cycling(step, args: list):
    """A no-argument call of `step` on the next batch, ending in a host read of the loss (which
    waits for the queued GPU work)."""
    counter = [0]

    def run() -> float:
        counter[0] += 1
        return step(*args[counter[0] % len(args)]).item()

    return run


def _rounds(fns: dict, plan: Plan) -> dict:
    """Per function: the median over rounds of each round's median seconds per call, with the
    range; rounds rotate who runs first, so drift hits every column alike."""
    from common import median_seconds

    samples = {name: [] for name in fns}
    names = list(fns)
    for r in range(plan.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            warmup = plan.warmup if r == 0 else 1
            samples[name].append(median_seconds(fns[name], warmup, plan.repeats))
    return {n: {"ms": statistics.median(s) * 1e3, "range_ms": [min(s) * 1e3, max(s) * 1e3]}
            for n, s in samples.items()}  # fmt: skip


def part_steps(plan: Plan, limit: float) -> dict:
    """Training steps: tinyattn eager and compiled (each its own model) against PyTorch eager."""
    torch = _torch()  # imported before compiled.py's bench model, which blocks it when absent
    import compiled

    import tinyattn as ta

    count_graphs(plan.rehearse)
    out = {}
    for model in MODELS:
        before = dict(GRAPHS)
        fns = {
            "eager": _cycling(*compiled._tinyattn_step(model, device=plan.device, sizes=plan.sizes))
        }
        step, args = compiled._tinyattn_step(model, device=plan.device, sizes=plan.sizes)
        fns["compiled"] = _cycling(ta.compile(step), args)
        if torch is not None:
            fns["torch"] = _cycling(*compiled._torch_step(model, plan.torch_device, plan.sizes))
        times = _rounds(fns, plan)
        out[model] = {"times": times, "graphs": graphs_since(before)}
        if torch is not None:
            for mode in ("eager", "compiled"):
                out[model][f"{mode}/torch"] = times[mode]["ms"] / times["torch"]["ms"]
    sizes = {"small": compiled.SMALL, "bench": compiled._bench(torch is not None).STEP}
    return {"models": out, "sizes": {m: sizes[m] | plan.sizes for m in MODELS}}


AUTOCAST_CLOSE = 1e-2  # float16 keeps 11 bits; on the CPU the losses agree to about 1e-4


def part_autocast(plan: Plan, limit: float) -> dict:
    """The small model's eager step in float32 and inside float16 autocast, tinyattn's and
    PyTorch's (each its own model); and `loss_steps` training steps from one seed in both, whose
    losses must be finite and agree to `AUTOCAST_CLOSE` relative. The strict stand-in has no
    float16: skipped there."""
    if plan.device == "strict":
        return {"skipped": "the strict stand-in has no float16"}
    torch = _torch()
    import compiled

    import tinyattn as ta

    kind = "cuda" if plan.device.startswith("cuda") else "cpu"
    steps = {}
    for mode in ("float32", "autocast"):
        step, args = compiled._tinyattn_step("small", device=plan.device, sizes=plan.sizes)
        steps[mode] = (
            ta.autocast(kind, dtype="float16")(step) if mode == "autocast" else step,
            args,
        )
    if torch is not None:
        for mode in ("torch", "torch_autocast"):
            step, args = compiled._torch_step("small", plan.torch_device, plan.sizes)
            kind_torch = "cuda" if plan.torch_device.startswith("cuda") else "cpu"
            wrap = torch.autocast(kind_torch, dtype=torch.float16)
            steps[mode] = (wrap(step) if mode == "torch_autocast" else step, args)
    times = _rounds({name: _cycling(*pair) for name, pair in steps.items()}, plan)
    losses = {}
    for mode in ("float32", "autocast"):  # from one seed, on the same batches
        step, args = compiled._tinyattn_step("small", seed=1, device=plan.device, sizes=plan.sizes)
        step = ta.autocast(kind, dtype="float16")(step) if mode == "autocast" else step
        losses[mode] = [step(*args[k % len(args)]).item() for k in range(plan.loss_steps)]
    worst = max(abs(a - b) / abs(a) for a, b in zip(losses["float32"], losses["autocast"]))
    out = {"times": times, "losses": losses, "device_type": kind, "max_relative_difference": worst}
    out["close"] = all(math.isfinite(v) for v in losses["autocast"]) and worst <= AUTOCAST_CLOSE
    if torch is not None:
        out["autocast/torch"] = times["autocast"]["ms"] / times["torch"]["ms"]
        out["torch_autocast/torch"] = times["torch_autocast"]["ms"] / times["torch"]["ms"]
    return out


def part_attention(plan: Plan, limit: float) -> dict:
    """scaled_dot_product_attention (no mask) forward + backward on (B, H, T, D) = (1, 4, T,
    16), against PyTorch's; and the largest difference of their outputs and query gradients."""
    import numpy as np
    from common import median_seconds

    import tinyattn as ta
    from tinyattn.nn import functional as F

    torch = _torch()
    host = np.random.default_rng(0).standard_normal((3, 1, 4, plan.attention_length, 16))
    host = host.astype(np.float32)
    ours = _attention_call(ta, F, host, plan.device)
    out = {"T": plan.attention_length, "shape": [1, 4, plan.attention_length, 16]}
    out["tinyattn_ms"] = median_seconds(ours, 2, plan.attention_repeats) * 1e3
    if torch is not None:
        theirs = _attention_call(torch, torch.nn.functional, host, plan.torch_device)
        out["torch_ms"] = median_seconds(theirs, 2, plan.attention_repeats) * 1e3
        out["ratio"] = out["tinyattn_ms"] / out["torch_ms"]
        (a, grad_a), (b, grad_b) = ours(keep=True), theirs(keep=True)
        out["max_abs_difference"] = {
            "output": float(np.abs(a - b).max()),
            "query_grad": float(np.abs(grad_a - grad_b).max()),
        }
    return out


def _attention_call(library, functional, host, device: str):
    """run(keep=False): one forward + backward, ended by a host read of one gradient value
    (which waits for the queued GPU work); with keep, the output and query gradient on the
    host. Written once for both libraries: the calls are the same in PyTorch and tinyattn."""
    q, k, v = (library.tensor(h, device=device, requires_grad=True) for h in host)

    def run(keep: bool = False):
        out = functional.scaled_dot_product_attention(q, k, v)
        out.sum().backward()
        q.grad[0, 0, 0, 0].item()
        kept = (out.detach().cpu().numpy(), q.grad.cpu().numpy()) if keep else None
        for t in (q, k, v):
            t.grad = None
        return kept

    return run


def part_generate(plan: Plan, limit: float) -> dict:
    """generate.py's worker: greedy generation with the KV cache, eager, compiled, PyTorch."""
    import generate

    count_graphs(plan.rehearse)
    generate.CONFIG.update(plan.generation)
    modes = ["cache", "compiled"] + (["torch-cache"] if _torch() is not None else [])
    out = {"config": dict(generate.CONFIG), "modes": {}}
    with tempfile.TemporaryDirectory() as folder:
        weights = Path(folder) / "weights.npz"
        generate.write_weights(weights)
        for mode in modes:
            device = plan.torch_device if mode.startswith("torch") else plan.device
            got = generate.worker(mode, 1, plan.generation_repeats, str(weights), device)
            per_token = got["median"] * 1e3 / generate.CONFIG["new"]
            out["modes"][mode] = {"ms_per_call": got["median"] * 1e3, "ms_per_token": per_token}
            out["modes"][mode]["tokens"] = got["tokens"]
    tokens = [m["tokens"] for m in out["modes"].values()]
    out["same_tokens"] = all(t == tokens[0] for t in tokens)
    if "torch-cache" in out["modes"]:
        theirs = out["modes"]["torch-cache"]["ms_per_call"]
        for mode in ("cache", "compiled"):
            out[f"{mode}/torch"] = out["modes"][mode]["ms_per_call"] / theirs
    out["graphs"] = dict(GRAPHS)
    return out


def part_copy(plan: Plan, limit: float) -> dict:
    """examples/copy_task.py on the device for a fixed number of steps (no early stop needed)."""
    folder = Path(os.environ["GPU_CHECK_OUT"]) / "copy_task"
    command = [sys.executable, "examples/copy_task.py", "--quiet"]  # run in the checkout
    command += ["--device", plan.device, "--steps", str(plan.copy_steps), "--out", str(folder)]
    start = time.perf_counter()
    done = run_bounded(command, limit - 5)
    out = {"command": " ".join(command[1:]), "returncode": done["returncode"]}
    out["wall_s"] = time.perf_counter() - start
    out["output"] = done["output"][-3000:]
    patterns = {
        "steps": r"trained (\d+) steps",
        "steps_per_s": r"\(([\d.]+) steps/s",
        "sequence_accuracy_pct": r"exact-sequence accuracy: ([\d.]+)%",
        "token_accuracy_pct": r"token accuracy: ([\d.]+)%",
    }
    for key, pattern in patterns.items():
        found = re.search(pattern, done["output"])
        out[key] = float(found.group(1)) if found else None
    if done["timed_out"]:
        raise RuntimeError(f"copy_task.py: stopped by its limit after {limit - 5} s")
    if done["returncode"] != 0:
        last = done["output"].strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"copy_task.py: {last[0]}")
    return out


def part_tests(plan: Plan, limit: float) -> dict:
    """The suite's cases of one backend, each outcome written as it finishes (a plugin), so a
    run stopped by its limit still counts what ran."""
    out_dir = Path(os.environ["GPU_CHECK_OUT"])
    outcomes = out_dir / "tests_outcomes.jsonl"
    outcomes.unlink(missing_ok=True)
    files = test_files(plan)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["-p", "pytest_outcomes", "-k", plan.test_keyword, *files]
    env = {"GPU_CHECK_OUTCOMES": str(outcomes), "TINYATTN_TEST_BACKENDS": plan.test_keyword}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    done = run_bounded(command, limit - 10, env)
    (out_dir / "tests_pytest.log").write_text(done["output"])
    counts = count_outcomes(outcomes.read_text() if outcomes.exists() else "")
    if counts["collected"] is None and not done["timed_out"]:
        last = done["output"].strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"pytest collected nothing: {last[0]}")
    return counts | {"timed_out": done["timed_out"], "returncode": done["returncode"],
                     "keyword": plan.test_keyword, "files": len(files)}  # fmt: skip


def test_files(plan: Plan) -> list[str]:
    """Relative paths of the test files to run, in order."""
    if plan.test_files:
        return [f"tests/{name}" for name in plan.test_files]
    names = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    ordered = [n for n in FIRST_TESTS if n in names] + [n for n in names if n not in FIRST_TESTS]
    return [f"tests/{name}" for name in ordered]


def count_outcomes(lines: str) -> dict:
    """Per test: failed (its call failed), error (setup or teardown failed), skipped, xfail or
    passed; from pytest_outcomes.py's JSON lines."""
    collected, per_test, messages = None, {}, {}
    for line in lines.splitlines():
        record = json.loads(line)
        if "collected" in record:
            collected = record["collected"]
            continue
        test, when, outcome = record["id"], record["when"], record["outcome"]
        if outcome == "failed":
            per_test[test] = "failed" if when == "call" else "error"
            messages[test] = record["message"]
        elif outcome == "skipped" and per_test.get(test) not in ("failed", "error"):
            per_test[test] = "xfail" if record["xfail"] else "skipped"
            messages.setdefault(test, record["message"])
        elif when == "call" and test not in per_test:
            per_test[test] = "passed"
    counts = {k: 0 for k in ("passed", "failed", "error", "skipped", "xfail")}
    for outcome in per_test.values():
        counts[outcome] += 1
    bad = [t for t, o in per_test.items() if o in ("failed", "error", "skipped")]
    counts["collected"], counts["ran"] = collected, len(per_test)
    counts["problems"] = [{"id": t, "outcome": per_test[t], "message": messages[t]} for t in bad]
    return counts


PART_FUNCTIONS = {
    "env": part_env,
    "losses": part_losses,
    "steps": part_steps,
    "autocast": part_autocast,
    "attention": part_attention,
    "generate": part_generate,
    "copy": part_copy,
    "tests": part_tests,
}


# ------------------------------------------------------------------------------ processes
def run_bounded(command: list[str], limit: float, env: dict | None = None, log=None) -> dict:
    """Run `command` in its own process group, stopped (the whole group) after `limit`
    seconds; output to `log` when given, else returned."""
    with tempfile.TemporaryFile("w+") as capture:
        sink = log or capture
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=os.environ | (env or {}),
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        timed_out = False
        try:
            process.wait(timeout=max(limit, 1))
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # also when this process is stopped: its own session's group goes too
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        capture.seek(0)
        output = "" if log else capture.read()
    return {"returncode": process.returncode, "timed_out": timed_out, "output": output}


def run_part_in_child(name: str, plan: Plan, out: Path) -> dict:
    """One part in its own process: status, seconds, and the data it wrote (or None)."""
    limit = plan.limits[name]
    (out / f"{name}.json").unlink(missing_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--part", name, str(out)]
    command += ["--rehearse"] if plan.rehearse else []
    command += ["--tiny"] if plan.tiny else []
    command += ["--without-torch"] if not plan.with_torch else []
    start = time.perf_counter()
    with open(out / f"{name}.log", "w") as log:
        done = run_bounded(command, limit, {"GPU_CHECK_OUT": str(out)}, log)
    seconds = time.perf_counter() - start
    data_path = out / f"{name}.json"
    data = json.loads(data_path.read_text()) if data_path.exists() else None
    if done["timed_out"]:
        status = f"timed out after {limit} s"
    elif done["returncode"] != 0:
        last = (out / f"{name}.log").read_text().strip().splitlines()[-1:] or ["(no output)"]
        status = f"failed: {last[0][:200]}"
    else:
        status = "ok"
    return {"status": status, "seconds": seconds, "limit": limit, "data": data}


def child(name: str, plan: Plan, out: Path) -> None:
    """The body of a part's process: run it, write its JSON."""
    if plan.rehearse:  # the shared CPU machine: one BLAS thread per process
        for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(variable, "1")
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("GPU_CHECK_OUT", str(out))
    if not plan.with_torch:
        sys.meta_path.insert(0, NoTorch())
    data = PART_FUNCTIONS[name](plan, plan.limits[name])
    (out / f"{name}.json").write_text(json.dumps(data, indent=1))
    print(json.dumps(data)[:2000])


# ----------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path, help="folder for report.md and the raw files")
    parser.add_argument("--rehearse", action="store_true", help="every part on the CPU, tiny")
    parser.add_argument("--tiny", action="store_true", help="with --rehearse: smaller still")
    parser.add_argument("--only", nargs="+", choices=PARTS, help="run only these parts")
    parser.add_argument(
        "--without-torch",
        action="store_true",
        help="leave PyTorch out (its columns show '-'): importing it takes seconds per part",
    )
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tiny and not args.rehearse:
        parser.error("--tiny goes with --rehearse")
    plan = (TINY if args.tiny else REHEARSAL) if args.rehearse else GPU
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out.resolve()
    # the project importable in every process below (pytest and the example included)
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    if args.without_torch:
        plan = replace(plan, with_torch=False)
    if args.part:
        child(args.part, plan, out)
        return 0
    # gpu_check.sh's overall limit stops this process with SIGTERM: the running part's
    # processes are stopped, and the report says which part was cut off.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = {}
    for name in args.only or PARTS:
        print(f"[gpu_check] {name} (limit {plan.limits[name]} s) ...", flush=True)
        try:
            results[name] = run_part_in_child(name, plan, out)
        except SystemExit:
            results[name] = {"status": "stopped by the overall limit", "data": None}
            (out / "report.md").write_text(render_report(results, plan, out))
            raise
        print(f"[gpu_check] {name}: {results[name]['status']} "
              f"in {results[name]['seconds']:.1f} s", flush=True)  # fmt: skip
        if name == "env" and results[name]["data"]:
            for key in ENV_KEYS:
                print(f"  {key}: {results[name]['data'].get(key, '-')}")
        (out / "report.md").write_text(render_report(results, plan, out))
        (out / "summary.json").write_text(json.dumps(results, indent=1))
    print(f"[gpu_check] report: {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
