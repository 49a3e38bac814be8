"""Benchmark: does a fused-elementwise library earn a place beside NumPy? numexpr against NumPy.

Run by hand, never as a test:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/fused_elementwise.py

A compiled step's replay does its elementwise work as NumPy calls with ``out=``, one pass over
memory per call. numexpr evaluates a whole expression in one pass, in cache-sized blocks, which
is what a fused kernel would do. This times the elementwise chains of the compiled steps both
ways, in this one process, on one thread (numexpr's own pool set to 1, NumPy's BLAS is not
used), on float32 arrays of the sizes the benchmark models have:

- "adamw": AdamW's update of the small LM's 30,000 parameters, as the flat step writes it
  (two moment updates and the parameter step: 13 NumPy calls, 3 numexpr expressions);
- "gelu-tail": exp(-x^2 / 2) times a degree-4 over degree-4 rational in x, the passes an
  exact normal CDF without a table needs (GELU's activation of the small LM, 32,768 values);
- "layer-norm-body": LayerNorm's elementwise part, ((x - mean) * rstd) * w + b, with the row
  statistics given (the small LM's (256, 32) rows);
- "softmax-body": exp(x - max) of the attention scores (16, 2, 16, 16), the max given;
- "product": one a * b, a single pass, to show each library's cost per call.

Each figure is the median over 7 repeats of the mean over enough calls to take about 20 ms;
the two results of each chain are compared (they must agree to float32 rounding). numexpr is
optional: without it only the NumPy column is printed.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("NUMEXPR_MAX_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_report  # noqa: E402

try:
    import numexpr
except ImportError:  # optional: the NumPy column alone
    numexpr = None

RNG = np.random.default_rng(0)
F32 = np.float32


def _arr(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(F32)


def _time(function) -> float:
    """Median seconds per call over 7 repeats of a loop of about 20 ms."""
    function()
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < 0.02:
        function()
        calls += 1
    samples = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


# ------------------------------------------------------------------------------------ chains
def adamw_case() -> tuple:
    n = 30_000
    p, g, m, v = _arr(n), _arr(n, scale=0.01), _arr(n, scale=0.01), np.abs(_arr(n, scale=1e-4))
    lr, decay, b1, b2, eps, t = 3e-3, 0.01, 0.9, 0.999, 1e-8, 10
    step_size, root = lr / (1 - b1**t), math.sqrt(1 - b2**t)
    ours = {"p": p.copy(), "m": m.copy(), "v": v.copy()}
    ours |= {"scratch": np.empty_like(p), "spare": np.empty_like(p)}
    theirs = {"p": p.copy(), "m": m.copy(), "v": v.copy(), "g": g}
    theirs |= {"b1": F32(b1), "b2": F32(b2), "keep": F32(1.0 - lr * decay)}
    theirs |= {"root": F32(root), "eps": F32(eps), "size": F32(step_size)}

    def numpy_update():
        p, m, v, scratch, spare = (ours[k] for k in ("p", "m", "v", "scratch", "spare"))
        p *= 1.0 - lr * decay
        np.subtract(g, m, out=scratch)
        scratch *= 1.0 - b1
        m += scratch
        v *= b2
        np.multiply(g, g, out=scratch)
        scratch *= 1.0 - b2
        v += scratch
        np.sqrt(v, out=spare)
        spare /= root
        spare += eps
        np.divide(m, spare, out=spare)
        spare *= -step_size
        p += spare
        return p

    def numexpr_update():
        evaluate = numexpr.evaluate
        evaluate("m + (g - m) * (1 - b1)", local_dict=theirs, out=theirs["m"])
        evaluate("v * b2 + g * g * (1 - b2)", local_dict=theirs, out=theirs["v"])
        evaluate("p * keep - size * m / (sqrt(v) / root + eps)", local_dict=theirs, out=theirs["p"])
        return theirs["p"]

    return numpy_update, numexpr_update


P = [F32(c) for c in (0.5, 0.2, 0.05, 0.008, 0.0007)]
Q = [F32(c) for c in (1.0, 0.6, 0.15, 0.02, 0.0015)]


def gelu_tail_case() -> tuple:
    x = _arr(16 * 16 * 128)
    out = np.empty_like(x)
    names = {"x": x} | {f"p{k}": P[k] for k in range(5)} | {f"q{k}": Q[k] for k in range(5)}

    def numpy_tail():
        a = np.abs(x)
        e = a * a
        np.multiply(e, F32(-0.5), out=e)
        np.exp(e, out=e)
        top, bottom = a * P[4], a * Q[4]
        for k in (3, 2, 1):
            np.multiply(np.add(top, P[k], out=top), a, out=top)
            np.multiply(np.add(bottom, Q[k], out=bottom), a, out=bottom)
        np.add(top, P[0], out=top)
        np.add(bottom, Q[0], out=bottom)
        np.divide(top, bottom, out=out)
        return np.multiply(out, e, out=out)

    def numexpr_tail():
        return numexpr.evaluate(
            "exp(abs(x) * abs(x) * -0.5) * (p0 + abs(x) * (p1 + abs(x) * (p2 + abs(x) * (p3 + "
            "abs(x) * p4)))) / (q0 + abs(x) * (q1 + abs(x) * (q2 + abs(x) * (q3 + abs(x) * q4))))",
            local_dict=names,
            out=out,
        )

    return numpy_tail, numexpr_tail


def layer_norm_case() -> tuple:
    x, w, b = _arr(256, 32), _arr(32), _arr(32)
    mean, rstd = x.mean(axis=1, keepdims=True), _arr(256, 1) ** 2 + F32(0.5)
    out = np.empty_like(x)

    def numpy_body():
        np.subtract(x, mean, out=out)
        np.multiply(out, rstd, out=out)
        np.multiply(out, w, out=out)
        return np.add(out, b, out=out)

    def numexpr_body():
        return numexpr.evaluate(
            "(x - mean) * rstd * w + b",
            local_dict={"x": x, "mean": mean, "rstd": rstd, "w": w, "b": b},
            out=out,
        )

    return numpy_body, numexpr_body


def softmax_case() -> tuple:
    s = _arr(16, 2, 16, 16)
    top = s.max(axis=-1, keepdims=True)
    out = np.empty_like(s)

    def numpy_body():
        np.subtract(s, top, out=out)
        return np.exp(out, out=out)

    def numexpr_body():
        return numexpr.evaluate("exp(s - top)", local_dict={"s": s, "top": top}, out=out)

    return numpy_body, numexpr_body


def product_case() -> tuple:
    a, b = _arr(16 * 16 * 128), _arr(16 * 16 * 128)
    out = np.empty_like(a)
    return (lambda: np.multiply(a, b, out=out)), (
        lambda: numexpr.evaluate("a * b", local_dict={"a": a, "b": b}, out=out)
    )


CASES = {
    "adamw": adamw_case,
    "gelu-tail": gelu_tail_case,
    "layer-norm-body": layer_norm_case,
    "softmax-body": softmax_case,
    "product": product_case,
}


def main() -> None:
    for line in machine_report():
        print(line)
    if numexpr is None:
        print("numexpr: not installed (pip install numexpr): the NumPy column only")
    else:
        numexpr.set_num_threads(1)
        vml = "with" if numexpr.use_vml else "without"
        print(f"numexpr {numexpr.__version__} ({vml} Intel VML), 1 thread")
    print()
    print("| chain | NumPy (us) | numexpr (us) | numexpr / NumPy |")
    print("|---|---|---|---|")
    for name, make in CASES.items():
        with_numpy, with_numexpr = make()
        if numexpr is None:
            print(f"| {name} | {_time(with_numpy) * 1e6:.1f} | - | - |")
            continue
        # Compared first, each on its first call: the optimizer's chains update state in place.
        np.testing.assert_allclose(with_numexpr(), with_numpy(), rtol=1e-4, atol=1e-6)
        ours, theirs = _time(with_numpy), _time(with_numexpr)
        print(f"| {name} | {ours * 1e6:.1f} | {theirs * 1e6:.1f} | {theirs / ours:.2f}x |")


if __name__ == "__main__":
    main()
