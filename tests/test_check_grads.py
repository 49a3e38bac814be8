"""Planted bugs that one input misses and `check_grads` finds; kinks that are not bugs.

Each planted op is written with the public ``ta.Function`` API, as a user would write it. Its
bug lives where a hand-picked input rarely goes: negative inputs (wrong sign, wrong slope),
large ones (a saturation shortcut), float32 (a derivative by forward differences that only
float64 resolves), or broadcast shapes. The single-input check runs at the first standard-normal
draw after ``ta.manual_seed(0)`` (a scalar, 0.126: positive, as one draw is half the time), in
float64, the dtype recommended for checking; broadcast-only bugs at two equal shapes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyattn as ta
from tinyattn.backend import dtype_name, namespace
from tinyattn.testing import broadcastable_shapes, check_grads, shapes, tensors

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------ planted bugs
class SignedSquare(ta.Function):
    """y = x |x|;  dL/dx = 2 |x| g.  Planted: 2 x g, the wrong sign for negative x."""

    def forward(self, x):
        return x * namespace(x).abs(x)

    def backward(self, grad):
        return grad * 2.0 * self.inputs[0]


class SaturatingTanh(ta.Function):
    """y = tanh x;  dL/dx = (1 - y^2) g.  Planted: 0 for |x| >= 2.5 ("saturated")."""

    def forward(self, x):
        return namespace(x).tanh(x)

    def backward(self, grad):
        x, y = self.inputs[0], self.output
        return ta.where(x.abs() < 2.5, grad * (1.0 - y * y), 0.0)


class ForwardDifferenceExp(ta.Function):
    """y = exp x;  dL/dx = exp(x) g.  Planted: exp'(x) by a forward difference, h = 1e-8."""

    def forward(self, x):
        return namespace(x).exp(x)

    def backward(self, grad):
        x = self.inputs[0]
        return grad * ((x + 1e-8).exp() - x.exp()) * 1e8  # float32: x + 1e-8 == x mostly


class LeakyRelu(ta.Function):
    """y = x for x > 0, 0.1 x otherwise;  dL/dx = g or 0.1 g.  Planted: slope 0.01 below 0."""

    def forward(self, x):
        return namespace(x).where(x > 0, x, 0.1 * x)

    def backward(self, grad):
        x = self.inputs[0]
        return ta.where(x > 0, grad, 0.01 * grad)


class BroadcastMul(ta.Function):
    """y = a * b (broadcast);  dL/da = sum_to(g b), dL/db = sum_to(g a).
    Planted: a broadcast operand's gradient is averaged over the broadcast axes, not summed."""

    def forward(self, a, b):
        return a * b

    def backward(self, grad):
        a, b = self.inputs
        return _averaged_to(grad * b, a.shape), _averaged_to(grad * a, b.shape)


def _averaged_to(grad: ta.Tensor, shape: tuple) -> ta.Tensor:
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1
    )
    return grad.mean(axis=axes, keepdims=True).reshape(shape) if axes else grad


# (name, fn, strategies for check_grads, single-input shapes)
PLANTED = [
    ("sign-dependent", lambda x: SignedSquare.apply(x), [()]),
    ("magnitude-dependent", lambda x: SaturatingTanh.apply(x), [()]),
    ("float64-only", lambda x: ForwardDifferenceExp.apply(x), [()]),
    ("slope for negatives", lambda x: LeakyRelu.apply(x), [()]),
    ("broadcast-only", lambda a, b: BroadcastMul.apply(a, b), [(3,), (3,)]),
]


def _strategies(name: str, shape_list: list, device: str) -> list:
    if name == "broadcast-only":
        return [tensors(s, device=device) for s in broadcastable_shapes(2)]
    return [tensors(shapes(0, 2, max_side=3), device=device) for _ in shape_list]


