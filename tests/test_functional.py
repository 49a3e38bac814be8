"""tinyattn.functional: forward against NumPy references, fused ops against composed twins,
gradcheck/gradgradcheck in float64, the numerics edge cases and the error messages.

Every test that touches arrays takes the `device` fixture, so it runs on numpy and strict.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F

RNG = np.random.default_rng(1234)


def leaf(device, *shape, scale=1.0, dtype="float64"):
    return ta.tensor(
        RNG.standard_normal(shape) * scale, dtype=dtype, device=device
    ).requires_grad_()


def twin_check(fused, composed, inputs, atol=1e-12):
    """Forward and backward (with a random cotangent) of two implementations agree."""
    copies = [ta.tensor(x.detach().numpy(), device=x.device).requires_grad_() for x in inputs]
    out_a, out_b = fused(*inputs), composed(*copies)
    np.testing.assert_allclose(
        out_a.detach().numpy(), out_b.detach().numpy(), atol=atol, rtol=1e-10
    )
    cotangent = RNG.standard_normal(out_a.shape)
    (out_a * ta.tensor(cotangent, dtype="float64", device=out_a.device)).sum().backward()
    (out_b * ta.tensor(cotangent, dtype="float64", device=out_b.device)).sum().backward()
    for a, b in zip(inputs, copies, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=atol, rtol=1e-10)


# ------------------------------------------------------------------------------------- softmax
def softmax_composed(x, axis=-1):
    shifted = x - x.amax(axis=axis, keepdims=True).detach()
    exps = shifted.exp()
    return exps / exps.sum(axis=axis, keepdims=True)


def log_softmax_composed(x, axis=-1):
    shifted = x - x.amax(axis=axis, keepdims=True).detach()
    return shifted - shifted.exp().sum(axis=axis, keepdims=True).log()


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_family_matches_composed_twins(device, axis):
    x = leaf(device, 3, 4, 5)
    twin_check(lambda t: F.softmax(t, axis=axis), lambda t: softmax_composed(t, axis), [x])
    x = leaf(device, 3, 4, 5)
    twin_check(lambda t: F.log_softmax(t, axis=axis), lambda t: log_softmax_composed(t, axis), [x])


def test_softmax_matches_numpy_and_rows_sum_to_one(device):
    data = RNG.standard_normal((4, 6))
    y = F.softmax(ta.tensor(data, dtype="float64", device=device), dim=-1).numpy()
    expected = np.exp(data) / np.exp(data).sum(-1, keepdims=True)
    np.testing.assert_allclose(y, expected, rtol=1e-13)
    np.testing.assert_allclose(y.sum(-1), 1.0, rtol=1e-14)


def test_softmax_family_gradcheck_and_gradgradcheck(device):
    x = leaf(device, 2, 5)
    for family in (F.softmax, F.log_softmax):
        fn = lambda t, f=family: f(t, dim=-1)  # noqa: E731
        assert ta.gradcheck(fn, [x])
        assert ta.gradgradcheck(fn, [x])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_family_is_finite_for_huge_logits(device, dtype):
    x = ta.tensor([[1e4, -1e4, 0.0], [1e4, 1e4, -1e4]], dtype=dtype, device=device)
    x.requires_grad_()
    y = F.softmax(x, dim=-1)
    log_y = F.log_softmax(x, dim=-1)
    np.testing.assert_allclose(y.detach().numpy(), [[1, 0, 0], [0.5, 0.5, 0]], atol=1e-7)
    np.testing.assert_allclose(
        log_y.detach().numpy(),
        [[0, -2e4, -1e4], [-math.log(2)] * 2 + [-2e4 - math.log(2)]],
        rtol=1e-6,
    )
    (y.sum() + log_y.sum()).backward()
    assert np.isfinite(x.grad.numpy()).all()


def test_fully_masked_rows_give_zero_weights_and_zero_gradient(device):
    x = ta.tensor([[-math.inf] * 3, [0.0, -math.inf, 1.0]], dtype="float64", device=device)
    x.requires_grad_()
    y = F.softmax(x, dim=-1)
    np.testing.assert_array_equal(y.detach().numpy()[0], [0.0, 0.0, 0.0])
    (y * ta.tensor([[1.0, 2.0, 3.0]] * 2, dtype="float64", device=device)).sum().backward()
    grad = x.grad.numpy()
    assert np.isfinite(grad).all()
    np.testing.assert_array_equal(grad[0], 0.0)
    log_y = F.log_softmax(ta.tensor([[-math.inf, -math.inf]], device=device), dim=-1)
    assert not np.isnan(log_y.numpy()).any()


def test_softmax_errors_name_the_op(device):
    with pytest.raises(TypeError, match="softmax: expected a floating-point tensor"):
        F.softmax(ta.tensor([1, 2], device=device), dim=-1)
    with pytest.raises(ValueError, match=r"softmax: dim 2 is out of range .* \(2, 3\)"):
        F.softmax(ta.zeros(2, 3, device=device), axis=2)


# -------------------------------------------------------------------------------- cross entropy
def cross_entropy_numpy(logits, targets, ignore_index=None, smoothing=0.0, reduction="mean"):
    logits = logits.reshape(-1, logits.shape[-1])
    flat = targets.reshape(-1)
    log_p = logits - logits.max(-1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(-1, keepdims=True))
    kept = np.ones_like(flat, bool) if ignore_index is None else flat != ignore_index
    picked = log_p[np.arange(len(flat)), np.where(kept, flat, 0)]
    losses = -(1 - smoothing) * picked - smoothing * log_p.mean(-1)
    losses = np.where(kept, losses, 0.0)
    if reduction == "none":
        return losses.reshape(targets.shape)
    return losses.sum() if reduction == "sum" else losses.sum() / max(kept.sum(), 1)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_matches_numpy_with_leading_axes(device, reduction, smoothing):
    logits = RNG.standard_normal((2, 3, 5))  # (N, d1, C): the reference takes classes last
    targets = np.array([[0, 4, -100], [2, 2, 1]])
    got = F.cross_entropy(
        ta.tensor(logits.transpose(0, 2, 1), dtype="float64", device=device),  # (N, C, d1)
        ta.tensor(targets, device=device),
        ignore_index=-100,
        label_smoothing=smoothing,
        reduction=reduction,
    )
    expected = cross_entropy_numpy(logits, targets, -100, smoothing, reduction)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("ignore_index", [-100, 2])
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_target_rows_from_the_table_equal_the_compared_ones(
    device, monkeypatch, ignore_index, smoothing
):
    """Up to IDENTITY_ROWS classes the target rows are gathered from a table; past it they are
    compared. The two give the same loss and gradient, bit for bit."""
    from tinyattn import kernels

    logits = RNG.standard_normal((4, 5, 6)).astype("float32")  # (N, C, d1)
    targets = RNG.integers(0, 5, (4, 6))
    targets[0, :2] = ignore_index
    results = []
    for identity in (kernels.IDENTITY_ROWS, 4):
        monkeypatch.setattr(kernels, "IDENTITY_ROWS", identity)
        z = ta.tensor(logits, device=device, requires_grad=True)
        loss = F.cross_entropy(
            z,
            ta.tensor(targets, device=device),
            ignore_index=ignore_index,
            label_smoothing=smoothing,
        )
        loss.backward()
        results.append((loss.detach().numpy(), z.grad.detach().numpy()))
    (loss_a, grad_a), (loss_b, grad_b) = results
    np.testing.assert_array_equal(loss_a, loss_b)
    np.testing.assert_array_equal(grad_a, grad_b)


def _composed_cross_entropy(x, targets, ignore_index, smoothing, reduction):
    """Cross entropy as the six nodes `ops.CrossEntropy` fuses: log-softmax, the target rows,
    the negative log-likelihood, the sum, the count of kept targets and the division."""
    from tinyattn.ops import ClassWeights, KeptCount, NegLogLikelihood

    logits = x if x.ndim < 3 else x.permute(0, *range(2, x.ndim), 1)  # classes last
    log_probs = F.log_softmax(logits, dim=-1)
    weights = ClassWeights.apply(
        targets,
        classes=log_probs.shape[-1],
        ignore_index=ignore_index,
        smoothing=smoothing,
        dtype=log_probs.dtype,
    )
    per_target = NegLogLikelihood.apply(log_probs, weights)
    if reduction == "none":
        return per_target
    if reduction == "sum":
        return per_target.sum()
    return per_target.sum() / KeptCount.apply(
        targets, ignore_index=ignore_index, dtype=log_probs.dtype
    )


CE_SHAPES = {"rows": ((6, 5), (6,)), "leading axes": ((3, 5, 2), (3, 2)), "one row": ((5,), ())}


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("shape", CE_SHAPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing,ignore_index", [(0.0, -100), (0.2, 1), (0.0, 3)])
def test_cross_entropy_node_equals_its_composition(
    device, dtype, shape, reduction, smoothing, ignore_index
):
    """The fused node and the six nodes it replaces give the same loss and the same gradient,
    bit for bit, with -inf logits (a masked class: its term counts 0 unless it is the target's)
    and ignored targets; and agree under create_graph, where its rule is Tensor ops."""
    if dtype == "float16" and device == "strict":
        pytest.skip("the array API (and so the strict stand-in) has no float16")
    x_shape, t_shape = CE_SHAPES[shape]
    rng = np.random.default_rng(7)
    logits = (rng.standard_normal(x_shape) * 3).astype(dtype)
    class_axis = 1 if len(x_shape) >= 2 else 0
    targets = rng.integers(0, 5, t_shape)
    np.put_along_axis(logits, np.expand_dims((targets + 1) % 5, class_axis), -np.inf, class_axis)
    if targets.ndim:
        targets.flat[0] = ignore_index  # an ignored target, and one of class 1 or 3 kept
        targets.flat[-1] = 4 - ignore_index % 2
    t = ta.tensor(targets, device=device)
    grads, losses = [], []
    for loss_of in (F.cross_entropy, _composed_cross_entropy):
        x = ta.tensor(logits, device=device, requires_grad=True)
        if loss_of is F.cross_entropy:
            loss = loss_of(
                x, t, ignore_index=ignore_index, label_smoothing=smoothing, reduction=reduction
            )
        else:
            loss = loss_of(x, t, ignore_index, smoothing, reduction)
        seed = ta.tensor(
            np.linspace(-1, 2, loss.numel()).reshape(loss.shape).astype(dtype), device=device
        )
        loss.backward(seed)
        losses.append(loss.detach().numpy())
        grads.append(x.grad.numpy())
    assert np.isfinite(grads[0]).all()
    np.testing.assert_array_equal(losses[0], losses[1])
    np.testing.assert_array_equal(grads[0], grads[1])
    x = ta.tensor(logits, device=device, requires_grad=True)
    loss = F.cross_entropy(
        x, t, ignore_index=ignore_index, label_smoothing=smoothing, reduction=reduction
    )
    (with_graph,) = ta.grad(loss, [x], grad_outputs=seed, create_graph=True)
    assert with_graph.requires_grad
    tolerance = {"float16": 1e-2, "float32": 1e-6, "float64": 1e-14}[dtype]
    np.testing.assert_allclose(
        with_graph.detach().numpy().astype("float64"), grads[0], rtol=tolerance, atol=tolerance
    )


@pytest.mark.parametrize("recorded", [False, True], ids=["under no_grad", "in the graph"])
def test_cross_entropy_logits_may_change_in_place_after_the_loss(device, recorded):
    """As in PyTorch (log-softmax's rule reads its output, not its input), the logits may be
    written in place after the loss: the gradient, and under create_graph the gradient of the
    gradient, are those of the values the loss saw, through the history it saw (a write in the
    graph moves the logits' history on; the loss's second-order graph must not follow it)."""
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((4, 3))
    targets = ta.tensor([0, 2, 1, 1], device=device)
    expected = []
    for change in (False, True):
        x = ta.tensor(logits, device=device, requires_grad=True)
        h = x * 1.0
        loss = F.cross_entropy(h, targets, label_smoothing=0.1)
        if change:
            with ta.set_grad_enabled(recorded):
                h.mul_(5.0)
        (g,) = ta.grad(loss, [x], create_graph=True)
        (gg,) = ta.grad((g * g).sum(), [x])
        expected.append((g.detach().numpy(), gg.numpy()))
    for before, after in zip(*expected, strict=True):
        np.testing.assert_array_equal(before, after)


def test_cross_entropy_gradcheck(device):
    logits = leaf(device, 4, 3)
    targets = ta.tensor([0, 2, 1, 1], device=device)
    assert ta.gradcheck(
        lambda z: F.cross_entropy(z, targets, ignore_index=1, label_smoothing=0.1), [logits]
    )
    assert ta.gradgradcheck(lambda z: F.cross_entropy(z, targets), [logits])


def test_cross_entropy_ignore_index_inside_class_range(device):
    """ignore_index=0 must drop class-0 targets, not score them."""
    logits = RNG.standard_normal((3, 4))
    targets = np.array([0, 3, 0])
    got = F.cross_entropy(
        ta.tensor(logits, dtype="float64", device=device),
        ta.tensor(targets, device=device),
        ignore_index=0,
    )
    np.testing.assert_allclose(got.item(), cross_entropy_numpy(logits, targets, 0), rtol=1e-12)


def test_cross_entropy_all_ignored_is_zero_not_nan(device):
    logits = leaf(device, 2, 3)
    loss = F.cross_entropy(logits, ta.tensor([-1, -1], device=device), ignore_index=-1)
    loss.backward()
    assert loss.item() == 0.0
    np.testing.assert_array_equal(logits.grad.numpy(), 0.0)


def test_cross_entropy_rejects_bad_targets(device):
    logits = ta.zeros(3, 4, device=device)
    # An out-of-range class is an IndexError, as in PyTorch.
    with pytest.raises(IndexError, match=r"cross_entropy: target value 4 .* 4 classes .*0\.\.3"):
        F.cross_entropy(logits, ta.tensor([0, 4, 1], device=device))
    with pytest.raises(IndexError, match=r"cross_entropy: target value -1 .*ignore_index=-100"):
        F.cross_entropy(logits, ta.tensor([0, -1, 1], device=device), ignore_index=-100)
    with pytest.raises(
        TypeError, match="cross_entropy: class-index targets must be integers.*bool"
    ):
        F.cross_entropy(logits, ta.tensor([True, False, True], device=device))
    # A float target is a class-probability target: it must have the input's shape.
    with pytest.raises(ValueError, match=r"probability targets must have the input's shape"):
        F.cross_entropy(logits, ta.tensor([0.0, 1.0, 2.0], device=device))
    with pytest.raises(ValueError, match=r"input of shape \(3, 4\) needs target of shape \(3,\)"):
        F.cross_entropy(logits, ta.tensor([0, 1], device=device))
    with pytest.raises(ValueError, match="reduction must be one of"):
        F.cross_entropy(logits, ta.tensor([0, 1, 2], device=device), reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        F.cross_entropy(logits, ta.tensor([0, 1, 2], device=device), label_smoothing=1.5)


# ------------------------------------------------------------------------ linear and embedding
def test_linear_forward_gradcheck_and_errors(device):
    x, w, b = leaf(device, 2, 3, 4), leaf(device, 5, 4), leaf(device, 5)
    y = F.linear(x, w, b)
    np.testing.assert_allclose(
        y.detach().numpy(),
        x.detach().numpy() @ w.detach().numpy().T + b.detach().numpy(),
        rtol=1e-12,
        atol=1e-12,
    )
    assert ta.gradcheck(F.linear, [x, w, b])
    with pytest.raises(
        ValueError, match=r"linear: input of shape \(2, 3\) has 3 features.*\(5, 4\)"
    ):
        F.linear(ta.zeros(2, 3, device=device), ta.zeros(5, 4, device=device))
    with pytest.raises(ValueError, match=r"linear: bias of shape \(4,\)"):
        F.linear(
            ta.zeros(2, 4, device=device), ta.zeros(5, 4, device=device), ta.zeros(4, device=device)
        )


def test_embedding_gathers_rows_and_sums_repeated_gradients(device):
    weight = leaf(device, 5, 3)
    indices = ta.tensor([[1, 4, 1], [1, 0, 2]], device=device)
    out = F.embedding(indices, weight)
    assert out.shape == (2, 3, 3)
    np.testing.assert_array_equal(
        out.detach().numpy(), weight.detach().numpy()[np.array([[1, 4, 1], [1, 0, 2]])]
    )
    out.sum().backward()
    np.testing.assert_array_equal(weight.grad.numpy()[:, 0], [1.0, 3.0, 1.0, 0.0, 1.0])
    assert ta.gradcheck(lambda w: F.embedding(indices, w), [weight])


def test_embedding_rejects_bad_indices(device):
    weight = ta.zeros(4, 2, device=device)
    with pytest.raises(IndexError, match=r"embedding: index -1 is out of range for 4 embeddings"):
        F.embedding(ta.tensor([0, -1], device=device), weight)
    with pytest.raises(IndexError, match=r"embedding: index 4 is out of range .*0\.\.3"):
        F.embedding(ta.tensor([[4]], device=device), weight)
    with pytest.raises(TypeError, match="embedding: indices must be integers, got dtype float32"):
        F.embedding(ta.tensor([0.0], device=device), weight)


# ------------------------------------------------------------------------ layer norm, dropout
def test_layer_norm_matches_numpy_and_gradchecks(device):
    x, w, b = leaf(device, 2, 3, 4), leaf(device, 4), leaf(device, 4)
    y = F.layer_norm(x, 4, w, b, eps=1e-5).detach().numpy()
    data = x.detach().numpy().copy()
    expected = (data - data.mean(-1, keepdims=True)) / np.sqrt(data.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(
        y, expected * w.detach().numpy() + b.detach().numpy(), rtol=1e-12, atol=1e-12
    )
    assert ta.gradcheck(lambda *a: F.layer_norm(a[0], 4, a[1], a[2]), [x, w, b])
    assert ta.gradgradcheck(lambda t: F.layer_norm(t, (3, 4)), [x])
    with pytest.raises(ValueError, match=r"layer_norm: normalized_shape \(5,\) .*\(2, 3, 4\)"):
        F.layer_norm(x, 5)


def test_dropout_scales_kept_elements_and_is_identity_in_eval(device):
    x = ta.ones(200, 50, dtype="float64", device=device, requires_grad=True)
    assert F.dropout(x, 0.3, training=False) is x
    assert F.dropout(x, 0.0) is x
    ta.manual_seed(7)
    y = F.dropout(x, 0.3)
    values = y.detach().numpy().copy()
    assert set(np.unique(values).round(12)) <= {0.0, round(1 / 0.7, 12)}
    assert abs((values == 0).mean() - 0.3) < 0.02
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), values)  # d(x * m / (1-p))/dx = m / (1-p)
    ta.manual_seed(7)
    np.testing.assert_array_equal(
        F.dropout(x, 0.3).detach().numpy(), values
    )  # seeded: reproducible
    np.testing.assert_array_equal(F.dropout(x, 1.0).detach().numpy(), 0.0)
    with pytest.raises(ValueError, match=r"dropout: probability p must be in \[0, 1\], got 1.5"):
        F.dropout(x, 1.5)


# --------------------------------------------------------------------------------- activations
def test_erf_is_float64_exact(device):
    points = np.concatenate([np.linspace(-7, 7, 1401), [0.0, 1e-300, -1e-8, 0.46875, 4.0, 30.0]])
    got = F.erf(ta.tensor(points, dtype="float64", device=device)).numpy()
    expected = np.array([math.erf(p) for p in points])
    np.testing.assert_allclose(got, expected, rtol=1e-15, atol=3e-16)


def test_erf_and_gelu_gradients(device):
    x = leaf(device, 9, scale=2.0)
    assert ta.gradcheck(F.erf, [x])
    assert ta.gradgradcheck(F.erf, [x])
    assert ta.gradcheck(F.gelu, [x])
    assert ta.gradcheck(lambda t: F.gelu(t, approximate="tanh"), [x])
    assert ta.gradcheck(
        F.relu, [ta.tensor([-1.5, 0.5, 2.0], dtype="float64", device=device, requires_grad=True)]
    )


def test_gelu_values(device):
    points = np.array([-3.0, -1.0, 0.0, 0.5, 2.0])
    exact = F.gelu(ta.tensor(points, dtype="float64", device=device)).numpy()
    expected = np.array([0.5 * p * (1 + math.erf(p / math.sqrt(2))) for p in points])
    np.testing.assert_allclose(exact, expected, rtol=1e-14, atol=1e-16)
    tanh = F.gelu(ta.tensor(points, dtype="float64", device=device), approximate="tanh").numpy()
    np.testing.assert_allclose(tanh, expected, atol=1e-3)  # the approximation is close, not equal
    with pytest.raises(ValueError, match="gelu: approximate must be"):
        F.gelu(ta.zeros(2, device=device), approximate="fast")


# ----------------------------------------------------------------------------------- attention
def attention_numpy(q, k, v, allowed=None, scale=None):
    scores = q @ np.swapaxes(k, -1, -2) * (scale or 1 / np.sqrt(q.shape[-1]))
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights = weights / weights.sum(-1, keepdims=True)
    return weights @ v, weights


def sdpa_composed(q, k, v, mask):
    scores = (q @ k.mT) * (1.0 / math.sqrt(q.shape[-1]))
    return softmax_composed(ta.where(mask, scores, -math.inf)) @ v


def test_causal_mask(device):
    np.testing.assert_array_equal(
        F.causal_mask(3, 4, device=device).numpy(), np.tril(np.ones((3, 4), bool))
    )
    assert F.causal_mask(2).shape == (2, 2)


def test_sdpa_matches_numpy_with_mask_causal_and_cross(device):
    q, k, v = leaf(device, 2, 3, 4, 5), leaf(device, 2, 3, 6, 5), leaf(device, 2, 3, 6, 2)
    mask = RNG.random((2, 1, 4, 6)) > 0.3
    mask[..., 0] = True  # every query keeps at least one key
    out, weights = F.scaled_dot_product_attention(
        q, k, v, attn_mask=ta.tensor(mask, device=device), return_weights=True
    )
    expected_out, expected_weights = attention_numpy(
        q.detach().numpy(), k.detach().numpy(), v.detach().numpy(), mask
    )
    np.testing.assert_allclose(out.detach().numpy(), expected_out, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(weights.detach().numpy(), expected_weights, rtol=1e-12, atol=1e-13)
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True).detach().numpy()
    np.testing.assert_allclose(
        causal,
        attention_numpy(
            q.detach().numpy(),
            k.detach().numpy(),
            v.detach().numpy(),
            np.tril(np.ones((4, 6), bool)),
        )[0],
    )
    scaled = F.scaled_dot_product_attention(q, k, v, scale=0.3).detach().numpy()
    np.testing.assert_allclose(
        scaled,
        attention_numpy(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(), scale=0.3)[0],
    )


def test_sdpa_matches_composed_twin(device):
    q, k, v = leaf(device, 2, 4, 3), leaf(device, 2, 5, 3), leaf(device, 2, 5, 3)
    mask = ta.tensor(np.tril(np.ones((4, 5), bool), 1), device=device)
    twin_check(
        lambda *a: F.scaled_dot_product_attention(*a, attn_mask=mask),
        lambda *a: sdpa_composed(*a, mask),
        [q, k, v],
    )


@pytest.mark.parametrize("case", ["plain", "mask", "causal", "cross"])
def test_sdpa_gradcheck(device, case):
    tk = 4 if case == "cross" else 3
    q, k, v = leaf(device, 2, 3, 2), leaf(device, 2, tk, 2), leaf(device, 2, tk, 3)
    mask = ta.tensor([[True, False, True], [False, True, True], [True, True, False]], device=device)
    kwargs = {"attn_mask": mask} if case == "mask" else {"is_causal": case == "causal"}
    assert ta.gradcheck(lambda *a: F.scaled_dot_product_attention(*a, **kwargs), [q, k, v])


def test_sdpa_gradgradcheck(device):
    q, k, v = leaf(device, 3, 2), leaf(device, 4, 2), leaf(device, 4, 2)
    assert ta.gradgradcheck(
        lambda *a: F.scaled_dot_product_attention(*a, is_causal=True), [q, k, v]
    )


def test_sdpa_fully_masked_rows_are_zero_in_value_and_gradient(device):
    q, k, v = leaf(device, 1, 3, 2), leaf(device, 1, 4, 2), leaf(device, 1, 4, 2)
    mask = np.ones((3, 4), bool)
    mask[1] = False  # query 1 may attend to nothing
    out, weights = F.scaled_dot_product_attention(
        q, k, v, attn_mask=ta.tensor(mask, device=device), return_weights=True
    )
    np.testing.assert_array_equal(out.detach().numpy()[0, 1], 0.0)
    np.testing.assert_array_equal(weights.detach().numpy()[0, 1], 0.0)
    (out * out).sum().backward()
    for t in (q, k, v):
        assert np.isfinite(t.grad.numpy()).all()
    np.testing.assert_array_equal(q.grad.numpy()[0, 1], 0.0)
    everything_masked = ta.zeros(3, 4, dtype="bool", device=device)
    assert ta.gradcheck(
        lambda *a: F.scaled_dot_product_attention(*a, attn_mask=everything_masked), [q, k, v]
    )


def test_sdpa_weights_and_dropout(device):
    q, k, v = leaf(device, 2, 4, 3), leaf(device, 2, 5, 3), leaf(device, 2, 5, 3)
    _, weights = F.scaled_dot_product_attention(q, k, v, return_weights=True)
    np.testing.assert_allclose(weights.detach().numpy().sum(-1), 1.0, rtol=1e-14)
    ta.manual_seed(3)
    out, dropped = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5, return_weights=True)
    np.testing.assert_allclose(
        out.detach().numpy(), dropped.detach().numpy() @ v.detach().numpy(), rtol=1e-12
    )
    kept = dropped.detach().numpy() != 0
    np.testing.assert_allclose(
        dropped.detach().numpy()[kept], 2 * weights.detach().numpy()[kept], rtol=1e-12
    )


def test_sdpa_errors_name_shapes(device):
    q, k = ta.zeros(2, 3, 4, device=device), ta.zeros(2, 5, 4, device=device)
    with pytest.raises(
        ValueError, match=r"mask of shape \(3, 4\) cannot be broadcast .*\(2, 3, 5\)"
    ):
        F.scaled_dot_product_attention(
            q, k, k, attn_mask=ta.ones(3, 4, dtype="bool", device=device)
        )
    with pytest.raises(TypeError, match="attn_mask must be bool .* or floating .*int64"):
        F.scaled_dot_product_attention(
            q, k, k, attn_mask=ta.zeros(3, 5, dtype="int64", device=device)
        )
    with pytest.raises(ValueError, match=r"q of shape \(2, 3, 4\) and k of shape \(2, 5, 3\)"):
        F.scaled_dot_product_attention(q, ta.zeros(2, 5, 3, device=device), k)
    with pytest.raises(ValueError, match=r"k of shape \(2, 5, 4\) and v of shape \(2, 6, 4\)"):
        F.scaled_dot_product_attention(q, k, ta.zeros(2, 6, 4, device=device))
    with pytest.raises(ValueError, match="leading .* cannot be broadcast"):
        F.scaled_dot_product_attention(
            q, ta.zeros(3, 5, 4, device=device), ta.zeros(3, 5, 4, device=device)
        )


# ------------------------------------------------------- cross-entropy's target ops (no gradient)
@pytest.mark.parametrize("ignore_index", [None, 2])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_class_weights_and_kept_count_against_numpy(device, ignore_index, smoothing):
    from tinyattn.ops import ClassWeights, KeptCount

    targets = np.array([[0, 2, 1], [2, 2, 3]])
    t = ta.tensor(targets, device=device)
    weights = ClassWeights.apply(
        t,
        classes=4,
        ignore_index=ignore_index,
        smoothing=smoothing,
        dtype=ta.zeros(1, device=device).dtype,
    )
    kept = np.ones(targets.shape, bool) if ignore_index is None else targets != ignore_index
    expected = (np.eye(4)[targets] * (1 - smoothing) + smoothing / 4) * kept[..., None]
    np.testing.assert_allclose(weights.numpy(), expected, rtol=1e-6)
    count = KeptCount.apply(t, ignore_index=ignore_index, dtype=ta.zeros(1, device=device).dtype)
    assert count.shape == () and count.item() == max(kept.sum(), 1)
    everything_ignored = ta.tensor(np.full((2,), 7), device=device)
    assert KeptCount.apply(everything_ignored, ignore_index=7, dtype=count.dtype).item() == 1.0
