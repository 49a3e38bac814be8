"""The block-wise (memory-efficient) attention path against the plain softmax(q k^T) v path.

Every comparison runs the same inputs and the same cotangent through both paths of
F.scaled_dot_product_attention, forced with ta.functional.BLOCKWISE_MIN_SCORES (0: block-wise,
inf: plain), on tiny inputs cut into several tiles by shrinking kernels.ATTENTION_BLOCK_KEYS and
kernels.ATTENTION_BLOCK_SCORES (and their GPU_ twins). Float64 agrees to ~1e-12 (only the
summation order differs), float32 to ~1e-5. Runs on every backend through the `device` fixture.
No test measures time.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import kernels, nn, ops

RNG = np.random.default_rng(2024)
TOLERANCE = {"float64": 1e-12, "float32": 2e-5}


def use_path(monkeypatch, path, block_q=2, block_k=3, batch=1):
    """Force the plain or the block-wise path, with tiles of block_q queries x block_k keys."""
    monkeypatch.setattr(
        ta.functional, "BLOCKWISE_MIN_SCORES", 0 if path == "blockwise" else math.inf
    )
    for prefix in ("", "GPU_"):  # the same tiny tiles on every device, CUDA included
        monkeypatch.setattr(kernels, f"{prefix}ATTENTION_BLOCK_KEYS", block_k)
        monkeypatch.setattr(kernels, f"{prefix}ATTENTION_BLOCK_SCORES", batch * block_q * block_k)


def run(monkeypatch, path, arrays, blocks, dtype, device, **kwargs):
    """Output and (dq, dk, dv) of one path for a fixed random cotangent, all as NumPy arrays."""
    batch = math.prod(np.broadcast_shapes(*(a.shape[:-2] for a in arrays)))
    use_path(monkeypatch, path, *blocks, batch=batch)
    q, k, v = (ta.tensor(a, dtype=dtype, device=device).requires_grad_() for a in arrays)
    out = attention(q, k, v, **kwargs)
    cotangent = np.random.default_rng(7).standard_normal(out.shape)
    (out * ta.tensor(cotangent, dtype=dtype, device=device)).sum().backward()
    return out.detach().numpy(), [t.grad.detach().numpy() for t in (q, k, v)]


def assert_paths_agree(monkeypatch, device, shapes, blocks=(2, 3), dtype="float64", **kwargs):
    """Both paths on standard normal inputs of `shapes` (or on the given arrays) agree."""
    arrays = [RNG.standard_normal(s) if isinstance(s, tuple) else s for s in shapes]
    out, grads = run(monkeypatch, "blockwise", arrays, blocks, dtype, device, **kwargs)
    expected_out, expected_grads = run(
        monkeypatch, "plain", arrays, blocks, dtype, device, **kwargs
    )
    tolerance = TOLERANCE[dtype]
    assert out.dtype == expected_out.dtype
    np.testing.assert_allclose(out, expected_out, rtol=tolerance, atol=tolerance)
    for name, grad, expected in zip("qkv", grads, expected_grads, strict=True):
        assert grad.shape == expected.shape, name
        assert np.isfinite(grad).all(), name
        np.testing.assert_allclose(grad, expected, rtol=tolerance, atol=tolerance, err_msg=name)
    return out, grads


def attention(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """F.scaled_dot_product_attention, or with a mask AND is_causal (PyTorch refuses the pair)
    the inner function nn.MultiHeadAttention calls, which ANDs them."""
    if attn_mask is None or not is_causal:
        return F.scaled_dot_product_attention(q, k, v, attn_mask, is_causal=is_causal, scale=scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return ta.functional._attention(q, k, v, attn_mask, 0.0, True, scale)


def bool_mask(device, array):
    return ta.tensor(np.asarray(array, dtype=bool), device=device)


# ------------------------------------------------------------------- forward and gradients
@pytest.mark.parametrize("blocks", [(1, 1), (2, 3), (4, 4), (3, 5), (8, 8), (16, 16)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_blockwise_matches_plain_for_block_sizes(monkeypatch, device, blocks, dtype):
    # T = 8: (4, 4) and (8, 8) divide it, (3, 5) does not, (16, 16) is one tile larger than T.
    assert_paths_agree(monkeypatch, device, [(2, 8, 4), (2, 8, 4), (2, 8, 3)], blocks, dtype)


@pytest.mark.parametrize("tq, tk", [(5, 11), (11, 5), (1, 7), (7, 1)])
def test_blockwise_matches_plain_when_query_and_key_lengths_differ(monkeypatch, device, tq, tk):
    assert_paths_agree(monkeypatch, device, [(2, tq, 3), (2, tk, 3), (2, tk, 2)], (2, 3))


@pytest.mark.parametrize(
    "q_shape, k_shape",
    [
        ((6, 4), (7, 4)),  # no batch axes
        ((3, 6, 4), (3, 7, 4)),  # one batch axis
        ((2, 3, 6, 4), (2, 3, 7, 4)),  # (B, H, T, D)
        ((2, 3, 6, 4), (7, 4)),  # keys and values shared by the batch: broadcast
        ((1, 3, 6, 4), (2, 1, 7, 4)),  # both sides broadcast
    ],
)
def test_blockwise_matches_plain_over_leading_batch_axes(monkeypatch, device, q_shape, k_shape):
    v_shape = (*k_shape[:-1], 5)
    assert_paths_agree(monkeypatch, device, [q_shape, k_shape, v_shape], (2, 3), is_causal=True)


def test_blockwise_scale(monkeypatch, device):
    assert_paths_agree(monkeypatch, device, [(2, 7, 4), (2, 9, 4), (2, 9, 4)], (3, 4), scale=0.37)


def test_mixed_float_dtypes_are_refused_on_both_paths(monkeypatch, device):
    """As PyTorch's: q, k and v of different float dtypes are an error, on either path."""
    arrays = [RNG.standard_normal((5, 3)) for _ in range(3)]
    for path in ("blockwise", "plain"):
        use_path(monkeypatch, path)
        q = ta.tensor(arrays[0], dtype="float32", device=device).requires_grad_()
        k, v = (ta.tensor(a, dtype="float64", device=device).requires_grad_() for a in arrays[1:])
        with pytest.raises(RuntimeError, match="must have the same dtype"):
            F.scaled_dot_product_attention(q, k, v)


