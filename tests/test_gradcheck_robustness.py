"""The gradient checker gives no false failures: Hypothesis-drawn shapes and values (120 per op
under the thorough profile, 20 under the quick default: tests/conftest.py) pass ``ta.gradcheck``
in float64, element-wise and in fast mode, and fast mode is deterministic for a seed.

Inputs follow docs/gradcheck.md: they stay away from kinks (relu and abs at 0, clip at its
bounds) and ties (max, min, maximum): at those points the one-sided derivatives differ, finite
differences average them, and a "failure" would be the input's fault, not the op's. Hypothesis
draws the shapes, axes and a seed; the values come from a seeded NumPy generator and are then
moved into each op's domain. Runs on the host: the checker is backend-independent code, and the
backends are compared with each other in tests/test_differential.py.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyattn as ta
import tinyattn.nn.functional as F

# Four times the profile's count, at most 120: 20 examples per op by default, 120 when thorough.
EXAMPLES = settings(
    max_examples=min(120, 4 * settings.default.max_examples), deadline=None, derandomize=True
)


def shapes(min_dims: int = 0, max_dims: int = 3, max_side: int = 3):
    return st.lists(st.integers(1, max_side), min_size=min_dims, max_size=max_dims).map(tuple)


def leaf(array) -> ta.Tensor:
    return ta.tensor(np.asarray(array, dtype=np.float64), dtype="float64", requires_grad=True)


def normal(rng, shape):
    return rng.standard_normal(shape)


def away_from_zero(rng, shape, gap=0.1):
    """Standard normal values pushed at least `gap` away from 0 (the kink of relu and abs)."""
    values = rng.standard_normal(shape)
    return np.where(values >= 0, values + gap, values - gap)


def distinct(rng, shape, spacing=0.1):
    """Values at least `spacing` apart (no ties for max, min): a shuffled, shifted grid."""
    size = math.prod(shape)
    return (rng.permutation(size) * spacing - size * spacing / 2 + 0.03).reshape(shape)


def broadcast_partner(draw, shape):
    """A shape that broadcasts with `shape`: some axes set to 1, some leading axes dropped."""
    keep = draw(st.integers(0, len(shape)))
    partner = [draw(st.sampled_from([n, 1])) for n in shape[len(shape) - keep :]]
    return tuple(partner)


# ------------------------------------------------------------------------ one case per op
# Each case draws (fn, inputs) from Hypothesis `data`; every input is a float64 leaf.
def unary(op, domain=normal):
    def case(data):
        shape = data.draw(shapes())
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        return op, [leaf(domain(rng, shape))]

    return case


def positive(rng, shape):
    return np.abs(rng.standard_normal(shape)) + 0.2


def binary(op, b_domain=normal, ties_apart=False):
    def case(data):
        shape = data.draw(shapes(min_dims=1))
        other = broadcast_partner(data.draw, shape)
        if data.draw(st.booleans()):
            shape, other = other, shape
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        a, b = normal(rng, shape), b_domain(rng, other)
        if ties_apart:  # b = a + (gap of either sign) on the broadcast shape: never a tie
            full = np.broadcast_shapes(shape, other)
            a = np.broadcast_to(a, full).copy()
            b = a + away_from_zero(rng, full)
        return op, [leaf(a), leaf(b)]

    return case


def reduction(method, domain=normal, **options):
    def case(data):
        shape = data.draw(shapes(min_dims=1))
        axes = data.draw(st.sets(st.integers(0, len(shape) - 1)))
        axis = None if not axes else tuple(sorted(axes))
        keepdims = data.draw(st.booleans())
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        return (
            lambda x: getattr(x, method)(axis=axis, keepdims=keepdims, **options),
            [leaf(domain(rng, shape))],
        )

    return case


def reshape_case(data):
    shape = data.draw(shapes(min_dims=1))
    size = math.prod(shape)
    target = data.draw(st.sampled_from([s for s in [(size,), (1, size), (size, 1), shape[::-1]]
                                        if math.prod(s) == size]))  # fmt: skip
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    return (lambda x: x.reshape(*target) * 1.5), [leaf(normal(rng, shape))]


def permute_case(data):
    shape = data.draw(shapes(min_dims=1))
    axes = data.draw(st.permutations(range(len(shape))))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    return (lambda x: x.permute(*axes)), [leaf(normal(rng, shape))]


def broadcast_to_case(data):
    shape = data.draw(shapes(min_dims=1))
    small = broadcast_partner(data.draw, shape)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    return (lambda x: x.broadcast_to(*shape)), [leaf(normal(rng, small))]


def getitem_case(data):
    shape = data.draw(shapes(min_dims=1))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    rows = data.draw(st.lists(st.integers(0, shape[0] - 1), min_size=1, max_size=4))
    start = data.draw(st.integers(0, shape[-1] - 1))
    if data.draw(st.booleans()):
        return (lambda x: x[rows]), [leaf(normal(rng, shape))]  # a gather, repeats included
    return (lambda x: x[..., start:]), [leaf(normal(rng, shape))]


def concat_case(data):
    shape = data.draw(shapes(min_dims=1))
    axis = data.draw(st.integers(0, len(shape) - 1))
    sizes = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    parts = [
        leaf(normal(rng, shape[:axis] + (n,) + shape[axis + 1 :])) for n in sizes
    ]  # fmt: skip
    if data.draw(st.booleans()):
        return (lambda *xs: ta.concat(list(xs), axis=axis)), parts
    same = [leaf(normal(rng, shape)) for _ in sizes]
    return (lambda *xs: ta.stack(list(xs), axis=axis)), same


def matmul_case(data):
    n, k, m = (data.draw(st.integers(1, 3)) for _ in range(3))
    batch_a = data.draw(shapes(max_dims=2, max_side=2))
    batch_b = broadcast_partner(data.draw, batch_a)
    a_shape, b_shape = batch_a + (n, k), batch_b + (k, m)
    if data.draw(st.booleans()):
        a_shape = (k,)  # a vector on the left
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    return (lambda a, b: a @ b), [leaf(normal(rng, a_shape)), leaf(normal(rng, b_shape))]


def softmax_case(log: bool):
    def case(data):
        shape = data.draw(shapes(min_dims=1))
        axis = data.draw(st.integers(-len(shape), len(shape) - 1))
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        op = F.log_softmax if log else F.softmax
        return (lambda x: op(x, axis=axis)), [leaf(3.0 * normal(rng, shape))]

    return case


def cross_entropy_case(data):
    lead = data.draw(shapes(min_dims=1, max_dims=2))
    classes = data.draw(st.integers(2, 4))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    targets = ta.tensor(rng.integers(0, classes, size=lead))
    smoothing = data.draw(st.sampled_from([0.0, 0.1]))
    reduction = data.draw(st.sampled_from(["mean", "sum", "none"]))
    return (
        lambda x: F.cross_entropy(x, targets, label_smoothing=smoothing, reduction=reduction),
        [leaf(normal(rng, lead[:1] + (classes,) + lead[1:]))],  # (N, C, d1...): classes on axis 1
    )


def layer_norm_case(data):
    shape = data.draw(shapes(min_dims=1))
    width = shape[-1] + 1  # at least 2 features: a 1-feature row is constant
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x, weight, bias = (leaf(normal(rng, s)) for s in (shape[:-1] + (width,), (width,), (width,)))
    return (lambda x, w, b: F.layer_norm(x, width, w, b)), [x, weight, bias]


def linear_case(data):
    lead = data.draw(shapes(max_dims=2))
    n_in, n_out = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x, w, b = (leaf(normal(rng, s)) for s in (lead + (n_in,), (n_out, n_in), (n_out,)))
    return F.linear, [x, w, b]


def embedding_case(data):
    rows, width = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3))
    index_shape = data.draw(shapes(min_dims=1, max_dims=2))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    indices = ta.tensor(rng.integers(0, rows, size=index_shape))
    return (lambda w: F.embedding(indices, w)), [leaf(normal(rng, (rows, width)))]


def attention_case(data):
    batch = data.draw(shapes(max_dims=2, max_side=2))
    tq, tk, d = (data.draw(st.integers(1, 3)) for _ in range(3))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    q, k, v = (leaf(normal(rng, batch + (t, d))) for t in (tq, tk, tk))
    mask = ta.tensor(rng.random((tq, tk)) < 0.7) if data.draw(st.booleans()) else None
    causal = data.draw(st.booleans())
    if causal and mask is not None:  # PyTorch refuses the pair: AND the causal mask in
        mask, causal = mask & F.causal_mask(tq, tk), False
    return (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal),
        [q, k, v],
    )


def clip_case(data):
    shape = data.draw(shapes())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    values = distinct(rng, shape, spacing=0.25)  # the grid misses the bounds +-0.5 by 0.03+
    return (lambda x: x.clip(-0.5, 0.5)), [leaf(values)]


CASES = {
    "exp": unary(lambda x: x.exp()),
    "log": unary(lambda x: x.log(), positive),
    "sqrt": unary(lambda x: x.sqrt(), positive),
    "tanh": unary(lambda x: x.tanh()),
    "sigmoid": unary(lambda x: x.sigmoid()),
    "relu": unary(lambda x: x.relu(), away_from_zero),
    "abs": unary(lambda x: x.abs(), away_from_zero),
    "neg and scalars": unary(lambda x: 2.0 - (-x) * 3.0 / 1.5 + 1.0),
    "pow scalar": unary(lambda x: x**2.5, positive),
    "gelu": unary(F.gelu),
    "clip": clip_case,
    "add": binary(lambda a, b: a + b),
    "sub": binary(lambda a, b: a - b),
    "mul": binary(lambda a, b: a * b),
    "div": binary(lambda a, b: a / b, away_from_zero),
    "pow": binary(lambda a, b: b**a, positive),
    "maximum": binary(ta.maximum, ties_apart=True),
    "sum": reduction("sum"),
    "mean": reduction("mean"),
    "var": reduction("var", correction=0),  # an axis of one element has no unbiased variance
    "amax": reduction("amax", distinct),
    "amin": reduction("amin", distinct),
    "reshape": reshape_case,
    "permute": permute_case,
    "broadcast_to": broadcast_to_case,
    "getitem": getitem_case,
    "concat and stack": concat_case,
    "matmul": matmul_case,
    "softmax": softmax_case(log=False),
    "log_softmax": softmax_case(log=True),
    "cross_entropy": cross_entropy_case,
    "layer_norm": layer_norm_case,
    "linear": linear_case,
    "embedding": embedding_case,
    "attention": attention_case,
}


@pytest.mark.parametrize("name", sorted(CASES))
@EXAMPLES
@given(data=st.data())
def test_no_false_failures_in_float64(name, data):
    fn, inputs = CASES[name](data)
    seed = data.draw(st.integers(0, 1000), label="seed")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # fast mode warns when it disagrees with element-wise
        assert ta.gradcheck(fn, inputs, seed=seed)
        assert ta.gradcheck(fn, inputs, seed=seed, fast=True)


# ------------------------------------------------------------------- fast mode determinism
class OffByScale(ta.Function):
    """y = x**2 with a planted bug: dL/dx = 2 x g + 0.1 (wrong whatever the cotangent)."""

    def forward(self, x):
        return x * x

    def backward(self, grad):
        return grad * self.inputs[0] * 2.0 + 0.1


def _outcome(fn, inputs, seed):
    try:
        ta.gradcheck(fn, inputs, seed=seed, fast=True)
        return "pass"
    except ta.GradcheckError as error:
        return str(error)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(shape=shapes(min_dims=1), seed=st.integers(0, 2**31 - 1), value_seed=st.integers(0, 99))
def test_fast_mode_is_deterministic_for_a_seed(shape, seed, value_seed):
    x = leaf(np.random.default_rng(value_seed).standard_normal(shape) + 0.5)
    before = x.detach().numpy().copy()
    good = [_outcome(lambda x: (x * x).tanh(), [x], seed) for _ in range(2)]
    bad = [_outcome(lambda x: OffByScale.apply(x), [x], seed) for _ in range(2)]
    assert good == ["pass", "pass"]
    assert bad[0] == bad[1] and bad[0].startswith("gradcheck failed:\ninput 0")
    np.testing.assert_array_equal(x.detach().numpy(), before)  # the inputs are restored every time
