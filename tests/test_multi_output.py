"""Functions with several outputs: one node, one backward call with a gradient per output.

Engine invariants with such nodes (fan-out, an unused output, both used, second order, version
checks, release, no reference cycles), the checkers on tuple outputs, and the Split op.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from hypothesis import strategies as st

import tinyattn as ta
from tinyattn.autograd import Function
from tinyattn.checking import GradcheckError
from tinyattn.testing import check_grads, tensors


class SinCos(Function):
    """(sin x, cos x);  dL/dx = g_sin * cos x - g_cos * sin x. Counts its backward calls."""

    calls = 0

    def forward(self, x):
        xp = ta.backend.namespace(x)
        return xp.sin(x), xp.cos(x)

    def backward(self, grad_sin, grad_cos):
        type(self).calls += 1
        x = self.inputs[0]
        return grad_sin * x.cos() - grad_cos * x.sin()


class ReadsOutputs(Function):
    """(2x, 3x), with a rule that reads its outputs (for the version check)."""

    backward_reads = ("output",)

    def forward(self, x):
        return 2.0 * x, 3.0 * x

    def backward(self, grad_a, grad_b):
        a, b = self.output
        assert a is not None and b is not None
        return grad_a * 2.0 + grad_b * 3.0


class ValuesAndArgmax(Function):
    """(max over the last axis, its index): the integer output gets no gradient."""

    def forward(self, x):
        xp = ta.backend.namespace(x)
        index = xp.argmax(x, axis=-1)
        self.index = index
        return xp.max(x, axis=-1), index

    def backward(self, grad_values, grad_index):
        assert grad_index.shape == self.index.shape  # a zero gradient, as for any output
        x = self.inputs[0]
        xp = ta.backend.namespace(x.array)
        hot = xp.astype(xp.arange(x.shape[-1]) == self.index[..., None], x.array.dtype)
        return grad_values.expand_dims(-1) * x.constant(hot)


@pytest.fixture
def x():
    return ta.tensor([0.3, -1.2, 2.0], dtype="float64", requires_grad=True)


def _expected(x, g_sin, g_cos):
    return g_sin * np.cos(x.detach().numpy()) - g_cos * np.sin(x.detach().numpy())


def test_apply_returns_a_tuple_of_tensors_of_one_node(x):
    s, c = SinCos.apply(x)
    assert s._ctx is c._ctx and isinstance(s._ctx, SinCos)
    np.testing.assert_allclose(s.detach().numpy(), np.sin(x.detach().numpy()))
    np.testing.assert_allclose(c.detach().numpy(), np.cos(x.detach().numpy()))


def test_both_outputs_used_run_the_rule_once(x):
    SinCos.calls = 0
    s, c = SinCos.apply(x)
    (s * 2.0 + c * c).sum().backward()
    assert SinCos.calls == 1
    np.testing.assert_allclose(
        x.grad.detach().numpy(), _expected(x, 2.0, 2 * np.cos(x.detach().numpy()))
    )


def test_an_unused_output_gets_a_zero_gradient(x):
    SinCos.calls = 0
    s, c = SinCos.apply(x)
    c.sum().backward()  # s never reaches the loss
    assert SinCos.calls == 1
    np.testing.assert_allclose(x.grad.numpy(), _expected(x, 0.0, 1.0))


def test_fan_out_of_each_output_sums_before_the_rule(x):
    SinCos.calls = 0
    s, c = SinCos.apply(x)
    loss = (s * c).sum() + s.sum() + (c * 3.0).sum() + (s * s).sum()
    loss.backward()
    assert SinCos.calls == 1
    sin, cos = np.sin(x.detach().numpy()), np.cos(x.detach().numpy())
    np.testing.assert_allclose(x.grad.numpy(), _expected(x, cos + 1 + 2 * sin, sin + 3.0))


def test_the_input_also_used_directly_and_the_node_fed_twice(x):
    s1, c1 = SinCos.apply(x)
    s2, _ = SinCos.apply(x * 2.0)
    (s1 + c1 + s2 + x).sum().backward()
    sin, cos = np.sin(x.detach().numpy()), np.cos(x.detach().numpy())
    np.testing.assert_allclose(
        x.grad.detach().numpy(), cos - sin + 2 * np.cos(2 * x.detach().numpy()) + 1
    )


def test_second_order_through_a_node_with_several_outputs(x):
    s, c = SinCos.apply(x)
    (g,) = ta.grad((s * c).sum(), x, create_graph=True)  # d/dx sin x cos x = cos 2x
    np.testing.assert_allclose(g.detach().numpy(), np.cos(2 * x.detach().numpy()))
    (h,) = ta.grad(g.sum(), x)
    np.testing.assert_allclose(h.detach().numpy(), -2 * np.sin(2 * x.detach().numpy()))


def test_gradcheck_and_gradgradcheck_take_tuple_outputs(x):
    assert ta.gradcheck(SinCos.apply, [x])
    assert ta.gradgradcheck(SinCos.apply, [x])


def test_gradcheck_catches_a_wrong_rule_for_one_output(x):
    class Wrong(SinCos):
        def backward(self, grad_sin, grad_cos):
            x = self.inputs[0]
            return grad_sin * x.cos() + grad_cos * x.sin()  # the sign of d cos is wrong

    with pytest.raises(GradcheckError):
        ta.gradcheck(Wrong.apply, [x])


def test_check_grads_takes_tuple_outputs():
    check_grads(SinCos.apply, tensors(st.just((2, 3))), max_examples=5, order=2)


def test_an_output_changed_in_place_is_named(x):
    a, b = ReadsOutputs.apply(x)
    loss = (a + b).sum()
    with ta.no_grad():
        b.add_(1.0)
    with pytest.raises(
        RuntimeError,
        match=r"inplace operation: ReadsOutputs's output 1 of shape \(3,\) is at version 1",
    ):
        loss.backward()


def test_rule_sees_its_outputs_and_their_versions_pass_when_unchanged(x):
    a, b = ReadsOutputs.apply(x)
    (a + b).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 5.0))


def test_integer_output_gets_no_gradient_and_no_history():
    x = ta.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]], requires_grad=True)
    values, index = ValuesAndArgmax.apply(x)
    assert values.requires_grad and not index.requires_grad and index._ctx is None
    values.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0], [1, 0, 0]])


def test_backward_twice_needs_retain_graph_and_then_doubles(x):
    s, c = SinCos.apply(x)
    loss = (s + c).sum()
    loss.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first)
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()


def test_released_node_keeps_its_skeleton(x):
    s, c = SinCos.apply(x)
    fn = s._ctx
    (s + c).sum().backward()
    assert fn.inputs is None and fn.released_inputs == (x,)


def test_no_reference_cycles_and_the_graph_dies_with_its_outputs(no_cyclic_gc, x):
    s, c = SinCos.apply(x * 1.0)
    node, product = weakref.ref(s._ctx), weakref.ref(s._ctx.inputs[0])
    loss = (s * c).sum()
    del s, c
    assert node() is not None  # the loss keeps the graph
    del loss
    assert node() is None and product() is None
    assert gc.collect() == 0


def test_an_output_dropped_before_backward_still_gets_zeros(x):
    SinCos.calls = 0
    s, c = SinCos.apply(x)
    loss = s.sum()
    del c  # freed: its weak reference is dead when the rule runs
    loss.backward()
    assert SinCos.calls == 1
    np.testing.assert_allclose(x.grad.detach().numpy(), np.cos(x.detach().numpy()))


def test_a_10000_long_chain_of_nodes_with_several_outputs(no_cyclic_gc):
    x = ta.tensor([0.5], dtype="float64", requires_grad=True)
    y = x
    for _ in range(10_000):
        y, _unused = Halves.apply(y)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0])


class Halves(Function):
    """(x, -x); dL/dx = g_a - g_b."""

    backward_reads = ()

    def forward(self, x):
        return x, -x

    def backward(self, grad_a, grad_b):
        return grad_a - grad_b


# ------------------------------------------------------------------------------------- Split
def test_split_is_one_node_whose_pieces_are_views(device):
    x = ta.tensor(np.arange(12.0).reshape(2, 6), device=device, requires_grad=True)
    q, k, v = x.split(2, dim=1)
    assert q._ctx is k._ctx is v._ctx and q._ctx.name == "Split"
    assert q._version_counter is x._version_counter
    (q * 1.0 + k * 2.0 + v * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.repeat([[1.0, 1, 2, 2, 3, 3]], 2, axis=0))


def test_split_with_an_unused_piece_and_uneven_sizes(device):
    x = ta.tensor(np.arange(7.0), device=device, requires_grad=True)
    a, b, c = x.split([2, 4, 1])
    (b * b).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 4, 6, 8, 10, 0])


def test_split_and_chunk_gradcheck():
    x = ta.tensor(np.random.default_rng(0).normal(size=(3, 5)), requires_grad=True)
    assert ta.gradcheck(lambda t: t.split(2, dim=1), [x])
    assert ta.gradgradcheck(lambda t: tuple(p * p for p in t.chunk(2, dim=0)), [x])


def test_split_equals_pytorch():
    torch = pytest.importorskip("torch")
    data = np.random.default_rng(1).normal(size=(2, 3, 9))
    weights = [np.random.default_rng(k).normal(size=(2, 3, 3)) for k in range(3)]
    x = ta.tensor(data, requires_grad=True)
    pieces = x.split(3, dim=2)
    sum(((p * ta.tensor(w)) ** 2).sum() for p, w in zip(pieces[:2], weights)).backward()
    tx = torch.tensor(data, requires_grad=True)
    tpieces = tx.split(3, dim=2)
    sum(((p * torch.tensor(w)) ** 2).sum() for p, w in zip(tpieces[:2], weights)).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_compile_replays_split_exactly_or_refuses_by_name():
    from tinyattn.compiler.record import CompileError

    weight = ta.randn(4, 6, dtype="float64", requires_grad=True)

    def every_piece(x):
        a, b, c = (x @ weight).split(2, dim=1)
        loss = (a * b * c).sum()
        loss.backward()
        return loss

    def one_piece_unused(x):
        a, b, _ = (x @ weight).split(2, dim=1)
        loss = (a * b).sum()
        loss.backward()
        return loss

    compiled = ta.compile(every_piece)
    for seed in range(3):
        x = ta.tensor(np.random.default_rng(seed).normal(size=(3, 4)))
        weight.grad = None
        replayed = compiled(x).item(), weight.grad.numpy().copy()
        weight.grad = None
        eager = every_piece(x).item(), weight.grad.numpy()
        assert replayed[0] == eager[0]
        np.testing.assert_array_equal(replayed[1], eager[1])
    refused = ta.compile(one_piece_unused)
    with pytest.raises(CompileError, match="Split backward"):
        for _ in range(3):
            refused(ta.randn(3, 4, dtype="float64"))
