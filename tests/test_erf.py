"""erf in float32: the one-rational path against math.erf (float64), in ulps and relative error,
on dense grids, tiny and special values; exact GELU in float32 against PyTorch. The float64
path (Cody's) has its own tests in tests/test_functional.py and tests/test_torch_parity.py.
GELU's normal CDF in both dtypes, against math.erfc, including the left tail where
(1 + erf(x / sqrt 2)) / 2 has no correct digit left."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F

TINY = float(np.finfo(np.float32).tiny)  # the smallest normal float32


def float32_grid() -> np.ndarray:
    """Dense float32 points in [-6, 6]: an even grid, every 2053rd float32 (all binades, tiny
    values and denormals included), both signs."""
    even = np.linspace(0.0, 6.0, 120_001, dtype=np.float32)
    every_binade = np.arange(0, 0x40C00001, 2053, dtype=np.uint32).view(np.float32)
    positive = np.concatenate([even, every_binade])
    return np.concatenate([positive, -positive])


def erf32(values: np.ndarray, device: str) -> np.ndarray:
    out = F.erf(ta.tensor(values, dtype="float32", device=device)).numpy()
    assert out.dtype == np.float32
    return out


def reference(values: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) for v in values.astype(np.float64)])


def as_flushed(device: str, values: np.ndarray, function) -> np.ndarray:
    """`function` of `values` as a device that flushes float32 subnormals computes it: CuPy
    compiles its kernels with -ftz=true, so a subnormal input reads as a zero of its sign and a
    subnormal result is written as zero. Elsewhere, `function` of `values` itself."""
    if device != "cuda":
        return function(values)
    read = np.where(np.abs(values) < TINY, np.copysign(0.0, values), values)
    result = function(read)
    return np.where(np.abs(result) < TINY, np.copysign(0.0, result), result)


def ulps(got: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """|got - expected| in units of the float32 spacing at the correctly rounded result."""
    spacing = np.spacing(np.abs(expected.astype(np.float32))).astype(np.float64)
    return np.abs(got.astype(np.float64) - expected) / spacing


# (name, points, bound in ulps, bound on relative error or None)
ACCURACY = [
    ("dense grid", float32_grid, 2.0, None),
    ("normal values", lambda: float32_grid()[np.abs(float32_grid()) >= TINY], 2.0, 1.3e-7),
    ("tiny", lambda: np.array([1e-30, -1e-30, 1e-20, 3e-38, TINY], np.float32), 2.0, 1.3e-7),
    ("denormals", lambda: np.array([1e-45, -1e-45, 1e-40, 5e-39], np.float32), 1.0, None),
    ("where erf rounds to 1", lambda: np.linspace(3.8, 6.0, 2001, dtype=np.float32), 2.0, 1.3e-7),
]


@pytest.mark.parametrize(("points", "max_ulps", "max_relative"), [row[1:] for row in ACCURACY],
                         ids=[row[0] for row in ACCURACY])  # fmt: skip
def test_float32_erf_accuracy(device, points, max_ulps, max_relative):
    values = points()
    got, expected = erf32(values, device), as_flushed(device, values, reference)
    assert ulps(got, expected).max() <= max_ulps
    if max_relative is not None:
        assert (np.abs(got - expected) / np.abs(expected)).max() <= max_relative


def test_float32_erf_special_values(device):
    values = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 4.0, -4.0, 1e30], np.float32)
    got = erf32(values, device)
    np.testing.assert_array_equal(got, [0.0, -0.0, 1.0, -1.0, np.nan, 1.0, -1.0, 1.0])
    assert np.signbit(got[1]) and not np.signbit(got[0])  # erf(-0.0) = -0.0, as in math.erf


def test_float32_erf_is_odd(device):
    values = float32_grid()
    np.testing.assert_array_equal(erf32(values, device), -erf32(-values, device))


def test_float32_exact_gelu_matches_torch(device):
    torch = pytest.importorskip("torch")
    values = np.concatenate([np.linspace(-8, 8, 16_001, dtype=np.float32), [1e-30, -1e-30]])
    ours = F.gelu(ta.tensor(values, dtype="float32", device=device)).numpy()
    theirs = torch.nn.functional.gelu(torch.from_numpy(values)).numpy()
    # Both round erf to float32 (torch within 1 ulp, tinyattn within 2): the two GELUs differ by
    # about 0.5 |x| times 3 ulp of 1 at most, 7e-7 at |x| = 8.
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)


def test_float32_erf_gradient(device):
    """The backward is shared with float64: float32 gradients equal 2/sqrt(pi) exp(-x^2) g."""
    values = np.linspace(-3, 3, 13, dtype=np.float32)
    x = ta.tensor(values, dtype="float32", device=device, requires_grad=True)
    F.erf(x).sum().backward()
    expected = 2.0 / math.sqrt(math.pi) * np.exp(-(values.astype(np.float64) ** 2))
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6, atol=1e-7)


def gelu_reference(values: np.ndarray) -> np.ndarray:
    """x * Phi(x) in float64, Phi from math.erfc (no cancellation for x < 0)."""
    return np.array([v * 0.5 * math.erfc(-v / math.sqrt(2.0)) for v in values.astype(np.float64)])


def test_float32_gelu_is_accurate_in_the_left_tail_too(device):
    """Within 3 ulp (Phi's cubic rounds three times, then the product) down to x = -9; within 4e-7
    relative wherever Phi is a normal float32 (x > -13.1). The composition
    0.5 * x * (1 + erf(x / sqrt 2)) is about 380 ulp off at x = -3 and 20% off at x = -5.
    On CuPy, which flushes float32 subnormals to zero, the cubic's smaller terms vanish first:
    there the relative bound holds where Phi is above 2^30 times the smallest normal (a
    flushed term is then below 1e-9 of Phi), that is for x > -11.2."""
    grid = np.linspace(-16.0, 7.0, 460_001, dtype=np.float32)
    draws = np.random.default_rng(0).standard_normal(20_000).astype(np.float32)
    values = np.concatenate([grid, draws])
    got = F.gelu(ta.tensor(values, dtype="float32", device=device)).numpy()
    assert got.dtype == np.float32
    expected = gelu_reference(values)
    near = values >= -9.0
    assert ulps(got[near], expected[near]).max() <= 3.0
    lowest = TINY * (2.0**30 if device == "cuda" else 1.0)
    normal = (values != 0) & (np.abs(expected) >= lowest * np.abs(values))  # Phi above `lowest`
    relative = np.abs(got[normal] - expected[normal]) / np.abs(expected[normal])
    assert relative.max() <= 4e-7


def test_float64_gelu_keeps_its_relative_precision_for_negative_x(device):
    """Phi(x) for x < 0 comes from erfc, not 1 + erf: within 2e-14 relative down to x = -10;
    below, the input's own rounding is magnified x^2 times (Phi's condition number), still
    within 3e-13 down to where Phi underflows."""
    values = np.linspace(-37.0, 9.0, 46_001)
    got = F.gelu(ta.tensor(values, dtype="float64", device=device)).numpy()
    expected = gelu_reference(values)
    nonzero = expected != 0.0
    relative = np.abs(got[nonzero] - expected[nonzero]) / np.abs(expected[nonzero])
    assert relative[values[nonzero] >= -10.0].max() <= 2e-14
    assert relative.max() <= 3e-13


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gelu_and_erf_at_infinities_and_huge_values(device, dtype):
    """GELU(inf) = inf and erf(+-inf) = +-1 with no overflow warning in either dtype (float64's
    erfc range is clipped where erfc underflows); NaN stays NaN, -0.0 stays -0.0."""
    huge = 1e300 if dtype == "float64" else 3e38
    values = np.array([np.inf, 1e30, -1e30, np.nan, -0.0, 0.0, huge])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gelu = F.gelu(ta.tensor(values, dtype=dtype, device=device)).numpy()
        erf = F.erf(ta.tensor(np.concatenate([values, [-np.inf]]), dtype=dtype, device=device))
    expected = np.array([np.inf, 1e30, -0.0, np.nan, -0.0, 0.0, values[-1]], dtype=dtype)
    np.testing.assert_array_equal(gelu, expected)
    assert np.signbit(gelu[2]) and np.signbit(gelu[4]) and not np.signbit(gelu[5])
    np.testing.assert_array_equal(erf.numpy(), [1.0, 1.0, -1.0, np.nan, -0.0, 0.0, 1.0, -1.0])
