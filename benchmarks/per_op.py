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
ratio tinyattn / PyTorch, which is taken within each round.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CHAIN_OPS, child_env, machine_report, median_seconds, per_op_chain  # noqa: E402

LIBRARIES = ("numpy", "tinyattn", "torch")


def worker(library: str, shape: tuple, repeats: int) -> dict:
    """One library's chain in this process: microseconds per elementwise op (median)."""
    chain = per_op_chain(library, shape)
    if library == "torch":
        import torch

        torch.set_num_threads(1)
    return {"us": median_seconds(chain, warmup=20, repeats=repeats) / CHAIN_OPS * 1e6}


def spawn(library: str, shape: tuple, repeats: int) -> float | None:
    """`worker` in a fresh process; None where the library is not importable."""
    command = [sys.executable, __file__, "--worker", library, str(repeats)]
    command += [str(n) for n in shape]
    done = subprocess.run(
        command, env=child_env(1, keep_freed_memory=True), capture_output=True, text=True
    )
    if done.returncode != 0:
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])["us"]


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
    print("| round | NumPy floor | tinyattn | PyTorch | tinyattn/PyTorch |")
    print("|---|---|---|---|---|")
    columns: dict[str, list[float]] = {name: [] for name in (*LIBRARIES, "ratio")}
    for round_number in range(1, args.rounds + 1):
        # Each round starts with the next library, so that none is always first.
        order = LIBRARIES[round_number % 3 :] + LIBRARIES[: round_number % 3]
        times = {name: spawn(name, shape, args.repeats) for name in order}
        cells = [f"{times[n]:.2f}" if times[n] is not None else "-" for n in LIBRARIES]
        for name in LIBRARIES:
            if times[name] is not None:
                columns[name].append(times[name])
        ratio = "-"
        if times["tinyattn"] and times["torch"]:
            columns["ratio"].append(times["tinyattn"] / times["torch"])
            ratio = f"{columns['ratio'][-1]:.2f}x"
        print(f"| {round_number} | " + " | ".join(cells) + f" | {ratio} |", flush=True)
    summary = [spread(columns[name]) for name in LIBRARIES]
    print(f"| median (range) | {' | '.join(summary)} | {spread(columns['ratio'], 'x')} |")


if __name__ == "__main__":
    main()
