"""Order statistics and distances: median, nanmedian, kthvalue, quantile, nanquantile, cdist.

Each is checked by ``ta.gradcheck`` and compared with PyTorch (values, indices and gradients)
where torch is installed; those comparisons skip cleanly without it. The torch-free checks pin
the definitions (the lower median, the rank q (n - 1), NaN handling) on small hand-made inputs.
"""

import math

import numpy as np
import pytest

import tinyattn as ta

NAN = math.nan
INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")
CDIST_MODES = (
    "use_mm_for_euclid_dist_if_necessary",
    "use_mm_for_euclid_dist",
    "donot_use_mm_for_euclid_dist",
)


def _torch():
    return pytest.importorskip("torch")


def _distinct(shape, seed=0):
    """Values without ties (PyTorch leaves the index of tied elements unspecified)."""
    rng = np.random.default_rng(seed)
    return rng.permutation(int(np.prod(shape))).reshape(shape) / 7.0 - 1.0


def _both(array):
    """The same float64 values as a tinyattn leaf and a torch leaf, both requiring grad."""
    torch = _torch()
    return ta.tensor(array, requires_grad=True), torch.tensor(array, requires_grad=True)


def _same(ours, theirs):
    """Values (and integer indices) equal, NaN where PyTorch has NaN, the same shape."""
    ours_array, theirs_array = ours.detach().numpy(), theirs.detach().numpy()
    assert ours_array.shape == theirs_array.shape
    np.testing.assert_allclose(ours_array, theirs_array, rtol=1e-12, atol=1e-12)


def _same_gradients(ours_out, theirs_out, ours_in, theirs_in):
    torch = _torch()
    cotangent = np.random.default_rng(1).standard_normal(tuple(theirs_out.shape))
    ours_out.backward(ta.tensor(cotangent))
    theirs_out.backward(torch.tensor(cotangent))
    for mine, other in zip(ours_in, theirs_in):
        np.testing.assert_allclose(mine.grad.numpy(), other.grad.numpy(), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------- without torch
def test_median_is_the_lower_median():
    assert ta.tensor([1.0, 2.0, 3.0, 4.0]).median().item() == 2.0
    assert ta.median(ta.tensor([[5, 1], [3, 9]])).item() == 3  # integers keep their dtype
    values, indices = ta.tensor([[3.0, 1.0, 2.0], [9.0, 7.0, 8.0]]).median(1)
    assert values.tolist() == [2.0, 8.0] and indices.tolist() == [2, 2]


def test_median_nan_handling():
    x = ta.tensor([[3.0, NAN, 2.0, NAN, 1.0], [4.0, 6.0, 5.0, 1.0, 2.0]])
    assert math.isnan(x.median().item())
    values, indices = x.median(1)  # a NaN row: NaN and the index of its first NaN
    assert math.isnan(values[0].item()) and indices.tolist() == [1, 0]
    values, indices = x.nanmedian(1)
    assert values.tolist() == [2.0, 4.0] and indices.tolist() == [2, 0]
    assert math.isnan(ta.tensor([]).median().item())  # no element: NaN, no error


def test_median_gradient_goes_to_the_chosen_element():
    x = ta.tensor([[3.0, 1.0, 2.0], [9.0, 7.0, 8.0]], requires_grad=True)
    x.median(1).values.sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]
    y = ta.tensor([4.0, 1.0, 3.0], requires_grad=True)
    ta.median(y).backward()
    assert y.grad.tolist() == [0.0, 0.0, 1.0]


def test_kthvalue_counts_from_one():
    values, indices = ta.kthvalue(ta.tensor([[5.0, 1.0, 4.0]]), 2, 1, keepdim=True)
    assert values.tolist() == [[4.0]] and indices.tolist() == [[2]]
    with pytest.raises(RuntimeError, match="kthvalue: k=4 is out of range"):
        ta.tensor([1.0, 2.0, 3.0]).kthvalue(4)
    with pytest.raises(RuntimeError, match="kthvalue: k=0"):
        ta.tensor([1.0, 2.0, 3.0]).kthvalue(0)


def test_quantile_definitions():
    x = ta.tensor([1.0, 2.0, 3.0, 4.0])  # q = 0.5: rank 1.5, between 2 and 3
    expected = {"linear": 2.5, "lower": 2.0, "higher": 3.0, "midpoint": 2.5, "nearest": 3.0}
    for interpolation, value in expected.items():  # 'nearest' rounds 1.5 half to even: 2
        assert x.quantile(0.5, interpolation=interpolation).item() == value
    qs = ta.tensor([0.0, 1 / 3, 1.0])
    assert ta.quantile(x, qs).tolist() == pytest.approx([1.0, 2.0, 4.0])
    assert math.isnan(ta.tensor([1.0, NAN, 3.0]).quantile(0.5).item())
    assert ta.tensor([1.0, NAN, 3.0]).nanquantile(0.5).item() == 2.0


