"""Program items of a compiled step's replay: out= kernels lowered from recorded ops.

Imports `backend`, `kernels` and `ops`; `replay` (the tape and its memory plan) builds its program
from these. A lowered kernel ``kernel(out, *inputs)`` writes an op's forward result into a buffer
with the same array calls the op's own ``forward`` makes, so a replay equals eager bit for bit;
an op that cannot be lowered (another library, an unusual layout) gets None here and is replayed
through its ``forward``. Nothing here keeps state between replays but the scratch buffers a kernel
owns.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .. import backend, kernels, ops
from ..ops import special
from ..ops.reductions import sum_to_axes
from ..ops.targets import gather_target_rows, kept_count


class Slot:
    """A placeholder for the array in slot `index`, inside an op's keyword arguments."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def rebuilt(value: tuple | list, items: list) -> tuple | list:
    """`value`'s type holding `items` (a named tuple takes them as separate arguments)."""
    return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)


def filler(value: Any) -> Callable[[list], Any]:
    """``fill(env)``: `value` with each Slot replaced by its slot's current array. Only the
    containers on the way to a Slot are made again on each call; the rest is `value`'s own
    (an index key holds a dozen fields, and one or two of them hold the index array)."""
    if isinstance(value, Slot):
        index = value.index
        return lambda env: env[index]
    if isinstance(value, tuple | list) and slots_in(value):
        parts = [filler(v) for v in value]
        return lambda env: rebuilt(value, [part(env) for part in parts])
    return lambda env: value


def lowered(
    fn: Any, arrays: list, out: Any, kwargs: dict, saved: list | None = None
) -> Callable | None:
    """A kernel ``kernel(out, *inputs)`` that writes `fn`'s forward result into `out` with the
    same array calls its forward makes (so the values are the same bit for bit), or None.

    Only NumPy and CuPy take ``out=``. The ops lowered are those whose forward is a few such
    calls: the elementwise ones, sums and means, products, Linear, a Reshape that copied,
    Softmax and LogSoftmax (none of which keeps anything for backward), cross-entropy's target
    rows on the host, and LayerNorm with a weight, which writes what it keeps into the `saved`
    buffers. Every other op replays through its own ``forward``. The kernels call the arrays'
    own methods (``x.reshape``) where NumPy's module functions would add a Python wrapper.
    """
    if not backend.has_out(out):
        return None
    u = backend.ufuncs_of(out)
    # By class, not by name: a user's own Function called "Exp" is not tinyattn's.
    kind = type(fn)
    if saved:
        return _lowered_saving(u, fn, arrays, out, saved, kwargs)
    elementwise = _lowered_elementwise(u, kind, arrays, kwargs)
    if elementwise is not None:
        return elementwise
    if kind in (ops.Sum, ops.Mean, ops.SumTo) and backend.has_out(arrays[0]):
        x = arrays[0]
        if kind is ops.SumTo:
            axes = sum_to_axes(x.shape, kwargs.get("shape", ()))
        else:
            axes = fn.axes
        divisor = math.prod(x.shape[a] for a in axes) if kind is ops.Mean else None
        return _lowered_sum(u, x, out, axes, divisor)
    if kind is ops.MatMul and len(arrays) == 2:
        return _lowered_matmul(u, out, *arrays)
    if kind is ops.Linear:
        return _lowered_linear(u, out, arrays)
    if kind is ops.Reshape and backend.has_out(arrays[0]):
        # A reshape that copied (its input was not contiguous): the same copy, into `out`.
        view = u.reshape(out, arrays[0].shape)
        return (lambda o, x: u.copyto(view, x)) if _reshaped_in_place(u, view, out) else None
    if kind in (ops.Softmax, ops.LogSoftmax) and backend.has_out(arrays[0]):
        return _lowered_softmax(u, arrays[0], out, fn.axis, log=kind is ops.LogSoftmax)
    if kind is ops.ClassWeights and backend.is_host_array(arrays[0]):
        return _lowered_class_weights(u, arrays[0], out, **kwargs)
    return None


