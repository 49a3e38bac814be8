"""Ops keep and version-check only what their rules will read, given which inputs need a
gradient (``grad_reads``): dL/dA of A @ B reads B, dL/dB reads A.

PyTorch is the oracle for the two-losses program (skipping cleanly without it).
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
from tinyattn.autograd import ReleasedConstant


def _two_losses(lib, nn, optim, x_data, w_data, b_data, x_requires_grad=False):
    """Two losses through one Linear; the optimizer steps (the weight changes in place) between
    their backward calls."""
    layer = nn.Linear(4, 3)
    with lib.no_grad():
        layer.weight.copy_(lib.tensor(w_data, dtype=layer.weight.dtype))
        layer.bias.copy_(lib.tensor(b_data, dtype=layer.bias.dtype))
    opt = optim.SGD(layer.parameters(), lr=0.1)
    x = lib.tensor(x_data, dtype=layer.weight.dtype, requires_grad=x_requires_grad)
    l1 = (layer(x) ** 2).sum()
    l2 = (layer(x * 2.0) ** 3).sum()
    l1.backward()
    opt.step()
    opt.zero_grad()
    l2.backward()
    return layer.weight.grad.detach().numpy(), layer.bias.grad.detach().numpy()


def _arrays():
    rng = np.random.default_rng(0)
    return rng.normal(size=(5, 4)), rng.normal(size=(3, 4)), rng.normal(size=(3,))


def test_two_losses_sharing_a_linear_with_a_step_between_equal_pytorch():
    torch = pytest.importorskip("torch")
    ours = _two_losses(ta, ta.nn, ta.optim, *_arrays())
    theirs = _two_losses(torch, torch.nn, torch.optim, *_arrays())
    for mine, reference in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6)


def test_the_weight_is_still_checked_when_the_input_needs_a_gradient():
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _two_losses(torch, torch.nn, torch.optim, *_arrays(), x_requires_grad=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _two_losses(ta, ta.nn, ta.optim, *_arrays(), x_requires_grad=True)


@pytest.mark.parametrize("op", ["matmul", "mul", "div"])
def test_the_operand_a_needed_gradient_reads_is_checked(op):
    a = ta.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    b = ta.tensor([[0.5, 1.5], [2.0, 3.0]])  # no gradient: dL/da reads it
    out = {"matmul": a @ b, "mul": a * b, "div": a / b}[op]
    with ta.no_grad():
        b.mul_(2.0)
    with pytest.raises(RuntimeError, match="input 1 of shape \\(2, 2\\) is at version 1"):
        out.sum().backward()


@pytest.mark.parametrize("op", ["matmul", "mul", "div"])
def test_an_operand_no_needed_gradient_reads_may_change(op):
    a = ta.tensor([[1.0, 2.0], [3.0, 4.0]])
    b = ta.tensor([[0.5, 1.5], [2.0, 3.0]], requires_grad=True)
    expected = {
        "matmul": lambda: a.numpy().T @ np.ones((2, 2)),
        "mul": lambda: a.numpy(),
        "div": lambda: -a.detach().numpy() / b.detach().numpy() ** 2,
    }[op]()
    out = {"matmul": a @ b, "mul": a * b, "div": a / b}[op]
    if op != "div":  # Div's dL/db reads b itself (and the output)
        with ta.no_grad():
            b.mul_(2.0)
    out.sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), expected)


def test_an_input_nothing_reads_is_not_kept():
    cond = ta.tensor(np.arange(100) % 2 == 0)
    a = ta.randn(100, requires_grad=True)
    fill = ta.zeros(100)  # no gradient, and no rule reads it
    out = ta.where(cond, a, fill)
    kept = out._ctx.inputs
    assert kept[0] is cond and kept[1] is a
    assert isinstance(kept[2], ReleasedConstant) and kept[2].shape == (100,)
    out.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), cond.numpy().astype("float32"))


def test_matmul_with_a_1d_operand_that_is_not_kept():
    a = ta.randn(80, requires_grad=False)
    b = ta.randn(80, 3, requires_grad=True)
    c = ta.randn(3, requires_grad=True)
    ((a @ b) * c).sum().backward()
    np.testing.assert_allclose(
        b.grad.detach().numpy(), np.outer(a.detach().numpy(), c.detach().numpy()), rtol=1e-6
    )
