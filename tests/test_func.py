"""tinyattn.func's derivative transforms and module helpers against torch.func: grad and
grad_and_value (argnums, has_aux, nests), vjp, jacrev, jvp, jacfwd, hessian, their nesting
(grad of grad, jacrev against jacfwd), functional_call and stack_module_state, and errors."""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import nn
from tinyattn.func import (
    functional_call,
    grad,
    grad_and_value,
    hessian,
    jacfwd,
    jacrev,
    jvp,
    stack_module_state,
    vjp,
    vmap,
)

torch = pytest.importorskip("torch")


def _pair(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    return [ta.tensor(a) for a in arrays], [torch.tensor(a) for a in arrays]


def _close(got, want, **kw):
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), **kw)


def _needs_jvp_rules(call):
    """Run a forward-mode call; skip while the ops it uses have no JVP rule yet."""
    try:
        return call()
    except RuntimeError as error:
        if "does not support it" in str(error):
            pytest.skip(f"an op has no JVP rule yet: {error}")
        raise


def scalar(x, w):
    return ((w @ x).tanh() * x.sum()).sum()


def test_grad_and_argnums_match_torch():
    (x, w), (tx, tw) = _pair((3,), (2, 3))
    _close(grad(scalar)(x, w), torch.func.grad(scalar)(tx, tw))
    for g, t in zip(
        grad(scalar, argnums=(0, 1))(x, w), torch.func.grad(scalar, argnums=(0, 1))(tx, tw)
    ):
        _close(g, t)
    _close(grad(scalar, argnums=-1)(x, w), torch.func.grad(scalar, argnums=-1)(tx, tw))


def test_grad_and_value_has_aux_and_nests():
    (x, w), (tx, tw) = _pair((3,), (2, 3))

    def f(params, x):
        loss = (params["w"] @ x).exp().sum()
        return loss, {"doubled": loss * 2}

    (g, (value, aux)) = grad_and_value(f, has_aux=True)({"w": w}, x)
    (tg, (tvalue, taux)) = torch.func.grad_and_value(f, has_aux=True)({"w": tw}, tx)
    _close(g["w"], tg["w"])
    _close(value, tvalue)
    _close(aux["doubled"], taux["doubled"])
    g2, aux2 = grad(f, has_aux=True)({"w": w}, x)
    _close(g2["w"], tg["w"])
    assert not value.requires_grad and not g["w"].requires_grad


def test_grad_of_grad_and_vmap_of_grad():
    (x,), (tx,) = _pair((4,))

    def f(x):
        return (x.sin() * x * x).sum()

    _close(
        grad(lambda x: grad(f)(x).sum())(x),
        torch.func.grad(lambda x: torch.func.grad(f)(x).sum())(tx),
    )
    (xs,), (txs,) = _pair((5, 4))
    _close(vmap(grad(f))(xs), torch.func.vmap(torch.func.grad(f))(txs))


def test_grad_joins_an_outer_graph():
    (x,), (tx,) = _pair((3,))
    x.requires_grad_()
    tx.requires_grad_()
    grad(lambda x: (x**3).sum())(x).sum().backward()
    torch.func.grad(lambda x: (x**3).sum())(tx).sum().backward()
    _close(x.grad, tx.grad)


def test_vjp_matches_torch():
    (x, w, v), (tx, tw, tv) = _pair((3,), (2, 3), (2,))
    f = lambda x, w: (w @ x).sigmoid()  # noqa: E731
    out, fn = vjp(f, x, w)
    tout, tfn = torch.func.vjp(f, tx, tw)
    _close(out, tout)
    for g, t in zip(fn(v), tfn(tv)):
        _close(g, t)
    for g, t in zip(fn(v * 2), tfn(tv * 2)):  # a second call: the graph is kept
        _close(g, t)
    out, fn, aux = vjp(lambda x, w: (f(x, w), x * 3), x, w, has_aux=True)
    _close(aux, tx * 3)


def test_jacrev_matches_torch_and_shapes():
    (x, w), (tx, tw) = _pair((3,), (2, 3))
    f = lambda x, w: (w @ x.exp()).tanh()  # noqa: E731
    _close(jacrev(f)(x, w), torch.func.jacrev(f)(tx, tw))
    for g, t in zip(jacrev(f, argnums=(0, 1))(x, w), torch.func.jacrev(f, argnums=(0, 1))(tx, tw)):
        assert tuple(g.shape) == tuple(t.shape)
        _close(g, t)
    two = lambda x: (x * 2, x.sum())  # noqa: E731
    for g, t in zip(jacrev(two)(x), torch.func.jacrev(two)(tx)):
        _close(g, t)


def test_jvp_jacfwd_hessian_match_torch():
    (x, v), (tx, tv) = _pair((3,), (3,))
    f = lambda x: x * x * 3.0 + x  # noqa: E731
    out, change = _needs_jvp_rules(lambda: jvp(f, (x,), (v,)))
    tout, tchange = torch.func.jvp(f, (tx,), (tv,))
    _close(out, tout)
    _close(change, tchange)
    _close(_needs_jvp_rules(lambda: jacfwd(f)(x)), torch.func.jacfwd(f)(tx))
    g = lambda x: (x * x * x).sum()  # noqa: E731
    _close(_needs_jvp_rules(lambda: hessian(g)(x)), torch.func.hessian(g)(tx))


