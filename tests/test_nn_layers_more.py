"""GroupNorm, InstanceNorm1d/2d/3d, RMSNorm, Dropout1d/2d/3d, AlphaDropout, FeatureAlphaDropout,
Unfold, Fold, PixelShuffle and PixelUnshuffle, and their functional forms, against PyTorch.

Each row of LAYERS builds a layer with the same arguments in both libraries (``make(lib.nn)``),
randomises tinyattn's parameters and running statistics, loads them into torch's (the keys must
be PyTorch's, in order) and compares the forward, the input's and every parameter's gradient and
the running statistics after the step: float64 to 1e-10, float32 within twice PyTorch's own
error against the float64 result. Every row is gradchecked and gradgradchecked on every backend.
Without torch, the formulas are checked against NumPy, the dropout masks' structure and the
errors are pinned, and the PyTorch comparisons skip.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn

SELU_SATURATION = -1.7580993408473766  # alpha dropout's value for a dropped input


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@dataclass(frozen=True)
class Row:
    name: str
    make: Callable  # make(lib.nn) -> a module, the same call for tinyattn and torch
    shape: tuple
    training: bool = True


# fmt: off
LAYERS = [
    Row("GroupNorm 3 of 6",          lambda n: n.GroupNorm(3, 6), (2, 6, 4, 5)),
    Row("GroupNorm (N, C)",          lambda n: n.GroupNorm(2, 4, affine=False), (3, 4)),
    Row("GroupNorm 1 group no bias", lambda n: n.GroupNorm(1, 4, bias=False), (2, 4, 7)),
    Row("GroupNorm 3-d eps",         lambda n: n.GroupNorm(4, 4, eps=1e-3), (2, 4, 3, 3, 2)),
    Row("GroupNorm eval",            lambda n: n.GroupNorm(2, 4), (2, 4, 3), training=False),
    Row("InstanceNorm1d",            lambda n: n.InstanceNorm1d(3), (2, 3, 7)),
    Row("InstanceNorm1d unbatched",  lambda n: n.InstanceNorm1d(3, affine=True), (3, 9)),
    Row("InstanceNorm2d tracked",
        lambda n: n.InstanceNorm2d(3, affine=True, track_running_stats=True), (2, 3, 4, 5)),
    Row("InstanceNorm2d tracked eval",
        lambda n: n.InstanceNorm2d(3, affine=True, track_running_stats=True), (2, 3, 4, 5),
        training=False),
    Row("InstanceNorm2d untracked eval",
        lambda n: n.InstanceNorm2d(3, affine=True), (2, 3, 4, 4), training=False),
    Row("InstanceNorm2d no bias",    lambda n: n.InstanceNorm2d(3, affine=True, bias=False),
        (2, 3, 4, 4)),
    Row("InstanceNorm3d momentum None",
        lambda n: n.InstanceNorm3d(2, affine=True, momentum=None, track_running_stats=True),
        (2, 2, 3, 3, 2)),
    Row("InstanceNorm3d unbatched",  lambda n: n.InstanceNorm3d(2), (2, 3, 4, 2)),
    Row("RMSNorm",                   lambda n: n.RMSNorm(5), (2, 3, 5)),
    Row("RMSNorm two axes eps",      lambda n: n.RMSNorm([4, 5], eps=1e-3), (2, 4, 5)),
    Row("RMSNorm no weight",         lambda n: n.RMSNorm(6, elementwise_affine=False), (4, 6)),
    Row("Unfold",                    lambda n: n.Unfold(2), (2, 3, 5, 6)),
    Row("Unfold strided",
        lambda n: n.Unfold((2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), (1, 2, 6, 7)),
    Row("Unfold unbatched",          lambda n: n.Unfold(3), (2, 5, 5)),
    Row("Fold",                      lambda n: n.Fold((4, 5), 2), (2, 12, 12)),
    Row("Fold padded strided",       lambda n: n.Fold(5, 2, padding=1, stride=2), (1, 8, 9)),
    Row("Fold unbatched",            lambda n: n.Fold((4, 5), 2), (12, 12)),
    Row("PixelShuffle",              lambda n: n.PixelShuffle(2), (2, 8, 3, 4)),
    Row("PixelShuffle unbatched",    lambda n: n.PixelShuffle(3), (9, 2, 2)),
    Row("PixelShuffle two batch axes", lambda n: n.PixelShuffle(2), (2, 3, 4, 2, 2)),
    Row("PixelUnshuffle",            lambda n: n.PixelUnshuffle(2), (2, 2, 4, 6)),
    Row("PixelUnshuffle unbatched",  lambda n: n.PixelUnshuffle(3), (1, 6, 6)),
    Row("Dropout1d eval",            lambda n: n.Dropout1d(0.4), (2, 3, 5), training=False),
    Row("Dropout2d eval",            lambda n: n.Dropout2d(), (2, 3, 4, 4), training=False),
    Row("Dropout3d eval",            lambda n: n.Dropout3d(0.2), (3, 2, 2, 2), training=False),
    Row("AlphaDropout eval",         lambda n: n.AlphaDropout(0.3), (4, 5), training=False),
    Row("FeatureAlphaDropout eval",  lambda n: n.FeatureAlphaDropout(), (2, 3, 4), training=False),
]
# fmt: on
ROW_IDS = [row.name for row in LAYERS]


def _built(row: Row, dtype: str = "float64", device: str = "cpu", seed: int = 0) -> nn.Module:
    """The row's tinyattn module with random parameters (around 1 for scales) and running
    statistics, so that every affine and eval path is exercised."""
    ta.manual_seed(0)
    module = row.make(nn).to(dtype)
    rng = np.random.default_rng(seed)
    for name, value in module.state_dict().items():
        if value.dtype == ta.int64:
            continue
        scale = rng.random(value.shape) + 0.5 if name.endswith(("weight", "running_var")) else 0
        nn.init._write(value, rng.standard_normal(value.shape) * 0.3 + scale)
    return module.train(row.training).to(device)


def _input(shape: tuple, seed: int = 1, mean: float = 3.0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape) * 2.0 + mean


def _run(lib, module, x: np.ndarray) -> dict:
    """Forward, backward of sum(y * cotangent) with a seeded cotangent of y's shape and dtype;
    every result as float64 NumPy."""
    leaf = lib.tensor(x, requires_grad=True)
    y = module(leaf)
    cotangent = np.random.default_rng(2).standard_normal(tuple(y.shape)).astype(x.dtype)
    (y * lib.tensor(cotangent)).sum().backward()
    out = {"y": y, "x.grad": leaf.grad}
    out |= {f"{name}.grad": p.grad for name, p in module.named_parameters()}
    out |= {name: b for name, b in module.named_buffers() if name.startswith("running")}
    return {key: value.detach().numpy().astype(np.float64) for key, value in out.items()}


def _twin(torch, row: Row, ours: nn.Module, dtype: str):
    """torch's module of the row, holding `ours`'s state (PyTorch's keys, in order)."""
    theirs = row.make(torch.nn).to(getattr(torch, dtype)).train(row.training)
    state = ours.state_dict()
    assert list(state) == list(theirs.state_dict())
    theirs.load_state_dict({key: torch.tensor(value.numpy()) for key, value in state.items()})
    return theirs


# ------------------------------------------------------------------------ against PyTorch
@pytest.mark.parametrize("row", LAYERS, ids=ROW_IDS)
def test_float64_forward_gradients_and_running_stats_equal_pytorch(torch, row):
    ours = _built(row)
    theirs = _twin(torch, row, ours, "float64")
    x = _input(row.shape)
    got, expected = _run(ta, ours, x), _run(torch, theirs, x)
    assert got.keys() == expected.keys()
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-10, atol=1e-12, err_msg=key)
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("mean", [3.0, 1000.0], ids=["mean 3", "mean 1000"])
@pytest.mark.parametrize("row", LAYERS, ids=ROW_IDS)
def test_float32_within_twice_pytorchs_own_rounding(torch, row, mean):
    ours = _built(row, "float32")
    theirs, reference = _twin(torch, row, ours, "float32"), _twin(torch, row, ours, "float64")
    x = _input(row.shape, mean=mean).astype(np.float32)
    got, expected = _run(ta, ours, x), _run(torch, theirs, x)
    exact = _run(torch, reference, x.astype(np.float64))
    for key in exact:
        ours_error = np.abs(got[key] - exact[key]).max(initial=0.0)
        torch_error = np.abs(expected[key] - exact[key]).max(initial=0.0)
        bound = 2.0 * torch_error + 1e-6 * np.abs(exact[key]).max(initial=1.0)
        assert ours_error <= bound, f"{key}: error {ours_error:.3g}, PyTorch's {torch_error:.3g}"


