"""Special functions the array API lacks: the error function erf, and the exact GELU built on it.

erf is a rational approximation on arrays, chosen by dtype: float64 gets W. J. Cody's (exact to
float64 rounding, about 60 passes over the array); float32 and narrower get one rational made
for float32 precision (within 2 ulp, about 25 passes). GELU's normal CDF, Phi, is not computed
as (1 + erf(x / sqrt 2)) / 2, which cancels to nothing for negative x: float64 takes Phi(x) for
x < 0 from Cody's erfc directly, and float32 reads Phi from a table of cubic pieces (within two
float32 roundings for x > -9, in fewer passes than the rational). The backward needs only exp,
so it is written with Tensor ops like every other rule; with no graph being recorded it runs
the same passes on arrays (`kernels.gelu_grad`).
"""

from __future__ import annotations

import math
from typing import Any

from .. import kernels
from ..autograd import Function, is_grad_enabled
from ..backend import asarray, clip_into, namespace, take_in_range

# W. J. Cody's rational Chebyshev approximations for erf/erfc (Math. Comp. 23, 1969; Netlib
# SPECFUN CALERF). Relative error below 1e-16 in float64 over the whole line: measured against
# math.erf, the worst absolute error is 2.2e-16, so exact GELU matches PyTorch to ~1e-15.
_ERF_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
          3.20937758913846947e03, 1.85777706184603153e-1)  # fmt: skip
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
          2.84423683343917062e03)  # fmt: skip
_ERF_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
          2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
          2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)  # fmt: skip
_ERF_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
          1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
          3.43936767414372164e03, 1.23033935480374942e03)  # fmt: skip
_ERF_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
          1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)  # fmt: skip
_ERF_Q = (2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1,
          6.05183413124413191e-2, 2.33520497626869185e-3)  # fmt: skip
_SMALL, _MIDDLE = 0.46875, 4.0
# erfc(x) underflows to 0 in float64 beyond x ~ 27.3; clipping there keeps exp and the products
# below finite for x = inf or 1e300 (erf = +-1 exactly), and lets NaN through.
_LARGE_END = 28.0

# The float32 erf of Eigen and XLA (Eigen's generic_fast_erf_float): erf(x) ~= x * P(x^2) / Q(x^2)
# on [-4, 4], P of degree 6 and Q of degree 4 in x^2, highest power first; outside, erf(x) rounds
# to +-1 in float32 (erf(4) = 1 - 1.5e-8). Its own error is below 8e-8 relative, but evaluated in
# float32 the 24 roundings add up to 8 ulp near 1, so it is evaluated in float64 and rounded once:
# measured against math.erf over float32 inputs, within 2 ulp and 1.2e-7 relative.
_ERF32_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
            -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
            -1.60960333262415e-02)  # fmt: skip
_ERF32_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
            -7.37332916720468e-03, -1.42647390514189e-02)  # fmt: skip
_ERF32_CLIP = 4.0


def _ratio(z: Any, num: tuple, den: tuple) -> Any:
    """Cody's nested evaluation: (num[-1]z^k + ... + num[k-1]) / (z^k + ... + den[k-1])."""
    top, bottom = num[-1] * z, z
    for a, b in zip(num[: len(den) - 1], den[:-1], strict=True):
        top, bottom = (top + a) * z, (bottom + b) * z
    return (top + num[len(den) - 1]) / (bottom + den[-1])


def _horner(z: Any, coefficients: tuple) -> Any:
    """c[0] z^n + c[1] z^(n-1) + ... + c[n], one product and one sum per coefficient.

    In place on the one array it makes: a new array per step would cost an allocation and a
    trip through memory each, on arrays as large as the activations."""
    result = coefficients[0] * z
    result += coefficients[1]
    for coefficient in coefficients[2:]:
        result *= z
        result += coefficient
    return result


def _erf_array_float32(xp: Any, x: Any) -> Any:
    """erf for float32 (and narrower) arrays: one rational on the clipped x, in float64.

    Clipping keeps inf finite (erf(+-inf) = +-1) and passes NaN, -0.0 and denormals through;
    x * (P / Q) rather than (x * P) / Q so a tiny x never underflows before the division.
    """
    clipped = xp.astype(xp.clip(x, -_ERF32_CLIP, _ERF32_CLIP), xp.float64)
    square = clipped * clipped
    ratio = _horner(square, _ERF32_P)
    ratio /= _horner(square, _ERF32_Q)
    ratio *= clipped
    return xp.astype(ratio, x.dtype)