# ------------------------------------------------------------------------------------ masks
@pytest.mark.parametrize(
    "mask_shape",
    [(9,), (1, 9), (6, 9), (6, 1), (2, 1, 6, 9), (1, 3, 6, 9), (2, 3, 6, 9), (3, 1, 1)],
)
@pytest.mark.parametrize("is_causal", [False, True])
def test_blockwise_matches_plain_with_broadcast_masks(monkeypatch, device, mask_shape, is_causal):
    mask = RNG.random(mask_shape) > 0.3
    shapes = [(2, 3, 6, 4), (2, 3, 9, 4), (2, 3, 9, 5)]
    assert_paths_agree(
        monkeypatch, device, shapes, (2, 4), attn_mask=bool_mask(device, mask), is_causal=is_causal
    )


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fully_masked_rows_are_zero_in_value_and_gradient(monkeypatch, device, dtype):
    mask = RNG.random((2, 7, 10)) > 0.5
    mask[0, 1] = False  # queries that may attend to nothing: in the first and in a later tile
    mask[1, 5] = False
    mask[:, 3, 4:] = False  # a query whose first tile has keys but later tiles have none
    out, (grad_q, _, _) = assert_paths_agree(
        monkeypatch,
        device,
        [(2, 7, 3), (2, 10, 3), (2, 10, 4)],
        (3, 4),
        dtype,
        attn_mask=bool_mask(device, mask),
    )
    for batch, row in ((0, 1), (1, 5)):
        np.testing.assert_array_equal(out[batch, row], 0.0)
        np.testing.assert_array_equal(grad_q[batch, row], 0.0)