FUNCTIONAL = [  # (name, call(F, x, weight, bias), input shape): the same call in both libraries
    ("group_norm", lambda f, x, w, b: f.group_norm(x, 2, w, b, 1e-4), (2, 4, 3, 2)),
    ("group_norm no affine", lambda f, x, w, b: f.group_norm(x, 4), (3, 4, 5)),
    ("instance_norm", lambda f, x, w, b: f.instance_norm(x, weight=w, bias=b), (2, 4, 6)),
    ("instance_norm eps", lambda f, x, w, b: f.instance_norm(x, eps=0.1), (2, 4, 2, 3)),
    ("rms_norm", lambda f, x, w, b: f.rms_norm(x, (4, 3), w.reshape(4, 1) * b[:3]), (2, 4, 3)),
    ("rms_norm default eps", lambda f, x, w, b: f.rms_norm(x * 1e-5, [3]), (2, 4, 3)),
    ("pixel_shuffle", lambda f, x, w, b: f.pixel_shuffle(x * w.reshape(4, 1, 1), 2), (4, 2, 3)),
    ("pixel_unshuffle", lambda f, x, w, b: f.pixel_unshuffle(x, 2), (1, 2, 4, 2)),
    ("unfold", lambda f, x, w, b: f.unfold(x, (2, 1), padding=(0, 1)), (2, 4, 3, 3)),
    ("fold", lambda f, x, w, b: f.fold(x, (3, 4), 2, stride=(1, 2)), (2, 8, 4)),
    ("dropout2d eval", lambda f, x, w, b: f.dropout2d(x, 0.5, training=False), (2, 4, 2, 2)),
    ("alpha_dropout default", lambda f, x, w, b: f.alpha_dropout(x, 0.5), (2, 4)),
    (
        "feature_alpha_dropout p 0",
        lambda f, x, w, b: f.feature_alpha_dropout(x, 0.0, True),
        (2, 4, 3),
    ),
]


