"""Block-wise attention against its NumPy floor and PyTorch's SDPA, side by side.

    python benchmarks/attention_floor.py [--T 8192] [--threads 2] [--rounds 3] [--causal]

`scaled_dot_product_attention` forward + backward at (B, H, T, D) = (1, 4, T, 16), float32:

- tinyattn: ``F.scaled_dot_product_attention`` (at this size its block-wise path), with its
  query blocks on `--threads` threads (`kernels.ATTENTION_THREADS`) over a 1-thread BLAS;
- floor: the same block-wise algorithm written in NumPy with the fewest array calls and no
  autograd (`floor_attention` below): the same tiles, threads and BLAS, an online softmax in
  the forward, and a backward that recomputes each tile's weights from the saved
  log-sum-exp. It is what tinyattn's block-wise op would cost with no Python around NumPy;
- torch: ``torch.nn.functional.scaled_dot_product_attention`` on `--threads` threads (when
  PyTorch is installed).

Each measurement runs in its own process (two thread pools in one process distort timings),
the three interleaved, `--rounds` times; the table gives each one's median and range and the
ratios of medians, under the machine, its CPU flags and each library's BLAS. Peak extra memory
(VmHWM over VmRSS before the timed calls) is printed beside each time.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import blas_info, child_env, machine_report, torch_blas  # noqa: E402

SHAPE = (1, 4, 16)  # B, H, D


# ------------------------------------------------------------------------------- the floor
def floor_attention(q, k, v, block_q: int, block_k: int, threads: int, causal: bool):
    """Forward and backward of softmax(q k^T / sqrt(D)) v for a gradient of ones on the output.

    Forward per query block: for each key block, S = q k^T * scale, m' = max(m, rowmax S),
    acc = acc * exp(m - m') + exp(S - m') [v, 1]; then out = acc[:, :D] / l, lse = m + log l.
    Backward per query block: P = exp(S - lse) per tile, dV += P^T dO, dS = P * (dO v^T - D_i),
    dQ += dS k * scale, dK += dS^T q * scale. Shapes: q, k, v (B, H, T, D).
    """
    scale = q.dtype.type(1.0 / math.sqrt(q.shape[-1]))
    T = q.shape[-2]
    rows_list = [slice(i, min(i + block_q, T)) for i in range(0, T, block_q)]
    v_ones = np.concatenate([v, np.ones((*v.shape[:-1], 1), v.dtype)], axis=-1)
    q_scaled = q * scale

    def key_blocks(rows: slice) -> list[slice]:
        stop = min(T, rows.stop) if causal else T
        return [slice(j, min(j + block_k, stop)) for j in range(0, stop, block_k)]

    def causal_mask(rows: slice, cols: slice):
        if not causal or cols.stop - 1 <= rows.start:
            return None
        return np.arange(cols.start, cols.stop)[None, :] > np.arange(rows.start, rows.stop)[:, None]

    def forward_rows(rows: slice):
        qr = q_scaled[..., rows, :]
        acc = np.zeros((*qr.shape[:-1], v_ones.shape[-1]), q.dtype)
        m = np.full((*qr.shape[:-1], 1), -np.inf, q.dtype)
        for cols in key_blocks(rows):
            s = qr @ k[..., cols, :].swapaxes(-1, -2)
            hidden = causal_mask(rows, cols)
            if hidden is not None:
                s[..., hidden] = -np.inf
            new_m = np.maximum(m, s.max(-1, keepdims=True))
            s -= new_m
            np.exp(s, out=s)
            acc *= np.exp(m - new_m)
            acc += s @ v_ones[..., cols, :]
            m = new_m
        total = acc[..., -1:]
        return acc[..., :-1] / total, m + np.log(total)

    def backward_rows(row_blocks: list[slice], out, lse, grad):
        grad_k, grad_v = np.zeros_like(k), np.zeros_like(v)
        grad_q = {}
        row_dots = np.sum(grad * out, axis=-1, keepdims=True)
        for rows in row_blocks:
            qr, gr = q_scaled[..., rows, :], grad[..., rows, :]
            dq = np.zeros_like(qr)
            for cols in key_blocks(rows):
                p = qr @ k[..., cols, :].swapaxes(-1, -2)
                p -= lse[..., rows, :]
                hidden = causal_mask(rows, cols)
                if hidden is not None:
                    p[..., hidden] = -np.inf
                np.exp(p, out=p)
                grad_v[..., cols, :] += p.swapaxes(-1, -2) @ gr
                ds = gr @ v[..., cols, :].swapaxes(-1, -2)
                ds -= row_dots[..., rows, :]
                ds *= p
                dq += ds @ k[..., cols, :]
                grad_k[..., cols, :] += ds.swapaxes(-1, -2) @ qr
            grad_q[rows.start] = dq * scale
        return grad_q, grad_k, grad_v

    with ThreadPoolExecutor(max_workers=threads) as pool:
        parts = list(pool.map(forward_rows, rows_list))
        out = np.concatenate([o for o, _ in parts], axis=-2)
        lse = np.concatenate([s for _, s in parts], axis=-2)
        grad = np.ones_like(out)
        shares = [rows_list[t::threads] for t in range(threads)]
        results = list(pool.map(lambda blocks: backward_rows(blocks, out, lse, grad), shares))
    grad_k = sum(r[1] for r in results)
    grad_v = sum(r[2] for r in results)
    grad_q = np.concatenate(
        [d for _, d in sorted((s, d) for r in results for s, d in r[0].items())], axis=-2
    )
    return out, grad_q, grad_k, grad_v


# ---------------------------------------------------------------------------- one process
def _resident_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def worker(kind: str, T: int, threads: int, repeats: int, causal: bool) -> dict:
    from threadpoolctl import threadpool_limits

    B, H, D = SHAPE
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((B, H, T, D)).astype(np.float32) for _ in range(3))
    if kind == "torch":
        import torch

        torch.set_num_threads(threads)
        tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))

        def run():
            out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
            out.sum().backward()
            for t in (tq, tk, tv):
                t.grad = None

        limit = None
    else:
        import tinyattn as ta
        import tinyattn.nn.functional as F
        from tinyattn import kernels

        kernels.ATTENTION_THREADS = threads
        limit = threadpool_limits(1)  # the threads go to query blocks, over a 1-thread BLAS
        block_q, block_k = kernels.block_sizes(B * H, T, T)
        if kind == "floor":

            def run():
                floor_attention(q, k, v, block_q, block_k, threads, causal)

        else:
            tq, tk, tv = (ta.tensor(a, requires_grad=True) for a in (q, k, v))

            def run():
                F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal).sum().backward()
                for t in (tq, tk, tv):
                    t.grad = None

    run()  # warm-up
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    before = _resident_mb("VmRSS")
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    extra = _resident_mb("VmHWM") - before
    if limit is not None:
        limit.unregister()
    blas = blas_info()
    if kind == "torch":  # PyTorch's own GEMMs (MKL or OpenBLAS) do not show in threadpoolctl
        blas = torch_blas(torch)
    return {"seconds": statistics.median(samples), "extra_mb": extra, "blas": blas}


def check_floor() -> None:
    """The floor computes what the plain formula computes (a few tiles, causal and not)."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 40, 8)).astype(np.float64) for _ in range(3))
    for causal in (False, True):
        s = q @ k.swapaxes(-1, -2) / math.sqrt(8)
        if causal:
            s = np.where(np.tril(np.ones((40, 40), bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out = p @ v
        ds = p * (v.sum(-1)[..., None, :] - (out.sum(-1, keepdims=True)))
        expected = (out, ds @ k / math.sqrt(8), ds.swapaxes(-1, -2) @ q / math.sqrt(8))
        expected += (p.swapaxes(-1, -2) @ np.ones_like(out),)
        got = floor_attention(q, k, v, 16, 8, 2, causal)
        got = (got[0], got[1], got[2], got[3])
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.T, args.threads, args.repeats, args.causal)))
        return
    check_floor()
    kinds = ["tinyattn", "floor"]
    try:
        import torch  # noqa: F401

        kinds.append("torch")
    except ImportError:
        pass
    results: dict[str, list[dict]] = {kind: [] for kind in kinds}
    for _ in range(args.rounds):
        for kind in kinds:
            command = [sys.executable, __file__, "--worker", kind, "--T", str(args.T)]
            command += ["--threads", str(args.threads), "--repeats", str(args.repeats)]
            command += ["--causal"] if args.causal else []
            done = subprocess.run(
                command, capture_output=True, text=True, check=True, env=child_env(1)
            )
            results[kind].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print("\n".join(machine_report()))
    for kind in kinds:
        print(f"  {kind} BLAS: {results[kind][0]['blas']}")
    B, H, D = SHAPE
    what = "causal" if args.causal else "full"
    print(f"\nSDPA fwd+bwd, (B, H, T, D) = ({B}, {H}, {args.T}, {D}) float32, {what}, ", end="")
    print(f"{args.threads} threads, {args.rounds} rounds of {args.repeats} calls each")
    print("| kind | median s | range s | peak extra MB |")
    print("|---|---|---|---|")
    medians = {}
    for kind in kinds:
        times = [r["seconds"] for r in results[kind]]
        medians[kind] = statistics.median(times)
        memory = max(r["extra_mb"] for r in results[kind])
        print(f"| {kind} | {medians[kind]:.3f} | {min(times):.3f} - {max(times):.3f} | ", end="")
        print(f"{memory:.0f} |")
    print(f"\ntinyattn / floor: {medians['tinyattn'] / medians['floor']:.2f}x")
    if "torch" in medians:
        print(f"tinyattn / PyTorch SDPA: {medians['tinyattn'] / medians['torch']:.2f}x")
        print(f"floor / PyTorch SDPA: {medians['floor'] / medians['torch']:.2f}x")


if __name__ == "__main__":
    main()
