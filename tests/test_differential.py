"""Differential fuzzing: random short programs give the same values and gradients on the NumPy
and the strict backend.

Hypothesis draws a program: input shapes, then a few steps, each an op from a menu applied to
earlier results (registers) with drawn axes, shapes, masks and new weights. The program is
recorded as data while it runs on the host, then replayed on the strict device (array_api_strict,
which refuses implicit NumPy conversion and device mixing as CuPy does). Every register's value
and the gradient of every leaf must agree to 1e-12 in float64 (most agree exactly; the backends
may sum in a different order, e.g. scatter-add by `add.at` versus a one-hot matmul).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tinyattn as ta
import tinyattn.nn.functional as F

TOLERANCE = {"rtol": 1e-12, "atol": 1e-12}


@dataclass
class Run:
    """One execution of a program on one device: its leaves and registers."""

    device: str
    leaves: list = field(default_factory=list)
    registers: list = field(default_factory=list)

    def leaf(self, array: np.ndarray) -> ta.Tensor:
        tensor = ta.tensor(array, dtype="float64", device=self.device, requires_grad=True)
        self.leaves.append(tensor)
        return tensor

    def constant(self, array: np.ndarray) -> ta.Tensor:
        return ta.tensor(array, device=self.device)


# ------------------------------------------------------------------------------- the menu
# Each op: choose(draw, shapes, rng) -> arguments (plain data, replayable) or None when it does
# not apply to any register; apply(run, args) -> the new register.
UNARY = {
    "exp": lambda x: x.clip(-5.0, 5.0).exp(),
    "log": lambda x: (x * x + 0.5).log(),
    "sqrt": lambda x: (x * x + 0.5).sqrt(),
    "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid(),
    "relu": lambda x: x.relu(),
    "abs": lambda x: x.abs(),
    "gelu": F.gelu,
    "scalars": lambda x: 2.0 - x * 3.0 / 4.0 + 1.0,
    "square": lambda x: x**2,
    "power": lambda x: (x * x + 0.5) ** 1.5,
    "rpow": lambda x: 2.0 ** x.tanh(),
    "clip": lambda x: x.clip(-0.5, 0.5),
    "neg": lambda x: -x,
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b * b + 1.0),
    "maximum": ta.maximum,
    "where": lambda a, b: ta.where(a > b, a, b * 2.0),
    "pow": lambda a, b: (a * a + 0.5) ** b.tanh(),
}
REDUCTIONS = ("sum", "mean", "amax", "amin", "var")


def _pick(draw, shapes, accept=lambda shape: True):
    choices = [i for i, shape in enumerate(shapes) if accept(shape)]
    return None if not choices else draw(st.sampled_from(choices))


def choose_unary(draw, shapes, rng):
    return {"name": draw(st.sampled_from(sorted(UNARY))), "i": _pick(draw, shapes)}


def apply_unary(run, args):
    return UNARY[args["name"]](run.registers[args["i"]])


def _broadcastable(a, b) -> bool:
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def choose_binary(draw, shapes, rng):
    i = _pick(draw, shapes)
    j = _pick(draw, shapes, lambda shape: _broadcastable(shape, shapes[i]))
    return {"name": draw(st.sampled_from(sorted(BINARY))), "i": i, "j": j}


def apply_binary(run, args):
    return BINARY[args["name"]](run.registers[args["i"]], run.registers[args["j"]])


def choose_reduction(draw, shapes, rng):
    i = _pick(draw, shapes, lambda shape: len(shape) >= 1)
    if i is None:
        return None
    axis = draw(st.sampled_from([None, *range(-len(shapes[i]), len(shapes[i]))]))
    name = draw(st.sampled_from(REDUCTIONS))
    return {"name": name, "i": i, "axis": axis, "keepdims": draw(st.booleans())}


def apply_reduction(run, args):
    x = run.registers[args["i"]]
    options = {"correction": 0} if args["name"] == "var" else {}  # axes of one element too
    return getattr(x, args["name"])(axis=args["axis"], keepdims=args["keepdims"], **options)


def choose_softmax(draw, shapes, rng):
    i = _pick(draw, shapes, lambda shape: len(shape) >= 1)
    if i is None:
        return None
    axis = draw(st.integers(-len(shapes[i]), len(shapes[i]) - 1))
    return {"log": draw(st.booleans()), "i": i, "axis": axis}


def apply_softmax(run, args):
    op = F.log_softmax if args["log"] else F.softmax
    return op(run.registers[args["i"]], axis=args["axis"])


def choose_movement(draw, shapes, rng):
    i = _pick(draw, shapes, lambda shape: len(shape) >= 1)
    if i is None:
        return None
    shape = shapes[i]
    kind = draw(st.sampled_from(["flatten", "reverse shape", "permute", "mT", "expand",
                                 "broadcast", "slice", "gather", "concat", "stack"]))  # fmt: skip
    args = {"kind": kind, "i": i}
    if kind == "permute":
        args["axes"] = tuple(draw(st.permutations(range(len(shape)))))
    elif kind == "mT" and len(shape) < 2:
        args["kind"] = "flatten"
    elif kind == "expand":
        args["axis"] = draw(st.integers(-len(shape) - 1, len(shape)))
    elif kind == "gather":
        args["rows"] = draw(st.lists(st.integers(-shape[0], shape[0] - 1), min_size=1, max_size=4))
    elif kind in ("concat", "stack"):
        args["axis"] = draw(st.integers(0, len(shape) - 1))
    return args


def apply_movement(run, args):
    x, kind = run.registers[args["i"]], args["kind"]
    if kind == "flatten":
        return x.reshape(-1)
    if kind == "reverse shape":
        return x.reshape(*x.shape[::-1])
    if kind == "permute":
        return x.permute(*args["axes"])
    if kind == "mT":
        return x.mT
    if kind == "expand":
        return x.expand_dims(args["axis"]).squeeze(args["axis"]).expand_dims(args["axis"])
    if kind == "broadcast":
        return x.broadcast_to(2, *x.shape)
    if kind == "slice":
        return x[..., x.shape[-1] // 2 :]
    if kind == "gather":
        return x[args["rows"]]
    if kind == "concat":
        return ta.concat([x, x * 0.5], axis=args["axis"])
    return ta.stack([x, x.tanh()], axis=args["axis"])


def choose_matmul(draw, shapes, rng):
    i = _pick(draw, shapes, lambda shape: len(shape) >= 1)
    if i is None:
        return None
    shape = shapes[i]
    if len(shape) >= 2 and draw(st.booleans()):
        return {"i": i, "weight": None}  # x @ x^T: a Gram matrix
    return {"i": i, "weight": rng.standard_normal((shape[-1], draw(st.integers(1, 3))))}


def apply_matmul(run, args):
    x = run.registers[args["i"]]
    if args["weight"] is None:
        return x @ x.mT
    return x @ run.leaf(args["weight"])


def choose_layer(draw, shapes, rng):
    i = _pick(draw, shapes, lambda shape: len(shape) >= 1 and shape[-1] >= 2)
    if i is None:
        return None
    width = shapes[i][-1]
    kind = draw(st.sampled_from(["layer_norm", "linear", "cross_entropy"]))
    args = {"kind": kind, "i": i}
    if kind == "layer_norm":
        args["weight"], args["bias"] = rng.standard_normal(width), rng.standard_normal(width)
    elif kind == "linear":
        out = draw(st.integers(1, 3))
        args["weight"], args["bias"] = rng.standard_normal((out, width)), rng.standard_normal(out)
    else:
        args["targets"] = rng.integers(0, width, size=shapes[i][:-1])
        args["smoothing"] = draw(st.sampled_from([0.0, 0.1]))
    return args


def apply_layer(run, args):
    x, kind = run.registers[args["i"]], args["kind"]
    if kind == "layer_norm":
        return F.layer_norm(x, x.shape[-1], run.leaf(args["weight"]), run.leaf(args["bias"]))
    if kind == "linear":
        return F.linear(x, run.leaf(args["weight"]), run.leaf(args["bias"]))
    targets = run.constant(args["targets"])
    if x.ndim >= 3:  # the classes drawn last go to axis 1, where cross_entropy wants them
        x = x.permute(0, x.ndim - 1, *range(1, x.ndim - 1))
    return F.cross_entropy(x, targets, label_smoothing=args["smoothing"], reduction="none")


def choose_attention(draw, shapes, rng):
    i = _pick(draw, shapes, lambda shape: len(shape) >= 2)
    if i is None:
        return None
    length = shapes[i][-2]
    mask = rng.random((length, length)) < 0.6 if draw(st.booleans()) else None
    return {"i": i, "mask": mask, "causal": draw(st.booleans())}


def apply_attention(run, args):
    x = run.registers[args["i"]]
    mask = None if args["mask"] is None else run.constant(args["mask"])
    causal = args["causal"]
    if causal and mask is not None:  # PyTorch refuses the pair: AND the causal mask in
        mask, causal = mask & F.causal_mask(*mask.shape, device=mask.device), False
    return F.scaled_dot_product_attention(x, x.tanh(), x, attn_mask=mask, is_causal=causal)


def choose_embedding(draw, shapes, rng):
    rows, width = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    index_shape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    return {"weight": rng.standard_normal((rows, width)),
            "indices": rng.integers(0, rows, size=index_shape)}  # fmt: skip


def apply_embedding(run, args):
    return F.embedding(run.constant(args["indices"]), run.leaf(args["weight"]))


INPLACE = ("add_", "mul_", "clamp_", "masked_fill_", "index_fill_", "setitem", "iadd")


def choose_inplace(draw, shapes, rng):
    i = _pick(draw, shapes, lambda shape: len(shape) >= 1)
    if i is None:
        return None
    shape = shapes[i]
    value, row = float(rng.standard_normal()), int(rng.integers(0, shape[0]))
    mask = rng.random(shape) < 0.5
    return {"i": i, "op": draw(st.sampled_from(INPLACE)), "mask": mask, "value": value, "row": row}


def apply_inplace(run, args):
    """An in-place write under no_grad into a copy of a register, which becomes a new leaf: the
    values agree across backends, and the register copied from keeps its values and version."""
    source = run.registers[args["i"]]
    version, values = source._version, source.detach().numpy()
    copy = source.detach().clone()
    op, value, row = args["op"], args["value"], args["row"]
    with ta.no_grad():
        if op == "add_":
            copy.add_(value)
        elif op == "mul_":
            copy.mul_(value)
        elif op == "clamp_":
            copy.clamp_(-abs(value), abs(value))
        elif op == "masked_fill_":
            copy.masked_fill_(run.constant(args["mask"]), value)
        elif op == "index_fill_":
            copy.index_fill_(0, run.constant(np.array([row])), value)
        elif op == "setitem":
            copy[row] = value
        else:
            copy += source * value
    assert copy._version >= 1 and source._version == version
    np.testing.assert_array_equal(source.detach().numpy(), values)
    run.leaves.append(copy.requires_grad_())
    return copy


MENU = {
    "unary": (choose_unary, apply_unary),
    "binary": (choose_binary, apply_binary),
    "reduction": (choose_reduction, apply_reduction),
    "softmax": (choose_softmax, apply_softmax),
    "movement": (choose_movement, apply_movement),
    "matmul": (choose_matmul, apply_matmul),
    "layer": (choose_layer, apply_layer),
    "attention": (choose_attention, apply_attention),
    "embedding": (choose_embedding, apply_embedding),
    "inplace": (choose_inplace, apply_inplace),
}


# ---------------------------------------------------------------------------- programs
@st.composite
def programs(draw):
    """Run a random program on the host while recording it: (inputs, steps, host run)."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    first = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    second = tuple(
        n if draw(st.booleans()) else 1 for n in first[draw(st.integers(0, len(first))) :]
    )
    inputs = [rng.standard_normal(first), rng.standard_normal(second)]
    host = Run("cpu")
    host.registers = [host.leaf(a) for a in inputs]
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(sorted(MENU)))
        choose, apply = MENU[kind]
        args = choose(draw, [r.shape for r in host.registers], rng)
        if args is None:
            continue
        host.registers.append(apply(host, args))
        steps.append((kind, args))
    return inputs, steps, host, seed


