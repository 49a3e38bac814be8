"""nn.functional, normalization part: group_norm, instance_norm and rms_norm, with PyTorch's
signatures and meanings (re-exported by `tinyattn.nn.functional`).

Each is a composition of Tensor ops, so gradients (and higher-order ones) come from their rules.
Group and instance norm lay each group (or each sample's channel) out as one row and standardise
it with batch norm's `_batch_normalized` (two-pass variance, float32's precision at a large
mean); the per-channel scale and shift follow. RMS norm divides by the root mean square of the
trailing axes. float16 inputs are computed in float32 and rounded once at the end, as PyTorch's
CPU kernels do. Imports `tensor`, `autograd`, `backend` and `nn.functional_conv`.
"""

# PyTorch's parameter names (input, ...) are kept so keyword callers port unchanged.
# ruff: noqa: A002

from __future__ import annotations

import math
from typing import Any

from ..autograd import no_grad
from ..backend import check_floating, dtype_name, is_half
from ..errors import TinyattnError
from ..tensor import Tensor
from .functional_conv import _batch_normalized

# Machine epsilon of the computation type: rms_norm's default eps (float16 computes in float32).
_EPS = {"float64": 2.0**-52}
_FLOAT32_EPS = 2.0**-23


# ------------------------------------------------------------------------------------ helpers
def _checked_input(op: str, input: Any, min_dims: int) -> Tensor:
    """A floating Tensor of at least `min_dims` dimensions, else PyTorch's error types."""
    if not isinstance(input, Tensor):
        raise TypeError(f"{op}: expected a Tensor input, got {type(input).__name__}")
    check_floating(op, input.array)
    if input.ndim < min_dims:
        raise TinyattnError(
            f"{op}: expected an input with at least {min_dims} dimensions, got shape {input.shape}"
        )
    return input


def _check_vectors(op: str, channels: int, input: Tensor, **vectors: Tensor | None) -> None:
    """Each given per-channel tensor (weight, bias, running stats) has shape (C,)."""
    for name, vector in vectors.items():
        if vector is not None and tuple(vector.shape) != (channels,):
            raise TinyattnError(
                f"{op}: {name} must have shape ({channels},), one value per channel of input "
                f"{input.shape}, got {vector.shape}"
            )


def _widened(x: Tensor) -> Tensor:
    """float16 as float32 (the computation type); other dtypes as they are."""
    return x.float() if is_half(x.array) else x


def _scale_shift(x_hat: Tensor, weight: Tensor | None, bias: Tensor | None, like: Tensor) -> Tensor:
    """y = x_hat * weight + bias per channel (axis 1), rounded once to `like`'s dtype.
    Shapes: x_hat (N, C, ...), weight and bias (C,) -> (N, C, ...)."""
    shape = (1, x_hat.shape[1]) + (1,) * (x_hat.ndim - 2)
    if weight is not None:
        x_hat = x_hat * _widened(weight).reshape(shape)
    if bias is not None:
        x_hat = x_hat + _widened(bias).reshape(shape)
    return x_hat.half() if is_half(like.array) else x_hat


