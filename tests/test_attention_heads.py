"""nn.MultiHeadAttention's fused path (ops.HeadsAttention) against its reference path.

The reference splits each projection into heads, runs functional._attention on them and merges
the heads again: a dozen nodes. The fused path computes every head in one node, on the
projections as they are. It makes the same array calls, so outputs and every gradient agree bit
for bit on the host backends (each comparison runs both paths, switched with
`nn.attention.FUSED_ATTENTION`). Runs on every backend through the `device` fixture.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import kernels, nn, ops
from tinyattn.errors import TinyattnError
from tinyattn.nn import attention as attention_module

EXACT = ("cpu", "strict")  # where both paths' forwards are the same library calls


def _count_fused(monkeypatch) -> list:
    calls = []
    forward = ops.HeadsAttention.forward
    monkeypatch.setattr(
        ops.HeadsAttention,
        "forward",
        lambda self, *a, **k: calls.append(1) or forward(self, *a, **k),
    )
    return calls


def _run(monkeypatch, fused, device, dtype, tk=7, unbatched=False, **kwargs):
    """Output, input gradients and parameter gradients of one path, as NumPy arrays."""
    monkeypatch.setattr(attention_module, "FUSED_ATTENTION", fused)
    ta.manual_seed(0)
    module = nn.MultiHeadAttention(8, 2).to(device).to(getattr(ta, dtype))
    rng = np.random.default_rng(1)
    lead = () if unbatched else (3,)
    query = ta.tensor(rng.standard_normal((*lead, 5, 8)), dtype=dtype, device=device)
    memory = ta.tensor(rng.standard_normal((*lead, tk, 8)), dtype=dtype, device=device)
    query.requires_grad_(), memory.requires_grad_()
    out = module(query, memory, memory, **kwargs)
    cotangent = ta.tensor(rng.standard_normal(out.shape), dtype=dtype, device=device)
    out.backward(cotangent)
    grads = [query.grad, memory.grad] + [p.grad for p in module.parameters()]
    return [out.detach().numpy()] + [g.numpy() for g in grads]


CASES = {
    "no mask": {},
    "causal": {"is_causal": True, "tk": 5},
    "causal cross": {"is_causal": True},
    "mask (Tq, Tk)": {"mask": np.tril(np.ones((5, 7), bool))},
    "mask (B, Tq, Tk)": {"mask": np.tril(np.ones((3, 5, 7), bool), k=1)},
    "key padding": {"key_padding_mask": np.array([[False] * 6 + [True]] * 3)},
    "causal and padding": {
        "is_causal": True,
        "tk": 5,
        "key_padding_mask": np.array([[False] * 4 + [True]] * 3),
    },
    "unbatched": {"unbatched": True},
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES)
def test_the_fused_path_equals_the_reference_path(monkeypatch, device, case, dtype):
    calls = _count_fused(monkeypatch)
    fused = _run(monkeypatch, True, device, dtype, **CASES[case])
    assert calls, f"{case}: the fused path was not taken"
    calls.clear()
    reference = _run(monkeypatch, False, device, dtype, **CASES[case])
    assert not calls
    if device in EXACT:  # the same calls: the same output, bit for bit
        np.testing.assert_array_equal(fused[0], reference[0])
    tol = 2e-6 if dtype == "float32" else 1e-13
    for k, (got, want) in enumerate(zip(fused, reference, strict=True)):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"{case}: array {k}")


def test_the_reference_path_runs_where_the_fused_one_does_not_apply(monkeypatch):
    """Weights asked for, dropout while training, a long sequence (the block-wise path's),
    float16, and the switch off: each takes the reference's ops."""
    calls = _count_fused(monkeypatch)
    x = ta.randn(2, 6, 8)
    module = nn.MultiHeadAttention(8, 2)
    module(x, need_weights=True)
    nn.MultiHeadAttention(8, 2, dropout=0.5).train()(x)
    monkeypatch.setattr(ta.functional, "BLOCKWISE_MIN_SCORES", 2 * 2 * 6 * 6)
    module(x)
    monkeypatch.undo()
    calls = _count_fused(monkeypatch)
    module.to(ta.float16)(x.to(ta.float16))
    monkeypatch.setattr(attention_module, "FUSED_ATTENTION", False)
    nn.MultiHeadAttention(8, 2)(x)
    assert not calls
    monkeypatch.setattr(attention_module, "FUSED_ATTENTION", True)
    nn.MultiHeadAttention(8, 2, dropout=0.5).eval()(x)  # no dropout in eval mode: fused
    assert len(calls) == 1


def test_one_node_where_the_reference_records_a_dozen(monkeypatch):
    def nodes(out):
        seen, stack = set(), [out._ctx]
        while stack:
            fn = stack.pop()
            if fn is not None and id(fn) not in seen:
                seen.add(id(fn))
                stack.extend(t._ctx for t in fn.inputs)
        return len(seen)

    x = ta.randn(2, 6, 8, requires_grad=True)
    module = nn.MultiHeadAttention(8, 2)
    fused = nodes(module(x, is_causal=True))
    monkeypatch.setattr(attention_module, "FUSED_ATTENTION", False)
    reference = nodes(module(x, is_causal=True))
    assert fused == 5  # the four projections and HeadsAttention
    assert reference >= fused + 10


@pytest.mark.parametrize("masked", [False, True])
def test_heads_attention_gradcheck_and_gradgradcheck(device, masked):
    rng = np.random.default_rng(3)
    q, k, v = (
        ta.tensor(rng.standard_normal(s), dtype="float64", device=device, requires_grad=True)
        for s in ((2, 3, 4), (2, 5, 4), (2, 5, 6))
    )
    allowed = [ta.tensor(np.tril(np.ones((3, 5), bool), k=1), device=device)] if masked else []

    def fn(q, k, v):
        return ops.HeadsAttention.apply(q, k, v, *allowed, heads=2, scale=0.7)

    assert ta.gradcheck(fn, [q, k, v])
    assert ta.gradgradcheck(fn, [q, k, v])


def test_a_query_with_no_allowed_key_gets_zeros_not_nan(device):
    rng = np.random.default_rng(4)
    q, k, v = (
        ta.tensor(rng.standard_normal(s), dtype="float32", device=device, requires_grad=True)
        for s in ((1, 2, 4), (1, 3, 4), (1, 3, 4))
    )
    allowed = ta.tensor(np.array([[True, False, True], [False, False, False]]), device=device)
    out = ops.HeadsAttention.apply(q, k, v, allowed, heads=2, scale=0.5)
    out.sum().backward()
    assert np.array_equal(out.detach().numpy()[0, 1], np.zeros(4, np.float32))
    for t in (q, k, v):
        assert np.isfinite(t.grad.numpy()).all()
    assert np.array_equal(q.grad.numpy()[0, 1], np.zeros(4, np.float32))


def test_an_input_written_in_place_after_the_forward_is_refused():
    q, k, v = (ta.randn(1, 3, 4, requires_grad=True) * 1.0 for _ in range(3))
    out = ops.HeadsAttention.apply(q, k, v, heads=2, scale=0.5)
    with ta.no_grad():
        k.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation|in place"):
        out.sum().backward()


def test_merged_heads_product_equals_permute_and_reshape(device):
    """The product written into the merged layout (out= on NumPy and CuPy) holds the values
    of the product, permuted and reshaped, and is a plain row-major array."""
    rng = np.random.default_rng(5)
    a, b = (
        ta.tensor(rng.standard_normal(s), dtype="float32", device=device).array
        for s in ((2, 3, 4, 5), (2, 3, 5, 6))
    )
    got = kernels.merged_heads_product(a, b)
    want = ta.tensor(a, device=device) @ ta.tensor(b, device=device)
    want = want.permute(0, 2, 1, 3).reshape(2, 4, 18)
    assert got.shape == (2, 4, 18)
    np.testing.assert_array_equal(ta.tensor(got, device=device).numpy(), want.numpy())
    if device == "cpu":
        assert got.flags.c_contiguous


def test_a_compiled_step_with_the_fused_path_equals_eager_bit_for_bit(device):
    def make():
        ta.manual_seed(0)
        block = nn.TransformerBlock(8, 2, 16).to(device)
        return block, ta.optim.Adam(block.parameters(), lr=1e-2)

    data = [
        ta.tensor(
            np.random.default_rng(s).standard_normal((2, 5, 8)), dtype="float32", device=device
        )
        for s in range(3)
    ]
    results = []
    for compiled in (False, True):
        block, optimizer = make()

        def step(x, block=block, optimizer=optimizer):
            optimizer.zero_grad()
            loss = (block(x, is_causal=True) ** 2).mean()
            loss.backward()
            optimizer.step()
            return loss

        run = ta.compile(step) if compiled else step
        losses = [run(x).item() for x in data + data]
        results.append((losses, [p.detach().numpy() for p in block.parameters()]))
    assert results[0][0] == results[1][0]
    for eager, replayed in zip(results[0][1], results[1][1], strict=True):
        np.testing.assert_array_equal(eager, replayed)


@pytest.mark.parametrize(
    "shapes,heads",
    [
        (((2, 3, 4), (2, 5, 4), (2, 5, 6)), 3),  # 4 is not a multiple of 3
        (((2, 3, 4), (1, 5, 4), (2, 5, 6)), 2),  # batches differ
        (((2, 3, 4), (2, 5, 6), (2, 5, 6)), 2),  # q and k of different widths
        (((2, 3, 4), (2, 5, 4), (2, 4, 6)), 2),  # k and v of different lengths
        (((3, 4), (5, 4), (5, 6)), 2),  # not (B, T, C)
    ],
)
def test_heads_attention_names_inputs_that_do_not_fit(device, shapes, heads):
    q, k, v = (ta.zeros(*s, device=device) for s in shapes)
    with pytest.raises(TinyattnError, match=r"HeadsAttention: q \("):
        ops.HeadsAttention.apply(q, k, v, heads=heads, scale=1.0)
