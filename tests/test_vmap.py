"""vmap against torch.func.vmap and against a loop over samples: rules, in_dims and out_dims,
nesting, randomness, chunk_size, the loop fallback's warning, errors, and ta.compile's refusal."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn.func import grad, vmap

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _pair(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    return [ta.tensor(a) for a in arrays], [torch.tensor(a) for a in arrays]


# (name, function written for either library through `lib`/`fn`, shapes, in_dims)
CASES = [
    ("add broadcast", lambda lib, fn, a, b: a + b, [(4, 3), (3,)], (0, None)),
    ("mul both", lambda lib, fn, a, b: a * b.exp(), [(4, 2, 3), (4, 3)], 0),
    ("sum all", lambda lib, fn, a: a.sum(), [(5, 2, 3)], 0),
    ("mean dim", lambda lib, fn, a: a.mean(1), [(5, 2, 3)], 0),
    ("max dim -1", lambda lib, fn, a: a.amax(-1), [(5, 2, 3)], 0),
    ("softmax", lambda lib, fn, a: fn.softmax(a, dim=-1), [(5, 2, 3)], 0),
    ("log_softmax dim 0", lambda lib, fn, a: fn.log_softmax(a, dim=0), [(5, 2, 3)], 0),
    ("matmul vec-mat", lambda lib, fn, a, b: a @ b, [(4, 3), (3, 2)], (0, None)),
    ("matmul mat-vec batched", lambda lib, fn, a, b: a @ b, [(3, 2), (4, 2)], (None, 0)),
    ("matmul both", lambda lib, fn, a, b: a @ b, [(4, 2, 3), (4, 3, 5)], 0),
    ("matmul dot", lambda lib, fn, a, b: a @ b, [(4, 3), (3,)], (0, None)),
    ("matmul dot both", lambda lib, fn, a, b: a @ b, [(4, 3), (4, 3)], 0),
    ("matmul dot reflected", lambda lib, fn, a, b: b @ a, [(4, 3), (3,)], (0, None)),
    ("matmul stack", lambda lib, fn, a, b: a @ b, [(4, 2, 3), (6, 3, 5)], (0, None)),
    (
        "linear",
        lambda lib, fn, x, w, b: fn.linear(x, w, b),
        [(4, 3), (2, 3), (2,)],
        (0, None, None),
    ),
    (
        "linear batched w",
        lambda lib, fn, x, w, b: fn.linear(x, w, b),
        [(4, 3), (4, 2, 3), (4, 2)],
        (None, 0, 0),
    ),
    ("reshape permute", lambda lib, fn, a: a.reshape(3, 2).permute(1, 0), [(4, 6)], 0),
    ("transpose index", lambda lib, fn, a: a.transpose(0, 1)[1:, 0], [(4, 2, 3)], 0),
    ("cat", lambda lib, fn, a, b: lib.cat([a, b], 0), [(4, 3), (2,)], (0, None)),
    ("unsqueeze expand", lambda lib, fn, a: a.unsqueeze(0).expand(2, 3), [(4, 3)], 0),
    ("where relu", lambda lib, fn, a: lib.where(a > 0, a, a * 0.1).relu(), [(4, 3)], 0),
    ("layer_norm", lambda lib, fn, a: fn.layer_norm(a, (3,)), [(4, 2, 3)], 0),
    ("in_dim 1", lambda lib, fn, a: a.sum(0), [(3, 4)], 1),
    ("in_dim -1", lambda lib, fn, a, b: a * b, [(3, 4), (3, 4)], (-1, 1)),
]


@pytest.mark.parametrize("name,function,shapes,in_dims", CASES, ids=[c[0] for c in CASES])
def test_vmap_matches_torch(name, function, shapes, in_dims):
    ours, theirs = _pair(*shapes)
    got = vmap(lambda *a: function(ta, F, *a), in_dims=in_dims)(*ours)
    want = torch.func.vmap(lambda *a: function(torch, TF, *a), in_dims=in_dims)(*theirs)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.numpy(), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("out_dims", [0, 1, -1, (1, 0)])
def test_out_dims_and_several_outputs(out_dims):
    (a,), (ta_,) = _pair((4, 3, 2))

    def f(lib):
        return lambda x: (x * 2, x.sum(-1))

    if isinstance(out_dims, int) and out_dims != 0:
        out_dims = (out_dims, 0)
    got = vmap(f(ta), out_dims=out_dims)(a)
    want = torch.func.vmap(f(torch), out_dims=out_dims)(ta_)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy())


def test_unbatched_output_is_expanded_and_nests():
    (a,), _ = _pair((4, 3))
    out = vmap(lambda x: ta.ones(2), in_dims=0)(a)
    assert tuple(out.shape) == (4, 2)
    got = vmap(lambda d: {"y": d["x"].sin()}, in_dims=({"x": 0},))({"x": a})
    np.testing.assert_allclose(got["y"].numpy(), a.sin().numpy())


def test_nested_vmap_is_a_double_loop():
    (a, b), (ta_, tb) = _pair((2, 3, 4), (3, 4, 5))
    f = lambda x, y: (x @ y).tanh()  # noqa: E731
    got = vmap(vmap(f, in_dims=(0, None)), in_dims=(None, 0))(a, b)
    want = torch.func.vmap(torch.func.vmap(f, in_dims=(0, None)), in_dims=(None, 0))(ta_, tb)
    assert tuple(got.shape) == tuple(want.shape) == (3, 2, 3, 5)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_chunk_size_gives_the_same_results():
    (a,), _ = _pair((7, 3))
    f = lambda x: (x.exp() * x).sum()  # noqa: E731
    np.testing.assert_allclose(vmap(f, chunk_size=3)(a).numpy(), vmap(f)(a).numpy())


def test_gradient_flows_through_vmap():
    (a,), (ta_,) = _pair((4, 3))
    a.requires_grad_()
    ta_.requires_grad_()
    vmap(lambda x: (x * x.sin()).sum())(a).sum().backward()
    torch.func.vmap(lambda x: (x * x.sin()).sum())(ta_).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta_.grad.numpy())


def test_per_sample_grads_match_torch():
    (w, b, x), (tw, tb, tx) = _pair((3, 5), (3,), (8, 5))
    y = np.arange(8) % 3

    def loss(lib, fn):
        return lambda w, b, x, y: fn.cross_entropy(fn.linear(x, w, b).unsqueeze(0), y.unsqueeze(0))

    got = vmap(grad(loss(ta, F), argnums=(0, 1)), in_dims=(None, None, 0, 0))(w, b, x, ta.tensor(y))
    want = torch.func.vmap(
        torch.func.grad(loss(torch, TF), argnums=(0, 1)), in_dims=(None, None, 0, 0)
    )(tw, tb, tx, torch.tensor(y))
    for g, t in zip(got, want):
        np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=1e-10, atol=1e-12)


def test_an_op_without_a_rule_loops_with_a_warning_naming_it():
    (a,), (ta_,) = _pair((4, 3, 3))
    with pytest.warns(UserWarning, match="no batching rule for Diagonal"):
        got = vmap(lambda x: x.diagonal())(a)
    np.testing.assert_allclose(got.numpy(), torch.func.vmap(lambda x: x.diagonal())(ta_).numpy())


def test_randomness():
    (a,), _ = _pair((6, 50))
    with pytest.raises(RuntimeError, match="randomness"):
        vmap(lambda x: F.dropout(x, 0.5))(a)
    with pytest.raises(RuntimeError, match="randomness"):
        vmap(lambda x: x + ta.randn(50))(a)
    ones = ta.ones(6, 50, dtype=ta.float64)
    same = vmap(lambda x: F.dropout(x, 0.5), randomness="same")(ones)
    assert all(np.array_equal(same[0].numpy(), same[i].numpy()) for i in range(6))
    different = vmap(lambda x: F.dropout(x, 0.5), randomness="different")(ones)
    assert not all(np.array_equal(different[0].numpy(), different[i].numpy()) for i in range(6))
    shared = vmap(lambda x: x + ta.randn(50, dtype=ta.float64), randomness="same")(ones)
    np.testing.assert_allclose(shared[0].numpy(), shared[5].numpy())


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda a: vmap(lambda x: x, in_dims=[0])(a), "in_dims"),
        (lambda a: vmap(lambda x: x, in_dims=2)(a), "in_dim"),
        (lambda a: vmap(lambda x, y: x, in_dims=(0, 0))(a, 1.0), "non-Tensor"),
        (lambda a: vmap(lambda x, y: x + y)(a, a[:2]), "same size"),
        (lambda a: vmap(lambda x: x, in_dims=None)(a), "at least one"),
        (lambda a: vmap(lambda x: 1.0)(a), "only return Tensors"),
        (lambda a: vmap(lambda x: x, out_dims=None)(a), "must not vary"),
        (lambda a: vmap(lambda x: x, randomness="sometimes")(a), "randomness"),
        (lambda a: vmap(lambda x: x, chunk_size=0)(a), "chunk_size"),
    ],
)
def test_errors(call, match):
    (a,), _ = _pair((4, 3))
    with pytest.raises((ValueError, RuntimeError), match=match):
        call(a)


def test_compile_refuses_vmap_naming_it():
    (a,), _ = _pair((4, 3))

    @ta.compile
    def step(x):
        return vmap(lambda s: s.sin())(x)

    with pytest.raises(RuntimeError, match="vmap"):
        step(a)
        step(a)


def test_comparisons_batch_without_a_loop():
    """A mask from a comparison (array code with no gradient) batches as an elementwise op."""
    x = ta.randn(4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the loop's warning would fail the test
        masked = vmap(lambda t: ta.where(t > 0, t, 0.0) * (t != 0))(x)
    np.testing.assert_array_equal(masked.numpy(), np.where(x.numpy() > 0, x.numpy(), 0.0))


def test_per_sample_gradients_of_a_small_cnn_equal_a_loop():
    """torch.func's per-sample-gradient recipe on a CNN (conv, max pool, log-softmax, NLL):
    vmap(grad(loss)) with functional_call, against one backward per sample."""
    from tinyattn.func import functional_call

    ta.manual_seed(0)
    model = ta.nn.Sequential(
        ta.nn.Conv2d(1, 4, 3),
        ta.nn.ReLU(),
        ta.nn.MaxPool2d(2),
        ta.nn.Flatten(),
        ta.nn.Linear(36, 5),
    )
    data, targets = ta.randn(6, 1, 8, 8), ta.randint(5, (6,))
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(params, sample, target):
        out = functional_call(model, params, (sample.unsqueeze(0),))
        return F.nll_loss(F.log_softmax(out, dim=1), target.unsqueeze(0))

    batched = vmap(grad(loss), in_dims=(None, 0, 0))(params, data, targets)
    for i in range(6):
        model.zero_grad()
        F.nll_loss(F.log_softmax(model(data[i : i + 1]), dim=1), targets[i : i + 1]).backward()
        for name, p in model.named_parameters():
            np.testing.assert_allclose(batched[name][i].numpy(), p.grad.numpy(), atol=1e-5)


def test_an_ensemble_runs_as_one_vmap_over_stacked_parameters():
    """torch.func's ensembling recipe: stack_module_state, a base model on the meta device,
    vmap over functional_call, against each model called in turn."""
    import copy

    from tinyattn.func import functional_call, stack_module_state

    ta.manual_seed(0)
    models = [
        ta.nn.Sequential(ta.nn.Linear(6, 8), ta.nn.ReLU(), ta.nn.Linear(8, 3)) for _ in range(4)
    ]
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")

    def fmodel(params, buffers, x):
        return functional_call(base, (params, buffers), (x,))

    x = ta.randn(5, 6)
    together = vmap(fmodel, in_dims=(0, 0, None))(params, buffers, x)
    expected = ta.stack([m(x) for m in models])
    np.testing.assert_allclose(together.detach().numpy(), expected.detach().numpy(), atol=1e-6)


def test_vmap_of_jacfwd_through_a_convolution_against_torch():
    """Forward mode under vmap: each op's batching rule carries the tangents of the batch (the
    logical op's jvp never runs, as its forward did not)."""
    ta.manual_seed(0)
    conv = ta.nn.Conv2d(2, 3, 3)
    mine = lambda t: conv(t.unsqueeze(0)).tanh().sum()  # noqa: E731
    theirs_conv = torch.nn.Conv2d(2, 3, 3)
    theirs_conv.weight.data = torch.tensor(conv.weight.detach().numpy())
    theirs_conv.bias.data = torch.tensor(conv.bias.detach().numpy())
    theirs = lambda t: theirs_conv(t.unsqueeze(0)).tanh().sum()  # noqa: E731
    x = np.random.default_rng(0).standard_normal((4, 2, 5, 5)).astype(np.float32)
    got = vmap(ta.func.jacfwd(mine))(ta.tensor(x))
    expected = torch.func.vmap(torch.func.jacfwd(theirs))(torch.tensor(x))
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), atol=1e-5)