def test_quantile_shapes():
    x = ta.zeros(2, 3, 4)
    assert x.quantile(0.5).shape == ()
    assert x.quantile(0.5, dim=1).shape == (2, 4)
    assert x.quantile(0.5, dim=1, keepdim=True).shape == (2, 1, 4)
    assert x.quantile(ta.tensor([0.1, 0.9]), dim=1).shape == (2, 2, 4)
    assert x.quantile(ta.tensor([0.1, 0.9]), keepdim=True).shape == (2, 1, 1, 1)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: ta.tensor([1, 2]).quantile(0.5), RuntimeError, "must be either float or double"),
        (lambda: ta.tensor([1.0, 2.0]).quantile(1.5), RuntimeError, r"range \[0, 1\]"),
        (lambda: ta.tensor([1.0]).quantile(0.5, interpolation="cubic"), ValueError, "cubic"),
        (
            lambda: ta.tensor([1.0]).quantile(ta.tensor([0.5], dtype="float64")),
            RuntimeError,
            "same dtype",
        ),
        (lambda: ta.zeros(2, 0).quantile(0.5, dim=1), RuntimeError, "must be non-empty"),
        (lambda: ta.zeros(2, 0).kthvalue(1, 1), IndexError, "kthvalue: dim 1"),
        (lambda: ta.zeros(2, 0).median(1), IndexError, "median: dim 1"),
    ],
)
def test_statistics_refusals(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_cdist_definitions_and_refusals():
    a, b = ta.tensor([[0.0, 0.0], [1.0, 1.0]]), ta.tensor([[3.0, 4.0]])
    assert ta.cdist(a, b).tolist() == [[5.0], [pytest.approx(math.sqrt(13))]]
    assert ta.cdist(a, b, p=1).tolist() == [[7.0], [5.0]]
    assert ta.cdist(a, b, p=math.inf).tolist() == [[4.0], [3.0]]
    assert ta.cdist(a, b, p=0).tolist() == [[2.0], [2.0]]
    with pytest.raises(RuntimeError, match="cdist: X1 and X2 must have the same number"):
        ta.cdist(ta.zeros(2, 3), ta.zeros(2, 4))
    with pytest.raises(RuntimeError, match="at least 2D"):
        ta.cdist(ta.zeros(3), ta.zeros(2, 3))
    with pytest.raises(RuntimeError, match="non-negative p"):
        ta.cdist(a, b, p=-1.0)
    with pytest.raises(ValueError, match="not a valid value for compute_mode"):
        ta.cdist(a, b, compute_mode="fast")


def test_cdist_gradient_is_zero_at_zero_distance():
    for p in (0.5, 1.0, 2.0, 3.0):
        a = ta.tensor([[1.0, 2.0]], requires_grad=True)
        ta.cdist(a, ta.tensor([[1.0, 2.0]]), p=p).sum().backward()
        assert a.grad.tolist() == [[0.0, 0.0]], p


def test_moveaxis_is_movedim():
    x = ta.zeros(2, 3, 4)
    assert ta.moveaxis(x, 0, -1).shape == x.movedim(0, -1).shape == (3, 4, 2)
    assert ta.Tensor.moveaxis is ta.Tensor.movedim


# --------------------------------------------------------------------------------- gradcheck
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.median(),
        lambda x: x.median(1).values,
        lambda x: x.nanmedian(0, keepdim=True).values,
        lambda x: x.kthvalue(3, -1).values,
        *(lambda x, i=i: x.quantile(0.37, 1, interpolation=i) for i in INTERPOLATIONS),
        lambda x: x.quantile(ta.tensor([0.1, 0.5, 0.93], dtype="float64"), keepdim=True),
        lambda x: x.nanquantile(0.8, 0),
    ],
)
def test_statistics_gradcheck(fn):
    x = ta.tensor(_distinct((4, 5)), requires_grad=True)
    assert ta.gradcheck(fn, (x,))


@pytest.mark.parametrize("p", [0.5, 1.0, 2.0, 3.0, math.inf])
@pytest.mark.parametrize("mode", CDIST_MODES)
def test_cdist_gradcheck(p, mode):
    rng = np.random.default_rng(2)  # no tied differences: p = inf's maximum has no kink here
    x1 = ta.tensor(rng.standard_normal((2, 3, 4)), requires_grad=True)
    x2 = ta.tensor(rng.standard_normal((1, 5, 4)), requires_grad=True)
    assert ta.gradcheck(lambda a, b: ta.cdist(a, b, p, mode), (x1, x2))