def replay(inputs, steps, device) -> Run:
    run = Run(device)
    run.registers = [run.leaf(a) for a in inputs]
    for kind, args in steps:
        run.registers.append(MENU[kind][1](run, args))
    return run


def backpropagate(run: Run, seed: int) -> None:
    """A seeded random cotangent on every floating register, so every value is differentiated."""
    rng = np.random.default_rng(seed + 1)
    total = None
    for register in run.registers:
        if ta.backend.dtype_name(register.dtype) != "float64":
            continue
        term = (register * run.constant(rng.standard_normal(register.shape))).sum()
        total = term if total is None else total + term
    total.backward()


def _describe(steps) -> str:
    return " -> ".join(
        f"{kind}({', '.join(f'{k}={v!r}' for k, v in args.items() if not hasattr(v, 'shape'))})"
        for kind, args in steps
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(program=programs())
def test_numpy_and_strict_agree_on_values_and_gradients(program):
    inputs, steps, host, seed = program
    strict = replay(inputs, steps, "strict")
    backpropagate(host, seed)
    backpropagate(strict, seed)
    story = _describe(steps)
    assert len(host.registers) == len(strict.registers)
    for number, (a, b) in enumerate(zip(host.registers, strict.registers, strict=True)):
        assert a.shape == b.shape, story
        assert ta.backend.dtype_name(a.dtype) == ta.backend.dtype_name(b.dtype), story
        np.testing.assert_allclose(
            b.detach().numpy(),
            a.detach().numpy(),
            **TOLERANCE,
            err_msg=f"register {number}: {story}",
        )
    for number, (a, b) in enumerate(zip(host.leaves, strict.leaves, strict=True)):
        assert (a.grad is None) == (b.grad is None), story
        if a.grad is not None:
            assert b.grad.device == "strict:device1"
            np.testing.assert_allclose(
                b.grad.numpy(), a.grad.numpy(), **TOLERANCE, err_msg=f"leaf {number}: {story}"
            )


def test_programs_cover_the_menu():
    """A fixed program that uses every kind of step once, so the menu itself is exercised."""
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((2, 3)), rng.standard_normal((3,))]
    steps: list[tuple[str, Any]] = [
        ("unary", {"name": "gelu", "i": 0}),
        ("binary", {"name": "pow", "i": 2, "j": 1}),
        ("reduction", {"name": "var", "i": 3, "axis": 0, "keepdims": True}),
        ("softmax", {"log": True, "i": 3, "axis": -1}),
        ("movement", {"kind": "gather", "i": 5, "rows": [1, -1, 1]}),
        ("matmul", {"i": 6, "weight": rng.standard_normal((3, 2))}),
        (
            "layer",
            {"kind": "cross_entropy", "i": 0, "targets": np.array([2, 0]), "smoothing": 0.1},
        ),
        ("attention", {"i": 6, "mask": np.eye(3, dtype=bool), "causal": True}),
        ("embedding", {"weight": rng.standard_normal((4, 2)), "indices": np.array([[3, 3]])}),
    ]
    host, strict = replay(inputs, steps, "cpu"), replay(inputs, steps, "strict")
    backpropagate(host, 0)
    backpropagate(strict, 0)
    for a, b in zip(host.leaves, strict.leaves, strict=True):
        np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), **TOLERANCE)
    assert math.isfinite(host.registers[-1].sum().item())