def test_everything_masked_gives_zeros_and_huge_scores_stay_finite(monkeypatch, device):
    nothing = bool_mask(device, np.zeros((4, 6)))
    out, grads = assert_paths_agree(
        monkeypatch, device, [(4, 3), (6, 3), (6, 3)], (2, 2), attn_mask=nothing
    )
    np.testing.assert_array_equal(out, 0.0)
    for grad in grads:
        np.testing.assert_array_equal(grad, 0.0)
    # Scores of +-1e4 (the first tile's max far from a later tile's) must not overflow exp.
    use_path(monkeypatch, "blockwise", 2, 2)
    q = ta.tensor(RNG.standard_normal((4, 3)) * 100, dtype="float32", device=device)
    k = ta.tensor(RNG.standard_normal((6, 3)) * 100, dtype="float32", device=device)
    out = F.scaled_dot_product_attention(
        q, k, k, attn_mask=bool_mask(device, RNG.random((4, 6)) > 0.4)
    )
    assert np.isfinite(out.numpy()).all()


@pytest.mark.parametrize("size", [0.01, 1.0, 30.0])
def test_blockwise_matches_plain_when_the_row_max_keeps_growing(monkeypatch, device, size):
    """Keys that grow along the sequence put each tile's largest score far above the shift set
    by the tiles before it (the forward must then move the shift), or, for small sizes, within
    ops.attention.SHIFT_SLACK of it (the forward keeps the shift); masks and causal on top."""
    growth = np.linspace(0.5, 8.0, 12)[:, None] * size  # (Tk, 1)
    q = np.abs(RNG.standard_normal((2, 9, 4))) + 1.0  # positive: scores grow with the keys
    k = (np.abs(RNG.standard_normal((2, 12, 4))) + 1.0) * growth
    mask = RNG.random((9, 12)) > 0.3
    out, _ = assert_paths_agree(
        monkeypatch, device, [q, k, (2, 12, 3)], (3, 2), attn_mask=bool_mask(device, mask)
    )
    assert np.isfinite(out).all()
    assert_paths_agree(monkeypatch, device, [q, k, (2, 12, 3)], (4, 3), is_causal=True)


# ----------------------------------------------------------------------------------- causal
@pytest.mark.parametrize("tq, tk", [(9, 9), (5, 12), (12, 5)])
@pytest.mark.parametrize("blocks", [(1, 1), (2, 3), (4, 4), (5, 2)])
def test_blockwise_causal_matches_plain(monkeypatch, device, tq, tk, blocks):
    # The plain convention (top-left aligned): query i sees keys j <= i, so with Tq < Tk the
    # keys past Tq - 1 are seen by nobody and get gradient 0.
    _, (_, grad_k, grad_v) = assert_paths_agree(
        monkeypatch, device, [(2, tq, 3), (2, tk, 3), (2, tk, 2)], blocks, is_causal=True
    )
    if tk > tq:
        np.testing.assert_array_equal(grad_k[:, tq:], 0.0)
        np.testing.assert_array_equal(grad_v[:, tq:], 0.0)


def test_causal_skips_the_tiles_above_the_diagonal(monkeypatch, device):
    """With 4 x 4 tiles over T = 16, causal attention computes 10 of the 16 tiles."""
    use_path(monkeypatch, "blockwise", 4, 4)
    tiles = []
    original = ops.BlockwiseAttention._tile_mask

    def counting(self, xp, allowed, rows, cols, device):
        tiles.append((rows.start, cols.start))
        return original(self, xp, allowed, rows, cols, device)

    monkeypatch.setattr(ops.BlockwiseAttention, "_tile_mask", counting)
    q = ta.tensor(RNG.standard_normal((16, 2)), device=device)
    F.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert len(tiles) == 10
    assert all(key_start <= query_start for query_start, key_start in tiles)


@pytest.mark.parametrize("threads", [2, 3])
def test_threads_split_the_query_blocks_without_changing_results(monkeypatch, device, threads):
    """With ATTENTION_THREADS > 1 each thread takes every n-th query block and its own sums for
    dk and dv; 5 query blocks of 2 leave the threads unequal shares."""
    monkeypatch.setattr(kernels, "ATTENTION_THREADS", threads)
    mask = RNG.random((2, 1, 10, 7)) > 0.3
    mask[0, 0, 4] = False
    shapes = [(2, 3, 10, 4), (2, 3, 7, 4), (2, 3, 7, 5)]
    assert_paths_agree(monkeypatch, device, shapes, (2, 3), attn_mask=bool_mask(device, mask))
    assert_paths_agree(monkeypatch, device, shapes, (2, 3), "float32", is_causal=True)


