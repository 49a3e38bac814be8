"""A differential fuzzer against PyTorch: views, in-place writes and backward.

Each case is a short random program: views of a tensor in the graph, in-place writes through
them (in grad mode and under no_grad), out-of-place ops that save their inputs, then a backward.
The same program runs in tinyattn and in PyTorch; the values, the gradients and whether an error
is raised must agree. Skipped without torch.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import tinyattn as ta

CASES = 120  # programs per backend: about 10 s each; every seed is a different program

# Views of a (3, 4) tensor: (name, the call). Each keeps a simple layout both libraries share.
VIEWS = [
    ("row", lambda t: t[1]),
    ("column", lambda t: t[:, 2]),
    ("block", lambda t: t[1:, 1:3]),
    ("transposed", lambda t: t.t()),
    ("reshaped", lambda t: t.view(4, 3)),
    ("narrowed", lambda t: t.narrow(1, 1, 2)),
    ("selected", lambda t: t.select(0, 2)),
    ("unsqueezed", lambda t: t.unsqueeze(0)),
]


def _write(kind: str, target, s, m):
    """One in-place write into `target`; `s` is a 0-d tensor that requires grad."""
    if kind == "add_":
        target.add_(s)
    elif kind == "mul_":
        target.mul_(s)
    elif kind == "mul_ number":
        target.mul_(1.5)
    elif kind == "relu_":
        target.relu_()
    elif kind == "clamp_":
        target.clamp_(-0.5, 0.75)
    elif kind == "fill_":
        target.fill_(s)
    elif kind == "zero_":
        target.zero_()
    elif kind == "setitem":
        target[0] = s * 2.0
    elif kind == "masked_fill_":
        target.masked_fill_(target > 0.3, 0.25)
    elif kind == "+=":
        target += s
    elif kind == "copy_":
        target.copy_(target * s)


WRITES = [
    "add_",
    "mul_",
    "mul_ number",
    "relu_",
    "clamp_",
    "fill_",
    "zero_",
    "setitem",
    "masked_fill_",
    "+=",
    "copy_",
]


def _program(seed: int) -> list[tuple]:
    """A random program: a list of steps, each a tuple the interpreter reads."""
    rng = random.Random(seed)
    steps = []
    for _ in range(rng.randint(2, 5)):
        roll = rng.random()
        if roll < 0.45:
            steps.append(("write", rng.randrange(len(VIEWS) + 1), rng.choice(WRITES)))
        elif roll < 0.6:
            steps.append(("no_grad write", rng.randrange(len(VIEWS) + 1)))
        elif roll < 0.8:
            steps.append(("save", rng.choice(["mul", "exp", "sigmoid"])))
        else:
            steps.append(("keep view", rng.randrange(len(VIEWS))))
    return steps


def _run(m, steps: list[tuple], x_values, s_value, device=None):
    """Run the program in module `m`: ('error', message) or ('ok', (loss, x.grad, s.grad))."""
    place = {} if device is None else {"device": device}
    x = m.tensor(x_values, dtype=m.float64, requires_grad=True, **place)
    s = m.tensor(s_value, dtype=m.float64, requires_grad=True, **place)
    h = x * 1.0
    kept, saved = [], []
    try:
        for step in steps:
            if step[0] == "write":
                target = h if step[1] == len(VIEWS) else VIEWS[step[1]][1](h)
                _write(step[2], target, s, m)
            elif step[0] == "no_grad write":
                target = h if step[1] == len(VIEWS) else VIEWS[step[1]][1](h)
                with m.no_grad():
                    target.add_(0.125)
            elif step[0] == "save":
                saved.append(
                    {"mul": lambda t: t * t, "exp": m.exp, "sigmoid": m.sigmoid}[step[1]](h)
                )
            else:
                kept.append(VIEWS[step[1]][1](h))
        loss = (h * h).sum() + sum(t.sum() for t in saved) + sum((v * 3.0).sum() for v in kept)
        values = np.asarray(loss.tolist())
        loss.backward()
    except RuntimeError as error:
        return "error", str(error)
    grads = [None if t.grad is None else np.asarray(t.grad.tolist()) for t in (x, s)]
    return "ok", (values, *grads)


@pytest.mark.parametrize("seed", range(CASES))
def test_tinyattn_and_pytorch_agree_on_random_inplace_programs(device, seed):
    torch = pytest.importorskip("torch")
    steps = _program(seed)
    rng = np.random.default_rng(seed)
    x_values = rng.standard_normal((3, 4))
    s_value = float(rng.uniform(0.5, 1.5))
    ours = _run(ta, steps, x_values, s_value, device)
    theirs = _run(torch, steps, x_values, s_value)
    assert ours[0] == theirs[0], f"program {steps}: tinyattn {ours}, PyTorch {theirs}"
    if ours[0] == "error":
        return
    for mine, reference in zip(ours[1], theirs[1]):
        assert (mine is None) == (reference is None), f"program {steps}"
        if mine is not None:
            np.testing.assert_allclose(mine, reference, rtol=1e-10, atol=1e-12, err_msg=str(steps))
