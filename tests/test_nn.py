"""tinyattn.nn: Module bookkeeping, state dicts, every layer's forward, gradcheck of every module's
parameters and inputs in float64, and the error messages. Runs on every backend (`device`).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn

RNG = np.random.default_rng(99)


def leaf(device, *shape):
    return ta.tensor(RNG.standard_normal(shape), dtype="float64", device=device).requires_grad_()


def model(cls, *args, device="cpu", **kwargs):
    ta.manual_seed(0)
    return cls(*args, **kwargs).to("float64").to(device)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(ta.ones(3))
        self.first = nn.Linear(3, 4)
        self.register_buffer("steps", ta.zeros(1))
        self.second = nn.Linear(4, 2, bias=False)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.second(self.drop(self.first(x * self.scale)).relu())


# ---------------------------------------------------------------------------------- Module
def test_parameters_are_in_attribute_order_and_listed_once():
    tiny = Tiny()
    names = [name for name, _ in tiny.named_parameters()]
    assert names == ["scale", "first.weight", "first.bias", "second.weight"]
    assert len(list(tiny.parameters())) == 4
    assert [type(m).__name__ for m in tiny.modules()] == ["Tiny", "Linear", "Linear", "Dropout"]
    assert [name for name, _ in tiny.named_children()] == ["first", "second", "drop"]
    tiny.tied = tiny.first  # the same module twice: its parameters still appear once
    assert len(list(tiny.parameters())) == 4
    assert "tied.weight" in tiny.state_dict()  # but the state dict has every name, as in PyTorch


def test_operations_on_parameters_give_plain_tensors(device):
    linear = nn.Linear(2, 3).to(device)
    assert isinstance(linear.weight, nn.Parameter) and linear.weight.requires_grad
    derived = linear.weight * 2.0
    assert type(derived) is ta.Tensor
    (ta.ones(1, 3, device=device) * linear(ta.ones(1, 2, device=device))).sum().backward()
    assert type(linear.weight.grad) is ta.Tensor and type(linear.bias.grad) is ta.Tensor
    assert type(linear.bias.grad.array) is not ta.Tensor  # an array, not a wrapped Tensor
    assert "Parameter containing" in repr(linear.bias)


def test_train_eval_zero_grad_and_dtype_move(device):
    tiny = Tiny().to(device)
    assert tiny.eval() is tiny and not tiny.drop.training
    tiny.train()
    assert tiny.drop.training
    tiny(ta.ones(2, 3, device=device)).sum().backward()
    assert tiny.first.weight.grad is not None
    tiny.zero_grad()
    assert all(p.grad is None for p in tiny.parameters())
    weight = tiny.first.weight
    tiny.double()
    assert tiny.first.weight is weight  # identity kept: optimizers stay valid
    assert all(ta.backend.dtype_name(p.dtype) == "float64" for p in tiny.parameters())
    assert ta.backend.dtype_name(tiny.steps.dtype) == "float64"


def test_to_device_moves_parameters_and_buffers(device):
    tiny = Tiny().to(device)
    assert {p.device for p in tiny.parameters()} == {ta.zeros(1, device=device).device}
    assert tiny.steps.device == tiny.scale.device
    assert tiny.eval()(ta.ones(2, 3, device=device)).shape == (2, 2)


def test_assigning_a_tensor_to_a_parameter_slot_is_an_error():
    linear = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="cannot assign Tensor to parameter 'weight'"):
        linear.weight = ta.zeros(2, 2)
    linear.bias = None
    assert [name for name, _ in linear.named_parameters()] == ["weight"]


def test_state_dict_round_trip(device):
    ta.manual_seed(1)
    source = Tiny().to(device)
    ta.manual_seed(2)
    target = Tiny().to(device)
    state = source.state_dict()
    assert list(state) == [
        "scale",
        "steps",
        "first.weight",
        "first.bias",
        "second.weight",
    ]  # PyTorch order
    target.load_state_dict(state)
    for (name, a), (_, b) in zip(
        source.state_dict().items(), target.state_dict().items(), strict=True
    ):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


def test_load_state_dict_names_bad_keys_and_changes_nothing(device):
    tiny = Tiny().to(device)
    before = {k: v.numpy() for k, v in tiny.state_dict().items()}
    state = {k: v * 0.0 for k, v in tiny.state_dict().items()}
    del state["first.bias"]
    state["extra.weight"] = ta.zeros(1)
    state["second.weight"] = ta.zeros(4, 2)
    with pytest.raises(RuntimeError) as info:
        tiny.load_state_dict(state)
    message = str(info.value)
    assert "unexpected keys: 'extra.weight'" in message
    assert "missing keys: 'first.bias'" in message
    assert "'second.weight': shape (4, 2) in the checkpoint, (2, 4) in the model" in message
    for key, value in tiny.state_dict().items():  # all or nothing: even good keys untouched
        np.testing.assert_array_equal(value.numpy(), before[key])
    state["second.weight"] = ta.zeros(2, 4)
    result = tiny.load_state_dict(state, strict=False)
    assert result.missing_keys == ["first.bias"] and result.unexpected_keys == ["extra.weight"]
    np.testing.assert_array_equal(tiny.first.weight.detach().numpy(), 0.0)


# ---------------------------------------------------------------------------------- layers
def test_linear_layout_and_init():
    ta.manual_seed(0)
    linear = nn.Linear(16, 3)
    assert linear.weight.shape == (3, 16) and linear.bias.shape == (3,)
    bound = 1 / math.sqrt(16)
    assert np.abs(linear.weight.detach().numpy()).max() <= bound
    assert np.abs(linear.weight.detach().numpy()).max() > 0.8 * bound  # uses the whole range
    ta.manual_seed(0)
    np.testing.assert_array_equal(
        nn.Linear(16, 3).weight.detach().numpy(), linear.weight.detach().numpy()
    )
    with pytest.raises(ValueError, match="Linear: in_features must be a positive int, got 0"):
        nn.Linear(0, 3)
    assert "in_features=16, out_features=3, bias=True" in repr(linear)


def test_same_seed_gives_same_weights_on_every_backend(device):
    ta.manual_seed(5)
    here = nn.MultiHeadAttention(4, 2).to(device)
    ta.manual_seed(5)
    host = nn.MultiHeadAttention(4, 2)
    for (name, a), (_, b) in zip(here.named_parameters(), host.named_parameters(), strict=True):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy(), err_msg=name)


def test_linear_embedding_layernorm_gradcheck(device):
    linear = model(nn.Linear, 3, 2, device=device)
    assert ta.gradcheck(linear, [leaf(device, 2, 3)], params=linear)
    assert ta.gradgradcheck(lambda x: linear(x) ** 2.0, [leaf(device, 2, 3)], params=linear)
    embedding = model(nn.Embedding, 5, 3, device=device)
    indices = ta.tensor([[0, 4, 4], [2, 1, 0]], device=device)
    assert embedding(indices).shape == (2, 3, 3)
    assert ta.gradcheck(embedding, [indices], params=embedding)
    norm = model(nn.LayerNorm, 4, device=device)
    with ta.no_grad():
        norm.weight.array = leaf(device, 4).array  # away from ones/zeros, to test the real rule
        norm.bias.array = leaf(device, 4).array
    assert ta.gradcheck(norm, [leaf(device, 2, 3, 4)], params=norm)


def test_dropout_module_follows_training_mode(device):
    drop = nn.Dropout(0.5)
    x = ta.ones(100, device=device)
    assert (drop(x).numpy() == 0).any()
    np.testing.assert_array_equal(drop.eval()(x).numpy(), 1.0)
    with pytest.raises(ValueError, match="Dropout: probability p must be in"):
        nn.Dropout(-0.1)


# ----------------------------------------------------------------------- MultiHeadAttention
def mha_reference(attn, query, key, value, allowed=None):
    """MultiHeadAttention in NumPy, head by head, from the module's weights."""
    w = {name: p.detach().numpy() for name, p in attn.named_parameters()}
    heads, width = attn.num_heads, attn.head_dim
    q = query @ w["q_proj.weight"].T + w["q_proj.bias"]
    k = key @ w["k_proj.weight"].T + w["k_proj.bias"]
    v = value @ w["v_proj.weight"].T + w["v_proj.bias"]
    outs = []
    for h in range(heads):
        cols = slice(h * width, (h + 1) * width)
        scores = q[..., cols] @ np.swapaxes(k[..., cols], -1, -2) / math.sqrt(width)
        if allowed is not None:
            scores = np.where(allowed, scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        outs.append((weights / weights.sum(-1, keepdims=True)) @ v[..., cols])
    return np.concatenate(outs, -1) @ w["out_proj.weight"].T + w["out_proj.bias"]


def test_mha_forward_matches_per_head_reference(device):
    attn = model(nn.MultiHeadAttention, 6, 3, device=device)
    query, memory = leaf(device, 2, 4, 6), leaf(device, 2, 5, 6)
    out, weights = attn(query, need_weights=True, is_causal=True)
    assert out.shape == (2, 4, 6) and weights.shape == (2, 3, 4, 4)
    causal = np.tril(np.ones((4, 4), bool))
    expected = mha_reference(
        attn, query.detach().numpy(), query.detach().numpy(), query.detach().numpy(), causal
    )
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-12, atol=1e-12)
    cross = attn(query, memory).detach().numpy()  # value defaults to key
    np.testing.assert_allclose(
        cross,
        mha_reference(
            attn, query.detach().numpy(), memory.detach().numpy(), memory.detach().numpy()
        ),
        atol=1e-12,
    )


