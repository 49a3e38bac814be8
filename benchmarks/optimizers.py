"""Benchmark: ``optimizer.step()`` per tensor (``foreach=False``) against the flat path (default).

Run by hand, never as a test:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/optimizers.py [--only flat]

The parameters are those of the small model of compiled.py (a minGPT-sized language model, 38
parameters), with the gradients of one training step on them. Each path gets its own AdamW (and
SGD with momentum) over the same parameters; the paths take turns for several rounds, each round
timing a block of steps, and the table gives the median over rounds of the time per step, with
the range. ``clip_grad_norm`` over the same gradients is timed as well.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

PATHS = {"loop": False, "flat": None}  # the foreach value each path runs with


def small_model_parameters() -> list:
    """The small model's parameters, each with the gradient of one training step."""
    from compiled import _tinyattn_step  # noqa: PLC0415

    step, args = _tinyattn_step("small")
    step(*args[0])  # one eager step leaves the gradients on the parameters
    optimizer = inspect.getclosurevars(step).nonlocals["optimizer"]
    return [p for group in optimizer.param_groups for p in group["params"]]


def per_step(call, steps: int) -> float:
    """Seconds per call over a block of `steps` calls."""
    start = time.perf_counter()
    for _ in range(steps):
        call()
    return (time.perf_counter() - start) / steps


def main() -> None:
    from tinyattn import optim  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(PATHS), help="time one path")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=200, help="steps per round")
    options = parser.parse_args()
    params = small_model_parameters()
    size = sum(p.numel() for p in params)
    print(f"{len(params)} parameters, {size} numbers, {params[0].dtype}")
    paths = [options.only] if options.only else list(PATHS)
    calls = {}
    for path in paths:
        adamw = optim.AdamW(params, lr=1e-6, foreach=PATHS[path])
        sgd = optim.SGD(params, lr=1e-6, momentum=0.9, foreach=PATHS[path])
        calls[f"AdamW.step, {path}"] = adamw.step
        calls[f"SGD.step (momentum), {path}"] = sgd.step
    calls["clip_grad_norm"] = lambda: optim.clip_grad_norm(params, max_norm=1e9)
    for call in calls.values():
        per_step(call, 20)  # warm up: builds the flat layouts
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(options.rounds):
        for name, call in calls.items():
            times[name].append(per_step(call, options.steps))
    print(f"median over {options.rounds} rounds of {options.steps} calls, us per call (range)")
    for name, values in times.items():
        median = statistics.median(values) * 1e6
        low, high = min(values) * 1e6, max(values) * 1e6
        print(f"  {name:32s} {median:8.1f}  ({low:.1f} - {high:.1f})")


if __name__ == "__main__":
    main()
