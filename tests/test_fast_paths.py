"""The array-level fast paths against the plain array API call they replace, on every backend:
each kernel of `tinyattn.kernels` (sums through BLAS and their cached ones, the short-axis row
max over a transposed copy, the softmax shift, the column of ones, ReLU's zeros operand, the
cached scalar operands, the tiles and the thread map), the in-place bias and normalisation of
the fused ops, the GPU tile sizes of block-wise attention, and the opt-in allocator setting.
Values must agree to rounding; non-finite values and empty arrays must come out exactly as the
plain call gives them."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import autograd, backend, kernels, ops


def _array(host, device):
    """A raw array of the device's namespace (what Function.forward receives)."""
    return ta.tensor(host, dtype=str(host.dtype), device=device).array


SUM_CASES = [
    ((64, 4, 16, 16), (3,)),  # attention scores over keys: trailing
    ((6, 5, 4), (1, 2)),  # two trailing axes
    ((6, 5, 4), (0,)),  # leading: a bias gradient
    ((6, 5, 4), (0, 1)),  # two leading axes
    ((6, 5, 4), (0, 1, 2)),  # everything, to a 0-d array
    ((6, 5, 4), (1,)),  # a middle axis: the plain xp.sum
    ((6, 5, 4), (0, 2)),  # neither leading nor trailing: the plain xp.sum
    ((7,), (0,)),
    ((0, 3), (1,)),  # empty
    ((3, 0), (1,)),  # empty reduced axis: sums are 0
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axes", SUM_CASES, ids=[f"{s}-{a}" for s, a in SUM_CASES])
def test_sum_array_matches_plain_sum(device, shape, axes, keepdims, dtype):
    host = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    x = _array(host, device)
    got = kernels.sum_array(x, axes, keepdims)
    xp = backend.namespace(x)
    assert got.dtype == x.dtype and backend.device_of(got) == backend.device_of(x)
    want = np.sum(host, axis=axes, keepdims=keepdims)
    assert tuple(got.shape) == want.shape
    tolerance = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(backend.to_numpy(got), want, rtol=tolerance, atol=tolerance)
    assert xp is backend.namespace(got)


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool", "float16"])
def test_sum_array_leaves_other_dtypes_to_the_plain_sum(device, dtype):
    if device == "strict" and dtype in ("bool", "float16"):
        pytest.skip(f"the array API has no {dtype} sum")
    host = (np.arange(24).reshape(2, 3, 4) % 3).astype(dtype)
    x = _array(host, device)
    got = kernels.sum_array(x, (2,), keepdims=False)
    xp = backend.namespace(x)
    want = xp.sum(x, axis=(2,))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(backend.to_numpy(got), backend.to_numpy(want))


def test_sum_array_keeps_non_finite_rows(device):
    host = np.array(
        [[1.0, np.inf, 2.0], [-np.inf, -np.inf, -np.inf], [np.inf, -np.inf, 0.0], [np.nan, 1, 2]],
        dtype=np.float32,
    )
    with np.errstate(invalid="ignore"):  # inf + -inf: NumPy warns in either path
        got = backend.to_numpy(kernels.sum_array(_array(host, device), (1,)))
        want = host.sum(axis=1)
    np.testing.assert_array_equal(got, want)  # inf, -inf, nan, nan


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_full_reductions_hold_a_0d_array_not_a_scalar(device, reduction):
    """A full sum or mean goes through a matrix product and a reshape to (); NumPy would turn a
    0-d array divided by a count into a NumPy scalar, which is not an array of the namespace."""
    x = ta.tensor(np.arange(12.0).reshape(3, 4), dtype="float32", device=device)
    result = getattr(x, reduction)()
    assert type(result.array) is type(x.array) and result.shape == ()
    assert result.item() == pytest.approx(66.0 if reduction == "sum" else 5.5)


@pytest.mark.parametrize("width", [1, 2, 3, 5, 16, 17, 33, 64, 65, 200])
def test_row_max_over_a_transposed_copy_matches_max(device, width):
    rng = np.random.default_rng(width)
    host = rng.standard_normal((3, 4, width)).astype(np.float32)
    host[0, 0] = -np.inf  # a fully masked row
    host[1, 1, width // 2] = np.inf
    x = _array(host, device)
    xp = backend.namespace(x)
    got = backend.to_numpy(kernels.max_along(xp, x, 2))
    np.testing.assert_array_equal(got, host.max(axis=2, keepdims=True))
    # Not the last axis: the plain max.
    got = backend.to_numpy(kernels.max_along(xp, x, 1))
    np.testing.assert_array_equal(got, host.max(axis=1, keepdims=True))


def test_row_max_over_a_transposed_copy_propagates_nan():
    host = np.zeros((2, 5), dtype=np.float32)
    host[0, 3] = np.nan
    got = kernels.max_along(np, host, 1)
    assert np.isnan(got[0, 0]) and got[1, 0] == 0.0


@pytest.mark.parametrize("shape", [(2, 3, 16), (5, 64), (2, 2, 2, 7)])
def test_row_max_of_a_strided_view_matches_max(device, shape):
    """Head-split scores are permuted views: the copy must follow the view, not the buffer."""
    host = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    x = backend.namespace(_array(host, device))
    view = x.permute_dims(_array(host, device), (*range(len(shape) - 2), len(shape) - 1, -2))
    got = backend.to_numpy(kernels.max_along(x, view, -1))
    np.testing.assert_array_equal(got, host.swapaxes(-1, -2).max(axis=-1, keepdims=True))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_ones_vector_equals_ones_and_is_made_once(device, dtype):
    x = _array(np.zeros(3, dtype=dtype), device)
    xp = backend.namespace(x)
    got = kernels.ones_vector(xp, 7, x.dtype, x.device)
    assert got is kernels.ones_vector(xp, 7, x.dtype, x.device)
    assert got.dtype == x.dtype and backend.device_of(got) == backend.device_of(x)
    np.testing.assert_array_equal(backend.to_numpy(got), np.ones(7, dtype=dtype))


@pytest.mark.parametrize("axes", [(1, 0), (0, 1)])
def test_contiguous_keeps_the_values_of_a_view(device, axes):
    """backend.contiguous is the identity on values (row-major on NumPy, any layout elsewhere)."""
    host = np.arange(12.0).reshape(3, 4)
    x = _array(host, device)
    view = backend.namespace(x).permute_dims(x, axes)
    got = backend.contiguous(view)
    np.testing.assert_array_equal(backend.to_numpy(got), host.transpose(axes))
    if device == "numpy":
        assert got.flags.c_contiguous


@pytest.mark.parametrize(("rows", "count"), [(80, 256), (5, 1), (3, 0), (4, 40)])
def test_index_add_rows_matches_scatter_into_zeros(device, monkeypatch, rows, count):
    """Repeated indices add up; with the identity's size lowered, the one-hot is compared, and
    with the one-hot limit lowered, the plain scatter runs."""
    rng = np.random.default_rng(rows)
    indices = _array(rng.integers(0, rows, count), device)
    values = _array(rng.standard_normal((count, 6)), device)
    xp = backend.namespace(values)
    zeros = xp.zeros((rows, 6), dtype=values.dtype, device=values.device)
    plain = backend.scatter_add(zeros, indices, values)
    for identity, limit in ((kernels.IDENTITY_ROWS, backend.ONE_HOT_LIMIT), (2, 1 << 20), (2, 1)):
        monkeypatch.setattr(kernels, "IDENTITY_ROWS", identity)
        monkeypatch.setattr(kernels, "ONE_HOT_LIMIT", limit)
        got = kernels.index_add_rows(indices, values, rows)
        assert got.dtype == values.dtype and tuple(got.shape) == (rows, 6)
        np.testing.assert_allclose(backend.to_numpy(got), backend.to_numpy(plain), atol=1e-12)


@pytest.mark.parametrize("width", [1, 5, 16, 100])
def test_row_shift_matches_its_plain_code(device, width):
    """row_shift = the max, with a max of -inf (a fully masked row) replaced by 0; NaN and +inf
    maxima are kept, so those rows come out NaN."""
    host = np.random.default_rng(width).standard_normal((5, width))
    host[0] = -np.inf
    host[1, 0] = np.nan
    host[2, -1] = np.inf
    x = _array(host, device)
    xp = backend.namespace(x)
    plain = host.max(axis=1, keepdims=True)
    plain = np.where(plain == -np.inf, 0.0, plain)
    np.testing.assert_array_equal(backend.to_numpy(kernels.row_shift(xp, x, 1)), plain)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("width", [1, 16, 100])
def test_softmax_in_place_equals_the_softmax_forward_bit_for_bit(device, width, dtype):
    """The same calls as Softmax's forward, on a row of -inf too (0, not NaN); on NumPy the
    result is the argument's own memory."""
    from tinyattn.ops.softmax import _softmax

    host = np.random.default_rng(width).standard_normal((2, 3, width)).astype(dtype) * 4
    host[0, 1] = -np.inf
    want = backend.to_numpy(
        _softmax(backend.namespace(_array(host, device)), _array(host, device), 2)
    )
    x = _array(host, device)
    got = kernels.softmax_in_place(backend.namespace(x), x)
    np.testing.assert_array_equal(backend.to_numpy(got), want)
    assert not np.isnan(want).any() and (want[0, 1] == 0).all()
    if device == "cpu":
        assert got is x


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 1), (2, 0, 5), (1, 2, 3, 0)])
def test_append_ones_matches_a_concatenated_column_of_ones(device, shape):
    host = np.random.default_rng(0).standard_normal(shape)
    x = _array(host, device)
    got = backend.to_numpy(kernels.append_ones(backend.namespace(x), x))
    plain = np.concatenate([host, np.ones((*shape[:-1], 1))], axis=-1)
    np.testing.assert_array_equal(got, plain)


