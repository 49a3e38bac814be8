"""The checker's forward mode: gradcheck(check_forward_ad=True) and check_grads catch a wrong
jvp rule (against finite differences, and against the backward rule by <J v, u> = <v, J^T u>),
and PyTorch's module path ``tinyattn.autograd.gradcheck`` with its keywords."""

from __future__ import annotations

import numpy as np
import pytest
from forward_functions import Cos, Mul, Sin

import tinyattn as ta
from tinyattn.autograd.gradcheck import gradcheck, gradgradcheck
from tinyattn.checking import GradcheckError
from tinyattn.testing import check_grads, tensors


def leaf(values):
    return ta.tensor(values, dtype="float64", requires_grad=True)


X, Y = [0.3, -1.2, 2.0], [0.5, 0.1, -0.7]


def sin_times_cos(a, b):
    return Mul.apply(Sin.apply(a), Cos.apply(b))


class WrongJvp(Sin):
    """sin with a planted mistake in its jvp only: dy = sin(x) dx."""

    def jvp(self, tangent):
        return Mul.apply(tangent, Sin.apply(self.inputs[0]))


class WrongBackward(Sin):
    """sin with a planted mistake in its backward only: dL/dx = dL/dy * sin(x)."""

    def backward(self, grad):
        return Mul.apply(grad, Sin.apply(self.inputs[0]))


def test_correct_rules_pass_forward_and_fwd_over_rev_checks():
    assert gradcheck(sin_times_cos, (leaf(X), leaf(Y)), check_forward_ad=True)
    assert gradcheck(sin_times_cos, (leaf(X), leaf(Y)), check_batched_grad=True)
    assert gradgradcheck(sin_times_cos, (leaf(X), leaf(Y)), check_fwd_over_rev=True)


def test_a_wrong_jvp_is_caught_by_finite_differences():
    with pytest.raises(GradcheckError, match="forward-mode JVP disagrees"):
        gradcheck(WrongJvp.apply, (leaf(X),), check_forward_ad=True, check_backward_ad=False)
    assert gradcheck(WrongJvp.apply, (leaf(X),))  # backward alone cannot see it
    assert not gradcheck(WrongJvp.apply, (leaf(X),), check_forward_ad=True, raise_exception=False)


def test_forward_and_reverse_are_checked_against_each_other():
    """With backward left out of the element-wise check, the adjoint identity still sees it."""
    with pytest.raises(GradcheckError, match="forward and reverse mode disagree"):
        gradcheck(WrongBackward.apply, (leaf(X),), check_forward_ad=True, check_backward_ad=False)


def test_check_grads_catches_a_planted_wrong_jvp():
    strategy = tensors((3,), dtype="float64")
    check_grads(Sin.apply, strategy, max_examples=5, check_forward_ad=True)
    with pytest.raises(GradcheckError, match="forward-mode JVP disagrees"):
        check_grads(WrongJvp.apply, strategy, max_examples=5, check_forward_ad=True)


def test_float32_inputs_are_checked_with_float32_tolerances():
    x = ta.tensor(X, dtype="float32", requires_grad=True)
    assert gradcheck(Sin.apply, (x,), check_forward_ad=True, atol=1e-4, rtol=2e-3)


def test_agrees_with_torch_gradcheck_on_the_same_function():
    torch = pytest.importorskip("torch")
    x = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    y = torch.tensor(Y, dtype=torch.float64, requires_grad=True)
    f = lambda a, b: torch.sin(a) * torch.cos(b)  # noqa: E731
    assert torch.autograd.gradcheck(f, (x, y), check_forward_ad=True)
    ours = sin_times_cos(leaf(X), leaf(Y)).detach().numpy()
    np.testing.assert_allclose(ours, f(x, y).detach().numpy())


def test_the_torch_namespace():
    import tinyattn.autograd as autograd

    assert autograd.gradcheck is gradcheck and autograd.gradgradcheck is gradgradcheck
    assert autograd.forward_ad.make_dual is not None
    with pytest.raises(NotImplementedError, match="grad_outputs"):
        gradgradcheck(Sin.apply, (leaf(X),), [ta.ones(3)])
