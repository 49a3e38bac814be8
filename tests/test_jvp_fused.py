"""Forward mode through the fused ops and the layers built on them, against PyTorch's forward AD.

Each case runs one function on dual tensors in tinyattn (``tinyattn.autograd.forward_ad``) and
in PyTorch (``torch.autograd.forward_ad``) from the same float64 primals and tangents, and
compares the outputs' tangents. PyTorch's CPU scaled_dot_product_attention has no forward AD,
so attention is compared with the math written out in torch ops (matmul, softmax); block-wise
attention, whose tangent is computed tile by tile, is checked against finite differences too.
A case whose graph runs an op without a jvp rule yet is an expected failure, naming the op.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import kernels, nn, ops
from tinyattn.autograd import Function
from tinyattn.autograd import forward_ad as ta_forward_ad
from tinyattn.checking import gradcheck

torch = pytest.importorskip("torch")
torch_forward_ad = pytest.importorskip("torch.autograd.forward_ad")
TF = torch.nn.functional

TOLERANCE = {"rtol": 1e-9, "atol": 1e-11}


def random(*shape: int, seed: int = 0, low: float | None = None) -> np.ndarray:
    """Standard normal float64 values, or uniform in (low, 1 - low) when `low` is given."""
    rng = np.random.default_rng(seed)
    return rng.uniform(low, 1.0 - low, shape) if low is not None else rng.standard_normal(shape)


def functions_in_graph(out: ta.Tensor) -> set[type]:
    """The Function classes of every node behind `out`."""
    found, seen, stack = set(), set(), [out]
    while stack:
        fn = stack.pop()._ctx
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        found.add(type(fn))
        stack.extend(t for t in fn.inputs or () if hasattr(t, "_ctx"))
    return found


def xfail_without_rules(fn, primals: list) -> None:
    """An expected failure when fn's graph runs a Function that has no jvp rule yet."""
    inputs = [ta.tensor(p, dtype="float64", requires_grad=True) for p in primals]
    missing = {c.__name__ for c in functions_in_graph(fn(*inputs)) if c.jvp is Function.jvp}
    if missing:
        pytest.xfail(f"no jvp rule yet: {', '.join(sorted(missing))}")


def tinyattn_jvp(fn, primals: list, tangents: list) -> tuple[np.ndarray, np.ndarray]:
    """(f(x), J v) by tinyattn's forward mode; a None tangent leaves that input plain."""
    with ta_forward_ad.dual_level():
        duals = [
            ta.tensor(p, dtype="float64")
            if t is None
            else ta_forward_ad.make_dual(
                ta.tensor(p, dtype="float64"), ta.tensor(t, dtype="float64")
            )
            for p, t in zip(primals, tangents, strict=True)
        ]
        primal, tangent = ta_forward_ad.unpack_dual(fn(*duals))
        assert tangent is not None, "the output got no tangent"
        return primal.detach().numpy(), tangent.detach().numpy()


def torch_jvp(fn, primals: list, tangents: list) -> tuple[np.ndarray, np.ndarray]:
    """(f(x), J v) by PyTorch's forward mode."""
    with torch_forward_ad.dual_level():
        duals = [
            torch.from_numpy(p.copy())
            if t is None
            else torch_forward_ad.make_dual(torch.from_numpy(p.copy()), torch.from_numpy(t.copy()))
            for p, t in zip(primals, tangents, strict=True)
        ]
        primal, tangent = torch_forward_ad.unpack_dual(fn(*duals))
        return primal.detach().numpy(), tangent.detach().numpy()


def assert_jvps_agree(ta_fn, torch_fn, primals: list, tangents: list | None = None) -> None:
    """tinyattn's and PyTorch's values and tangents agree (tangents: standard normal)."""
    if tangents is None:
        tangents = [random(*p.shape, seed=10 + i) for i, p in enumerate(primals)]
    xfail_without_rules(ta_fn, primals)
    value, tangent = tinyattn_jvp(ta_fn, primals, tangents)
    expected_value, expected_tangent = torch_jvp(torch_fn, primals, tangents)
    np.testing.assert_allclose(value, expected_value, **TOLERANCE)
    assert tangent.shape == expected_tangent.shape
    np.testing.assert_allclose(tangent, expected_tangent, **TOLERANCE)


