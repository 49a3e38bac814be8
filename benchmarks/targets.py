"""The CPU speed targets, measured: one markdown table, ready to paste into docs/performance.md.

Run by hand, never as a test:

    python benchmarks/targets.py [--rounds 3] [--quick]

Above the table it prints the machine (CPU model, vector extensions, core count), NumPy's BLAS
(threadpoolctl) and PyTorch's build. Every measurement is a fresh process that imports one
library, started by the benchmark that owns it (per_op.py, compiled.py, generate.py,
attention_floor.py), so no two libraries' thread pools or caches meet; the processes of a round
run back to back, the next round in a rotated order, so that a slow stretch of a shared machine
lands on every column alike. Each figure is a ratio of medians over the rounds, with its range
over rounds (each round's ratio of the two processes that ran in it). `--quick` times fewer
calls per process: for a first look, not for the page.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The environment this script was started with: examples/gpt.py, which generate.py and compiled.py
# load into this process, sets one BLAS thread in it, and a user's plain import runs without that.
STARTED_WITH = dict(os.environ)
sys.path.insert(0, str(HERE))
import compiled  # noqa: E402
import generate  # noqa: E402
import per_op  # noqa: E402
from common import child_env, machine_report  # noqa: E402

ATTENTION_T = 8192
# (key, model, mode, repeats per process, quick repeats): the training steps the table needs.
STEPS = [
    ("small", "eager", 300, 60),
    ("small", "compiled", 300, 60),
    ("small", "torch", 300, 60),
    ("small", "numpy", 300, 60),
    ("bench", "eager", 100, 20),
    ("bench", "compiled", 100, 20),
    ("bench", "torch", 100, 20),
    ("bench", "floor", 100, 20),
    ("bench", "numpy", 100, 20),
    ("gpt", "compiled", 150, 30),
    ("gpt", "unfused", 150, 30),
    ("gpt", "torch", 150, 30),
    ("gpt", "floor", 150, 30),
    ("gpt", "numpy", 150, 30),
]


def measure_round(quick: bool, round_number: int, weights: Path) -> dict[str, float]:
    """One round: every process once, in an order rotated by `round_number`. Seconds (or MB)."""
    jobs = []
    for model, mode, repeats, fewer in STEPS:
        count = fewer if quick else repeats
        jobs.append((f"{model} {mode}", lambda m=model, o=mode, n=count: step(m, o, n)))
    for library in ("tinyattn", "torch"):
        count = 100 if quick else 300
        jobs.append((f"per-op {library}", lambda lib=library, n=count: per_op_us(lib, n)))
    for mode in ("compiled", "torch-full", "torch-cache"):
        count = 10 if quick else 40
        jobs.append((f"generate {mode}", lambda m=mode, n=count: generation(m, n, weights)))
    for kind in ("tinyattn", "floor", "torch"):
        count = 1 if quick else 2
        jobs.append((f"attention {kind}", lambda k=kind, n=count: attention(k, n)))
    jobs.append(("first call", first_call))
    shift = round_number % len(jobs)
    results: dict[str, float] = {}
    for name, job in jobs[shift:] + jobs[:shift]:
        results.update({f"{name}{suffix}": value for suffix, value in job().items()})
    results.update(import_seconds(3 if quick else 7))
    return results


def step(model: str, mode: str, repeats: int) -> dict[str, float]:
    """Median seconds per training step, one thread (compiled.py's process)."""
    got = compiled.spawn(model, mode, 1, repeats)
    if "error" in got:
        raise RuntimeError(f"{model} {mode}: {got['error']}")
    return {"": got["median"]}


def first_call(model: str = "gpt") -> dict[str, float]:
    """Seconds of the first three calls of a new compiled step (two recordings, the tape and
    its kernels): fused with an empty kernel cache, fused again with that cache filled (a new
    process loads the machine code), and unfused (compiled.py's processes)."""
    seconds = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {"TINYATTN_CACHE_DIR": cache}
        for name, mode in (("cold", "first-call"), ("cached", "first-call")):
            got = compiled.spawn(model, mode, 1, 1, env=env)
            if "error" in got:
                raise RuntimeError(f"first call {name}: {got['error']}")
            seconds[f" {name}"] = got["median"]
    got = compiled.spawn(model, "first-call-unfused", 1, 1)
    if "error" in got:
        raise RuntimeError(f"first call unfused: {got['error']}")
    seconds[" unfused"] = got["median"]
    return seconds


def per_op_us(library: str, repeats: int) -> dict[str, float]:
    """Microseconds per elementwise op of the (4,) chain, one thread (per_op.py's process)."""
    got = per_op.spawn(library, (4,), repeats)
    if got is None:
        raise RuntimeError(f"per-op {library} failed")
    return {"": got["us"]}


def generation(mode: str, repeats: int, weights: Path) -> dict[str, float]:
    """Median seconds per generate call of 30 tokens, one thread (generate.py's process)."""
    got = generate.spawn(mode, 1, repeats, weights)
    if "error" in got:
        raise RuntimeError(f"generate {mode}: {got['error']}")
    return {"": got["median"]}


def attention(kind: str, repeats: int) -> dict[str, float]:
    """Seconds and peak extra MB of SDPA forward + backward at T = 8192, two threads."""
    command = [sys.executable, str(HERE / "attention_floor.py"), "--worker", kind]
    command += ["--T", str(ATTENTION_T), "--threads", "2", "--repeats", str(repeats)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=child_env(1))
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return {"": got["seconds"], " MB": got["extra_mb"]}


def import_seconds(repeats: int) -> dict[str, float]:
    """`import tinyattn` beyond a bare interpreter start, median of alternated runs, with a warm
    bytecode cache and no allocator setting (what a user's plain import does)."""
    skipped = ("PYTHONDONTWRITEBYTECODE", "TINYATTN_KEEP_FREED_MEMORY")
    env = {k: v for k, v in STARTED_WITH.items() if k not in skipped}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))

    def run(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        return time.perf_counter() - start

    run("import tinyattn")  # writes the bytecode cache
    samples = defaultdict(list)
    for _ in range(repeats):
        for code in ("pass", "import tinyattn"):
            samples[code].append(run(code))
    return {"import": statistics.median(samples["import tinyattn"]) - min(samples["pass"])}


# ------------------------------------------------------------------------------------ the table
# (figure, target, numerator, denominator): each row a ratio of two measurements' medians.
ROWS = [
    ("per-op overhead, (4,) float32", "<= 0.55x PyTorch", "per-op tinyattn", "per-op torch"),
    ("eager step, small LM", "<= 1.2x PyTorch eager", "small eager", "small torch"),
    ("eager step, bench model", "<= 1.2x PyTorch eager", "bench eager", "bench torch"),
    ("compiled step, small LM", "<= 0.4x PyTorch eager", "small compiled", "small torch"),
    ("compiled step, bench model", "<= 1.3x its GEMM floor", "bench compiled", "bench floor"),
    ("compiled step, examples/gpt.py", "<= 1.5x its GEMM floor", "gpt compiled", "gpt floor"),
    ("compiled step, examples/gpt.py", "<= 1.3x PyTorch eager", "gpt compiled", "gpt torch"),
    ("the same, fused against unfused", "<= 1.0x unfused", "gpt compiled", "gpt unfused"),
    (
        "per-token generation, KV cache, compiled",
        "<= 1.0x PyTorch's generate",
        "generate compiled",
        "generate torch-full",
    ),
    (
        f"attention fwd+bwd, (1, 4, {ATTENTION_T}, 16), 2 threads",
        "<= 1.5x PyTorch's SDPA",
        "attention tinyattn",
        "attention torch",
    ),
    (
        f"attention fwd+bwd, (1, 4, {ATTENTION_T}, 16), 2 threads",
        "<= 1.25x its NumPy floor",
        "attention tinyattn",
        "attention floor",
    ),
]
COLUMNS = (
    "figure (1 thread unless said)",
    "target",
    "measured: median (range over rounds)",
    "met?",
    "the hand-written NumPy step, same ratio",
)
# What the hand-written NumPy step (no graph, no Tensor) reaches against the same denominator.
FLOORS = {
    "small compiled": "small numpy",
    "bench compiled": "bench numpy",
    "gpt compiled": "gpt numpy",
    "gpt unfused": "gpt numpy",
    "bench eager": "bench numpy",
}


def limit_of(target: str) -> float:
    """The number in "<= 1.2x PyTorch eager"."""
    return float(target.split()[1].rstrip("x"))


def ratio_cell(rounds: list[dict], top: str, bottom: str) -> tuple[float, str]:
    """The ratio of the two medians over rounds, and "0.52x (0.49 - 0.56)" with the per-round
    range."""
    tops, bottoms = [r[top] for r in rounds], [r[bottom] for r in rounds]
    middle = statistics.median(tops) / statistics.median(bottoms)
    per_round = [a / b for a, b in zip(tops, bottoms)]
    return middle, f"{middle:.2f}x ({min(per_round):.2f} - {max(per_round):.2f})"


def times_text(rounds: list[dict], top: str, bottom: str) -> str:
    """The two medians the ratio divides, in the unit a reader knows them by."""
    unit, scale = ("us", 1.0) if top.startswith("per-op") else ("ms", 1e3)
    if top.startswith("attention"):
        unit, scale = "s", 1.0
    a, b = (statistics.median(r[key] for r in rounds) * scale for key in (top, bottom))
    digits = 3 if unit == "s" else 2
    return f"{a:.{digits}f} against {b:.{digits}f} {unit}"


def verdict(rounds: list[dict], top: str, bottom: str, limit: float) -> str:
    per_round = [r[top] / r[bottom] for r in rounds]
    middle, _ = ratio_cell(rounds, top, bottom)
    if middle > limit:
        return "no"
    return "yes" if max(per_round) <= limit else "yes at the median, not in every round"


def table(rounds: list[dict], losses: dict[str, tuple]) -> list[str]:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---" * len(COLUMNS) + "|"]
    for figure, target, top, bottom in ROWS:
        _, cell = ratio_cell(rounds, top, bottom)
        floor = "-"
        if top in FLOORS:
            floor = ratio_cell(rounds, FLOORS[top], bottom)[1]
        lines.append(
            f"| {figure} | {target} | {cell}; {times_text(rounds, top, bottom)} "
            f"| {verdict(rounds, top, bottom, limit_of(target))} | {floor} |"
        )
    memory = max(r["attention tinyattn MB"] for r in rounds)
    floor_memory = max(r["attention floor MB"] for r in rounds)
    lines.append(
        f"| attention fwd+bwd, (1, 4, {ATTENTION_T}, 16), peak extra memory | <= 300 MB "
        f"| {memory:.0f} MB (the most of any round) | {'yes' if memory <= 300 else 'no'} "
        f"| NumPy floor: {floor_memory:.0f} MB |"
    )
    seconds = [r["import"] for r in rounds]
    lines.append(
        f"| `import tinyattn`, beyond a bare interpreter | < 0.15 s "
        f"| {statistics.median(seconds):.3f} s ({min(seconds):.3f} - {max(seconds):.3f}) "
        f"| {'yes' if statistics.median(seconds) < 0.15 else 'no'} | - |"
    )
    for name, target, limit in (("cold", "< 10 s", 10.0), ("cached", "< 1 s", 1.0)):
        values = [r[f"first call {name}"] for r in rounds]
        unfused = statistics.median(r["first call unfused"] for r in rounds)
        middle = statistics.median(values)
        lines.append(
            f"| first 3 calls of gpt.py's compiled step (2 recordings, the tape), kernels "
            f"{'built' if name == 'cold' else 'loaded from the cache'} | {target} "
            f"| {middle:.2f} s ({min(values):.2f} - {max(values):.2f}); unfused {unfused:.2f} s "
            f"| {'yes' if middle < limit else 'no'} | - |"
        )
    same = all(exact for exact, _ in losses.values())
    lines.append(
        "| unfused compiled and eager losses, 12 steps, three models | bit for bit "
        f"| {'bit for bit' if same else 'not bit for bit: ' + str(losses)} "
        f"| {'yes' if same else 'no'} | - |"
    )
    worst = max(fused for _, fused in losses.values())
    lines.append(
        "| fused compiled and eager losses, 12 steps, three models | within 1e-5 relative "
        f"| {worst:.2g} at most | {'yes' if worst <= 1e-5 else 'no'} | - |"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every process")
    parser.add_argument("--quick", action="store_true", help="fewer calls per process")
    args = parser.parse_args()
    machine = machine_report()  # before examples/gpt.py sets the BLAS threads in this process
    losses = {}  # model -> (unfused equal bit for bit, fused's largest relative difference)
    for model in compiled.MODELS:
        _, exact = compiled.check_losses(model, fuse=False)
        fused, _ = compiled.check_losses(model, fuse=None)
        losses[model] = (exact, fused)
    rounds = []
    with tempfile.TemporaryDirectory() as folder:
        weights = Path(folder) / "weights.npz"
        generate.write_weights(weights)
        for number in range(args.rounds):
            rounds.append(measure_round(args.quick, number, weights))
            print(f"round {number + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    quick = ", --quick" if args.quick else ""
    count = f"{args.rounds} round{'s' if args.rounds != 1 else ''}"
    print(f"Measured by `python benchmarks/targets.py` ({count}{quick}) on:\n")
    print("\n".join(f"- {line}" for line in machine))
    print()
    print("\n".join(table(rounds, losses)))


if __name__ == "__main__":
    main()
