"""The elementwise family's jvp rules against PyTorch's forward AD, at the points where a
convention decides the tangent: pow at 0, abs and relu at 0, maximum and minimum on ties, clip at
its bounds, where and broadcasting with one side dual, fmod and remainder, atan2, copysign and the
step functions. Also: an input's tangent passed on unchanged is the output's own (an in-place op
on the output leaves the input's alone), and reverse mode through a tangent."""

from __future__ import annotations

import numpy as np
import pytest
from forward_functions import assert_reverse_through_tangent_matches_torch

import tinyattn as ta
from tinyattn.autograd import forward_ad as fwAD

torch = pytest.importorskip("torch")
torch_forward_ad = pytest.importorskip("torch.autograd.forward_ad")

# The points chosen include 0 ** -1, log(0) and inf * 0, on purpose: NumPy warns of them.
pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")

ZERO_TIES = np.array([-1.5, -0.0, 0.0, 0.5, 2.0])
TANGENT = np.array([0.3, -1.2, 0.7, 2.0, -0.4])
OTHER_TANGENT = np.array([1.1, 0.6, -0.9, -0.2, 0.8])
# Two-input points: pow at 0 (and a negative base), quotients of every sign pair, ties.
BASES = np.array([0.0, 0.0, 0.0, 2.0, -2.0, 0.0])
EXPONENTS = np.array([0.0, 2.0, 3.0, 0.0, 2.0, 1.0])
DIVIDENDS = np.array([5.5, -5.5, 5.5, -5.5, 0.25, 3.0])
DIVISORS = np.array([2.0, 2.0, -2.0, -2.0, 1.0, 0.75])
TIED = [np.array([1.0, 2.0, 3.0, -0.0, 4.0]), np.array([1.0, 5.0, 0.0, 0.0, 4.0])]
SIGNED = [np.array([0.0, 1.5, -2.0, 3.0, -0.5]), np.array([1.0, -0.0, 2.0, -1.0, 0.0])]
COLUMN, ROW = np.array([[0.5], [-1.0]]), np.array([1.0, -2.0, 3.0])
V6, W6 = np.random.default_rng(0).standard_normal((2, 6))


def pow_(m, a, b):
    return m.pow(a, b)


# (name, call(lib, *inputs), primals, tangents: None where an input is not dual)
# fmt: off
CASES = [
    ("pow at 0",                pow_, [BASES, EXPONENTS], [V6, W6]),
    ("pow at 0, base dual",     pow_, [BASES, EXPONENTS], [V6, None]),
    ("pow at 0, exponent dual", pow_, [BASES, EXPONENTS], [None, W6]),
    ("pow scalar exponent 0",   lambda m, x: x**0, [ZERO_TIES], [TANGENT]),
    ("pow scalar exponent 2",   lambda m, x: x**2, [ZERO_TIES], [TANGENT]),
    ("pow scalar exponent 0.5", lambda m, x: m.abs(x) ** 0.5, [ZERO_TIES], [TANGENT]),
    ("scalar base 0",           lambda m, x: 0.0**x, [np.abs(ZERO_TIES)], [TANGENT]),
    ("scalar base 2",           lambda m, x: 2.0**x, [ZERO_TIES], [TANGENT]),
    ("abs at 0",                lambda m, x: m.abs(x), [ZERO_TIES], [TANGENT]),
    ("relu at 0",               lambda m, x: m.relu(x), [ZERO_TIES], [TANGENT]),
    ("maximum ties",            lambda m, a, b: m.maximum(a, b), TIED, [TANGENT, OTHER_TANGENT]),
    ("maximum ties, b dual",    lambda m, a, b: m.maximum(a, b), TIED, [None, OTHER_TANGENT]),
    ("minimum ties",            lambda m, a, b: m.minimum(a, b), TIED, [TANGENT, OTHER_TANGENT]),
    ("minimum broadcast",       lambda m, a, b: m.minimum(a, b), [COLUMN, ROW], [None, -ROW]),
    ("clip at the bounds",      lambda m, x: m.clamp(x, -0.0, 0.5), [ZERO_TIES], [TANGENT]),
    ("clip min only",           lambda m, x: m.clamp(x, min=0.5), [ZERO_TIES], [TANGENT]),
    ("clip max only",           lambda m, x: m.clamp(x, max=0.0), [ZERO_TIES], [TANGENT]),
    ("where",                   lambda m, a, b: m.where(a > 0, a, b), [ZERO_TIES, TANGENT],
                                [OTHER_TANGENT, TANGENT]),
    ("where, b dual",           lambda m, a, b: m.where(a > 0, a, b), [ZERO_TIES, TANGENT],
                                [None, OTHER_TANGENT]),
    ("where broadcast",         lambda m, a, b: m.where(b > 0, a, b), [COLUMN, ROW],
                                [2.0 * COLUMN, None]),
    ("add broadcast, a dual",   lambda m, a, b: a + b, [COLUMN, ROW], [2.0 * COLUMN, None]),
    ("sub broadcast, b dual",   lambda m, a, b: a - b, [COLUMN, ROW], [None, -ROW]),
    ("div",                     lambda m, a, b: a / b, [DIVIDENDS, DIVISORS], [V6, W6]),
    ("fmod",                    lambda m, a, b: m.fmod(a, b), [DIVIDENDS, DIVISORS], [V6, W6]),
    ("fmod, a dual",            lambda m, a, b: m.fmod(a, b), [DIVIDENDS, DIVISORS], [V6, None]),
    ("fmod scalar",             lambda m, a: m.fmod(a, 1.5), [DIVIDENDS], [V6]),
    ("remainder",               lambda m, a, b: m.remainder(a, b), [DIVIDENDS, DIVISORS],
                                [V6, W6]),
    ("remainder, b dual",       lambda m, a, b: m.remainder(a, b), [DIVIDENDS, DIVISORS],
                                [None, W6]),
    ("atan2",                   lambda m, a, b: m.atan2(a, b), SIGNED, [TANGENT, OTHER_TANGENT]),
    ("copysign",                lambda m, a, b: m.copysign(a, b), SIGNED,
                                [TANGENT, OTHER_TANGENT]),
    ("copysign, b dual",        lambda m, a, b: m.copysign(a, b), SIGNED, [None, OTHER_TANGENT]),
    ("floor",                   lambda m, x: m.floor(x), [ZERO_TIES], [TANGENT]),
    ("round",                   lambda m, x: m.round(x), [ZERO_TIES], [TANGENT]),
    ("sign",                    lambda m, x: m.sign(x), [ZERO_TIES], [TANGENT]),
    ("cumsum",                  lambda m, x: m.cumsum(x, 1), [np.arange(6.0).reshape(2, 3)],
                                [V6.reshape(2, 3)]),
    ("float32 to float64",      lambda m, x: x.to(m.float64) * 3.0,
                                [ZERO_TIES.astype(np.float32)], [TANGENT.astype(np.float32)]),
]
# fmt: on


