"""The per-op overhead with each library in its own process, the processes interleaved.

Run by hand, never as a test:

    python benchmarks/per_op.py [--rounds 5] [--repeats 300] [--shape 4]

bench.py's per-op table times NumPy's chain, tinyattn's and PyTorch's in one process, one call
of each in turn, so each library runs with the other's code and data in the CPU's caches. Here
every measurement is a fresh process that imports one library only (`common.per_op_chain`),
and the three alternate, round after round, so that machine drift meets them alike. One BLAS
thread, PyTorch on one thread, OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE removed from the children's
environment, tinyattn's allocator setting on, as in bench.py.

The chain: y = x; 50 times y = y * 1.0001 + 0.0001 (100 elementwise ops) on float32 values that
require grad, then y.sum().backward(); each figure is the median time of one chain over
`--repeats` chains, divided by 100: microseconds per elementwise op, forward and backward.
Prints the machine, one row per round, and the median and range of each column and of the
ratio tinyattn / PyTorch, which is taken within each round. `--tree PATH` adds the tinyattn of
another checkout (an older commit) as a column of its own, measured in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CHAIN_OPS, child_env, machine_report, median_seconds, per_op_chain  # noqa: E402


def worker(library: str, shape: tuple, repeats: int) -> dict:
    """One library's chain in this process: microseconds per elementwise op (median)."""
    chain = per_op_chain(library, shape)
    if library == "torch":
        import torch

        torch.set_num_threads(1)
    return {"us": median_seconds(chain, warmup=20, repeats=repeats) / CHAIN_OPS * 1e6}


def spawn(library: str, shape: tuple, repeats: int, tree: str | None = None) -> float | None:
    """`worker` in a fresh process; None where the library is not importable. `tree`: another
    checkout whose `tinyattn` the process imports (an older commit, in the same run)."""
    command = [sys.executable, __file__, "--worker", library, str(repeats)]
    command += [str(n) for n in shape]
    env = child_env(1, keep_freed_memory=True)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([tree, env["PYTHONPATH"]])
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])["us"]


def commit_of(tree: str) -> str:
    """The short commit a checkout is at (its folder's name if git cannot say)."""
    done = subprocess.run(
        ["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or Path(tree).name


def spread(values: list[float], unit: str = "") -> str:
    """The median and range of `values`, as "median (low - high)"."""
    if not values:
        return "-"
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.2f}{unit} ({low:.2f}{unit} - {high:.2f}{unit})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the three processes")
    parser.add_argument("--repeats", type=int, default=300, help="chains timed per process")
    parser.add_argument("--shape", type=int, nargs="+", default=[4], help="the tensor's shape")
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        help="another checkout's tinyattn as a column of its own (repeatable)",
    )
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        library, repeats, *shape = args.worker
        print(json.dumps(worker(library, tuple(int(n) for n in shape), int(repeats))))
        return
    shape = tuple(args.shape)
    print("\n".join(machine_report()))
    print(f"\n### Per-op overhead, each library in its own process: {shape} float32, 1 thread")
    print(f"(us per elementwise op, forward + backward; median of {args.repeats} chains)\n")
    # (column, library, checkout): NumPy, this checkout's tinyattn, PyTorch, then other trees'.
    runs = [("numpy", "numpy", None), ("tinyattn", "tinyattn", None), ("torch", "torch", None)]
    runs += [(f"tinyattn at {commit_of(tree)}", "tinyattn", tree) for tree in args.tree]
    names = [name for name, _, _ in runs]
    header = ["NumPy floor", "tinyattn", "PyTorch", *names[3:], "tinyattn/PyTorch"]
    header += [f"{name}/PyTorch" for name in names[3:]]
    print("| round | " + " | ".join(header) + " |")
    print("|---" * (len(header) + 1) + "|")
    columns: dict[str, list[float]] = {name: [] for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names[1:2] + names[3:]}
    for round_number in range(1, args.rounds + 1):
        # Each round starts with the next process, so that none is always first.
        shift = round_number % len(runs)
        times = {name: spawn(lib, shape, args.repeats, tree) for name, lib, tree in runs[shift:]}
        times |= {name: spawn(lib, shape, args.repeats, tree) for name, lib, tree in runs[:shift]}
        cells = [f"{times[n]:.2f}" if times[n] is not None else "-" for n in names]
        for name in names:
            if times[name] is not None:
                columns[name].append(times[name])
        for name, values in ratios.items():
            if times[name] and times["torch"]:
                values.append(times[name] / times["torch"])
                cells.append(f"{values[-1]:.2f}x")
            else:
                cells.append("-")
        print(f"| {round_number} | " + " | ".join(cells) + " |", flush=True)
    summary = [spread(columns[name]) for name in names]
    summary += [spread(values, "x") for values in ratios.values()]
    print("| median (range) | " + " | ".join(summary) + " |")


if __name__ == "__main__":
    main()