# ---------------------------------------------------------------------------- fused ops
def test_softmax_and_log_softmax():
    x = random(3, 5)
    x[0, 1] = -math.inf  # a masked logit: weight 0, tangent 0 (log-softmax: its own dx)
    for dim in (1, 0):
        assert_jvps_agree(
            lambda a, dim=dim: F.softmax(a, dim=dim), lambda a, dim=dim: TF.softmax(a, dim=dim), [x]
        )
    assert_jvps_agree(lambda a: F.log_softmax(a, dim=-1), lambda a: TF.log_softmax(a, dim=-1), [x])


@pytest.mark.parametrize("tangents", ["all", "x only", "weight only", "bias only"])
def test_linear(tangents):
    primals = [random(2, 3, 4), random(5, 4, seed=1), random(5, seed=2)]
    chosen = {"all": (0, 1, 2), "x only": (0,), "weight only": (1,), "bias only": (2,)}
    given = [
        random(*p.shape, seed=20 + i) if i in chosen[tangents] else None
        for i, p in enumerate(primals)
    ]
    assert_jvps_agree(F.linear, TF.linear, primals, given)
    assert_jvps_agree(F.linear, TF.linear, [random(4), random(5, 4, seed=1)])  # 1-d, no bias


def test_layer_norm():
    x, weight, bias = random(2, 3, 4), random(3, 4, seed=1), random(3, 4, seed=2)
    assert_jvps_agree(
        lambda a, w, b: F.layer_norm(a, (3, 4), w, b),
        lambda a, w, b: TF.layer_norm(a, (3, 4), w, b),
        [x, weight, bias],
    )
    assert_jvps_agree(lambda a: F.layer_norm(a, (4,)), lambda a: TF.layer_norm(a, (4,)), [x])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("options", ["plain", "ignore_index", "weight", "smoothing", "all"])
def test_cross_entropy(reduction, options):
    logits = random(6, 4)
    targets = np.array([0, 3, 1, 3, 2, 1])
    weight = np.array([0.5, 2.0, 1.0, 1.5])
    kwargs = {"reduction": reduction}
    if options in ("ignore_index", "all"):
        kwargs["ignore_index"] = 3
    if options in ("smoothing", "all"):
        kwargs["label_smoothing"] = 0.2

    def run(functional, tensor, x):
        extra = dict(kwargs)
        if options in ("weight", "all"):
            extra["weight"] = tensor(weight)
        return functional.cross_entropy(x, tensor(targets), **extra)

    assert_jvps_agree(
        lambda x: run(F, ta.tensor, x), lambda x: run(TF, torch.from_numpy, x), [logits]
    )


def test_cross_entropy_over_extra_axes():
    logits, targets = random(2, 4, 3), np.array([[0, 3, 1], [2, 2, 0]])  # (N, C, d), (N, d)
    assert_jvps_agree(
        lambda x: F.cross_entropy(x, ta.tensor(targets)),
        lambda x: TF.cross_entropy(x, torch.from_numpy(targets)),
        [logits],
    )


def test_nll_loss_and_binary_cross_entropy():
    targets = np.array([0, 2, 1])
    assert_jvps_agree(
        lambda x: F.nll_loss(F.log_softmax(x, dim=-1), ta.tensor(targets), ignore_index=1),
        lambda x: TF.nll_loss(TF.log_softmax(x, dim=-1), torch.from_numpy(targets), ignore_index=1),
        [random(3, 4)],
    )
    p, t = random(2, 5, low=0.05), random(2, 5, seed=1, low=0.0)
    assert_jvps_agree(F.binary_cross_entropy, TF.binary_cross_entropy, [p, t])
    assert_jvps_agree(
        lambda a, b: F.binary_cross_entropy(a, b, reduction="none"),
        lambda a, b: TF.binary_cross_entropy(a, b, reduction="none"),
        [p, t],
        [random(2, 5, seed=3), None],
    )


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    assert_jvps_agree(
        lambda a: F.gelu(a, approximate=approximate),
        lambda a: TF.gelu(a, approximate=approximate),
        [random(3, 4)],
    )