def _ours(call, primals, tangents):
    with fwAD.dual_level():
        inputs = [
            ta.tensor(p) if t is None else fwAD.make_dual(ta.tensor(p), ta.tensor(t))
            for p, t in zip(primals, tangents)
        ]
        tangent = fwAD.unpack_dual(call(ta, *inputs)).tangent
        return None if tangent is None else tangent.numpy()


def _theirs(call, primals, tangents):
    with torch_forward_ad.dual_level():
        inputs = [
            torch.tensor(p)
            if t is None
            else torch_forward_ad.make_dual(torch.tensor(p), torch.tensor(t))
            for p, t in zip(primals, tangents)
        ]
        tangent = torch_forward_ad.unpack_dual(call(torch, *inputs)).tangent
        return None if tangent is None else tangent.numpy()


@pytest.mark.parametrize("name, call, primals, tangents", CASES, ids=[c[0] for c in CASES])
def test_tangent_matches_pytorchs_forward_ad(name, call, primals, tangents):
    ours, theirs = _ours(call, primals, tangents), _theirs(call, primals, tangents)
    if theirs is None:  # PyTorch's zero tangent may be left undefined
        theirs = np.zeros_like(ours)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize(
    "write",
    [lambda y: y + 1.0, lambda y: y - 0.5, lambda y: y % 7.0, lambda y: y.clip(-9.0, 9.0)],
    ids=["add scalar", "sub scalar", "remainder by a constant", "clip"],
)
def test_an_in_place_op_on_the_output_leaves_the_inputs_tangent_alone(write):
    with fwAD.dual_level():
        x = fwAD.make_dual(ta.tensor(ZERO_TIES), ta.tensor(TANGENT))
        y = write(x)
        y.mul_(2.0)
        np.testing.assert_array_equal(fwAD.unpack_dual(x).tangent.numpy(), TANGENT)
        np.testing.assert_array_equal(fwAD.unpack_dual(y).tangent.numpy(), 2.0 * TANGENT)


REVERSE_THROUGH = [
    ("tanh", lambda m, x: m.tanh(x)),
    ("sigmoid", lambda m, x: m.sigmoid(x)),
    ("pow", lambda m, x: m.pow(m.abs(x) + 0.5, x)),
    ("div", lambda m, x: (x + 3.0) / (x * x + 1.0)),
    ("maximum", lambda m, x: m.maximum(x * x, m.exp(x))),
    ("where", lambda m, x: m.where(x > 0, m.log1p(x * x), m.expm1(x))),
]


@pytest.mark.parametrize("name, call", REVERSE_THROUGH, ids=[c[0] for c in REVERSE_THROUGH])
def test_reverse_mode_through_a_tangent_matches_pytorch(name, call):
    """d/dx of sum(J(x) v): the jvp rules are Tensor ops, so backward goes through them."""
    x, v = np.random.default_rng(1).standard_normal((2, 5))
    assert_reverse_through_tangent_matches_torch(call, x, v, torch)
