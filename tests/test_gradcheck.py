"""The gradient checker itself: correct ops pass in float32 and float64 with the defaults, planted
bugs fail with a report that names the culprit, and the checker leaves its inputs as it found them.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import tinyattn as ta
from tinyattn.backend import dtype_name, namespace


def _tensor(shape, device, dtype="float64", seed=0, low=None):
    host = np.random.default_rng(seed).standard_normal(shape)
    if low is not None:
        host = np.abs(host) + low
    return ta.tensor(host, dtype=dtype, device=device, requires_grad=True)


# ------------------------------------------------------------------------------- planted bugs
class ZeroSoftmax(ta.Function):
    """Softmax whose backward returns zeros: passes a checker that contracts with all-ones."""

    def forward(self, x):
        xp = namespace(x)
        e = xp.exp(x - xp.max(x, axis=-1, keepdims=True))
        return e / xp.sum(e, axis=-1, keepdims=True)

    def backward(self, grad):
        return grad * 0.0


class NoTransposeMatMul(ta.Function):
    """a @ b with dL/db = a @ g instead of a^T @ g (square shapes, so the shapes still agree)."""

    def forward(self, a, b):
        return namespace(a).matmul(a, b)

    def backward(self, grad):
        a, b = self.inputs
        return grad @ b.mT, a @ grad


class WrongBroadcastAdd(ta.Function):
    """a + b (b broadcast over rows) whose dL/db takes one row instead of summing the rows."""

    def forward(self, a, b):
        return a + b

    def backward(self, grad):
        return grad, grad[0]


class ScaledExp(ta.Function):
    """exp whose backward is 1% too large."""

    def forward(self, x):
        return namespace(x).exp(x)

    def backward(self, grad):
        return grad * self.output * 1.01


class CubeWrongSecond(ta.Function):
    """y = x**3 with a correct first derivative 3x^2 computed from constants (so its own
    derivative, the second derivative of y, is missing: it comes out as 0 instead of 6x)."""

    def forward(self, x):
        return x * x * x

    def backward(self, grad):
        x = self.inputs[0]
        return grad * x.constant(3.0 * x.array * x.array)


PLANTED = [
    ("zero softmax backward", lambda x, y: ZeroSoftmax.apply(x), "input 0"),
    ("missing transpose", lambda x, y: NoTransposeMatMul.apply(x, y), "input 1"),
    ("wrong broadcast sum", lambda x, y: WrongBroadcastAdd.apply(x, y[0]), "input 1"),
    ("1% scale error", lambda x, y: ScaledExp.apply(x) + y, "input 0"),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("fast", [False, True], ids=["elementwise", "fast"])
@pytest.mark.parametrize("name,fn,culprit", PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_bug_is_caught_and_named(device, dtype, fast, name, fn, culprit):
    x, y = _tensor((3, 3), device, dtype, seed=1), _tensor((3, 3), device, dtype, seed=2)
    with pytest.raises(ta.GradcheckError) as info:
        ta.gradcheck(fn, (x, y), fast=fast)
    report = str(info.value)
    assert culprit in report
    for field in (
        "worst at index",
        "analytic",
        "numeric",
        "abs error",
        "rel error",
        "atol",
        "rtol",
    ):
        assert field in report


def test_wrong_broadcast_sum_is_caught_by_the_engine_shape_check(device):
    class SumDropped(ta.Function):
        def forward(self, a, b):
            return a + b

        def backward(self, grad):
            return grad, grad  # grad of b should be summed to b's shape (3,)

    x, b = _tensor((2, 3), device), _tensor((3,), device)
    with pytest.raises(
        RuntimeError, match=r"SumDropped.backward returned a gradient of shape \(2, 3\)"
    ):
        ta.gradcheck(lambda x, b: SumDropped.apply(x, b), (x, b))


def test_wrong_second_derivative_is_caught_by_gradgradcheck(device):
    x = _tensor((4,), device)
    assert ta.gradcheck(lambda x: CubeWrongSecond.apply(x), (x,))
    with pytest.raises(ta.GradcheckError, match="gradgradcheck failed"):
        ta.gradgradcheck(lambda x: CubeWrongSecond.apply(x), (x,))
    assert ta.gradgradcheck(lambda x: x * x * x, (x,))


def test_report_names_a_parameter(device):
    weight = _tensor((3, 3), device, seed=3)
    x = ta.tensor(np.random.default_rng(1).standard_normal((3, 3)), device=device)
    with pytest.raises(ta.GradcheckError, match=r"parameter 'weight' \(shape \(3, 3\)"):
        ta.gradcheck(lambda x: NoTransposeMatMul.apply(x, weight), (x,), params={"weight": weight})


def test_report_is_exact_about_the_worst_element(device):
    x = _tensor((2, 3), device, seed=4)
    with pytest.raises(ta.GradcheckError) as info:
        ta.gradcheck(lambda x: ScaledExp.apply(x), (x,))
    report = str(info.value)
    index = tuple(int(i) for i in re.search(r"worst at index \(([\d, ]+)\)", report)[1].split(","))
    analytic = float(re.search(r"analytic\s+= (\S+)", report)[1])
    numeric = float(re.search(r"numeric\s+= (\S+)", report)[1])
    assert analytic == pytest.approx(1.01 * numeric, rel=1e-6)
    assert 0 <= index[0] < 2 and 0 <= index[1] < 3
    assert "6 of 6 element(s) differ" in report


# ---------------------------------------------------------------------------- correct ops pass
CORRECT = [
    ("tanh matmul", lambda a, b: (a @ b).tanh()),
    ("softmax composed", lambda a, b: (a @ b).exp() / (a @ b).exp().sum(axis=-1, keepdims=True)),
    ("broadcast product", lambda a, b: a[:, :1] * b + a.sum(axis=0)),
    ("sigmoid mean", lambda a, b: (a * 3.0).sigmoid().mean(axis=1) * b.sum()),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("fast", [False, True], ids=["elementwise", "fast"])
@pytest.mark.parametrize("name,fn", CORRECT, ids=[c[0] for c in CORRECT])
def test_correct_ops_pass_with_default_tolerances(device, dtype, fast, name, fn):
    a, b = _tensor((3, 3), device, dtype, seed=5), _tensor((3, 3), device, dtype, seed=6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ta.gradcheck(fn, (a, b), fast=fast) is True


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gradgradcheck_passes_on_correct_ops(device, dtype):
    a, b = _tensor((2, 3), device, dtype, seed=7), _tensor((3, 2), device, dtype, seed=8)
    assert ta.gradgradcheck(lambda a, b: (a @ b).tanh() * a.sum(), (a, b))


def test_inputs_and_params_are_restored(device):
    x = _tensor((2, 2), device, "float32")
    w = _tensor((2, 2), device, "float32", seed=9)
    before_x, before_w = x.detach().numpy(), w.detach().numpy()
    ta.gradcheck(lambda x: x @ w, (x,), params=[w])
    assert dtype_name(x.dtype) == dtype_name(w.dtype) == "float32"
    np.testing.assert_array_equal(x.detach().numpy(), before_x)
    np.testing.assert_array_equal(w.detach().numpy(), before_w)
    assert x.grad is None and w.grad is None


def test_fast_mode_is_deterministic_for_a_seed(device):
    x = _tensor((4,), device)
    outcomes = []
    for _ in range(2):
        try:
            ta.gradcheck(lambda x: ScaledExp.apply(x), (x,), fast=True, seed=3)
            outcomes.append("pass")
        except ta.GradcheckError as error:
            outcomes.append(str(error))
    assert outcomes[0] == outcomes[1]


def test_numerical_grad_matches_known_derivative(device):
    x = _tensor((5,), device, low=0.5)
    (numeric,) = ta.numerical_grad(lambda x: x.log(), (x,))
    cotangent = np.random.default_rng(0).standard_normal(5)
    np.testing.assert_allclose(numeric.detach().numpy(), cotangent / x.detach().numpy(), rtol=1e-7)


def test_no_target_is_an_error(device):
    x = ta.tensor([1.0, 2.0], device=device)
    with pytest.raises(ValueError, match="no input requires grad"):
        ta.gradcheck(lambda x: x * 2.0, (x,))
