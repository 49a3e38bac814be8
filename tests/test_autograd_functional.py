"""tinyattn.autograd.functional against torch.autograd.functional: jacobian (both strategies,
tuples, create_graph), hessian (both outer strategies), vjp, jvp, hvp, vhp, strict's errors."""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.autograd.functional as AF

torch = pytest.importorskip("torch")
TAF = torch.autograd.functional


def _pair(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    return tuple(ta.tensor(a) for a in arrays), tuple(torch.tensor(a) for a in arrays)


def _same(got, want):
    if isinstance(want, tuple | list):  # (torch's forward-mode hessian nests lists)
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)


def two_in_two_out(a, b):
    return (b @ a.tanh()).exp(), a.sum() * b


def scalar(a, b):
    return ((b @ a) ** 2).sum() + (a * a * a).sum()


@pytest.mark.parametrize("single", [True, False])
def test_jacobian_matches_torch(single):
    ours, theirs = _pair((3,), (2, 3))
    if single:
        _same(
            AF.jacobian(lambda a: a.exp() * a.sum(), ours[0]),
            TAF.jacobian(lambda a: a.exp() * a.sum(), theirs[0]),
        )
    else:
        _same(AF.jacobian(two_in_two_out, ours), TAF.jacobian(two_in_two_out, theirs))


def test_jacobian_forward_mode_matches_reverse():
    ours, _ = _pair((3,), (2, 3))
    f = lambda a, b: b @ (a * a)  # noqa: E731
    try:
        forward = AF.jacobian(f, ours, vectorize=True, strategy="forward-mode")
    except RuntimeError as error:
        if "does not support it" in str(error):
            pytest.skip(f"an op has no JVP rule yet: {error}")
        raise
    _same(forward, AF.jacobian(f, ours))


def test_create_graph_keeps_the_graph():
    ours, theirs = _pair((3,))
    a, ta_ = ours[0].requires_grad_(), theirs[0].requires_grad_()
    jac = AF.jacobian(lambda x: x**3, a, create_graph=True)
    tjac = TAF.jacobian(lambda x: x**3, ta_, create_graph=True)
    assert jac.requires_grad
    jac.sum().backward()
    tjac.sum().backward()
    _same(a.grad, ta_.grad)
    assert not AF.jacobian(lambda x: x**3, a).requires_grad


@pytest.mark.parametrize("strategy", ["reverse-mode", "forward-mode"])
def test_hessian_matches_torch(strategy):
    ours, theirs = _pair((3,), (2, 3))
    vectorize = strategy == "forward-mode"
    try:
        got = AF.hessian(scalar, ours, vectorize=vectorize, outer_jacobian_strategy=strategy)
    except RuntimeError as error:
        if "does not support it" in str(error):
            pytest.skip(f"an op has no JVP rule yet: {error}")
        raise
    _same(got, TAF.hessian(scalar, theirs, vectorize=vectorize, outer_jacobian_strategy=strategy))


@pytest.mark.parametrize("name", ["vjp", "jvp", "hvp", "vhp"])
def test_products_match_torch(name):
    ours, theirs = _pair((3,), (2, 3))
    if name in ("vjp", "jvp"):
        v_shapes = [(2,), (2, 3)] if name == "vjp" else [(3,), (2, 3)]
        f = (lambda a, b: b @ a.sin()) if name == "vjp" else two_in_two_out
    else:
        v_shapes, f = [(3,), (2, 3)], scalar
    v, tv = _pair(*v_shapes, seed=1)
    v, tv = (v[0], tv[0]) if name == "vjp" else (v, tv)
    got = getattr(AF, name)(f, ours, v)
    want = getattr(TAF, name)(f, theirs, tv)
    _same(got, want)


def test_v_none_only_for_one_element():
    (a,), (ta_,) = _pair((3,))
    _same(AF.vjp(lambda x: x.sum(), a), TAF.vjp(lambda x: x.sum(), ta_))
    with pytest.raises(RuntimeError, match="v can only be None"):
        AF.vjp(lambda x: x * 2, a)
    with pytest.raises(RuntimeError, match="v can only be None"):
        TAF.vjp(lambda x: x * 2, ta_)


@pytest.mark.parametrize("lib", ["tinyattn", "torch"])
def test_strict_refuses_an_independent_output(lib):
    ours, theirs = _pair((3,), (2,))
    module, inputs = (AF, ours) if lib == "tinyattn" else (TAF, theirs)
    with pytest.raises(RuntimeError, match="independent of input 1"):
        module.jacobian(lambda a, b: a * 2, inputs, strict=True)
    with pytest.raises(RuntimeError, match="independent of input 1"):
        module.vjp(lambda a, b: (a * 2).sum(), inputs, strict=True)
    zero = module.jacobian(lambda a, b: a * 2, inputs)[1]
    assert not np.any(zero.numpy())


def test_argument_errors():
    (a,), _ = _pair((3,))
    with pytest.raises(TypeError, match="Tensor or a tuple of Tensors"):
        AF.jacobian(lambda x: x, [1.0])
    with pytest.raises(ValueError, match="strategy"):
        AF.jacobian(lambda x: x, a, strategy="sideways")
    with pytest.raises(NotImplementedError, match="vectorize"):
        AF.jacobian(lambda x: x, a, strategy="forward-mode")
    with pytest.raises(RuntimeError, match="single element"):
        AF.hessian(lambda x: x * 2, a)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        AF.vjp(lambda x: x * 2, a, a[:2])


def test_compile_refuses_naming_the_transform():
    (a,), _ = _pair((3,))

    @ta.compile
    def step(x):
        return AF.jacobian(lambda y: y * y, x)

    with pytest.raises(RuntimeError, match="jacobian"):
        step(a)
        step(a)