def _cody_pieces(xp: Any, x: Any) -> tuple[Any, Any, Any]:
    """Cody's float64 pieces: |x|; erf(x), valid where |x| <= 0.46875; and erfc(|x|), valid
    where |x| >= 0.46875. Each range is evaluated on its own clipped copy (no inf, no overflow)."""
    y = xp.abs(x)
    small = xp.clip(y, 0.0, _SMALL)
    erf_small = x * _ratio(small * small, _ERF_A, _ERF_B)
    middle = xp.clip(y, _SMALL, _MIDDLE)
    large = xp.clip(y, _MIDDLE, _LARGE_END)
    inv_sq = 1.0 / (large * large)
    erfc_scaled_large = (1.0 / math.sqrt(math.pi) - inv_sq * _ratio(inv_sq, _ERF_P, _ERF_Q)) / large
    tail_at = xp.where(y <= _MIDDLE, middle, large)
    tail = xp.where(y <= _MIDDLE, _ratio(middle, _ERF_C, _ERF_D), erfc_scaled_large)
    # exp(-y^2) split as exp(-r^2) exp(-(y-r)(y+r)) with r = y rounded down to 1/16: keeps the
    # rounding error of y^2 out of the exponent (Cody's trick).
    rounded = xp.trunc(tail_at * 16.0) / 16.0
    erfc = xp.exp(-rounded * rounded) * xp.exp(-(tail_at - rounded) * (tail_at + rounded)) * tail
    return y, erf_small, erfc


def _erf_array(xp: Any, x: Any) -> Any:
    """erf on an array: float32 by one rational; float64 by Cody's three ranges of |x|."""
    if x.dtype != xp.float64:
        return _erf_array_float32(xp, x)
    y, erf_small, erfc = _cody_pieces(xp, x)
    return xp.where(y <= _SMALL, erf_small, xp.sign(x) * ((0.5 - erfc) + 0.5))


class Erf(Function):
    """y = erf(x) = 2/sqrt(pi) * integral_0^x exp(-t^2) dt;  dL/dx = g * 2/sqrt(pi) * exp(-x^2);
    dy = dx * 2/sqrt(pi) * exp(-x^2).

    Shapes: any.
    """

    __slots__ = ()

    def forward(self, x: Any) -> Any:
        xp = namespace(x)
        return kernels.in_pieces(lambda piece: _erf_array(xp, piece), x)

    def backward(self, grad: Any) -> Any:
        x = self.inputs[0]
        return grad * ((-(x * x)).exp() * (2.0 / math.sqrt(math.pi)))

    def jvp(self, tangent: Any) -> Any:
        x = self.inputs[0]
        return tangent * ((-(x * x)).exp() * (2.0 / math.sqrt(math.pi)))


_SQRT_HALF = 1.0 / math.sqrt(2.0)
_PDF_SCALE = 1.0 / math.sqrt(2.0 * math.pi)


# Phi in float32 by table: on each interval [k, k + 1] / 128 of x, the cubic in the offset t that
# matches Phi and its slope phi at both ends (Hermite interpolation). Its error, h^4 / 384 times
# the largest fourth derivative, h = 1/128, is below 1e-11 absolute; relative to Phi in the left
# tail it is about (h x)^4 / 384: below the float32 rounding for x > -9, 3e-7 at x = -14. Outside
# [-14.625, 5.5], Phi rounds to 0 or 1 in float32. Both ends are multiples of 1/128, so the steps
# up to the gathers are exact: only the cubic's three products and sums round.
_CDF_STEPS = 128
_CDF_LOW, _CDF_HIGH = -14.625 * _CDF_STEPS, 5.5 * _CDF_STEPS  # in steps
_cdf_tables: dict[Any, tuple[Any, ...]] = {}


def _cdf_table_terms() -> tuple[list[float], ...]:
    """The cubics' coefficients, constant term first: four lists of one entry per node, in
    Python floats (float64). t is measured in steps, so the slopes are phi / 128."""
    nodes = [k / _CDF_STEPS for k in range(int(_CDF_LOW), int(_CDF_HIGH) + 1)]
    cdf = [0.5 * math.erfc(-v * _SQRT_HALF) for v in nodes]
    slope = [math.exp(-0.5 * v * v) * (_PDF_SCALE / _CDF_STEPS) for v in nodes]
    rows = [
        (f0, d0, 3 * (f1 - f0) - 2 * d0 - d1, 2 * (f0 - f1) + d0 + d1)
        for f0, f1, d0, d1 in zip(cdf, cdf[1:], slope, slope[1:])
    ]
    rows.append((cdf[-1], 0.0, 0.0, 0.0))  # x at or past the top: Phi(5.5), which rounds to 1
    return tuple(list(term) for term in zip(*rows))


def _cdf_table(x: Any) -> tuple[Any, ...]:
    """The table as float32 arrays on x's device, made on first use there."""
    key = (type(x), str(x.device))
    if key not in _cdf_tables:
        terms = _cdf_table_terms()
        _cdf_tables[key] = tuple(asarray(t, dtype="float32", device=x.device) for t in terms)
    return _cdf_tables[key]