@pytest.mark.parametrize("name,fn,shape_list", PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_bug_is_missed_by_one_standard_normal_input(device, name, fn, shape_list):
    ta.manual_seed(0)
    inputs = [
        ta.randn(shape, dtype="float64", device=device, requires_grad=True) for shape in shape_list
    ]
    assert ta.gradcheck(fn, inputs)


@pytest.mark.parametrize("name,fn,shape_list", PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_bug_is_caught_by_check_grads(device, name, fn, shape_list):
    with pytest.raises(ta.GradcheckError) as caught:
        check_grads(fn, *_strategies(name, shape_list, device))
    report = str(caught.value)
    assert "Hypothesis shrank the failing input to:" in report
    assert "To reproduce" in report and "seed=0" in report
    # The shrunk input is attached and really fails on its own.
    with pytest.raises(ta.GradcheckError):
        ta.gradcheck(fn, caught.value.inputs, allow_kinks=True)


def test_float64_only_bug_is_caught_in_float32_only(device):
    fn = PLANTED[2][1]
    check_grads(fn, tensors((3,), device=device), dtype="float64", max_examples=30)
    with pytest.raises(ta.GradcheckError, match="check_grads failed in float32"):
        check_grads(fn, tensors((3,), device=device))


def test_report_shows_the_shrunk_input_values():
    with pytest.raises(ta.GradcheckError) as caught:
        check_grads(lambda x: SaturatingTanh.apply(x), tensors((3,)))
    error = caught.value
    (shrunk,) = error.inputs
    values = shrunk.detach().numpy().tolist()
    assert f"input 0 (shape (3,), float64): {values!r}" in str(error)
    assert sum(abs(v) >= 2.5 for v in values) == 1  # one saturated element is enough
    assert f"ta.tensor({values!r}, dtype='float64', requires_grad=True)" in str(error)


def test_report_is_deterministic_and_depends_on_the_seed():
    def report(seed):
        with pytest.raises(ta.GradcheckError) as caught:
            check_grads(lambda x: SignedSquare.apply(x), tensors((2, 2)), seed=seed)
        return str(caught.value)

    assert report(0) == report(0)
    assert "seed 1," in report(1)


_DRAWS_SCRIPT = """
import importlib, sys
import tinyattn as ta
from tinyattn.testing import check_grads, tensors

def draws():
    seen = []
    def record(x):
        seen.append(tuple(x.detach().numpy().tolist()))
        return x * x
    check_grads(record, tensors((3,)), max_examples=60, dtype="float64")
    return seen

before = draws()
sys.path.insert(0, sys.argv[1])
importlib.import_module("literals_module")  # a local module full of unusual numbers
print(before == draws(), len(before))
"""


def test_examples_do_not_depend_on_the_modules_the_program_loaded(tmp_path):
    # Hypothesis also draws literals from the source of local modules; check_grads must not,
    # or importing one more module of your own would change the examples a check tries.
    literals = ", ".join(f"{1.5 + k / 7:.6f}" for k in range(40))
    (tmp_path / "literals_module.py").write_text(f"VALUES = ({literals})\n")
    done = subprocess.run(
        [sys.executable, "-c", _DRAWS_SCRIPT, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    same, count = done.stdout.split()
    assert same == "True" and int(count) > 50


def test_no_example_database_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ta.GradcheckError):
        check_grads(lambda x: LeakyRelu.apply(x), tensors((2,)))
    check_grads(lambda x: x.relu(), tensors((2,)), max_examples=5)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------- correct ops with kinks
a_shape, b_shape = broadcastable_shapes(2)
TIE = st.sampled_from([[2.0, 2.0, 2.0, 1.0], [0.0, 0.0, 0.0, 0.0], [-1.0, 3.0, 3.0, -1.0]])
KINKED = [
    ("relu", lambda x: x.relu(), [tensors((2, 3))], 2),
    ("abs", lambda x: x.abs(), [tensors((2, 3))], 2),
    ("clip", lambda x: x.clip(-1.0, 0.5), [tensors((2, 3))], 2),
    ("max with ties", lambda x: x.max(), [tensors((4,), elements=st.sampled_from([0.0, 2.0]))], 2),
    ("max three-way tie", lambda x: x.max(), [TIE.map(lambda v: ta.tensor(v))], 2),
    ("min axis with ties", lambda x: x.min(axis=1), [tensors((2, 3), elements=(-1.0, 1.0))], 2),
    ("maximum", ta.maximum, [tensors(a_shape), tensors(b_shape)], 2),
    ("relu of a difference", lambda a, b: (a - b).relu(), [tensors((3,)), tensors((3,))], 1),
]


@pytest.mark.parametrize("name,fn,strategies,order", KINKED, ids=[k[0] for k in KINKED])
def test_correct_op_with_kinks_passes(name, fn, strategies, order):
    check_grads(fn, *strategies, order=order, max_examples=40)


def test_kinks_are_found_where_the_ops_have_them():
    """The strategies do reach the kinks: a wrong rule at the kink only is caught."""

    class ReluWrongAtZero(ta.Function):
        def forward(self, x):
            return namespace(x).where(x > 0, x, 0.0)

        def backward(self, grad):
            x = self.inputs[0]
            return ta.where(x.abs() <= 0.0, 5.0 * grad, ta.where(x > 0, grad, 0.0 * grad))

    with pytest.raises(ta.GradcheckError, match="straddles a kink") as caught:
        check_grads(lambda x: ReluWrongAtZero.apply(x), tensors((2,)))
    assert 0.0 in caught.value.inputs[0].detach().numpy().tolist()


# ------------------------------------------------------------------------------- max/min ties
def test_max_of_a_three_way_tie_splits_in_thirds_where_differences_see_halves(device):
    """The documented convention: tied extremes share the gradient evenly (PyTorch's amax and
    full-reduction max). Central differences see 1/2 at a three-way tie (the average of the
    one-sided derivatives 1 and 0), so a plain gradcheck fails there; with kinks allowed 1/3
    lies between the one-sided derivatives and passes."""
    x = ta.tensor([2.0, 2.0, 2.0, 1.0], dtype="float64", device=device, requires_grad=True)
    x.max().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1 / 3, 1 / 3, 1 / 3, 0.0], rtol=1e-15)
    (numeric,) = ta.numerical_grad(lambda t: t.max() * 1.0, [x])
    cotangent = np.random.default_rng(0).standard_normal(())
    np.testing.assert_allclose(numeric.numpy(), cotangent * np.array([0.5, 0.5, 0.5, 0.0]))
    with pytest.raises(ta.GradcheckError, match="straddles a kink"):
        ta.gradcheck(lambda t: t.max(), [x])
    assert ta.gradcheck(lambda t: t.max(), [x], allow_kinks=True)
    two_way = ta.tensor([2.0, 2.0, 1.0], dtype="float64", device=device, requires_grad=True)
    assert ta.gradcheck(lambda t: t.max(), [two_way])  # halves: differences agree


def test_tie_convention_matches_torch():
    torch = pytest.importorskip("torch")
    values = [2.0, 2.0, 2.0, 1.0]
    for reduce in (lambda t: t.max(), lambda t: t.amax(), lambda t: t.amax(0)):
        x = torch.tensor(values, dtype=torch.float64, requires_grad=True)
        reduce(x).backward()
        ours = ta.tensor(values, dtype="float64", requires_grad=True)
        ours.max().backward()
        np.testing.assert_allclose(ours.grad.numpy(), x.grad.numpy(), rtol=1e-15)
    # max(dim) returns an index and sends the whole gradient to it: not a split.
    x = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    x.max(0).values.backward()
    assert x.grad.tolist() == [1.0, 0.0, 0.0, 0.0]


# ----------------------------------------------------------------------------- the strategies
@given(tensors(shapes(0, 3), elements=(-1.0, 1.0)))
def test_tensors_respect_shape_dtype_and_elements(x):
    assert x.dtype == ta.tensor(0.0).dtype and x.is_leaf and not x.requires_grad
    values = x.numpy()
    assert values.ndim <= 3 and ((-1.0 <= values) & (values <= 1.0)).all()


@given(tensors((3,), dtype="float64", elements=st.floats(0.01, 5.0), requires_grad=True))
def test_tensors_take_a_float_strategy_and_requires_grad(x):
    assert x.requires_grad and x.is_leaf and x.shape == (3,)
    assert dtype_name(x.dtype) == "float64" and (x.detach().numpy() >= 0.01).all()


@given(tensors(a_shape), tensors(b_shape))
def test_broadcastable_shapes_broadcast(a, b):
    assert np.broadcast_shapes(a.shape, b.shape) == (a * b).shape


def test_default_elements_reach_negatives_zero_tiny_and_large():
    seen = []

    @settings(max_examples=100, database=None, derandomize=True)
    @given(tensors((4,)))
    def collect(x):
        seen.append(x.numpy())

    collect()
    values = np.concatenate(seen)
    assert (values < 0).any() and (values == 0).any()
    assert ((values != 0) & (abs(values) < 1e-2)).any() and (abs(values) == 10.0).any()


def test_float32_tensors_hold_exact_float32_values():
    @given(tensors((5,), elements=(-3.0, 3.0)))
    def draws_are_float32(x):
        host = x.numpy()
        assert host.dtype == np.float32
        np.testing.assert_array_equal(host.astype(np.float64).astype(np.float32), host)

    draws_are_float32()


def test_check_grads_rejects_a_bad_order():
    with pytest.raises(ValueError, match="order must be 1 or 2"):
        check_grads(lambda x: x, tensors((1,)), order=3)


# ------------------------------------------------------------------------ imports and names
def _fresh(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        timeout=120,
    )


def test_import_tinyattn_does_not_import_hypothesis():
    done = _fresh("import sys, tinyattn; print('hypothesis' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_missing_hypothesis_gives_a_clear_import_error():
    code = (
        "import sys; sys.modules['hypothesis'] = None\n"
        "try:\n    import tinyattn.testing\n"
        "except ImportError as e:\n    print(e)\n"
    )
    done = _fresh(code)
    assert done.returncode == 0, done.stderr
    assert "pip install tinyattn[test]" in done.stdout


FIRST_TOUCHES = [
    "ta.GradcheckError",
    "ta.numerical_grad",
    "ta.gradgradcheck",
    "import tinyattn.checking",
    "from tinyattn import checking",
    "import tinyattn.testing",
]


@pytest.mark.parametrize("touch", FIRST_TOUCHES)
def test_gradcheck_stays_the_function_after_touching_its_module(touch):
    code = (
        "import tinyattn as ta\n"
        f"{touch}\n"
        "x = ta.tensor([1.0, 2.0], dtype='float64', requires_grad=True)\n"
        "assert callable(ta.gradcheck), type(ta.gradcheck)\n"
        "assert ta.gradcheck(lambda x: x * x, [x])\n"
        "try:\n    ta.gradcheck(lambda x: x.max(), [ta.tensor([1.0, 1.0, 1.0], "
        "dtype='float64', requires_grad=True)])\n"
        "except ta.GradcheckError:\n    pass\n"
        "assert ta.gradcheck(lambda x: x * x, [x])\n"
        "print('ok')\n"
    )
    done = _fresh(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# ------------------------------------------------------------------ the float32 fallback eps
def test_float32_fallback_eps_is_the_measured_best():
    """A function that computes in float32 whatever its input: the checker's differences are
    float32 ones. Over 200 standard-normal points, eps = 3e-3 gives the smallest median and the
    smallest worst relative error of the candidates, and it is the fallback the checker uses."""
    from tinyattn.checking import EPS_IF_STILL_FLOAT32

    def fn(x):
        x32 = x.to("float32")
        return x32.tanh() * (x32 * 0.5).exp()

    points = np.random.default_rng(0).standard_normal(200)
    t, e = np.tanh(points), np.exp(0.5 * points)
    exact = (1 - t * t) * e + 0.5 * t * e
    cotangent = np.random.default_rng(0).standard_normal(points.shape)  # the checker's seed 0
    x = ta.tensor(points, dtype="float64", requires_grad=True)
    errors = {}
    for eps in (1e-2, 3e-3, 1e-3, 1e-4):
        (numeric,) = ta.numerical_grad(fn, [x], eps=eps)
        relative = abs(numeric.numpy() / cotangent - exact) / (1e-3 + abs(exact))
        errors[eps] = (np.median(relative), relative.max())
    best_median = min(errors, key=lambda eps: errors[eps][0])
    best_worst = min(errors, key=lambda eps: errors[eps][1])
    assert best_median == best_worst == EPS_IF_STILL_FLOAT32 == 3e-3
    (default,) = ta.numerical_grad(fn, [x])
    (chosen,) = ta.numerical_grad(fn, [x], eps=3e-3)
    np.testing.assert_array_equal(default.numpy(), chosen.numpy())
