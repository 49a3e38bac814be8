"""Math functions for generated CPU kernels, written so that a loop calling them vectorizes.

Imported only by the kernels `codegen_cpu` writes (so only where Numba is installed). A call of
``np.exp`` inside a Numba loop is a call of the C library's ``expf`` for each value, which keeps
the compiler from running the loop on 8 values at once: a fused loop with one exp was 2.3 times
slower than NumPy's own exp over the same array. `exp32` is arithmetic only (a polynomial and
the exponent's bits), which the compiler vectorizes.
"""

from __future__ import annotations

import math
from typing import Any

import llvmlite.ir
from numba import njit, types
from numba.core.extending import intrinsic


@intrinsic
def _float32_from_bits(typingctx: Any, bits: Any) -> Any:
    """The float32 whose bits are the int32 `bits` (a reinterpretation, no conversion)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], llvmlite.ir.FloatType())

    return types.float32(types.int32), codegen


@intrinsic
def _floor32(typingctx: Any, x: Any) -> Any:
    """floor(x) for float32 x as the LLVM instruction (``math.floor`` is a call per value and
    returns an int, which stops vectorizing)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        float32 = llvmlite.ir.FloatType()
        floor = builder.module.declare_intrinsic("llvm.floor", [float32])
        return builder.call(floor, args)

    return types.float32(types.float32), codegen


@njit(error_model="numpy")
def exp32(x: Any) -> Any:
    """exp(x) for float32 x within 2 units in the last place: exp(x) = 2**n * exp(r), with n
    = round(x / ln 2) and r = x - n ln 2 in [-ln(2)/2, ln(2)/2] (ln 2 in two parts, so r is
    exact), exp(r) by Cephes' degree-7 polynomial, and 2**n made from its exponent bits.
    Below -87.3 (where exp(x) is subnormal) the result is 0; from 88.38 to 88.72 it is
    exp(88.38), above that inf. No branch: each case is a select, which vectorizes."""
    low, high = types.float32(-87.33654), types.float32(88.72283)
    clipped = min(max(x, low), types.float32(88.37626))  # 2**n stays finite: n <= 127
    n = _floor32(clipped * types.float32(1.44269504) + types.float32(0.5))
    r = clipped - n * types.float32(0.693359375)
    r = r - n * types.float32(-2.12194440e-4)
    p = types.float32(1.9875691500e-4)
    p = p * r + types.float32(1.3981999507e-3)
    p = p * r + types.float32(8.3334519073e-3)
    p = p * r + types.float32(4.1665795894e-2)
    p = p * r + types.float32(1.6666665459e-1)
    p = p * r + types.float32(5.0000001201e-1)
    p = p * r * r + r + types.float32(1.0)
    scaled = p * _float32_from_bits((types.int32(n) + types.int32(127)) << types.int32(23))
    scaled = types.float32(math.inf) if x > high else scaled
    scaled = types.float32(0.0) if x < low else scaled
    return scaled if x == x else x
