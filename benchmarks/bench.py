"""Benchmarks: tinyattn side by side with PyTorch (when importable) and raw NumPy (the floor).

Run by hand, never as a test:  python benchmarks/bench.py [--quick] [--only NAME ...]
Sections: overhead, step, attention, copytask, import, gpu, gelu. Every number is a median over
repeats measured in this one run, and the tables print ratios, because the machine is shared and
noisy.
Attention configurations each run in a fresh process so that peak memory is their own.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

try:
    import torch
except ImportError:  # the benchmark still runs: PyTorch columns show "-"
    torch = None

try:
    from threadpoolctl import threadpool_limits
except ImportError:
    threadpool_limits = None

# The benchmarks turn on tinyattn's opt-in allocator tuning (glibc keeps freed memory for reuse;
# see tinyattn.keep_freed_memory) here and, through the environment, in every worker process
# they start. main() says so in its first lines.
os.environ["TINYATTN_KEEP_FREED_MEMORY"] = "1"

import tinyattn as ta  # noqa: E402
import tinyattn.nn.functional as F  # noqa: E402
from tinyattn import kernels, nn, optim  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CHAIN_OPS, machine_report, per_op_chain  # noqa: E402


def median_time(fn, repeats: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def paired_times(fns: dict, repeats: int, warmup: int = 5) -> dict:
    """Median seconds of each function, sampled in alternation so that machine drift (other
    jobs on a shared machine) hits every column alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def table(title: str, header: list[str], rows: list[list]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def fmt(seconds: float | None, unit: str = "us", scale: float = 1.0) -> str:
    if seconds is None:
        return "-"
    factor = {"us": 1e6, "ms": 1e3, "s": 1.0}[unit]
    return f"{seconds * factor / scale:.2f}"


class Threads:
    """Limit BLAS threads (NumPy via threadpoolctl, PyTorch via set_num_threads) in a block."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __enter__(self):
        self.limit = threadpool_limits(self.n) if threadpool_limits else None
        if torch is not None:
            self.torch_before = torch.get_num_threads()
            torch.set_num_threads(self.n)
        return self

    def __exit__(self, *exc):
        if self.limit is not None:
            self.limit.unregister()
        if torch is not None:
            torch.set_num_threads(self.torch_before)


# ------------------------------------------------------------------------------ 1. per-op overhead
def overhead(quick: bool) -> None:
    """y = x; 50 times: y = y * 1.0001 + 0.0001 (100 elementwise ops), then y.sum().backward()."""
    rows = []
    for shape in [(4,), (256, 256)]:
        repeats = (50 if quick else 300) if shape == (4,) else (20 if quick else 100)
        fns = {"floor": per_op_chain("numpy", shape), "ours": per_op_chain("tinyattn", shape)}
        if torch is not None:
            fns["theirs"] = per_op_chain("torch", shape)
        with Threads(1):
            times = paired_times(fns, repeats)
        floor, ours = times["floor"] / CHAIN_OPS, times["ours"] / CHAIN_OPS
        theirs = times["theirs"] / CHAIN_OPS if "theirs" in times else None
        rows.append(
            [
                str(shape),
                fmt(floor),
                fmt(ours),
                fmt(theirs),
                ratio(ours, theirs),
                ratio(ours, floor),
            ]
        )
    table(
        "Per-op overhead: 100 elementwise ops, forward + backward (us per op, median)",
        [
            "shape",
            "NumPy floor",
            "tinyattn",
            "PyTorch (1 thr)",
            "tinyattn/PyTorch",
            "tinyattn/NumPy",
        ],
        rows,
    )


# --------------------------------------------------------------------------- 2. training step
STEP = {"vocab": 16, "T": 16, "C": 64, "H": 4, "d_ff": 256, "blocks": 2, "batch": 64}


class TinyattnModel(nn.Module):
    """Embeddings, post-LN blocks [MHA, +res, LN, MLP (ReLU), +res, LN], unembedding."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        self.token = nn.Embedding(cfg["vocab"], cfg["C"])
        self.position = nn.LearnedPositionalEmbedding(cfg["T"], cfg["C"])
        self.blocks = nn.ModuleList(
            [nn.TransformerBlock(cfg["C"], cfg["H"], cfg["d_ff"]) for _ in range(cfg["blocks"])]
        )
        self.head = nn.Linear(cfg["C"], cfg["vocab"])

    def forward(self, tokens):
        x = self.position(self.token(tokens))
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def torch_model(cfg: dict, state: dict):
    """The same network in PyTorch eager, loaded with tinyattn's initial weights."""
    tnn = torch.nn

    class Block(tnn.Module):
        def __init__(self):
            super().__init__()
            self.attn = tnn.ModuleDict(
                {
                    n: tnn.Linear(cfg["C"], cfg["C"])
                    for n in ("q_proj", "k_proj", "v_proj", "out_proj")
                }
            )
            self.norm1, self.norm2 = tnn.LayerNorm(cfg["C"]), tnn.LayerNorm(cfg["C"])
            self.ff1, self.ff2 = (
                tnn.Linear(cfg["C"], cfg["d_ff"]),
                tnn.Linear(cfg["d_ff"], cfg["C"]),
            )

        def forward(self, x):
            B, T, C = x.shape
            H, D = cfg["H"], C // cfg["H"]
            # (B, T, C) -> (B, H, T, D)
            q, k, v = (
                self.attn[n](x).view(B, T, H, D).transpose(1, 2)
                for n in ("q_proj", "k_proj", "v_proj")
            )
            weights = torch.softmax(q @ k.transpose(-1, -2) / D**0.5, dim=-1)
            attended = (weights @ v).transpose(1, 2).reshape(B, T, C)  # (B, H, T, D) -> (B, T, C)
            x = self.norm1(x + self.attn["out_proj"](attended))
            return self.norm2(x + self.ff2(torch.relu(self.ff1(x))))

    class Model(tnn.Module):
        def __init__(self):
            super().__init__()
            self.token = tnn.Embedding(cfg["vocab"], cfg["C"])
            self.position = tnn.Parameter(torch.zeros(cfg["T"], cfg["C"]))
            self.blocks = tnn.ModuleList([Block() for _ in range(cfg["blocks"])])
            self.head = tnn.Linear(cfg["C"], cfg["vocab"])

        def forward(self, tokens):
            x = self.token(tokens) + self.position[: tokens.shape[1]]
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    model = Model()
    mapping = _torch_names(cfg)
    with torch.no_grad():
        params = dict(model.named_parameters())
        for ours, theirs in mapping.items():
            params[theirs].copy_(torch.from_numpy(state[ours]))
    return model


def _torch_names(cfg: dict) -> dict:
    names = {"token.weight": "token.weight", "head.weight": "head.weight", "head.bias": "head.bias"}
    names["position.weight"] = "position"
    for b in range(cfg["blocks"]):
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            for kind in ("weight", "bias"):
                names[f"blocks.{b}.attn.{proj}.{kind}"] = f"blocks.{b}.attn.{proj}.{kind}"
        pairs = (("norm1", "norm1"), ("norm2", "norm2"), ("linear1", "ff1"), ("linear2", "ff2"))
        for ours, theirs in pairs:
            for kind in ("weight", "bias"):
                names[f"blocks.{b}.{ours}.{kind}"] = f"blocks.{b}.{theirs}.{kind}"
    return names


def step_functions(cfg: dict, device: str = "cpu") -> dict:
    """One training step of each framework on `device` ("cpu" or "cuda"): the same model, the
    same initial weights (tinyattn's, copied into PyTorch) and the same 8 batches, made on the
    device beforehand. {"ours": fn} plus {"theirs": fn} when PyTorch is importable; each call
    returns the loss as a float, which also waits for queued GPU work."""
    ta.manual_seed(0)
    model = TinyattnModel(cfg)
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    model.to(device)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    host = [rng.integers(0, cfg["vocab"], (cfg["batch"], cfg["T"])) for _ in range(8)]
    batches = [ta.tensor(b, device=device) for b in host]
    steps = {"ours": 0, "theirs": 0}

    def ours():
        tokens = batches[steps["ours"] % len(batches)]
        steps["ours"] += 1
        loss = F.cross_entropy(model(tokens).reshape(-1, cfg["vocab"]), tokens.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    if torch is None:
        return {"ours": ours}
    tmodel = torch_model(cfg, state).to(device)
    topt = torch.optim.Adam(tmodel.parameters(), lr=1e-3)
    tbatches = [torch.from_numpy(b).to(device) for b in host]

    def theirs():
        tokens = tbatches[steps["theirs"] % len(tbatches)]
        steps["theirs"] += 1
        logits = tmodel(tokens)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, cfg["vocab"]), tokens.reshape(-1)
        )
        topt.zero_grad()
        loss.backward()
        topt.step()
        return loss.item()

    return {"ours": ours, "theirs": theirs}