@pytest.mark.parametrize("c", [2, 2.0, 3, 3.0, 4.0, 0.5, -1.0, 2.5])
def test_power_matches_the_plain_power(device, c):
    host = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    host[0, :3] = [0.0, np.inf, np.nan]
    got = backend.to_numpy(kernels.power(_array(host, device), c))
    with np.errstate(invalid="ignore", divide="ignore"):
        np.testing.assert_allclose(got, host**c, rtol=3e-7, equal_nan=True)


@pytest.mark.parametrize(("stop", "size"), [(0, 3), (1, 3), (7, 3), (9, 3), (5, 1), (4, 10)])
def test_blocks_cover_the_range_once_in_order(stop, size):
    """The slices, concatenated, are exactly range(stop): the one slice they replace."""
    slices = kernels.blocks(stop, size)
    assert [i for s in slices for i in range(stop)[s]] == list(range(stop))
    assert all(0 < s.stop - s.start <= size for s in slices)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_parallel_map_equals_a_list_comprehension(monkeypatch, threads):
    monkeypatch.setattr(kernels, "ATTENTION_THREADS", threads)
    items = list(range(7))
    assert kernels.parallel_map(lambda i: i * i, items) == [i * i for i in items]


@pytest.mark.parametrize("width", [3, 16, 64, 100])
def test_softmax_fast_paths_against_composed_softmax(device, width):
    """The fused softmax and log-softmax (halving max, BLAS sums, in-place division) against the
    same math written with plain Tensor ops, values and gradients, in float64."""
    rng = np.random.default_rng(width)
    host = rng.standard_normal((2, 3, width)) * 4
    x = ta.tensor(host, dtype="float64", device=device, requires_grad=True)
    cotangent = ta.tensor(rng.standard_normal(host.shape), dtype="float64", device=device)
    for fused, composed in (
        (F.softmax, lambda t: (t - t.amax(-1, keepdims=True)).exp() / (
            (t - t.amax(-1, keepdims=True)).exp().sum(-1, keepdims=True))),
        (F.log_softmax, lambda t: (t - t.amax(-1, keepdims=True)) - (
            (t - t.amax(-1, keepdims=True)).exp().sum(-1, keepdims=True).log())),
    ):  # fmt: skip
        got, want = fused(x, dim=-1), composed(x)
        np.testing.assert_allclose(
            got.detach().numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12
        )
        (g_got,) = ta.grad([got], [x], [cotangent])
        (g_want,) = ta.grad([want], [x], [cotangent])
        np.testing.assert_allclose(g_got.numpy(), g_want.numpy(), rtol=1e-10, atol=1e-12)
        assert ta.gradcheck(lambda t, f=fused: f(t, dim=-1), (x,))


