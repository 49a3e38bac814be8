"""The one seam for what watches the engine: `autograd.listeners`."""

import numpy as np
import pytest

import tinyattn as ta
from tinyattn.autograd import listeners


class Log(listeners.Listener):
    def __init__(self, name, seen):
        self.name, self.seen = name, seen

    def forward(self, fn, inputs, kwargs, run):
        self.seen.append((self.name, "forward", fn.name))
        return run()

    def made(self, fn, result):
        self.seen.append((self.name, "made", fn.name))

    def rule(self, fn, output, grad, run):
        self.seen.append((self.name, "rule", fn.name))
        grads = run()
        self.seen.append((self.name, "ruled", fn.name))
        return grads

    def deliver(self, leaf, run):
        self.seen.append((self.name, "deliver", leaf.shape))
        run()


def test_nobody_listens_by_default():
    assert listeners.active is None


def test_a_listener_sees_each_op_and_rule_and_leaf():
    seen = []
    handle = listeners.listen(Log("a", seen))
    try:
        a = ta.tensor(2.0, requires_grad=True)
        b = ta.tensor(3.0, requires_grad=True)
        c = a * b + a
        c.backward()
    finally:
        handle.remove()
    assert listeners.active is None
    walk = next(k for k, s in enumerate(seen) if s[1] == "rule")
    assert seen[:walk] == [
        ("a", "forward", "Mul"),
        ("a", "made", "Mul"),
        ("a", "forward", "Add"),
        ("a", "made", "Add"),
    ]
    rules = [s[2] for s in seen if s[1] == "rule"]
    assert rules == ["Add", "Mul"]  # newest first
    assert sum(s[1] == "deliver" for s in seen) == 2
    assert float(a.grad) == 4.0 and float(b.grad) == 2.0  # watching changes nothing


def test_two_listeners_nest_the_first_outermost():
    seen = []
    first = listeners.listen(Log("a", seen))
    second = listeners.listen(Log("b", seen))
    try:
        x = ta.tensor([1.0, 2.0], requires_grad=True)
        x.exp().sum().backward()
    finally:
        second.remove()
        first.remove()
    assert listeners.active is None
    exp_rule = [s[:2] for s in seen if s[2] == "Exp" and s[1] in ("rule", "ruled")]
    assert exp_rule == [("a", "rule"), ("b", "rule"), ("b", "ruled"), ("a", "ruled")]
    np.testing.assert_allclose(x.grad.numpy(), np.exp([1.0, 2.0]))


def test_a_listener_may_replace_a_rules_result():
    class Doubling(listeners.Listener):
        def rule(self, fn, output, grad, run):
            return tuple(None if g is None else g * 2 for g in run())

    x = ta.tensor([1.0, 2.0], requires_grad=True)
    handle = listeners.listen(Doubling())
    try:
        (x * 3).sum().backward()
    finally:
        handle.remove()
    np.testing.assert_array_equal(x.grad.numpy(), [12.0, 12.0])  # Mul's and Sum's rules doubled


def test_removing_twice_is_harmless():
    handle = listeners.listen(listeners.Listener())
    handle.remove()
    handle.remove()
    assert listeners.active is None


@pytest.mark.parametrize("grad_mode", [True, False])
def test_the_default_listener_changes_nothing(grad_mode):
    handle = listeners.listen(listeners.Listener())
    try:
        x = ta.tensor([[1.0, -2.0], [0.5, 4.0]], requires_grad=True)
        with ta.set_grad_enabled(grad_mode):
            y = (x.softmax(-1) * x).sum()
        if grad_mode:
            y.backward()
    finally:
        handle.remove()
    z = ta.tensor(x.detach().numpy(), requires_grad=True)
    expected = (z.softmax(-1) * z).sum()
    assert float(y) == float(expected)
    if grad_mode:
        expected.backward()
        np.testing.assert_array_equal(x.grad.numpy(), z.grad.numpy())
