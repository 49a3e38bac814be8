"""Benchmark: a training step eager, compiled (`ta.compile`), in PyTorch eager, and the NumPy floor.

Run by hand, never as a test:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/compiled.py [--quick] [--plot]
    python benchmarks/compiled.py --device cuda     # tinyattn on CuPy against PyTorch CUDA

Three models: "small", a minGPT-sized causal language model written with tinyattn's own API
(vocab 80, T 16, width 32, 2 heads, 2 pre-LN GELU blocks, MLP 128, final LayerNorm, batch 16,
AdamW); "gpt", examples/gpt.py's model and training step (vocab 96, T 32, width 64, 4 heads, 2
blocks, batch 32, AdamW in two groups, clipping, a schedule), run under PyTorch by swapping its
import lines; and "bench", the model of bench.py's "step" section (vocab 16, T 16, width 64, 4
heads, 2 post-LN ReLU blocks, MLP 256, batch 64, Adam). For each, these modes: tinyattn eager,
tinyattn compiled, PyTorch eager (the same architecture; left out when PyTorch is not
installed), the whole step written out by hand in NumPy (handwritten_step.py: forward, backward
and the optimizer with no autograd, its losses checked against tinyattn's), the floor of what a
replay of NumPy calls could reach, and the NumPy GEMM floor: every matrix product of the step
(forward and backward) on preallocated arrays with ``out=``, nothing else. The small model has
one more: the model compiled alone (``ta.compile(model)``, backward and optimizer eager).

Every (model, mode, threads) measurement runs in its own process: two libraries' thread pools in
one process distort each other's timings. Children run with OpenBLAS's native kernel for this CPU
(OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from their environment, whatever the parent
has), with OPENBLAS_NUM_THREADS / OMP_NUM_THREADS set to the thread count, and, when threadpoolctl
is importable, a threadpoolctl limit as well (PyTorch: ``torch.set_num_threads``). The set of
processes runs for several rounds, in a rotated order, and the tables give the median over rounds
of each process's median step time, with the range over rounds. Every child turns on tinyattn's
allocator setting (TINYATTN_KEEP_FREED_MEMORY=1), as bench.py does, so all columns run alike.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
from common import REMOVED, blas_info, child_env, gpt_example, machine_report, median_seconds

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
MODES = ("eager", "compiled", "unfused", "model", "torch", "numpy", "floor")
SMALL_ONLY = ("model",)  # modes measured on the small model only
CPU_ONLY = ("numpy", "floor")  # NumPy on the host: left out with --device cuda
MODE_NAMES = {
    "eager": "tinyattn eager",
    "compiled": "tinyattn compiled",
    "unfused": "tinyattn compiled, fuse=False",
    "model": "compiled model, eager backward",
    "torch": "PyTorch eager",
    "numpy": "hand-written NumPy step",
    "floor": "NumPy GEMM floor",
}
SMALL = {"vocab": 80, "T": 16, "C": 32, "H": 2, "d_ff": 128, "blocks": 2, "batch": 16}
GPT = {"vocab": 96, "T": 32, "C": 64, "H": 4, "d_ff": 256, "blocks": 2, "batch": 32}
MODELS = ("small", "gpt", "bench")
MODEL_NAMES = {
    "small": "minGPT-sized LM (vocab 80, T 16, width 32, 2 heads, 2 blocks, batch 16, AdamW)",
    "gpt": "examples/gpt.py's model and step (vocab 96, T 32, width 64, 4 heads, batch 32)",
    "bench": "bench.py step model (vocab 16, T 16, width 64, 4 heads, MLP 256, batch 64, Adam)",
}


def _torch_available() -> bool:
    try:
        importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _bench(allow_torch: bool):
    """bench.py as a module; without `allow_torch`, and PyTorch not yet imported, bench.py
    imports without it (its PyTorch parts are left out)."""
    sys.path.insert(0, str(HERE))
    if allow_torch or "torch" in sys.modules or "bench" in sys.modules:
        return importlib.import_module("bench")
    # `import torch` in bench.py raises ImportError. The entry goes again at once: left in
    # sys.modules, None breaks array-api-compat's look-up of torch.Tensor for CuPy arrays.
    sys.modules["torch"] = None
    try:
        return importlib.import_module("bench")
    finally:
        del sys.modules["torch"]


# ----------------------------------------------------------------------------- tinyattn models
def _tinyattn_step(
    model_name: str,
    seed: int = 0,
    batches: int = 8,
    device: str = "cpu",
    sizes: dict | None = None,
    compile_model: bool = False,
):
    """(step function, list of argument tuples): the model, its optimizer and its batches, on
    `device`; `sizes` overrides entries of the model's configuration ("small" and "bench"). With
    `compile_model` (the small model only), the step calls ``ta.compile(model)`` and runs the
    loss, backward and optimizer eagerly around it, the torch.compile way."""
    import tinyattn as ta
    import tinyattn.nn.functional as F
    from tinyattn import nn, optim

    rng = np.random.default_rng(seed)
    if model_name == "gpt":
        if device != "cpu" or sizes:
            raise ValueError("the gpt model runs on the CPU at its own sizes only")
        return _gpt_step(gpt_example("tinyattn"), seed, batches)
    if model_name == "bench":
        bench = _bench(allow_torch=False)
        cfg = bench.STEP | (sizes or {})
        ta.manual_seed(0)
        model = bench.TinyattnModel(cfg).to(device)
        optimizer = optim.Adam(model.parameters(), lr=1e-3)
        host = [rng.integers(0, cfg["vocab"], (cfg["batch"], cfg["T"])) for _ in range(batches)]
        # bench.py: targets are the tokens
        args = [(ta.tensor(b, device=device), ta.tensor(b, device=device)) for b in host]
    else:
        cfg = SMALL | (sizes or {})

        class SmallLM(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.token = nn.Embedding(cfg["vocab"], cfg["C"])
                self.position = nn.Embedding(cfg["T"], cfg["C"])
                self.blocks = nn.ModuleList(
                    [
                        nn.TransformerBlock(
                            cfg["C"], cfg["H"], cfg["d_ff"], norm_first=True, activation="gelu"
                        )
                        for _ in range(cfg["blocks"])
                    ]
                )
                self.norm = nn.LayerNorm(cfg["C"])
                self.head = nn.Linear(cfg["C"], cfg["vocab"])

            def forward(self, idx):
                positions = ta.arange(idx.shape[1], device=idx.device)
                x = self.token(idx) + self.position(positions)
                for block in self.blocks:
                    x = block(x, is_causal=True)
                return self.head(self.norm(x))

        ta.manual_seed(0)
        model = SmallLM().to(device)
        optimizer = optim.AdamW(model.parameters(), lr=3e-3)
        args = []
        for _ in range(batches):
            tokens = rng.integers(0, cfg["vocab"], (cfg["batch"], cfg["T"] + 1))
            args.append(
                (ta.tensor(tokens[:, :-1], device=device), ta.tensor(tokens[:, 1:], device=device))
            )
    vocab = cfg["vocab"]
    forward = ta.compile(model) if compile_model else model

    def step(idx, targets):
        optimizer.zero_grad()
        loss = F.cross_entropy(forward(idx).view(-1, vocab), targets.view(-1))
        loss.backward()
        optimizer.step()
        return loss

    return step, args


def _gpt_step(example, seed: int = 0, batches: int = 8):
    """The example's training step (AdamW in two groups, clipping, a LambdaLR schedule) on
    random characters; `example` is the module under either library."""
    torch, cfg = example.torch, GPT
    torch.manual_seed(0)
    model = example.GPT(
        cfg["vocab"], cfg["T"], n_layer=cfg["blocks"], n_head=cfg["H"], n_embd=cfg["C"]
    )
    optimizer = example.optimizer_for(model, 3e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    model.train()
    rng = np.random.default_rng(seed)
    args = []
    for _ in range(batches):
        chunk = rng.integers(0, cfg["vocab"], (cfg["batch"], cfg["T"] + 1))
        args.append((torch.tensor(chunk[:, :-1]), torch.tensor(chunk[:, 1:])))

    def step(x, y):
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        example.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        return loss

    return step, args


# ------------------------------------------------------------------------------ PyTorch models
def _torch_step(model_name: str, device: str = "cpu", sizes: dict | None = None):
    """PyTorch eager's (step function, list of argument tuples), on `device` ("cpu", "cuda")."""
    import torch

    if model_name == "gpt":
        if device != "cpu" or sizes:
            raise ValueError("the gpt model runs on the CPU at its own sizes only")
        return _gpt_step(gpt_example("torch"))
    if model_name == "bench":
        import tinyattn as ta

        bench = _bench(allow_torch=True)
        cfg = bench.STEP | (sizes or {})
        ta.manual_seed(0)
        state = {k: v.numpy() for k, v in bench.TinyattnModel(cfg).state_dict().items()}
        model = bench.torch_model(cfg, state).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        rng = np.random.default_rng(0)
        host = [rng.integers(0, cfg["vocab"], (cfg["batch"], cfg["T"])) for _ in range(8)]
        args = [(torch.from_numpy(b).to(device), torch.from_numpy(b).to(device)) for b in host]
    else:
        cfg = SMALL | (sizes or {})
        tnn = torch.nn
        C, H, T = cfg["C"], cfg["H"], cfg["T"]

        class Block(tnn.Module):
            """Pre-LN: x + attn(ln1(x)), x + mlp(ln2(x)); attention as in minGPT (masked_fill)."""

            def __init__(self) -> None:
                super().__init__()
                self.ln1, self.ln2 = tnn.LayerNorm(C), tnn.LayerNorm(C)
                self.q, self.k, self.v, self.out = (tnn.Linear(C, C) for _ in range(4))
                self.fc1, self.fc2 = tnn.Linear(C, cfg["d_ff"]), tnn.Linear(cfg["d_ff"], C)
                self.register_buffer("causal", torch.tril(torch.ones(T, T, dtype=torch.bool)))

            def forward(self, x):
                B, Tx, _ = x.shape
                h = self.ln1(x)
                # (B, T, C) -> (B, H, T, D)
                q, k, v = (
                    p(h).view(B, Tx, H, C // H).transpose(1, 2) for p in (self.q, self.k, self.v)
                )
                scores = (q @ k.transpose(-1, -2)) / (C // H) ** 0.5
                scores = scores.masked_fill(~self.causal[:Tx, :Tx], float("-inf"))
                attended = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, Tx, C)
                x = x + self.out(attended)
                return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))

        class SmallLM(tnn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.token, self.position = tnn.Embedding(cfg["vocab"], C), tnn.Embedding(T, C)
                self.blocks = tnn.ModuleList([Block() for _ in range(cfg["blocks"])])
                self.norm, self.head = tnn.LayerNorm(C), tnn.Linear(C, cfg["vocab"])

            def forward(self, idx):
                positions = torch.arange(idx.shape[1], device=idx.device)
                x = self.token(idx) + self.position(positions)
                for block in self.blocks:
                    x = block(x)
                return self.head(self.norm(x))

        torch.manual_seed(0)
        model = SmallLM().to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        rng = np.random.default_rng(0)
        args = []
        for _ in range(8):
            tokens = torch.from_numpy(rng.integers(0, cfg["vocab"], (cfg["batch"], T + 1)))
            tokens = tokens.to(device)
            args.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))
    vocab = cfg["vocab"]

    def step(idx, targets):
        optimizer.zero_grad()
        logits = model(idx)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        return loss

    return step, args


