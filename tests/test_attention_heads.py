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
    """One entry per HeadsAttention forward: its `packed` flag."""
    calls = []
    forward = ops.HeadsAttention.forward
    monkeypatch.setattr(
        ops.HeadsAttention,
        "forward",
        lambda self, *a, **k: calls.append(k.get("packed", False)) or forward(self, *a, **k),
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
    assert fused == 5  # stacked weights, stacked biases, their product, HeadsAttention, out_proj
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


# ------------------------------------------------------------- self-attention's packed projection
def _self_attention(monkeypatch, stacked, device, dtype, **kwargs):
    """Output, input gradient and parameter gradients of self-attention, with the q, k, v
    projections stacked into one product or called one by one."""
    if not stacked:
        monkeypatch.setattr(attention_module, "_stackable", lambda layers: False)
    ta.manual_seed(0)
    module = nn.MultiHeadAttention(8, 2).to(device).to(getattr(ta, dtype))
    x = ta.tensor(np.random.default_rng(1).standard_normal((3, 5, 8)), dtype=dtype, device=device)
    x.requires_grad_()
    out = module(x, **kwargs)
    seed = np.random.default_rng(2).standard_normal(out.shape)
    out.backward(ta.tensor(seed, dtype=dtype, device=device))
    monkeypatch.undo()
    return [out.detach().numpy(), x.grad.numpy()] + [p.grad.numpy() for p in module.parameters()]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", ["no mask", "causal", "mask (B, Tq, Tk)", "key padding"])
def test_self_attention_stacks_its_projections_into_one_product(monkeypatch, device, case, dtype):
    """query is key is value: one Linear node of the three weights stacked, and HeadsAttention
    on its [q | k | v] (packed=True). Output and every gradient equal the projections called
    one by one: dL/dx is one product where the other form adds three, so it agrees to
    rounding, as does everything else (each block of the stacked product is that projection's
    product, but no library promises the same bits for a different matrix shape)."""
    kwargs = {k: v for k, v in CASES[case].items() if k != "tk"}
    if "mask" in kwargs:
        kwargs["mask"] = np.tril(np.ones((3, 5, 5), bool), k=1)
    if "key_padding_mask" in kwargs:
        kwargs["key_padding_mask"] = np.array([[False] * 4 + [True]] * 3)
    calls = _count_fused(monkeypatch)
    stacked = _self_attention(monkeypatch, True, device, dtype, **kwargs)
    assert calls == [True], calls
    calls = _count_fused(monkeypatch)
    separate = _self_attention(monkeypatch, False, device, dtype, **kwargs)
    assert calls == [False], calls
    tol = 2e-6 if dtype == "float32" else 1e-13
    for k, (got, want) in enumerate(zip(stacked, separate, strict=True)):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"{case}: array {k}")


def test_the_projections_are_called_one_by_one_when_stacking_would_change_what_runs(monkeypatch):
    """A hook on a projection, a projection that is not a plain Linear, a bias on some of
    them only, mixed dtypes, and cross-attention: each projection is called as a module."""
    x = ta.randn(2, 4, 8)

    def packed_flags(module, *args):
        calls = _count_fused(monkeypatch)
        module(*args)
        monkeypatch.undo()
        return calls

    plain = nn.MultiHeadAttention(8, 2)
    assert packed_flags(plain, x) == [True]
    assert packed_flags(plain, x, ta.randn(2, 4, 8)) == [False]  # cross-attention

    hooked = nn.MultiHeadAttention(8, 2)
    seen = []
    hooked.k_proj.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    assert packed_flags(hooked, x) == [False] and seen == [(2, 4, 8)]

    class Scaled(nn.Linear):
        def forward(self, x):
            return super().forward(x) * 2.0

    custom = nn.MultiHeadAttention(8, 2)
    custom.v_proj = Scaled(8, 8)
    assert packed_flags(custom, x) == [False]

    partial = nn.MultiHeadAttention(8, 2)
    partial.q_proj.bias = None
    assert packed_flags(partial, x) == [False]

    mixed = nn.MultiHeadAttention(8, 2).to(ta.float64)
    mixed.q_proj.to(ta.float32)  # its own call reports the mismatch, as in PyTorch
    assert not attention_module._stackable((mixed.q_proj, mixed.k_proj, mixed.v_proj))
    assert attention_module._stackable((plain.q_proj, plain.k_proj, plain.v_proj))