def _lowered_saving(
    u: Any, fn: Any, arrays: list, out: Any, saved: list, kwargs: dict
) -> Callable | None:
    """The kernel of an op that keeps arrays for its backward, written into `saved`, or None."""
    kind = type(fn)
    if kind is ops.LayerNorm and len(saved) == 2:
        return _lowered_layer_norm(u, fn, arrays, out, *saved)
    if kind is ops.HeadsAttention and len(saved) == 1:
        return _lowered_heads_attention(u, fn, arrays, out, saved[0])
    if kind is ops.CrossEntropy and backend.is_host_array(arrays[1]):
        return _lowered_cross_entropy(u, fn, arrays, out, saved, kwargs)
    if kind is ops.Gelu and len(saved) == 1 and backend.is_host_array(out):
        return _lowered_gelu(u, arrays[0], out, saved[0])
    return None


def _lowered_gelu(u: Any, x: Any, out: Any, cdf: Any) -> Callable | None:
    """`ops.Gelu`'s float32 forward as out= calls: Phi by `special._normal_cdf_float32`'s calls
    on `kernels.in_pieces`' pieces, written piece by piece into the buffer its backward reads,
    every temporary a scratch array of one piece made once (the forward makes nine new arrays
    per piece); then x * Phi into `out`. The same calls in the same order on the same values,
    so the same bits."""
    if any(a.dtype != u.float32 for a in (x, out, cdf)) or x.size == 0:
        return None
    cdf_flat = u.reshape(cdf, (-1,))
    if not _reshaped_in_place(u, cdf_flat, cdf):
        return None
    (constant, linear, square, cube), low, high, scale = special.cdf_grid(x)
    piece = min(x.size, kernels.IN_PIECES_ELEMENTS)
    steps, node, gathered = (u.empty((piece,), dtype=u.float32) for _ in range(3))
    narrow, index = u.empty((piece,), dtype=u.int32), u.empty((piece,), dtype=u.int64)
    nan = u.empty((piece,), dtype=u.bool_)

    def run(o: Any, x: Any) -> None:
        flat = x.reshape(-1)
        for start in range(0, flat.size, piece):
            values = flat[start : start + piece]
            n = values.size
            t, nodes, taken, phi = steps[:n], node[:n], gathered[:n], cdf_flat[start : start + n]
            u.copyto(t, values)  # astype(x, float32, copy=True)
            t.clip(low, high, out=t)  # backend.clip_into's calls
            u.copyto(t, low, where=u.isnan(t, out=nan[:n]))
            t *= scale
            u.floor(t, out=nodes)
            t -= nodes
            nodes -= low * scale
            u.copyto(narrow[:n], nodes, casting="unsafe")  # through int32, as the forward
            u.copyto(index[:n], narrow[:n])
            cube.take(index[:n], out=phi, mode="wrap")  # backend.take_in_range's take
            for term in (square, linear, constant):
                phi *= t
                phi += term.take(index[:n], out=taken, mode="wrap")
        u.multiply(x, cdf, out=o)

    return run