# ------------------------------------------------------------------- mixed dtypes, same answer
def _int(device):
    return ta.tensor([0, 1, 2, 3], device=device)


def _flag(device):
    return ta.tensor([True, False, True, True], device=device)


def _f32(device):
    return ta.tensor([0.5, -1.5, 2.0, 3.0], device=device)


def _f64(device):
    return ta.tensor([0.5, -1.5, 2.0, 3.0], dtype="float64", device=device)


MIXED = [
    ("bool + int", lambda d: _flag(d) + _int(d)),
    ("int * bool", lambda d: _int(d) * _flag(d)),
    ("bool * float", lambda d: _flag(d) * _f32(d)),
    ("int / int", lambda d: _int(d) / (_int(d) + 1)),
    ("int * Python float", lambda d: _int(d) * 0.5),
    ("int ** 2", lambda d: _int(d) ** 2),
    ("float32 + float64", lambda d: _f32(d) + _f64(d)),
    ("int - float64", lambda d: _int(d) - _f64(d)),
    ("int clipped by floats", lambda d: _int(d).clip(0.5, 2.5)),
    ("int clipped by ints", lambda d: _int(d).clip(1, 2)),
    ("int @ float", lambda d: _int(d) @ _f64(d)),
    ("where int or float", lambda d: ta.where(_flag(d), _int(d), _f32(d))),
    ("concat float32 and float64", lambda d: ta.concat([_f32(d), _f64(d)])),
    ("maximum int and float", lambda d: ta.maximum(_int(d), _f32(d))),
    ("sum of int", lambda d: _int(d).sum()),
    ("max of int", lambda d: _int(d).max()),
    ("comparison int and float", lambda d: _int(d) < _f32(d)),
    ("abs of int", lambda d: (-_int(d)).abs()),
]


@pytest.mark.parametrize("name,call", MIXED, ids=[m[0] for m in MIXED])
def test_mixed_dtypes_give_the_same_dtype_and_values(name, call):
    host, strict = call("cpu"), call("strict")
    assert ta.backend.dtype_name(host.dtype) == ta.backend.dtype_name(strict.dtype)
    np.testing.assert_array_equal(strict.numpy(), host.numpy())