def step(quick: bool) -> None:
    fns = step_functions(STEP)
    rows = []
    for threads in (1, 2):
        with Threads(threads):
            times = paired_times(fns, 30 if quick else 200, warmup=10)
        t_ours, t_theirs = times["ours"], times.get("theirs")
        rows.append([threads, fmt(t_ours, "ms"), fmt(t_theirs, "ms"), ratio(t_ours, t_theirs)])
    table(
        "Training step: 2-block Transformer, vocab 16, T 16, width 64, 4 heads, MLP 256, "
        "batch 64, Adam (ms per step, median)",
        ["threads", "tinyattn", "PyTorch eager", "tinyattn/PyTorch"],
        rows,
    )


# ------------------------------------------------------------------------------ 3. attention
ATTENTION_LENGTHS = (512, 2048, 8192)


def attention_worker(framework: str, T: int, threads: int, repeats: int) -> dict:
    """Runs in its own process: one MHA layer (width 64, 4 heads, batch 1) forward + backward."""
    import resource

    C, H = 64, 4
    host = np.random.default_rng(0).standard_normal((1, T, C)).astype(np.float32)
    blas_threads = threads
    if framework == "tinyattn":
        # The 2 threads go to attention's query blocks, with a 1-thread BLAS underneath: its
        # tile-sized products gain little from BLAS threads, and both at once oversubscribe.
        kernels.ATTENTION_THREADS, blas_threads = threads, 1
    with Threads(blas_threads):
        if framework in ("tinyattn", "tinyattn-default"):
            ta.manual_seed(0)
            layer = nn.MultiHeadAttention(C, H)
            x = ta.tensor(host, requires_grad=True)

            def run():
                layer(x).sum().backward()
                x.grad = None
                layer.zero_grad()

        elif framework == "torch":
            layer = torch.nn.MultiheadAttention(C, H, batch_first=True)
            x = torch.tensor(host, requires_grad=True)

            def run():
                layer(x, x, x, need_weights=False)[0].sum().backward()
                x.grad = None
                layer.zero_grad()

        else:  # plain NumPy: softmax(Q K^T / sqrt(D)) V forward and backward written out

            def run():
                _numpy_attention(host, H)

        if _reset_peak():
            before = _resident_mb("VmRSS")
            seconds = median_time(run, repeats, warmup=1)
            peak = _resident_mb("VmHWM")
        else:  # no /proc: the lifetime peak, which may include the imports
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            seconds = median_time(run, repeats, warmup=1)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "peak_mb": peak, "extra_mb": peak - before}


