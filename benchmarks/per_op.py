"""The per-op overhead with each library in its own process, the processes interleaved.

Run by hand, never as a test:

    python benchmarks/per_op.py [--rounds 7] [--repeats 300] [--shape 4] [--tree PATH ...]

bench.py's per-op table times NumPy's chain, tinyattn's and PyTorch's in one process, one call
of each in turn, so each library runs with the other's code and data in the CPU's caches. Here
every measurement is a fresh process that imports one library only (`common.per_op_chain`),
and the processes alternate, round after round, so that machine drift meets them alike. One
BLAS thread, PyTorch on one thread, OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE removed from the
children's environment, tinyattn's allocator setting on, as in bench.py.

The chain: y = x; 50 times y = y * 1.0001 + 0.0001 (100 elementwise ops) on float32 values that
require grad, then y.sum().backward(); each figure is the median time of one chain over
`--repeats` chains, divided by 100: microseconds per elementwise op, forward and backward.

On a shared VM a process can run at half speed for seconds at a time (its virtual CPU
sharing a core with a busy neighbour), which moves a ratio of two processes by 2x. So every
process also times NumPy's own chain (the floor: the same forward calls, the backward's 50
products written out), alternating with its library's chain, so that a slow stretch slows
both. The table gives each process's two times and the ratio tinyattn / PyTorch, of the raw
times and of the times in units of each process's NumPy chain, per round and as median and
range. The second leans against tinyattn: beside PyTorch, whose code evicts NumPy's from the
caches between the calls, NumPy's chain runs about 10% slower than beside tinyattn.
`--tree PATH` adds the tinyattn of another checkout (an older commit) in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CHAIN_OPS, child_env, machine_report, per_op_chain  # noqa: E402


def worker(library: str, shape: tuple, repeats: int) -> dict:
    """The library's chain and NumPy's, alternating in this process: microseconds per
    elementwise op of each (medians)."""
    chain, floor = per_op_chain(library, shape), per_op_chain("numpy", shape)
    if library == "torch":
        import torch

        torch.set_num_threads(1)
    for _ in range(20):
        chain(), floor()
    chains, floors = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        chain()
        middle = time.perf_counter()
        floor()
        chains.append(middle - start)
        floors.append(time.perf_counter() - middle)
    scale = 1e6 / CHAIN_OPS
    return {"us": statistics.median(chains) * scale, "numpy_us": statistics.median(floors) * scale}


def spawn(library: str, shape: tuple, repeats: int, tree: str | None = None) -> dict | None:
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
    return json.loads(done.stdout.strip().splitlines()[-1])


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
    parser.add_argument("--rounds", type=int, default=7, help="rounds of the processes")
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
    print(
        f"(us per elementwise op, forward + backward, median of {args.repeats} chains; each "
        "cell: the library's chain / NumPy's chain in the same process)\n"
    )
    # (column, library, checkout): this checkout's tinyattn, PyTorch, then other trees'.
    runs = [("tinyattn", "tinyattn", None), ("PyTorch", "torch", None)]
    runs += [(f"tinyattn at {commit_of(tree)}", "tinyattn", tree) for tree in args.tree]
    names = [name for name, _, _ in runs]
    compared = [n for n in names if n != "PyTorch"]
    header = [*names]
    header += [f"{n}/PyTorch" for n in compared]
    header += [f"{n}/PyTorch in NumPy-chain units" for n in compared]
    print("| round | " + " | ".join(header) + " |")
    print("|---" * (len(header) + 1) + "|")
    times: dict[str, list[float]] = {n: [] for n in names}
    raw: dict[str, list[float]] = {n: [] for n in compared}
    units: dict[str, list[float]] = {n: [] for n in compared}
    for round_number in range(1, args.rounds + 1):
        # Each round starts with the next process, so that none is always first.
        shift = round_number % len(runs)
        got = {name: spawn(lib, shape, args.repeats, tree) for name, lib, tree in runs[shift:]}
        got |= {name: spawn(lib, shape, args.repeats, tree) for name, lib, tree in runs[:shift]}
        cells = [f"{got[n]['us']:.2f} / {got[n]['numpy_us']:.2f}" if got[n] else "-" for n in names]
        for name in names:
            if got[name]:
                times[name].append(got[name]["us"])
        theirs = got["PyTorch"]
        for name in compared:
            ours = got[name]
            if ours and theirs:
                raw[name].append(ours["us"] / theirs["us"])
                units[name].append(
                    (ours["us"] / ours["numpy_us"]) / (theirs["us"] / theirs["numpy_us"])
                )
        cells += [f"{raw[n][-1]:.2f}x" if got[n] and theirs else "-" for n in compared]
        cells += [f"{units[n][-1]:.2f}x" if got[n] and theirs else "-" for n in compared]
        print(f"| {round_number} | " + " | ".join(cells) + " |", flush=True)
    summary = [spread(times[n]) for n in names]
    summary += [spread(raw[n], "x") for n in compared]
    summary += [spread(units[n], "x") for n in compared]
    print("| median (range) | " + " | ".join(summary) + " |")


if __name__ == "__main__":
    main()
