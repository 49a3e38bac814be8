"""Anomaly mode: ``with ta.detect_anomaly():`` stops at the first NaN or Inf an op introduces.

NaNs are planted (sqrt of a negative, log of 0, 0/0 in a custom op's backward, 1/0 in sqrt's
own backward) and each AnomalyError must name the op (for backward: the op whose rule produced
the value) and the file and line of this test where the forward op was created. Off by default,
as in PyTorch: without the context nothing is checked and NaN flows silently, and the mode is
restored on exit however the block ends. Runs on every backend (`device`).
"""

from __future__ import annotations

import inspect
import math
import os

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import autograd, nn

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy's invalid-value notes
HERE = os.path.basename(__file__)


def leaf(values, device):
    return ta.tensor(values, dtype="float64", device=device, requires_grad=True)


def next_line() -> int:
    """The line number after the caller's line: where the op under test is created."""
    return inspect.currentframe().f_back.f_lineno + 1


class ZeroOverZero(ta.Function):
    """y = x; a planted bug in backward: dL/dx = g * 0 / 0 (NaN everywhere)."""

    def forward(self, x):
        return x * 1.0

    def backward(self, grad):
        return grad * 0.0 / 0.0


def assert_names_the_line(message: str, line: int) -> None:
    assert f'{HERE}", line {line}' in message, message


# ------------------------------------------------------------------------- planted anomalies
def test_anomaly_error_is_a_runtime_error():
    assert issubclass(ta.AnomalyError, RuntimeError)


def test_sqrt_of_a_negative_names_sqrt_and_the_line(device):
    x = leaf([-1.0, 4.0], device)
    with ta.detect_anomaly(), pytest.raises(ta.AnomalyError) as info:
        line = next_line()
        x.sqrt()
    message = str(info.value)
    assert message.startswith("Sqrt forward produced NaN (output shape (2,))")
    assert_names_the_line(message, line)
    assert "x.sqrt()" in message  # the source line itself


def test_log_of_zero_names_log_and_the_line(device):
    x = leaf([0.0, 1.0], device)
    with ta.detect_anomaly(), pytest.raises(ta.AnomalyError) as info:
        y = x * 2.0
        line = next_line()
        y.log()
    message = str(info.value)
    assert message.startswith("Log forward produced Inf (output shape (2,))")
    assert_names_the_line(message, line)


def test_zero_over_zero_in_a_custom_backward_names_that_op(device):
    x = leaf([1.0, 2.0, 3.0], device)
    with ta.detect_anomaly():
        line = next_line()
        hidden = ZeroOverZero.apply(x)
        loss = (hidden * hidden).sum()
        with pytest.raises(ta.AnomalyError) as info:
            loss.backward()
    message = str(info.value)
    # The Div inside the rule is not blamed: the rule's result is checked as ZeroOverZero's.
    assert message.startswith("ZeroOverZero backward produced NaN in the gradient of input 0")
    assert "(shape (3,))" in message
    assert_names_the_line(message, line)


def test_a_built_in_backward_rule_is_named_too(device):
    # sqrt(0) = 0 is fine; its derivative 1 / (2 sqrt(0)) is Inf.
    x = leaf([0.0, 4.0], device)
    with ta.detect_anomaly():
        line = next_line()
        root = x.sqrt()
        with pytest.raises(ta.AnomalyError) as info:
            ta.grad(root.sum(), x)
    message = str(info.value)
    assert message.startswith("Sqrt backward produced Inf in the gradient of input 0")
    assert_names_the_line(message, line)


def test_an_op_created_before_the_mode_is_still_named(device):
    x = leaf([1.0, 2.0], device)
    loss = ZeroOverZero.apply(x).sum()
    with ta.detect_anomaly(), pytest.raises(ta.AnomalyError) as info:
        loss.backward()
    assert "ZeroOverZero backward produced NaN" in str(info.value)
    assert "created before anomaly mode was on" in str(info.value)


