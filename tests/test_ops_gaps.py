"""PyTorch names that programs and op test suites reach for: running extremes and log-sum-exp,
scatter reductions, index_put, padding modes, rounded division, fmod, copysign, std_mean and
var_mean, unfold and unflatten, roll, normalize and celu, in-place initialisers, finfo and iinfo.

Each is compared with PyTorch (values and gradients) where torch is installed; the op table in
test_ops.py gradient-checks the differentiable ones on every backend.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F


def _torch():
    return pytest.importorskip("torch")


def _pair(array: np.ndarray, dtype: str = "float64"):
    """The same values as a torch leaf and a tinyattn leaf, both requiring grad."""
    torch = _torch()
    ours = ta.tensor(array, dtype=dtype, requires_grad=True)
    theirs = torch.tensor(array, dtype=getattr(torch, dtype), requires_grad=True)
    return theirs, ours


def _same(theirs, ours, atol: float = 1e-6) -> None:
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), atol=atol)


def _backward_both(theirs_out, ours_out, seed: int = 0) -> None:
    """Backpropagate one random cotangent through both results."""
    torch = _torch()
    cotangent = np.random.default_rng(seed).standard_normal(ours_out.shape)
    theirs_out.backward(torch.tensor(cotangent, dtype=theirs_out.dtype))
    ours_out.backward(ta.tensor(cotangent, dtype=ours_out.dtype))


# ------------------------------------------------------------------------------ running scans
@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("shape, dim", [((7,), 0), ((3, 5), 1), ((4, 3, 2), 0), ((2, 3, 4), -1)])
def test_cummax_cummin_match_torch_with_ties(name, shape, dim):
    torch = _torch()
    rng = np.random.default_rng(1)
    values = rng.integers(-2, 3, shape).astype(np.float64)  # many ties
    theirs, ours = _pair(values)
    expected = getattr(torch, name)(theirs, dim)
    got = getattr(ta, name)(ours, dim)
    values_out, indices_out = got  # tuple-unpackable, and named
    assert got.values is values_out and got.indices is indices_out
    _same(expected.values, values_out)
    np.testing.assert_array_equal(indices_out.numpy(), expected.indices.numpy())
    assert ta.backend.dtype_name(indices_out.dtype) == "int64"
    _backward_both(expected.values, values_out)
    _same(theirs.grad, ours.grad)


def test_cummax_nan_and_integers_and_0d():
    torch = _torch()
    data = [1.0, 3.0, 3.0, float("nan"), 5.0, float("nan"), 0.0]
    for name in ("cummax", "cummin"):
        expected = getattr(torch, name)(torch.tensor(data), 0)
        got = getattr(ta.tensor(data), name)(0)
        np.testing.assert_array_equal(got.indices.numpy(), expected.indices.numpy())
        np.testing.assert_array_equal(got.values.numpy(), expected.values.numpy())
    ints = ta.tensor([1, 3, 2, 3]).cummax(0)
    assert ints.values.tolist() == [1, 3, 3, 3] and ints.indices.tolist() == [0, 1, 1, 3]
    scalar = ta.tensor(4.0).cummin(-1)
    assert scalar.values.item() == 4.0 and scalar.indices.item() == 0 and scalar.values.ndim == 0


def test_cummax_bad_dim_is_refused_naming_the_op():
    with pytest.raises(ValueError, match="cummax"):  # the project's dim-range error
        ta.ones(2, 3).cummax(2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, dim", [((10,), 0), ((3, 6), 1), ((5, 2, 3), 0)])
def test_logcumsumexp_matches_torch_and_is_stable(dtype, shape, dim):
    torch = _torch()
    values = np.random.default_rng(2).standard_normal(shape) * 300.0  # exp would overflow
    theirs, ours = _pair(values, dtype)
    expected, got = torch.logcumsumexp(theirs, dim), ours.logcumsumexp(dim)
    assert np.isfinite(got.detach().numpy()).all()
    _same(expected, got, atol=1e-3 if dtype == "float32" else 1e-9)
    _backward_both(expected, got)
    _same(theirs.grad, ours.grad, atol=1e-4 if dtype == "float32" else 1e-9)


def test_logcumsumexp_tiny_first_and_minus_infinity():
    got = ta.logcumsumexp(ta.tensor([-1000.0, 0.0, -math.inf], dtype="float64"), 0)
    np.testing.assert_allclose(got.numpy(), [-1000.0, 0.0, 0.0])
    with pytest.raises(TypeError, match="logcumsumexp"):
        ta.tensor([1, 2]).logcumsumexp(0)


# ----------------------------------------------------------------------------- scatter family
REDUCTIONS = ["sum", "prod", "mean", "amax", "amin"]


@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_reduce_matches_torch(reduce, include_self, dim):
    torch = _torch()
    rng = np.random.default_rng(3)
    base = rng.permutation(12).reshape(3, 4) * 0.5 + 0.25  # distinct from every src value
    index = np.array([[0, 2, 0, 1], [2, 2, 0, 1]]) if dim == 0 else np.array([[0, 3], [3, 3]])
    # src of index's shape: PyTorch's backward assumes it (a larger src is cut to index's shape)
    src_values = (rng.permutation(12) * 0.5 - 0.5)[: index.size].reshape(index.shape)
    theirs, ours = _pair(base)
    theirs_src, ours_src = _pair(src_values)
    expected = theirs.scatter_reduce(
        dim, torch.tensor(index), theirs_src, reduce, include_self=include_self
    )
    got = ours.scatter_reduce(dim, ta.tensor(index), ours_src, reduce, include_self=include_self)
    _same(expected, got)
    _backward_both(expected, got)
    _same(theirs.grad, ours.grad)
    _same(theirs_src.grad, ours_src.grad)


def test_scatter_reduce_ties_share_the_gradient_with_self():
    torch = _torch()
    theirs, ours = _pair(np.full((2, 3), 2.0))
    theirs_src, ours_src = _pair(np.array([[2.0, 1.0, 2.0]]))
    index = np.array([[0, 1, 0]])
    expected = theirs.scatter_reduce(0, torch.tensor(index), theirs_src, "amax")
    got = ours.scatter_reduce(0, ta.tensor(index), ours_src, "amax")
    _backward_both(expected, got)
    _same(theirs.grad, ours.grad)
    _same(theirs_src.grad, ours_src.grad)


def test_scatter_reduce_of_integers_and_a_smaller_index():
    torch = _torch()
    base, src = np.arange(12).reshape(3, 4), np.arange(6).reshape(2, 3) + 1
    index = np.array([[1, 0], [2, 1]])
    for reduce in REDUCTIONS:
        expected = torch.tensor(base).scatter_reduce(1, torch.tensor(index), torch.tensor(src),
                                                     reduce)  # fmt: skip
        got = ta.tensor(base).scatter_reduce(1, ta.tensor(index), ta.tensor(src), reduce)
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
        assert got.dtype == ta.tensor(base).dtype


def test_scatter_reduce_errors():
    x, index, src = ta.zeros(3, 4), ta.tensor([[0, 1]]), ta.ones(1, 2)
    with pytest.raises(RuntimeError, match="reduce argument"):
        x.scatter_reduce(0, index, src, "max")
    with pytest.raises(IndexError, match="out of bounds"):
        x.scatter_reduce(0, ta.tensor([[3, 0]]), src, "sum")
    with pytest.raises(RuntimeError, match="index"):
        x.scatter_reduce(0, ta.tensor([[0.0, 1.0]]), src, "sum")
    with pytest.raises(RuntimeError, match="ndim"):
        x.scatter_reduce(0, ta.tensor([0, 1]), src, "sum")
    with pytest.raises(TypeError, match="src"):
        x.scatter_reduce(0, index, 1.0, "sum")


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
def test_scatter_value_keyword_and_reduce_match_torch():
    torch = _torch()
    base = np.arange(6.0).reshape(2, 3)
    index = np.array([[0, 1, 0], [1, 0, 1]])
    src = np.arange(6.0).reshape(2, 3) + 1
    unique = np.array([[0, 1, 0]])
    np.testing.assert_array_equal(
        ta.tensor(base).scatter(0, ta.tensor(unique), value=9.5).numpy(),
        torch.tensor(base).scatter(0, torch.tensor(unique), value=9.5).numpy(),
    )
    for reduce in ("add", "multiply"):
        expected = torch.tensor(base).scatter(0, torch.tensor(index), torch.tensor(src),
                                              reduce=reduce)  # fmt: skip
        got = ta.tensor(base).scatter(0, ta.tensor(index), ta.tensor(src), reduce=reduce)
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
        expected = torch.tensor(base).scatter(0, torch.tensor(index), 2.0, reduce=reduce)
        got = ta.tensor(base).scatter(0, ta.tensor(index), 2.0, reduce=reduce)
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
    with pytest.raises(RuntimeError, match="add or multiply"):
        ta.tensor(base).scatter(0, ta.tensor(index), ta.tensor(src), reduce="sum")
    with pytest.raises(TypeError, match="exactly one"):
        ta.tensor(base).scatter(0, ta.tensor(index), ta.tensor(src), value=1.0)


def test_in_place_scatter_forms_match_torch():
    torch = _torch()
    base, index = np.arange(6.0).reshape(2, 3), np.array([[0, 1, 0], [1, 0, 1]])
    src = np.arange(6.0).reshape(2, 3) + 1
    theirs, ours = torch.tensor(base), ta.tensor(base)
    theirs.scatter_(0, torch.tensor(index), torch.tensor(src), reduce="multiply")
    assert ours.scatter_(0, ta.tensor(index), ta.tensor(src), reduce="multiply") is ours
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    theirs.scatter_(1, torch.tensor([[2], [0]]), value=-1.0)
    ours.scatter_(1, ta.tensor([[2], [0]]), value=-1.0)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    theirs.scatter_reduce_(0, torch.tensor(index), torch.tensor(src), "amin", include_self=False)
    ours.scatter_reduce_(0, ta.tensor(index), ta.tensor(src), "amin", include_self=False)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert ours._version == 3


@pytest.mark.parametrize("accumulate", [True, False])
def test_index_put_matches_torch(accumulate):
    torch = _torch()
    rows, cols = np.array([0, 2, 0, 1]), np.array([1, 3, 1, 0])
    if not accumulate:  # a repeated place is undefined in PyTorch without accumulate
        rows, cols = rows[1:], cols[1:]
    theirs, ours = _pair(np.arange(12.0).reshape(3, 4))
    theirs_values, ours_values = _pair(np.arange(len(rows), dtype=np.float64) + 0.5)
    key = (torch.tensor(rows), torch.tensor(cols))
    expected = theirs.index_put(key, theirs_values, accumulate=accumulate)
    got = ours.index_put((ta.tensor(rows), ta.tensor(cols)), ours_values, accumulate=accumulate)
    _same(expected, got)
    _backward_both(expected, got)
    _same(theirs.grad, ours.grad)
    _same(theirs_values.grad, ours_values.grad)


def test_index_put_in_place_broadcasts_a_value_and_checks_bounds():
    x = ta.zeros(3, 4)
    assert x.index_put_((ta.tensor([0, 2]),), ta.tensor(5.0)) is x
    assert x.sum().item() == 40.0 and x._version == 1
    x.index_put_((ta.tensor([1, 1]), ta.tensor([2, 2])), ta.tensor(1.0), accumulate=True)
    assert x[1, 2].item() == 2.0
    with pytest.raises(IndexError):
        x.index_put((ta.tensor([3]),), ta.tensor(1.0))
    with pytest.raises(TypeError, match="tuple"):
        x.index_put(ta.tensor([0]), ta.tensor(1.0))


# ---------------------------------------------------------------------------------------- pad
PADS = [
    ((2, 5), (2, 3)),
    ((1, 3, 4), (1, 2, 3, 1)),
    ((2, 1, 3, 4, 5), (1, 2, 0, 1, 2, 2)),
    ((1, 3, 4), (-1, 2)),
    ((1, 3, 4), (2, -1)),
    ((2, 3, 4), (3, 3)),
]


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape, pad", PADS, ids=[str(p) for _, p in PADS])
def test_pad_modes_match_torch(mode, shape, pad):
    torch = _torch()
    theirs, ours = _pair(np.random.default_rng(4).standard_normal(shape))
    try:
        expected = torch.nn.functional.pad(theirs, pad, mode=mode)
    except (RuntimeError, NotImplementedError) as exc:
        with pytest.raises(type(exc)):
            F.pad(ours, pad, mode=mode)
        return
    for pad_function in (F.pad, ta.pad):
        got = pad_function(ours, pad, mode=mode)
        _same(expected, got)
    _backward_both(expected, got)
    _same(theirs.grad, ours.grad)


@pytest.mark.parametrize(
    "shape, pad, mode, error",
    [
        ((4,), (1, 1), "reflect", NotImplementedError),  # a 1-D input: no channel dim
        ((3, 4), (1, 1, 1, 1), "replicate", NotImplementedError),  # two dims padded need 3-D
        ((1, 3, 4), (1,), "circular", RuntimeError),  # odd length
        ((1, 3, 4), (4, 0), "reflect", RuntimeError),  # reflect needs pad < size
        ((1, 3, 4), (5, 0), "circular", RuntimeError),  # wraps around more than once
        ((1, 3, 0), (1, 1), "replicate", RuntimeError),  # an empty dim
        ((1, 3, 4), (1, 1), "mirror", NotImplementedError),  # no such mode
    ],
)
def test_pad_mode_errors_are_pytorchs_types(shape, pad, mode, error):
    with pytest.raises(error, match="pad"):
        F.pad(ta.zeros(*shape), pad, mode=mode)
    torch = pytest.importorskip("torch")
    with pytest.raises(error):
        torch.nn.functional.pad(torch.zeros(*shape), pad, mode=mode)


def test_pad_modes_copy():
    x = ta.arange(12.0).reshape(1, 3, 4)
    y = F.pad(x, (1, 1), mode="replicate")
    with ta.no_grad():
        y.add_(1.0)
    assert x.sum().item() == 66.0


# ----------------------------------------------------------------------------------- division
@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_div_rounding_mode_matches_torch_floats(mode):
    torch = _torch()
    theirs_a, ours_a = _pair(np.array([-7.0, 7.0, -7.5, 3.0, 0.5]))
    theirs_b, ours_b = _pair(np.array([2.0, -2.0, 2.0, 3.0, -0.25]))
    expected = torch.div(theirs_a, theirs_b, rounding_mode=mode)
    for got in (
        ta.div(ours_a, ours_b, rounding_mode=mode),
        ours_a.divide(ours_b, rounding_mode=mode),
    ):
        _same(expected, got)
    _backward_both(expected, got)
    _same(theirs_a.grad, ours_a.grad)
    _same(theirs_b.grad, ours_b.grad)


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_div_rounding_mode_of_integers_matches_torch(mode):
    torch = _torch()
    a, b = np.array([-7, 7, -8, 9, 0]), np.array([2, -2, 3, 3, -5])
    expected = torch.div(torch.tensor(a), torch.tensor(b), rounding_mode=mode)
    got = ta.tensor(a).div(ta.tensor(b), rounding_mode=mode)
    np.testing.assert_allclose(got.numpy(), expected.numpy())
    assert str(expected.dtype).rsplit(".", 1)[-1] == ta.backend.dtype_name(got.dtype)
    scalar = torch.div(torch.tensor(a), 2, rounding_mode=mode)
    np.testing.assert_allclose(ta.tensor(a).div(2, rounding_mode=mode).numpy(), scalar.numpy())


def test_div_errors():
    with pytest.raises(RuntimeError, match="rounding_mode"):
        ta.ones(2).div(2.0, rounding_mode="round")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        ta.tensor([1, 2]).div(0, rounding_mode="trunc")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        ta.tensor([1, 2]).fmod(ta.tensor([1, 0]))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fmod_takes_the_dividends_sign_and_torchs_gradient(dtype):
    torch = _torch()
    theirs_a, ours_a = _pair(np.array([-7.0, 7.0, 5.0, -0.5, 4.25]), dtype)
    theirs_b, ours_b = _pair(np.array([2.0, -3.0, 2.5, 0.3, -1.5]), dtype)
    expected, got = torch.fmod(theirs_a, theirs_b), ta.fmod(ours_a, ours_b)
    _same(expected, got)
    assert (got.detach().numpy() * np.array([-7.0, 7.0, 5.0, -0.5, 4.25]) >= 0).all()
    _backward_both(expected, got)
    _same(theirs_a.grad, ours_a.grad)
    _same(theirs_b.grad, ours_b.grad)
    ints = torch.fmod(torch.tensor([-7, 7, -8]), 3)
    np.testing.assert_array_equal(ta.tensor([-7, 7, -8]).fmod(3).numpy(), ints.numpy())
    np.testing.assert_array_equal(
        ta.tensor([-7.0, 7.0]).remainder(3.0).numpy(), [2.0, 1.0]
    )  # remainder keeps the divisor's sign


def test_copysign_matches_torch_including_zeros_and_integers():
    torch = _torch()
    a, b = np.array([1.0, 0.0, -2.0, -0.0, 3.0]), np.array([-1.0, -1.0, 3.0, 2.0, -0.0])
    theirs_a, ours_a = _pair(a)
    theirs_b, ours_b = _pair(b)
    expected, got = torch.copysign(theirs_a, theirs_b), ours_a.copysign(ours_b)
    np.testing.assert_array_equal(np.signbit(got.detach().numpy()), np.signbit(b))
    _same(expected, got)
    _backward_both(expected, got)
    _same(theirs_a.grad, ours_a.grad)
    _same(theirs_b.grad, ours_b.grad)
    ints = ta.copysign(ta.tensor([1, -2]), -1.0)
    assert ints.tolist() == [-1.0, -2.0] and ta.backend.dtype_name(ints.dtype) == "float32"


def test_add_sub_alpha_match_torch():
    torch = _torch()
    a, b = np.arange(4.0), np.ones(4)
    for name in ("add", "sub"):
        expected = getattr(torch, name)(torch.tensor(a), torch.tensor(b), alpha=3)
        np.testing.assert_array_equal(getattr(ta, name)(ta.tensor(a), ta.tensor(b), alpha=3)
                                      .numpy(), expected.numpy())  # fmt: skip
        method = getattr(ta.tensor(a), name)(ta.tensor(b), alpha=0.5)
        np.testing.assert_array_equal(
            method.numpy(), getattr(torch.tensor(a), name)(torch.tensor(b), alpha=0.5).numpy()
        )
    with pytest.raises(RuntimeError, match="alpha"):
        ta.tensor([1, 2]).add(ta.tensor([1, 1]), alpha=0.5)
    assert ta.subtract(ta.tensor([3.0]), 1.0).item() == 2.0


# ------------------------------------------------------------------------------- reductions
@pytest.mark.parametrize("name", ["std_mean", "var_mean"])
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"dim": 1}, {"dim": (0, 2), "keepdim": True}, {"dim": 0, "correction": 0},
     {"dim": -1, "unbiased": False}],
)  # fmt: skip
def test_std_mean_var_mean_match_torch(name, kwargs):
    torch = _torch()
    theirs, ours = _pair(np.random.default_rng(5).standard_normal((3, 4, 5)))
    expected, got = getattr(torch, name)(theirs, **kwargs), getattr(ta, name)(ours, **kwargs)
    assert isinstance(got, tuple) and len(got) == 2
    for e, g in zip(expected, got, strict=True):
        assert tuple(e.shape) == g.shape
        _same(e, g, atol=1e-12)
    (expected[0] * 2 + expected[1]).sum().backward()
    (got[0] * 2 + got[1]).sum().backward()
    _same(theirs.grad, ours.grad, atol=1e-12)


def test_norm_and_normalize_for_any_p_match_torch():
    torch = _torch()
    values = np.random.default_rng(6).standard_normal((3, 4))
    for p in (0.5, 1, 1.5, 2, 3, math.inf, -math.inf):
        for dim in (0, 1, -1):
            theirs, ours = _pair(values)
            expected = torch.nn.functional.normalize(theirs, p=p, dim=dim)
            got = F.normalize(ours, p=p, dim=dim)
            _same(expected, got, atol=1e-12)
            _backward_both(expected, got)
            _same(theirs.grad, ours.grad, atol=1e-10)
    for p in (0.5, 1.5, 3):  # zero elements and a zero norm: a zero gradient, not NaN
        theirs, ours = _pair(np.array([[0.0, 0.0, 0.0], [3.0, 0.0, 4.0]]))
        theirs.norm(p=p, dim=1).sum().backward()
        ours.norm(p=p, dim=1).sum().backward()
        _same(theirs.grad, ours.grad, atol=1e-12)
    zero_norm = torch.tensor(values).norm(p=0).item()
    assert ta.tensor(values).norm(p=0).item() == zero_norm
    eps = F.normalize(ta.zeros(2, 3), p=3.0, dim=1, eps=1e-3)
    assert eps.abs().sum().item() == 0.0


@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.0, -1.5])
def test_celu_matches_torch(alpha):
    torch = _torch()
    theirs, ours = _pair(np.array([-30.0, -1.0, 0.0, 0.5, 40.0]))
    expected = torch.nn.functional.celu(theirs, alpha)
    got = F.celu(ours, alpha)
    _same(expected, got, atol=1e-12)
    _backward_both(expected, got)
    _same(theirs.grad, ours.grad, atol=1e-12)
    with pytest.raises(RuntimeError, match="celu"):
        F.celu(ours, 0.0)


# ------------------------------------------------------------------------------------- shape
@pytest.mark.parametrize(
    "dimension, size, step", [(0, 1, 1), (1, 2, 1), (2, 3, 1), (2, 2, 2), (-1, 1, 3), (2, 4, 1),
                              (2, 0, 1), (1, 3, 5)]
)  # fmt: skip
def test_unfold_matches_torch(dimension, size, step):
    theirs, ours = _pair(np.random.default_rng(7).standard_normal((2, 3, 4)))
    expected, got = theirs.unfold(dimension, size, step), ours.unfold(dimension, size, step)
    assert tuple(expected.shape) == got.shape
    _same(expected, got)
    if got.numel():
        _backward_both(expected, got)
        _same(theirs.grad, ours.grad)


def test_unfold_is_a_copy_and_checks_its_arguments():
    """PyTorch's unfold is a view; tinyattn's is a copy (docs/from-pytorch.md)."""
    x = ta.arange(6.0)
    windows = x.unfold(0, 2, 2)
    with ta.no_grad():
        windows.add_(10.0)
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert ta.tensor(3.0).unfold(0, 1, 1).tolist() == [3.0]
    with pytest.raises(RuntimeError, match="step"):
        x.unfold(0, 2, 0)
    with pytest.raises(RuntimeError, match="maximum size"):
        x.unfold(0, 7, 1)
    with pytest.raises(ValueError, match="unfold"):
        x.unfold(1, 1, 1)


def test_unflatten_matches_torch_and_is_a_view():
    torch = _torch()
    x = torch.arange(24.0).reshape(2, 12)
    ours = ta.arange(24.0).reshape(2, 12)
    for dim, sizes in ((1, (3, 4)), (1, (2, -1)), (-1, (12,)), (0, (1, 2))):
        assert ours.unflatten(dim, sizes).shape == tuple(x.unflatten(dim, sizes).shape)
    view = ours.unflatten(1, (3, 4))
    with ta.no_grad():
        view[0, 0, 0] = -1.0
    assert ours[0, 0].item() == -1.0
    with pytest.raises(RuntimeError, match="unflatten"):
        ours.unflatten(1, (5, -1))
    with pytest.raises(RuntimeError):
        x.unflatten(1, (5, -1))


def test_roll_forms_and_errors_match_torch():
    torch = _torch()
    theirs, ours = torch.arange(24.0).reshape(2, 3, 4), ta.arange(24.0).reshape(2, 3, 4)
    for args in (((1, 2), (0, 1)), ((-1, 5, 2), (2, 1, 0)), (3,), ((7,),), (1, -1), (-2, (2,))):
        np.testing.assert_array_equal(ours.roll(*args).numpy(), theirs.roll(*args).numpy())
    for args in (((1, 2),), ((1, 2), 0), (1, (0, 1))):
        with pytest.raises(RuntimeError, match="roll"):
            ours.roll(*args)
        with pytest.raises(RuntimeError):
            theirs.roll(*args)


# ---------------------------------------------------------------------- init-style and dtypes
def test_normal_and_uniform_in_place_follow_the_seed_and_torchs_leaf_rule():
    ta.manual_seed(0)
    x = ta.empty(2000, dtype="float64")
    assert x.normal_(mean=3.0, std=0.5) is x
    assert abs(x.mean().item() - 3.0) < 0.05 and abs(x.std().item() - 0.5) < 0.05
    x.uniform_(-2.0, -1.0)
    assert -2.0 <= x.min().item() and x.max().item() < -1.0
    x.uniform_(**{"from": 5.0, "to": 6.0})
    assert 5.0 <= x.min().item() and x.max().item() < 6.0
    ta.manual_seed(1)
    first = ta.zeros(4).normal_().tolist()
    ta.manual_seed(1)
    assert ta.zeros(4).normal_().tolist() == first
    leaf = ta.zeros(3, requires_grad=True)
    for fill in (leaf.normal_, leaf.uniform_):
        with pytest.raises(RuntimeError, match="leaf"):
            fill()
    with ta.no_grad():
        leaf.uniform_(1.0, 2.0)
    assert leaf.requires_grad and leaf.min().item() >= 1.0
    with pytest.raises(TypeError, match="normal_"):
        ta.zeros(3, dtype="int64").normal_()
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="leaf"):
        torch.zeros(3, requires_grad=True).normal_()


def test_is_floating_point():
    assert ta.ones(2).is_floating_point() and ta.ones(2, dtype="float16").is_floating_point()
    assert not ta.tensor([1, 2]).is_floating_point() and not ta.tensor([True]).is_floating_point()


FLOAT_FIELDS = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution")


def test_finfo_and_iinfo_match_torch():
    torch = _torch()
    for name in ("float16", "float32", "float64"):
        ours, theirs = ta.finfo(getattr(ta, name)), torch.finfo(getattr(torch, name))
        for field in FLOAT_FIELDS:
            assert getattr(ours, field) == getattr(theirs, field), (name, field)
    assert ta.finfo().eps == torch.finfo().eps
    assert ta.finfo(ta.ones(1, dtype="float64").dtype).bits == 64
    for name in ("int8", "int16", "int32", "int64", "uint8"):
        ours, theirs = ta.iinfo(getattr(ta, name)), torch.iinfo(getattr(torch, name))
        assert (ours.bits, ours.max, ours.min) == (theirs.bits, theirs.max, theirs.min)
    with pytest.raises(TypeError, match="finfo"):
        ta.finfo(ta.int64)
    with pytest.raises(TypeError, match="iinfo"):
        ta.iinfo(ta.float32)
    with pytest.raises(TypeError, match="iinfo"):
        ta.iinfo(ta.bool)


def test_scatter_reduce_amax_without_self_gives_the_tie_with_self_the_whole_gradient():
    """A known difference (docs/from-pytorch.md): PyTorch's backward still counts the excluded
    own value among the ties and hands the source element half the gradient."""
    x = ta.full((2, 2), 2.0, dtype="float64", requires_grad=True)
    src = ta.tensor([[2.0, 1.0]], dtype="float64", requires_grad=True)
    out = x.scatter_reduce(0, ta.tensor([[1, 1]]), src, "amax", include_self=False)
    out.sum().backward()
    assert src.grad.tolist() == [[1.0, 1.0]]
    assert x.grad.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    torch = pytest.importorskip("torch")
    theirs = torch.full((2, 2), 2.0, dtype=torch.float64, requires_grad=True)
    theirs_src = torch.tensor([[2.0, 1.0]], dtype=torch.float64, requires_grad=True)
    theirs.scatter_reduce(
        0, torch.tensor([[1, 1]]), theirs_src, "amax", include_self=False
    ).sum().backward()
    assert theirs_src.grad.tolist() == [[0.5, 1.0]]


def test_in_place_division_forms_match_torch():
    torch = _torch()
    a, b = np.array([-7.0, 7.5, 5.0]), np.array([2.0, -2.0, 1.5])
    for name, kwargs in (("div_", {"rounding_mode": "floor"}), ("div_", {"rounding_mode": "trunc"}),
                         ("div_", {}), ("fmod_", {}), ("copysign_", {})):  # fmt: skip
        theirs, ours = torch.tensor(a), ta.tensor(a)
        getattr(theirs, name)(torch.tensor(b), **kwargs)
        assert getattr(ours, name)(ta.tensor(b), **kwargs) is ours
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    ints = ta.tensor([-7, 7])
    ints.div_(2, rounding_mode="floor")
    assert ints.tolist() == [-4, 3]
    with pytest.raises(RuntimeError, match="div_"):
        ta.tensor([-7, 7]).div_(2)  # a float result does not fit an integer tensor


def test_scatter_and_index_writes_refuse_another_dtype_as_pytorch():
    """scatter, scatter_add, scatter_reduce, index_add and index_put cast neither way: a src of
    another dtype is a RuntimeError in PyTorch and here (``x[key] = v`` does cast, as there)."""
    torch = pytest.importorskip("torch")
    calls = [
        lambda m, x, i, s: x.scatter(0, i, s),
        lambda m, x, i, s: x.scatter_add(0, i, s),
        lambda m, x, i, s: x.scatter_reduce(0, i, s, reduce="amax"),
        lambda m, x, i, s: x.index_add(0, i, s),
        lambda m, x, i, s: x.index_put((i,), s),
    ]
    for call in calls:
        for m in (ta, torch):
            x, i = m.zeros(3, dtype=m.float16), m.tensor([2, 0])
            with pytest.raises(RuntimeError):
                call(m, x, i, m.ones(2, dtype=m.float32))
            assert call(m, x, i, m.ones(2, dtype=m.float16)).dtype == m.float16
    x = ta.zeros(3, dtype=ta.float16)
    x[ta.tensor([1])] = ta.ones(1, dtype=ta.float64)
    assert x.dtype == ta.float16 and x.tolist() == [0.0, 1.0, 0.0]