@pytest.mark.parametrize("name, call, shape", FUNCTIONAL, ids=[c[0] for c in FUNCTIONAL])
def test_functional_forms_equal_pytorch(torch, name, call, shape):
    rng = np.random.default_rng(3)
    values = [_input(shape), rng.standard_normal(4) + 1.0, rng.standard_normal(4)]
    results = []
    for lib in (ta, torch):
        leaves = [lib.tensor(v, requires_grad=True) for v in values]
        functional = lib.nn.functional
        y = call(functional, *leaves)
        (y * lib.tensor(np.cos(np.arange(y.numel())).reshape(tuple(y.shape)))).sum().backward()
        grads = [leaf.grad for leaf in leaves]
        results.append([y, *(g if g is not None else lib.zeros(1) for g in grads)])
    for got, expected in zip(*results, strict=True):
        np.testing.assert_allclose(
            got.detach().numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12
        )


def test_instance_norm_running_stats_over_steps_then_eval_equal_pytorch(torch):
    ours = nn.InstanceNorm1d(3, momentum=0.3, track_running_stats=True).to("float64")
    theirs = torch.nn.InstanceNorm1d(3, momentum=0.3, track_running_stats=True).double()
    for step in range(3):
        x = _input((4, 3, 6), seed=step)
        ours(ta.tensor(x)), theirs(torch.tensor(x))
    for key, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[key].numpy(), value.numpy(), rtol=1e-12)
    assert int(ours.num_batches_tracked.item()) == 0  # PyTorch's instance norm counts nothing
    x = _input((2, 3, 5), seed=9)
    np.testing.assert_allclose(
        ours.eval()(ta.tensor(x)).numpy(), theirs.eval()(torch.tensor(x)).numpy(), rtol=1e-12
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda lib, x: lib.nn.functional.group_norm(x, 2),
        lambda lib, x: lib.nn.functional.instance_norm(x),
        lambda lib, x: lib.nn.functional.rms_norm(x, (5,)),
        lambda lib, x: lib.nn.GroupNorm(2, 4).to(x.dtype)(x),
    ],
    ids=["group_norm", "instance_norm", "rms_norm", "GroupNorm"],
)
def test_float16_is_computed_in_float32_as_pytorch(torch, call):
    x = (_input((2, 4, 5), mean=50.0)).astype(np.float16)
    got = call(ta, ta.tensor(x)).detach().numpy()
    expected = call(torch, torch.tensor(x)).detach().numpy()
    assert got.dtype == np.float16
    exact = call(torch, torch.tensor(x.astype(np.float64))).detach().numpy()
    ulp = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(got - exact) <= np.abs(expected - exact) + ulp)