def _lowered_cross_entropy(
    u: Any, fn: Any, arrays: list, out: Any, saved: list, kwargs: dict
) -> Callable | None:
    """`ops.CrossEntropy`'s forward as out= calls: the target rows gathered into the weights
    its backward reads (NumPy's take refuses a target out of range, the replay's check of new
    targets), log-softmax into the saved log-probabilities (`_lowered_softmax`), each target's
    term sums as a product with ones, then `_lowered_sum`'s sum and, for a mean, the division
    by the count of kept targets (computed from the targets, kept for backward). The same
    calls in the same order as the forward, so the same bits."""
    x, targets = arrays
    log_probs, weights = saved[:2]
    classes, reduction = x.shape[-1], fn.reduction
    if classes > kernels.IDENTITY_ROWS or targets.size == 0 or x.ndim < 2:
        return None  # the forward compares targets with classes, or has no rows
    if len(saved) != 2 + (reduction == "mean") or x.dtype != weights.dtype:
        return None
    softmax = _lowered_softmax(u, x, log_probs, -1, log=True)
    rows = _rows_of(u, weights, classes)
    per_target = out if reduction == "none" else u.empty(targets.shape, dtype=x.dtype)
    per_row = u.reshape(per_target, (-1,))
    ones = _ones_for(u, x, classes)
    total = None
    if reduction != "none":
        total = _lowered_sum(u, per_target, out, tuple(range(targets.ndim)), None)
    if softmax is None or rows is None or ones is None or (reduction != "none" and not total):
        return None
    if not _reshaped_in_place(u, per_row, per_target) or rows.shape[0] != targets.size:
        return None
    terms = u.empty(rows.shape, dtype=x.dtype)
    ignore_index, smoothing = kwargs.get("ignore_index", -100), kwargs.get("smoothing", 0.0)
    xp = backend.namespace(x)

    def run(o: Any, x: Any, targets: Any) -> None:
        gather_target_rows(xp, targets, classes, ignore_index, smoothing, x.dtype, out=rows)
        softmax(log_probs, x)
        with backend.quiet_invalid():  # 0 * -inf: a masked class the target does not weigh
            u.multiply(log_probs.reshape(-1, classes), rows, out=terms)
        u.matmul(terms, ones, out=per_row)
        u.negative(per_row, out=per_row)
        if u.isnan(per_row).any():  # `losses.nll_array`: only the weighted terms count
            u.copyto(terms, 0.0, where=rows == 0)
            u.matmul(terms, ones, out=per_row)
            u.negative(per_row, out=per_row)
        if total is not None:
            total(o, per_target)
        if reduction == "mean":
            u.copyto(saved[2], kept_count(targets, ignore_index, x.dtype))
            u.divide(o, saved[2], out=o)

    return run


def _lowered_elementwise(u: Any, kind: type, arrays: list, kwargs: dict) -> Callable | None:
    """The kernel of an op whose forward is one elementwise call, or None."""
    if not all(backend.has_out(a) for a in arrays):
        return None
    if kind in _BINARY_UFUNCS:
        return UfuncCall(getattr(u, _BINARY_UFUNCS[kind]))
    if kind in _UNARY_UFUNCS:
        return UfuncCall(getattr(u, _UNARY_UFUNCS[kind]))
    if kind is ops.Relu:  # its forward's own call (`kernels.relu_array`)
        zero = kernels.zeros_operand(arrays[0])
        return UfuncCall(u.maximum, 0.0 if zero is None else zero)
    if kind in (ops.AddScalar, ops.MulScalar):
        ufunc, c = (u.add if kind is ops.AddScalar else u.multiply), kwargs.get("c")
        if isinstance(c, int | float) and not isinstance(c, bool):
            return UfuncCall(ufunc, kernels.scalar_operand(c, arrays[0]))  # as the forward
    if kind is ops.Cast:  # astype's conversion, into the buffer (a mask made float, say)
        return lambda o, x: u.copyto(o, x, casting="unsafe")
    if kind is ops.Computed and kwargs.get("function") is ops.array_call:
        # A comparison or logical function (`x > 0`): its result was a new array on every
        # replay, so a fresh bool array each time; the same ufunc writes into a buffer instead.
        ufunc = getattr(u, dict(kwargs.get("options", ())).get("name", ""), None)
        if isinstance(ufunc, u.ufunc):
            return UfuncCall(ufunc)
    return None


class UfuncCall:
    """A kernel that is one ufunc call: ``ufunc(*inputs, out=out)``, or with `constant` as the
    last operand (a scalar, ReLU's zeros). `kernel_run` makes its program item call the ufunc
    itself, one Python call fewer than through this object (about 100 items of a step of the
    small benchmark model)."""

    __slots__ = ("ufunc", "constant")

    def __init__(self, ufunc: Any, constant: Any = None) -> None:
        self.ufunc, self.constant = ufunc, constant

    def __call__(self, out: Any, *arrays: Any) -> Any:
        if self.constant is None:
            return self.ufunc(*arrays, out=out)
        return self.ufunc(*arrays, self.constant, out=out)