# ---------------------------------------------------------------------------- the NumPy floor
def _floor_products(model_name: str) -> list[tuple]:
    """(a, b, out) for every matrix product of one training step of the model, forward and
    backward, on preallocated float32 arrays: the Linear layers as x @ W.T (W is (out, in), as
    in both frameworks), their input gradients dY @ W and weight gradients dY.T @ X; attention's
    Q K^T and P V per head, and their four backward products. Embedding lookups, elementwise
    work and the optimizer are left out: this is the limit the products alone set."""
    cfg = {"bench": _bench(allow_torch=False).STEP, "gpt": GPT}.get(model_name, SMALL)
    B, T, C, H, Fh, V = cfg["batch"], cfg["T"], cfg["C"], cfg["H"], cfg["d_ff"], cfg["vocab"]
    N, D = B * T, C // H
    rng = np.random.default_rng(0)

    def arr(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    products = []

    def linear(n_in: int, n_out: int) -> None:
        x, w, dy = arr(N, n_in), arr(n_out, n_in), arr(N, n_out)
        products.append((x, w.T, np.empty((N, n_out), np.float32)))  # forward
        products.append((dy, w, np.empty((N, n_in), np.float32)))  # dX
        products.append((dy.T, x, np.empty((n_out, n_in), np.float32)))  # dW

    for _ in range(cfg["blocks"]):
        if model_name == "gpt":  # one fused q, k, v projection, then the output projection
            linear(C, 3 * C)
            linear(C, C)
        else:
            for _ in range(4):  # q, k, v and out projections
                linear(C, C)
        q, k, v, p = arr(B, H, T, D), arr(B, H, T, D), arr(B, H, T, D), arr(B, H, T, T)
        dout, ds = arr(B, H, T, D), arr(B, H, T, T)
        products.append((q, k.transpose(0, 1, 3, 2), np.empty((B, H, T, T), np.float32)))
        products.append((p, v, np.empty((B, H, T, D), np.float32)))
        products.append((dout, v.transpose(0, 1, 3, 2), np.empty((B, H, T, T), np.float32)))  # dP
        products.append((p.transpose(0, 1, 3, 2), dout, np.empty((B, H, T, D), np.float32)))  # dV
        products.append((ds, k, np.empty((B, H, T, D), np.float32)))  # dQ
        products.append((ds.transpose(0, 1, 3, 2), q, np.empty((B, H, T, D), np.float32)))  # dK
        linear(C, Fh)
        linear(Fh, C)
    linear(C, V)  # the head
    return products


def _floor_step(model_name: str):
    products = _floor_products(model_name)
    matmul = np.matmul

    def step():
        for a, b, out in products:
            matmul(a, b, out=out)

    return step, len(products)


# ------------------------------------------------------------------------------------- worker
def worker(model_name: str, mode: str, threads: int, repeats: int, device: str = "cpu") -> dict:
    """One measurement, in this process: median seconds per step after a warm-up, on `device`
    (PyTorch's: "cuda" for tinyattn's "cuda", else "cpu")."""
    import tinyattn as ta  # noqa: F401  (the allocator setting, in every child alike)

    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    limit = threadpool_limits(threads) if threadpool_limits else None
    extra = {}
    if mode == "floor":
        step, extra["products"] = _floor_step(model_name)
        run = step
    elif mode == "numpy":  # the step written out in NumPy (handwritten_step.py)
        import handwritten_step

        step, args = handwritten_step.make_step(model_name)
        counter = [0]

        def run():
            counter[0] += 1
            return step(*args[counter[0] % len(args)])
    elif mode == "torch":
        import torch

        torch.set_num_threads(threads)
        step, args = _torch_step(model_name, torch_device(device))
        counter = [0]

        def run():
            counter[0] += 1
            return step(*args[counter[0] % len(args)]).item()
    elif mode in ("first-call", "first-call-unfused"):
        return {"median": first_calls(model_name, fuse=mode == "first-call")}
    else:
        import tinyattn as ta

        step, args = _tinyattn_step(model_name, device=device, compile_model=mode == "model")
        if mode in ("compiled", "unfused"):  # fused where Numba is installed, unless unfused
            step = ta.compile(step, fuse=False if mode == "unfused" else None)
        counter = [0]

        def run():
            counter[0] += 1
            return step(*args[counter[0] % len(args)]).item()

    median = median_seconds(run, warmup=10, repeats=repeats)
    info = blas_info()
    if limit is not None:
        limit.unregister()
    return {"median": median, "blas": info, **extra}


def first_calls(model_name: str, fuse: bool) -> float:
    """Seconds from the first call of a new compiled step to the end of its third: two
    recordings, the tape, and with `fuse` its kernels, built or loaded from the kernel cache
    (TINYATTN_CACHE_DIR, which the caller sets to a cold or a warm folder)."""
    import time

    import tinyattn as ta

    step, args = _tinyattn_step(model_name)
    step = ta.compile(step, fuse=fuse)
    start = time.perf_counter()
    for k in range(3):
        step(*args[k % len(args)]).item()
    return time.perf_counter() - start


# ------------------------------------------------------------------------------------- parent
def torch_device(device: str) -> str:
    """PyTorch's device beside tinyattn's: CUDA beside CUDA, else the CPU."""
    return device if device.startswith("cuda") else "cpu"


def spawn(
    model_name: str,
    mode: str,
    threads: int,
    repeats: int,
    device: str = "cpu",
    env: dict | None = None,
) -> dict:
    """`worker` in a process of its own; `env` adds to its environment (a kernel cache)."""
    command = [sys.executable, __file__, "--worker", model_name, mode, str(threads), str(repeats)]
    command.append(device)
    environment = child_env(threads, keep_freed_memory=True) | (env or {})
    done = subprocess.run(command, env=environment, capture_output=True, text=True)
    if done.returncode != 0:  # e.g. a CompileError: reported with the tables, not a crash
        lines = done.stderr.strip().splitlines() or ["(no message)"]
        return {"error": lines[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_losses(
    model_name: str,
    steps: int = 12,
    device: str = "cpu",
    sizes: dict | None = None,
    fuse: bool | None = False,
) -> tuple[float, bool]:
    """Eager and compiled training (unfused by default: bit for bit; `fuse` None fuses where
    Numba is installed) from the same seed on `steps` different batches: the largest relative
    difference of their losses, and whether they are equal bit for bit."""
    import tinyattn as ta

    losses = []
    for compiled in (False, True):
        step, args = _tinyattn_step(model_name, seed=1, batches=steps, device=device, sizes=sizes)
        step = ta.compile(step, fuse=fuse) if compiled else step
        losses.append([step(*a).item() for a in args])
    eager, replayed = losses
    worst = max(abs(a - b) / abs(a) for a, b in zip(eager, replayed))
    return worst, eager == replayed


def ratio(results: dict, key: tuple, a: str, b: str) -> str:
    """The ratio of two columns' medians over rounds, with its range over rounds."""
    model_name, threads = key
    x, y = results.get((model_name, a, threads)), results.get((model_name, b, threads))
    if not x or not y:
        return "-"
    per_round = [p / q for p, q in zip(x, y)]
    middle = statistics.median(x) / statistics.median(y)
    return f"{middle:.2f}x ({min(per_round):.2f} - {max(per_round):.2f})"


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = [m for m in MODELS if (m, "eager", 1) in results]
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 3.6))
    axes = np.atleast_1d(axes)
    colors = {"eager": "#9e9e9e", "compiled": "#1f77b4", "model": "#9467bd", "torch": "#ff7f0e"}
    colors |= {"numpy": "#98df8a", "floor": "#2ca02c"}
    for ax, model_name in zip(axes, models):
        modes = [m for m in MODES if (model_name, m, 1) in results]
        medians = [statistics.median(results[model_name, m, 1]) * 1e3 for m in modes]
        low = [min(results[model_name, m, 1]) * 1e3 for m in modes]
        high = [max(results[model_name, m, 1]) * 1e3 for m in modes]
        errors = [[m - lo for m, lo in zip(medians, low)], [h - m for m, h in zip(medians, high)]]
        ax.bar(range(len(modes)), medians, yerr=errors, capsize=4, color=[colors[m] for m in modes])
        ax.set_xticks(range(len(modes)), [MODE_NAMES[m].replace(" ", "\n", 1) for m in modes])
        ax.set_ylabel("ms per training step (1 thread)")
        ax.set_title(MODEL_NAMES[model_name].split(" (")[0])
        for x, value in enumerate(medians):
            ax.text(x, value, f"{value:.2f}", ha="center", va="bottom", fontsize=8)
    fig.suptitle("Training step: median over rounds, bars = range over rounds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"\nwrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    parser.add_argument("--rounds", type=int, help="rounds of the whole set (default 4, quick 2)")
    parser.add_argument("--plot", action="store_true", help="write docs/images/compiled_step.png")
    parser.add_argument(
        "--device",
        default="cpu",
        help="tinyattn's device; with cuda, PyTorch runs on CUDA too, and the gpt model, the "
        "hand-written NumPy step and the NumPy floor (CPU-only) are left out",
    )
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        model_name, mode, threads, repeats, device = args.worker
        print(json.dumps(worker(model_name, mode, int(threads), int(repeats), device)))
        return

    import tinyattn as ta

    has_torch = _torch_available()
    torch_version = importlib.metadata.version("torch") if has_torch else "not installed"
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, NumPy {np.__version__}, "
        f"PyTorch {torch_version}, tinyattn {ta.__version__}"
    )
    print("\n".join(machine_report()))
    print(
        "run as: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/compiled.py "
        "(every measurement process starts without those two variables, whatever this shell has)"
    )
    present = [name for name in REMOVED if name in os.environ]
    if present:
        print(f"note: this shell sets {', '.join(present)}; the children run without them")

    print("\ncompiled vs eager losses, 12 steps on different batches (unfused, then fused):")
    models = MODELS if args.device == "cpu" else tuple(m for m in MODELS if m != "gpt")
    for model_name in models:
        for fuse in (False, None):
            try:
                worst, exact = check_losses(model_name, device=args.device, fuse=fuse)
            except ta.CompileError as error:
                print(f"  {model_name}: refused while recording: {error}")
                continue
            same = "bit for bit" if exact else "not bit for bit"
            kind = "unfused" if fuse is False else "fused where Numba is installed"
            print(f"  {model_name}, {kind}: max relative difference {worst:.3g} ({same})")
    if args.device == "cpu":
        import handwritten_step

        print("hand-written NumPy step vs tinyattn eager losses, 12 steps:")
        for model_name in models:
            worst = handwritten_step.check(model_name)
            print(f"  {model_name}: max relative difference {worst:.3g}")

    rounds = args.rounds or (2 if args.quick else 4)
    repeats = {"small": 60 if args.quick else 300, "gpt": 30 if args.quick else 150}
    repeats["bench"] = 20 if args.quick else 100
    modes = [m for m in MODES if m != "torch" or has_torch]
    modes = modes if args.device == "cpu" else [m for m in modes if m not in CPU_ONLY]
    if not has_torch:
        print("PyTorch is not installed: its column is left out")
    results: dict[tuple, list[float]] = {}
    kernel = None
    errors: dict[tuple, str] = {}
    for r in range(rounds):
        order = modes[r % len(modes) :] + modes[: r % len(modes)]  # rotate who runs first
        for threads in (1, 2):
            for model_name in models:
                for mode in order:
                    key = (model_name, mode, threads)
                    if key in errors or (mode in SMALL_ONLY and model_name != "small"):
                        continue
                    got = spawn(model_name, mode, threads, repeats[model_name], args.device)
                    if "error" in got:
                        errors[key] = got["error"]
                        continue
                    results.setdefault((model_name, mode, threads), []).append(got["median"])
                    if got["blas"] and kernel is None:
                        kernel = got["blas"]
        print(f"round {r + 1}/{rounds} done", flush=True)
    if kernel:
        described = "; ".join(
            f"{k['internal_api']} {k['version']} {k['architecture']} kernel" for k in kernel
        )
        print(f"BLAS in the children (threadpoolctl): {described}")
    else:
        print("BLAS kernel: threadpoolctl is not installed, so it cannot be printed")

    for model_name in models:
        print(f"\n### {MODEL_NAMES[model_name]}: ms per step, median over {rounds} rounds\n")
        header = ["threads"] + [MODE_NAMES[m] for m in modes]
        header += ["eager/PyTorch", "compiled/PyTorch", "compiled/floor", "compiled/NumPy step"]
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---" for _ in header) + "|")
        for threads in (1, 2):
            cells = [str(threads)]
            for mode in modes:
                times = results.get((model_name, mode, threads))
                if not times:
                    cells.append("-" if mode in SMALL_ONLY and model_name != "small" else "failed")
                    continue
                middle = statistics.median(times)
                cells.append(
                    f"{middle * 1e3:.2f} ({min(times) * 1e3:.2f} - {max(times) * 1e3:.2f})"
                )

            key = (model_name, threads)
            cells += [
                ratio(results, key, "eager", "torch"),
                ratio(results, key, "compiled", "torch"),
            ]
            cells.append(ratio(results, key, "compiled", "floor"))
            cells.append(ratio(results, key, "compiled", "numpy"))
            print("| " + " | ".join(cells) + " |")
    for (model_name, mode, threads), message in errors.items():
        print(f"\n{model_name} {mode} at {threads} thread(s) failed: {message}")
    print(
        "\n(ranges: lowest - highest over rounds; ratio ranges are per round, each round's "
        "processes having run back to back)"
    )
    if args.plot:
        plot(results, ROOT / "docs" / "images" / "compiled_step.png")


if __name__ == "__main__":
    main()