# ------------------------------------------------------------------------ dropout vs PyTorch
CHANNEL_DROPOUTS = [  # (name, call(F, x), shape, the number of leading mask axes)
    ("dropout1d", lambda f, x: f.dropout1d(x, 0.3), (40, 25, 3), 2),
    ("dropout1d unbatched", lambda f, x: f.dropout1d(x, 0.3), (500, 3), 1),
    ("dropout2d", lambda f, x: f.dropout2d(x, 0.3), (40, 25, 2, 2), 2),
    ("dropout3d", lambda f, x: f.dropout3d(x, 0.3), (40, 25, 2, 1, 2), 2),
    ("dropout3d unbatched", lambda f, x: f.dropout3d(x, 0.3), (500, 2, 1, 2), 1),
    ("feature_alpha_dropout", lambda f, x: f.feature_alpha_dropout(x, 0.3, True), (40, 25, 3), 2),
]


def _channel_factors(x: np.ndarray, y: np.ndarray, mask_axes: int) -> np.ndarray:
    """The per-channel factor y / x, after checking it is one number per channel."""
    ratio = (y / x).reshape(*x.shape[:mask_axes], -1)
    np.testing.assert_allclose(ratio, ratio[..., :1].repeat(ratio.shape[-1], -1), rtol=1e-12)
    return ratio[..., 0]


@pytest.mark.parametrize("name, call, shape, mask_axes", CHANNEL_DROPOUTS)
def test_channel_dropout_drops_whole_channels_as_pytorch(torch, name, call, shape, mask_axes):
    x = _input(shape, mean=0.0) + 5.0  # no zeros: y / x is the factor
    torch.manual_seed(0)
    ta.manual_seed(0)
    shift = -SELU_SATURATION * _alpha_scale(0.3) * 0.3 if "alpha" in name else 0.0
    for lib in (torch, ta):
        y = call(lib.nn.functional, lib.tensor(x)).numpy()
        if "alpha" in name:  # each value kept (a x + shift) or dropped, one choice per channel
            kept = np.isclose(y, _alpha_scale(0.3) * x + shift, rtol=1e-12)
            dropped = np.isclose(y, (SELU_SATURATION + 0.3 * -SELU_SATURATION) * _alpha_scale(0.3))
            assert np.all(kept | dropped)
            factors = _channel_factors(x, np.where(kept, x, 0.0), mask_axes) / 0.7
        else:
            factors = _channel_factors(x, y, mask_axes)
        assert set(np.round(factors, 12).ravel()) <= {0.0, round(1 / 0.7, 12)}
        assert abs((factors == 0).mean() - 0.3) < 0.06


def _alpha_scale(p: float) -> float:
    return 1.0 / np.sqrt((SELU_SATURATION**2 * p + 1.0) * (1.0 - p))


def test_alpha_dropout_values_are_pytorchs(torch):
    x = np.random.default_rng(4).standard_normal(100_000)
    p = 0.2
    a = _alpha_scale(p)
    dropped_value = a * SELU_SATURATION * (1.0 - p)
    for lib in (torch, ta):
        lib.manual_seed(0)
        y = lib.nn.functional.alpha_dropout(lib.tensor(x), p, training=True).numpy()
        kept = np.isclose(y, a * x - a * SELU_SATURATION * p, rtol=1e-12, atol=1e-15)
        dropped = np.isclose(y, dropped_value, rtol=1e-12)
        assert np.all(kept | dropped) and abs(dropped.mean() - p) < 0.01
        assert abs(y.mean()) < 0.02 and abs(y.var() - 1.0) < 0.02  # SELU's moments kept