# The ops whose forward is exactly one array function of the same name (out= aside).
_BINARY_UFUNCS = {ops.Add: "add", ops.Sub: "subtract", ops.Mul: "multiply", ops.Div: "divide"}
_BINARY_UFUNCS[ops.Maximum] = "maximum"
_BINARY_UFUNCS[ops.Minimum] = "minimum"
_UNARY_UFUNCS = {ops.Neg: "negative", ops.Exp: "exp", ops.Log: "log", ops.Tanh: "tanh"}
_UNARY_UFUNCS[ops.Sqrt] = "sqrt"


def _rows_of(u: Any, out: Any, columns: int) -> Any:
    """`out` seen as (N, columns) without a copy, or None when that needs one."""
    rows = u.reshape(out, (-1, columns))
    return rows if _reshaped_in_place(u, rows, out) else None


def _lowered_matmul(u: Any, out: Any, a: Any, b: Any) -> Callable | None:
    if a.ndim < 2 or b.ndim < 2:
        return None
    if b.ndim == 2 and a.ndim > 2:  # the forward's one (N, k) @ (k, m) GEMM
        rows = _rows_of(u, out, b.shape[-1])
        if rows is None:
            return None
        k = a.shape[-1]
        return lambda o, a, b: u.matmul(a.reshape(-1, k), b, out=rows)
    return lambda o, a, b: u.matmul(a, b, out=o)


def _reshaped_in_place(u: Any, reshaped: Any, array: Any) -> bool:
    """Whether `reshaped`, a reshape of `array`, is a view of it (a kernel writing into it
    writes the result). One element always reshapes as a view; CuPy's shares_memory answers
    False for a 0-d array and its (1,) view, so that case is not left to it."""
    return array.size == 1 or bool(u.shares_memory(reshaped, array))


def _ones_for(u: Any, x: Any, n: int) -> Any:
    """The vector of `n` ones `kernels.sum_array` sums `x`'s rows with, or None where it calls
    the library's sum instead (a dtype other than float32 and float64)."""
    if not (x.dtype == u.float32 or x.dtype == u.float64):
        return None
    return kernels.ones_vector(backend.namespace(x), n, x.dtype, x.device)


def _lowered_sum(u: Any, x: Any, out: Any, axes: tuple, divisor: int | None) -> Callable | None:
    """`kernels.sum_array`'s product with a vector of ones, written into `out` (then divided by
    `divisor`, for a mean), where sum_array takes that path; None where it does not."""
    ndim, count = x.ndim, len(axes)
    if not count or x.size == 0:
        return None
    trailing = axes[0] == ndim - count
    if not trailing and axes[-1] != count - 1:
        return None  # neither trailing nor leading: sum_array calls the library's sum
    flat = u.reshape(out, (-1,))
    summed = math.prod(x.shape[a] for a in axes)
    ones = _ones_for(u, x, summed)
    if ones is None or not _reshaped_in_place(u, flat, out):
        return None

    def run(o: Any, x: Any) -> None:
        if trailing:  # (rows, summed) @ (summed,) -> (rows,)
            u.matmul(x.reshape(-1, summed), ones, out=flat)
        else:  # (summed,) @ (summed, columns) -> (columns,)
            u.matmul(ones, x.reshape(summed, -1), out=flat)
        if divisor is not None:
            u.divide(flat, divisor, out=flat)

    return run


def _lowered_linear(u: Any, out: Any, arrays: list) -> Callable | None:
    x, weight = arrays[0], arrays[1]
    if x.ndim == 0 or (len(arrays) == 3 and arrays[2].dtype != out.dtype):
        return None  # a promoting bias is added out of place by the forward
    rows = _rows_of(u, out, weight.shape[0])
    if rows is None:
        return None
    k = x.shape[-1]
    if len(arrays) == 2:
        return lambda o, x, w: u.matmul(x.reshape(-1, k), w.T, out=rows)

    def linear(o: Any, x: Any, w: Any, b: Any) -> None:
        u.matmul(x.reshape(-1, k), w.T, out=rows)
        u.add(rows, b, out=rows)

    return linear


