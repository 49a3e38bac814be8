"""Data parallelism on the CPU: the bench model's training step on 1 and 2 processes, and the
share of the gradient all-reduce hidden behind backward.

Run by hand, never as a test:  python benchmarks/distributed.py [--repeats 3] [--timeline FILE]
The global batch (bench.py's STEP, 64 sequences) is split over the ranks (strong scaling).
DistributedDataParallel runs with bucket_cap_mb=0.1, so that the 0.4 MB of float32 gradients
make several buckets. Per step, on rank 0:
  communication  the same buckets all-reduced after backward, one after the other (no overlap)
  exposed        the time the last gradient's hook waited for the buckets still in flight
  hidden share   1 - exposed / communication
Each repeat is a fresh launch; the table gives the range over repeats (the machine is shared).
Every process runs one BLAS thread, so 2 processes use two cores where 1 uses one.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

STEPS, WARMUP, BUCKET_MB = 30, 5, 0.1


def worker() -> None:
    """One rank: time STEPS steps of DDP training, print rank 0's medians as JSON."""
    import numpy as np
    from bench import STEP, TinyattnModel

    import tinyattn as ta
    import tinyattn.distributed as dist
    import tinyattn.nn.functional as F
    from tinyattn import optim
    from tinyattn.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ta.manual_seed(0)
    model = TinyattnModel(STEP)
    ddp = DistributedDataParallel(model, bucket_cap_mb=BUCKET_MB)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    local = STEP["batch"] // world
    rng = np.random.default_rng(rank)
    tokens = ta.tensor(rng.integers(0, STEP["vocab"], (local, STEP["T"] + 1)))
    x, y = tokens[:, :-1], tokens[:, 1:]
    steps, exposed, communication, timeline = [], [], [], None
    for step in range(STEPS + WARMUP):
        ddp._timeline = []
        start = time.perf_counter()
        loss = F.cross_entropy(ddp(x).reshape(-1, STEP["vocab"]), y.reshape(-1))
        backward_start = time.perf_counter()
        loss.backward()
        backward_end = time.perf_counter()
        opt.step()
        opt.zero_grad()
        end = time.perf_counter()
        if step < WARMUP:
            continue
        steps.append(end - start)
        exposed.append(sum(v for event, _, v in ddp._timeline if event == "waited"))
        communication.append(_unoverlapped(ddp, dist))
        if step == WARMUP + STEPS // 2:  # one step's picture, relative to the backward start
            timeline = {
                "backward": [0.0, backward_end - backward_start],
                "events": [
                    (e, b, v - backward_start) for e, b, v in ddp._timeline if e != "waited"
                ],
            }
    if rank == 0:
        report = {
            "world": world,
            "step": statistics.median(steps),
            "exposed": statistics.median(exposed),
            "communication": statistics.median(communication),
            "buckets": len(ddp._bucket_list),
            "timeline": timeline,
        }
        print("RESULT " + json.dumps(report), flush=True)
    dist.destroy_process_group()


def _unoverlapped(ddp, dist) -> float:
    """The step's bucket all-reduces again, after backward, one at a time (nothing to hide
    behind): the communication the overlap has to hide."""
    dist.barrier()
    start = time.perf_counter()
    for bucket in ddp._bucket_list:
        dist.all_reduce(bucket.flat.clone(), dist.ReduceOp.AVG)
    return time.perf_counter() - start


def launch(world: int) -> dict:
    command = [sys.executable, "-m", "tinyattn.distributed.run", "--standalone"]
    command += [f"--nproc_per_node={world}", __file__]
    # One BLAS thread per process in both runs (the launcher sets it only for several), so that
    # 2 processes use two cores where 1 process uses one.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def spread(values: list[float], scale: float = 1e3) -> str:
    low, high = min(values) * scale, max(values) * scale
    return f"{low:.1f}-{high:.1f}" if len(values) > 1 else f"{low:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeline", type=Path, help="write a 2-rank step's timeline (JSON)")
    args = parser.parse_args()
    from common import machine_report

    for line in machine_report():
        print(line)
    print(f"bench model (bench.py STEP), global batch 64, {STEPS} steps per launch, medians")
    runs = {world: [launch(world) for _ in range(args.repeats)] for world in (1, 2)}
    single = [run["step"] for run in runs[1]]
    double = [run["step"] for run in runs[2]]
    print(f"step, 1 process:   {spread(single)} ms")
    print(f"step, 2 processes: {spread(double)} ms (32 sequences each)")
    speedups = [s / d for s, d in zip(single, double)]
    print(f"speed-up:          {min(speedups):.2f}-{max(speedups):.2f}x")
    for run in runs[2]:
        share = 1 - run["exposed"] / run["communication"] if run["communication"] else 1.0
        run["hidden"] = max(0.0, min(1.0, share))
    print(f"buckets: {runs[2][0]['buckets']} (bucket_cap_mb={BUCKET_MB})")
    print(f"communication without overlap: {spread([r['communication'] for r in runs[2]])} ms")
    print(f"exposed after backward:        {spread([r['exposed'] for r in runs[2]])} ms")
    print(f"hidden share:                  {spread([r['hidden'] for r in runs[2]], 100)} %")
    if args.timeline:
        args.timeline.write_text(json.dumps(runs[2][-1]["timeline"], indent=1))


if __name__ == "__main__":
    if "RANK" in os.environ:
        worker()
    else:
        main()