def test_mha_unbatched_and_mask_ranks(device):
    attn = model(nn.MultiHeadAttention, 4, 2, device=device)
    x = leaf(device, 3, 4)
    out, weights = attn(x, need_weights=True)
    assert out.shape == (3, 4) and weights.shape == (2, 3, 3)
    batched = attn(x.expand_dims(0)).detach().numpy()[0]
    np.testing.assert_allclose(out.detach().numpy(), batched, atol=1e-14)
    xb = leaf(device, 2, 3, 4)
    per_batch = np.ones((2, 3, 3), bool)
    per_batch[1, :, 2] = False  # batch element 1 may not look at key 2
    _, weights = attn(xb, mask=ta.tensor(per_batch, device=device), need_weights=True)
    np.testing.assert_array_equal(weights.detach().numpy()[1, :, :, 2], 0.0)
    assert (weights.detach().numpy()[0, :, :, 2] > 0).all()
    causal = np.tril(np.ones((3, 3), bool))  # a plain NumPy mask is accepted too
    np.testing.assert_allclose(
        attn(xb, mask=causal).detach().numpy(),
        attn(xb, is_causal=True).detach().numpy(),
        atol=1e-15,
    )


@pytest.mark.parametrize("case", ["self", "mask", "causal", "cross", "unbatched"])
def test_mha_gradcheck_parameters_and_inputs(device, case):
    attn = model(nn.MultiHeadAttention, 4, 2, device=device)
    query = leaf(device, 3, 4) if case == "unbatched" else leaf(device, 2, 3, 4)
    memory = leaf(device, 2, 5, 4)
    mask = ta.tensor([[True, False, True], [True, True, False], [False, True, True]], device=device)
    calls = {
        "self": lambda q: attn(q),
        "mask": lambda q: attn(q, mask=mask),
        "causal": lambda q: attn(q, is_causal=True),
        "cross": lambda q, m: attn(q, m),
        "unbatched": lambda q: attn(q, is_causal=True),
    }
    inputs = [query, memory] if case == "cross" else [query]
    assert ta.gradcheck(calls[case], inputs, params=attn)


