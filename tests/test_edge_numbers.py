"""Edge numbers: powers at 0, reductions of empty and 0-d tensors, softmax of NaN rows, attention
without features or keys, impossible sum_to shapes. Where PyTorch returns a result, tinyattn must
return the same values and gradients (checked against the installed torch, float64); where it
raises, tinyattn raises an error naming the op. Runs on every backend through `device`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F

INF, NAN = math.inf, math.nan

# Base and exponent pairs where the textbook rules give 0 * inf: at a base of 0, an exponent
# of 0, and both; plus ordinary points as a control.
POW_POINTS = [(0.0, 0.0), (0.0, 2.0), (0.0, -1.0), (0.0, 0.5), (0.0, -0.5), (2.0, 0.0), (3.0, 2.0)]


def _t(values, device, requires_grad=True):
    return ta.tensor(np.asarray(values, dtype=np.float64), dtype="float64", device=device,
                     requires_grad=requires_grad)  # fmt: skip


def _torch(values, requires_grad=True):
    torch = pytest.importorskip("torch")
    return torch.tensor(values, dtype=torch.float64, requires_grad=requires_grad)


def _assert_same(got, want):
    """Values equal to rounding, with NaN, inf and their signs in the same places."""
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=0.0)


# ------------------------------------------------------------------------------------- powers
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy's notes on 0 * inf, log(0)
@pytest.mark.parametrize("kind", ["tensor ** tensor", "tensor ** number", "number ** tensor"])
@pytest.mark.parametrize(("base", "exponent"), POW_POINTS)
def test_pow_gradients_match_pytorch_at_zero(device, kind, base, exponent):
    """PyTorch's rules: d(a**b)/da = 0 where b = 0, d(a**b)/db = 0 where a = 0 and b >= 0."""
    torch = pytest.importorskip("torch")
    a, b = _t(base, device), _t(exponent, device)
    ta_, tb = _torch(base), _torch(exponent)
    if kind == "tensor ** tensor":
        ours, theirs, ours_in, theirs_in = a**b, ta_**tb, [a, b], [ta_, tb]
    elif kind == "tensor ** number":
        ours, theirs, ours_in, theirs_in = a**exponent, ta_**exponent, [a], [ta_]
    else:
        ours, theirs, ours_in, theirs_in = base**b, base**tb, [b], [tb]
    _assert_same(ours.detach().numpy(), theirs.detach().numpy())
    got = ta.grad(ours, ours_in)
    want = torch.autograd.grad(theirs, theirs_in)
    for g, w in zip(got, want, strict=True):
        _assert_same(g.numpy(), w.numpy())


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_pow_at_zero_broadcasts_and_stays_twice_differentiable(device):
    """The guard is a where (not a mask product), so it broadcasts and higher orders pass."""
    torch = pytest.importorskip("torch")
    bases, exponent = [0.0, 1.5, 2.0], [[0.0], [2.0]]
    a, b = _t(bases, device), _t(exponent, device)
    ta_, tb = _torch(bases), _torch(exponent)
    grad_a, grad_b = ta.grad((a**b).sum(), [a, b], create_graph=True)
    want_a, want_b = torch.autograd.grad((ta_**tb).sum(), [ta_, tb], create_graph=True)
    _assert_same(grad_a.detach().numpy(), want_a.detach().numpy())
    _assert_same(grad_b.detach().numpy(), want_b.detach().numpy())
    (second,) = ta.grad(grad_a.sum(), [a])
    (want_second,) = torch.autograd.grad(want_a.sum(), [ta_])
    _assert_same(second.numpy(), want_second.numpy())


# --------------------------------------------------------------------------------- reductions
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # torch's own mean of an empty slice
@pytest.mark.parametrize(
    ("shape", "axis"), [((3, 0), 1), ((0, 3), 1), ((0,), None), ((2, 0, 2), (1, 2))]
)
def test_mean_over_empty_axes_matches_pytorch(device, shape, axis):
    """The mean of no numbers is NaN; its gradient is empty (no ZeroDivisionError)."""
    x, tx = _t(np.zeros(shape), device), _torch(np.zeros(shape))
    ours = x.mean(axis=axis)
    theirs = tx.mean() if axis is None else tx.mean(dim=axis)
    assert ours.shape == tuple(theirs.shape)
    _assert_same(ours.detach().numpy(), theirs.detach().numpy())
    (grad,) = ta.grad(ours.sum(), [x])
    assert grad.shape == shape


