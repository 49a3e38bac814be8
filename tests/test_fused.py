"""Fused ops (Linear, LayerNorm) against their composed twins: forward, gradients, and first and
second derivatives by the gradient checker, on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import ops


def _t(shape, device, seed, grad=True):
    host = np.random.default_rng(seed).standard_normal(shape)
    return ta.tensor(host, dtype="float64", device=device, requires_grad=grad)


def composed_linear(x, w, b=None):
    y = x @ w.mT
    return y if b is None else y + b


def composed_layer_norm(x, w, b, axes, eps=1e-5):
    centered = x - x.mean(axis=axes, keepdims=True)
    y = centered / ((centered * centered).mean(axis=axes, keepdims=True) + eps).sqrt()
    return y * w + b


CASES = [
    ("linear 3-D with bias", lambda x, w, b: ops.Linear.apply(x, w, b), composed_linear),
    (
        "linear no bias",
        lambda x, w, b: ops.Linear.apply(x, w),
        lambda x, w, b: composed_linear(x, w),
    ),
    (
        "layer norm last axis",
        lambda x, w, b: ops.LayerNorm.apply(x, w, b, axes=(2,), eps=1e-5),
        lambda x, w, b: composed_layer_norm(x, w, b, (2,)),
    ),
]


@pytest.mark.parametrize("name,fused,composed", CASES, ids=[c[0] for c in CASES])
def test_fused_matches_composed_twin(device, name, fused, composed):
    x, w = _t((2, 3, 4), device, 0), _t((4, 4) if "linear" in name else (4,), device, 1)
    b = _t((4,), device, 2)
    cotangent = ta.tensor(np.random.default_rng(3).standard_normal((2, 3, 4)), device=device)
    results = []
    for fn in (fused, composed):
        y = fn(x, w, b)
        grads = ta.grad([y], [x, w, b], [cotangent.to("float64")], allow_unused=True)
        results.append(
            [y.detach().numpy()] + [g.detach().numpy() if g is not None else None for g in grads]
        )
    for got, want in zip(*results):
        if want is None:
            assert got is None or not np.any(got)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name,fused,composed", CASES, ids=[c[0] for c in CASES])
def test_fused_first_and_second_derivatives(device, name, fused, composed):
    x, w = _t((2, 3, 4), device, 4), _t((4, 4) if "linear" in name else (4,), device, 5)
    b = _t((4,), device, 6)
    assert ta.gradcheck(fused, (x, w, b))
    assert ta.gradgradcheck(fused, (x, w, b))


def test_layer_norm_without_affine_and_over_two_axes(device):
    x = _t((2, 3, 4), device, 7)
    fused = lambda x: ops.LayerNorm.apply(x, axes=(1, 2), eps=1e-5, has_weight=False)  # noqa: E731
    assert ta.gradcheck(fused, (x,))
    assert ta.gradgradcheck(fused, (x,))
    centered = x.detach().numpy() - x.detach().numpy().mean(axis=(1, 2), keepdims=True)
    want = centered / np.sqrt((centered**2).mean(axis=(1, 2), keepdims=True) + 1e-5)
    np.testing.assert_allclose(fused(x).detach().numpy(), want, rtol=1e-12)