def test_stacked_projection_gradients_are_each_parameters_own(monkeypatch):
    """The weights' gradients are blocks of one stacked gradient: each is writable, shaped as
    its parameter, and accumulates across backward calls without touching the others."""
    ta.manual_seed(0)
    module = nn.MultiHeadAttention(8, 2)
    x = ta.randn(2, 4, 8)
    module(x).sum().backward()
    first = {name: p.grad.numpy().copy() for name, p in module.named_parameters()}
    module(x).sum().backward()
    for name, p in module.named_parameters():
        assert p.grad.shape == p.shape
        np.testing.assert_allclose(p.grad.numpy(), 2 * first[name], rtol=1e-6, atol=1e-6)
    module.q_proj.weight.grad.zero_()
    assert not module.q_proj.weight.grad.numpy().any()
    np.testing.assert_allclose(module.k_proj.weight.grad.numpy(), 2 * first["k_proj.weight"])


@pytest.mark.parametrize("masked", [False, True])
def test_packed_heads_attention_gradcheck_and_gradgradcheck(device, masked):
    rng = np.random.default_rng(3)
    qkv = ta.tensor(
        rng.standard_normal((2, 4, 12)), dtype="float64", device=device, requires_grad=True
    )
    allowed = [ta.tensor(np.tril(np.ones((4, 4), bool)), device=device)] if masked else []

    def fn(qkv):
        return ops.HeadsAttention.apply(qkv, *allowed, heads=2, scale=0.7, packed=True)

    assert ta.gradcheck(fn, [qkv])
    assert ta.gradgradcheck(fn, [qkv])


def test_packed_heads_attention_equals_three_inputs_bit_for_bit(device):
    """The packed form reads q, k, v as the blocks of one array and writes [dQ | dK | dV]: the
    same calls on the same values as three inputs, so the same bits."""
    rng = np.random.default_rng(6)
    data = rng.standard_normal((2, 5, 12)).astype("float32")
    packed = ta.tensor(data, device=device, requires_grad=True)
    parts = [
        ta.tensor(data[..., 4 * i : 4 * (i + 1)], device=device, requires_grad=True)
        for i in range(3)
    ]
    seed = ta.tensor(rng.standard_normal((2, 5, 4)).astype("float32"), device=device)
    out_packed = ops.HeadsAttention.apply(packed, heads=2, scale=0.5, packed=True)
    out_parts = ops.HeadsAttention.apply(*parts, heads=2, scale=0.5)
    out_packed.backward(seed)
    out_parts.backward(seed)
    np.testing.assert_array_equal(out_packed.detach().numpy(), out_parts.detach().numpy())
    want = np.concatenate([p.grad.numpy() for p in parts], axis=-1)
    np.testing.assert_array_equal(packed.grad.numpy(), want)


def test_a_packed_input_must_split_in_three():
    with pytest.raises(TinyattnError, match=r"HeadsAttention: a packed projection"):
        ops.HeadsAttention.apply(ta.zeros(2, 3, 8), heads=2, scale=1.0, packed=True)


def test_a_frozen_projection_gets_no_gradient_in_the_stacked_product(monkeypatch):
    """requires_grad=False on one projection's weight: it gets no .grad, and the others get the
    gradients of the three separate calls."""

    def grads(stacked):
        if not stacked:
            monkeypatch.setattr(attention_module, "_stackable", lambda layers: False)
        ta.manual_seed(0)
        module = nn.MultiHeadAttention(8, 2)
        module.k_proj.weight.requires_grad_(False)
        x = ta.tensor(np.random.default_rng(7).standard_normal((2, 4, 8)), dtype="float32")
        module(x).square().sum().backward()
        monkeypatch.undo()
        return {name: p.grad for name, p in module.named_parameters()}

    stacked, separate = grads(True), grads(False)
    assert stacked["k_proj.weight"] is None and separate["k_proj.weight"] is None
    for name, grad in stacked.items():
        if grad is not None:
            np.testing.assert_allclose(
                grad.numpy(), separate[name].numpy(), rtol=2e-6, atol=2e-6, err_msg=name
            )
