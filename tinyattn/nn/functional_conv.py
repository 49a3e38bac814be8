"""nn.functional, convolution part: conv1d/2d, their transposes, pooling, unfold/fold and
batch_norm, with PyTorch's signatures and meanings (re-exported by `tinyattn.nn.functional`).

A convolution is a sliding window and one product: `ops.Unfold` lays the windows of the padded
input out as axes (N, C, *kernel, *out), the im2col matrix (N, C * K, P) of K kernel offsets and
P output positions, and the weight (C_out, C * K) times it sums over the channels of a group and
the kernel offsets. Its gradients come from those two ops: the weight's is the product of the
output gradient with the windows, the input's the transposed product folded back onto the input
(`ops.Fold`, a scatter-add). Pooling reduces the same windows (max with
the first largest value's gradient, as PyTorch; mean with PyTorch's divisor). Inputs are
batched (N, C, *size) or unbatched (C, *size); spatial axes are the last one (1-d) or two (2-d).
"""

# PyTorch's parameter names (input, ...) are kept so keyword callers port unchanged.
# ruff: noqa: A001, A002

from __future__ import annotations

import math
from typing import Any

from ..autograd import no_grad
from ..backend import check_floating, dtype_name, is_half, window_counts
from ..creation import arange, ones, tensor, zeros
from ..errors import TinyattnError
from ..ops import Fold, Unfold
from ..tensor import Tensor
from ..tensor_functions import pad as constant_pad

PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


# ------------------------------------------------------------------------------------ helpers
def int_tuple(op: str, name: str, value: Any, n: int, minimum: int = 1) -> tuple[int, ...]:
    """An int or a sequence of n ints as a tuple of n ints, each at least `minimum`."""
    values = (value,) * n if isinstance(value, int) else tuple(value)
    if len(values) != n or not all(isinstance(v, int) and v >= minimum for v in values):
        raise TinyattnError(
            f"{op}: {name} must be an int >= {minimum} or {n} of them, got {value!r}"
        )
    return values


def _batched(op: str, input: Tensor, spatial: int) -> tuple[Tensor, bool]:
    """(N, C, *size) as it is, (C, *size) with a batch axis of 1; anything else refused."""
    if not isinstance(input, Tensor):
        raise TypeError(f"{op}: expected a Tensor input, got {type(input).__name__}")
    if input.ndim == spatial + 2:
        return input, False
    if input.ndim == spatial + 1:
        return input.unsqueeze(0), True
    raise RuntimeError(
        f"{op}: expected a {spatial + 1}-d (unbatched) or {spatial + 2}-d (batched) input, "
        f"got shape {input.shape}"
    )


def pad_pairs(pairs: list[tuple[int, int]]) -> tuple[int, ...]:
    """Per-axis (before, after) pairs, first axis first, in F.pad's order (last axis first)."""
    return tuple(amount for pair in reversed(pairs) for amount in pair)


def _windows(op: str, x: Tensor, kernel: tuple, stride: tuple, dilation: tuple) -> Tensor:
    """Unfold with PyTorch's error when the kernel does not fit the (padded) input."""
    size = x.shape[2:]
    if any(n < 1 for n in window_counts(size, kernel, stride, dilation)):
        raise RuntimeError(
            f"{op}: the padded input of spatial size {size} is smaller than the dilated kernel "
            f"{tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation, strict=True))}"
        )
    return Unfold.apply(x, window=kernel, step=stride, dilation=dilation)


