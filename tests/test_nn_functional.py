"""tinyattn.nn.functional against torch.nn.functional: the same values in float64, forward and
gradients, on every backend. Skipped cleanly when torch is not importable.

Each case builds its inputs from one seeded NumPy generator, calls the tinyattn function on
tinyattn tensors and the torch function on torch tensors, and compares the outputs and the
gradients of every floating input under a random cotangent.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tinyattn as ta  # noqa: E402  (after the skip)
import tinyattn.nn.functional as F  # noqa: E402
from tinyattn import nn  # noqa: E402

TF = torch.nn.functional
TOL = {"rtol": 1e-9, "atol": 1e-11}


def _inputs(device, specs, seed):
    """specs: list of ("float", shape) | ("int", shape, high) | ("probs", shape) | ("bool", shape)
    | ("logprobs", shape) | ("ignore", shape, high) (ints with some -100)."""
    rng = np.random.default_rng(seed)
    ours, theirs = [], []
    for spec in specs:
        kind, shape = spec[0], spec[1]
        if kind in ("int", "ignore"):
            values = rng.integers(0, spec[2], shape)
            if kind == "ignore":
                values.flat[::3] = -100
            ours.append(ta.tensor(values, device=device))
            theirs.append(torch.tensor(values))
            continue
        if kind == "bool":
            values = rng.random(shape) > 0.3
            values[..., 0] = True  # every query may attend one key (torch gives NaN otherwise)
            ours.append(ta.tensor(values, device=device))
            theirs.append(torch.tensor(values))
            continue
        values = rng.standard_normal(shape)
        if kind == "probs":
            values = np.exp(values) / np.exp(values).sum(-1, keepdims=True)
        if kind == "logprobs":
            values = values - np.log(np.exp(values).sum(-1, keepdims=True))
        ours.append(ta.tensor(values, dtype="float64", device=device, requires_grad=True))
        theirs.append(torch.tensor(values, dtype=torch.float64, requires_grad=True))
    return ours, theirs


F32 = [("float", (4, 5))]
LOGITS_TARGET = [("float", (6, 5)), ("int", (6,), 5)]
LOGITS_3D = [("float", (2, 5, 3)), ("ignore", (2, 3), 5)]
ATTN = [("float", (2, 3, 4, 8)), ("float", (2, 3, 6, 8)), ("float", (2, 3, 6, 5))]

CASES = {
    "softmax dim=0": (F32, lambda x: F.softmax(x, dim=0), lambda x: TF.softmax(x, dim=0)),
    "softmax dim=-1": (F32, lambda x: F.softmax(x, dim=-1), lambda x: TF.softmax(x, dim=-1)),
    "log_softmax dim=1": (
        F32,
        lambda x: F.log_softmax(x, dim=1),
        lambda x: TF.log_softmax(x, dim=1),
    ),
    "gelu": (F32, F.gelu, TF.gelu),
    "gelu tanh": (
        F32,
        lambda x: F.gelu(x, approximate="tanh"),
        lambda x: TF.gelu(x, approximate="tanh"),
    ),
    "relu": (F32, F.relu, TF.relu),
    "silu": (F32, F.silu, TF.silu),
    "tanh": (F32, F.tanh, torch.tanh),
    "sigmoid": (F32, F.sigmoid, torch.sigmoid),
    "leaky_relu": (F32, lambda x: F.leaky_relu(x, 0.2), lambda x: TF.leaky_relu(x, 0.2)),
    "elu": (F32, lambda x: F.elu(x, 0.7), lambda x: TF.elu(x, 0.7)),
    "softplus": (
        [("float", (4, 5))],
        lambda x: F.softplus(x * 10.0, beta=2.0, threshold=15.0),
        lambda x: TF.softplus(x * 10.0, beta=2.0, threshold=15.0),
    ),
    "logsigmoid": (F32, lambda x: F.logsigmoid(x * 30.0), lambda x: TF.logsigmoid(x * 30.0)),
    "l1_loss": ([("float", (3, 4)), ("float", (3, 4))], F.l1_loss, TF.l1_loss),
    "binary_cross_entropy": (
        [("probs", (3, 5)), ("probs", (3, 5))],
        F.binary_cross_entropy,
        TF.binary_cross_entropy,
    ),
    "binary_cross_entropy_with_logits": (
        [("float", (3, 5)), ("probs", (3, 5)), ("float", (5,))],
        lambda x, y, w: F.binary_cross_entropy_with_logits(
            x * 20.0, y, pos_weight=w.detach().abs()
        ),
        lambda x, y, w: TF.binary_cross_entropy_with_logits(
            x * 20.0, y, pos_weight=w.detach().abs()
        ),
    ),
    "binary_cross_entropy_with_logits sum": (
        [("float", (3, 5)), ("probs", (3, 5))],
        lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction="sum"),
        lambda x, y: TF.binary_cross_entropy_with_logits(x, y, reduction="sum"),
    ),
    "dropout eval": (F32, lambda x: F.dropout(x, 0.3, training=False), lambda x: x * 1),
    "linear": (
        [("float", (3, 4)), ("float", (2, 4)), ("float", (2,))],
        F.linear,
        TF.linear,
    ),
    "layer_norm": (
        [("float", (3, 4)), ("float", (4,)), ("float", (4,))],
        lambda x, w, b: F.layer_norm(x, (4,), w, b),
        lambda x, w, b: TF.layer_norm(x, (4,), w, b),
    ),
    "embedding": ([("int", (2, 3), 5), ("float", (5, 4))], F.embedding, TF.embedding),
    "embedding padding_idx": (
        [("int", (3, 4), 5), ("float", (5, 4))],
        lambda i, w: F.embedding(i, w, padding_idx=1),
        lambda i, w: TF.embedding(i, w, padding_idx=1),
    ),
    "cross_entropy": (LOGITS_TARGET, F.cross_entropy, TF.cross_entropy),
    "cross_entropy smoothing sum": (
        LOGITS_TARGET,
        lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1, reduction="sum"),
        lambda x, t: TF.cross_entropy(x, t, label_smoothing=0.1, reduction="sum"),
    ),
    "cross_entropy (N, C, d) ignore_index": (
        LOGITS_3D,
        lambda x, t: F.cross_entropy(x, t, label_smoothing=0.2),
        lambda x, t: TF.cross_entropy(x, t, label_smoothing=0.2),
    ),
    "cross_entropy none": (
        LOGITS_3D,
        lambda x, t: F.cross_entropy(x, t, reduction="none"),
        lambda x, t: TF.cross_entropy(x, t, reduction="none"),
    ),
    "cross_entropy ignore_index=2": (
        LOGITS_TARGET,
        lambda x, t: F.cross_entropy(x, t, ignore_index=2),
        lambda x, t: TF.cross_entropy(x, t, ignore_index=2),
    ),
    "cross_entropy probabilities": (
        [("float", (4, 5)), ("probs", (4, 5))],
        lambda x, p: F.cross_entropy(x, p, label_smoothing=0.1),
        lambda x, p: TF.cross_entropy(x, p, label_smoothing=0.1),
    ),
    "cross_entropy unbatched": (
        [("float", (5,)), ("int", (), 5)],
        F.cross_entropy,
        TF.cross_entropy,
    ),
    "nll_loss": ([("logprobs", (6, 5)), ("int", (6,), 5)], F.nll_loss, TF.nll_loss),
    "nll_loss (N, C, d) ignore sum": (
        LOGITS_3D,
        lambda x, t: F.nll_loss(x, t, reduction="sum"),
        lambda x, t: TF.nll_loss(x, t, reduction="sum"),
    ),
    "nll_loss ignore mean": (LOGITS_3D, F.nll_loss, TF.nll_loss),
    "mse_loss": ([("float", (3, 4)), ("float", (3, 4))], F.mse_loss, TF.mse_loss),
    "mse_loss none": (
        [("float", (3, 4)), ("float", (3, 4))],
        lambda a, b: F.mse_loss(a, b, reduction="none"),
        lambda a, b: TF.mse_loss(a, b, reduction="none"),
    ),
    "kl_div batchmean": (
        [("logprobs", (3, 5)), ("probs", (3, 5))],
        lambda a, b: F.kl_div(a, b, reduction="batchmean"),
        lambda a, b: TF.kl_div(a, b, reduction="batchmean"),
    ),
    "kl_div mean": ([("logprobs", (3, 5)), ("probs", (3, 5))], F.kl_div, TF.kl_div),
    "kl_div sum log_target": (
        [("logprobs", (3, 5)), ("logprobs", (3, 5))],
        lambda a, b: F.kl_div(a, b, reduction="sum", log_target=True),
        lambda a, b: TF.kl_div(a, b, reduction="sum", log_target=True),
    ),
    "kl_div none": (
        [("logprobs", (3, 5)), ("probs", (3, 5))],
        lambda a, b: F.kl_div(a, b, reduction="none"),
        lambda a, b: TF.kl_div(a, b, reduction="none"),
    ),
    "sdpa": (ATTN, F.scaled_dot_product_attention, TF.scaled_dot_product_attention),
    "sdpa causal": (
        ATTN,
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True),
    ),
    "sdpa bool mask": (
        [*ATTN, ("bool", (4, 6))],
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m),
    ),
    "sdpa float mask and scale": (
        [*ATTN, ("float", (2, 1, 4, 6))],
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3),
        lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3),
    ),
    "pad last axis": (
        F32,
        lambda x: F.pad(x, (1, 2), value=0.5),
        lambda x: TF.pad(x, (1, 2), value=0.5),
    ),
    "pad two axes with a crop": (
        [("float", (2, 3, 4))],
        lambda x: F.pad(x, (-1, 2, 3, 0)),
        lambda x: TF.pad(x, (-1, 2, 3, 0)),
    ),
}


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides:UserWarning")  # torch's kl_div
@pytest.mark.parametrize("name", list(CASES))
def test_functional_matches_torch(device, name):
    specs, ours_fn, theirs_fn = CASES[name]
    ours, theirs = _inputs(device, specs, seed=len(name))
    out, torch_out = ours_fn(*ours), theirs_fn(*theirs)
    assert out.shape == tuple(torch_out.shape), name
    np.testing.assert_allclose(
        out.detach().numpy(), torch_out.detach().numpy(), **TOL, err_msg=name
    )
    cotangent = np.random.default_rng(1).standard_normal(tuple(torch_out.shape))
    (out * ta.tensor(cotangent, dtype="float64", device=device)).sum().backward()
    (torch_out * torch.tensor(cotangent)).sum().backward()
    for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if b.grad is not None:
            np.testing.assert_allclose(
                a.grad.numpy(), b.grad.numpy(), **TOL, err_msg=f"{name}: input {index}"
            )


def test_one_hot_matches_torch(device):
    values = np.array([[0, 3], [2, 1]])
    for classes in (-1, 6):
        ours = F.one_hot(ta.tensor(values, device=device), classes)
        theirs = TF.one_hot(torch.tensor(values), classes)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
        assert str(ours.numpy().dtype) == "int64"
    for bad in (values, -values):  # a class value out of range: RuntimeError, as in PyTorch
        with pytest.raises(RuntimeError, match="one_hot: class values") as ours:
            F.one_hot(ta.tensor(bad, device=device), 3)
        with pytest.raises(RuntimeError) as theirs:
            TF.one_hot(torch.tensor(bad), 3)
        assert type(ours.value) is type(theirs.value)
    with pytest.raises(TypeError, match="integer"):
        F.one_hot(ta.tensor([0.0, 1.0], device=device))


def test_dropout_training_scales_kept_elements(device):
    ta.manual_seed(0)
    x = ta.ones(200, 10, dtype="float64", device=device)
    y = F.dropout(x, 0.25).numpy()
    assert set(np.unique(y)) <= {0.0, 1.0 / 0.75}
    assert 0.15 < (y == 0).mean() < 0.35


def test_import_paths_and_reexports():
    import tinyattn.nn.functional as functional_module

    assert functional_module is nn.functional
    # One API: the core functions are re-exported as the very same objects.
    for name in ta.functional.__all__:
        assert getattr(F, name) is getattr(ta.functional, name), name
    assert F.softmax is ta.functional.softmax and F.causal_mask is ta.functional.causal_mask
    assert ta.nn.init is nn.init and ta.nn.utils is nn.utils


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda d: F.softmax(ta.ones(2, 3, device=d)), TypeError, "dim="),
        (
            lambda d: F.cross_entropy(ta.ones(2, 3, device=d), ta.tensor([0, 3], device=d)),
            IndexError,
            "0..2",
        ),
        (
            lambda d: F.cross_entropy(ta.ones(2, 3, device=d), ta.tensor([0.0, 1.0], device=d)),
            ValueError,
            "probability targets",
        ),
        (
            lambda d: F.cross_entropy(ta.ones(2, 3, 4, device=d), ta.tensor([0, 1], device=d)),
            ValueError,
            "classes on axis 1",
        ),
        (
            lambda d: F.cross_entropy(
                ta.ones(2, 3, device=d), ta.tensor([0, 1], device=d), size_average=False
            ),
            NotImplementedError,
            "size_average=",
        ),
        (
            lambda d: F.pad(ta.ones(2, device=d), (1, 1), mode="reflect"),
            NotImplementedError,
            "mode",
        ),
        (lambda d: F.pad(ta.ones(2, device=d), (1, 1, 1)), ValueError, "pairs"),
        (
            lambda d: F.scaled_dot_product_attention(
                *(ta.ones(1, 2, 4, device=d) for _ in range(3)),
                attn_mask=ta.ones(2, 2, dtype="bool", device=d),
                is_causal=True,
            ),
            RuntimeError,
            "should not be set when is_causal=True",
        ),
        (
            lambda d: F.kl_div(ta.ones(2, device=d), ta.ones(2, device=d), True),
            NotImplementedError,
            "reduction=",
        ),
        (
            lambda d: F.mse_loss(ta.ones(2, device=d), ta.ones(2, device=d), reduction="avg"),
            ValueError,
            "reduction",
        ),
    ],
)
def test_functional_errors(device, call, error, words):
    with pytest.raises(error, match=words):
        call(device)


def test_all_ignored_mean_is_zero_not_nan(device):
    """The one deliberate difference: PyTorch returns NaN when every target is ignored."""
    logits = ta.ones(2, 3, device=device, requires_grad=True)
    target = ta.tensor([-100, -100], device=device)
    for loss in (F.cross_entropy(logits, target), F.nll_loss(logits, target)):
        assert float(loss) == 0.0
    assert torch.isnan(TF.cross_entropy(torch.ones(2, 3), torch.tensor([-100, -100])))