def test_jacrev_agrees_with_jacfwd():
    (x,), _ = _pair((4,))
    f = lambda x: (x * x).sum() * x - x  # noqa: E731
    _close(jacrev(f)(x), _needs_jvp_rules(lambda: jacfwd(f)(x)), rtol=1e-12)


def test_functional_call_and_ensembles_match_torch():
    ta.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    reference = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)
    ).double()
    (x,), (tx,) = _pair((5, 3))
    params = {
        k: ta.tensor(np.random.default_rng(1).standard_normal(v.shape))
        for k, v in model.named_parameters()
    }
    tparams = {k: torch.tensor(v.numpy()) for k, v in params.items()}
    first = {k: v for k, v in params.items() if k.startswith("0.")}
    rest = {k: v for k, v in params.items() if not k.startswith("0.")}
    _close(
        functional_call(model, (first, rest), x), torch.func.functional_call(reference, tparams, tx)
    )
    assert model[0].weight is dict(model.named_parameters())["0.weight"]  # put back
    with pytest.raises(ValueError, match="multiple values"):
        functional_call(model, (first, first), x)
    with pytest.raises(RuntimeError, match="Missing key"):
        functional_call(model, first, x, strict=True)
    models = [nn.Linear(3, 2) for _ in range(4)]
    stacked, buffers = stack_module_state(models)
    assert tuple(stacked["weight"].shape) == (4, 2, 3) and stacked["weight"].requires_grad
    x = x.float()
    out = vmap(lambda p, x: functional_call(models[0], p, (x,)), in_dims=(0, None))(stacked, x)
    for i, m in enumerate(models):
        _close(out[i], m(x), rtol=1e-6)


def test_tied_weights():
    ta.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3, bias=False), nn.Linear(3, 3, bias=False))
    model[1].weight = model[0].weight
    eye = ta.tensor(np.eye(3, dtype=np.float32))
    (x,), _ = _pair((2, 3))
    x = x.float()
    _close(functional_call(model, {"0.weight": eye}, x), x)
    assert not np.allclose(
        functional_call(model, {"0.weight": eye}, x, tie_weights=False).detach().numpy(), x.numpy()
    )


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda x: grad(lambda x: x * 2)(x), "scalar"),
        (lambda x: grad(lambda x: 1.0)(x), "Tensor"),
        (lambda x: grad(scalar, argnums=2)(x, x), "argnums"),
        (lambda x: grad(scalar, argnums=())(x, x), "non-empty"),
        (lambda x: grad(scalar, argnums=0.5)(x, x), "argnums"),
        (lambda x: grad(lambda x: x.sum(), has_aux=True)(x), "tuple"),
        (lambda x: vjp(lambda x: x * 2, x)[1](x[:2]), "shape"),
        (lambda x: jvp(lambda x: x, [x], [x]), "tuple"),
        (lambda x: jacrev(lambda x: x, chunk_size=0)(x), "chunk_size"),
    ],
)
def test_errors(call, match):
    (x,), _ = _pair((3,))
    with pytest.raises((RuntimeError, ValueError), match=match):
        call(x)


def test_compile_refuses_grad_naming_it():
    (x,), _ = _pair((3,))

    @ta.compile
    def step(x):
        return grad(lambda x: (x * x).sum())(x)

    with pytest.raises(RuntimeError, match="grad"):
        step(x)
        step(x)


def test_vmap_of_a_vjp_fn_over_a_basis_is_the_jacobian():
    """torch.func's Jacobian recipe: vjp once, then vmap its vjp_fn over the unit vectors
    (a vmap that begins after vjp: one backward per sample)."""
    import functools

    from tinyattn.func import jacrev, vjp, vmap

    ta.manual_seed(0)
    weight, bias, x = ta.randn(5, 5), ta.randn(5), ta.randn(5)

    def predict(weight, bias, x):
        return ta.nn.functional.linear(x, weight, bias).tanh()

    _, vjp_fn = vjp(functools.partial(predict, weight, bias), x)
    (rows,) = vmap(vjp_fn)(ta.eye(5))
    expected = jacrev(predict, argnums=2)(weight, bias, x)
    np.testing.assert_allclose(rows.numpy(), expected.numpy(), atol=1e-6)


def test_a_gradient_keeps_its_graph_to_a_parameter_the_function_closes_over():
    """As torch.func's: grad of a function that reads a tensor requiring grad (not an input)
    is differentiable with respect to that tensor (meta-learning's second derivative)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x0, w0 = rng.standard_normal(3), rng.standard_normal(3)
    w, tw = ta.tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    grad(lambda x: (x * w).sin().sum())(ta.tensor(x0)).sum().backward()
    torch.func.grad(lambda x: (x * tw).sin().sum())(torch.tensor(x0)).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-10)
