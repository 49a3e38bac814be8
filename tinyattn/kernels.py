"""Kernels: the speed tricks, kept apart from the math they speed up.

Each function here computes exactly what a plain expression computes (named in its docstring as
"Replaces:"; for the first-order rules, a rule's Tensor ops), only faster on some shapes;
tests/test_fast_paths.py checks each against that plain code. A learner may read every call
`kernels.f(...)` as its plain version and skip this file. Imports `backend` only and works on
arrays (never Tensors): `ops` and `functional` call it. The tuning knobs of the block-wise
attention (tile sizes, threads) live here too, as module attributes that may be set at run time.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from .backend import (
    ONE_HOT_LIMIT,
    broadcast_view,
    cache_per_device,
    contiguous,
    has_out,
    is_host_array,
    namespace,
    reshape,
    scatter_add,
    ufuncs_of,
)
from .errors import TinyattnError

# ------------------------------------------------------------------------------ sums and maxima


def sum_array(x: Any, axes: tuple[int, ...], keepdims: bool = False) -> Any:
    """``xp.sum(x, axis=axes, keepdims=keepdims)``, through BLAS where that is faster.

    Replaces: ``xp.sum(x, axis=axes, keepdims=keepdims)``.
    NumPy sums a short contiguous axis one row at a time (about 5 ns a row): summing the 16 keys
    of (64, 4, 16, 16) attention scores took 87 us. A matrix product with a vector of ones does
    the same additions in BLAS, 1.5 to 7x faster on every float shape measured (23 us here), on
    CuPy too. Used when float32/float64 `x` is reduced over its trailing axes (rows @ ones) or
    its leading axes (ones @ columns); any other reduction goes to `xp.sum`. On small arrays the
    Python around the product counts as much as the product: the ones vector is cached and the
    product is 1-D, so one reshape gives the result's shape.
    Shapes: x (*lead, *trail) -> the reduced shape; `axes` sorted and non-negative.
    """
    xp = namespace(x)
    ndim, count, shape = x.ndim, len(axes), x.shape
    if (
        count == 0
        or x.size == 0
        or not (x.dtype == xp.float32 or x.dtype == xp.float64)
        or (axes[0] != ndim - count and axes[-1] != count - 1)  # neither trailing nor leading
    ):
        return xp.asarray(xp.sum(x, axis=axes, keepdims=keepdims))
    if axes[0] == ndim - count:  # trailing: (rows, summed) @ (summed,) -> (rows,)
        kept = shape[: ndim - count]
        summed = x.size // math.prod(kept)
        result = reshape(x, (-1, summed)) @ ones_vector(xp, summed, x.dtype, x.device)
        return reshape(result, kept + (1,) * count if keepdims else kept)
    kept = shape[count:]  # leading: (summed,) @ (summed, columns) -> (columns,)
    summed = x.size // math.prod(kept)
    result = ones_vector(xp, summed, x.dtype, x.device) @ reshape(x, (summed, -1))
    return reshape(result, (1,) * count + kept if keepdims else kept)


@cache_per_device(maxsize=64)
def ones_vector(xp: Any, n: int, dtype: Any, device: Any) -> Any:
    """A read-only-by-convention vector of `n` ones, made once per (n, dtype, device).

    Replaces: ``xp.ones((n,), dtype=dtype, device=device)``. Only ever an operand of a product
    (nothing writes into it), so sharing one array between calls is safe.
    """
    return xp.ones((n,), dtype=dtype, device=device)


# The largest identity `identity_rows` makes (1,024 rows: 4 MB in float32). A one-hot built from
# a larger one would cost more memory than comparing indices with row numbers does.
IDENTITY_ROWS = 1024


@cache_per_device(maxsize=16)
def identity_rows(xp: Any, n: int, dtype: Any, device: Any) -> Any:
    """The (n, n) identity, made once per (n, dtype, device): row i is the one-hot vector of i.

    Replaces: ``xp.eye(n, dtype=dtype, device=device)``. Only ever read (gathered from), so
    sharing one array between calls is safe. For n up to `IDENTITY_ROWS`.
    """
    if n > IDENTITY_ROWS:
        raise TinyattnError(f"identity_rows: {n} rows is more than IDENTITY_ROWS={IDENTITY_ROWS}")
    return xp.eye(n, dtype=dtype, device=device)


def index_add_rows(indices: Any, values: Any, rows: int) -> Any:
    """Rows of `values` added into `rows` zero rows at `indices` (repeats summed): an embedding
    gradient.

    Replaces: ``backend.scatter_add(xp.zeros((rows, columns)), indices, values)``.
    The one-hot matrix is gathered from the identity, ``take(eye, indices)``: one pass that
    writes n rows, where comparing every index with every row number and casting the bools
    makes two passes over all n * rows entries. Its transpose times `values` is the result (the
    product reads a transposed operand at no cost): no zeros to add it to. 1.3x to 1.8x less
    time than comparing and casting (256 tokens over a vocabulary of 80: 29 us against 54), and
    half the time of the plain call. Past `IDENTITY_ROWS` rows the one-hot is compared and cast
    as (rows, n); past `backend.ONE_HOT_LIMIT` one-hot entries, the plain call. The indices
    must be in range: `take` wraps or refuses them, depending on the library.
    Shapes: indices (n,) int in [0, rows), values (n, columns) -> (rows, columns).
    """
    xp = namespace(values)
    if indices.shape[0] * rows > ONE_HOT_LIMIT or values.ndim != 2:
        target = xp.zeros((rows, *values.shape[1:]), dtype=values.dtype, device=values.device)
        return scatter_add(target, indices, values)
    if rows > IDENTITY_ROWS:
        one_hot = xp.arange(rows, device=values.device)[:, None] == indices[None, :]  # (rows, n)
        return xp.astype(one_hot, values.dtype) @ values
    one_hot = xp.take(identity_rows(xp, rows, values.dtype, values.device), indices, axis=0)
    return xp.matrix_transpose(one_hot) @ values  # (rows, n) @ (n, columns)


# Rows at most this long have their max taken over a transposed copy (see `max_along`).
SHORT_ROW = 64


def spread_array(grad: Any, kept: tuple[int, ...], shape: tuple[int, ...]) -> Any:
    """The gradient of a sum, `grad` spread back over the summed input's `shape`: grad seen
    with the `kept` shape (1 on each summed axis), broadcast to `shape`, a read-only view.

    Replaces: ``xp.broadcast_to(xp.reshape(grad, kept), shape)``, the array calls of the
    reshape and broadcast_to ops `ops.Sum.backward` records, without their dispatch (and with
    `backend.broadcast_view`'s direct view on NumPy).
    Shapes: grad (the reduced shape), kept and shape of one length -> `shape`.
    """
    kept_view = reshape(grad, kept)
    return kept_view if kept == shape else broadcast_view(kept_view, shape)


def max_along(xp: Any, x: Any, axis: int) -> Any:
    """The max along one axis, over a transposed copy when `axis` is a short last axis.

    Replaces: ``xp.max(x, axis=axis, keepdims=True)``.
    NumPy's max along a short contiguous axis costs about 20 ns a row (375 us for the 16 keys of
    (64, 4, 16, 16) attention scores): it starts a vectorised loop per row. Copied to (keys,
    rows) order, the same max is an elementwise `maximum` of a few long rows, which NumPy
    vectorises across rows: the copy and the max together took 6 to 10x less time on rows of 16
    (attention scores of both benchmark models) and 1.5x less on rows of 64; from 128 on, the
    plain max is faster. The max is exact, so the result is equal, NaN included. Namespaces
    without a memory layout reduce the permuted view.
    """
    if x.ndim < 2 or axis % x.ndim != x.ndim - 1 or x.shape[-1] > SHORT_ROW or x.size == 0:
        return xp.max(x, axis=axis, keepdims=True)
    rows = reshape(x, (-1, x.shape[-1]))  # (..., n) -> (rows, n)
    columns = contiguous(xp.matrix_transpose(rows))  # (n, rows), each key's values in one row
    return reshape(xp.max(columns, axis=0), (*x.shape[:-1], 1))


def row_shift(xp: Any, x: Any, axis: int) -> Any:
    """The max along `axis`, with non-finite maxima (all -inf rows) replaced by 0.

    Replaces: ``m = xp.max(x, axis=axis, keepdims=True); xp.where(m == -inf, 0, m)``.
    Subtracting the max keeps exp() from overflowing for logits like 1e4; replacing a max of
    -inf by 0 keeps `x - shift` from becoming -inf - (-inf) = NaN on fully masked rows. A NaN or
    +inf max is kept, so a row holding NaN or +inf comes out NaN, as in PyTorch.
    """
    shift = max_along(xp, x, axis)
    return xp.where(shift == -math.inf, xp.zeros_like(shift), shift)


def append_ones(xp: Any, x: Any) -> Any:
    """(..., T, D) -> (..., T, D + 1) with a last column of ones.

    Replaces: the separate sum or subtraction it lets a matrix product do. With it,
    ``[q, -c] @ append_ones(k)^T`` is ``q @ k^T - c`` and ``P @ append_ones(v)`` carries
    ``P.sum(-1)`` in its last column: one matmul instead of a matmul and a pass over the tile.
    """
    ones = xp.ones((*x.shape[:-1], 1), dtype=x.dtype, device=x.device)
    return xp.concat([x, ones], axis=-1)


# The most values `zeros_operand` serves from its cached buffer: 4 MB of float32. A larger
# array takes the scalar (one call either way; only the speed differs).
ZEROS_LIMIT = 1 << 20


@functools.lru_cache(maxsize=8)
def _zeros_buffer(xp: Any, dtype: Any) -> Any:
    buffer = xp.zeros((ZEROS_LIMIT,), dtype=dtype)
    buffer.flags.writeable = False  # shared by every caller: nothing may write into it
    return buffer


def zeros_operand(x: Any) -> Any | None:
    """Zeros of x's shape and dtype as an operand (read-only, a view of a buffer cached per
    dtype), or None off the host, for a dtype other than a float, or past `ZEROS_LIMIT` values.

    Replaces: the scalar ``0.0`` as the second operand of an elementwise call on host floats.
    """
    if not is_host_array(x) or x.dtype.kind != "f" or x.size > ZEROS_LIMIT:
        return None
    return _zeros_buffer(namespace(x), x.dtype)[: x.size].reshape(x.shape)


# Scalar operands made so far, by (value, array type, dtype); cleared at `SCALAR_OPERANDS_LIMIT`
# entries (a loop that makes a new value every step must not grow it without end).
_scalar_operands: dict = {}
SCALAR_OPERANDS_LIMIT = 1024


def scalar_operand(c: float, x: Any) -> Any:
    """The Python number c as an operand of an elementwise call with x: a read-only 0-d array
    of x's dtype (made once per value and dtype); c itself off the host, for a non-float x, for
    anything but a Python float or int (whose type decides the result's dtype), for a zero or
    a NaN (-0.0 == 0.0 and NaN != NaN as keys) and for a value x's dtype cannot hold.

    Replaces: c itself, as in ``x * c``. NumPy turns a Python number into x's dtype (NEP 50)
    on every call: ``x * 1.0001`` on 4 float32 values took 860 ns, against 440 ns with a 0-d
    float32 array of the same value, which NumPy takes as it is. Same value, same dtype, same
    loop: the same bits (tested for float16, float32 and float64).
    """
    if type(c) is not float and type(c) is not int:  # a NumPy scalar has its own dtype
        return c
    # The array type before the dtype: dtypes of two libraries are never compared.
    operand = _scalar_operands.get((c, type(x), x.dtype))
    return _new_scalar_operand(c, x) if operand is None else operand


def _new_scalar_operand(c: float, x: Any) -> Any:
    if not is_host_array(x) or x.dtype.kind != "f" or c == 0 or c != c:
        return c
    xp = namespace(x)
    try:
        with xp.errstate(over="ignore"):
            operand = xp.asarray(c, dtype=x.dtype)
    except OverflowError:  # an int beyond every float: NumPy's own conversion says so
        return c
    if not math.isinf(c) and math.isinf(operand):  # past the dtype's range: NumPy warns, as before
        return c
    operand.flags.writeable = False  # shared by every caller: nothing may write into it
    if len(_scalar_operands) >= SCALAR_OPERANDS_LIMIT:
        _scalar_operands.clear()
    _scalar_operands[(c, type(x), x.dtype)] = operand
    return operand


def relu_array(x: Any) -> Any:
    """max(x, 0), elementwise (NaN stays NaN; -0.0 gives 0.0).

    Replaces: ``xp.maximum(x, 0.0)``.
    NumPy's maximum runs its vector loop only when both operands are arrays laid out alike;
    against a scalar it goes value by value. On (64, 16, 256) float32 values (an AVX2 CPU) it
    took 189 us with 0.0 and 45 us with an array of zeros: the same function of the same
    values, so the same bits. The zeros are `zeros_operand`'s cached buffer.
    Shapes: x any -> x's shape.
    """
    zeros = zeros_operand(x)
    xp = namespace(x)
    if zeros is None:  # an integer tensor's relu stays in its dtype, as in PyTorch
        zeros = 0.0 if xp.isdtype(x.dtype, "real floating") else xp.zeros_like(x)
    return xp.maximum(x, zeros)


def power(x: Any, c: float) -> Any:
    """x ** c, by repeated products when c is 2, 3 or 4.

    Replaces: ``x ** c``. NumPy's power with a float exponent other than 2 runs the general pow,
    about 20x slower than a product on float32 (``x ** 3.0`` of GELU's tanh form dominated a
    small GPT's step); x * x * x agrees with it to rounding (one ulp or two).
    """
    if c in (3, 4):
        square = x * x
        return square * x if c == 3 else square * square
    return x * x if c == 2 else x**c


# The values `in_pieces` takes at a time (256 KB of float64 temporaries: a core's L2 holds them).
IN_PIECES_ELEMENTS = 32768


def in_pieces(function: Callable[[Any], Any], x: Any, elements: int = IN_PIECES_ELEMENTS) -> Any:
    """An elementwise `function` of `x`, computed on pieces of `elements` values at a time.

    Replaces: ``function(x)``.
    A function of many array passes (erf: two polynomials, in float64) makes each of its
    temporaries as large as `x`; on an activation of 262,144 values that is 2 MB per temporary,
    and its four or five temporaries together outgrow the core's cache, so every pass goes to
    memory. On pieces of 32,768 values (256 KB per float64 temporary) they stay in cache: the
    normal CDF of GELU on a (1024, 256) float32 array took 10.6 ms whole and 3.2 - 3.3 ms in
    pieces, with the same values (pieces of 16,384 or 49,152 values: 3.5 - 3.7 ms; one 2 MB L2 per
    core). Arrays no larger than one piece take one call, and so do arrays off the host: on a
    GPU each piece would be another kernel launch per pass.
    Shapes: x any -> function(x)'s shape (the same).
    """
    size = math.prod(x.shape)
    if size <= elements or not is_host_array(x):
        return function(x)
    xp = namespace(x)
    flat = xp.reshape(x, (-1,))
    first = function(flat[:elements])
    out = xp.empty((size,), dtype=first.dtype, device=x.device)
    out[:elements] = first
    for start in range(elements, size, elements):
        piece = slice(
            start, min(start + elements, size)
        )  # the standard refuses a stop past the end
        out[piece] = function(flat[piece])
    return xp.reshape(out, x.shape)


# ----------------------------------------------------------------- first-order backward rules
# Every rule in ops/ is written with Tensor ops, so that under ``create_graph`` its gradient is a
# graph of its own. Without one (every ordinary training step), those ops only cost dispatch:
# LayerNorm's rule is fourteen ops, each a Function.apply of its own, and a matrix product's is a
# reshape, a transpose, a product and a sum per operand. The functions below compute the same
# gradients on arrays, making the array calls the rule's ops make, in the same order, so the
# bits are the same too; a rule calls one when `autograd.rules_on_arrays()`. Each returns a
# tuple of arrays (None for a gradient not wanted), or None where it does not apply (another
# dtype than float32 or float64, or dtypes that differ: the ops would promote or accumulate in
# float32), and the rule's Tensor ops run instead.


def matmul_array(a: Any, b: Any) -> Any:
    """a @ b, with a stack of matrices times one matrix as one GEMM over all rows.

    Replaces: ``xp.matmul(a, b)``. NumPy loops a small GEMM over the batch of (..., n, k) @
    (k, m); folding the batch into the rows makes it one (N, k) @ (k, m) call.
    `ops.MatMul.forward` and the rules below share it, so a product is made one way everywhere.
    Shapes: a (..., n, k), b (k, m) -> (..., n, m); otherwise as ``xp.matmul``.
    """
    xp = namespace(a)
    if b.ndim == 2 and a.ndim > 2:
        flat = xp.matmul(reshape(a, (-1, a.shape[-1])), b)  # (..., n, k) -> (N, m)
        return reshape(flat, (*a.shape[:-1], b.shape[-1]))
    return xp.asarray(xp.matmul(a, b))


def same_float(*arrays: Any) -> bool:
    """Whether the arrays (None skipped) are all float32 or all float64: where an array rule
    makes the same calls as the Tensor ops (which promote two dtypes as PyTorch does, and sum
    float16 in float32)."""
    first = next(a for a in arrays if a is not None)
    xp, dtype = namespace(first), first.dtype
    if not (dtype == xp.float32 or dtype == xp.float64):
        return False
    return all(a is None or a.dtype == dtype for a in arrays)


def linear_grads(grad: Any, x: Any, weight: Any, wanted: tuple[bool, ...]) -> tuple | None:
    """dL/dx = g W, dL/dW = g^T x and dL/db = sum of g, with the leading axes folded into rows.

    Replaces: `ops.Linear.backward`'s Tensor ops. `x` is read only for dL/dW and `weight` only
    for dL/dx (the op keeps no more); `wanted` has one flag per input.
    Shapes: grad (..., out), x (..., in), weight (out, in) -> (..., in), (out, in), (out,).
    """
    if not same_float(grad, x, weight):
        return None
    xp = namespace(grad)
    rows = reshape(grad, (-1, grad.shape[-1]))  # (..., out) -> (N, out)
    grad_x = grad_w = grad_b = None
    if wanted[0]:
        grad_x = matmul_array(grad, weight)
    if wanted[1]:
        grad_w = matmul_array(xp.matrix_transpose(rows), reshape(x, (-1, x.shape[-1])))
    if len(wanted) == 3 and wanted[2]:
        grad_b = sum_array(rows, (0,))
    return (grad_x, grad_w, grad_b)[: len(wanted)]


def matmul_grads(
    grad: Any, a: Any, b: Any, shapes: tuple[tuple, tuple], wanted: tuple[bool, bool]
) -> tuple | None:
    """dL/da = g b^T and dL/db = a^T g, for matrices, stacks of them with the same leading axes,
    or a stack times one matrix (the stack's rows summed by one GEMM); None for other `shapes`
    of a and b (1-D operands, batches that broadcast). `a` is read only for dL/db and `b` only
    for dL/da (the op keeps no more).

    Replaces: `ops.MatMul.backward`'s Tensor ops for those shapes.
    Shapes: grad (..., n, m), a (..., n, k), b (..., k, m) or (k, m) -> a's and b's shapes.
    """
    a_shape, b_shape = shapes
    if len(a_shape) < 2 or len(b_shape) < 2:
        return None
    if (len(b_shape) != 2 and a_shape[:-2] != b_shape[:-2]) or not same_float(grad, a, b):
        return None
    xp = namespace(grad)
    grad_a = grad_b = None
    if wanted[0]:
        grad_a = matmul_array(grad, xp.matrix_transpose(b))
    if wanted[1]:
        if len(b_shape) == 2 and len(a_shape) > 2:
            rows = reshape(a, (-1, a_shape[-1]))  # (..., n, k) -> (N, k)
            grad_rows = reshape(grad, (-1, grad.shape[-1]))
            grad_b = matmul_array(xp.matrix_transpose(rows), grad_rows)
        else:
            grad_b = matmul_array(xp.matrix_transpose(a), grad)
    return grad_a, grad_b


def layer_norm_grads(
    grad: Any, x_hat: Any, rstd: Any, weight: Any, axes: tuple[int, ...], wanted: tuple
) -> tuple | None:
    """dL/dx = rstd * (h - mean(h) - x_hat * mean(h * x_hat)) with h = g * w (g without a
    weight), means over the normalised `axes`; dL/dw = sum(g * x_hat), dL/db = sum(g) over the
    other (leading) axes.

    Replaces: `ops.LayerNorm.backward`'s Tensor ops. `wanted` flags dL/dx, dL/dw, dL/db. With a
    weight, the sums of h * x_hat are (g * x_hat) @ w, from dL/dw's own operand g * x_hat.
    Shapes: grad and x_hat (..., *normalized), rstd (..., 1, ...), weight (*normalized) or None
    -> (dL/dx like x_hat, dL/dw and dL/db (*normalized)).
    """
    if not same_float(grad, x_hat, rstd, weight):
        return None
    axes = tuple(sorted(a % x_hat.ndim for a in axes))
    leading = tuple(range(x_hat.ndim - len(axes)))
    count = math.prod(x_hat.shape[a] for a in axes)
    grad_x = grad_w = grad_b = None
    scaled = grad * x_hat if wanted[0] or wanted[1] else None  # g * x_hat
    if wanted[1]:
        grad_w = sum_array(scaled, leading)
    if wanted[2]:
        grad_b = sum_array(grad, leading)
    if wanted[0]:
        h = grad * weight if weight is not None else grad
        mean_h = sum_array(h, axes, keepdims=True) / count
        if weight is None:  # h * x_hat is g * x_hat itself
            mean_hx = sum_array(scaled, axes, keepdims=True) / count
        else:  # sum(h * x_hat) = sum(g * x_hat * w): one product with w, no pass of its own
            sums = matmul_array(reshape(scaled, (-1, count)), reshape(weight, (count,)))
            mean_hx = reshape(sums, rstd.shape) / count
        # In place where the arrays are this rule's own (h with a weight, and g * x_hat once its
        # sums are taken): the same values with two fresh (N, C) arrays fewer, whose first
        # touch of new memory is what a pass over them costs most.
        if weight is not None:
            h -= mean_h
            grad_x = h
        else:
            grad_x = h - mean_h  # a new array: the in-place steps below never touch grad
        if has_out(scaled) and leading:  # leading axes: dL/dw above is a new array, not a view
            ufuncs_of(scaled).multiply(x_hat, mean_hx, out=scaled)
            grad_x -= scaled
        else:
            grad_x -= x_hat * mean_hx
        grad_x *= rstd
    return grad_x, grad_w, grad_b


def gelu_grad(grad: Any, x: Any, cdf: Any) -> tuple | None:
    """dL/dx = g * (Phi(x) + x * phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi), from the saved
    Phi(x) = `cdf`.

    Replaces: `ops.Gelu.backward`'s seven Tensor ops: the same passes, into one new array.
    Shapes: grad, x, cdf (any, the same) -> (x's shape,).
    """
    if not same_float(grad, x, cdf):
        return None
    xp = namespace(x)
    pdf = x * x
    pdf *= -0.5
    pdf = xp.exp(pdf)
    pdf *= 1.0 / math.sqrt(2.0 * math.pi)
    pdf *= x
    pdf += cdf
    pdf *= grad
    return (pdf,)


def softmax_grad(grad: Any, y: Any, axis: int) -> tuple | None:
    """dL/dx = y * (g - sum(g * y)), the sum along `axis`, from the output y.

    Replaces: `ops.Softmax.backward`'s four Tensor ops.
    Shapes: grad, y (..., N) -> ((..., N),).
    """
    if not same_float(grad, y):
        return None
    total = sum_array(grad * y, (axis % y.ndim,), keepdims=True)
    result = grad - total
    result *= y
    return (result,)


def log_softmax_grad(grad: Any, y: Any, axis: int) -> tuple | None:
    """dL/dx = g - exp(y) * sum(g), the sum along `axis`, from the output y.

    Replaces: `ops.LogSoftmax.backward`'s four Tensor ops.
    Shapes: grad, y (..., N) -> ((..., N),).
    """
    if not same_float(grad, y):
        return None
    scaled = namespace(y).exp(y)
    scaled *= sum_array(grad, (axis % y.ndim,), keepdims=True)
    return (grad - scaled,)


def cross_entropy_grad(
    grad: Any, log_probs: Any, weights: Any, count: Any = None, each: bool = False
) -> tuple | None:
    """dL/dx = G - exp(log p) * sum(G) along the last axis, G = -g w, with g / count for a
    mean and g per target (`each`) for no reduction.

    Replaces: `ops.CrossEntropy.backward`'s Tensor ops, which are those of the division's,
    the sum's, the negative log-likelihood's and log-softmax's rules it fuses.
    Shapes: grad () or (...), log_probs and weights (..., C) -> ((..., C),).
    """
    if not same_float(grad, log_probs, weights):
        return None
    if count is not None:
        grad = grad / count
    elif each:
        grad = grad[..., None]
    terms = -(grad * weights)
    scaled = namespace(log_probs).exp(log_probs)
    scaled *= sum_array(terms, (terms.ndim - 1,), keepdims=True)
    return (terms - scaled,)


# ------------------------------------------------------------ attention with heads side by side
def split_heads(x: Any, heads: int) -> Any:
    """A projection's heads, laid side by side in its last axis, as a stack: a view, no copy.

    Replaces: nothing to compute (``ops.HeadsAttention`` and its rule share the one spelling).
    Shapes: x (B, T, H * D) -> (B, H, T, D).
    """
    batch, length, width = x.shape
    parts = reshape(x, (batch, length, heads, width // heads))  # (B, T, H, D)
    return namespace(x).permute_dims(parts, (0, 2, 1, 3))


def merged_heads_product(a: Any, b: Any, into: Any = None) -> Any:
    """a @ b for every head, the heads' results laid side by side again.

    Replaces: ``reshape(permute_dims(a @ b, (0, 2, 1, 3)), (B, T, H * D))``, which copies the
    permuted product. On the host, each head's product is written by ``out=`` straight into its
    columns of the merged array (NumPy hands BLAS the strided rows): the same products, no copy.
    `into`, a host (B, T, H, D) view (`packed_head_parts`), receives them instead of a new
    array, and is what is returned. Off the host the copy is taken (a small part of a GPU
    step's time; the CuPy suite runs it).
    Shapes: a (B, H, T, K), b (B, H, K, D) -> (B, T, H * D) (`into` itself when given).
    """
    xp = namespace(a)
    batch, heads, length, _ = a.shape
    width = b.shape[-1]
    if into is not None:
        ufuncs_of(a).matmul(a, b, out=xp.permute_dims(into, (0, 2, 1, 3)))
        return into
    if is_host_array(a):
        merged = xp.empty((batch, length, heads, width), dtype=a.dtype, device=a.device)
        ufuncs_of(a).matmul(a, b, out=xp.permute_dims(merged, (0, 2, 1, 3)))
    else:
        merged = xp.permute_dims(xp.matmul(a, b), (0, 2, 1, 3))
    return reshape(merged, (batch, length, heads * width))


def packed_thirds(x: Any) -> tuple:
    """q, k and v of a packed projection, the three equal column blocks of its last axis (views).

    Replaces: nothing to compute (``ops.HeadsAttention`` with ``packed=True`` and its rule share
    the one spelling). Shapes: x (B, T, 3 * C) -> three (B, T, C).
    """
    width = x.shape[-1] // 3
    return x[..., :width], x[..., width : 2 * width], x[..., 2 * width :]


def packed_head_parts(x: Any, heads: int) -> tuple:
    """The q, k and v blocks of a packed (B, T, 3 * C) host array, each as a (B, T, H, D) view,
    for `merged_heads_product` to write into. Shapes: x (B, T, 3 * C) -> three (B, T, H, D)."""
    batch, length, width = x.shape
    parts = x.reshape(batch, length, 3, heads, width // (3 * heads))  # (B, T, 3, H, D)
    return parts[:, :, 0], parts[:, :, 1], parts[:, :, 2]


def softmax_in_place(xp: Any, x: Any) -> Any:
    """Softmax along the last axis of `x`, an array the caller owns and no longer needs: the
    shift and the exp are written over it where the library takes ``out=`` (NumPy, CuPy).

    Replaces: ``ops.softmax._softmax(xp, x, x.ndim - 1)``, the same calls in the same order.
    Shapes: x (..., N) -> (..., N), x itself on NumPy and CuPy.
    """
    axis = x.ndim - 1
    shift = row_shift(xp, x, axis)
    if has_out(x):
        x -= shift
        exps = ufuncs_of(x).exp(x, out=x)
    else:
        exps = xp.exp(x - shift)
    total = sum_array(exps, (axis,), keepdims=True)
    exps /= xp.where(total == 0, xp.ones_like(total), total)  # all -inf rows: 0 / 1
    return exps


def heads_attention_grads(
    grad: Any,
    q: Any,
    k: Any,
    v: Any,
    weights: Any,
    heads: int,
    scale: float,
    wanted: tuple,
    into: tuple = (None, None, None),
) -> tuple | None:
    """dL/dq, dL/dk, dL/dv of ``ops.HeadsAttention`` from its saved weights P: per head,
    dV = P^T dO,  dS = P * (dP - sum(dP * P)) * scale with dP = dO v^T,  dQ = dS k,  dK = dS^T q.

    Replaces: ``ops.HeadsAttention.backward``'s Tensor ops, the same products in the same order;
    the gradients land in the inputs' layout (`merged_heads_product`), or in `into`'s host
    (B, T, H, D) views (`packed_head_parts`: the blocks of one packed gradient). `wanted` flags
    q, k, v.
    Shapes: grad (B, Tq, H * Dv), q (B, Tq, H * D), k (B, Tk, H * D), v (B, Tk, H * Dv),
    weights (B, H, Tq, Tk) -> q's, k's and v's shapes.
    """
    if not same_float(grad, q, k, v, weights):
        return None
    xp = namespace(grad)
    q_h, k_h, v_h, grad_h = (split_heads(t, heads) for t in (q, k, v, grad))
    grad_q = grad_k = grad_v = None
    if wanted[2]:
        grad_v = merged_heads_product(xp.matrix_transpose(weights), grad_h, into[2])
    if wanted[0] or wanted[1]:
        grad_scores = matmul_array(grad_h, xp.matrix_transpose(v_h))  # dP: (B, H, Tq, Tk)
        # `softmax_grad`'s calls, in place in dP (this rule's own array): P * (dP - sum(dP * P))
        grad_scores -= sum_array(grad_scores * weights, (3,), keepdims=True)
        grad_scores *= weights
        grad_scores *= scale  # Tensor ops' x * scale, bit for bit
        if wanted[0]:
            grad_q = merged_heads_product(grad_scores, k_h, into[0])
        if wanted[1]:
            grad_k = merged_heads_product(xp.matrix_transpose(grad_scores), q_h, into[1])
    return grad_q, grad_k, grad_v


# ------------------------------------------------------------------- block-wise attention tiles
# A tile is (queries per block) x (keys per block) for every batch entry. Keys per block is fixed;
# queries per block follow from the numbers in one tile's scores (batch * Bq * Bk). 2**19 (2 MB
# in float32: 512 x 256 for 4 heads) was the fastest of the tiles tried (docs/performance.md):
# smaller tiles pay more Python per score, larger ones fall out of a core's 2 MB L2 cache.
ATTENTION_BLOCK_KEYS = 256
ATTENTION_BLOCK_SCORES = 1 << 19
# On a GPU the same tile is a few microseconds of work, less than the Python and the kernel
# launches around it: tiles there are 64 times larger (2048 keys, 2**25 scores, 128 MB in
# float32), still a small part of a GPU's memory.
GPU_ATTENTION_BLOCK_KEYS = 2048
GPU_ATTENTION_BLOCK_SCORES = 1 << 25
# Threads that work on different query blocks at once (NumPy releases the GIL inside its kernels).
# 1 by default: more pays only with a 1-thread BLAS (threadpoolctl), because a multi-threaded BLAS
# called from every thread oversubscribes the cores (measured in docs/performance.md).
ATTENTION_THREADS = 1


def block_sizes(batch: int, tq: int, tk: int, gpu: bool = False) -> tuple[int, int]:
    """(queries, keys) per tile, each between 1 and its sequence length.

    Replaces: one tile of (Tq, Tk), the whole score matrix (what the plain attention makes).
    """
    keys, scores = (
        (GPU_ATTENTION_BLOCK_KEYS, GPU_ATTENTION_BLOCK_SCORES)
        if gpu
        else (ATTENTION_BLOCK_KEYS, ATTENTION_BLOCK_SCORES)
    )
    block_k = max(1, min(tk, keys))
    block_q = max(1, min(tq, scores // max(1, batch * block_k)))
    return block_q, block_k


def blocks(stop: int, size: int) -> list[slice]:
    """Consecutive slices of `size` covering [0, stop); the last one may be shorter.

    Replaces: ``[slice(0, stop)]``, one block.
    """
    return [slice(i, min(i + size, stop)) for i in range(0, stop, size)]


def parallel_map(function: Callable, items: list) -> list:
    """[function(item) for item in items], on ATTENTION_THREADS threads when that is above 1.

    Replaces: ``[function(item) for item in items]``.
    """
    if ATTENTION_THREADS <= 1 or len(items) <= 1:
        return [function(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415  (only when threads are on)

    with ThreadPoolExecutor(max_workers=ATTENTION_THREADS) as pool:
        return list(pool.map(function, items))
