"""Where a training step's time goes: the compiled replay item by item, and eager by layer.

Run by hand, never as a test:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/step_profile.py [MODEL ...]
    TINYATTN_COMPILE_FUSE=0 python benchmarks/step_profile.py gpt   # the replay op by op

MODEL is one of compiled.py's models: small, bench, gpt (default: all three). For each, in this
one process (one thread: OPENBLAS_NUM_THREADS=1 is set before NumPy loads):

- compiled: the step is compiled and warmed up, then every program item of the replay is
  wrapped in a timer and the step runs REPEATS times. The table gives each group's microseconds
  per step (median over the repeats), its share of the step, and the number of items; "outside
  the program" is the rest of the step (the guards, copying the inputs in, the segments' Python,
  building the results). A fused group (where Numba is installed) is one item, its row named
  "fused" with the ops it holds. Beside it, the NumPy floor of the same step's matrix products
  (compiled.py's "floor"), timed in this process. The timers' own cost per item is printed and
  included in the rows, so they are upper bounds.
- eager: the same step uncompiled under cProfile, its own time grouped by tinyattn module
  (tinyattn.autograd is Function.apply and the engine; tinyattn.ops.* the forward and backward
  rules). NumPy functions and methods called by name (``x.sum()``, ``np.matmul``) are C calls
  of their own, but an operator on arrays (``a * b``) inside a rule is counted in that rule's
  row, so the ops.* rows hold the rules' arithmetic and their Python together. cProfile slows
  every Python call, so the rows show where the calls are, not the step's real time.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ["TINYATTN_KEEP_FREED_MEMORY"] = "1"  # as compiled.py's children

import statistics  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import compiled  # noqa: E402
from common import machine_report  # noqa: E402

REPEATS = 60

# Op names that are matrix products: the part of the step the floor measures.
PRODUCTS = {"MatMul", "Linear", "BatchedMatMul", "Einsum", "Bmm", "ScaledDotProductAttention"}


def group_of(label: str) -> str:
    """'Linear forward (out=)' -> 'Linear forward'; calls keep their callee's name."""
    return label.replace(" (out=)", "")


def profile_compiled(model_name: str) -> None:
    import tinyattn as ta

    step, args = compiled._tinyattn_step(model_name)
    step = ta.compile(step)
    for k in range(12):  # two recordings, a check, then replays
        step(*args[k % len(args)]).item()
    (tape,) = step.tapes.values()
    label_of = {id(run): label for run, label in zip(tape.program, tape.labels)}
    totals: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    per_step: dict[str, float] = defaultdict(float)
    clock = time.perf_counter

    def timed(run, label):
        def item(env):
            start = clock()
            run(env)
            per_step[label] += clock() - start

        return item

    plain_times = []
    for k in range(REPEATS):  # the step as it runs, without timers
        start = clock()
        step(*args[k % len(args)]).item()
        plain_times.append(clock() - start)
    for segment in tape.segments + getattr(tape, "backward_segments", []):
        for run in segment.runs:
            counts[group_of(label_of.get(id(run), "(unlabelled)"))] += 1
        segment.runs = [timed(run, group_of(label_of.get(id(run), "?"))) for run in segment.runs]
    timed_steps, outside = [], []
    for k in range(REPEATS):
        per_step.clear()
        start = clock()
        step(*args[k % len(args)]).item()
        timed_steps.append(clock() - start)
        outside.append(timed_steps[-1] - sum(per_step.values()))
        for label, seconds in per_step.items():
            totals[label].append(seconds)
    # What one timer costs: an empty item, timed the same way.
    empty = timed(lambda env: None, "empty")
    per_step.clear()
    start = clock()
    for _ in range(10000):
        empty(None)
    timer_cost = (clock() - start) / 10000

    floor_step, products = compiled._floor_step(model_name)
    floor = statistics.median(_times(floor_step))
    step_time = statistics.median(plain_times)
    medians = {label: statistics.median(values) for label, values in totals.items()}
    in_items = sum(medians.values())
    print(
        f"\n## {model_name}: compiled step {step_time * 1e3:.2f} ms (no timers), "
        f"{statistics.median(timed_steps) * 1e3:.2f} ms with timers; "
        f"{len(tape.program)} program items; timer cost {timer_cost * 1e6:.2f} us/item"
    )
    fused = sum(len(group.items) for group in tape.groups)
    print(f"fusion {'on' if step.fuse else 'off'}: {len(tape.groups)} kernels hold {fused} ops")
    print(
        f"NumPy floor of its {products} matrix products: {floor * 1e3:.2f} ms "
        f"(step / floor = {step_time / floor:.2f}x)\n"
    )
    print("| group | us per step | share | items |")
    print("|---|---|---|---|")
    product_time = 0.0
    for label, seconds in sorted(medians.items(), key=lambda kv: -kv[1])[:22]:
        print(f"| {label} | {seconds * 1e6:.0f} | {seconds / step_time:.1%} | {counts[label]} |")
    for label, seconds in medians.items():
        if label.split()[0] in PRODUCTS:
            product_time += seconds
    rest = statistics.median(outside)
    print(f"| (outside the program) | {rest * 1e6:.0f} | {rest / step_time:.1%} | - |")
    print(
        f"\nmatrix-product ops (forward and backward rules): {product_time * 1e3:.2f} ms; "
        f"everything else in the program: {(in_items - product_time) * 1e3:.2f} ms"
    )


def profile_eager(model_name: str) -> None:
    import cProfile
    import pstats

    step, args = compiled._tinyattn_step(model_name)
    for k in range(5):
        step(*args[k % len(args)]).item()
    profiler = cProfile.Profile()
    profiler.enable()
    for k in range(REPEATS):
        step(*args[k % len(args)]).item()
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    groups: dict[str, float] = defaultdict(float)
    for (filename, _, name), (_, _, tottime, _, _) in stats.items():
        if filename == "~":  # a C function: a NumPy call unless it is a builtin of Python
            numpy_call = "numpy" in name or "method '" in name
            groups["array library (C)" if numpy_call else "Python builtins"] += tottime
        elif "/tinyattn/" in filename:
            part = filename.split("/tinyattn/")[1].removesuffix(".py").replace("/", ".")
            groups[f"tinyattn.{part}"] += tottime
        else:
            groups["other Python (NumPy's wrappers, benchmarks)"] += tottime
    total = sum(groups.values())
    print(f"\n## {model_name}, eager under cProfile: {total / REPEATS * 1e3:.2f} ms per step")
    print("| where | ms per step | share |")
    print("|---|---|---|")
    for name, seconds in sorted(groups.items(), key=lambda kv: -kv[1])[:14]:
        print(f"| {name} | {seconds / REPEATS * 1e3:.2f} | {seconds / total:.1%} |")


def _times(run, repeats: int = REPEATS) -> list[float]:
    for _ in range(5):
        run()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    names = sys.argv[1:] or ["small", "bench", "gpt"]
    print("\n".join(machine_report()))
    print("measured with 1 BLAS thread (OPENBLAS_NUM_THREADS=1)")
    for name in names:
        profile_compiled(name)
        profile_eager(name)


if __name__ == "__main__":
    main()
