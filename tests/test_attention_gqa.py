"""scaled_dot_product_attention's enable_gqa and its attn_mask with is_causal, PyTorch as the
oracle (values and gradients); the PyTorch half skips cleanly without torch."""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn.testing import check_grads, tensors

# (query, key, value shapes): key and value heads dividing the query's, 3-D and 4-D
GQA_SHAPES = [
    ((2, 4, 3, 8), (2, 2, 5, 8), (2, 2, 5, 6)),
    ((2, 4, 3, 8), (2, 1, 5, 8), (2, 4, 5, 6)),
    ((1, 6, 4, 4), (1, 3, 4, 4), (1, 2, 4, 4)),
    ((4, 3, 8), (2, 5, 8), (1, 5, 8)),
]


@pytest.mark.parametrize("shapes", GQA_SHAPES, ids=str)
@pytest.mark.parametrize("is_causal", [False, True])
def test_gqa_matches_pytorch(device, shapes, is_causal):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    values = [rng.normal(size=shape) for shape in shapes]
    ours = [ta.tensor(v, device=device, requires_grad=True) for v in values]
    theirs = [torch.tensor(v, requires_grad=True) for v in values]
    out = F.scaled_dot_product_attention(*ours, is_causal=is_causal, enable_gqa=True)
    expected = torch.nn.functional.scaled_dot_product_attention(
        *theirs, is_causal=is_causal, enable_gqa=True
    )
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    weights = rng.normal(size=out.shape)
    (out * ta.tensor(weights, device=device)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    for mine, reference in zip(ours, theirs):
        np.testing.assert_allclose(mine.grad.numpy(), reference.grad.numpy(), atol=1e-10)


def test_gqa_with_a_mask_matches_pytorch(device):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=s) for s in ((1, 4, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)))
    mask = rng.random((3, 5)) > 0.4
    out = F.scaled_dot_product_attention(
        *(ta.tensor(a, device=device) for a in (q, k, v)),
        attn_mask=ta.tensor(mask, device=device),
        enable_gqa=True,
    )
    expected = torch.nn.functional.scaled_dot_product_attention(
        *(torch.tensor(a) for a in (q, k, v)), attn_mask=torch.tensor(mask), enable_gqa=True
    )
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-10, atol=1e-12)


def test_gqa_gradient_passes_check_grads():
    check_grads(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        tensors((1, 4, 3, 2)),
        tensors((1, 2, 3, 2)),
        tensors((1, 1, 3, 2)),
        max_examples=10,
    )


def test_gqa_errors_are_pytorchs(device):
    torch = pytest.importorskip("torch")
    q, k = ta.ones(1, 4, 3, 8, device=device), ta.ones(1, 3, 5, 8, device=device)
    with pytest.raises(RuntimeError, match="must divide the number of heads in query"):
        F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
    with pytest.raises(RuntimeError):
        torch.nn.functional.scaled_dot_product_attention(
            torch.ones(1, 4, 3, 8), torch.ones(1, 3, 5, 8), torch.ones(1, 3, 5, 8), enable_gqa=True
        )
    with pytest.raises(IndexError, match="heads dim"):
        F.scaled_dot_product_attention(
            *(ta.ones(3, 8, device=device) for _ in range(3)), enable_gqa=True
        )
    with pytest.raises(ValueError):  # without enable_gqa, head counts must match
        F.scaled_dot_product_attention(
            q, ta.ones(1, 2, 5, 8, device=device), ta.ones(1, 2, 5, 8, device=device)
        )


def test_attn_mask_with_is_causal_is_an_error_as_pytorch_documents(device):
    """PyTorch 2.13 documents an error for both; its math path raises it (its fused CPU kernel
    combines the two where it runs, so the error is checked on float64 with Dv != D)."""
    torch = pytest.importorskip("torch")
    q = ta.ones(1, 1, 4, 8, device=device)
    with pytest.raises(RuntimeError, match="should not be set when is_causal=True"):
        F.scaled_dot_product_attention(
            q,
            q,
            ta.ones(1, 1, 4, 3, device=device),
            attn_mask=ta.ones(4, 4, device=device) > 0,
            is_causal=True,
        )
    t = torch.ones(1, 1, 4, 8, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="should not be set when is_causal=True"):
        torch.nn.functional.scaled_dot_product_attention(
            t,
            t,
            torch.ones(1, 1, 4, 3, dtype=torch.float64),
            attn_mask=torch.ones(4, 4, dtype=torch.bool),
            is_causal=True,
        )