def _lowered_layer_norm(
    u: Any, fn: Any, arrays: list, out: Any, x_hat: Any, rstd: Any
) -> Callable | None:
    """`ops.LayerNorm`'s forward (`fused._normalize`, then the weight and bias) as out= calls:
    x_hat and rstd go into the buffers its backward reads, and the squares of the centred
    values are made in `out` before the result overwrites them. The sums are `sum_array`'s
    products with ones, the same calls in the same order as the forward, so the same bits."""
    x = arrays[0]
    if x.size == 0:
        return None
    if any(a.dtype != x.dtype for a in (*arrays, out, x_hat, rstd)) or not fn.has_weight:
        return None  # a promotion, or no weight (without an affine part, y is x_hat itself)
    axes = tuple(sorted(a % x.ndim for a in fn.axes))
    if axes[0] != x.ndim - len(axes):
        return None  # not the trailing axes: sum_array calls the library's sum
    n = math.prod(x.shape[a] for a in axes)
    rows_hat, rows_out, ones = _rows_of(u, x_hat, n), _rows_of(u, out, n), _ones_for(u, x, n)
    stat = u.reshape(rstd, (-1,))
    if (
        rows_hat is None
        or rows_out is None
        or ones is None
        or not _reshaped_in_place(u, stat, rstd)
    ):
        return None
    column = u.reshape(stat, (-1, 1))  # (rows, 1): broadcast along each row
    eps, one_axis = fn.eps, len(axes) == 1

    def run(o: Any, x: Any, *affine: Any) -> None:
        rows = x.reshape(-1, n)
        u.matmul(rows, ones, out=stat)  # the mean...
        u.divide(stat, n, out=stat)
        u.subtract(rows, column, out=rows_hat)  # ...taken away
        u.multiply(rows_hat, rows_hat, out=rows_out)  # squares, in `out` for now
        u.matmul(rows_out, ones, out=stat)
        u.divide(stat, n, out=stat)
        u.add(stat, eps, out=stat)
        u.sqrt(stat, out=stat)
        u.divide(1.0, stat, out=stat)  # rstd
        u.multiply(rows_hat, column, out=rows_hat)  # x_hat
        flat = affine if one_axis else [a.reshape(-1) for a in affine]
        u.multiply(rows_hat, flat[0], out=rows_out)  # the weight...
        if len(flat) == 2:
            u.add(rows_out, flat[1], out=rows_out)  # ...and the bias

    return run