# -------------------------------------------------------------------------- gradcheck, graph
@pytest.mark.parametrize("case", ["plain", "mask", "causal", "cross"])
def test_blockwise_gradcheck(monkeypatch, device, case):
    use_path(monkeypatch, "blockwise", 2, 2, batch=2)
    tk = 5 if case == "cross" else 4
    q, k, v = (
        ta.tensor(RNG.standard_normal(shape), dtype="float64", device=device).requires_grad_()
        for shape in ((2, 4, 3), (2, tk, 3), (2, tk, 2))
    )
    mask = RNG.random((4, tk)) > 0.4
    mask[2] = False
    kwargs = {"attn_mask": bool_mask(device, mask)} if case == "mask" else {}
    kwargs["is_causal"] = case == "causal"
    assert ta.gradcheck(lambda *a: F.scaled_dot_product_attention(*a, **kwargs), [q, k, v])


def test_double_backward_through_blockwise_raises_but_first_order_works(monkeypatch, device):
    use_path(monkeypatch, "blockwise")
    q, k, v = (
        ta.tensor(RNG.standard_normal((4, 3)), dtype="float64", device=device).requires_grad_()
        for _ in range(3)
    )
    out = F.scaled_dot_product_attention(q, k, v)
    grad_q, grad_k, grad_v = ta.grad(out.sum(), [q, k, v], create_graph=True)
    use_path(monkeypatch, "plain")
    expected = ta.grad(F.scaled_dot_product_attention(q, k, v).sum(), [q, k, v])
    for got, want in zip((grad_q, grad_k, grad_v), expected, strict=True):
        np.testing.assert_allclose(
            got.detach().numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12
        )
    with pytest.raises(NotImplementedError, match="double backward through block-wise"):
        (grad_q * grad_q).sum().backward()


def test_backward_twice_needs_retain_graph(monkeypatch, device):
    use_path(monkeypatch, "blockwise")
    q = ta.tensor(RNG.standard_normal((5, 3)), dtype="float64", device=device).requires_grad_()
    out = F.scaled_dot_product_attention(q, q, q).sum()
    out.backward(retain_graph=True)
    first = q.grad.numpy()
    out.backward()
    np.testing.assert_allclose(q.grad.numpy(), 2 * first, rtol=1e-14)
    with pytest.raises(RuntimeError, match="second time"):
        out.backward()


def test_blockwise_errors_are_the_plain_path_errors(monkeypatch, device):
    use_path(monkeypatch, "blockwise")
    q, k = ta.zeros(2, 3, 4, device=device), ta.zeros(2, 5, 4, device=device)
    with pytest.raises(
        ValueError, match=r"mask of shape \(3, 4\) cannot be broadcast .*\(2, 3, 5\)"
    ):
        F.scaled_dot_product_attention(
            q, k, k, attn_mask=ta.ones(3, 4, dtype="bool", device=device)
        )
    with pytest.raises(TypeError, match="attn_mask must be bool .* or floating"):
        F.scaled_dot_product_attention(
            q, k, k, attn_mask=ta.zeros(3, 5, dtype="int64", device=device)
        )


# --------------------------------------------------------------------------------- dispatch
def count_blockwise_calls(monkeypatch):
    calls = []
    original = ops.BlockwiseAttention.forward

    def spy(self, *arrays, **kwargs):
        calls.append(arrays[0].shape)
        return original(self, *arrays, **kwargs)

    monkeypatch.setattr(ops.BlockwiseAttention, "forward", spy)
    return calls


def test_auto_dispatch_uses_blockwise_from_the_threshold_on(monkeypatch, device):
    calls = count_blockwise_calls(monkeypatch)
    q = ta.tensor(RNG.standard_normal((2, 3, 8, 4)), device=device)  # 2 * 3 * 8 * 8 = 384 scores
    monkeypatch.setattr(ta.functional, "BLOCKWISE_MIN_SCORES", 385)
    F.scaled_dot_product_attention(q, q, q)
    assert calls == []
    monkeypatch.setattr(ta.functional, "BLOCKWISE_MIN_SCORES", 384)
    F.scaled_dot_product_attention(q, q, q)
    assert calls == [(2, 3, 8, 4)]
    # The weights and dropout need the score matrix: those calls keep the plain path.
    F.scaled_dot_product_attention(q, q, q, return_weights=True)
    F.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    assert len(calls) == 1