def _numpy_attention(x: np.ndarray, H: int) -> None:
    """The floor: softmax(Q K^T / sqrt(D)) V and its backward written out in NumPy, in place
    where possible, so only two (H, T, T) arrays (the weights and their gradient) are alive."""
    B, T, C = x.shape
    D = C // H
    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, C, C)).astype(np.float32) / np.sqrt(C)
    q, k, v = ((x @ w[i]).reshape(B, T, H, D).transpose(0, 2, 1, 3) for i in range(3))
    p = q @ k.transpose(0, 1, 3, 2)  # (B, H, T, T) scores, then weights, in place
    p *= np.float32(1.0 / np.sqrt(D))
    p -= p.max(-1, keepdims=True)
    np.exp(p, out=p)
    p /= p.sum(-1, keepdims=True)
    out = p @ v
    g = np.ones_like(out)
    grad_v = p.transpose(0, 1, 3, 2) @ g
    grad_s = g @ v.transpose(0, 1, 3, 2)  # dL/dweights, turned into dL/dscores in place
    grad_s -= np.einsum("bhij,bhij->bhi", grad_s, p)[..., None]
    grad_s *= p
    grad_q = grad_s @ k
    grad_k = grad_s.transpose(0, 1, 3, 2) @ q
    del grad_v, grad_q, grad_k