def test_mha_dropout_only_in_training(device):
    attn = model(nn.MultiHeadAttention, 4, 2, dropout=0.5, device=device)
    x = leaf(device, 2, 3, 4)
    ta.manual_seed(0)
    _, weights = attn(x, need_weights=True)
    assert (weights.detach().numpy() == 0).any()
    attn.eval()
    np.testing.assert_allclose(attn(x, need_weights=True)[1].detach().numpy().sum(-1), 1.0)


def test_mha_errors(device):
    with pytest.raises(ValueError, match="d_model=10 must be a positive multiple of num_heads=3"):
        nn.MultiHeadAttention(10, 3)
    attn = nn.MultiHeadAttention(8, 2).to(device)
    with pytest.raises(
        ValueError, match=r"query of shape \(2, 3, 6\) has width 6, but d_model is 8"
    ):
        attn(ta.zeros(2, 3, 6, device=device))
    with pytest.raises(ValueError, match=r"key of shape \(2, 5, 4\) has width 4"):
        attn(ta.zeros(2, 3, 8, device=device), ta.zeros(2, 5, 4, device=device))
    with pytest.raises(
        ValueError, match=r"key of shape \(2, 5, 8\) and value of shape \(2, 4, 8\)"
    ):
        attn(
            ta.zeros(2, 3, 8, device=device),
            ta.zeros(2, 5, 8, device=device),
            ta.zeros(2, 4, 8, device=device),
        )
    with pytest.raises(ValueError, match="different batch sizes"):
        attn(ta.zeros(2, 3, 8, device=device), ta.zeros(3, 5, 8, device=device))
    with pytest.raises(
        ValueError, match=r"mask of shape \(4, 4\) cannot be broadcast .*\(2, 2, 3, 3\)"
    ):
        attn(ta.zeros(2, 3, 8, device=device), mask=ta.ones(4, 4, dtype="bool", device=device))