@pytest.mark.parametrize("reduction", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_of_a_0d_tensor_over_axis_0_or_minus_1(device, reduction, axis, keepdims):
    """PyTorch lets a 0-d tensor be reduced over axis 0 or -1: the value, gradient 1."""
    torch = pytest.importorskip("torch")
    x, tx = _t(2.5, device), _torch(2.5)
    name = {"max": "amax", "min": "amin"}.get(reduction, reduction)  # max(dim) gives indices too
    ours = getattr(x, name)(axis=axis, keepdims=keepdims)
    theirs = getattr(tx, name)(dim=axis, keepdim=keepdims)
    assert ours.shape == tuple(theirs.shape) == ()
    _assert_same(ours.detach().numpy(), theirs.detach().numpy())
    (grad,) = ta.grad(ours, [x])
    (want,) = torch.autograd.grad(theirs, [tx])
    _assert_same(grad.numpy(), want.numpy())


@pytest.mark.parametrize("reduction", ["max", "min"])
def test_max_min_with_a_dim_of_a_0d_tensor_give_the_value_and_index_0(device, reduction):
    pytest.importorskip("torch")
    values, indices = getattr(_t(2.5, device), reduction)(0)
    want_values, want_indices = getattr(_torch(2.5), reduction)(0)
    assert values.shape == indices.shape == () and str(indices.numpy().dtype) == "int64"
    assert values.item() == want_values.item() and indices.item() == want_indices.item() == 0
    with pytest.raises(ValueError, match="axis 1 is not valid for a 0-d tensor"):
        getattr(_t(2.5, device), reduction)(1)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_reductions_of_a_0d_tensor_refuse_other_axes(device, reduction):
    with pytest.raises(ValueError, match=f"{reduction}: axis 1 is not valid for a 0-d tensor"):
        getattr(_t(2.5, device), reduction)(axis=1)
    with pytest.raises(ValueError, match=f"{reduction}: axis \\(0, -1\\) is not valid"):
        getattr(_t(2.5, device), reduction)(axis=(0, -1))


@pytest.mark.parametrize(
    ("shape", "target"), [((2, 3), (4,)), ((2, 3), (2, 2)), ((2, 3), (1, 2, 3)), ((2, 3), (3,))]
)
def test_sum_to_an_impossible_shape_names_the_op_and_shapes(device, shape, target):
    """PyTorch's sum_to_size raises too ("not expandable"); a valid target is checked too."""
    x = _t(np.ones(shape), device)
    if target == (3,):  # (2, 3) -> (3,) is possible: the sums of the columns
        np.testing.assert_array_equal(x.sum_to(target).detach().numpy(), [2.0, 2.0, 2.0])
        return
    with pytest.raises(ValueError, match=r"sum_to: cannot sum a tensor of shape \(2, 3\) to"):
        x.sum_to(target)


# -------------------------------------------------------------------------------------- softmax
ROWS = [[1.0, NAN, 0.5], [INF, 1.0, 0.0], [1.0, 2.0, 3.0], [-INF, -INF, -INF], [-INF, 0.0, 1.0]]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf while shifting the +inf row
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_rows_holding_nan_or_inf_match_pytorch(device, name):
    """A row holding NaN (or +inf) is NaN everywhere, never a value above 1; other rows are
    untouched. The fully masked row keeps tinyattn's documented 0 (PyTorch gives NaN)."""
    torch = pytest.importorskip("torch")
    ours = getattr(F, name)(_t(ROWS, device, requires_grad=False), axis=-1).numpy()
    theirs = getattr(torch, name)(_torch(ROWS, requires_grad=False), dim=-1).numpy()
    masked = 3
    _assert_same(np.delete(ours, masked, axis=0), np.delete(theirs, masked, axis=0))
    assert np.isnan(ours[:2]).all()
    assert (ours[masked] == (0.0 if name == "softmax" else -INF)).all()


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [0, -1])
def test_softmax_of_a_0d_tensor_matches_pytorch(device, name, axis):
    torch = pytest.importorskip("torch")
    x, tx = _t(3.0, device), _torch(3.0)
    ours, theirs = getattr(F, name)(x, axis=axis), getattr(torch, name)(tx, dim=axis)
    assert ours.shape == ()
    _assert_same(ours.detach().numpy(), theirs.detach().numpy())
    (grad,) = ta.grad(ours, [x])
    (want,) = torch.autograd.grad(theirs, [tx])
    _assert_same(grad.numpy(), want.numpy())


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_of_an_empty_tensor_is_empty(device, name):
    x = _t(np.zeros((3, 0)), device)
    y = getattr(F, name)(x, axis=-1)
    assert y.shape == (3, 0)
    (grad,) = ta.grad(y.sum(), [x])
    assert grad.shape == (3, 0)


# ------------------------------------------------------------------------------------ attention
ATTENTION_SHAPES = {
    "no features": ((2, 3, 0), (2, 4, 0), (2, 4, 5)),
    "no keys": ((2, 3, 4), (2, 0, 4), (2, 0, 5)),
    "no value features": ((2, 3, 4), (2, 4, 4), (2, 4, 0)),
    "no queries": ((2, 0, 4), (2, 4, 4), (2, 4, 3)),
}


@pytest.mark.parametrize("path", ["plain", "blockwise"])
@pytest.mark.parametrize("scale", [None, 0.5])
@pytest.mark.parametrize("case", sorted(ATTENTION_SHAPES))
def test_attention_with_empty_axes_matches_pytorch(device, monkeypatch, path, scale, case):
    """D = 0: every score is 0, so each query gets the mean of v; no keys: output 0, gradient
    0 (PyTorch's results), on the plain and on the block-wise path."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(
        ta.functional, "BLOCKWISE_MIN_SCORES", 0 if path == "blockwise" else math.inf
    )
    rng = np.random.default_rng(5)
    hosts = [rng.standard_normal(shape) for shape in ATTENTION_SHAPES[case]]
    ours_in = [_t(h, device) for h in hosts]
    theirs_in = [_torch(h) for h in hosts]
    ours = F.scaled_dot_product_attention(*ours_in, scale=scale)
    theirs = torch.nn.functional.scaled_dot_product_attention(*theirs_in, scale=scale)
    assert ours.shape == tuple(theirs.shape)
    _assert_same(ours.detach().numpy(), theirs.detach().numpy())
    cotangent = rng.standard_normal(ours.shape)
    got = ta.grad([ours], ours_in, [_t(cotangent, device, requires_grad=False)])
    want = torch.autograd.grad(theirs, theirs_in, torch.tensor(cotangent), allow_unused=True)
    for g, w, h in zip(got, want, hosts, strict=True):
        _assert_same(g.numpy(), np.zeros_like(h) if w is None else w.numpy())