def _resident_mb(field: str) -> float | None:
    """VmRSS / VmHWM of this process in MB (Linux), else None."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    """Reset the peak resident size to the current one (Linux clear_refs), so imports and setup
    do not hide a smaller peak of the measured work."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def attention(quick: bool) -> None:
    rows = []
    lengths = ATTENTION_LENGTHS[:2] if quick else ATTENTION_LENGTHS
    frameworks = ["numpy", "tinyattn-default", "tinyattn"] + (
        ["torch"] if torch is not None else []
    )
    results = {}
    for T in lengths:
        for framework in frameworks:
            repeats = 3 if T >= 8192 else 5
            command = [
                sys.executable,
                __file__,
                "--attention-worker",
                framework,
                str(T),
                "2",
                str(repeats),
            ]
            output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            results[(framework, T)] = json.loads(output.strip().splitlines()[-1])
        ours, theirs, floor = (results.get((f, T)) for f in ("tinyattn", "torch", "numpy"))
        default = results[("tinyattn-default", T)]
        rows.append(
            [
                T,
                fmt(floor["seconds"], "s"),
                f"{floor['extra_mb']:.0f}",
                fmt(default["seconds"], "s"),
                fmt(ours["seconds"], "s"),
                f"{ours['extra_mb']:.0f}",
                fmt(theirs["seconds"], "s") if theirs else "-",
                f"{theirs['extra_mb']:.0f}" if theirs else "-",
                ratio(ours["seconds"], theirs["seconds"] if theirs else None),
            ]
        )
    table(
        "Attention layer forward + backward (width 64, 4 heads, batch 1, 2 threads; "
        "seconds, and peak extra memory in MB)",
        [
            "T",
            "NumPy s",
            "NumPy MB",
            "tinyattn s (defaults)",
            "tinyattn s (2 attention thr)",
            "tinyattn MB",
            "PyTorch s",
            "PyTorch MB",
            "tinyattn/PyTorch",
        ],
        rows,
    )
    (ROOT / "benchmarks" / "attention_results.json").write_text(
        json.dumps({f"{f}/{T}": r for (f, T), r in results.items()}, indent=1)
    )
    plot_attention(results, lengths, frameworks)


