"""The graders: one section per exercise, in order. Each checks the learner's backward rule with
``ta.gradcheck`` (finite differences) and against a reference (tinyattn's own op); exercise 12's
checks a jvp rule the same two ways, and by ``<J v, u> == <v, J^T u>`` against backward.

Run ``python -m pytest exercises -k ex03`` to grade one exercise; ``-x`` stops at the first
failure. Inputs are float64 so that finite differences are accurate.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn.autograd import forward_ad, functional


def randn(*shape: int, seed: int = 0, positive: bool = False) -> ta.Tensor:
    rng = np.random.default_rng(seed + 7 * len(shape) + sum(shape))
    values = rng.standard_normal(shape)
    if positive:  # away from 0: for division and the logarithm
        values = 0.5 + np.abs(values)
    return ta.tensor(values, dtype="float64", requires_grad=True)


def assert_same_gradients(mine, reference, inputs) -> None:
    """Same forward values and the same gradients (of a random weighted sum) as the reference."""
    ours, theirs = mine(*inputs), reference(*inputs)
    np.testing.assert_allclose(
        ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-10, atol=1e-12
    )
    weights = ta.tensor(np.random.default_rng(1).standard_normal(theirs.shape), dtype="float64")
    wanted = [t for t in inputs if t.requires_grad]
    expected = ta.grad((theirs * weights).sum(), wanted)
    got = ta.grad((ours * weights).sum(), wanted)
    for position, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape, f"input {position}: gradient shape {g.shape}, expected {e.shape}"
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-8, atol=1e-10)


# ------------------------------------------------------------------ ex01: Mul and Div, broadcast
BROADCAST_SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 3), (4, 1)), ((), (2, 3))]


@pytest.mark.parametrize("shapes", BROADCAST_SHAPES, ids=str)
@pytest.mark.parametrize("op", ["mul", "div"])
def test_ex01_mul_div(exercise, op, shapes):
    module = exercise("ex01_mul_div")
    a, b = randn(*shapes[0]), randn(*shapes[1], seed=1, positive=True)
    mine = getattr(module, op)
    assert ta.gradcheck(mine, (a, b), name=op)
    assert_same_gradients(
        mine, (lambda x, y: x * y) if op == "mul" else (lambda x, y: x / y), (a, b)
    )


# ------------------------------------------------------------------------------ ex02: Exp and Log
@pytest.mark.parametrize("op", ["exp", "log"])
def test_ex02_exp_log(exercise, op):
    x = randn(3, 4, positive=True)
    mine = getattr(exercise("ex02_exp_log"), op)
    assert ta.gradcheck(mine, (x,), name=op)
    assert_same_gradients(mine, getattr(ta.Tensor, op), (x,))


# ------------------------------------------------------------------- ex03: Sum and Mean over axes
AXES = [None, 0, 1, -1, (0, 2)]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_ex03_sum_mean(exercise, op, axis, keepdims):
    x = randn(2, 3, 4)
    mine = getattr(exercise("ex03_sum_mean"), op)
    call = lambda t: mine(t, axis=axis, keepdims=keepdims)  # noqa: E731
    assert ta.gradcheck(call, (x,), name=op)
    reference = getattr(ta.Tensor, op)
    assert_same_gradients(call, lambda t: reference(t, axis=axis, keepdims=keepdims), (x,))


# -------------------------------------------------------------------------------- ex04: MatMul
MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 3, 4), (4, 5)),  # b is shared by both batches: its gradient sums over them
    ((3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)),
]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_ex04_matmul(exercise, shapes):
    mine = exercise("ex04_matmul").matmul
    a, b = randn(*shapes[0]), randn(*shapes[1], seed=1)
    assert ta.gradcheck(mine, (a, b), name="matmul")
    assert_same_gradients(mine, lambda x, y: x @ y, (a, b))


# ---------------------------------------------------------------------------- ex05: ReLU, GELU
@pytest.mark.parametrize(
    "op, reference",
    [("relu", F.relu), ("gelu", lambda x: F.gelu(x, approximate="tanh"))],
    ids=["relu", "gelu"],
)
def test_ex05_relu_gelu(exercise, op, reference):
    x = randn(4, 5)
    with ta.no_grad():  # keep ReLU's kink at 0 away from the finite-difference steps
        x.array[abs(x.array) < 0.05] = 0.5
    mine = getattr(exercise("ex05_relu_gelu"), op)
    assert ta.gradcheck(mine, (x,), name=op)
    assert_same_gradients(mine, reference, (x,))


# -------------------------------------------------------------------------------- ex06: Softmax
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_ex06_softmax(exercise, axis):
    mine = exercise("ex06_softmax").softmax
    x = randn(3, 4, 5)
    assert ta.gradcheck(lambda t: mine(t, axis=axis), (x,), name="softmax")
    assert_same_gradients(lambda t: mine(t, axis), lambda t: F.softmax(t, axis), (x,))


# ----------------------------------------------------------- ex07: LogSoftmax and cross-entropy
@pytest.mark.parametrize("axis", [-1, 0])
def test_ex07_log_softmax(exercise, axis):
    mine = exercise("ex07_log_softmax_ce").log_softmax
    x = randn(4, 6)
    assert ta.gradcheck(lambda t: mine(t, axis=axis), (x,), name="log_softmax")
    assert_same_gradients(lambda t: mine(t, axis), lambda t: F.log_softmax(t, axis), (x,))


def test_ex07_cross_entropy_gradient_is_softmax_minus_onehot(exercise):
    module = exercise("ex07_log_softmax_ce")
    logits, targets = randn(5, 4), [0, 3, 1, 1, 2]
    (expected,) = ta.grad(F.cross_entropy(logits, ta.tensor(targets)), [logits])
    got = module.cross_entropy_grad(logits, targets)
    assert got.shape == (5, 4)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-8, atol=1e-12)


# ------------------------------------------------------------------------------ ex08: LayerNorm
@pytest.mark.parametrize("shape", [(6,), (3, 5), (2, 3, 4)], ids=str)
def test_ex08_layer_norm(exercise, shape):
    mine = exercise("ex08_layer_norm").layer_norm
    x = randn(*shape)
    assert ta.gradcheck(mine, (x,), name="layer_norm")
    assert_same_gradients(mine, lambda t: F.layer_norm(t, shape[-1]), (x,))


# ---------------------------------------------------------------------- ex09: topological order
def diamond():
    x = randn(3)
    a = x.tanh()
    b, c = a * 2.0, a.exp()  # two users of a: both must come before a
    return (b * c + x).sum(), [x, a, b, c]


def assert_valid_order(order, root) -> None:
    position = {id(t): i for i, t in enumerate(order)}
    assert len(position) == len(order), "a tensor appears more than once"
    assert order[0] is root, "the root must come first"
    stack, seen = [root], {id(root)}
    while stack:
        tensor = stack.pop()
        assert id(tensor) in position, "a tensor of the graph is missing"
        for parent in tensor._ctx.inputs if tensor._ctx is not None else ():
            assert position[id(tensor)] < position.get(id(parent), -1), (
                f"{tensor._ctx.name}'s output must come before its input {parent.shape}"
            )
            if id(parent) not in seen:
                seen.add(id(parent))
                stack.append(parent)
    assert len(seen) == len(order), "the order holds tensors outside the graph"


def test_ex09_order_of_a_diamond(exercise):
    root, _ = diamond()
    assert_valid_order(exercise("ex09_topo_sort").topological_order(root), root)


def test_ex09_deep_graph_needs_no_recursion(exercise):
    y = x = randn(1)
    for _ in range(3 * sys.getrecursionlimit()):
        y = y * 1.0001
    order = exercise("ex09_topo_sort").topological_order(y)
    assert order[0] is y and order[-1] is x and len(order) == 3 * sys.getrecursionlimit() + 1


def test_ex09_engine_matches_tinyattn(exercise):
    module = exercise("ex09_topo_sort")
    root, (x, *_) = diamond()
    module.backward(root)
    reference, (x_ref, *_) = diamond()  # the same graph, built again for tinyattn's engine
    reference.backward()
    np.testing.assert_allclose(x.grad.numpy(), x_ref.grad.numpy(), rtol=1e-12)


# -------------------------------------------------------------------- ex10: numerical gradients
def test_ex10_central_difference_matches_autograd(exercise):
    central_difference = exercise("ex10_numerical_grad").central_difference
    x = randn(2, 3)

    def f(t: ta.Tensor) -> ta.Tensor:
        return (t.tanh() * t).sum() + (t * t).mean()

    (expected,) = ta.grad(f(x), [x])
    before = x.detach().numpy().copy()
    got = central_difference(lambda array: f(ta.tensor(array)).item(), x.detach().numpy())
    assert got.shape == (2, 3)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(x.detach().numpy(), before)  # the input is unchanged


def test_ex10_error_is_second_order(exercise):
    # For f = sum(x^3), ((x+h)^3 - (x-h)^3) / 2h = 3x^2 + h^2 exactly: a one-sided difference
    # would be off by 3xh instead.
    central_difference = exercise("ex10_numerical_grad").central_difference
    x, eps = np.array([0.5, -1.0, 2.0]), 1e-2
    got = central_difference(lambda a: float((a**3).sum()), x, eps=eps)
    np.testing.assert_allclose(got, 3 * x**2 + eps**2, rtol=1e-9)


# ------------------------------------------------------- ex11: scaled dot-product attention
@pytest.mark.parametrize(
    "shapes",
    [((3, 4), (5, 4), (5, 2)), ((2, 3, 4), (2, 5, 4), (2, 5, 3)), ((2, 2, 3, 4),) * 3],
    ids=str,
)
def test_ex11_attention(exercise, shapes):
    mine = exercise("ex11_attention").attention
    q, k, v = (randn(*shape, seed=i) for i, shape in enumerate(shapes))
    assert ta.gradcheck(mine, (q, k, v), name="attention")
    assert_same_gradients(mine, F.scaled_dot_product_attention, (q, k, v))


# ---------------------------------------------------------------- ex12: forward mode, jvp rules
def forward_mode(fn, inputs, tangents) -> ta.Tensor:
    """J v by forward mode: fn on dual inputs (an input whose tangent is None stays plain)."""
    with forward_ad.dual_level():
        duals = [x if v is None else forward_ad.make_dual(x, v) for x, v in zip(inputs, tangents)]
        tangent = forward_ad.unpack_dual(fn(*duals)).tangent
    assert tangent is not None, "the output has no tangent: does jvp return one?"
    return tangent


def assert_same_jvp(mine, reference, inputs, tangents) -> None:
    """J v equal to the reference's (computed from its backward rules alone), and the adjoint
    identity <J v, u> == <v, J^T u> with J^T u from the reference's backward."""
    got = forward_mode(mine, inputs, tangents)
    directions = tuple(ta.zeros_like(x) if v is None else v for x, v in zip(inputs, tangents))
    _, expected = functional.jvp(reference, tuple(inputs), directions)
    assert got.shape == expected.shape, f"tangent shape {got.shape}, expected {expected.shape}"
    got, expected = got.detach(), expected.detach()
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-8, atol=1e-10)
    u = ta.tensor(np.random.default_rng(2).standard_normal(expected.shape), dtype="float64")
    transposed = ta.grad((reference(*inputs) * u).sum(), list(inputs))  # J^T u, per input
    forward = float((got * u).sum().item())
    reverse = sum(float((v * g).sum().item()) for v, g in zip(directions, transposed))
    assert abs(forward - reverse) <= 1e-9 * (1.0 + abs(reverse)), (
        f"<J v, u> = {forward!r} from your jvp, but <v, J^T u> = {reverse!r} from backward"
    )