def test_dropout_warnings_as_pytorchs(torch):
    for lib in (torch, ta):
        f = lib.nn.functional
        with pytest.warns(UserWarning, match="3D|3-d"):
            f.dropout2d(lib.ones(2, 3, 4), 0.5)
        with pytest.warns(UserWarning, match="dropout3d"):
            f.dropout3d(lib.ones(2, 3, 4), 0.5)
        with pytest.warns(UserWarning, match="num_features"):
            lib.nn.InstanceNorm1d(4)(lib.ones(2, 3, 5))


# ---------------------------------------------------------------------------- errors
ERRORS = [  # call(lib, x) with x of shape (2, 6, 4, 4); PyTorch's exception type is required
    ("group_norm groups", lambda lib, x: lib.nn.functional.group_norm(x, 4)),
    ("group_norm 1-d", lambda lib, x: lib.nn.functional.group_norm(x[0, 0, 0], 2)),
    ("group_norm weight", lambda lib, x: lib.nn.functional.group_norm(x, 3, lib.ones(5))),
    ("group_norm one value", lambda lib, x: lib.nn.functional.group_norm(x[:1, :3, :1, 0], 3)),
    ("GroupNorm divisible", lambda lib, x: lib.nn.GroupNorm(4, 6)),
    ("instance_norm one value", lambda lib, x: lib.nn.functional.instance_norm(x[:, :, :1, 0])),
    ("instance_norm (N, C)", lambda lib, x: lib.nn.functional.instance_norm(x[:, :, 0, 0])),
    (
        "instance_norm running_mean",
        lambda lib, x: lib.nn.functional.instance_norm(x, lib.zeros(5), lib.ones(5)),
    ),
    ("instance_norm weight", lambda lib, x: lib.nn.functional.instance_norm(x, weight=lib.ones(5))),
    (
        "instance_norm no stats",
        lambda lib, x: lib.nn.functional.instance_norm(x, use_input_stats=False),
    ),
    ("InstanceNorm1d 4-d", lambda lib, x: lib.nn.InstanceNorm1d(6)(x)),
    ("InstanceNorm2d 2-d", lambda lib, x: lib.nn.InstanceNorm2d(6)(x[:, :, 0, 0])),
    ("InstanceNorm2d channels", lambda lib, x: lib.nn.InstanceNorm2d(4, affine=True)(x)),
    ("rms_norm shape", lambda lib, x: lib.nn.functional.rms_norm(x, (5,))),
    ("rms_norm weight", lambda lib, x: lib.nn.functional.rms_norm(x, (4,), lib.ones(3))),
    ("RMSNorm shape", lambda lib, x: lib.nn.RMSNorm((3, 4))(x)),
    ("pixel_shuffle 2-d", lambda lib, x: lib.nn.functional.pixel_shuffle(x[0, 0], 2)),
    ("pixel_shuffle channels", lambda lib, x: lib.nn.functional.pixel_shuffle(x, 2)),
    ("pixel_shuffle factor 0", lambda lib, x: lib.nn.PixelShuffle(0)(x)),
    ("pixel_shuffle float factor", lambda lib, x: lib.nn.functional.pixel_shuffle(x, 2.0)),
    ("pixel_unshuffle height", lambda lib, x: lib.nn.functional.pixel_unshuffle(x[:, :, :3], 2)),
    ("pixel_unshuffle width", lambda lib, x: lib.nn.PixelUnshuffle(3)(x[:, :, :3])),
    ("pixel_unshuffle 2-d", lambda lib, x: lib.nn.functional.pixel_unshuffle(x[0, 0], 2)),
    ("Unfold 5-d", lambda lib, x: lib.nn.Unfold(2)(x[None])),
    ("Fold 4-d", lambda lib, x: lib.nn.Fold(3, 2)(x)),
    ("Fold columns", lambda lib, x: lib.nn.Fold(3, 2)(x[:, :5, :4, 0])),
    ("dropout1d 4-d", lambda lib, x: lib.nn.functional.dropout1d(x, 0.5)),
    ("dropout p", lambda lib, x: lib.nn.functional.dropout2d(x, 1.5)),
    ("alpha_dropout p", lambda lib, x: lib.nn.functional.alpha_dropout(x, -0.1, True)),
    ("Dropout3d p", lambda lib, x: lib.nn.Dropout3d(2)),
    ("AlphaDropout p", lambda lib, x: lib.nn.AlphaDropout(-1)),
    (
        "feature dropout 1-d",
        lambda lib, x: lib.nn.functional.feature_alpha_dropout(x[0, 0, 0], 0.5, True),
    ),
]