class _Sin(ta.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos()


class _Cube(ta.autograd.Function):
    @staticmethod
    def forward(x):
        return x**3, 3 * x**2

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output[1])

    @staticmethod
    def backward(ctx, g, dg):
        x, d = ctx.saved_tensors
        return g * d + dg * 6 * x

    @staticmethod
    def vmap(info, in_dims, x):
        assert info.batch_size == 4 and in_dims == (0,)
        return _Cube.apply(x), (0, 0)


class _NoVmap(_Sin):
    generate_vmap_rule = False


@pytest.mark.parametrize("function", [_Sin, _Cube])
def test_custom_functions_batch_by_their_vmap_support_and_keep_gradients(function):
    """generate_vmap_rule (one apply per sample) and a static vmap (on the batch): values and
    per-sample gradients through the Function's own backward, not zeros."""
    x = ta.randn(4, 3)
    first = (lambda t: function.apply(t)) if function is _Sin else (lambda t: function.apply(t)[0])
    values = vmap(first)(x)
    gradients = vmap(grad(lambda t: first(t).sum()))(x)
    expected = (np.sin, np.cos) if function is _Sin else (lambda a: a**3, lambda a: 3 * a**2)
    np.testing.assert_allclose(values.numpy(), expected[0](x.numpy()), rtol=1e-6)
    np.testing.assert_allclose(gradients.numpy(), expected[1](x.numpy()), rtol=1e-5)