def cdf_grid(x: Any) -> tuple[tuple[Any, ...], float, float, float]:
    """What `_normal_cdf_float32` computes with, for a replay kernel that makes its calls into
    buffers: the table's terms on x's device (constant, linear, square, cube) and the clip's
    bounds in x and the scale to steps, as the function passes them."""
    return _cdf_table(x), _CDF_LOW / _CDF_STEPS, _CDF_HIGH / _CDF_STEPS, float(_CDF_STEPS)


def _normal_cdf_float32(xp: Any, x: Any) -> Any:
    """Phi(x) for float32 (and narrower) arrays, by the table above: 20 array calls, 4 of them
    gathers, against about 30 (mostly in float64) for (1 + erf(x / sqrt 2)) / 2."""
    constant, linear, square, cube = _cdf_table(x)
    # Clipped before scaling, so that 3e38 * 128 cannot overflow; NaN goes to the low end, so
    # its index is valid (x * Phi is NaN all the same).
    steps = xp.astype(x, xp.float32, copy=True)
    steps = clip_into(steps, _CDF_LOW / _CDF_STEPS, _CDF_HIGH / _CDF_STEPS)
    steps *= float(_CDF_STEPS)
    node = xp.floor(steps)
    steps -= node  # the offset t in [0, 1]
    node -= _CDF_LOW
    # Through int32: x86 converts float32 to int32 with a vector instruction, to int64 only
    # with AVX-512 (12 us against 21 on 32,768 values without it). The nodes fit: 0 .. 2576.
    index = xp.astype(xp.astype(node, xp.int32), xp.int64)
    cdf = take_in_range(cube, index)
    for term in (square, linear, constant):
        cdf *= steps
        cdf += take_in_range(term, index)
    return xp.astype(cdf, x.dtype, copy=False)


def _normal_cdf(xp: Any, x: Any) -> Any:
    """Phi(x) = (1 + erf(x / sqrt(2))) / 2, written so that nothing cancels: for x < 0 (past
    Cody's small range) it is erfc(|x| / sqrt 2) / 2 itself."""
    if x.dtype != xp.float64:
        return _normal_cdf_float32(xp, x)
    z = x * _SQRT_HALF
    y, erf_small, erfc = _cody_pieces(xp, z)
    erfc *= 0.5
    tail = xp.where(z < 0.0, erfc, 1.0 - erfc)
    erf_small *= 0.5
    erf_small += 0.5
    return xp.where(y <= _SMALL, erf_small, tail)


class Gelu(Function):
    """y = x * Phi(x), Phi the standard normal CDF (the exact GELU);
    dL/dx = g * (Phi(x) + x * phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi);
    dy = dx * (Phi(x) + x * phi(x)).

    Shapes: any. One op where the composition 0.5 * x * (1 + erf(x / sqrt(2))) is five (and its
    backward about eleven array passes): the forward computes Phi piece by piece while it is in
    cache and keeps it, so the backward needs only phi. Phi is computed without the composition's
    cancellation, so for negative x the values keep their relative precision: measured, within
    1.5e-7 (float32) and 1.2e-14 (float64) relative down to x = -9, where PyTorch's values are
    20% off at x = -5 in float32 and 9% off at x = -8 in float64. The backward is
    written with Tensor ops; under ``create_graph`` it computes Phi again from x through erf, the
    composition, so that higher derivatives follow x through it.
    """

    __slots__ = ()

    def forward(self, x: Any) -> Any:
        xp = namespace(x)
        cdf = kernels.in_pieces(lambda piece: _normal_cdf(xp, piece), x)
        self.save_for_backward(cdf)
        return x * cdf

    def backward_arrays(self, g: Any) -> tuple | None:
        return kernels.gelu_grad(g, self.inputs[0].array, self.saved_arrays[0])

    def backward(self, grad: Any) -> Any:
        x = self.inputs[0]
        if is_grad_enabled():  # create_graph: Phi must carry its dependence on x
            cdf = (Erf.apply(x * _SQRT_HALF) + 1.0) * 0.5
        else:
            (cdf,) = self.saved_tensors
        pdf = (x * x * -0.5).exp() * _PDF_SCALE
        return grad * (cdf + x * pdf)

    def jvp(self, tangent: Any) -> Any:
        # Phi from x through erf, as backward under create_graph: a tangent of this tangent
        # (an outer dual level) or a reverse graph through it must see Phi depend on x.
        x = self.inputs[0]
        cdf = (Erf.apply(x * _SQRT_HALF) + 1.0) * 0.5
        pdf = (x * x * -0.5).exp() * _PDF_SCALE
        return tangent * (cdf + x * pdf)


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`.
VMAP_RULES = dict.fromkeys((Erf, Gelu), "elementwise")