# ------------------------------------------------------------------------------ against torch
@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", ["median", "nanmedian"])
def test_median_matches_torch(name, dim, keepdim):
    ours, theirs = _both(_distinct((3, 5, 4)))
    args = () if dim is None else (dim, keepdim)
    ours_out, theirs_out = getattr(ours, name)(*args), getattr(theirs, name)(*args)
    if dim is not None:
        _same(ours_out.indices, theirs_out.indices)
        ours_out, theirs_out = ours_out.values, theirs_out.values
    _same(ours_out, theirs_out)
    _same_gradients(ours_out, theirs_out, [ours], [theirs])


@pytest.mark.parametrize("name", ["median", "nanmedian"])
def test_median_with_nan_matches_torch(name):
    torch = _torch()
    rows = [[3.0, NAN, 2.0, NAN, 1.0], [4.0, 6.0, 5.0, 1.0, 2.0], [NAN] * 5]
    ours = getattr(ta.tensor(rows, dtype="float64"), name)(1)
    theirs = getattr(torch.tensor(rows, dtype=torch.float64), name)(1)
    np.testing.assert_array_equal(ours.values.numpy(), theirs.values.numpy())
    np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy())


@pytest.mark.parametrize("k, dim", [(1, 0), (2, 1), (4, -1), (3, 2)])
def test_kthvalue_matches_torch(k, dim):
    ours, theirs = _both(_distinct((3, 5, 4)))
    ours_out, theirs_out = ours.kthvalue(k, dim), theirs.kthvalue(k, dim)
    _same(ours_out.indices, theirs_out.indices)
    _same(ours_out.values, theirs_out.values)
    _same_gradients(ours_out.values, theirs_out.values, [ours], [theirs])


@pytest.mark.parametrize("interpolation", INTERPOLATIONS)
@pytest.mark.parametrize("q", [0.3, [0.0, 0.25, 0.5, 0.9, 1.0]])
@pytest.mark.parametrize("dim, keepdim", [(None, False), (None, True), (1, False), (-1, True)])
@pytest.mark.parametrize("name", ["quantile", "nanquantile"])
def test_quantile_matches_torch(name, interpolation, q, dim, keepdim):
    torch = _torch()
    values = _distinct((3, 5, 4))
    if name == "nanquantile":
        values[0, 1, :] = NAN  # a NaN in rows of dims 1 and -1, and in the flattened tensor
    ours, theirs = _both(values)
    ours_q = ta.tensor(q, dtype="float64") if isinstance(q, list) else q
    theirs_q = torch.tensor(q, dtype=torch.float64) if isinstance(q, list) else q
    ours_out = getattr(ours, name)(ours_q, dim, keepdim, interpolation=interpolation)
    theirs_out = getattr(theirs, name)(theirs_q, dim, keepdim, interpolation=interpolation)
    _same(ours_out, theirs_out)
    _same_gradients(ours_out, theirs_out, [ours], [theirs])


def test_quantile_with_nan_matches_torch():
    torch = _torch()
    rows = [[3.0, NAN, 2.0, NAN, 1.0], [4.0, 6.0, 5.0, 1.0, 2.0], [NAN] * 5]
    for name in ("quantile", "nanquantile"):
        for interpolation in INTERPOLATIONS:
            ours = getattr(ta.tensor(rows), name)(0.3, 1, interpolation=interpolation)
            theirs = getattr(torch.tensor(rows), name)(0.3, 1, interpolation=interpolation)
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 2.0, 3.0, math.inf])
@pytest.mark.parametrize("mode", CDIST_MODES)
@pytest.mark.parametrize("rows", [3, 30])  # 30 > 25: "if necessary" takes the product form
def test_cdist_matches_torch(p, mode, rows):
    values1 = _distinct((2, rows, 3), 4)
    values1[0, 0] = values1[1, 1] = [1.0, 2.0, 3.0]  # two pairs at zero distance
    values2 = _distinct((1, 4, 3), 5)
    values2[0, 2] = [1.0, 2.0, 3.0]
    ours1, theirs1 = _both(values1)
    ours2, theirs2 = _both(values2)
    ours_out, theirs_out = (
        ta.cdist(ours1, ours2, p, mode),
        _torch().cdist(theirs1, theirs2, p, mode),
    )
    np.testing.assert_allclose(ours_out.detach().numpy(), theirs_out.detach().numpy(), atol=1e-7)
    _same_gradients(ours_out, theirs_out, [ours1, ours2], [theirs1, theirs2])


def test_cdist_float32_matches_torch():
    torch = _torch()
    a, b = _distinct((6, 5), 6).astype(np.float32), _distinct((7, 5), 7).astype(np.float32)
    ours = ta.cdist(ta.tensor(a), ta.tensor(b)).numpy()
    theirs = torch.cdist(torch.tensor(a), torch.tensor(b)).numpy()
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
