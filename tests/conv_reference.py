"""NumPy references for convolution and pooling, written as loops over output positions.

They follow the definitions (one window at a time), not tinyattn's window view and product, so
the op table checks the one against the other. Arguments are PyTorch's; spatial axes are the
trailing ones of (N, C, *size).
"""

from __future__ import annotations

import itertools
import math

import numpy as np


def _tuple(value, n: int) -> tuple:
    return (value,) * n if isinstance(value, int) else tuple(value)


def _window(position: tuple, stride: tuple, dilation: tuple, kernel: tuple) -> tuple:
    return tuple(
        slice(o * s, o * s + d * (k - 1) + 1, d)
        for o, s, d, k in zip(position, stride, dilation, kernel, strict=True)
    )


def conv(x, w, b=None, stride=1, padding=0, dilation=1, groups=1) -> np.ndarray:
    """y[n, o, *p] = b[o] + sum over the group's channels c and offsets k of
    x_padded[n, c, p * stride + k * dilation] * w[o, c, k]."""
    spatial, kernel = x.ndim - 2, w.shape[2:]
    stride, dilation = _tuple(stride, spatial), _tuple(dilation, spatial)
    if padding == "same":
        totals = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
        pairs = [(t // 2, t - t // 2) for t in totals]
    else:
        pairs = [(p, p) for p in _tuple(padding, spatial)]
    x = np.pad(x, [(0, 0), (0, 0), *pairs])
    out_size = [
        (n - d * (k - 1) - 1) // s + 1
        for n, k, s, d in zip(x.shape[2:], kernel, stride, dilation, strict=True)
    ]
    n, c_out, c_group = x.shape[0], w.shape[0], w.shape[1]
    o_group = c_out // groups
    y = np.zeros((n, c_out, *out_size))
    for position in itertools.product(*map(range, out_size)):
        patch = x[(slice(None), slice(None)) + _window(position, stride, dilation, kernel)]
        for g in range(groups):
            cols = patch[:, g * c_group : (g + 1) * c_group].reshape(n, -1)
            weights = w[g * o_group : (g + 1) * o_group].reshape(o_group, -1)
            y[(slice(None), slice(g * o_group, (g + 1) * o_group)) + position] = cols @ weights.T
    if b is not None:
        y = y + b.reshape(-1, *(1,) * spatial)
    return y


def conv_transpose(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Each input element x[n, c, i] adds x[n, c, i] * w[c, o, k] at i * stride + k * dilation,
    then `padding` is cropped from both ends (and output_padding kept at the end)."""
    spatial, kernel = x.ndim - 2, w.shape[2:]
    stride, dilation = _tuple(stride, spatial), _tuple(dilation, spatial)
    pads, extra = _tuple(padding, spatial), _tuple(output_padding, spatial)
    full = [
        (m - 1) * s + d * (k - 1) + 1 + e
        for m, s, d, k, e in zip(x.shape[2:], stride, dilation, kernel, extra, strict=True)
    ]
    c_group, o_group = x.shape[1] // groups, w.shape[1]
    y = np.zeros((x.shape[0], o_group * groups, *full))
    for position in itertools.product(*map(range, x.shape[2:])):
        for g in range(groups):
            values = x[(slice(None), slice(g * c_group, (g + 1) * c_group)) + position]
            block = np.einsum("nc,co...->no...", values, w[g * c_group : (g + 1) * c_group])
            target = (slice(None), slice(g * o_group, (g + 1) * o_group))
            y[target + _window(position, stride, dilation, kernel)] += block
    y = y[(slice(None), slice(None)) + tuple(slice(p, n - p) for p, n in zip(pads, full))]
    return y if b is None else y + b.reshape(-1, *(1,) * spatial)


def _pool_windows(x, kernel, stride, padding, dilation, ceil_mode, fill):
    """(padded input, output size) with PyTorch's ceil_mode rule."""
    spatial = x.ndim - 2
    kernel = _tuple(kernel, spatial)
    stride = kernel if stride is None else _tuple(stride, spatial)
    pads, dilation = _tuple(padding, spatial), _tuple(dilation, spatial)
    out_size = []
    for m, k, s, p, d in zip(x.shape[2:], kernel, stride, pads, dilation, strict=True):
        span = d * (k - 1) + 1
        rounding = math.ceil if ceil_mode else math.floor
        count = rounding((m + 2 * p - span) / s) + 1
        if ceil_mode and (count - 1) * s >= m + p:
            count -= 1
        out_size.append(count)
    width = [(p, p + s * k + d * k) for p, s, k, d in zip(pads, stride, kernel, dilation)]
    padded = np.pad(x, [(0, 0), (0, 0), *width], constant_values=fill)
    return padded, out_size, kernel, stride, pads, dilation


def max_pool(x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False) -> np.ndarray:
    padded, out_size, kernel, stride, _, dilation = _pool_windows(
        x, kernel, stride, padding, dilation, ceil_mode, -np.inf
    )
    y = np.zeros(x.shape[:2] + tuple(out_size))
    for position in itertools.product(*map(range, out_size)):
        window = padded[(slice(None), slice(None)) + _window(position, stride, dilation, kernel)]
        y[(slice(None), slice(None)) + position] = window.reshape(*x.shape[:2], -1).max(-1)
    return y


def avg_pool(x, kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """The window's sum over its positions inside the input (and its padding, if counted)."""
    padded, out_size, kernel, stride, pads, _ = _pool_windows(
        x, kernel, stride, padding, 1, ceil_mode, 0.0
    )
    inside = np.pad(np.ones(x.shape[2:]), list(zip(pads, pads)), constant_values=count_include_pad)
    inside = np.pad(inside, [(0, p + s * k + k) for p, s, k in zip(pads, stride, kernel)])
    ones = (1,) * len(kernel)
    y = np.zeros(x.shape[:2] + tuple(out_size))
    for position in itertools.product(*map(range, out_size)):
        window = _window(position, stride, ones, kernel)
        count = inside[window].sum()
        y[(slice(None), slice(None)) + position] = (
            padded[(..., *window)].sum(tuple(range(2, x.ndim))) / count
        )
    return y


def batch_norm(x, weight, bias, eps=1e-5) -> np.ndarray:
    """Training-mode batch norm: the batch's mean and biased variance per channel (axis 1)."""
    axes = (0, *range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean, var = x.mean(axes).reshape(shape), x.var(axes).reshape(shape)
    return (x - mean) / np.sqrt(var + eps) * weight.reshape(shape) + bias.reshape(shape)


def unfold(x, kernel, padding=0, stride=1) -> np.ndarray:
    """im2col: column l holds window l (row-major over positions), rows channel-major."""
    kernel, stride = _tuple(kernel, 2), _tuple(stride, 2)
    x = np.pad(x, [(0, 0), (0, 0), *[(p, p) for p in _tuple(padding, 2)]])
    out_size = [(n - k) // s + 1 for n, k, s in zip(x.shape[2:], kernel, stride, strict=True)]
    columns = [
        x[(slice(None), slice(None)) + _window(position, stride, (1, 1), kernel)].reshape(
            x.shape[0], -1
        )
        for position in itertools.product(*map(range, out_size))
    ]
    return np.stack(columns, axis=-1)


def fold(columns, output_size, kernel, stride=1) -> np.ndarray:
    """col2im: each column added back onto its window, overlaps summed."""
    kernel, stride = _tuple(kernel, 2), _tuple(stride, 2)
    out_size = [(n - k) // s + 1 for n, k, s in zip(output_size, kernel, stride, strict=True)]
    n, channels = columns.shape[0], columns.shape[1] // math.prod(kernel)
    y = np.zeros((n, channels, *output_size))
    for column, position in enumerate(itertools.product(*map(range, out_size))):
        window = _window(position, stride, (1, 1), kernel)
        y[(slice(None), slice(None)) + window] += columns[..., column].reshape(n, channels, *kernel)
    return y


def adaptive_avg_pool(x, output_size) -> np.ndarray:
    """Cell (i, j, ...) averages, along each axis of size n cut into m cells, positions
    floor(i n / m) .. ceil((i + 1) n / m) - 1."""
    sizes = x.shape[2:]
    y = np.zeros(x.shape[:2] + tuple(output_size))
    for cell in itertools.product(*(range(m) for m in output_size)):
        window = tuple(
            slice(i * n // m, -(-(i + 1) * n // m))
            for i, n, m in zip(cell, sizes, output_size, strict=True)
        )
        y[(..., *cell)] = x[(..., *window)].mean(tuple(range(2, x.ndim)))
    return y


def max_unpool(values, indices, size) -> np.ndarray:
    """Each value written at its flat index in its (N, C) plane of `size`, zeros elsewhere; a
    place named twice keeps the last value written there."""
    n, c = values.shape[:2]
    y = np.zeros((n, c, int(np.prod(size))))
    for i, j in itertools.product(range(n), range(c)):
        for value, place in zip(values[i, j].reshape(-1), indices[i, j].reshape(-1)):
            y[i, j, place] = value
    return y.reshape(n, c, *size)
