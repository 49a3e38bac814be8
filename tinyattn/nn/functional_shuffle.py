"""nn.functional, pixel shuffle part: pixel_shuffle and pixel_unshuffle, with PyTorch's
signatures and meanings (re-exported by `tinyattn.nn.functional`).

Both move values between the channel axis and the two spatial axes, one reshape, one permute
and one reshape: pixel_shuffle turns r * r channels into an r x r block of pixels (sub-pixel
upsampling), pixel_unshuffle is its inverse. The gradient is the inverse rearrangement, from the
reshape and permute ops. Any dtype; any number of leading batch axes. Imports `tensor`.
"""

# PyTorch's parameter names (input, ...) are kept so keyword callers port unchanged.
# ruff: noqa: A002

from __future__ import annotations

from ..errors import TinyattnError
from ..tensor import Tensor


def _checked(op: str, input: Tensor, factor: int, name: str) -> Tensor:
    if not isinstance(input, Tensor):
        raise TypeError(f"{op}: expected a Tensor input, got {type(input).__name__}")
    if not isinstance(factor, int) or isinstance(factor, bool):
        raise TypeError(f"{op}: {name} must be an int, got {type(factor).__name__}")
    if factor <= 0:
        raise TinyattnError(f"{op}: {name} must be positive, got {factor}")
    if input.ndim < 3:
        raise TinyattnError(
            f"{op}: expected an input of at least 3 dimensions (*, C, H, W), got shape "
            f"{input.shape}"
        )
    return input


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """Rearrange channels into space: y[..., c, h * r + i, w * r + j] = x[..., c * r^2 + i * r + j,
    h, w], r = upscale_factor. dL/dx = pixel_unshuffle(dL/dy, r).
    Shapes: (*, C * r^2, H, W) -> (*, C, H * r, W * r)."""
    op, r = "pixel_shuffle", upscale_factor
    x = _checked(op, input, r, "upscale_factor")
    *batch, channels, height, width = x.shape
    if channels % (r * r):
        raise TinyattnError(
            f"{op}: the channel axis of input {x.shape} ({channels}) is not divisible by "
            f"upscale_factor^2 = {r * r}"
        )
    k = len(batch)
    blocks = x.reshape(*batch, channels // (r * r), r, r, height, width)  # (*, C, r, r, H, W)
    blocks = blocks.permute(*range(k), k, k + 3, k + 1, k + 4, k + 2)  # (*, C, H, r, W, r)
    return blocks.reshape(*batch, channels // (r * r), height * r, width * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """Rearrange space into channels, pixel_shuffle's inverse:
    y[..., c * r^2 + i * r + j, h, w] = x[..., c, h * r + i, w * r + j], r = downscale_factor.
    dL/dx = pixel_shuffle(dL/dy, r).
    Shapes: (*, C, H * r, W * r) -> (*, C * r^2, H, W)."""
    op, r = "pixel_unshuffle", downscale_factor
    x = _checked(op, input, r, "downscale_factor")
    *batch, channels, height, width = x.shape
    for axis, size in (("height", height), ("width", width)):
        if size % r:
            raise TinyattnError(
                f"{op}: the {axis} of input {x.shape} ({size}) is not divisible by "
                f"downscale_factor={r}"
            )
    k = len(batch)
    blocks = x.reshape(*batch, channels, height // r, r, width // r, r)  # (*, C, H, r, W, r)
    blocks = blocks.permute(*range(k), k, k + 2, k + 4, k + 1, k + 3)  # (*, C, r, r, H, W)
    return blocks.reshape(*batch, channels * r * r, height // r, width // r)


__all__ = ["pixel_shuffle", "pixel_unshuffle"]