def test_default_threshold_and_tiles_bound_the_score_memory():
    assert ta.functional.BLOCKWISE_MIN_SCORES == 1 << 22
    # One multi-head attention layer (B = 1, H = 4) at T = 8192 takes the block-wise path, and
    # one tile's scores hold at most ATTENTION_BLOCK_SCORES numbers (4 MB in float64).
    batch, length = 4, 8192
    assert batch * length * length >= ta.functional.BLOCKWISE_MIN_SCORES
    block_q, block_k = kernels.block_sizes(batch, length, length)
    assert batch * block_q * block_k <= kernels.ATTENTION_BLOCK_SCORES <= 1 << 19
    assert kernels.block_sizes(1, 3, 2) == (3, 2)  # never larger than the sequences


def test_multi_head_attention_takes_the_blockwise_path_without_weights(device, monkeypatch):
    """nn.MultiHeadAttention must not force the plain path: only need_weights=True does."""
    calls = []
    original = ops.BlockwiseAttention.apply

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(ta.functional, "BLOCKWISE_MIN_SCORES", 1)
    monkeypatch.setattr(ops.BlockwiseAttention, "apply", spy)
    ta.manual_seed(0)
    layer = nn.MultiHeadAttention(8, 2).to("float64").to(device)
    x = ta.tensor(np.random.default_rng(0).standard_normal((1, 6, 8)), device=device)
    out = layer(x)
    assert calls and out.shape == (1, 6, 8)
    calls.clear()
    _, weights = layer(x, need_weights=True)
    assert not calls and weights.shape == (1, 2, 6, 6)


# ------------------------------------------------------------------------- host reads (GPU syncs)
def count_host_reads(monkeypatch) -> list:
    """Counts every way the forward could read a device value into Python: the backend's
    to_numpy, bool() in the attention module, and (strict only, where arrays refuse implicit
    conversion) a strict array's own __bool__, __float__ and __int__."""
    import array_api_strict

    from tinyattn.ops import attention

    reads = []

    def counted(function):
        def wrapper(*args, **kwargs):
            reads.append(function)
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(attention, "to_numpy", counted(attention.to_numpy))
    monkeypatch.setattr(attention, "bool", counted(bool), raising=False)
    array_type = type(array_api_strict.asarray(0.0))
    for name in ("__bool__", "__float__", "__int__"):
        monkeypatch.setattr(array_type, name, counted(getattr(array_type, name)))
    return reads


# (name, q, k scale, keyword arguments, host reads expected): many tiles each time; "one key
# block" has no later tile to class, "growing keys" moves the shift on slow tiles.
HOST_READS = [
    ("plain scores", 1.0, {}, 1),
    ("causal", 1.0, {"is_causal": True}, 1),
    ("growing keys", 30.0, {"is_causal": True}, 1),
    ("one key block", 1.0, {"block_k": 16}, 0),
]


@pytest.mark.parametrize(("size", "kwargs", "expected"), [row[1:] for row in HOST_READS],
                         ids=[row[0] for row in HOST_READS])  # fmt: skip
def test_blockwise_forward_reads_the_host_once_per_call(
    monkeypatch, device, size, kwargs, expected
):
    """Whether a tile may keep its shift is decided for all tiles at once: on a GPU one
    device-to-host sync per forward, not one per tile."""
    kwargs = dict(kwargs)
    blocks = (2, kwargs.pop("block_k", 3))
    growth = np.linspace(0.5, 8.0, 12)[:, None] * size  # keys growing along the sequence
    q = np.abs(RNG.standard_normal((2, 12, 4))) + 1.0
    k = (np.abs(RNG.standard_normal((2, 12, 4))) + 1.0) * growth
    v = RNG.standard_normal((2, 12, 3))
    reads = count_host_reads(monkeypatch)
    out, _ = run(monkeypatch, "blockwise", [q, k, v], blocks, "float64", device, **kwargs)
    assert len(reads) == expected
    reads.clear()
    expected_out, _ = run(monkeypatch, "plain", [q, k, v], blocks, "float64", device, **kwargs)
    np.testing.assert_allclose(out, expected_out, rtol=1e-12, atol=1e-12)
