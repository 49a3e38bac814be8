"""nn layer, convolution part: Conv1d/2d, ConvTranspose1d/2d, the pooling layers, BatchNorm1d/2d
and Unflatten, with PyTorch's arguments, defaults, initialisation and state_dict keys.

Imports `tensor`, `creation`, `nn.module`, `nn.layers` (the shared init helpers) and
`nn.functional_conv`, where the computation lives. Weights are drawn from the host RNG.
"""

from __future__ import annotations

import math
from typing import Any

from ..autograd import no_grad
from ..creation import ones, zeros
from ..errors import TinyattnError
from ..tensor import Tensor
from . import functional_conv as F
from . import init
from .layers import _check_sizes, _place, redraw_uniform
from .module import Module, Parameter


# -------------------------------------------------------------------------------- convolution
class _ConvNd(Module):
    """Shared by the convolutions: arguments checked as PyTorch checks them, and PyTorch's
    reset_parameters (kaiming_uniform with a = sqrt(5), i.e. weight and bias ~ U(-1/sqrt(fan_in),
    1/sqrt(fan_in)), fan_in = weight.shape[1] * prod(kernel_size))."""

    spatial = 0
    transposed = False

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        op, n = type(self).__name__, self.spatial
        _check_sizes(op, in_channels=in_channels, out_channels=out_channels, groups=groups)
        if in_channels % groups or out_channels % groups:
            raise TinyattnError(
                f"{op}: in_channels {in_channels} and out_channels {out_channels} must be "
                f"divisible by groups={groups}"
            )
        if padding_mode not in F.PADDING_MODES:
            raise TinyattnError(
                f"{op}: padding_mode must be one of {F.PADDING_MODES}, got {padding_mode!r}"
            )
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = F.int_tuple(op, "kernel_size", kernel_size, n)
        self.stride = F.int_tuple(op, "stride", stride, n)
        self.dilation = F.int_tuple(op, "dilation", dilation, n)
        if isinstance(padding, str):
            F.conv_padding(op, padding, self.kernel_size, self.stride, self.dilation)  # checks
            self.padding = padding
        else:
            self.padding = F.int_tuple(op, "padding", padding, n, minimum=0)
        self.padding_mode = padding_mode
        if self.transposed:
            shape = (in_channels, out_channels // groups, *self.kernel_size)
        else:
            shape = (out_channels, in_channels // groups, *self.kernel_size)
        self.weight = Parameter(zeros(*shape))
        self.register_parameter("bias", Parameter(zeros(out_channels)) if bias else None)
        self.reset_parameters()  # as PyTorch: a subclass's own reset_parameters runs here
        _place(self, device, dtype)

    def reset_parameters(self) -> None:
        """Re-initialise weight and bias in place, as the constructor does:
        U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = weight.shape[1] * prod(kernel_size)."""
        fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
        redraw_uniform(self.weight, self.bias, 1.0 / math.sqrt(fan_in))

    def extra_repr(self) -> str:
        text = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding != (0,) * self.spatial:
            text += f", padding={self.padding!r}"
        if self.dilation != (1,) * self.spatial:
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        if self.padding_mode != "zeros":
            text += f", padding_mode={self.padding_mode!r}"
        return text

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        conv = (F.conv1d, F.conv2d, F.conv3d)[self.spatial - 1]
        padding = self.padding
        if self.padding_mode != "zeros":
            # PyTorch's order: pad by the mode first, then convolve without padding.
            pairs = F.conv_padding("conv", padding, self.kernel_size, self.stride, self.dilation)
            input = F.pad_by_mode(input, F.pad_pairs(pairs), self.padding_mode)  # noqa: A001
            padding = 0
        return conv(input, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class Conv1d(_ConvNd):
    """1-d convolution over (N, C_in, L) -> (N, C_out, L_out); weight (C_out, C_in / groups, k).

    L_out = (L + 2 padding - dilation (k - 1) - 1) // stride + 1."""

    spatial = 1


class Conv2d(_ConvNd):
    """2-d convolution over (N, C_in, H, W) -> (N, C_out, H_out, W_out); weight (C_out,
    C_in / groups, kh, kw). Each output size is Conv1d's formula along its axis."""

    spatial = 2


class Conv3d(_ConvNd):
    """3-d convolution over (N, C_in, D, H, W) -> (N, C_out, D_out, H_out, W_out); weight
    (C_out, C_in / groups, kd, kh, kw). Each output size is Conv1d's formula along its axis."""

    spatial = 3


class _ConvTransposeNd(_ConvNd):
    """Transposed convolution (the input gradient of a convolution); weight (C_in,
    C_out / groups, *kernel). Only padding_mode="zeros", as PyTorch."""

    transposed = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        output_padding: Any = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: Any = 1,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        op = type(self).__name__
        if padding_mode != "zeros" or isinstance(padding, str):
            raise TinyattnError(f"{op}: only padding_mode='zeros' and int padding are supported")
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            device,
            dtype,
        )
        self.output_padding = F.int_tuple(op, "output_padding", output_padding, self.spatial, 0)

    def forward(self, input: Tensor, output_size: Any = None) -> Tensor:  # noqa: A002
        if output_size is not None:
            raise NotImplementedError(
                f"{type(self).__name__}: output_size= is not supported; set output_padding"
            )
        conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[self.spatial - 1]
        return conv(
            input,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self.output_padding,
            self.groups,
            self.dilation,
        )


class ConvTranspose1d(_ConvTransposeNd):
    """(N, C_in, L) -> (N, C_out, L_out), L_out = (L - 1) stride - 2 padding + dilation (k - 1)
    + output_padding + 1."""

    spatial = 1


class ConvTranspose2d(_ConvTransposeNd):
    """(N, C_in, H, W) -> (N, C_out, H_out, W_out), each size ConvTranspose1d's formula."""

    spatial = 2


class ConvTranspose3d(_ConvTransposeNd):
    """(N, C_in, D, H, W) -> (N, C_out, D_out, H_out, W_out), each size ConvTranspose1d's
    formula."""

    spatial = 3


# ------------------------------------------------------------------------------------ pooling
class _Pool(Module):
    """Stores the arguments; forward calls the functional op of the same name."""

    def extra_repr(self) -> str:
        return ", ".join(f"{name}={getattr(self, name)}" for name in self._arguments)


class MaxPool1d(_Pool):
    """The largest value of each window. Shapes: (N, C, L) -> (N, C, L_out)."""

    _arguments = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")
    _function = staticmethod(F.max_pool1d)

    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        dilation: Any = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.dilation, self.ceil_mode = padding, dilation, ceil_mode
        self.return_indices = return_indices

    def forward(self, input: Tensor) -> Any:  # noqa: A002
        return self._function(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            self.ceil_mode,
            self.return_indices,
        )


class MaxPool2d(MaxPool1d):
    """The largest value of each window. Shapes: (N, C, H, W) -> (N, C, H_out, W_out)."""

    _function = staticmethod(F.max_pool2d)


class MaxPool3d(MaxPool1d):
    """The largest value of each window. Shapes: (N, C, D, H, W) -> (N, C, D_out, H_out, W_out)."""

    _function = staticmethod(F.max_pool3d)


class MaxUnpool1d(_Pool):
    """max_pool1d's inverse on its indices. Shapes: (N, C, L) -> (N, C, L_out)."""

    _arguments = ("kernel_size", "stride", "padding")
    _function = staticmethod(F.max_unpool1d)

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0) -> None:
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding = padding

    def forward(
        self,
        input: Tensor,  # noqa: A002
        indices: Tensor,
        output_size: Any = None,
    ) -> Tensor:
        args = (self.kernel_size, self.stride, self.padding, output_size)
        return self._function(input, indices, *args)


class MaxUnpool2d(MaxUnpool1d):
    """max_pool2d's inverse on its indices. Shapes: (N, C, H, W) -> (N, C, H_out, W_out)."""

    _function = staticmethod(F.max_unpool2d)


class MaxUnpool3d(MaxUnpool1d):
    """max_pool3d's inverse on its indices. Shapes: (N, C, D, H, W) -> (N, C, D_out, H_out,
    W_out)."""

    _function = staticmethod(F.max_unpool3d)


class AvgPool1d(_Pool):
    """The mean of each window. Shapes: (N, C, L) -> (N, C, L_out)."""

    _arguments = ("kernel_size", "stride", "padding")

    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> None:
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.ceil_mode, self.count_include_pad = padding, ceil_mode, count_include_pad

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.avg_pool1d(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
        )


class AvgPool2d(_Pool):
    """The mean of each window. Shapes: (N, C, H, W) -> (N, C, H_out, W_out)."""

    _arguments = ("kernel_size", "stride", "padding")

    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.ceil_mode, self.count_include_pad = padding, ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.avg_pool2d(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )


class AvgPool3d(AvgPool2d):
    """The mean of each window. Shapes: (N, C, D, H, W) -> (N, C, D_out, H_out, W_out)."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        args = (self.kernel_size, self.stride, self.padding, self.ceil_mode)
        return F.avg_pool3d(input, *args, self.count_include_pad, self.divisor_override)


class AdaptiveAvgPool1d(_Pool):
    """Average over output_size windows that tile the input: (N, C, L) -> (N, C, output_size)."""

    _arguments = ("output_size",)

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.adaptive_avg_pool1d(input, self.output_size)


class AdaptiveAvgPool2d(AdaptiveAvgPool1d):
    """Average over windows that tile the input: (N, C, H, W) -> (N, C, *output_size)."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.adaptive_avg_pool2d(input, self.output_size)


class AdaptiveAvgPool3d(AdaptiveAvgPool1d):
    """Average over windows that tile the input: (N, C, D, H, W) -> (N, C, *output_size)."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.adaptive_avg_pool3d(input, self.output_size)


# --------------------------------------------------------------------------------- batch norm
class _BatchNorm(Module):
    """Per-channel normalisation with learned scale and shift (init ones and zeros) and running
    statistics (buffers running_mean, running_var, num_batches_tracked, PyTorch's keys).

    In training the batch's statistics normalise and the running ones move towards them by
    `momentum`, or, with momentum=None, become the average of every batch seen so far; in eval
    the running ones normalise (the batch's, without track_running_stats)."""

    dims: tuple[int, ...] = ()

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        _check_sizes(type(self).__name__, num_features=num_features)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.register_parameter("weight", Parameter(ones(num_features)) if affine else None)
        self.register_parameter("bias", Parameter(zeros(num_features)) if affine else None)
        tracked = track_running_stats
        self.register_buffer("running_mean", zeros(num_features) if tracked else None)
        self.register_buffer("running_var", ones(num_features) if tracked else None)
        count = zeros((), dtype="int64") if tracked else None  # a 0-d counter, as PyTorch's
        self.register_buffer("num_batches_tracked", count)
        _place(self, device, dtype)

    def reset_running_stats(self) -> None:
        """running_mean to zeros, running_var to ones, num_batches_tracked to 0, in place."""
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            init.zeros_(self.num_batches_tracked)

    def reset_parameters(self) -> None:
        """The running statistics reset, weight back to ones and bias to zeros, in place."""
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, track_running_stats={self.track_running_stats}"
        )

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        if input.ndim not in self.dims:
            raise TinyattnError(
                f"{type(self).__name__}: expected a {' or '.join(map(str, self.dims))}-d input, "
                f"got shape {input.shape}"
            )
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # the cumulative average: the n-th batch weighs 1 / n
                # A 0-d tensor, not a Python float: reading the count would wait for a GPU.
                factor = 1.0 / self.num_batches_tracked.to(self.running_mean.dtype)
        use_batch = self.training or self.running_mean is None
        keep = not self.training or self.track_running_stats
        return F.batch_norm(
            input,
            self.running_mean if keep else None,
            self.running_var if keep else None,
            self.weight,
            self.bias,
            use_batch,
            factor,
            self.eps,
        )


class BatchNorm1d(_BatchNorm):
    """Batch norm over (N, C) or (N, C, L), statistics per channel C."""

    dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch norm over (N, C, H, W), statistics per channel C."""

    dims = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch norm over (N, C, D, H, W), statistics per channel C."""

    dims = (5,)


class Unflatten(Module):
    """Split axis `dim` into `unflattened_size` (Flatten's inverse).
    Shapes: (..., d, ...) -> (..., *unflattened_size, ...), prod(unflattened_size) = d."""

    def __init__(self, dim: int, unflattened_size: Any) -> None:
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        dim = self.dim % input.ndim
        return input.reshape(*input.shape[:dim], *self.unflattened_size, *input.shape[dim + 1 :])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


__all__ = [
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AvgPool1d",
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv1d",
    "Conv2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "MaxPool1d",
    "MaxPool2d",
    "Unflatten",
]
