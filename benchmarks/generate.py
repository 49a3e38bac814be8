"""Benchmark: greedy generation with examples/gpt.py's model, with and without a KV cache.

Run by hand, never as a test:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/generate.py [--quick] [--window]
    python benchmarks/generate.py --device cuda     # tinyattn on CuPy, PyTorch on CUDA

The model is examples/gpt.py's GPT with its defaults (2 blocks, 4 heads, width 64), vocabulary
100 and block size 64, so that a 10-token prompt and 30 new tokens (batch 1, greedy) fit in one
block and the cache serves every token. Five modes time one ``generate(prompt, 30)`` call,
and a sixth times its matrix products alone. With ``--window``, the example's own sample
instead: block 32, an 11-token prompt and 80 new tokens, so that from the 22nd new token on the
window slides and each token runs the whole window again (compiled: a second recorded step,
replayed):

- tinyattn full prefix: the whole sequence through the model for every token (minGPT's way);
- tinyattn KV cache: the prompt once, then one position per token, attending to the cache;
- tinyattn KV cache compiled: the same, with the per-token step recorded once and replayed
  (``ta.compile``; the step and its caches are kept between calls, so the timed calls replay);
- PyTorch full prefix and PyTorch KV cache: the very same file run under PyTorch, its three
  import lines swapped (what the example promises), on the same weights;
- NumPy GEMM floor: every matrix product the cached, compiled generation makes (the prompt's
  step, each token's step over the cache's rows, and past the block each window's whole
  forward), on preallocated float32 arrays with ``out=``, and nothing else: the limit the
  products alone set.

Every (mode, threads) measurement runs in its own process, with OpenBLAS's native kernel for this
CPU (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from the children's environment), the
thread count set through OPENBLAS_NUM_THREADS / OMP_NUM_THREADS and threadpoolctl (PyTorch:
``torch.set_num_threads``). The set of processes runs for several rounds in a rotated order; the
table gives the median over rounds of each process's median time per call, with the range.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import inspect
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from common import blas_info, child_env, gpt_example, machine_report, median_seconds

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
CONFIGS = {
    "fits": {"vocab": 100, "block": 64, "prompt": 10, "new": 30},
    # examples/gpt.py's own sample: 80 characters after an 11-character prompt, block 32, so 59
    # tokens run after the window starts to slide (the whole window again for each).
    "slides": {"vocab": 100, "block": 32, "prompt": 11, "new": 80},
}
CONFIG = dict(CONFIGS["fits"])  # the one in use: --window makes it "slides"
MODES = {
    "full": "tinyattn full prefix",
    "cache": "tinyattn KV cache",
    "compiled": "tinyattn KV cache compiled",
    "torch-full": "PyTorch full prefix",
    "torch-cache": "PyTorch KV cache",
    "floor": "NumPy GEMM floor",
}


def _forward_products(rows: int, keys: int, sizes: dict, rng: np.random.Generator) -> list:
    """(a, b, out) for every matrix product of one forward of the example's model over `rows`
    new positions that attend to `keys` positions (batch 1): per block the fused q, k, v
    projection, Q K^T and P V per head, the output projection and the MLP's two; then the head,
    on every row (as the example's step computes it)."""
    C, H, V = sizes["n_embd"], sizes["n_head"], CONFIG["vocab"]
    D = C // H

    def arr(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    products = []

    def linear(n_in: int, n_out: int) -> None:
        products.append((arr(rows, n_in), arr(n_out, n_in).T, np.empty((rows, n_out), np.float32)))

    for _ in range(sizes["n_layer"]):
        linear(C, 3 * C)
        q, k, v, p = (
            arr(1, H, rows, D),
            arr(1, H, keys, D),
            arr(1, H, keys, D),
            arr(1, H, rows, keys),
        )
        products.append((q, k.transpose(0, 1, 3, 2), np.empty((1, H, rows, keys), np.float32)))
        products.append((p, v, np.empty((1, H, rows, D), np.float32)))
        linear(C, C)
        linear(C, 4 * C)
        linear(4 * C, C)
    linear(C, V)
    return products


def floor_generation(sizes: dict):
    """A `generate` call's matrix products, as the cached generation meets them token by token
    (the same branches as the example's `_decoder`), forwards of one shape sharing arrays."""
    prompt, new, block = CONFIG["prompt"], CONFIG["new"], CONFIG["block"]
    cache_rows = min(block, prompt + new)
    rng, made, plan = np.random.default_rng(0), {}, []
    for length in range(prompt, prompt + new):  # the sequence's length before each token
        if length > cache_rows:
            shape = (block, block)  # the window slides: the whole window again
        else:
            shape = (prompt if length == prompt else 1, cache_rows)
        if shape not in made:
            made[shape] = _forward_products(*shape, sizes, rng)
        plan.extend(made[shape])
    matmul = np.matmul

    def run() -> list[int]:
        for a, b, out in plan:
            matmul(a, b, out=out)
        return []

    return run, len(plan)


def write_weights(path: Path) -> None:
    """The tinyattn model's initial weights, scaled up so that the greedy tokens are far from
    ties (every mode must write the same tokens; that is checked too)."""
    gpt = gpt_example("tinyattn")
    gpt.torch.manual_seed(0)
    model = gpt.GPT(CONFIG["vocab"], CONFIG["block"])
    np.savez(path, **{k: v.numpy() * 30.0 for k, v in model.state_dict().items()})


class _OnDevice:
    """A library module whose tensor factories default to `device`: the example makes its
    positions and caches with plain ``torch.arange`` / ``torch.zeros`` (the default device), and
    tinyattn has no ``set_default_device``, so the example's module gets this in its place."""

    FACTORIES = ("arange", "empty", "full", "ones", "tensor", "zeros")

    def __init__(self, library, device: str) -> None:
        self._library, self._device = library, device

    def __getattr__(self, name: str):
        found = getattr(self._library, name)
        if name in self.FACTORIES:
            found = functools.partial(found, device=self._device)  # a call's device= still wins
        # Made once per name: a compiled step guards on the function it reads (by identity),
        # so a new one at each call would make it record again every time.
        setattr(self, name, found)
        return found


def worker(mode: str, threads: int, repeats: int, weights: str, device: str = "cpu") -> dict:
    """One measurement, in this process: median seconds per generate call after a warm-up, with
    the model on `device` (the library's own name for it: "cuda", or tinyattn's "strict")."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    limit = threadpool_limits(threads) if threadpool_limits else None
    library = "torch" if mode.startswith("torch") else "tinyattn"
    gpt = gpt_example(library)
    if mode == "floor":
        defaults = inspect.signature(gpt.GPT).parameters
        sizes = {name: defaults[name].default for name in ("n_layer", "n_head", "n_embd")}
        run, products = floor_generation(sizes)
        median = median_seconds(run, warmup=3, repeats=repeats)
        info = blas_info()
        if limit is not None:
            limit.unregister()
        return {"median": median, "blas": info, "products": products}
    torch = gpt.torch
    if library == "torch":
        torch.set_num_threads(threads)
    if device != "cpu":
        gpt.torch = _OnDevice(torch, device)
    model = gpt.GPT(CONFIG["vocab"], CONFIG["block"]).eval()
    state = np.load(weights)
    model.load_state_dict({k: torch.tensor(state[k]) for k in state.files})
    model.to(device)
    prompt = torch.tensor(np.arange(CONFIG["prompt"])[None, :] % CONFIG["vocab"], device=device)
    options = {"kv_cache": mode != "full" and mode != "torch-full", "compiled": mode == "compiled"}

    def run() -> list[int]:
        return model.generate(prompt, CONFIG["new"], **options)[0].tolist()

    tokens = run()
    median = median_seconds(run, warmup=3, repeats=repeats)  # the first call records, too
    info = blas_info()
    if limit is not None:
        limit.unregister()
    return {"median": median, "tokens": tokens, "blas": info}


def spawn(mode: str, threads: int, repeats: int, weights: Path, device: str = "cpu") -> dict:
    """One measurement process; PyTorch's modes run on CUDA beside tinyattn's cuda."""
    if mode.startswith("torch"):
        device = device if device.startswith("cuda") else "cpu"
    command = [sys.executable, __file__, "--worker", mode, str(threads), str(repeats), str(weights)]
    command.append(device)
    command += ["--window"] if CONFIG == CONFIGS["slides"] else []
    done = subprocess.run(command, env=child_env(threads), capture_output=True, text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["(no message)"]
        return {"error": lines[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def ratio(results: dict, threads: int, a: str, b: str) -> str:
    """The ratio of two modes' medians over rounds, with its range over rounds."""
    x, y = results.get((a, threads)), results.get((b, threads))
    if not x or not y:
        return "-"
    per_round = [p / q for p, q in zip(x, y)]
    middle = statistics.median(x) / statistics.median(y)
    return f"{middle:.2f}x ({min(per_round):.2f} - {max(per_round):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    parser.add_argument("--rounds", type=int, help="rounds of the whole set (default 3, quick 1)")
    parser.add_argument(
        "--window",
        action="store_true",
        help="the example's own sample (block 32, 80 new tokens): most tokens slide the window",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="tinyattn's device; with cuda, PyTorch runs on CUDA too, and the NumPy floor "
        "(CPU-only) is left out",
    )
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    CONFIG.update(CONFIGS["slides" if args.window else "fits"])
    if args.worker:
        mode, threads, repeats, weights, device = args.worker
        print(json.dumps(worker(mode, int(threads), int(repeats), weights, device)))
        return

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, NumPy {np.__version__}, "
        f"PyTorch {torch_version or 'not installed'}"
    )
    print("\n".join(machine_report()))
    print(
        "run as: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/generate.py"
        + (" --window" if args.window else "")
        + " (every measurement process starts without those two variables, whatever this shell "
        "has)"
    )
    print(
        f"model: examples/gpt.py GPT (2 blocks, 4 heads, width 64), vocab {CONFIG['vocab']}, "
        f"block {CONFIG['block']}; greedy, batch 1, {CONFIG['prompt']}-token prompt, "
        f"{CONFIG['new']} new tokens per call"
    )
    modes = [m for m in MODES if torch_version or not m.startswith("torch")]
    modes = modes if args.device == "cpu" else [m for m in modes if m != "floor"]
    rounds = args.rounds or (1 if args.quick else 3)
    repeats = 10 if args.quick else 40
    results: dict[tuple, list[float]] = {}
    tokens: dict[str, list[int]] = {}
    errors: dict[tuple, str] = {}
    kernel, products = None, None
    with tempfile.TemporaryDirectory() as folder:
        weights = Path(folder) / "weights.npz"
        write_weights(weights)
        for r in range(rounds):
            order = modes[r % len(modes) :] + modes[: r % len(modes)]  # rotate who runs first
            for threads in (1, 2):
                for mode in order:
                    if (mode, threads) in errors:
                        continue
                    got = spawn(mode, threads, repeats, weights, args.device)
                    if "error" in got:
                        errors[mode, threads] = got["error"]
                        continue
                    results.setdefault((mode, threads), []).append(got["median"])
                    if "tokens" in got:
                        tokens.setdefault(mode, got["tokens"])
                    products = got.get("products", products)
                    kernel = kernel or got["blas"]
            print(f"round {r + 1}/{rounds} done", flush=True)
    if kernel:
        described = "; ".join(
            f"{k['internal_api']} {k['version']} {k['architecture']} kernel" for k in kernel
        )
        print(f"BLAS in the children (threadpoolctl): {described}")
    same = {mode: tokens[mode] == tokens.get("full") for mode in tokens}
    print("same tokens as tinyattn full prefix: " + ", ".join(f"{m} {s}" for m, s in same.items()))

    if products:
        print(f"the floor: {products} matrix products per generate call")
    print(f"\nms per generate call ({CONFIG['new']} tokens), median over {rounds} rounds\n")
    header = ["threads"] + [MODES[m] for m in modes]
    header += ["cache/full", "compiled/PyTorch full", "compiled/PyTorch cache", "compiled/floor"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for threads in (1, 2):
        cells = [str(threads)]
        for mode in modes:
            times = results.get((mode, threads))
            if not times:
                cells.append("failed")
                continue
            middle = statistics.median(times)
            cells.append(f"{middle * 1e3:.1f} ({min(times) * 1e3:.1f} - {max(times) * 1e3:.1f})")
        cells += [
            ratio(results, threads, "cache", "full"),
            ratio(results, threads, "compiled", "torch-full"),
            ratio(results, threads, "compiled", "torch-cache"),
            ratio(results, threads, "compiled", "floor"),
        ]
        print("| " + " | ".join(cells) + " |")
    for (mode, threads), message in errors.items():
        print(f"\n{mode} at {threads} thread(s) failed: {message}")
    print("\n(ranges: lowest - highest over rounds; ratio ranges are per round)")


if __name__ == "__main__":
    main()