def pad_by_mode(input: Tensor, pad: tuple, mode: str) -> Tensor:
    """F.pad's "reflect", "replicate" and "circular" modes (and "zeros"): each padded position
    reads a position of the input, so the padding is one gather per axis and its gradient adds
    back there. `pad` is in F.pad's order, (before, after) of the last axis first."""
    if mode in ("zeros", "constant"):
        return constant_pad(input, pad)
    if mode not in PADDING_MODES:
        raise TinyattnError(f"pad: mode must be one of {PADDING_MODES}, got {mode!r}")
    out = input
    for pair in range(len(pad) // 2):
        axis, before, after = input.ndim - 1 - pair, pad[2 * pair], pad[2 * pair + 1]
        n = input.shape[axis]
        if mode == "reflect" and max(before, after) >= n:
            raise TinyattnError(
                f"pad: reflect padding ({before}, {after}) must be smaller than dim {axis} of "
                f"shape {input.shape}"
            )
        sources = [_source(i, n, mode) for i in range(-before, n + after)]
        out = out[(slice(None),) * axis + (sources,)]
    return out


def _source(i: int, n: int, mode: str) -> int:
    """The input position a padded position i (of an axis of length n) copies."""
    if mode == "replicate":
        return min(max(i, 0), n - 1)
    if mode == "circular":
        return i % n
    period = 2 * (n - 1)  # reflect: ... 2 1 [0 1 2 ... n-1] n-2 ...
    i = abs(i) % period if period else 0
    return period - i if i >= n else i


# ------------------------------------------------------------------------------- convolution
def conv_padding(op: str, padding: Any, kernel: tuple, stride: tuple, dilation: tuple) -> list:
    """(before, after) per spatial axis: ints, "valid" (none) or "same" (output size = input
    size; an odd total puts the extra element after, as PyTorch)."""
    n = len(kernel)
    if padding == "valid":
        return [(0, 0)] * n
    if padding == "same":
        if any(s != 1 for s in stride):
            raise TinyattnError(f"{op}: padding='same' is not supported for strided convolutions")
        totals = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
        return [(t // 2, t - t // 2) for t in totals]
    if isinstance(padding, str):
        raise TinyattnError(
            f"{op}: padding must be 'valid', 'same', an int or ints, got {padding!r}"
        )
    return [(p, p) for p in int_tuple(op, "padding", padding, n, minimum=0)]


def _check_conv(op: str, x: Tensor, weight: Tensor, bias: Any, groups: int, spatial: int) -> None:
    """PyTorch's shape rules: weight (C_out, C_in / groups, *kernel), groups dividing both;
    floating input and weight of one dtype (PyTorch refuses a mix too)."""
    check_floating(op, x.array)
    if not isinstance(weight, Tensor) or weight.dtype != x.dtype:
        raise RuntimeError(
            f"{op}: input ({dtype_name(x.dtype)}) and weight "
            f"({dtype_name(getattr(weight, 'dtype', type(weight)))}) must have the same dtype"
        )
    if not isinstance(groups, int) or groups < 1:
        raise TinyattnError(f"{op}: groups must be a positive int, got {groups!r}")
    if weight.ndim != spatial + 2:
        raise RuntimeError(
            f"{op}: weight must be {spatial + 2}-d (out_channels, in_channels / groups, "
            f"*kernel), got shape {weight.shape}"
        )
    out_channels, group_channels = weight.shape[:2]
    if out_channels % groups:
        raise RuntimeError(
            f"{op}: out_channels {out_channels} (weight {weight.shape}) is not divisible by "
            f"groups={groups}"
        )
    if x.shape[1] != group_channels * groups:
        raise RuntimeError(
            f"{op}: input of shape {x.shape} has {x.shape[1]} channels, but weight of shape "
            f"{weight.shape} with groups={groups} expects {group_channels * groups}"
        )
    if bias is not None and tuple(bias.shape) != (out_channels,):
        raise RuntimeError(f"{op}: bias must have shape ({out_channels},), got {bias.shape}")


def _conv(
    op: str,
    input: Tensor,
    weight: Tensor,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: int,
    spatial: int,
) -> Tensor:
    """y[n, o, *p] = bias[o] + sum over c in o's group and k of x[n, c, *(p * stride + k *
    dilation)] * weight[o, c, *k]: the weight times the windows, one batched matrix product.

    Shapes: input (N, C_in, *size), weight (C_out, C_in / G, *kernel) -> (N, C_out, *out)."""
    x, unbatched = _batched(op, input, spatial)
    _check_conv(op, x, weight, bias, groups, spatial)
    kernel = tuple(weight.shape[2:])
    stride = int_tuple(op, "stride", stride, spatial)
    dilation = int_tuple(op, "dilation", dilation, spatial)
    pairs = conv_padding(op, padding, kernel, stride, dilation)
    if any(amount for pair in pairs for amount in pair):
        x = constant_pad(x, pad_pairs(pairs))
    windows = _windows(op, x, kernel, stride, dilation)  # (N, C_in, *kernel, *out)
    n, out_size = x.shape[0], windows.shape[2 + spatial :]
    out_channels, group_channels = weight.shape[:2]
    rows = group_channels * math.prod(kernel)  # Q = C_in / G * K products per output element
    # (N, C_in, *kernel, *out) -> (N, G, Q, P), P = prod(out): the im2col matrix of each group
    columns = windows.reshape(n, groups, rows, math.prod(out_size))
    w = weight.reshape(groups, out_channels // groups, rows)  # (G, C_out / G, Q)
    # (G, C_out / G, Q) @ (N, G, Q, P) -> (N, G, C_out / G, P), row-major (N, C_out, *out):
    # a batch norm's sums over (N, *out) then read contiguous memory, which NumPy adds
    # pairwise; with the channels varying fastest it adds one element at a time (a float32
    # error of 1e-5 instead of 1e-7 over 32,768 values).
    out = (w @ columns).reshape(n, out_channels, *out_size)
    if bias is not None:
        out = out + bias.reshape(out_channels, *(1,) * spatial)
    return out.squeeze(0) if unbatched else out


def conv1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """1-d convolution (cross-correlation, as PyTorch).
    Shapes: (N, C_in, L) -> (N, C_out, L_out)."""
    return _conv("conv1d", input, weight, bias, stride, padding, dilation, groups, 1)


def conv2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """2-d convolution (cross-correlation, as PyTorch).
    Shapes: (N, C_in, H, W) -> (N, C_out, H_out, W_out)."""
    return _conv("conv2d", input, weight, bias, stride, padding, dilation, groups, 2)


def conv3d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """3-d convolution (cross-correlation, as PyTorch).
    Shapes: (N, C_in, D, H, W) -> (N, C_out, D_out, H_out, W_out)."""
    return _conv("conv3d", input, weight, bias, stride, padding, dilation, groups, 3)


def _conv_transpose(
    op: str,
    input: Tensor,
    weight: Tensor,
    bias: Any,
    stride: Any,
    padding: Any,
    output_padding: Any,
    groups: int,
    dilation: Any,
    spatial: int,
) -> Tensor:
    """The adjoint of `_conv` with respect to its input: each input element scales the weight
    and the products are folded (added) onto the output, then `padding` is cropped.

    Shapes: input (N, C_in, *size), weight (C_in, C_out / G, *kernel) -> (N, C_out, *out),
    out = (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1."""
    x, unbatched = _batched(op, input, spatial)
    if not isinstance(groups, int) or groups < 1 or weight.ndim != spatial + 2:
        raise RuntimeError(
            f"{op}: weight must be {spatial + 2}-d (in_channels, out_channels / groups, *kernel) "
            f"and groups a positive int, got weight {weight.shape}, groups={groups!r}"
        )
    in_channels, group_out = weight.shape[:2]
    if x.shape[1] != in_channels or in_channels % groups:
        raise RuntimeError(
            f"{op}: input of shape {x.shape} needs {in_channels} channels divisible by "
            f"groups={groups} for weight of shape {weight.shape}"
        )
    kernel, size = tuple(weight.shape[2:]), x.shape[2:]
    stride = int_tuple(op, "stride", stride, spatial)
    dilation = int_tuple(op, "dilation", dilation, spatial)
    pads = int_tuple(op, "padding", padding, spatial, minimum=0)
    extra = int_tuple(op, "output_padding", output_padding, spatial, minimum=0)
    if any(e >= max(s, d) for e, s, d in zip(extra, stride, dilation, strict=True)):
        raise TinyattnError(f"{op}: output_padding {extra} must be smaller than stride or dilation")
    n, out_channels = x.shape[0], group_out * groups
    # (G, C_in / G, C_out / G * K) transposed @ (N, G, C_in / G, P) -> (N, G, C_out / G * K, P)
    w = weight.reshape(groups, in_channels // groups, group_out * math.prod(kernel))
    columns = w.mT @ x.reshape(n, groups, in_channels // groups, math.prod(size))
    cols = columns.reshape(n, out_channels, *kernel, *size)  # (N, C_out, *kernel, *size)
    full = tuple(
        (m - 1) * s + d * (k - 1) + 1
        for m, s, d, k in zip(size, stride, dilation, kernel, strict=True)
    )
    out = Fold.apply(cols, size=full, window=kernel, step=stride, dilation=dilation)
    out = constant_pad(out, pad_pairs([(-p, e - p) for p, e in zip(pads, extra, strict=True)]))
    if bias is not None:
        out = out + bias.reshape(out_channels, *(1,) * spatial)
    return out.squeeze(0) if unbatched else out


def conv_transpose1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """1-d transposed convolution (conv1d's input gradient). Shapes: (N, C_in, L) -> (N, C_out,
    L_out)."""
    return _conv_transpose(
        "conv_transpose1d",
        input,
        weight,
        bias,
        stride,
        padding,
        output_padding,
        groups,
        dilation,
        1,
    )


def conv_transpose2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """2-d transposed convolution (conv2d's input gradient).
    Shapes: (N, C_in, H, W) -> (N, C_out, H_out, W_out)."""
    return _conv_transpose(
        "conv_transpose2d",
        input,
        weight,
        bias,
        stride,
        padding,
        output_padding,
        groups,
        dilation,
        2,
    )


def conv_transpose3d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """3-d transposed convolution (conv3d's input gradient).
    Shapes: (N, C_in, D, H, W) -> (N, C_out, D_out, H_out, W_out)."""
    args = (stride, padding, output_padding, groups, dilation, 3)
    return _conv_transpose("conv_transpose3d", input, weight, bias, *args)


# ------------------------------------------------------------------------------------ pooling
def _pool_geometry(
    op: str, size: tuple, kernel: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool
) -> tuple:
    """Kernel, stride, padding, dilation and the (before, after) padding per axis: after covers
    the last window ceil_mode adds (a window must start inside the input or its left padding).
    """
    n = len(size)
    kernel = int_tuple(op, "kernel_size", kernel, n)
    stride = kernel if stride is None or stride == [] else int_tuple(op, "stride", stride, n)
    pads = int_tuple(op, "padding", padding, n, minimum=0)
    dilation = int_tuple(op, "dilation", dilation, n)
    if any(2 * p > k for p, k in zip(pads, kernel, strict=True)):
        raise TinyattnError(
            f"{op}: padding {pads} should be at most half of the kernel size {kernel}"
        )
    pairs = []
    for m, k, s, p, d in zip(size, kernel, stride, pads, dilation, strict=True):
        span = d * (k - 1) + 1
        if m + 2 * p < span:
            raise RuntimeError(
                f"{op}: input of spatial size {size} padded by {pads} is smaller than the "
                f"kernel {kernel} (dilation {dilation})"
            )
        count = (m + 2 * p - span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (count - 1) * s >= m + p:
            count -= 1
        pairs.append((p, max((count - 1) * s + span - m - p, p)))
    return kernel, stride, dilation, pairs


def _max_pool(
    op: str,
    input: Tensor,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    ceil_mode: bool,
    return_indices: bool,
    spatial: int,
) -> Any:
    """y = the largest value of each window (padding counts as -inf); the gradient goes to the
    first largest value, as PyTorch's; indices are flat positions in each (unpadded) plane."""
    x, unbatched = _batched(op, input, spatial)
    size = x.shape[2:]
    kernel, stride, dilation, pairs = _pool_geometry(
        op, size, kernel_size, stride, padding, dilation, ceil_mode
    )
    padded = constant_pad(x, pad_pairs(pairs), value=-math.inf)
    windows = _windows(op, padded, kernel, stride, dilation)  # (N, C, *kernel, *out)
    out_size = windows.shape[2 + spatial :]
    windows = windows.reshape(*windows.shape[:2], math.prod(kernel), *out_size)  # (N, C, K, *out)
    first = windows.argmax(2, keepdim=True)  # (N, C, 1, *out)
    out = windows.gather(2, first).squeeze(2)
    if not return_indices:
        return out.squeeze(0) if unbatched else out
    indices = _plane_indices(first.squeeze(2), size, out_size, kernel, stride, dilation, pairs)
    return (out.squeeze(0), indices.squeeze(0)) if unbatched else (out, indices)


def _plane_indices(
    first: Tensor,
    size: tuple,
    out_size: tuple,
    kernel: tuple,
    stride: tuple,
    dilation: tuple,
    pairs: list,
) -> Tensor:
    """The flat position in the unpadded plane of each window's chosen offset `first`."""
    with no_grad():
        flat, rest = 0, first
        for axis in reversed(range(len(size))):
            offset, rest = rest % kernel[axis], rest // kernel[axis]
            shape = [1] * len(size)
            shape[axis] = out_size[axis]
            start = tensor(list(range(out_size[axis])), device=first.device).reshape(*shape)
            position = start * stride[axis] + offset * dilation[axis] - pairs[axis][0]
            flat = flat + position * math.prod(size[axis + 1 :])
        return flat


def max_pool1d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """The largest value of each window. Shapes: (N, C, L) -> (N, C, L_out)."""
    return _max_pool(
        "max_pool1d", input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1
    )


def max_pool2d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """The largest value of each window. Shapes: (N, C, H, W) -> (N, C, H_out, W_out)."""
    return _max_pool(
        "max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2
    )


def max_pool3d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """The largest value of each window. Shapes: (N, C, D, H, W) -> (N, C, D_out, H_out, W_out)."""
    return _max_pool(
        "max_pool3d", input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 3
    )


def _max_unpool(
    op: str,
    input: Tensor,
    indices: Tensor,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    output_size: Any,
    spatial: int,
) -> Tensor:
    """The max pool's values put back at their `indices` (flat positions in each output plane,
    as max_pool's return_indices gives them), zeros elsewhere. A place named twice (overlapping
    windows that chose one element) is written with that one value; each input gets the
    gradient of its place: dL/dx = g at indices.

    Shapes: input and indices (N, C, *size) -> (N, C, *out), out = (size - 1) stride - 2
    padding + kernel unless output_size is given (within stride of that)."""
    x, unbatched = _batched(op, input, spatial)
    index, _ = _batched(op, indices, spatial)
    if index.shape != x.shape or not dtype_name(index.dtype).startswith("int"):
        raise RuntimeError(
            f"{op}: indices must be an integer tensor of the input's shape {x.shape}, got "
            f"shape {index.shape} and dtype {dtype_name(index.dtype)}"
        )
    kernel = int_tuple(op, "kernel_size", kernel_size, spatial)
    stride = kernel if stride is None else int_tuple(op, "stride", stride, spatial)
    pads = int_tuple(op, "padding", padding, spatial, minimum=0)
    default = tuple(
        (n - 1) * s - 2 * p + k for n, s, p, k in zip(x.shape[2:], stride, pads, kernel)
    )
    size = default if output_size is None else tuple(output_size)[-spatial:]
    if len(size) != spatial or not all(
        d - s < n < d + s for n, d, s in zip(size, default, stride, strict=True)
    ):
        raise TinyattnError(
            f"{op}: output_size {output_size!r} must be {spatial} sizes, each within its stride "
            f"{stride} of the default size {default}"
        )
    n, c, plane = x.shape[0], x.shape[1], math.prod(size)
    flat = index.reshape(n, c, -1)
    if flat.numel() and bool(((flat < 0) | (flat >= plane)).any()):
        raise RuntimeError(f"{op}: found an index out of the output plane of size {size}")
    out = zeros(n, c, plane, dtype=x.dtype, device=x.device)
    rows = arange(n, device=x.device).reshape(n, 1, 1)
    channels = arange(c, device=x.device).reshape(1, c, 1)
    out[rows, channels, flat] = x.reshape(n, c, -1)
    out = out.reshape(n, c, *size)
    return out.squeeze(0) if unbatched else out


def max_unpool1d(
    input: Tensor,
    indices: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    output_size: Any = None,
) -> Tensor:
    """max_pool1d's inverse on its indices. Shapes: (N, C, L) -> (N, C, L_out)."""
    args = (kernel_size, stride, padding, output_size, 1)
    return _max_unpool("max_unpool1d", input, indices, *args)


def max_unpool2d(
    input: Tensor,
    indices: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    output_size: Any = None,
) -> Tensor:
    """max_pool2d's inverse on its indices. Shapes: (N, C, H, W) -> (N, C, H_out, W_out)."""
    args = (kernel_size, stride, padding, output_size, 2)
    return _max_unpool("max_unpool2d", input, indices, *args)


def max_unpool3d(
    input: Tensor,
    indices: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    output_size: Any = None,
) -> Tensor:
    """max_pool3d's inverse on its indices. Shapes: (N, C, D, H, W) -> (N, C, D_out, H_out,
    W_out)."""
    args = (kernel_size, stride, padding, output_size, 3)
    return _max_unpool("max_unpool3d", input, indices, *args)


def _avg_pool(
    op: str,
    input: Tensor,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Any,
    spatial: int,
) -> Tensor:
    """y = the sum of each window / its divisor: divisor_override, else the window's positions
    inside the input (and inside its padding with count_include_pad), PyTorch's rule."""
    x, unbatched = _batched(op, input, spatial)
    size = x.shape[2:]
    kernel, stride, dilation, pairs = _pool_geometry(
        op, size, kernel_size, stride, padding, 1, ceil_mode
    )
    sums = _windows(op, constant_pad(x, pad_pairs(pairs)), kernel, stride, dilation)
    sums = sums.sum(tuple(range(2, 2 + spatial)))  # (N, C, *kernel, *out) -> (N, C, *out)
    if divisor_override:
        out = sums / divisor_override
    else:
        # Count each window's positions: ones inside the input, padding counted on request,
        # the positions ceil_mode adds past the padding never.
        inside = ones(*size, dtype=x.dtype, device=x.device)
        counted = constant_pad(
            inside, pad_pairs([(p, p) for p, _ in pairs]), value=1.0 if count_include_pad else 0.0
        )
        counted = constant_pad(counted, pad_pairs([(0, after - p) for p, after in pairs]))
        counts = Unfold.apply(counted, window=kernel, step=stride, dilation=dilation)
        out = sums / counts.sum(tuple(range(spatial)))  # (*kernel, *out) -> (*out)
    return out.squeeze(0) if unbatched else out


def avg_pool1d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """The mean of each window. Shapes: (N, C, L) -> (N, C, L_out)."""
    return _avg_pool(
        "avg_pool1d", input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1
    )


def avg_pool2d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """The mean of each window. Shapes: (N, C, H, W) -> (N, C, H_out, W_out)."""
    return _avg_pool(
        "avg_pool2d",
        input,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
        2,
    )


def avg_pool3d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """The mean of each window. Shapes: (N, C, D, H, W) -> (N, C, D_out, H_out, W_out)."""
    args = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3)
    return _avg_pool("avg_pool3d", input, *args)


def _averaging(n: int, out: int, like: Tensor) -> Tensor:
    """(out, n): row i averages positions floor(i n / out) .. ceil((i + 1) n / out) - 1."""
    rows = []
    for i in range(out):
        start, stop = (i * n) // out, -(-((i + 1) * n) // out)
        rows.append([1.0 / (stop - start) if start <= j < stop else 0.0 for j in range(n)])
    return Tensor(rows, dtype=like.dtype, device=like.device)


def _adaptive_avg_pool(op: str, input: Tensor, output_size: Any, spatial: int) -> Tensor:
    """Windows that tile the input into `output_size` cells (PyTorch's boundaries), as one
    averaging matrix per axis: y = A_h @ x @ A_w^T."""
    x, unbatched = _batched(op, input, spatial)
    sizes = (output_size,) * spatial if isinstance(output_size, int) else tuple(output_size)
    if len(sizes) != spatial or not all(
        s is None or (isinstance(s, int) and s >= 1) for s in sizes
    ):
        raise TinyattnError(
            f"{op}: output_size must be {spatial} positive ints, got {output_size!r}"
        )
    out = x
    for axis, target in enumerate(sizes):
        n = x.shape[2 + axis]
        matrix = _averaging(n, n if target is None else target, x)  # (out, n)
        # Move the axis last, average it with a matmul, move it back.
        out = (out.transpose(2 + axis, -1) @ matrix.mT).transpose(2 + axis, -1)
    return out.squeeze(0) if unbatched else out


def adaptive_avg_pool1d(input: Tensor, output_size: Any) -> Tensor:
    """Average over `output_size` windows that tile the input. Shapes: (N, C, L) -> (N, C, out)."""
    return _adaptive_avg_pool("adaptive_avg_pool1d", input, output_size, 1)


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    """Average over output_size[0] x output_size[1] windows that tile the input.
    Shapes: (N, C, H, W) -> (N, C, *output_size)."""
    return _adaptive_avg_pool("adaptive_avg_pool2d", input, output_size, 2)


def adaptive_avg_pool3d(input: Tensor, output_size: Any) -> Tensor:
    """Average over windows that tile the input into output_size cells.
    Shapes: (N, C, D, H, W) -> (N, C, *output_size)."""
    return _adaptive_avg_pool("adaptive_avg_pool3d", input, output_size, 3)


# -------------------------------------------------------------------------------- unfold, fold
def unfold(
    input: Tensor, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1
) -> Tensor:
    """im2col: every window as a column, channel-major rows.
    Shapes: (N, C, H, W) -> (N, C * kh * kw, L), L = the number of windows."""
    op = "unfold"
    x, unbatched = _batched(op, input, 2)
    kernel, dilation = (
        int_tuple(op, "kernel_size", kernel_size, 2),
        int_tuple(op, "dilation", dilation, 2),
    )
    stride, pads = (
        int_tuple(op, "stride", stride, 2),
        int_tuple(op, "padding", padding, 2, minimum=0),
    )
    x = constant_pad(x, pad_pairs([(p, p) for p in pads]))
    windows = _windows(op, x, kernel, stride, dilation)  # (N, C, kh, kw, oh, ow)
    n, c, oh, ow = *windows.shape[:2], *windows.shape[4:]
    cols = windows.reshape(n, c * math.prod(kernel), oh * ow)
    return cols.squeeze(0) if unbatched else cols


def fold(
    input: Tensor,
    output_size: Any,
    kernel_size: Any,
    dilation: Any = 1,
    padding: Any = 0,
    stride: Any = 1,
) -> Tensor:
    """col2im, unfold's adjoint: columns added back onto the image, overlaps summed.
    Shapes: (N, C * kh * kw, L) -> (N, C, *output_size)."""
    op = "fold"
    cols, unbatched = _batched(op, input, 1)
    size = int_tuple(op, "output_size", output_size, 2)
    kernel, dilation = (
        int_tuple(op, "kernel_size", kernel_size, 2),
        int_tuple(op, "dilation", dilation, 2),
    )
    stride, pads = (
        int_tuple(op, "stride", stride, 2),
        int_tuple(op, "padding", padding, 2, minimum=0),
    )
    padded = tuple(m + 2 * p for m, p in zip(size, pads, strict=True))
    counts = window_counts(padded, kernel, stride, dilation)
    n, rows, length = cols.shape
    if rows % math.prod(kernel) or length != math.prod(counts) or min(counts) < 1:
        raise RuntimeError(
            f"{op}: input of shape {cols.shape} does not hold columns of kernel {kernel} for "
            f"{counts} windows of output_size {size} (padding {pads}, stride {stride})"
        )
    c = rows // math.prod(kernel)
    windows = cols.reshape(n, c, *kernel, *counts)  # (N, C, kh, kw, oh, ow), Fold's layout
    out = Fold.apply(windows, size=padded, window=kernel, step=stride, dilation=dilation)
    out = constant_pad(out, pad_pairs([(-p, -p) for p in pads]))
    return out.squeeze(0) if unbatched else out


# --------------------------------------------------------------------------------- batch norm
def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float | Tensor = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """y = (x - mean) / sqrt(var + eps) * weight + bias per channel (axis 1). Training uses the
    batch's statistics (biased variance, `_batch_normalized`) and moves the running ones towards
    them, in place: r = (1 - momentum) r + momentum s, with the unbiased variance; eval uses the
    running ones. The gradient comes from the ops that compute y:
    dL/dx = weight / sqrt(var + eps) * (g - mean(g) - x_hat * mean(g * x_hat)) in training.
    Shapes: (N, C, ...) -> the same."""
    op = "batch_norm"
    if input.ndim < 2:
        raise TinyattnError(f"{op}: expected an input of shape (N, C, ...), got {input.shape}")
    channels, axes = input.shape[1], (0, *range(2, input.ndim))
    for name, t in (
        ("running_mean", running_mean),
        ("running_var", running_var),
        ("weight", weight),
        ("bias", bias),
    ):
        if t is not None and tuple(t.shape) != (channels,):
            raise RuntimeError(
                f"{op}: {name} must have shape ({channels},) for input {input.shape}, got {t.shape}"
            )
    shape = (1, channels) + (1,) * (input.ndim - 2)
    if training:
        count = input.numel() // channels
        if count < 2:
            raise TinyattnError(
                f"{op}: expected more than 1 value per channel when training, got input of "
                f"shape {input.shape}"
            )
        out, mean, var = _batch_normalized(input, axes, eps)
        if running_mean is not None and running_var is not None:
            with no_grad():
                running_mean.mul_(1.0 - momentum).add_(mean.reshape(channels) * momentum)
                unbiased = var.detach().reshape(channels) * (count / (count - 1))
                running_var.mul_(1.0 - momentum).add_(unbiased * momentum)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError(f"{op}: running_mean and running_var are needed when not training")
        out = (input - running_mean.reshape(shape)) / (running_var.reshape(shape) + eps).sqrt()
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def _batch_normalized(x: Tensor, axes: tuple, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """x_hat = (x - mean) / sqrt(var + eps) with the batch's mean and biased variance over
    `axes`, to float32's precision even where the mean is large next to the spread.

    The variance is two-pass, mean((x - mean)^2), never E[x^2] - E[x]^2. The mean is found in
    two steps too: an estimate m0 without gradient, then m = m0 + mean(x - m0). A float32 mean
    errs by about 1e-7 |mean|, and subtracting it would shift every x_hat by as much (1e-4 of
    the spread at x = 1000 + randn); x - m0 is small and nearly exact, so its mean errs by 1e-7
    of the spread instead. The gradient is that of one mean: m0 is a constant, and
    x - m0 - mean(x - m0) = x - mean(x).
    The sums run over row-major memory, where NumPy adds pairwise, not one element at a time.
    float16 is normalised in float32 and rounded once, as PyTorch's kernels do.
    Shapes: x (N, C, ...) -> x_hat like x; mean (detached) and var (1, C, 1, ...)."""
    half = is_half(x.array)
    wide = x.contiguous().float() if half else x.contiguous()
    with no_grad():
        first = wide.mean(axes, keepdims=True)  # m0
    shifted = wide - first
    correction = shifted.mean(axes, keepdims=True)
    centered = shifted - correction  # x - m
    var = (centered * centered).mean(axes, keepdims=True)
    x_hat = centered / (var + eps).sqrt()
    mean = first + correction.detach()
    if half:
        return x_hat.half(), mean.half(), var.half()
    return x_hat, mean, var


__all__ = [
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "batch_norm",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "fold",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "max_unpool1d",
    "max_unpool2d",
    "max_unpool3d",
    "unfold",
]
