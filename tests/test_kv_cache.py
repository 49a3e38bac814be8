"""KVCache: decoding position by position equals the full causal forward, also when compiled."""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import nn

TOLERANCE = {"float32": 2e-6, "float64": 1e-13}


def _block(dtype: str, device: str, norm_first: bool = True) -> nn.TransformerBlock:
    ta.manual_seed(0)
    block = nn.TransformerBlock(16, 4, 32, norm_first=norm_first).to(dtype).to(device)
    return block.eval()


def _chunks(x: ta.Tensor, prompt: int) -> list[ta.Tensor]:
    """The prompt as one chunk, then one position per chunk."""
    return [x[:, :prompt]] + [x[:, t : t + 1] for t in range(prompt, x.shape[1])]


def _close(a: ta.Tensor, b: ta.Tensor, dtype: str) -> None:
    expected = b.numpy()
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(a.numpy(), expected, rtol=0, atol=TOLERANCE[dtype] * scale)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    ("prompt", "norm_first"), [(1, True), (4, True), (4, False)], ids=["1", "4", "4-post-ln"]
)
def test_incremental_decoding_equals_the_full_causal_forward(device, dtype, prompt, norm_first):
    block = _block(dtype, device, norm_first)
    x = ta.randn(2, 9, 16, dtype=dtype, device=device)
    with ta.no_grad():
        full = block(x, is_causal=True)
        cache = block.attn.new_cache(batch=2, max_len=12)
        start = 0
        for chunk in _chunks(x, prompt):
            out = block(chunk, is_causal=True, cache=cache)
            _close(out, full[:, start : start + chunk.shape[1]], dtype)
            start += chunk.shape[1]
    assert len(cache) == 9


def test_cached_weights_and_unbatched_input(device):
    attn = nn.MultiHeadAttention(8, 2).double().to(device)
    x = ta.randn(5, 8, dtype="float64", device=device)  # unbatched (T, C)
    with ta.no_grad():
        full, full_weights = attn(x, is_causal=True, need_weights=True)
        cache = attn.new_cache(1, 7)
        first, weights = attn(x[:3], is_causal=True, need_weights=True, cache=cache)
        rest = attn(x[3:], is_causal=True, cache=cache)
    _close(ta.concat([first, rest], axis=0), full, "float64")
    assert weights.shape == (2, 3, 7)  # (H, T, max_len): unwritten keys get weight 0
    np.testing.assert_allclose(weights.numpy()[:, :, :5], full_weights.numpy()[:, :3], atol=1e-15)
    assert not weights.numpy()[:, :, 3:].any()


def test_compiled_per_token_step_equals_the_eager_one(device):
    block = _block("float32", device)
    x = ta.randn(2, 14, 16, device=device)
    prompt, *tokens = _chunks(x, 3)
    outputs = {}
    with ta.no_grad():
        for mode in ("eager", "compiled"):
            cache = block.attn.new_cache(2, 16)
            step = lambda xt, cache=cache: block(xt, is_causal=True, cache=cache)  # noqa: E731
            step = ta.compile(step) if mode == "compiled" else step
            block(prompt, is_causal=True, cache=cache)
            outputs[mode] = [step(token).numpy() for token in tokens]
            outputs[mode].append(cache.keys.numpy())
            if mode == "compiled":
                assert len(step.tapes) == 1  # one recording serves every position
    for compiled, eager in zip(outputs["compiled"], outputs["eager"], strict=True):
        np.testing.assert_array_equal(compiled, eager)


def test_reset_starts_again(device):
    block = _block("float64", device)
    x = ta.randn(1, 4, 16, dtype="float64", device=device)
    with ta.no_grad():
        cache = block.attn.new_cache(1, 4)
        first = block(x, is_causal=True, cache=cache)
        again = block(x, is_causal=True, cache=cache.reset())
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    assert len(cache) == 4


def test_cache_refuses_overflow_eager_and_compiled(device):
    attn = nn.MultiHeadAttention(8, 2).to(device)
    x = ta.randn(1, 1, 8, device=device)
    with ta.no_grad():
        cache = attn.new_cache(1, 3)
        with pytest.raises(ValueError, match=r"KVCache: cannot append 4 position\(s\).*max_len=3"):
            attn(ta.randn(1, 4, 8, device=device), is_causal=True, cache=cache)
        assert len(cache) == 0  # nothing was written
        step = ta.compile(lambda xt: attn(xt, is_causal=True, cache=cache))
        for _ in range(3):
            step(x)
        # The replay runs no Python checks; the table lookup refuses the position instead.
        with pytest.raises(IndexError, match="getitem: .*(index 3 is out of range|out of range)"):
            step(x)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda a, x, c: a(x, cache=c), ValueError, "pass is_causal=True"),
        (lambda a, x, c: a(x, x, is_causal=True, cache=c), ValueError, "and no key"),
        (
            lambda a, x, c: a(x, is_causal=True, mask=ta.ones(1, 1, dtype="bool"), cache=c),
            ValueError,
            "and no mask",
        ),  # fmt: skip
        (lambda a, x, c: a(x, is_causal=True, cache="cache"), TypeError, "must be a KVCache"),
        (
            lambda a, x, c: a(ta.randn(2, 1, 8), is_causal=True, cache=c),
            ValueError,
            r"keys \(1, 2, 4, 4\) does not fit query of shape \(2, 1, 8\)",
        ),  # fmt: skip
        (
            lambda a, x, c: a(x.double(), is_causal=True, cache=c),
            RuntimeError,
            "cache is float32 on 'cpu' but query is float64",
        ),  # fmt: skip
        (
            lambda a, x, c: a(ta.randn(1, 1, 6), is_causal=True, cache=c),
            ValueError,
            "has width 6, but d_model is 8",
        ),  # fmt: skip
    ],
    ids=["not-causal", "key", "mask", "not-a-cache", "batch", "dtype", "width"],
)
def test_cache_misuse_is_named(call, error, message):
    attn = nn.MultiHeadAttention(8, 2)
    cache = attn.new_cache(1, 4)
    with ta.no_grad(), pytest.raises(error, match=message):
        call(attn, ta.randn(1, 1, 8), cache)


def test_cache_refuses_grad_mode_and_bad_sizes():
    attn = nn.MultiHeadAttention(8, 2)
    cache = attn.new_cache(1, 4)
    with pytest.raises(RuntimeError, match=r"decode under ta.no_grad\(\)"):
        attn(ta.randn(1, 1, 8), is_causal=True, cache=cache)
    with pytest.raises(ValueError, match="KVCache: max_len must be a positive int, got 0"):
        attn.new_cache(1, 0)


def test_cache_on_another_device_is_named():
    attn = nn.MultiHeadAttention(8, 2)
    cache = attn.new_cache(1, 4, device="strict")
    with (
        ta.no_grad(),
        pytest.raises(RuntimeError, match="on 'strict:device1' but query is float32 on 'cpu'"),
    ):
        attn(ta.randn(1, 1, 8), is_causal=True, cache=cache)
