"""nn.functional, resampling part: ``interpolate`` with PyTorch's signature, index rules and
errors (re-exported by `tinyattn.nn.functional`).

Every supported mode is separable, so the output is built one spatial axis at a time: each
output position d along an axis reads source rows picked by integer indices computed here in
Python, weighted by constants. Nearest modes are one ``index_select`` per axis; linear modes a
weighted sum of two (the rows floor(s) and floor(s) + 1 at source coordinate s); bicubic a
weighted sum of four. The gradient therefore comes from ``index_select``'s rule (a scatter-add
back onto the input) and the products; no dedicated Function is needed.
"""

# PyTorch's parameter names (input, ...) are kept so keyword callers port unchanged.
# ruff: noqa: A001, A002

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

from ..backend import check_floating
from ..errors import TinyattnError
from ..tensor import Tensor

# mode -> the number of spatial axes it needs (None: any of 1, 2, 3)
MODES = {
    "nearest": None,
    "nearest-exact": None,
    "linear": 1,
    "bilinear": 2,
    "bicubic": 2,
    "trilinear": 3,
}
INTERPOLATING = ("linear", "bilinear", "bicubic", "trilinear")
CUBIC_A = -0.75  # PyTorch's bicubic coefficient (Keys' kernel)


def _float32(value: float) -> float:
    """`value` rounded to float32, as PyTorch's nearest kernels compute their scale."""
    return struct.unpack("f", struct.pack("f", value))[0]


def _per_axis(name: str, value: Any, spatial: tuple[int, ...]) -> list[Any]:
    """A scalar repeated per spatial axis, or a sequence of exactly one value per axis."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        values = list(value)
        if len(values) != len(spatial):
            raise TinyattnError(
                "Input and output must have the same number of spatial dimensions, but got "
                f"input with spatial dimensions of {list(spatial)} and output size of {values}. "
                f"Please provide input tensor in (N, C, d1, d2, ...,dK) format and {name} in "
                "(o1, o2, ...,oK) format."
            )
        return values
    return [value] * len(spatial)


def _output_sizes(
    spatial: tuple[int, ...],
    size: Any,
    scale_factor: Any,
    recompute_scale_factor: bool | None,
) -> tuple[list[int], list[float | None]]:
    """The output size of each spatial axis and the scale factor its kernel uses (or None)."""
    if size is not None and scale_factor is not None:
        raise TinyattnError("only one of size or scale_factor should be defined")
    if size is not None:
        if recompute_scale_factor:
            raise TinyattnError("recompute_scale_factor is not meaningful with an explicit size.")
        sizes = _per_axis("output size", size, spatial)
        if not all(isinstance(s, int) and not isinstance(s, bool) for s in sizes):
            raise TypeError(f"interpolate: size must be an int or a sequence of ints, got {size!r}")
        scales: list[float | None] = [None] * len(spatial)
    elif scale_factor is not None:
        factors = [float(f) for f in _per_axis("scale_factor", scale_factor, spatial)]
        sizes = [math.floor(float(n) * f) for n, f in zip(spatial, factors, strict=True)]
        scales = [None] * len(spatial) if recompute_scale_factor else list(factors)
    else:
        raise TinyattnError("either size or scale_factor should be defined")
    if any(s <= 0 for s in sizes):
        raise RuntimeError(
            f"interpolate: input spatial size {list(spatial)} and output size {sizes} "
            "should be greater than 0"
        )
    return sizes, scales


def _source_scale(n_in: int, n_out: int, align_corners: bool, factor: float | None) -> float:
    """PyTorch's area_pixel_compute_scale: source step per output step."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / factor if factor is not None and factor > 0 else n_in / n_out


def _nearest_indices(
    n_in: int, n_out: int, factor: float | None, exact: bool, shortcut: bool
) -> list[int]:
    """src = min(floor(d * scale), n_in - 1); nearest-exact uses floor((d + 0.5) * scale).

    PyTorch's 2-d "nearest" kernel (`shortcut`) reads src = d when out = in and d // 2 when
    out = 2 * in, whatever the scale factor; its 1-d and 3-d kernels do not."""
    if shortcut and n_out == n_in:
        return list(range(n_out))
    if shortcut and n_out == 2 * n_in:
        return [d // 2 for d in range(n_out)]
    scale = _float32(_source_scale(n_in, n_out, False, factor))
    if exact:
        return [min(math.floor((d + 0.5) * scale), n_in - 1) for d in range(n_out)]
    return [min(math.floor(_float32(d * scale)), n_in - 1) for d in range(n_out)]


def _linear_taps(
    n_in: int, n_out: int, align_corners: bool, factor: float | None
) -> list[list[tuple[int, float]]]:
    """Per output position, (source index, weight) for the two linear taps."""
    scale = _source_scale(n_in, n_out, align_corners, factor)
    taps = []
    for d in range(n_out):
        src = scale * d if align_corners else max(scale * (d + 0.5) - 0.5, 0.0)
        i0 = min(int(src), n_in - 1)
        i1 = i0 + 1 if i0 < n_in - 1 else i0
        w1 = min(max(src - i0, 0.0), 1.0)
        taps.append([(i0, 1.0 - w1), (i1, w1)])
    return taps


def _cubic_weights(t: float) -> list[float]:
    """Keys' cubic convolution weights for the taps at offsets -1, 0, 1, 2 from floor(s)."""
    a = CUBIC_A

    def near(x: float) -> float:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: float) -> float:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _cubic_taps(
    n_in: int, n_out: int, align_corners: bool, factor: float | None
) -> list[list[tuple[int, float]]]:
    """Per output position, (source index clamped to the edge, weight) for four cubic taps."""
    scale = _source_scale(n_in, n_out, align_corners, factor)
    taps = []
    for d in range(n_out):
        src = scale * d if align_corners else scale * (d + 0.5) - 0.5  # not clamped at 0
        base = math.floor(src)
        weights = _cubic_weights(src - base)
        taps.append([(min(max(base - 1 + k, 0), n_in - 1), w) for k, w in enumerate(weights)])
    return taps