# ----------------------------------------------------------------------------------- group norm
def group_norm(
    input: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise each sample's channels in `num_groups` groups of C / G channels:
    y = (x - mean_g) / sqrt(var_g + eps) * weight + bias, with mean_g and the biased var_g over
    the group's channels and all spatial positions, weight and bias per channel. The same in
    training and eval (no running statistics).
    dL/dx = weight / sqrt(var_g + eps) * (g - mean_g(g) - x_hat * mean_g(g * x_hat)), g the
    gradient of x_hat, from the ops that compute y.
    Shapes: input (N, C, *), weight and bias (C,) -> (N, C, *)."""
    op = "group_norm"
    x = _checked_input(op, input, 2)
    n, channels = x.shape[:2]
    if not isinstance(num_groups, int) or isinstance(num_groups, bool) or num_groups <= 0:
        raise TinyattnError(f"{op}: num_groups must be a positive int, got {num_groups!r}")
    if channels % num_groups:
        raise TinyattnError(
            f"{op}: the {channels} channels of input {x.shape} are not divisible by "
            f"num_groups={num_groups}"
        )
    _check_vectors(op, channels, x, weight=weight, bias=bias)
    per_group = channels // num_groups * math.prod(x.shape[2:])  # values in one group
    if n * per_group == 1:  # PyTorch's check: a variance needs two values
        raise TinyattnError(
            f"{op}: expected more than 1 value per group, got input of shape {x.shape}"
        )
    rows = _widened(x).reshape(n, num_groups, per_group)  # (N, C, *) -> (N, G, C / G * prod(*))
    x_hat, _, _ = _batch_normalized(rows, (2,), eps)
    return _scale_shift(x_hat.reshape(x.shape), weight, bias, x)


# -------------------------------------------------------------------------------- instance norm
def instance_norm(
    input: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise each sample's each channel over its spatial positions:
    y = (x - mean) / sqrt(var + eps) * weight + bias, mean and the biased var per (n, c).
    With use_input_stats=False the running statistics normalise instead. Given running
    statistics and use_input_stats, they move towards the batch average of the instances' ones,
    in place: r = (1 - momentum) r + momentum * mean_n(s), with the unbiased variance.
    dL/dx = weight / sqrt(var + eps) * (g - mean(g) - x_hat * mean(g * x_hat)) per (n, c).
    Shapes: input (N, C, *), running stats, weight and bias (C,) -> (N, C, *)."""
    op = "instance_norm"
    x = _checked_input(op, input, 2)
    n, channels = x.shape[:2]
    stats = {"running_mean": running_mean, "running_var": running_var}
    _check_vectors(op, channels, x, weight=weight, bias=bias, **stats)
    axes = tuple(range(2, x.ndim))
    count = math.prod(x.shape[2:])
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise TinyattnError(
                f"{op}: running_mean and running_var are needed when use_input_stats=False"
            )
        shape = (1, channels) + (1,) * len(axes)
        mean, var = _widened(running_mean).reshape(shape), _widened(running_var).reshape(shape)
        return _scale_shift((_widened(x) - mean) / (var + eps).sqrt(), weight, bias, x)
    if count == 1:
        raise TinyattnError(
            f"{op}: expected more than 1 spatial element when using the input's statistics, "
            f"got input of shape {x.shape}"
        )
    x_hat, mean, var = _batch_normalized(_widened(x), axes, eps)  # mean, var (N, C, 1, ...)
    if running_mean is not None and running_var is not None and n > 0:
        with no_grad():
            batch_mean = mean.reshape(n, channels).mean(0)
            unbiased = var.detach().reshape(n, channels).mean(0) * (count / (count - 1))
            running_mean.mul_(1.0 - momentum).add_(batch_mean.to(running_mean.dtype) * momentum)
            running_var.mul_(1.0 - momentum).add_(unbiased.to(running_var.dtype) * momentum)
    return _scale_shift(x_hat, weight, bias, x)


# ------------------------------------------------------------------------------------- RMS norm
def rms_norm(
    input: Tensor,
    normalized_shape: int | tuple[int, ...] | list[int],
    weight: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    """y = x / sqrt(mean(x^2) + eps) * weight, the mean over the trailing `normalized_shape`
    axes (no centring, no bias). eps=None is the machine epsilon of the computation type
    (float32's for float16 and float32 inputs, float64's for float64).
    dL/dx = (g - x_hat * mean(g * x_hat)) / sqrt(mean(x^2) + eps), g = dL/dy * weight.
    Shapes: input (..., *normalized_shape), weight normalized_shape -> input's shape."""
    op = "rms_norm"
    x = _checked_input(op, input, 0)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or len(shape) > x.ndim or tuple(x.shape[x.ndim - len(shape) :]) != shape:
        raise TinyattnError(
            f"{op}: normalized_shape {shape} does not match the trailing axes of input shape "
            f"{x.shape}"
        )
    if weight is not None and tuple(weight.shape) != shape:
        raise TinyattnError(
            f"{op}: weight has shape {weight.shape}, expected normalized_shape {shape}"
        )
    wide = _widened(x).contiguous()  # row-major: the sums add pairwise
    if eps is None:
        eps = _EPS.get(dtype_name(wide.dtype), _FLOAT32_EPS)
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    out = wide / ((wide * wide).mean(axes, keepdims=True) + eps).sqrt()
    if weight is not None:
        out = out * _widened(weight)
    return out.half() if is_half(x.array) else out


__all__ = ["group_norm", "instance_norm", "rms_norm"]
