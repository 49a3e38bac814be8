"""Hypothesis property tests: broadcasting gradients, reductions over random axes, round trips.

Shapes are drawn by Hypothesis, values by a seeded NumPy generator (shrinking works on shapes,
which is where broadcasting bugs live). Every test runs on every backend via ``device``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes

import tinyattn as ta

# The device fixture is a plain string (strict also sets flags for the whole test), so reusing
# it across examples is safe.
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _values(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def _distinct(shapes, seed):
    """Arrays whose values are all distinct (no ties, for max/min) and non-zero (for division):
    +-0.1, +-0.2, ... with mixed signs, shuffled across all the arrays together."""
    sizes = [int(np.prod(shape)) for shape in shapes]
    ranks = np.random.default_rng(seed).permutation(sum(sizes)) + 1
    values = 0.1 * ranks * np.where(ranks % 2, 1.0, -1.0)
    splits = np.split(values, np.cumsum(sizes)[:-1])
    return [part.reshape(shape) for part, shape in zip(splits, shapes, strict=True)]


def _leaf(array, device):
    return ta.tensor(array, dtype="float64", device=device, requires_grad=True)


def _sum_to(array, shape):
    """The NumPy adjoint of broadcasting ``shape`` up to ``array.shape``."""
    lead = array.ndim - len(shape)
    array = array.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and array.shape[i] != 1)
    return array.sum(axis=axes, keepdims=True).reshape(shape)


# Partial derivatives of each binary op, as NumPy functions of the broadcast operands.
BINARY = [
    ("add", lambda a, b: a + b, lambda a, b: np.ones_like(a), lambda a, b: np.ones_like(b)),
    ("sub", lambda a, b: a - b, lambda a, b: np.ones_like(a), lambda a, b: -np.ones_like(b)),
    ("mul", lambda a, b: a * b, lambda a, b: b, lambda a, b: a),
    ("div", lambda a, b: a / b, lambda a, b: 1 / b, lambda a, b: -a / b**2),
    ("maximum", ta.maximum, lambda a, b: (a > b) * 1.0, lambda a, b: (b > a) * 1.0),
]


@pytest.mark.parametrize("name,op,d_a,d_b", BINARY, ids=[b[0] for b in BINARY])
@SETTINGS
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=3),
       seed=st.integers(0, 2**16))  # fmt: skip
def test_binary_gradient_is_summed_over_broadcast_axes(device, name, op, d_a, d_b, shapes, seed):
    (shape_a, shape_b), result_shape = shapes.input_shapes, shapes.result_shape
    a_host, b_host = _distinct([shape_a, shape_b], seed)
    a, b = _leaf(a_host, device), _leaf(b_host, device)
    out = op(a, b)
    assert out.shape == result_shape
    cotangent = _values(result_shape, seed + 2)
    out.backward(ta.tensor(cotangent, dtype="float64", device=device))
    a_wide, b_wide = np.broadcast_to(a_host, result_shape), np.broadcast_to(b_host, result_shape)
    assert a.grad.shape == shape_a and b.grad.shape == shape_b
    np.testing.assert_allclose(
        a.grad.numpy(), _sum_to(cotangent * d_a(a_wide, b_wide), shape_a), rtol=1e-12, atol=1e-12
    )
    np.testing.assert_allclose(
        b.grad.numpy(), _sum_to(cotangent * d_b(a_wide, b_wide), shape_b), rtol=1e-12, atol=1e-12
    )


@st.composite
def shape_and_axes(draw):
    """A shape, and an axis argument for it: None, an int or a tuple (any order, negatives)."""
    shape = draw(array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=3))
    ndim = len(shape)
    picked = draw(st.lists(st.integers(0, ndim - 1), unique=True, min_size=1, max_size=ndim))
    signed = tuple(a - ndim if draw(st.booleans()) else a for a in picked)
    axis = draw(st.sampled_from([None, signed, signed[0]]))
    return shape, axis


def _count(shape, axis):
    axes = range(len(shape)) if axis is None else np.atleast_1d(axis)
    return int(np.prod([shape[a] for a in axes]))


def _one_hot_extreme(x, axis, keepdims, pick):
    """dL/dx for max/min with a cotangent of ones and no ties: 1 at each extreme, else 0."""
    return (x == pick(x, axis=axis, keepdims=True)) * 1.0


# (method name, NumPy reference, gradient of sum(out) as a NumPy function of x, axis). var is
# checked with correction=0 (NumPy's np.var); an axis of one element has no unbiased variance.
REDUCTIONS = [
    ("sum", np.sum, lambda x, axis: np.ones_like(x)),
    ("mean", np.mean, lambda x, axis: np.full_like(x, 1.0 / _count(x.shape, axis))),
    ("amax", np.max, lambda x, axis: _one_hot_extreme(x, axis, True, np.max)),
    ("amin", np.min, lambda x, axis: _one_hot_extreme(x, axis, True, np.min)),
    ("var", np.var, lambda x, axis: 2 * (x - x.mean(axis, keepdims=True)) / _count(x.shape, axis)),
]  # fmt: skip
OPTIONS = {"var": {"correction": 0}}


@pytest.mark.parametrize("name,reference,gradient", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
@SETTINGS
@given(case=shape_and_axes(), keepdims=st.booleans(), seed=st.integers(0, 2**16))
def test_reduction_over_random_axes(device, name, reference, gradient, case, keepdims, seed):
    shape, axis = case
    (x_host,) = _distinct([shape], seed)
    x = _leaf(x_host, device)
    out = getattr(x, name)(axis=axis, keepdims=keepdims, **OPTIONS.get(name, {}))
    expected = reference(x_host, axis=axis, keepdims=keepdims)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-12, atol=1e-14)
    out.sum().backward()
    assert x.grad.shape == shape
    np.testing.assert_allclose(x.grad.numpy(), gradient(x_host, axis), rtol=1e-12, atol=1e-14)


@st.composite
def shape_and_reshape(draw):
    """A shape and another shape with the same number of elements (maybe with one -1)."""
    shape = draw(array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=4))
    size = int(np.prod(shape))
    factors, rest = [], size
    for _ in range(draw(st.integers(0, 3))):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        factor = draw(st.sampled_from(divisors))
        factors.append(factor)
        rest //= factor
    target = [*factors, rest] if rest != 1 or not factors else factors
    if target and draw(st.booleans()):
        target[draw(st.integers(0, len(target) - 1))] = -1
    return shape, tuple(target)


@SETTINGS
@given(case=shape_and_reshape(), seed=st.integers(0, 2**16))
def test_reshape_round_trip(device, case, seed):
    shape, target = case
    x_host = _values(shape, seed)
    x = _leaf(x_host, device)
    there = x.reshape(target)
    assert there.shape == x_host.reshape(target).shape
    back = there.reshape(shape)
    np.testing.assert_array_equal(back.detach().numpy(), x_host)
    cotangent = _values(there.shape, seed + 1)
    there.backward(ta.tensor(cotangent, dtype="float64", device=device))
    np.testing.assert_array_equal(x.grad.numpy(), cotangent.reshape(shape))


@st.composite
def shape_and_permutation(draw):
    shape = draw(array_shapes(min_dims=1, max_dims=5, min_side=1, max_side=3))
    axes = draw(st.permutations(range(len(shape))))
    return shape, tuple(a - len(shape) if draw(st.booleans()) else a for a in axes)


@SETTINGS
@given(case=shape_and_permutation(), seed=st.integers(0, 2**16))
def test_permute_round_trip(device, case, seed):
    shape, axes = case
    x_host = _values(shape, seed)
    x = _leaf(x_host, device)
    there = x.permute(*axes)
    np.testing.assert_array_equal(there.detach().numpy(), np.transpose(x_host, axes))
    back = there.permute(*np.argsort([a % len(shape) for a in axes]).tolist())
    np.testing.assert_array_equal(back.detach().numpy(), x_host)
    cotangent = _values(there.shape, seed + 1)
    there.backward(ta.tensor(cotangent, dtype="float64", device=device))
    inverse = np.argsort([a % len(shape) for a in axes])
    np.testing.assert_array_equal(x.grad.numpy(), np.transpose(cotangent, inverse))


@SETTINGS
@given(shapes=mutually_broadcastable_shapes(num_shapes=1, max_dims=4, max_side=3),
       seed=st.integers(0, 2**16))  # fmt: skip
def test_broadcast_to_and_sum_to_are_adjoint(device, shapes, seed):
    """<broadcast_to(x), g> == <x, sum_to(g)>: the one place broadcasting is undone is right."""
    (shape,), target = shapes.input_shapes, shapes.result_shape
    x = _leaf(_values(shape, seed), device)
    wide = x.broadcast_to(target)
    assert wide.shape == target
    g = _values(target, seed + 1)
    wide.backward(ta.tensor(g, dtype="float64", device=device))
    np.testing.assert_allclose(x.grad.numpy(), _sum_to(g, shape), rtol=1e-12, atol=1e-12)
    lhs = float((np.broadcast_to(x.detach().numpy(), target) * g).sum())
    rhs = float((x.detach().numpy() * x.grad.detach().numpy()).sum())
    assert lhs == pytest.approx(rhs, rel=1e-12, abs=1e-12)