def _select(x: Tensor, axis: int, indices: list[int]) -> Tensor:
    return x.index_select(axis, Tensor(indices, dtype="int64", device=x.device))


def _weighted(x: Tensor, axis: int, taps: list[list[tuple[int, float]]]) -> Tensor:
    """sum_k x[..., taps[d][k][0], ...] * taps[d][k][1] along `axis`."""
    shape = [1] * x.ndim
    shape[axis] = len(taps)
    out = None
    for k in range(len(taps[0])):
        rows = _select(x, axis, [tap[k][0] for tap in taps])
        weight = Tensor([tap[k][1] for tap in taps], dtype=x.dtype, device=x.device)
        term = rows * weight.reshape(*shape)
        out = term if out is None else out + term
    return out


def _check_mode(input: Tensor, mode: str, align_corners: bool | None, antialias: bool) -> None:
    if mode not in MODES:
        raise NotImplementedError(
            f"interpolate: mode {mode!r} is not supported; supported modes are {', '.join(MODES)}"
        )
    if align_corners is not None and mode not in INTERPOLATING:
        raise TinyattnError(
            "align_corners option can only be set with the interpolating modes: "
            "linear | bilinear | bicubic | trilinear"
        )
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    if input.ndim not in (3, 4, 5):
        raise NotImplementedError(
            "Input Error: Only 3D, 4D and 5D input Tensors supported "
            f"(got {input.ndim}D) for the modes: nearest | linear | bilinear | bicubic | "
            f"trilinear | nearest-exact (got {mode})"
        )
    needed = MODES[mode]
    if needed is not None and input.ndim != needed + 2:
        raise NotImplementedError(
            f"Got {input.ndim}D input, but {mode} mode needs {needed + 2}D input"
        )


def interpolate(
    input: Tensor,
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    """Resample the spatial axes of `input` to `size`, or to floor(in * scale_factor).

    Per axis, with scale = in / out (or 1 / scale_factor when it is given and
    `recompute_scale_factor` is not True): "nearest" reads src = min(floor(d * scale), in - 1),
    "nearest-exact" min(floor((d + 0.5) * scale), in - 1); "linear"/"bilinear"/"trilinear"
    blend the rows floor(s) and floor(s) + 1 at s = max((d + 0.5) * scale - 0.5, 0), or at
    s = d * (in - 1) / (out - 1) when `align_corners`; "bicubic" blends four rows with Keys'
    kernel (a = -0.75), rows past the edge clamped. Like PyTorch, the linear modes copy an axis
    whose size is kept, and 2-d "nearest" reads d when out = in and d // 2 when out = 2 * in,
    whatever the scale factor. ``antialias`` is not supported.
    Shapes: (N, C, *in) -> (N, C, *out) with 1, 2 or 3 spatial axes ("linear": 1,
    "bilinear"/"bicubic": 2, "trilinear": 3).
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"interpolate: expected a Tensor input, got {type(input).__name__}")
    _check_mode(input, mode, align_corners, antialias)
    spatial = tuple(input.shape[2:])
    sizes, factors = _output_sizes(spatial, size, scale_factor, recompute_scale_factor)
    corners = bool(align_corners)
    if mode in INTERPOLATING:
        check_floating(f"interpolate ({mode})", input.array)
    out = input
    for k, (n_in, n_out, factor) in enumerate(zip(spatial, sizes, factors, strict=True)):
        axis = 2 + k
        if mode in ("nearest", "nearest-exact"):
            exact = mode == "nearest-exact"
            shortcut = not exact and len(spatial) == 2
            indices = _nearest_indices(n_in, n_out, factor, exact, shortcut)
            out = _select(out, axis, indices)
        elif mode == "bicubic":
            out = _weighted(out, axis, _cubic_taps(n_in, n_out, corners, factor))
        elif n_out != n_in:  # PyTorch's linear kernels copy an axis whose size is kept
            out = _weighted(out, axis, _linear_taps(n_in, n_out, corners, factor))
    return out


__all__ = ["interpolate"]
