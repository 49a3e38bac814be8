"""The lessons of the attention articles tinyattn started from, each as an executable claim on
every backend:

1. projecting to the full width and then splitting into heads equals H separate per-head
   projections whose weights are the row blocks of the big weight;
2. attention is permutation-equivariant: permuting keys and values together changes nothing,
   permuting queries permutes the output; positional encodings are what breaks the symmetry;
3. the 1/sqrt(d) scale keeps the score variance near 1 for unit-variance inputs (unscaled scores
   have variance d and saturate the softmax);
4. the single-query walk-through on "Your journey starts with one step" (weights from
   ``torch.manual_seed(123)`` and three ``torch.randn(3, 2)``, as docs/attention.md shows) gives
   its attention weights and context vector, and a softmax over one score is always 1.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn

RNG = np.random.default_rng(31)


def tensor(device, values):
    return ta.tensor(values, dtype="float64", device=device)


def attention_module(device, d_model=8, heads=4):
    ta.manual_seed(11)
    return nn.MultiHeadAttention(d_model, heads).to("float64").to(device)


# ----------------------------------------------------------------------------- 1. heads
def test_projection_then_split_equals_per_head_projections(device):
    attn = attention_module(device)
    x = tensor(device, RNG.standard_normal((2, 5, 8)))
    out, weights = attn(x, need_weights=True)
    width = attn.head_dim
    head_outputs = []
    for h in range(attn.num_heads):
        rows = slice(h * width, (h + 1) * width)  # head h owns these rows of each weight

        def head_projection(proj, rows=rows):
            small = nn.Linear(8, width).to("float64").to(device)
            small.load_state_dict({"weight": proj.weight[rows], "bias": proj.bias[rows]})
            return small

        q = head_projection(attn.q_proj)(x)  # (B, T, D): one small projection per head
        k = head_projection(attn.k_proj)(x)
        v = head_projection(attn.v_proj)(x)
        head_out, head_weights = F.scaled_dot_product_attention(q, k, v, return_weights=True)
        np.testing.assert_allclose(
            head_weights.detach().numpy(), weights.detach().numpy()[:, h], atol=1e-14
        )
        head_outputs.append(head_out)
    concatenated = ta.concat(head_outputs, axis=-1)  # H x (B, T, D) -> (B, T, C)
    np.testing.assert_allclose(
        attn.out_proj(concatenated).detach().numpy(), out.detach().numpy(), atol=1e-14
    )


# ------------------------------------------------------------------------ 2. permutations
def test_permuting_keys_and_values_together_changes_nothing(device):
    attn = attention_module(device)
    query = tensor(device, RNG.standard_normal((1, 3, 8)))
    memory = RNG.standard_normal((1, 6, 8))
    order = RNG.permutation(6)
    out = attn(query, tensor(device, memory)).detach().numpy()
    shuffled = attn(query, tensor(device, memory[:, order])).detach().numpy()
    np.testing.assert_allclose(shuffled, out, atol=1e-14)


def test_permuting_queries_permutes_the_output(device):
    attn = attention_module(device)
    x = RNG.standard_normal((1, 6, 8))
    order = RNG.permutation(6)
    out = attn(tensor(device, x)).detach().numpy()
    shuffled = attn(tensor(device, x[:, order])).detach().numpy()
    np.testing.assert_allclose(shuffled, out[:, order], atol=1e-14)  # a set, not a sequence


def test_positional_encodings_break_the_symmetry(device):
    attn = attention_module(device)
    positions = nn.SinusoidalPositionalEncoding(16, 8).to(device)
    x = RNG.standard_normal((1, 6, 8))
    order = np.array([1, 0, 2, 3, 4, 5])  # swap the first two words
    out = attn(positions(tensor(device, x))).detach().numpy()
    shuffled = attn(positions(tensor(device, x[:, order]))).detach().numpy()
    assert not np.allclose(shuffled, out[:, order], atol=1e-6)


# ---------------------------------------------------------------------------- 3. scaling
@pytest.mark.parametrize("d", [16, 256])
def test_inverse_sqrt_d_keeps_score_variance_near_one(device, d):
    q = tensor(device, RNG.standard_normal((4000, d)))
    k = tensor(device, RNG.standard_normal((4000, d)))
    dots = (q * k).sum(axis=-1)  # 4000 independent scores q . k
    raw_variance = dots.var().item()
    scaled_variance = (dots * (1.0 / math.sqrt(d))).var().item()
    assert 0.85 * d < raw_variance < 1.15 * d
    assert 0.85 < scaled_variance < 1.15


def test_unscaled_scores_saturate_the_softmax(device):
    d = 512
    q = tensor(device, RNG.standard_normal((200, 1, d)))
    k = tensor(device, RNG.standard_normal((200, 10, d)))
    unscaled = F.scaled_dot_product_attention(q, k, k, scale=1.0, return_weights=True)[1]
    scaled = F.scaled_dot_product_attention(q, k, k, return_weights=True)[1]
    assert np.median(unscaled.numpy().max(-1)) > 0.99  # nearly one-hot: gradients vanish
    assert np.median(scaled.numpy().max(-1)) < 0.6


# ------------------------------------------------------------------- 4. the walk-through
INPUTS = [
    [0.43, 0.15, 0.89],  # Your
    [0.55, 0.87, 0.66],  # journey
    [0.57, 0.85, 0.64],  # starts
    [0.22, 0.58, 0.33],  # with
    [0.77, 0.25, 0.10],  # one
    [0.05, 0.80, 0.55],  # step
]
W_QUERY = [[-0.1115, 0.1204], [-0.3696, -0.2404], [-1.1969, 0.2093]]
W_KEY = [[-0.9724, -0.7550], [0.3239, -0.1085], [0.2103, -0.3908]]
W_VALUE = [[0.2350, 0.6653], [0.3528, 0.9728], [-0.0386, -0.8861]]


def test_single_query_walk_through(device):
    x = tensor(device, INPUTS)
    query = x[1] @ tensor(device, W_QUERY)  # "journey": (3,) @ (3, 2) -> (2,)
    keys = x @ tensor(device, W_KEY)  # (6, 2)
    values = x @ tensor(device, W_VALUE)  # (6, 2)
    scores = keys @ query  # (6,): one score per word
    weights = F.softmax(scores * (1.0 / math.sqrt(2)), dim=-1)
    np.testing.assert_allclose(
        weights.numpy(), [0.1704, 0.1611, 0.1652, 0.1412, 0.2505, 0.1117], atol=1e-4
    )
    np.testing.assert_allclose((weights @ values).numpy(), [0.2854, 0.4081], atol=1e-4)
    own_score = scores[1:2]  # the article's shortcut: a softmax over this one score...
    assert F.softmax(own_score * (1.0 / math.sqrt(2)), dim=-1).item() == 1.0  # ...is always 1
    out = F.scaled_dot_product_attention(query.reshape(1, 2), keys, values)
    np.testing.assert_allclose(out.numpy()[0], (weights @ values).numpy(), atol=1e-15)