def test_only_the_op_that_introduces_a_value_is_blamed(device):
    # Masked attention fills scores with -inf on purpose and a fully masked row's log_softmax
    # is -inf: ops that carry an Inf they were given are not anomalies. Checking every result
    # would make anomaly mode useless for causal attention.
    ta.manual_seed(0)
    attention = nn.MultiHeadAttention(4, 2).to(device).double()
    x = ta.randn(2, 3, 4, dtype="float64", device=device)
    mask = ta.tensor(np.array([[True, False, False]] * 3), device=device)
    scores = leaf([[-math.inf, -math.inf], [0.5, -math.inf]], device)
    with ta.detect_anomaly():
        attention(x, is_causal=True).sum().backward()
        attention(x, mask=mask).sum().backward()
        F.log_softmax(scores, dim=-1).exp().sum().backward()  # exp(-inf) = 0: finite again
        with pytest.raises(ta.AnomalyError, match="^Exp forward produced Inf"):
            (x * 1e3).exp()  # finite inputs, infinite output: introduced here
        with pytest.raises(ta.AnomalyError, match="forward produced NaN"):
            F.log_softmax(scores, dim=-1) * 0.0  # -inf * 0 = NaN: a new kind of value


# --------------------------------------------------------------------------- off by default
def test_off_by_default_nan_flows_silently(device):
    assert not autograd.is_anomaly_enabled()
    x = leaf([-1.0, 4.0], device)
    y = x.sqrt()  # no error, as in PyTorch
    assert np.isnan(y.detach().numpy()[0])
    y.sum().backward()
    assert np.isnan(x.grad.numpy()[0])
    z = leaf([1.0, 2.0], device)
    ZeroOverZero.apply(z).sum().backward()
    assert np.isnan(z.grad.numpy()).all()


def test_no_check_runs_when_off(device, monkeypatch):
    def forbidden(*args):
        raise AssertionError("an anomaly check ran while anomaly mode was off")

    monkeypatch.setattr(autograd.grad_mode, "_check_forward", forbidden)
    monkeypatch.setattr(autograd.grad_mode, "_check_backward", forbidden)
    x = leaf([-1.0, 0.0], device)
    (x.sqrt() + x.log()).sum().backward()  # NaN and Inf everywhere, and nobody looks
    assert autograd.listeners.active is None  # off: nobody listens, the walk pays one test
    with ta.detect_anomaly():
        assert autograd.listeners.active is not None
    assert autograd.listeners.active is None


def test_the_mode_is_restored_on_exit():
    assert not autograd.is_anomaly_enabled()
    with ta.detect_anomaly():
        assert autograd.is_anomaly_enabled()
        with ta.detect_anomaly():
            assert autograd.is_anomaly_enabled()
        assert autograd.is_anomaly_enabled()  # the inner exit restores the outer state
    assert not autograd.is_anomaly_enabled()
    with pytest.raises(ta.AnomalyError), ta.detect_anomaly():
        ta.tensor([-1.0]).sqrt()
    assert not autograd.is_anomaly_enabled()  # restored after the error as well
    with pytest.raises(KeyError), ta.detect_anomaly():
        raise KeyError("an unrelated error")
    assert not autograd.is_anomaly_enabled()


def test_as_a_decorator():
    @ta.detect_anomaly()
    def step():
        assert autograd.is_anomaly_enabled()
        return ta.tensor([0.0]).log()

    with pytest.raises(ta.AnomalyError, match="Log forward produced Inf"):
        step()
    assert not autograd.is_anomaly_enabled()


def test_a_clean_training_step_passes_in_anomaly_mode(device):
    ta.manual_seed(0)
    block = nn.TransformerBlock(8, 2, 16).to(device)
    x = ta.randn(2, 4, 8, device=device)
    targets = ta.tensor([[0, 1, 2, 3]] * 2, device=device)
    with ta.detect_anomaly():
        logits = block(x, is_causal=True)
        loss = F.cross_entropy(logits.reshape(-1, 8), targets.reshape(-1))  # (B * T, C) rows
        loss.backward()
    assert math.isfinite(loss.item())
