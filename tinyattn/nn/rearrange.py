"""nn layer, rearrangement part: Unfold and Fold (sliding windows to columns and back) and
PixelShuffle and PixelUnshuffle (channels to space and back), PyTorch's layers without
parameters around `F.unfold`, `F.fold`, `F.pixel_shuffle` and `F.pixel_unshuffle`.

Imports `tensor`, `nn.module`, `nn.functional_conv` and `nn.functional_shuffle`. Arguments are
kept as given (an int or a tuple), as PyTorch keeps them; the functions check them at the first
call, as PyTorch's do.
"""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor
from .functional_conv import fold, unfold
from .functional_shuffle import pixel_shuffle, pixel_unshuffle
from .module import Module


class Unfold(Module):
    """im2col: every kernel_size window of each image as a column, channel-major rows.
    Shapes: (N, C, H, W) or (C, H, W) -> (N, C * kh * kw, L) or (C * kh * kw, L),
    L = the number of windows."""

    def __init__(
        self, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1
    ) -> None:
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
            f"padding={self.padding}, stride={self.stride}"
        )


class Fold(Module):
    """col2im, Unfold's adjoint: columns added back onto images of output_size, overlapping
    windows summed. Shapes: (N, C * kh * kw, L) or (C * kh * kw, L) -> (N, C, *output_size)
    or (C, *output_size)."""

    def __init__(
        self,
        output_size: Any,
        kernel_size: Any,
        dilation: Any = 1,
        padding: Any = 0,
        stride: Any = 1,
    ) -> None:
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return fold(
            input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride
        )

    def extra_repr(self) -> str:
        return (
            f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
            f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}"
        )


class PixelShuffle(Module):
    """Rearrange r * r channels into r x r blocks of pixels (sub-pixel upsampling), r =
    upscale_factor. Shapes: (*, C * r^2, H, W) -> (*, C, H * r, W * r)."""

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """PixelShuffle's inverse: r x r blocks of pixels into r * r channels, r = downscale_factor.
    Shapes: (*, C, H * r, W * r) -> (*, C * r^2, H, W)."""

    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


__all__ = ["Fold", "PixelShuffle", "PixelUnshuffle", "Unfold"]