def test_dropout_tangent_uses_the_forward_mask():
    """dropout is linear in x for its mask: along the tangent x itself, J x = dropout(x)."""
    x = random(4, 6)
    ta.manual_seed(0)
    out, tangent = tinyattn_jvp(lambda a: F.dropout(a, 0.4), [x], [x])
    np.testing.assert_allclose(tangent, out, rtol=1e-15)
    assert (out == 0).any() and (out != 0).any()


# ------------------------------------------------------------------ convolution and pooling
def test_unfold_and_fold_against_finite_differences():
    x = ta.tensor(random(2, 5, 6), dtype="float64", requires_grad=True)
    options = {"window": (2, 3), "step": (1, 2), "dilation": (2, 1)}
    assert gradcheck(lambda a: ops.Unfold.apply(a, **options), (x,), check_forward_ad=True)
    windows = ops.Unfold.apply(x, **options).detach().requires_grad_()
    assert gradcheck(
        lambda w: ops.Fold.apply(w, size=(5, 6), **options), (windows,), check_forward_ad=True
    )


CONVOLUTIONS = [
    (
        "conv1d",
        lambda f: lambda x, w, b: f.conv1d(x, w, b, stride=2, padding=1),
        [(2, 2, 7), (3, 2, 3), (3,)],
    ),
    (
        "conv2d",
        lambda f: lambda x, w, b: f.conv2d(x, w, b, stride=(1, 2), padding=1, groups=2),
        [(2, 4, 5, 6), (2, 2, 3, 2), (2,)],
    ),
    (
        "conv3d",
        lambda f: lambda x, w: f.conv3d(x, w, padding=(1, 0, 1), dilation=(1, 2, 1)),
        [(1, 2, 3, 5, 4), (3, 2, 2, 2, 2)],
    ),
    ("max_pool2d", lambda f: lambda x: f.max_pool2d(x, 2, stride=1, padding=1), [(2, 3, 4, 5)]),
    ("avg_pool2d", lambda f: lambda x: f.avg_pool2d(x, 3, stride=2, padding=1), [(2, 3, 5, 6)]),
]


@pytest.mark.parametrize("name,make,shapes", CONVOLUTIONS, ids=[c[0] for c in CONVOLUTIONS])
def test_convolution_and_pooling(name, make, shapes):
    primals = [random(*s, seed=i) for i, s in enumerate(shapes)]
    assert_jvps_agree(make(F), make(TF), primals)


# --------------------------------------------------------------------------- recurrent cells
@pytest.mark.parametrize("kind", ["RNNCell", "LSTMCell", "GRUCell"])
def test_recurrent_cells(kind):
    torch.manual_seed(0)
    reference = getattr(torch.nn, kind)(3, 4).double()
    cell = getattr(nn, kind)(3, 4).double()
    for name, parameter in reference.named_parameters():
        getattr(cell, name).array[...] = parameter.detach().numpy()
    x, h = random(2, 3), random(2, 4, seed=1)
    if kind != "LSTMCell":
        assert_jvps_agree(cell, reference, [x, h])
        return
    c = random(2, 4, seed=2)
    for output in (0, 1):  # h' and c'
        assert_jvps_agree(
            lambda a, b, d, output=output: cell(a, (b, d))[output],
            lambda a, b, d, output=output: reference(a, (b, d))[output],
            [x, h, c],
        )


