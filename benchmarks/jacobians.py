"""The Jacobian of f: R^n -> R^m two ways: ``jacfwd`` (forward mode, one jvp per input element:
n passes) against ``jacrev`` (reverse mode, one forward and one vjp per output element: m
passes), for a small MLP ``f(x) = W2 @ tanh(W1 @ x)`` at several (n, m).

Run: ``python benchmarks/jacobians.py`` (``--hidden 64 --repeats 5``). Prints the machine and, per
shape, the median time of a call of each with the range over the repeats (a Markdown table), and
checks that the two Jacobians agree.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from common import machine_report, timed_range  # benchmarks/common.py, beside this script

import tinyattn as ta
from tinyattn.func import jacfwd, jacrev

SHAPES = ((512, 1), (512, 8), (64, 64), (8, 512))  # (n inputs, m outputs)


def _mlp(n: int, m: int, hidden: int, rng: np.random.Generator):
    w1 = ta.tensor(rng.standard_normal((hidden, n)) / np.sqrt(n))
    w2 = ta.tensor(rng.standard_normal((m, hidden)) / np.sqrt(hidden))
    return lambda x: w2 @ (w1 @ x).tanh()  # (n,) -> (m,)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("\n".join(machine_report()))
    print(f"load average {os.getloadavg()[0]:.1f} before the run")
    print(f"f(x) = W2 @ tanh(W1 @ x), hidden {args.hidden}, float64; median (min-max) of calls")
    print("| n inputs | m outputs | jacfwd (n jvps) | jacrev (m vjps) | faster |")
    print("|---:|---:|---:|---:|---|")
    for n, m in SHAPES:
        f = _mlp(n, m, args.hidden, rng)
        x = ta.tensor(rng.standard_normal(n))
        forward, reverse = jacfwd(f)(x), jacrev(f)(x)
        assert forward.shape == reverse.shape == (m, n)
        np.testing.assert_allclose(forward.numpy(), reverse.numpy(), rtol=1e-10, atol=1e-12)
        cells, medians = [], []
        for transform in (jacfwd, jacrev):
            median, low, high = timed_range(lambda t=transform, f=f, x=x: t(f)(x), args.repeats)
            medians.append(median)
            cells.append(f"{median * 1e3:.2f} ms ({low * 1e3:.2f}-{high * 1e3:.2f})")
        winner = "jacfwd" if medians[0] < medians[1] else "jacrev"
        ratio = max(medians) / min(medians)
        print(f"| {n} | {m} | {cells[0]} | {cells[1]} | {winner}, {ratio:.1f}x |")


if __name__ == "__main__":
    main()
