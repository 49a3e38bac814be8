"""nn layer, normalization part: GroupNorm, InstanceNorm1d/2d/3d and RMSNorm, with PyTorch's
arguments, defaults, initialisation (weight ones, bias zeros) and state_dict keys.

Imports `creation`, `errors`, `tensor`, `nn.module`, `nn.init`, `nn.layers` (the shared checks)
and `nn.functional_norm`, where the computation lives. (LayerNorm is in `nn.layers`, batch norm
in `nn.conv`.)
"""

from __future__ import annotations

import warnings
from typing import Any

from ..creation import ones, zeros
from ..errors import TinyattnError
from ..tensor import Tensor
from . import functional_norm as F
from . import init
from .layers import _check_sizes, _place
from .module import Module, Parameter


class GroupNorm(Module):
    """Normalise each sample over groups of channels: the C channels split into num_groups
    groups, each standardised over its channels and positions, then scaled and shifted per
    channel: y = (x - mean_g) / sqrt(var_g + eps) * weight + bias. No running statistics: the
    same in training and eval. Shapes: (N, C, *) -> (N, C, *), C = num_channels."""

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device: Any = None,
        dtype: Any = None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        _check_sizes("GroupNorm", num_groups=num_groups, num_channels=num_channels)
        if num_channels % num_groups:
            raise TinyattnError(
                f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups "
                f"({num_groups})"
            )
        self.num_groups, self.num_channels = num_groups, num_channels
        self.eps, self.affine = eps, affine
        self.register_parameter("weight", Parameter(ones(num_channels)) if affine else None)
        has_bias = affine and bias
        self.register_parameter("bias", Parameter(zeros(num_channels)) if has_bias else None)
        _place(self, device, dtype)

    def reset_parameters(self) -> None:
        """Weight back to ones and bias to zeros, in place."""
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
            f"bias={self.bias is not None}"
        )


class _InstanceNorm(Module):
    """Shared by the instance norms: each sample's each channel standardised over its positions,
    then (affine=True) scaled and shifted per channel. With track_running_stats, training moves
    the buffers running_mean and running_var (PyTorch's keys, with num_batches_tracked) towards
    the batch's average statistics by `momentum` (None counts as 0), and eval normalises with
    them; without it both modes use the input's statistics. Defaults are PyTorch's: no affine
    parameters, no running statistics."""

    spatial = 0  # the number of spatial axes

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
        device: Any = None,
        dtype: Any = None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        _check_sizes(type(self).__name__, num_features=num_features)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.register_parameter("weight", Parameter(ones(num_features)) if affine else None)
        has_bias = affine and bias
        self.register_parameter("bias", Parameter(zeros(num_features)) if has_bias else None)
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
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.bias is not None}, "
            f"track_running_stats={self.track_running_stats}"
        )

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        name, unbatched = type(self).__name__, self.spatial + 1
        if input.ndim not in (unbatched, unbatched + 1):
            raise TinyattnError(
                f"{name}: expected a {unbatched}-d (unbatched) or {unbatched + 1}-d input, got "
                f"shape {input.shape}"
            )
        channels = input.shape[input.ndim - unbatched]
        if channels != self.num_features:
            if self.affine:
                raise TinyattnError(
                    f"{name}: input {input.shape} has {channels} channels, expected "
                    f"num_features={self.num_features}"
                )
            warnings.warn(
                f"{name}: input {input.shape} has {channels} channels, not num_features="
                f"{self.num_features} (unused without affine parameters)",
                stacklevel=2,
            )
        x = input.unsqueeze(0) if input.ndim == unbatched else input
        out = F.instance_norm(
            x,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            self.training or not self.track_running_stats,
            0.0 if self.momentum is None else self.momentum,
            self.eps,
        )
        return out.squeeze(0) if input.ndim == unbatched else out


class InstanceNorm1d(_InstanceNorm):
    """Instance norm over (N, C, L) or (C, L), statistics per sample and channel."""

    spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance norm over (N, C, H, W) or (C, H, W), statistics per sample and channel."""

    spatial = 2


class InstanceNorm3d(_InstanceNorm):
    """Instance norm over (N, C, D, H, W) or (C, D, H, W), statistics per sample and channel."""

    spatial = 3


class RMSNorm(Module):
    """Root-mean-square norm over the trailing `normalized_shape` axes, then a learned scale
    (init ones; no bias): y = x / sqrt(mean(x^2) + eps) * weight. eps=None uses the machine
    epsilon of the computation type (see `F.rms_norm`).
    Shapes: (..., *normalized_shape) -> the same."""

    def __init__(
        self,
        normalized_shape: int | tuple[int, ...] | list[int],
        eps: float | None = None,
        elementwise_affine: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        shape = (
            (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        )
        _check_sizes("RMSNorm", **{f"normalized_shape[{i}]": n for i, n in enumerate(shape)})
        self.normalized_shape, self.eps = shape, eps
        self.elementwise_affine = elementwise_affine
        weight = Parameter(ones(*shape)) if elementwise_affine else None
        self.register_parameter("weight", weight)
        _place(self, device, dtype)

    def reset_parameters(self) -> None:
        """Weight back to ones, in place."""
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


__all__ = [
    "GroupNorm",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "RMSNorm",
]