def test_linear_bias_in_place_does_not_touch_inputs(device):
    """y += bias writes into the product, never into x, the weight or the bias."""
    rng = np.random.default_rng(1)
    host = [rng.standard_normal(s) for s in ((2, 3, 4), (5, 4), (5,))]
    x, w, b = (ta.tensor(h, dtype="float64", device=device) for h in host)
    y = F.linear(x, w, b)
    for tensor, original in zip((x, w, b), host):
        np.testing.assert_array_equal(tensor.numpy(), original)
    np.testing.assert_allclose(y.numpy(), host[0] @ host[1].T + host[2], rtol=1e-12)


def test_linear_of_another_dtype_is_refused(device):
    """As PyTorch's linear and matmul: no silent widening of mixed float dtypes."""
    rng = np.random.default_rng(2)
    x = ta.tensor(rng.standard_normal((3, 4)), dtype="float32", device=device)
    w = ta.tensor(rng.standard_normal((2, 4)), dtype="float32", device=device)
    b = ta.tensor(rng.standard_normal(2), dtype="float64", device=device)
    with pytest.raises(RuntimeError, match="linear: input is float32 but bias is float64"):
        F.linear(x, w, b)
    with pytest.raises(RuntimeError, match="matmul: expected both operands to have the same"):
        x @ w.mT.to("float64")


def test_gpu_tiles_are_larger_and_bounded():
    batch, length = 4, 8192
    cpu = kernels.block_sizes(batch, length, length)
    gpu = kernels.block_sizes(batch, length, length, gpu=True)
    assert batch * gpu[0] * gpu[1] <= kernels.GPU_ATTENTION_BLOCK_SCORES
    assert gpu[0] * gpu[1] >= 16 * cpu[0] * cpu[1]
    assert kernels.block_sizes(1, 3, 2, gpu=True) == (3, 2)  # never larger than the sequences