# --------------------------------------------------------------------------------- attention
def torch_attention(q, k, v, allowed=None, scale=None):
    """softmax(q k^T * scale, masked) v, written out with torch ops (forward AD works)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if allowed is not None:
        scores = scores.masked_fill(~allowed, -math.inf)
    return torch.softmax(scores, dim=-1) @ v


def causal(tq: int, tk: int) -> np.ndarray:
    return np.tril(np.ones((tq, tk), dtype=bool))


def test_scaled_dot_product_attention_causal():
    primals = [random(2, 2, 5, 4), random(2, 2, 5, 4, seed=1), random(2, 2, 5, 3, seed=2)]
    assert_jvps_agree(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda q, k, v: torch_attention(q, k, v, torch.from_numpy(causal(5, 5))),
        primals,
    )


def torch_multi_head(module, query, key, allowed, heads):
    """nn.MultiHeadAttention's math in torch ops, from the module's parameters."""

    def project(layer, x):
        weight, bias = (torch.from_numpy(p.detach().numpy()) for p in (layer.weight, layer.bias))
        return x @ weight.T + bias

    def split(x):  # (B, T, C) -> (B, H, T, D)
        batch, length, width = x.shape
        return x.reshape(batch, length, heads, width // heads).transpose(1, 2)

    q, k, v = (
        split(project(layer, x))
        for layer, x in zip((module.q_proj, module.k_proj, module.v_proj), (query, key, key))
    )
    out = torch_attention(q, k, v, allowed)  # (B, H, Tq, D)
    batch, _, length, _ = out.shape
    return project(module.out_proj, out.transpose(1, 2).reshape(batch, length, -1))


@pytest.mark.parametrize("cross", [False, True], ids=["self causal", "cross masked"])
def test_multi_head_attention_runs_heads_attention(cross):
    ta.manual_seed(0)
    module = nn.MultiHeadAttention(8, 2).double()
    query, key = random(2, 5, 8), random(2, 6 if cross else 5, 8, seed=1)
    if cross:
        allowed = np.random.default_rng(3).random((5, 6)) > 0.3
        allowed[:, 0] = True  # every query attends to some key (the module's own check)

        def run(q, k):
            return module(q, k, mask=ta.tensor(allowed))

        def reference(q, k):
            return torch_multi_head(module, q, k, torch.from_numpy(allowed), 2)

        primals = [query, key]
    else:

        def run(q):
            return module(q, is_causal=True)

        def reference(q):
            return torch_multi_head(module, q, q, torch.from_numpy(causal(5, 5)), 2)

        primals = [query]
    inputs = [ta.tensor(p, dtype="float64", requires_grad=True) for p in primals]
    assert ops.HeadsAttention in functions_in_graph(run(*inputs))
    assert_jvps_agree(run, reference, primals)


HEADS_ROWS = [
    ("plain", False, False),
    ("masked", False, True),
    ("packed", True, False),
    ("packed masked", True, True),
]


@pytest.mark.parametrize("name,packed,masked", HEADS_ROWS, ids=[r[0] for r in HEADS_ROWS])
def test_heads_attention_against_finite_differences(device, name, packed, masked):
    mask = (ta.tensor(causal(4, 4), device=device),) if masked else ()
    shapes = [(2, 4, 12)] if packed else [(2, 4, 4)] * 3
    inputs = tuple(
        ta.tensor(random(*s, seed=i), dtype="float64", device=device, requires_grad=True)
        for i, s in enumerate(shapes)
    )

    def run(*tensors):
        return ops.HeadsAttention.apply(*tensors, *mask, heads=2, scale=0.6, packed=packed)

    assert gradcheck(run, inputs, check_forward_ad=True)


@pytest.fixture
def blockwise(monkeypatch):
    """Force the block-wise path, with tiles of 2 queries x 3 keys."""
    monkeypatch.setattr(ta.functional, "BLOCKWISE_MIN_SCORES", 0)
    for prefix in ("", "GPU_"):
        monkeypatch.setattr(kernels, f"{prefix}ATTENTION_BLOCK_KEYS", 3)
        monkeypatch.setattr(kernels, f"{prefix}ATTENTION_BLOCK_SCORES", 2 * 2 * 3)


@pytest.mark.parametrize("mask", ["none", "causal", "bool with an empty row"])
def test_blockwise_attention(device, blockwise, mask):
    primals = [random(2, 5, 4), random(2, 7, 4, seed=1), random(2, 7, 3, seed=2)]
    allowed = np.random.default_rng(4).random((5, 7)) > 0.3
    allowed[1] = False  # a query that may attend to nothing: output and tangent 0
    options = {"none": {}, "causal": {"is_causal": True}}.get(mask)

    def run(q, k, v):
        if options is not None:
            return F.scaled_dot_product_attention(q, k, v, **options)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=ta.tensor(allowed, device=q.device)
        )

    inputs = [ta.tensor(p, dtype="float64", device=device, requires_grad=True) for p in primals]
    assert ops.BlockwiseAttention in functions_in_graph(run(*inputs))
    assert gradcheck(run, tuple(inputs), check_forward_ad=True)
    if device != "cpu":  # the comparisons below run on the host
        return
    if mask == "bool with an empty row":  # PyTorch's softmax gives NaN there: compare the rest
        _, tangent = tinyattn_jvp(run, primals, [random(*p.shape, seed=9) for p in primals])
        assert (tangent[:, 1] == 0).all()
        return
    reference_mask = None if mask == "none" else torch.from_numpy(causal(5, 7))
    assert_jvps_agree(run, lambda q, k, v: torch_attention(q, k, v, reference_mask), primals)


def test_blockwise_attention_tangent_is_first_order_only(blockwise):
    q, k, v = (
        ta.tensor(random(1, 4, 3, seed=i), dtype="float64", requires_grad=True) for i in range(3)
    )
    with ta_forward_ad.dual_level():
        dual = ta_forward_ad.make_dual(q, ta.tensor(random(1, 4, 3, seed=5), dtype="float64"))
        out = F.scaled_dot_product_attention(dual, k, v, is_causal=True)
        tangent = ta_forward_ad.unpack_dual(out).tangent
        with pytest.raises(NotImplementedError, match="block-wise attention"):
            (tangent * tangent).sum().backward()


# ------------------------------------------------------ tangents that differentiate again
# (name, function of a functional module, input shapes, whether PyTorch is an oracle here:
# its gradient through layer_norm's tangent disagrees with finite differences, and through
# softmax's and log_softmax's it raises, a saved exp having been modified in place)
SECOND_ORDER = [
    ("layer_norm", lambda f: lambda x, w: f.layer_norm(x, (4,), w), [(3, 4), (4,)], False),
    ("log_softmax", lambda f: lambda x: f.log_softmax(x, dim=-1), [(3, 4)], False),
    ("linear", lambda f: lambda x, w, b: f.linear(x, w, b), [(3, 4), (2, 4), (2,)], True),
    ("cross_entropy", lambda f: lambda x: f.cross_entropy(x, CLASSES[f]), [(3, 4)], False),
    ("softmax", lambda f: lambda x: f.softmax(x, dim=0), [(3, 4)], False),
]
CLASSES = {F: ta.tensor([1, 0, 3]), TF: torch.tensor([1, 0, 3])}


def tangent_contracted(fn, primals: list, tangents: list, u: np.ndarray) -> float:
    """sum(u * J(x) v) by tinyattn's forward mode, at float64 primals given as arrays."""
    return float((tinyattn_jvp(fn, primals, tangents)[1] * u).sum())