def _lowered_heads_attention(
    u: Any, fn: Any, arrays: list, out: Any, weights: Any
) -> Callable | None:
    """`ops.HeadsAttention`'s forward as out= calls: the scores into the buffer of the weights
    its backward reads, scaled, masked (-inf where not allowed) and turned into weights there by
    `_lowered_softmax`'s calls, then each head's product with v into its columns of `out`. The
    same calls in the same order as the forward, so the same bits. A packed input's blocks are
    views of it, as in the forward."""
    data = 1 if fn.packed else 3  # the inputs before the mask
    q, k, v = kernels.packed_thirds(arrays[0]) if fn.packed else arrays[:3]
    if any(a.dtype != q.dtype for a in (k, v, out, weights)) or weights.size == 0:
        return None
    if not backend.is_host_array(out):  # the merged out= product, as in the forward: host only
        return None
    heads, scale = fn.heads, fn.scale
    softmax = _lowered_softmax(u, weights, weights, 3, log=False)
    if softmax is None or not _reshaped_in_place(u, u.reshape(out, (-1,)), out):
        return None

    def split(x: Any) -> Any:  # (B, T, H * D) -> (B, H, T, D), a view
        batch, length, width = x.shape
        return x.reshape(batch, length, heads, width // heads).transpose(0, 2, 1, 3)

    merged = split(out)  # each head's columns of `out`

    def run(o: Any, *inputs: Any) -> None:
        q, k, v = kernels.packed_thirds(inputs[0]) if data == 1 else inputs[:3]
        allowed = inputs[data:]
        u.matmul(split(q), split(k).swapaxes(-1, -2), out=weights)
        u.multiply(weights, scale, out=weights)
        if allowed:
            u.copyto(weights, -math.inf, where=u.logical_not(allowed[0]))
        softmax(weights, weights)
        u.matmul(weights, split(v), out=merged)

    return run


def _lowered_softmax(u: Any, x: Any, out: Any, axis: int, log: bool) -> Callable | None:
    """`ops.Softmax`'s (or, with `log`, `ops.LogSoftmax`'s) forward along the last axis as
    out= calls into the tape's own scratch buffers: `kernels.row_shift`'s max (over a
    transposed copy for short rows, as `kernels.max_along` takes it) with -inf maxima set to 0,
    the shifted values, their exp, `sum_array`'s product with ones, and the division by the sums
    (or the subtraction of their log), all-zero sums set to 1. The same calls in the same order
    as the forward, so the same bits."""
    if x.ndim < 2 or axis % x.ndim != x.ndim - 1 or x.size == 0 or x.dtype != out.dtype:
        return None
    n = x.shape[-1]
    rows_out, ones = _rows_of(u, out, n), _ones_for(u, x, n)
    if rows_out is None or ones is None:
        return None
    count = x.size // n
    shift, total = u.empty((count,), dtype=x.dtype), u.empty((count,), dtype=x.dtype)
    columns = u.empty((n, count), dtype=x.dtype) if n <= kernels.SHORT_ROW else None
    exps = u.empty((count, n), dtype=x.dtype) if log else rows_out  # log keeps the shifted x
    shift_column, total_column = u.reshape(shift, (-1, 1)), u.reshape(total, (-1, 1))

    def run(o: Any, x: Any) -> None:
        rows = x.reshape(-1, n)
        if columns is not None:  # each key's values in one row: an elementwise max of rows
            u.copyto(columns, rows.T)
            columns.max(axis=0, out=shift)
        else:
            rows.max(axis=1, out=shift)
        u.copyto(shift, 0.0, where=shift == -math.inf)  # a fully masked row: exp(-inf) = 0
        u.subtract(rows, shift_column, out=rows_out)
        u.exp(rows_out, out=exps)
        u.matmul(exps, ones, out=total)
        u.copyto(total, 1.0, where=total == 0)
        if log:
            u.log(total, out=total)
            u.subtract(rows_out, total_column, out=rows_out)
        else:
            u.divide(rows_out, total_column, out=rows_out)

    return run


def _lowered_class_weights(
    u: Any, targets: Any, out: Any, classes: int, ignore_index: Any, smoothing: float, dtype: Any
) -> Callable | None:
    """`ops.ClassWeights`' table lookup (`gather_target_rows`, the forward's own) with the rows
    gathered into `out` rather than into a new array reshaped afterwards. NumPy only: its take
    refuses a target out of range, which is the replay's check of new targets."""
    if classes > kernels.IDENTITY_ROWS or targets.size == 0:
        return None  # the forward compares targets with classes instead
    rows = _rows_of(u, out, classes)
    if rows is None or rows.shape[0] != targets.size:
        return None
    xp = backend.namespace(targets)

    def run(o: Any, targets: Any) -> None:
        gather_target_rows(xp, targets, classes, ignore_index, smoothing, dtype, out=rows)

    return run


def lowered_take(fn: Any, kwargs: dict, x: Any, out: Any, x_slot: int) -> Callable | None:
    """``x[index]`` along one axis, every other part of the key a full slice (an embedding
    lookup, a table row), as NumPy's ``take(x, index, axis, out=)``: the forward's own gather,
    without parsing the key again or a separate range check (NumPy's take raises for an index
    out of range itself)."""
    parsed = getattr(fn, "key", None)
    if type(fn) is not ops.GetItem or parsed is None or parsed.index is None:
        return None
    # NumPy only: CuPy's take wraps an index out of range silently, which the forward's host
    # check is there to refuse.
    if parsed.to_front or not backend.is_host_array(out) or not backend.is_host_array(x):
        return None
    template = kwargs.get("key")
    parts = template if isinstance(template, tuple) else (template,)
    slots = [part for part in parts if isinstance(part, Slot)]
    rest = [part for part in parsed.full if not hasattr(part, "shape")]
    if len(slots) != 1 or any(part != slice(None) for part in rest) or len(rest) != x.ndim - 1:
        return None
    axis, index_slot = parsed.axis, slots[0].index

    def run(env: list) -> None:
        try:
            env[x_slot].take(env[index_slot], axis=axis, out=out)
        except IndexError as error:
            raise _out_of_range(error, axis, env[x_slot].shape[axis]) from None

    return run


def _out_of_range(error: IndexError, axis: int, size: int) -> IndexError:
    """The library's words for an index out of range, with the op's name and the axis."""
    return IndexError(
        f"getitem: an index is out of range for axis {axis} of size {size} in a replay of a "
        f"compiled step ({error})"
    )


def lowered_index_add(
    fn: Any, kwargs: dict, grad: Any, out: Any, grad_slot: int
) -> Callable | None:
    """The adjoint of an embedding lookup (`ops.IndexAdd` of rows, on the host) as
    `kernels.index_add_rows`'s two calls into scratch buffers: the one-hot rows taken from the
    identity, then their transpose times the gradient rows, written into `out`. NumPy's take
    refuses an index out of range and wraps a negative one, as the forward's check does."""
    parsed, template = getattr(fn, "key", None), kwargs.get("key")
    if parsed is None or parsed.index is None or not isinstance(template.index, Slot):
        return None
    # Rows only: the index first, whole slices after it (an index array elsewhere is no row).
    if not all(isinstance(part, slice) and part == slice(None) for part in parsed.full[1:]):
        return None
    if out.ndim == 0:
        return None
    if not (backend.is_host_array(out) and backend.is_host_array(grad)):
        return None  # CuPy's take wraps an index out of range: the forward's check must run
    rows, n = out.shape[0], parsed.index.size
    columns = math.prod(out.shape[1:])
    if n * rows > backend.ONE_HOT_LIMIT or rows > kernels.IDENTITY_ROWS:
        return None  # index_add_rows calls scatter_add, or compares, there
    if grad.size != n * columns or grad.dtype != out.dtype:
        return None
    u = backend.ufuncs_of(out)
    flat_out = _rows_of(u, out, columns)
    if flat_out is None:
        return None
    identity = kernels.identity_rows(backend.namespace(out), rows, out.dtype, out.device)
    one_hot = u.empty((n, rows), dtype=out.dtype)
    index_slot = template.index.index

    def run(env: list) -> None:
        try:
            identity.take(env[index_slot].reshape(-1), axis=0, out=one_hot)
        except IndexError as error:
            raise _out_of_range(error, 0, rows) from None
        u.matmul(one_hot.T, env[grad_slot].reshape(n, columns), out=flat_out)

    return run


def kernel_run(kernel: Callable, buffer: Any, in_slots: list[int]) -> Callable[[list], None]:
    """A program item that runs an out= kernel into `buffer` on the current input arrays."""
    if isinstance(kernel, UfuncCall) and len(in_slots) in (1, 2):
        f, c, a, b = kernel.ufunc, kernel.constant, in_slots[0], in_slots[-1]
        if c is None:
            if len(in_slots) == 2:
                return lambda env: f(env[a], env[b], out=buffer)
            return lambda env: f(env[a], out=buffer)
        if len(in_slots) == 1:
            return lambda env: f(env[a], c, out=buffer)
    if len(in_slots) == 1:
        (a,) = in_slots
        return lambda env: kernel(buffer, env[a])
    if len(in_slots) == 2:
        a, b = in_slots
        return lambda env: kernel(buffer, env[a], env[b])
    return lambda env: kernel(buffer, *[env[i] for i in in_slots])


def slots_in(value: Any) -> list[int]:
    if isinstance(value, Slot):
        return [value.index]
    if isinstance(value, tuple | list):
        return [s for v in value for s in slots_in(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in slots_in(v)]
    return []