# -------------------------------------------------------------- positions and Transformer block
def test_sinusoidal_encoding_values_and_shapes(device):
    encoding = nn.SinusoidalPositionalEncoding(10, 5).to(device)
    table = encoding.table.numpy()
    position, i = 3, 1
    np.testing.assert_allclose(
        table[position, 2 * i], math.sin(position / 10000 ** (2 * i / 5)), rtol=1e-6
    )
    np.testing.assert_allclose(
        table[position, 2 * i + 1], math.cos(position / 10000 ** (2 * i / 5)), rtol=1e-6
    )
    x = leaf(device, 2, 4, 5)
    np.testing.assert_allclose(
        encoding(x).detach().numpy() - x.detach().numpy(),
        np.broadcast_to(table[:4], (2, 4, 5)),
        rtol=1e-6,
    )
    assert encoding.state_dict() == {}  # the table is recomputed, not saved
    assert ta.gradcheck(encoding, [x])
    with pytest.raises(ValueError, match="sequence length 11 exceeds max_len=10"):
        encoding(ta.zeros(11, 5, device=device))


def test_learned_positional_embedding_gradcheck(device):
    positions = model(nn.LearnedPositionalEmbedding, 6, 4, device=device)
    x = leaf(device, 2, 3, 4)
    np.testing.assert_allclose(
        positions(x).detach().numpy() - x.detach().numpy(),
        np.broadcast_to(positions.weight.detach().numpy()[:3], x.shape),
        atol=1e-15,
    )
    assert ta.gradcheck(positions, [x], params=positions)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_block(device, norm_first):
    block = model(nn.TransformerBlock, 4, 2, 4, norm_first=norm_first, device=device)
    assert [name for name, _ in block.named_children()] == [
        "attn", "norm1", "linear1", "linear2", "norm2", "dropout",
    ]  # fmt: skip
    x = leaf(device, 1, 3, 4)
    out = block(x, is_causal=True)
    assert out.shape == (1, 3, 4)
    if not norm_first:  # post-LN: the output is layer-normalised
        np.testing.assert_allclose(out.detach().numpy().mean(-1), 0.0, atol=1e-12)
    assert ta.gradcheck(lambda t: block(t, is_causal=True), [x], params=block)


def test_transformer_block_is_causal(device):
    block = model(nn.TransformerBlock, 4, 2, 8, device=device)
    x = leaf(device, 1, 5, 4)
    changed = ta.tensor(
        x.detach().numpy() * np.array([1, 1, 1, 1, 3.0])[None, :, None], device=device
    )
    before, after = (
        block(x, is_causal=True).detach().numpy(),
        block(changed, is_causal=True).detach().numpy(),
    )
    np.testing.assert_allclose(
        before[:, :4], after[:, :4], atol=1e-14
    )  # the past ignores the future
    assert not np.allclose(before[:, 4], after[:, 4])


def test_sequential_and_module_list(device):
    ta.manual_seed(0)
    stack = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)).to(device)
    assert [name for name, _ in stack.named_parameters()] == [
        "0.weight",
        "0.bias",
        "2.weight",
        "2.bias",
    ]
    x = ta.ones(4, 2, device=device)
    np.testing.assert_allclose(
        stack(x).detach().numpy(), stack[2](F.relu(stack[0](x))).detach().numpy()
    )
    assert len(nn.ModuleList([nn.GELU()])) == 1


def test_multi_head_attention_checks_each_argument_once(monkeypatch):
    """MultiHeadAttention.forward checks its inputs and mask itself, then calls the trusting
    inner attention: scaled_dot_product_attention's checks do not run again on the way, and
    the query's float check runs once."""
    import tinyattn.functional as core
    from tinyattn import backend

    entry_checks, float_checks = [], []
    check_attention, check_floating = core._check_attention, backend.check_floating
    monkeypatch.setattr(
        core, "_check_attention", lambda *a: entry_checks.append(1) or check_attention(*a)
    )
    monkeypatch.setattr(
        backend, "check_floating", lambda op, a: float_checks.append(a) or check_floating(op, a)
    )
    ta.manual_seed(0)
    attention = nn.MultiHeadAttention(8, 2)
    query = ta.randn(2, 3, 8)
    mask = ta.tensor(np.tril(np.ones((3, 3), bool)))
    attention(query, mask=mask, is_causal=True, key_padding_mask=ta.zeros(2, 3, dtype="bool"))
    assert entry_checks == []
    assert sum(a is query.array for a in float_checks) == 1
    F.scaled_dot_product_attention(query, query, query, attn_mask=mask)
    assert entry_checks == [1]