@pytest.mark.parametrize(
    "name,make,shapes,torch_agrees", SECOND_ORDER, ids=[s[0] for s in SECOND_ORDER]
)
def test_gradient_through_the_tangent(name, make, shapes, torch_agrees):
    """d/dx sum(u * J(x) v): reverse mode through the tangent, against central differences of
    that sum and against PyTorch's."""
    primals = [random(*s, seed=i) for i, s in enumerate(shapes)]
    tangents = [random(*s, seed=10 + i) for i, s in enumerate(shapes)]
    u = random(*make(F)(*[ta.tensor(p, dtype="float64") for p in primals]).shape, seed=30)
    leaves = [ta.tensor(p, dtype="float64", requires_grad=True) for p in primals]
    with ta_forward_ad.dual_level():
        duals = [
            ta_forward_ad.make_dual(a, ta.tensor(t, dtype="float64"))
            for a, t in zip(leaves, tangents, strict=True)
        ]
        tangent = ta_forward_ad.unpack_dual(make(F)(*duals)).tangent
        (tangent * ta.tensor(u, dtype="float64")).sum().backward()
    eps = 1e-6
    for i, (leaf, primal) in enumerate(zip(leaves, primals, strict=True)):
        numeric = np.zeros_like(primal)
        for index in np.ndindex(primal.shape):
            sums = []
            for step in (eps, -eps):
                moved = [p.copy() for p in primals]
                moved[i][index] += step
                sums.append(tangent_contracted(make(F), moved, tangents, u))
            numeric[index] = (sums[0] - sums[1]) / (2 * eps)
        got = np.zeros_like(primal) if leaf.grad is None else leaf.grad.numpy()  # None: 0
        np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-7)
    if not torch_agrees:
        return
    torch_leaves = [torch.from_numpy(p.copy()).requires_grad_() for p in primals]
    with torch_forward_ad.dual_level():
        duals = [
            torch_forward_ad.make_dual(a, torch.from_numpy(t.copy()))
            for a, t in zip(torch_leaves, tangents, strict=True)
        ]
        tangent = torch_forward_ad.unpack_dual(make(TF)(*duals)).tangent
        (tangent * torch.from_numpy(u)).sum().backward()
    for leaf, expected in zip(leaves, torch_leaves, strict=True):
        assert (leaf.grad is None) == (expected.grad is None)
        if leaf.grad is not None:
            np.testing.assert_allclose(leaf.grad.numpy(), expected.grad.numpy(), **TOLERANCE)