def test_a_custom_function_without_vmap_support_is_refused_by_name():
    with pytest.raises(RuntimeError, match="_NoVmap.*vmap support"):
        vmap(_NoVmap.apply)(ta.randn(4, 3))


def test_a_kernel_by_jvps_of_vjps_in_nested_vmaps_against_torch():
    """The neural-tangent-kernel recipe by products: vmap(vmap(...)) over two inputs, inside it
    a vjp, a vmap of its vjp_fn over a basis, and a jvp whose tangent that vmap batches on a
    primal it does not batch (the tangent's samples align with the batch)."""
    rng = np.random.default_rng(0)
    w, x1, x2 = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (2, 4), (3, 4)))

    def kernel(lib, fn, F, eye, w, x1, x2):
        def f(weight, x):
            return F.linear(x, weight).tanh()

        def per_pair(a, b):
            _, vjp_fn = fn.vjp(lambda weight: f(weight, a), w)

            def one(vector):
                (v,) = vjp_fn(vector)
                return fn.jvp(lambda weight: f(weight, b), (w,), (v,))[1]

            return fn.vmap(one)(eye(3))

        return fn.vmap(fn.vmap(per_pair, (None, 0)), (0, None))(x1, x2)

    got = kernel("ta", ta.func, F, ta.eye, *(ta.tensor(a) for a in (w, x1, x2)))
    expected = kernel("torch", torch.func, TF, torch.eye, *(torch.tensor(a) for a in (w, x1, x2)))
    np.testing.assert_allclose(got.detach().numpy(), expected.numpy(), atol=1e-5)
