"""The eager path's cost counted in Python bytecodes: a measure the machine's load cannot move.

Run by hand, never as a test:

    python benchmarks/eager_opcodes.py            # this tree
    PYTHONPATH=OTHER_TREE python benchmarks/eager_opcodes.py   # another checkout, to compare

Runs bench.py's per-op chain at 1/10 of its length (y = y * 1.0001 + 0.0001, 5 times, on a
(4,) float32 tensor, then y.sum().backward()) once under ``sys.settrace`` with opcode events, and
prints the bytecodes executed per elementwise op (forward and backward, the sum and the engine's
set-up shared out) and the functions that executed the most. On the tiny tensors of the per-op
benchmark the array work is a few hundred nanoseconds, so the interpreter's work is most of the
time; bytecodes are not nanoseconds (a call costs more than an attribute load), but two versions
that differ by 10% in bytecodes differ in time in the same direction. The tree measured is the
one `import tinyattn` finds first, so the script inserts nothing into sys.path.
"""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np

import tinyattn as ta

OPS = 10  # elementwise ops in the chain below


def main() -> None:
    x = ta.tensor(np.ones(4, np.float32), requires_grad=True)
    counts: Counter = Counter()

    def tracer(frame, event, arg):
        frame.f_trace_opcodes = True
        if event == "opcode":
            counts[frame.f_code.co_qualname] += 1
        return tracer

    def chain() -> None:
        y = x
        for _ in range(OPS // 2):
            y = y * 1.0001 + 0.0001
        y.sum().backward()
        x.grad = None

    chain()  # first use: caches filled, nothing counted
    sys.settrace(tracer)
    chain()
    sys.settrace(None)
    counts.pop("main.<locals>.chain", None)  # the benchmark's own loop
    print(f"tinyattn from {ta.__file__}")
    print(f"bytecodes per elementwise op, forward + backward: {sum(counts.values()) / OPS:.0f}")
    print("| function | bytecodes per op |")
    print("|---|---|")
    for name, count in counts.most_common(12):
        print(f"| {name} | {count / OPS:.1f} |")


if __name__ == "__main__":
    main()