# A tangent of a tangent (func.jvp inside func.jvp): the rules' own Tensor ops carry the outer
# level's tangents, so each rule differentiates again. Checked against central differences of
# the inner jvp along the same direction.
NESTED = [
    ("layer_norm", lambda x: F.layer_norm(x, (4,), x[0] * 1.0, x[1] * 1.0), (3, 4)),
    ("softmax", lambda x: F.softmax(x, dim=0), (3, 4)),
    ("cross_entropy", lambda x: F.cross_entropy(x, CLASSES[F], label_smoothing=0.1), (3, 4)),
    ("linear", lambda x: F.linear(x, x[:2] * 1.0, x[2, :2] * 1.0), (3, 4)),
    (
        "binary_cross_entropy",
        lambda x: F.binary_cross_entropy(x.sigmoid(), x.cos().square()),
        (3, 4),
    ),
    (
        "heads attention",
        lambda x: ops.HeadsAttention.apply(
            x, x * 2.0, x.sin(), ta.tensor(causal(4, 4)), heads=2, scale=0.6
        ),
        (2, 4, 4),
    ),
    (
        "heads attention packed",
        lambda x: ops.HeadsAttention.apply(
            ta.cat([x, x * 2.0, x.sin()], dim=-1), heads=2, scale=0.6, packed=True
        ),
        (2, 4, 4),
    ),
]


@pytest.mark.parametrize("name,fn,shape", NESTED, ids=[n[0] for n in NESTED])
def test_tangent_of_a_tangent(name, fn, shape):
    x, v = random(*shape), random(*shape, seed=1)
    direction = ta.tensor(v, dtype="float64")

    def first(point):
        return ta.func.jvp(fn, (point,), (direction,))[1]

    second = ta.func.jvp(first, (ta.tensor(x, dtype="float64"),), (direction,))[1]
    eps = 1e-5
    up, down = (first(ta.tensor(x + s * v, dtype="float64")).numpy() for s in (eps, -eps))
    np.testing.assert_allclose(second.numpy(), (up - down) / (2 * eps), rtol=1e-6, atol=1e-7)


HESSIANS = [
    ("cross_entropy", lambda f, x: f.cross_entropy(x, CLASSES[f], label_smoothing=0.1)),
    ("layer_norm", lambda f, x: (f.layer_norm(x, (4,)) * x.detach().cos()).sum()),
    ("log_softmax", lambda f, x: (f.log_softmax(x, dim=-1) * x.detach().sin()).sum()),
    ("linear", lambda f, x: f.linear(x, x[:2] * 1.0).square().sum()),
]


@pytest.mark.parametrize("name,fn", HESSIANS, ids=[h[0] for h in HESSIANS])
def test_hessian_forward_over_reverse(name, fn):
    """func.hessian is jacfwd(jacrev(f)): the jvp rules run on the backward rules' graph."""
    x = random(3, 4)
    got = ta.func.hessian(lambda a: fn(F, a))(ta.tensor(x, dtype="float64"))
    expected = torch.func.hessian(lambda a: fn(TF, a))(torch.from_numpy(x))
    np.testing.assert_allclose(got.detach().numpy(), expected.numpy(), **TOLERANCE)