@pytest.mark.filterwarnings("ignore:feature_alpha_dropout|dropout")
@pytest.mark.parametrize("name, call", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_have_pytorchs_types_and_name_the_call(torch, name, call):
    x = np.random.default_rng(5).standard_normal((2, 6, 4, 4))
    with pytest.raises(Exception) as theirs:  # noqa: PT011  (any type: torch's is the oracle)
        call(torch, torch.tensor(x))
    with pytest.raises(type(theirs.value)) as ours:
        call(ta, ta.tensor(x))
    op = name.split()[0].lower().replace("_", "")
    assert op in str(ours.value).lower().replace("_", ""), str(ours.value)


def test_module_paths_are_pytorchs(torch):
    paths = {
        "normalization": ["GroupNorm", "RMSNorm"],
        "instancenorm": ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"],
        "dropout": ["Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"],
        "fold": ["Fold", "Unfold"],
        "pixelshuffle": ["PixelShuffle", "PixelUnshuffle"],
    }
    for submodule, names in paths.items():
        for name in names:
            assert getattr(getattr(torch.nn.modules, submodule), name).__name__ == name
            assert getattr(getattr(nn.modules, submodule), name) is getattr(nn, name)
    for name in (
        "group_norm",
        "instance_norm",
        "rms_norm",
        "dropout1d",
        "dropout2d",
        "dropout3d",
        "alpha_dropout",
        "feature_alpha_dropout",
        "pixel_shuffle",
        "pixel_unshuffle",
    ):
        assert hasattr(torch.nn.functional, name) and name in F.__all__


# ---------------------------------------------------------------- gradchecks, every backend
@pytest.mark.parametrize(
    "row", [r for r in LAYERS if "Dropout" not in r.name], ids=lambda r: r.name
)
def test_gradcheck_and_gradgradcheck_input_and_parameters(device, row):
    module = _built(row, device=device)
    x = ta.tensor(_input(row.shape), device=device, requires_grad=True)
    assert ta.gradcheck(module, [x], params=module)
    assert ta.gradgradcheck(module, [x], params=module, fast=True)  # three directions


@pytest.mark.parametrize(
    "make, shape",
    [
        (lambda: nn.Dropout1d(0.4), (3, 4, 2)),
        (lambda: nn.Dropout2d(0.4), (3, 4, 2, 2)),
        (lambda: nn.Dropout3d(0.4), (4, 2, 2, 2)),
        (lambda: nn.AlphaDropout(0.4), (3, 4)),
        (lambda: nn.FeatureAlphaDropout(0.4), (3, 4, 2)),
    ],
    ids=["Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"],
)
def test_dropout_layers_gradcheck_with_a_fixed_mask(device, make, shape):
    layer = make()

    def fixed_mask(x):
        ta.manual_seed(7)  # the same mask at every evaluation
        return layer(x)

    x = ta.tensor(_input(shape), device=device, requires_grad=True)
    assert ta.gradcheck(fixed_mask, [x])
    assert ta.gradgradcheck(fixed_mask, [x], fast=True)


# ------------------------------------------------------------------------- torch-free checks
def test_norms_equal_their_numpy_formulas():
    x = _input((2, 6, 3, 2))
    weight, bias = np.linspace(0.5, 2.0, 6), np.linspace(-1.0, 1.0, 6)
    per_channel = (1, 6, 1, 1)
    groups = x.reshape(2, 3, -1)
    expected = (groups - groups.mean(-1, keepdims=True)) / np.sqrt(
        groups.var(-1, keepdims=True) + 1e-5
    )
    expected = expected.reshape(x.shape) * weight.reshape(per_channel) + bias.reshape(per_channel)
    got = F.group_norm(ta.tensor(x), 3, ta.tensor(weight), ta.tensor(bias)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)

    axes = (2, 3)
    expected = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + 1e-5)
    np.testing.assert_allclose(F.instance_norm(ta.tensor(x)).numpy(), expected, atol=1e-12)

    rms = np.sqrt((x**2).mean((2, 3), keepdims=True) + np.finfo(np.float64).eps)
    got = F.rms_norm(ta.tensor(x), (3, 2), ta.tensor(np.full((3, 2), 2.0))).numpy()
    np.testing.assert_allclose(got, x / rms * 2.0, rtol=1e-12)