def test_blockwise_with_gpu_sized_tiles_matches_plain(device, monkeypatch):
    """The GPU tile settings, shrunk to a tiny problem, through the same BlockwiseAttention."""
    monkeypatch.setattr(kernels, "GPU_ATTENTION_BLOCK_KEYS", 48)
    monkeypatch.setattr(kernels, "GPU_ATTENTION_BLOCK_SCORES", 2 * 40 * 48)
    rng = np.random.default_rng(3)
    q, k, v = (
        ta.tensor(rng.standard_normal((2, 100, 8)), dtype="float64", device=device)
        for _ in range(3)
    )
    block_q, block_k = kernels.block_sizes(2, 100, 100, gpu=True)
    assert (block_q, block_k) == (40, 48)
    blockwise = ops.BlockwiseAttention.apply(
        q, k, v, is_causal=True, scale=0.3, block_q=block_q, block_k=block_k
    )
    monkeypatch.setattr(ta.functional, "BLOCKWISE_MIN_SCORES", math.inf)
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)
    np.testing.assert_allclose(blockwise.numpy(), plain.numpy(), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------ the allocator
# Run in a fresh interpreter: the test process has imported tinyattn long ago.
IMPORT_PROBE = """
import ctypes, gc, json, os, random, sys, warnings
import numpy as np

called = []
real_cdll = ctypes.CDLL


class SpyCDLL(real_cdll):  # records every C library function looked up (mallopt among them)
    def __getattr__(self, name):
        called.append(name)
        return super().__getattr__(name)


ctypes.CDLL = SpyCDLL


def state():
    return repr((
        np.get_printoptions(), np.geterr(), np.getbufsize(), dict(os.environ),
        sys.getrecursionlimit(), sys.getswitchinterval(), gc.isenabled(), gc.get_threshold(),
        warnings.filters[:], random.getstate(), np.random.get_state(legacy=False)["state"],
        sys.getdefaultencoding(), sys.float_repr_style,
    ))


before = state()
import tinyattn, tinyattn.functional, tinyattn.nn, tinyattn.optim, tinyattn.checking

after = state()
print(json.dumps([before == after, called, tinyattn.backend.HOST_MEMORY_KEPT]))
"""


def _probe_import(**env_changes):
    env = {k: v for k, v in os.environ.items() if k != "TINYATTN_KEEP_FREED_MEMORY"}
    env.update(env_changes)
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_changes_no_process_wide_setting():
    """`import tinyattn` leaves NumPy's print options and error state, the environment, the
    interpreter's settings and the random states as they were, and never calls mallopt."""
    unchanged, called, kept = _probe_import()
    assert unchanged
    assert "mallopt" not in called and kept is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux's")
def test_allocator_tuning_is_opt_in_by_call_or_environment():
    """keep_freed_memory() makes the setting when called; TINYATTN_KEEP_FREED_MEMORY=1 makes
    `import tinyattn` call it (a user's explicit request)."""
    unchanged, called, kept = _probe_import(TINYATTN_KEEP_FREED_MEMORY="1")
    assert "mallopt" in called and kept is True
    code = "import tinyattn as ta; print(ta.backend.HOST_MEMORY_KEPT, ta.keep_freed_memory())"
    env = {k: v for k, v in os.environ.items() if k != "TINYATTN_KEEP_FREED_MEMORY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["False", "True"], out.stderr


@pytest.mark.parametrize("shape", [(5,), (4, 7), (3, 5, 6), ()])
@pytest.mark.parametrize("elements", [1, 7, 16, 1000])
def test_in_pieces_matches_the_whole_call(device, shape, elements):
    """Pieces of any size, a last piece shorter than the others, one piece, a 0-d array."""
    xp, native = ta.backend.resolve_device(device)
    host = np.random.default_rng(0).standard_normal(shape)
    x = xp.asarray(host, device=native) if xp is not np else host

    def function(a):
        return xp.exp(-a * a) * a + 1.0

    calls = []

    def counted(a):
        calls.append(a.shape)
        return function(a)

    got = kernels.in_pieces(counted, x, elements=elements)
    np.testing.assert_array_equal(ta.backend.to_numpy(got), ta.backend.to_numpy(function(x)))
    assert got.shape == x.shape and got.dtype == x.dtype
    pieces = -(-max(x.size, 1) // elements)
    # Pieces on the host only: off it (the strict stand-in for a GPU) one call, as on CuPy.
    assert len(calls) == (pieces if xp is np else 1)


def test_identity_rows_is_bounded():
    with pytest.raises(ValueError, match="more than IDENTITY_ROWS"):
        kernels.identity_rows(np, kernels.IDENTITY_ROWS + 1, np.float32, "cpu")


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_float_times_bool_mask_multiplies_without_a_float_copy(device, dtype):
    """``x * mask`` keeps x's dtype and equals x times the mask as 0 or 1, with the gradient
    ``g * mask`` for x, either way round. NumPy and CuPy multiply a float by a bool as it is,
    so no Cast op (a float copy of the mask) joins the graph; the strict stand-in refuses to mix
    them, and the mask is cast first."""
    if dtype == "float16" and device == "strict":
        pytest.skip("the array API (and so the strict stand-in) has no float16")
    rng = np.random.default_rng(4)
    host = rng.standard_normal((3, 4)).astype(dtype)
    host_mask = host > 0.2
    for flip in (False, True):
        x = ta.tensor(host, device=device).requires_grad_(True)
        mask = ta.tensor(host_mask, device=device)
        y = mask * x if flip else x * mask
        assert y.dtype == x.dtype
        np.testing.assert_array_equal(y.detach().numpy(), host * host_mask.astype(dtype))
        mixes = device != "strict"
        inputs = [t.array.dtype for t in y.grad_fn.inputs]
        assert (inputs.count(mask.array.dtype) == 1) == mixes, inputs  # the mask itself
        y.backward(ta.full((3, 4), 2.0, dtype=dtype, device=device))
        np.testing.assert_array_equal(x.grad.numpy(), 2.0 * host_mask.astype(dtype))
    counts = ta.tensor(np.arange(4), device=device)  # an integer tensor still promotes
    product = counts * ta.tensor(np.array([True, False, True, True]), device=device)
    assert product.dtype == counts.dtype and product.tolist() == [0, 0, 2, 3]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_relu_array_is_maximum_with_zero_bit_for_bit(device, dtype):
    """The cached zeros operand changes the speed of maximum, not its values: NaN of either
    sign, -0.0, infinities and subnormals come out as ``maximum(x, 0.0)`` gives them."""
    if dtype == "float16" and device == "strict":
        pytest.skip("the array API (and so the strict stand-in) has no float16")
    finfo = np.finfo(dtype)
    special = [np.nan, -np.nan, -0.0, 0.0, np.inf, -np.inf, finfo.smallest_subnormal]
    special += [-finfo.smallest_subnormal, finfo.max, -finfo.max, 1.5, -1.5]
    host = np.concatenate([np.array(special), np.random.default_rng(0).standard_normal(500)])
    host = host.astype(dtype).reshape(2, -1)
    array = _array(host, device)
    got = backend.to_numpy(kernels.relu_array(array))
    # The same library's maximum against the scalar: CuPy's bits for NaN and -0.0 are its own.
    expected = backend.to_numpy(backend.namespace(array).maximum(array, 0.0))
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got.view(f"u{host.itemsize}"), expected.view(f"u{host.itemsize}"))


def test_zeros_operand_is_read_only_bounded_and_host_float_only():
    x = np.ones((3, 4), np.float32)
    zeros = kernels.zeros_operand(x)
    assert zeros.shape == (3, 4) and zeros.dtype == np.float32 and not zeros.any()
    assert not zeros.flags.writeable
    with pytest.raises(ValueError):
        zeros[0, 0] = 1.0
    assert kernels.zeros_operand(np.ones(3, np.int64)) is None  # maximum(int, 0.0) promotes
    assert kernels.zeros_operand(np.ones(kernels.ZEROS_LIMIT + 1, np.float32)) is None
    big = np.full(kernels.ZEROS_LIMIT + 1, -2.0, np.float32)  # past the limit: the scalar
    np.testing.assert_array_equal(kernels.relu_array(big), np.zeros_like(big))


SCALARS = [1.0001, 0.0001, -3.7, 1 / 3, 7, -2, 1e-30, 1e-45, 2.0**-149, 65504.0, 1e5, 3.4e38]
SCALARS += [math.inf, -math.inf]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_scalar_operand_gives_the_scalars_bits(device, dtype):
    """`x op c` and `c op x` with the cached 0-d operand are the same bits and dtype as with
    the Python number, for values each dtype rounds, flushes or holds exactly."""
    if dtype == "float16" and device == "strict":
        pytest.skip("the array API (and so the strict stand-in) has no float16")
    finfo = np.finfo(dtype)
    special = [np.nan, -0.0, 0.0, np.inf, -np.inf, finfo.smallest_subnormal, finfo.max, 1.5]
    rng = np.random.default_rng(0)
    scales = 10.0 ** rng.integers(-6, 6, 300)
    host = np.concatenate([np.array(special), rng.standard_normal(300) * scales])
    with np.errstate(over="ignore"):  # float16 overflows to inf: values too
        x = _array(host.astype(dtype), device)
    xp = backend.namespace(x)
    bits = f"u{np.dtype(dtype).itemsize}"
    for c in SCALARS:
        operand = kernels.scalar_operand(c, x)
        with np.errstate(all="ignore"):
            for f in (xp.add, xp.subtract, xp.multiply, xp.divide):
                for plain, fast in ((f(x, c), f(x, operand)), (f(c, x), f(operand, x))):
                    assert fast.dtype == plain.dtype, (c, f)
                    got, expected = backend.to_numpy(fast), backend.to_numpy(plain)
                    np.testing.assert_array_equal(got.view(bits), expected.view(bits), f"{c} {f}")


def test_scalar_operand_is_cached_read_only_and_only_where_it_is_the_same_number(monkeypatch):
    x32, x64 = np.ones(3, np.float32), np.ones(3, np.float64)
    operand = kernels.scalar_operand(1.0001, x32)
    assert operand.shape == () and operand.dtype == np.float32 and not operand.flags.writeable
    assert kernels.scalar_operand(1.0001, x32) is operand  # made once
    assert kernels.scalar_operand(1.0001, x64).dtype == np.float64  # one per dtype
    with pytest.raises(ValueError):
        operand[()] = 2.0
    # Kept as they are: zeros (-0.0 == 0.0 as a key), NaN (never equal to itself as a key), a
    # NumPy scalar (its own dtype promotes), a bool, integer arrays, a value past the dtype.
    nan = float("nan")
    for c, x in [(0.0, x32), (-0.0, x32), (nan, x32), (np.float64(2.0), x32), (True, x32)]:
        assert kernels.scalar_operand(c, x) is c
    assert kernels.scalar_operand(2.0, np.ones(3, np.int64)) == 2.0
    assert kernels.scalar_operand(1e300, x32) == 1e300
    assert kernels.scalar_operand(10**400, x64) == 10**400
    assert (x32 * -0.0).tobytes() == (x32 * kernels.scalar_operand(-0.0, x32)).tobytes()
    # Bounded: a new number on every step clears the table instead of growing it.
    monkeypatch.setattr(kernels, "_scalar_operands", {})
    for k in range(kernels.SCALAR_OPERANDS_LIMIT + 10):
        kernels.scalar_operand(float(k + 1), x32)
    assert len(kernels._scalar_operands) <= kernels.SCALAR_OPERANDS_LIMIT


def test_scalar_operand_leaves_other_libraries_their_number(device):
    """Off the host the Python number stays (a 0-d device array would be a read of memory,
    CuPy takes a scalar as a kernel argument); a host operand made first is not handed to
    another library's array of the same dtype."""
    kernels.scalar_operand(1.25, np.ones(3, np.float32))
    x = _array(np.ones(3, np.float32), device)
    operand = kernels.scalar_operand(1.25, x)
    if device == "cpu":
        assert operand.shape == () and type(operand) is type(x)
    else:
        assert operand == 1.25 and type(operand) is float


def test_scalar_ops_keep_their_results_and_gradients_with_a_gradient_of_another_dtype():
    """A root gradient given in another dtype reaches MulScalar's rule as it is: the rule uses
    the number, not the forward's operand, and the gradient is converted for x as before."""
    x = ta.tensor(np.array([1.0, -2.0, 3.0], np.float32), requires_grad=True)
    y = x * 1.5 / 4.0 + 0.25
    assert y.dtype == ta.float32 and y.tolist() == [0.625, -0.5, 1.375]
    y.backward(ta.tensor(np.array([1.0, 2.0, 3.0], np.float64)))
    assert x.grad.dtype == ta.float32
    np.testing.assert_array_equal(x.grad.numpy(), np.array([0.375, 0.75, 1.125], np.float32))
    # The rule's array form: a float64 gradient times the Python number 1/3, not its float32
    # rounding.
    third = (x * (1 / 3))._ctx
    (grad,) = third.backward_arrays(np.ones(3))
    assert grad.dtype == np.float64 and grad.tolist() == [1 / 3] * 3


def test_backend_reshape_is_the_namespaces_reshape(device):
    """A view of a contiguous array, a copy of a transposed one, and the same values as the
    namespace's own reshape either way (NumPy takes the array's method)."""
    host = np.arange(24.0).reshape(2, 3, 4)
    x = _array(host, device)
    xp = backend.namespace(x)
    got = backend.reshape(x, (6, 4))
    np.testing.assert_array_equal(backend.to_numpy(got), host.reshape(6, 4))
    transposed = xp.permute_dims(x, (2, 1, 0))
    got = backend.reshape(transposed, (-1,))
    np.testing.assert_array_equal(backend.to_numpy(got), host.transpose(2, 1, 0).reshape(-1))
    if device == "cpu":
        assert np.shares_memory(backend.reshape(x, (6, 4)), x)
        assert not np.shares_memory(got, x)


@pytest.mark.parametrize(
    "kept,shape",
    [
        ((1,), (4,)),
        ((1, 1), (3, 4)),
        ((3, 1), (3, 4)),
        ((1, 4), (3, 4)),
        ((1, 1), (0, 4)),
        ((2, 1, 1), (2, 3, 4)),
        ((1,), (1,)),
        ((), ()),
    ],
)
def test_broadcast_view_is_broadcast_to(device, kept, shape):
    """backend.broadcast_view against the namespace's broadcast_to: the same values and shape,
    read-only, sharing the array's memory on the host; a strided (non-contiguous) array takes
    broadcast_to itself."""
    host = np.arange(1.0, 1.0 + math.prod(kept)).reshape(kept)
    x = _array(host, device)
    xp = backend.namespace(x)
    got = backend.broadcast_view(x, shape)
    want = xp.broadcast_to(x, shape)
    assert got.shape == want.shape == shape
    np.testing.assert_array_equal(backend.to_numpy(got), backend.to_numpy(want))
    if device == "cpu":  # (the stride of an axis of size 1 is never used)
        used = [(a, b) for a, b, n in zip(got.strides, want.strides, shape) if n > 1]
        assert all(a == b for a, b in used) and (got.size == 0 or np.shares_memory(got, x))
        assert not got.flags.writeable
        with pytest.raises(ValueError):
            got[...] = 0.0
    if device == "cpu" and len(kept) == 2 and kept[0] == 3:
        strided = np.arange(6.0).reshape(3, 2)[:, :1]  # (3, 1), not contiguous
        view = backend.broadcast_view(strided, shape)
        np.testing.assert_array_equal(view, np.broadcast_to(strided, shape))


def _assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit for bit: -0.0 is not 0.0 here, and NaN equals the same NaN."""
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


# The first-order rules on arrays (kernels.*_grads) against the Tensor-op rules they replace,
# which run when a graph is recorded (create_graph=True). Each case: a function of tensors made
# from the listed shapes, and the kernel its rule calls.
RULE_CASES = {
    "linear": (lambda x, w, b: F.linear(x, w, b), [(2, 3, 4), (5, 4), (5,)], "linear_grads"),
    "linear-no-bias": (lambda x, w: F.linear(x, w), [(6, 4), (5, 4)], "linear_grads"),
    "linear-one-row": (lambda x, w, b: F.linear(x, w, b), [(4,), (5, 4), (5,)], "linear_grads"),
    "matmul-2d": (lambda a, b: a @ b, [(3, 4), (4, 5)], "matmul_grads"),
    "matmul-stacks": (lambda a, b: a @ b, [(2, 3, 4, 5), (2, 3, 5, 6)], "matmul_grads"),
    "matmul-stack-by-matrix": (lambda a, b: a @ b, [(2, 3, 4), (4, 5)], "matmul_grads"),
    "layer-norm": (
        lambda x, w, b: F.layer_norm(x, (4,), w, b),
        [(2, 3, 4), (4,), (4,)],
        "layer_norm_grads",
    ),
    "layer-norm-two-axes": (
        lambda x, w: F.layer_norm(x, (3, 4), w),
        [(2, 3, 4), (3, 4)],
        "layer_norm_grads",
    ),
    "layer-norm-bias-only": (
        lambda x, b: F.layer_norm(x, (4,), None, b),
        [(3, 4), (4,)],
        "layer_norm_grads",
    ),
    "layer-norm-plain": (lambda x: F.layer_norm(x, (4,)), [(3, 4)], "layer_norm_grads"),
    "gelu": (lambda x: F.gelu(x), [(3, 7)], "gelu_grad"),
    "softmax-last": (lambda x: F.softmax(x, dim=-1), [(3, 5)], "softmax_grad"),
    "softmax-first": (lambda x: F.softmax(x, dim=0), [(3, 5)], "softmax_grad"),
    "log-softmax": (lambda x: F.log_softmax(x, dim=-1), [(3, 5)], "log_softmax_grad"),
    "log-softmax-middle": (lambda x: F.log_softmax(x, dim=1), [(2, 3, 5)], "log_softmax_grad"),
    "heads-attention": (
        lambda q, k, v: ops.HeadsAttention.apply(q, k, v, heads=2, scale=0.5),
        [(2, 3, 4), (2, 5, 4), (2, 5, 6)],
        "heads_attention_grads",
    ),
    "heads-attention-masked": (
        lambda q, k, v: ops.HeadsAttention.apply(q, k, v, _causal(q, k), heads=2, scale=0.5),
        [(2, 4, 4), (2, 4, 4), (2, 4, 2)],
        "heads_attention_grads",
    ),
    "heads-attention-packed": (
        lambda qkv: ops.HeadsAttention.apply(qkv, heads=2, scale=0.5, packed=True),
        [(2, 3, 12)],
        "heads_attention_grads",
    ),
    "heads-attention-packed-masked": (
        lambda qkv: ops.HeadsAttention.apply(
            qkv, _causal(qkv, qkv), heads=2, scale=0.5, packed=True
        ),
        [(2, 4, 12)],
        "heads_attention_grads",
    ),
    "sum-all": (lambda x: x.sum(), [(3, 4)], "spread_array"),
    "sum-middle-axis": (lambda x: x.sum(axis=1), [(2, 3, 4)], "spread_array"),
    "sum-keepdims": (lambda x: x.sum(axis=(0, 2), keepdims=True), [(2, 3, 4)], "spread_array"),
    "cross-entropy-mean": (
        lambda x: F.cross_entropy(x, _targets(x, [0, 2, 4]), label_smoothing=0.1),
        [(3, 5)],
        "cross_entropy_grad",
    ),
    "cross-entropy-sum-ignored": (
        lambda x: F.cross_entropy(x, _targets(x, [0, 2, 4]), ignore_index=2, reduction="sum"),
        [(3, 5)],
        "cross_entropy_grad",
    ),
    "cross-entropy-none-leading-axes": (
        lambda x: F.cross_entropy(x, _targets(x, [[1, 0, 3], [4, 4, 2]]), reduction="none"),
        [(2, 5, 3)],
        "cross_entropy_grad",
    ),
}


def _targets(x, classes):
    """Constant class-index targets on x's device."""
    return ta.tensor(np.array(classes), device=x.device)


def _causal(q, k):
    """A constant (Tq, Tk) bool mask on q's device: key j allowed for query i when j <= i."""
    allowed = np.tril(np.ones((q.shape[1], k.shape[1]), dtype=bool))
    return ta.tensor(allowed, device=q.device)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("frozen", [None, 0, 1], ids=["all", "first-frozen", "second-frozen"])
@pytest.mark.parametrize("case", RULE_CASES)
def test_rules_on_arrays_equal_the_tensor_op_rules(device, monkeypatch, case, frozen, dtype):
    """Bit for bit: the array form makes the Tensor ops' array calls in their order (a compiled
    step records the Tensor ops and must match eager exactly). Under create_graph the Tensor
    ops run, and agree to rounding (some rules recompute a saved value there)."""
    function, shapes, kernel = RULE_CASES[case]
    if frozen is not None and (frozen >= len(shapes) or len(shapes) == 1):
        pytest.skip("the case has no such input, or no other input to differentiate")
    rng = np.random.default_rng(1)
    inputs = [
        ta.tensor(rng.standard_normal(s).astype(dtype), device=device, requires_grad=k != frozen)
        for k, s in enumerate(shapes)
    ]
    out = function(*inputs)
    seed = ta.tensor(rng.standard_normal(out.shape).astype(dtype), device=device)
    wrt = [t for t in inputs if t.requires_grad]
    calls = []
    real = getattr(kernels, kernel)
    monkeypatch.setattr(kernels, kernel, lambda *a: calls.append(1) or real(*a))
    on_arrays = ta.grad(out, wrt, grad_outputs=seed, retain_graph=True)
    assert calls, f"{case}: the rule did not take {kernel}"
    calls.clear()
    with_graph = ta.grad(out, wrt, grad_outputs=seed, create_graph=True, retain_graph=True)
    assert not calls, f"{case}: create_graph must take the Tensor-op rule"
    monkeypatch.setattr(kernels, kernel, lambda *a: calls.append(1))  # declines: Tensor ops
    with_ops = ta.grad(out, wrt, grad_outputs=seed)
    assert calls
    tolerance = 2e-5 if dtype == "float32" else 1e-12
    for got, ops_grad, graph_grad, t in zip(on_arrays, with_ops, with_graph, wrt):
        assert got.shape == t.shape and got.dtype == t.dtype
        assert not got.requires_grad
        _assert_same_bits(got.numpy(), ops_grad.numpy())
        np.testing.assert_allclose(
            got.numpy(), graph_grad.detach().numpy(), rtol=tolerance, atol=tolerance
        )


def test_rules_on_arrays_decline_while_a_step_is_recorded_and_for_other_dtypes(monkeypatch):
    """A ta.compile recording takes the Tensor ops (its replay makes each an out= call); a
    float16 gradient is left to them too (their sums accumulate in float32)."""
    calls = []
    real = kernels.layer_norm_grads
    monkeypatch.setattr(kernels, "layer_norm_grads", lambda *a: calls.append(1) or real(*a))
    norm = ta.nn.LayerNorm(4)

    def step(x):
        norm.zero_grad()
        loss = norm(x).sum()
        loss.backward()
        return loss

    compiled = ta.compile(step)
    x = ta.randn(3, 4)
    for _ in range(3):
        compiled(x)
    assert not calls
    step(x)
    assert calls
    half = np.ones((2, 4), dtype="float16")
    assert kernels.layer_norm_grads(half, half, half[:, :1], None, (-1,), (1, 0, 0)) is None


def test_matmul_rule_leaves_broadcast_batches_to_the_tensor_ops(device):
    """Shapes the array rule does not cover (a 1-D operand, a batch that broadcasts) give None,
    and the rule's own Tensor ops compute them: checked against finite differences."""
    rng = np.random.default_rng(2)
    for a_shape, b_shape in [((4,), (4, 5)), ((2, 3, 4), (4,)), ((1, 3, 4), (2, 4, 5))]:
        assert kernels.matmul_grads(None, None, None, (a_shape, b_shape), (True, True)) is None
        a = ta.tensor(rng.standard_normal(a_shape), device=device, requires_grad=True)
        b = ta.tensor(rng.standard_normal(b_shape), device=device, requires_grad=True)
        assert ta.gradcheck(lambda a, b: a @ b, (a, b))


def test_view_rules_and_gradient_sums_run_no_op_without_a_graph(device, monkeypatch):
    """Reshape's and permute's rules give the gradient's view directly, and two gradients of one
    tensor are added as arrays: no Function runs for them, and the values are the same."""
    rng = np.random.default_rng(4)
    x = ta.tensor(rng.standard_normal((2, 3, 4)), device=device, requires_grad=True)
    seed = ta.tensor(rng.standard_normal((4, 6)), device=device)

    def loss_grad(**kwargs):
        y = x.reshape(6, 4).permute(1, 0)
        return ta.grad(y + y, x, grad_outputs=seed, **kwargs)[0]

    applied = []
    for op in (ops.Reshape, ops.Permute, ops.Add):
        real = op.forward
        monkeypatch.setattr(
            op, "forward", lambda self, *a, real=real, **k: applied.append(1) or real(self, *a, **k)
        )
    got = loss_grad()
    assert len(applied) == 3  # the forward's reshape, permute and add; none in backward
    want = 2 * seed.numpy().T.reshape(2, 3, 4)
    np.testing.assert_array_equal(got.numpy(), want)
    applied.clear()
    with_graph = loss_grad(create_graph=True)
    assert len(applied) > 3  # with a graph, the rules' Tensor ops run
    np.testing.assert_array_equal(with_graph.detach().numpy(), want)


ELEMENTWISE_RULES = {
    "mul": (lambda a, b: a * b, [(3, 4), (3, 4)]),
    "mul-broadcast": (lambda a, b: a * b, [(3, 4), (4,)]),
    "sub-broadcast": (lambda a, b: a - b, [(2, 1, 4), (3, 4)]),
    "neg": (lambda a: -a, [(3, 4)]),
    "exp": (lambda a: a.exp(), [(3, 4)]),
    "mul-scalar": (lambda a: a * 0.3, [(3, 4)]),
    "div-scalar": (lambda a: a / 7, [(3, 4)]),
    "rsub-scalar": (lambda a: 2.0 - a, [(3, 4)]),
    # A bool mask multiplies as it is only where ufuncs take it (NumPy, CuPy): the strict
    # stand-in casts it, so these two keep their Tensor ops there.
    "relu": (lambda a: a.relu(), [(3, 4)]),
    "where": (lambda a, b: ta.where(a > 0.2, a, b), [(3, 4), (4,)]),
}
MASKED = ("relu", "where")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", ELEMENTWISE_RULES)
def test_elementwise_rules_on_arrays_equal_their_tensor_ops_bit_for_bit(
    device, monkeypatch, case, dtype
):
    """The arithmetic rules' array form against their Tensor ops (create_graph runs those):
    the same bits, no op run by the plain backward, and no graph on the gradient."""
    function, shapes = ELEMENTWISE_RULES[case]
    rng = np.random.default_rng(5)
    inputs = [
        ta.tensor(rng.standard_normal(s).astype(dtype), device=device, requires_grad=True)
        for s in shapes
    ]
    out = function(*inputs)
    seed = ta.tensor(rng.standard_normal(out.shape).astype(dtype), device=device)
    applied = []
    apply = autograd.Function.apply.__func__
    counting = classmethod(lambda cls, *a, **k: applied.append(cls) or apply(cls, *a, **k))
    monkeypatch.setattr(autograd.Function, "apply", counting)
    plain = ta.grad(out, inputs, grad_outputs=seed, retain_graph=True)
    if case not in MASKED or device != "strict":
        assert not applied, f"{case}: the plain backward ran {applied}"
    monkeypatch.undo()
    with_graph = ta.grad(out, inputs, grad_outputs=seed, create_graph=True)
    for got, want, t in zip(plain, with_graph, inputs):
        assert got.shape == t.shape and got.dtype == t.dtype and not got.requires_grad
        _assert_same_bits(got.numpy(), want.detach().numpy())


def test_a_product_of_two_dtypes_keeps_its_tensor_op_rule():
    """float32 times float64 promotes as PyTorch does (a Tensor op), which an array product
    would not: the rule keeps its Tensor ops there, and the gradients keep their dtypes."""
    a = ta.tensor(np.ones((2, 3), dtype="float32"), requires_grad=True)
    b = ta.tensor(np.full((), 0.5), requires_grad=True)  # a 0-d float64 tensor
    (a * b).sum().backward()
    assert a.grad.dtype == ta.float32 and b.grad.dtype == ta.float64
    np.testing.assert_array_equal(a.grad.numpy(), np.full((2, 3), 0.5, dtype="float32"))
    assert float(b.grad.numpy()) == 6.0


def test_a_rule_on_arrays_still_returns_tensors_to_its_caller():
    """Called by hand under no_grad (an engine of one's own, as in the exercises), a rule that
    computes on arrays hands back constant Tensors, one per input, as every rule does."""
    x = ta.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    w = ta.tensor(np.ones((4, 3)), requires_grad=True)
    for out in (x * 0.5, F.linear(x, w), x.reshape(3, 2), F.softmax(x, dim=-1)):
        fn = out._ctx
        fn.output = out
        with ta.no_grad():
            grads = fn.backward(ta.ones_like(out))
        fn.output = None
        grads = grads if isinstance(grads, tuple) else (grads,)
        assert len(grads) == len(fn.inputs)
        for g, t in zip(grads, fn.inputs):
            assert isinstance(g, ta.Tensor) and not g.requires_grad and g.shape == t.shape