def plot_attention(results: dict, lengths: tuple, frameworks: list) -> None:
    """docs/images/attention_scaling.png: time and peak extra memory against T, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {
        "numpy": "NumPy, plain softmax(QK^T)V",
        "tinyattn-default": "tinyattn, defaults (BLAS 2 threads)",
        "tinyattn": "tinyattn, 2 attention threads",
        "torch": "PyTorch",
    }
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for framework in frameworks:
        seconds = [results[(framework, T)]["seconds"] for T in lengths]
        megabytes = [max(results[(framework, T)]["extra_mb"], 1.0) for T in lengths]
        left.plot(lengths, seconds, marker="o", label=labels[framework])
        right.plot(lengths, megabytes, marker="o", label=labels[framework])
    for axis, title in ((left, "forward + backward (s)"), (right, "peak extra memory (MB)")):
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("sequence length T")
        axis.set_title(title)
        axis.grid(True, which="both", alpha=0.3)
    left.legend()
    figure.suptitle("One attention layer (width 64, 4 heads, batch 1, 2 threads)")
    figure.tight_layout()
    out = ROOT / "docs" / "images" / "attention_scaling.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    print(f"\nplot written to {out.relative_to(ROOT)}")


# ------------------------------------------------------------------------------- 4. copy task
def copytask(quick: bool) -> None:
    command = [sys.executable, str(ROOT / "examples" / "copy_task.py"), "--quiet"]
    start = time.perf_counter()
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - start
    print("\n### Copy task end to end (default flags)\n")
    print(output.strip())
    print(f"\nwhole process wall time: {wall:.2f} s")


# ---------------------------------------------------------------------------------- 5. import
def import_time(quick: bool) -> None:
    """`python -c "import X"` minus a bare interpreter start, with bytecode caching on (as on any
    installed machine; a PYTHONDONTWRITEBYTECODE environment would otherwise recompile tinyattn
    at every start) and warmed by one untimed run."""
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as cache:
        # A plain `import tinyattn`, as users get it: without the allocator tuning.
        skipped = ("PYTHONDONTWRITEBYTECODE", "TINYATTN_KEEP_FREED_MEMORY")
        env = {k: v for k, v in os.environ.items() if k not in skipped}
        env["PYTHONPYCACHEPREFIX"] = cache

        def run(code: str) -> float:
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, env=env)
            return time.perf_counter() - start

        modules = ("numpy", "tinyattn") + (("torch",) if torch is not None else ())
        for module in modules:
            run(f"import {module}")  # warm the bytecode cache
        samples = {module: [] for module in modules + ("pass",)}
        for _ in range(3 if quick else 10):
            for module in samples:  # interleaved, so drift hits every row alike
                samples[module].append(run("pass" if module == "pass" else f"import {module}"))
        bare = statistics.median(samples.pop("pass"))
        for module, values in samples.items():
            rows.append([module, f"{statistics.median(values) - bare:.3f}"])
    table(
        "Import time (seconds beyond a bare interpreter start, median)", ["module", "seconds"], rows
    )


# ------------------------------------------------------------------------------------ 6. GPU
def _cuda_ready() -> str | None:
    """None when both CuPy (for tinyattn) and PyTorch CUDA can run, else the reason why not."""
    module, reason = ta.cupy_status()
    if module is None:
        return reason
    if torch is None or not torch.cuda.is_available():
        return "PyTorch with CUDA is not available"
    return None


def gpu(quick: bool) -> None:
    """The training step of section 2 on CuPy against PyTorch CUDA (same model, same initial
    weights), at the issue's batch 64 and at batch 1024, then one attention layer at long T.
    Every timed call ends in a device-to-host read (`loss.item()`, or an explicit synchronise),
    so queued GPU work is counted."""
    reason = _cuda_ready()
    if reason is not None:
        print(f"\n### GPU\n\nskipped: {reason}")
        return
    import cupy

    name = torch.cuda.get_device_name()
    print(f"\nGPU: {name}, CuPy {cupy.__version__}, PyTorch {torch.__version__}")
    rows = []
    for batch in (64, 1024):
        fns = step_functions(STEP | {"batch": batch}, "cuda")
        times = paired_times(fns, 30 if quick else 200, warmup=10)
        t_ours, t_theirs = times["ours"], times["theirs"]
        rows.append([batch, fmt(t_ours, "ms"), fmt(t_theirs, "ms"), ratio(t_ours, t_theirs)])
    table(
        "GPU training step: the model of section 2 (ms per step, median)",
        ["batch", "tinyattn (CuPy)", "PyTorch CUDA eager", "tinyattn/PyTorch"],
        rows,
    )

    rows = []
    pool = cupy.get_default_memory_pool()
    threshold = ta.functional.BLOCKWISE_MIN_SCORES
    for T in (2048, 8192) if quick else (2048, 8192, 32768):
        ta.manual_seed(0)
        layer = nn.MultiHeadAttention(64, 4).to("cuda")
        host = np.random.default_rng(0).standard_normal((1, T, 64)).astype(np.float32)
        x = ta.tensor(host, device="cuda", requires_grad=True)
        tlayer = torch.nn.MultiheadAttention(64, 4, batch_first=True).cuda()
        tx = torch.tensor(host, device="cuda", requires_grad=True)

        def ours(layer=layer, x=x):
            layer(x).sum().backward()
            x.grad = None
            layer.zero_grad()
            cupy.cuda.Device().synchronize()

        def theirs(tlayer=tlayer, tx=tx):
            tlayer(tx, tx, tx, need_weights=False)[0].sum().backward()
            tx.grad = None
            tlayer.zero_grad()
            torch.cuda.synchronize()

        cells = [T]
        # The plain path holds several (4, T, T) arrays: 16 GB each at T = 32768, so not there.
        for path, forced in (("block-wise", 0), ("plain", math.inf)):
            if path == "plain" and T > 8192:
                cells += ["-", "-"]
                continue
            ta.functional.BLOCKWISE_MIN_SCORES = forced
            try:
                ours()
                pool.free_all_blocks()  # from here the pool's total is the peak held at once
                before = pool.total_bytes()
                seconds = median_time(ours, 5 if quick else 20, warmup=2)
                cells += [fmt(seconds, "ms"), f"{(pool.total_bytes() - before) / 2**20:.0f}"]
            finally:
                ta.functional.BLOCKWISE_MIN_SCORES = threshold
            if path == "block-wise":
                t_ours = seconds
        theirs()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        t_theirs = median_time(theirs, 5 if quick else 20, warmup=2)
        cells += [
            fmt(t_theirs, "ms"),
            f"{(torch.cuda.max_memory_allocated() - before) / 2**20:.0f}",
            ratio(t_ours, t_theirs),
        ]
        rows.append(cells)
        del layer, x, tlayer, tx
        pool.free_all_blocks()
    table(
        "GPU attention layer forward + backward (width 64, 4 heads, batch 1; ms, and peak MB "
        "beyond the inputs)",
        [
            "T",
            "tinyattn block-wise ms",
            "MB",
            "tinyattn plain ms",
            "MB",
            "PyTorch SDPA ms",
            "MB",
            "block-wise/PyTorch",
        ],
        rows,
    )


# ------------------------------------------------------------------------------------ 7. GELU
def gelu(quick: bool) -> None:
    """Exact GELU in float32 at 1 thread, forward alone and forward + backward, against PyTorch
    and the floor: the table method of ops/special.py as bare NumPy calls on preallocated arrays,
    in the same pieces of 32,768 values (no autograd, no allocation). Then each one's largest
    relative error against x * Phi(x) computed in float64 from math.erfc, on x in [-9, 6]."""
    from tinyattn.ops import special  # noqa: PLC0415  (the table the floor reads)

    terms = [np.asarray(t, np.float32) for t in special._cdf_table_terms()]
    low, high, steps = special._CDF_LOW, special._CDF_HIGH, special._CDF_STEPS
    piece = 32768
    rows = []
    for n in (8192, 32768, 262144):
        host = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        y = np.empty(n, np.float32)
        u, node, cdf, gathered = (np.empty(min(n, piece), np.float32) for _ in range(4))
        index, narrow = np.empty(min(n, piece), np.intp), np.empty(min(n, piece), np.int32)
        nan = np.empty(min(n, piece), bool)

        def floor(
            host=host,
            y=y,
            u=u,
            node=node,
            cdf=cdf,
            gathered=gathered,
            index=index,
            narrow=narrow,
            nan=nan,
        ):
            for start in range(0, host.size, piece):
                x = host[start : start + piece]
                np.clip(x, low / steps, high / steps, out=u)
                np.copyto(u, low / steps, where=np.isnan(u, out=nan))
                u *= steps
                np.floor(u, out=node)
                u -= node
                node -= low
                narrow[...] = node
                index[...] = narrow
                terms[3].take(index, out=cdf, mode="wrap")
                for term in (terms[2], terms[1], terms[0]):
                    cdf *= u
                    cdf += term.take(index, out=gathered, mode="wrap")
                np.multiply(x, cdf, out=y[start : start + piece])

        x = ta.tensor(host, requires_grad=True)

        def ours_forward(x=x):
            with ta.no_grad():
                F.gelu(x)

        def ours_both(x=x):
            x.grad = None
            F.gelu(x).sum().backward()

        fns = {"floor": floor, "forward": ours_forward, "both": ours_both}
        if torch is not None:
            t = torch.from_numpy(host.copy()).requires_grad_()

            def torch_forward(t=t):
                with torch.no_grad():
                    torch.nn.functional.gelu(t)

            def torch_both(t=t):
                t.grad = None
                torch.nn.functional.gelu(t).sum().backward()

            fns |= {"torch forward": torch_forward, "torch both": torch_both}
        with Threads(1):
            times = paired_times(fns, 20 if quick else 100)
        rows.append(
            [n, fmt(times["floor"]), fmt(times["forward"]), fmt(times.get("torch forward")),
             ratio(times["forward"], times.get("torch forward")),
             ratio(times["forward"], times["floor"]), fmt(times["both"]),
             fmt(times.get("torch both")), ratio(times["both"], times.get("torch both"))]
        )  # fmt: skip
    table(
        "Exact GELU, float32, 1 thread (us)",
        ["values", "NumPy floor (fwd)", "tinyattn fwd", "PyTorch fwd", "tinyattn/PyTorch",
         "tinyattn/NumPy", "tinyattn fwd+bwd", "PyTorch fwd+bwd", "tinyattn/PyTorch"],
        rows,
    )  # fmt: skip
    values = np.linspace(-9.0, 6.0, 150_001).astype(np.float32)
    exact = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2.0)) for v in values.astype(float)])
    errors = {"tinyattn": F.gelu(ta.tensor(values)).numpy()}
    if torch is not None:
        errors["PyTorch"] = torch.nn.functional.gelu(torch.from_numpy(values)).numpy()
    print("\nlargest relative error on x in [-9, 6], and on x in [-3, 6]:")
    for name, got in errors.items():
        nonzero = exact != 0.0  # x = 0 exactly
        relative = np.abs(got[nonzero] - exact[nonzero]) / np.abs(exact[nonzero])
        near = values[nonzero] >= -3.0
        print(f"  {name}: {relative.max():.2g}, {relative[near].max():.2g}")


SECTIONS = {
    "overhead": overhead,
    "step": step,
    "attention": attention,
    "copytask": copytask,
    "import": import_time,
    "gpu": gpu,
    "gelu": gelu,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer repeats, skip T=8192")
    parser.add_argument(
        "--only", nargs="*", choices=sorted(SECTIONS), help="run only these sections"
    )
    parser.add_argument("--attention-worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.attention_worker:
        framework, T, threads, repeats = args.attention_worker
        print(json.dumps(attention_worker(framework, int(T), int(threads), int(repeats))))
        return
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, NumPy {np.__version__}, "
        f"PyTorch {torch.__version__ if torch else 'not installed'}, tinyattn {ta.__version__}"
    )
    print("\n".join(machine_report()))
    kept = ta.backend.HOST_MEMORY_KEPT
    print(
        "allocator: tinyattn.keep_freed_memory() is "
        + ("ON (glibc keeps freed memory; TINYATTN_KEEP_FREED_MEMORY=1)" if kept else "unavailable")
        + ", here and in every worker process; a plain `import tinyattn` leaves malloc alone"
    )
    for name in args.only or SECTIONS:
        SECTIONS[name](args.quick)


if __name__ == "__main__":
    main()