def test_instance_norm_running_stats_follow_the_formula():
    x = _input((4, 3, 5))
    mean, var = np.full(3, 0.5), np.full(3, 2.0)
    running_mean, running_var = ta.tensor(mean), ta.tensor(var)
    F.instance_norm(ta.tensor(x), running_mean, running_var, momentum=0.25)
    np.testing.assert_allclose(running_mean.numpy(), 0.75 * mean + 0.25 * x.mean(2).mean(0))
    np.testing.assert_allclose(
        running_var.numpy(), 0.75 * var + 0.25 * x.var(2, ddof=1).mean(0), rtol=1e-12
    )


def test_pixel_shuffle_places_channels_in_blocks_and_unshuffle_inverts_it():
    r = 2
    x = np.arange(2 * 8 * 3 * 2, dtype=np.float64).reshape(2, 8, 3, 2)
    y = F.pixel_shuffle(ta.tensor(x), r).numpy()
    assert y.shape == (2, 2, 6, 4)
    for c, i, j, h, w in np.ndindex(2, r, r, 3, 2):
        assert y[:, c, h * r + i, w * r + j].tolist() == x[:, c * r * r + i * r + j, h, w].tolist()
    np.testing.assert_array_equal(F.pixel_unshuffle(ta.tensor(y), r).numpy(), x)
    integers = ta.arange(16).reshape(1, 4, 2, 2)  # any dtype, as in PyTorch
    assert nn.PixelShuffle(2)(integers).dtype == ta.int64


def test_channel_dropout_masks_whole_channels_and_scales_the_rest():
    ta.manual_seed(0)
    x = ta.ones(50, 20, 2, 2, dtype="float64", requires_grad=True)
    layer = nn.Dropout2d(0.3)
    y = layer(x)
    y.sum().backward()
    values = y.detach().numpy().reshape(1000, 4)
    assert np.all(values == values[:, :1])  # one factor per channel
    assert set(np.unique(values)) <= {0.0, 1.0 / 0.7}
    assert abs((values[:, 0] == 0).mean() - 0.3) < 0.05
    np.testing.assert_array_equal(x.grad.numpy(), y.detach().numpy())  # dL/dx = mask / (1 - p)
    ta.manual_seed(0)
    np.testing.assert_array_equal(layer(x).detach().numpy(), y.detach().numpy())  # seeded
    layer.eval()
    assert layer(x) is x
    assert np.all(F.dropout3d(ta.ones(2, 3, 2, 2, 2), 1.0).numpy() == 0.0)
    assert F.dropout1d(x[0, :, :, 0], 0.0) is not None


def test_alpha_dropout_keeps_mean_and_variance():
    ta.manual_seed(0)
    x = ta.tensor(np.random.default_rng(0).standard_normal((400, 500)))
    for layer in (nn.AlphaDropout(0.3), nn.FeatureAlphaDropout(0.3)):
        y = layer(x).numpy()
        assert abs(y.mean()) < 0.03 and abs(y.var() - 1.0) < 0.05, type(layer).__name__
    y = nn.FeatureAlphaDropout(0.5)(x.reshape(400, 500, 1).expand(400, 500, 3)).numpy()
    assert np.all(y == y[..., :1])  # a dropped channel is dropped at every position
    assert nn.AlphaDropout(0.5).eval()(x) is x
    assert F.alpha_dropout(x, 0.5) is x  # training=False by default, as in PyTorch