def test_ex12_tanh(exercise):
    mine = exercise("ex12_jvp").tanh
    x = randn(3, 4)
    assert ta.gradcheck(mine, (x,), check_forward_ad=True, name="tanh")
    assert_same_jvp(mine, ta.Tensor.tanh, (x,), (randn(3, 4, seed=1).detach(),))


@pytest.mark.parametrize("moving", ["both", "a", "b"])
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_ex12_matmul(exercise, shapes, moving):
    mine = exercise("ex12_jvp").matmul
    a, b = randn(*shapes[0]), randn(*shapes[1], seed=1)
    if moving == "both":
        assert ta.gradcheck(mine, (a, b), check_forward_ad=True, name="matmul")
    tangents = [randn(*shape, seed=2 + i).detach() for i, shape in enumerate(shapes)]
    tangents = [v if moving in ("both", name) else None for v, name in zip(tangents, "ab")]
    assert_same_jvp(mine, lambda x, y: x @ y, (a, b), tangents)


@pytest.mark.parametrize("axis", [-1, 0])
def test_ex12_log_softmax(exercise, axis):
    mine = exercise("ex12_jvp").log_softmax
    x = randn(4, 6)
    call = lambda t: mine(t, axis=axis)  # noqa: E731
    assert ta.gradcheck(call, (x,), check_forward_ad=True, name="log_softmax")
    assert_same_jvp(call, lambda t: F.log_softmax(t, axis), (x,), (randn(4, 6, seed=1).detach(),))
