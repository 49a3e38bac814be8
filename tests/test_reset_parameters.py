"""reset_parameters: in place (the same Parameter objects), with the constructors' init."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import nn


def _scramble(module):
    with ta.no_grad():
        for p in module.parameters():
            p.fill_(7.0)


def _reset_in_place(module):
    before = {name: (p, p.shape) for name, p in module.named_parameters()}
    _scramble(module)
    module.reset_parameters()
    after = dict(module.named_parameters())
    assert all(after[name] is p and p.shape == shape for name, (p, shape) in before.items())
    return {name: p.detach().numpy().astype(np.float64) for name, p in after.items()}


@pytest.mark.parametrize(
    "make, fan_in",
    [
        (lambda: nn.Linear(400, 300), 400),
        (lambda: nn.Conv1d(8, 200, 5), 40),
        (lambda: nn.Conv2d(6, 100, (3, 4), groups=2), 36),
        (lambda: nn.ConvTranspose2d(6, 200, 3), 200 * 9),
    ],
)
def test_uniform_layers_redraw_u_of_one_over_sqrt_fan_in(make, fan_in):
    module = make()
    values = _reset_in_place(module)
    bound = 1.0 / math.sqrt(fan_in)
    weight = values["weight"]
    assert np.abs(weight).max() <= bound
    # U(-b, b): mean 0, variance b^2 / 3 (thousands of draws: a few percent)
    assert abs(weight.mean()) < 0.05 * bound
    assert weight.var() == pytest.approx(bound**2 / 3, rel=0.1)
    assert np.abs(values["bias"]).max() <= bound and values["bias"].std() > 0.3 * bound
    ta.manual_seed(5)
    module.reset_parameters()
    first = module.weight.detach().numpy().copy()
    ta.manual_seed(5)
    module.reset_parameters()
    assert np.array_equal(module.weight.detach().numpy(), first)  # from ta.manual_seed's RNG


def test_embedding_redraws_standard_normal_with_zero_padding_row():
    module = nn.Embedding(300, 200, padding_idx=4)
    table = _reset_in_place(module)["weight"]
    assert np.all(table[4] == 0.0)
    rest = np.delete(table, 4, axis=0)
    assert abs(rest.mean()) < 0.02 and rest.std() == pytest.approx(1.0, rel=0.02)


@pytest.mark.parametrize("make", [lambda: nn.LayerNorm((3, 4)), lambda: nn.BatchNorm1d(5)])
def test_norm_layers_reset_to_ones_and_zeros(make):
    module = make()
    values = _reset_in_place(module)
    assert np.all(values["weight"] == 1.0) and np.all(values["bias"] == 0.0)


def test_batchnorm_reset_running_stats_as_torch():
    torch = pytest.importorskip("torch")
    ours, theirs = nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
    x = np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32)
    ours(ta.tensor(x))
    theirs(torch.tensor(x))
    running = ours.running_mean
    for module in (ours, theirs):
        module.reset_running_stats()
    assert ours.running_mean is running
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert np.array_equal(getattr(ours, name).numpy(), getattr(theirs, name).numpy())


def test_every_torch_layer_with_reset_parameters_has_it():
    torch = pytest.importorskip("torch")
    for name in (
        "Linear",
        "Embedding",
        "LayerNorm",
        "Conv1d",
        "Conv2d",
        "ConvTranspose1d",
        "ConvTranspose2d",
        "Conv3d",
        "ConvTranspose3d",
        "BatchNorm1d",
        "BatchNorm2d",
        "BatchNorm3d",
        "RNN",
        "LSTM",
        "GRU",
    ):
        assert hasattr(getattr(torch.nn, name), "reset_parameters")
        assert callable(getattr(getattr(nn, name), "reset_parameters", None)), name


@pytest.mark.parametrize(
    "base, args",
    [(nn.Linear, (3, 2)), (nn.Embedding, (5, 3, 1)), (nn.Conv2d, (2, 3, 3))],
    ids=["Linear", "Embedding", "Conv2d"],
)
def test_the_constructor_calls_reset_parameters_so_a_subclass_override_runs(base, args):
    """As in PyTorch: the constructor initialises by calling reset_parameters, so a subclass's
    own init is what a new module holds; the built-in draws come from the same seed as ever."""

    class Zeroed(base):
        def reset_parameters(self) -> None:
            nn.init.zeros_(self.weight)

    assert not Zeroed(*args).weight.detach().numpy().any()
    ta.manual_seed(1)
    first = base(*args).weight.detach().numpy().copy()
    ta.manual_seed(1)
    np.testing.assert_array_equal(base(*args).weight.detach().numpy(), first)
    assert first.any()