def test_state_dict_keys_defaults_and_reset_parameters():
    keys = {
        nn.GroupNorm(2, 4): ["weight", "bias"],
        nn.GroupNorm(2, 4, bias=False): ["weight"],
        nn.GroupNorm(2, 4, affine=False): [],
        nn.InstanceNorm2d(4): [],
        nn.InstanceNorm2d(4, affine=True, track_running_stats=True): [
            "weight", "bias", "running_mean", "running_var", "num_batches_tracked",
        ],
        nn.RMSNorm((2, 3)): ["weight"],
        nn.RMSNorm(3, elementwise_affine=False): [],
        nn.PixelShuffle(2): [],
        nn.Fold(3, 2): [],
    }  # fmt: skip
    for module, expected in keys.items():
        assert list(module.state_dict()) == expected, repr(module)
    norm = nn.GroupNorm(2, 4)
    with ta.no_grad():
        norm.weight.fill_(3.0)
    norm.reset_parameters()
    assert norm.weight.tolist() == [1.0] * 4 and norm.bias.tolist() == [0.0] * 4
    assert nn.RMSNorm(3).eps is None and nn.InstanceNorm1d(3).affine is False
    assert nn.RMSNorm(3, dtype=ta.float64).weight.dtype == ta.float64


def test_errors_without_torch_name_the_layer():
    x = ta.randn(2, 6, 4, 4)
    with pytest.raises(RuntimeError, match=r"group_norm: .*6 channels.*num_groups=4"):
        F.group_norm(x, 4)
    with pytest.raises(ValueError, match="GroupNorm: num_channels"):
        nn.GroupNorm(4, 6)
    with pytest.raises(ValueError, match=r"InstanceNorm1d: expected a 2-d .* or 3-d input"):
        nn.InstanceNorm1d(6)(x)
    with pytest.raises(RuntimeError, match=r"rms_norm: normalized_shape \(5,\)"):
        F.rms_norm(x, 5)
    with pytest.raises(RuntimeError, match=r"pixel_shuffle: the channel axis"):
        nn.PixelShuffle(2)(x)
    with pytest.raises(ValueError, match="Dropout2d: dropout probability"):
        nn.Dropout2d(1.5)
    with pytest.raises(TypeError, match="group_norm: expected a floating-point"):
        F.group_norm(ta.ones(2, 4, dtype="int64"), 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nn.Dropout2d()(ta.ones(2, 3, 2, 2))  # the documented shapes warn nothing


def test_a_compiled_training_step_equals_the_eager_one():
    """The layers under ta.compile: a replay draws new dropout masks from the generator, as an
    eager step does, so the losses and weights after four steps are the same numbers."""
    batches = [ta.tensor(_input((4, 2, 4, 4), seed=s), dtype="float32") for s in range(4)]
    results = []
    for compiled in (False, True):
        ta.manual_seed(0)
        model = nn.Sequential(
            nn.Conv2d(2, 8, 3, padding=1),
            nn.GroupNorm(2, 8),
            nn.Dropout2d(0.3),
            nn.PixelShuffle(2),  # (4, 8, 4, 4) -> (4, 2, 8, 8)
            nn.InstanceNorm2d(2, affine=True, track_running_stats=True),
            nn.AlphaDropout(0.2),
            nn.Flatten(),
            nn.RMSNorm(128),
        )
        optimizer = ta.optim.SGD(model.parameters(), lr=0.1)

        def step(x, model=model, optimizer=optimizer):
            optimizer.zero_grad()
            loss = (model(x) - 0.5).pow(2.0).mean()
            loss.backward()
            optimizer.step()
            return loss

        step = ta.compile(step) if compiled else step
        ta.manual_seed(1)
        losses = [float(step(x).detach().numpy()) for x in batches]
        assert not compiled or len(step.tapes) == 1, "the replays must have run"
        results.append((losses, model.state_dict()))
    (eager_losses, eager_state), (compiled_losses, compiled_state) = results
    assert compiled_losses == eager_losses
    for key, value in eager_state.items():
        np.testing.assert_array_equal(compiled_state[key].numpy(), value.numpy(), err_msg=key)


def test_instance_norm_reset_parameters_and_running_stats():
    norm = nn.InstanceNorm1d(3, affine=True, track_running_stats=True)
    norm(ta.randn(2, 3, 5) + 4.0)
    with ta.no_grad():
        norm.weight.fill_(2.0)
    assert norm.running_mean.tolist() != [0.0] * 3
    norm.reset_parameters()
    assert norm.running_mean.tolist() == [0.0] * 3 and norm.running_var.tolist() == [1.0] * 3
    assert norm.weight.tolist() == [1.0] * 3 and norm.bias.tolist() == [0.0] * 3
    assert norm.num_batches_tracked.item() == 0
