"""Movement primitives: reshape, permute, concat, split, and matrix multiplication.

They move or combine values without changing them, so each backward is the inverse movement:
reshape back, permute by the inverse permutation, slice the concatenation apart. MatMul lives
here because its backward is two matmuls with a transposed operand.
"""

from __future__ import annotations

import math
from typing import Any

from .. import kernels
from ..autograd import Function
from ..backend import namespace, reshape, to_device
from ..errors import TinyattnError


class Reshape(Function):
    """y = x viewed with a new shape (same number of elements);  dL/dx = g reshaped back;
    dy = dx viewed with the new shape."""

    __slots__ = ()
    backward_reads = ()
    shares_storage = True

    def forward(self, x: Any, shape: tuple = ()) -> Any:
        return reshape(x, shape)

    def backward(self, grad: Any) -> Any:
        return grad.reshape(self.inputs[0].shape)

    def jvp(self, tangent: Any) -> Any:
        return Reshape.apply(tangent, shape=self.output.shape)

    def backward_arrays(self, g: Any) -> tuple:
        return (reshape(g, self.inputs[0].shape),)  # the same view, without an op's dispatch


class Permute(Function):
    """y = x with axes reordered, y.shape[i] = x.shape[axes[i]];
    dL/dx = g permuted by the inverse permutation;  dy = dx permuted by `axes`."""

    __slots__ = ("axes",)
    backward_reads = ()
    shares_storage = True

    def forward(self, x: Any, axes: tuple = ()) -> Any:
        self.axes = axes
        return namespace(x).permute_dims(x, axes)

    def backward(self, grad: Any) -> Any:
        return grad.permute(*self._inverse())

    def jvp(self, tangent: Any) -> Any:
        return Permute.apply(tangent, axes=self.axes)

    def backward_arrays(self, g: Any) -> tuple:
        return (namespace(g).permute_dims(g, self._inverse()),)

    def _inverse(self) -> tuple:
        inverse = [0] * len(self.axes)
        for position, axis in enumerate(self.axes):
            inverse[axis] = position
        return tuple(inverse)


class Concat(Function):
    """y = the inputs joined along `axis`;  dL/dx_i = the slice of g that x_i filled;
    dy = the tangents joined along `axis` (zeros for an input without one)."""

    __slots__ = ("axis",)
    backward_reads = ()

    def forward(self, *arrays: Any, axis: int = 0) -> Any:
        self.axis = axis
        return namespace(arrays[0]).concat(arrays, axis=axis)

    def backward(self, grad: Any) -> tuple:
        grads, start = [], 0
        for tensor in self.inputs:
            stop = start + tensor.shape[self.axis]
            if tensor.requires_grad:
                grads.append(grad[(slice(None),) * self.axis + (slice(start, stop), Ellipsis)])
            else:
                grads.append(None)
            start = stop
        return tuple(grads)

    def jvp(self, *tangents: Any) -> Any:
        filled = [
            x.constant(namespace(x.array).zeros_like(x.array)) if tangent is None else tangent
            for x, tangent in zip(self.inputs, tangents, strict=True)
        ]
        return Concat.apply(*filled, axis=self.axis)

    def backward_arrays(self, g: Any) -> tuple:
        return self.backward(g)  # the same slices, of the array: views, no graph


class Split(Function):
    """The pieces of x along `axis`, of the given `sizes` (views of x);  dL/dx = the pieces'
    gradients concatenated along `axis` (zeros for a piece no gradient reached);  the pieces'
    tangents are dx split the same way (views of dx).

    Shapes: x (..., n, ...) -> one (..., size, ...) per size, the sizes summing to n. One node
    with several outputs: backward runs once, with every piece's gradient.
    """

    __slots__ = ("axis",)
    backward_reads = ()
    shares_storage = True

    def forward(self, x: Any, axis: int = 0, sizes: tuple = ()) -> tuple:
        self.axis = axis
        pieces, start, lead = [], 0, (slice(None),) * axis
        for size in sizes:
            pieces.append(x[(*lead, slice(start, start + size), ...)])  # basic indexing: a view
            start += size
        return tuple(pieces)

    def backward(self, *grads: Any) -> Any:
        return Concat.apply(*grads, axis=self.axis)

    def jvp(self, tangent: Any) -> tuple:
        sizes = tuple(piece.shape[self.axis] for piece in self.output)
        return Split.apply(tangent, axis=self.axis, sizes=sizes)


def matmul_shape(a_shape: tuple, b_shape: tuple) -> tuple:
    """The shape of ``a @ b`` (NumPy rules, 1-D operands included), or a ValueError naming both."""
    if not a_shape or not b_shape:
        raise TinyattnError(
            f"matmul: operands must have at least 1 dimension, got shapes {a_shape} and {b_shape}"
        )
    inner_a = a_shape[-1]
    inner_b = b_shape[0] if len(b_shape) == 1 else b_shape[-2]
    if inner_a != inner_b:
        raise TinyattnError(
            f"matmul: shapes {a_shape} and {b_shape} do not align ({inner_a} != {inner_b})"
        )
    batch = broadcast_shapes("matmul", a_shape[:-2], b_shape[:-2], (a_shape, b_shape))
    rows = a_shape[-2:-1] if len(a_shape) > 1 else ()
    cols = b_shape[-1:] if len(b_shape) > 1 else ()
    return batch + rows + cols


def broadcast_shapes(op: str, a: tuple, b: tuple, shown: tuple | None = None) -> tuple:
    """NumPy broadcasting of two shapes, or a ValueError naming the op and both shapes."""
    result = []
    for i in range(1, max(len(a), len(b)) + 1):
        m = a[-i] if i <= len(a) else 1
        n = b[-i] if i <= len(b) else 1
        if m != n and m != 1 and n != 1:
            left, right = shown or (a, b)
            raise TinyattnError(f"{op}: shapes {left} and {right} cannot be broadcast together")
        result.append(n if m == 1 else m)
    return tuple(reversed(result))


class MatMul(Function):
    """y = a @ b (batched, broadcast batch dims, 1-D operands as in NumPy);
    dL/da = g @ b^T, dL/db = a^T @ g (each summed over broadcast batch dims);
    dy = da @ b + a @ db.

    Shapes: a (..., n, k), b (..., k, m) -> y (..., n, m); a 1-D `a` is a row (1, k), a 1-D `b`
    a column (k, 1).
    """

    __slots__ = ()
    grad_reads = ((1,), (0,))  # dL/da reads b, dL/db reads a

    def forward(self, a: Any, b: Any) -> Any:
        matmul_shape(a.shape, b.shape)
        # A stack times one matrix is one (N, k) @ (k, m) GEMM over all rows, not a loop.
        return kernels.matmul_array(a, b)

    def backward_arrays(self, g: Any) -> tuple | None:
        a, b = self.inputs  # the same gradients by the same calls, on arrays (or None)
        wanted = (a.requires_grad, b.requires_grad)
        a_read, b_read = a.array if wanted[1] else None, b.array if wanted[0] else None
        return kernels.matmul_grads(g, a_read, b_read, (a.shape, b.shape), wanted)

    def backward(self, grad: Any) -> tuple:
        a, b = self.inputs
        # Promote 1-D operands to matrices so one pair of formulas covers every case. (An
        # operand whose gradient is not needed may not be kept: only its shape is used here.)
        a_shape = (1, a.shape[0]) if len(a.shape) == 1 else a.shape
        b_shape = (b.shape[0], 1) if len(b.shape) == 1 else b.shape
        grad2 = grad.reshape(matmul_shape(a_shape, b_shape))
        grad_a = grad_b = None
        if a.requires_grad:
            b2 = b.reshape(b_shape) if len(b.shape) == 1 else b
            grad_a = (grad2 @ b2.mT).sum_to(a_shape).reshape(a.shape)
        if b.requires_grad:
            a2 = a.reshape(a_shape) if len(a.shape) == 1 else a
            if len(b_shape) == 2 and a2.ndim > 2:
                # a's batch dims broadcast over b: fold them into the rows, one GEMM sums them.
                rows = a2.reshape((-1, a2.shape[-1]))  # (..., n, k) -> (N, k)
                grad_b = rows.mT @ grad2.reshape((-1, grad2.shape[-1]))  # (k, N) @ (N, m)
                grad_b = grad_b.reshape(b.shape)
            else:
                grad_b = (a2.mT @ grad2).sum_to(b_shape).reshape(b.shape)
        return grad_a, grad_b

    def jvp(self, tangent_a: Any, tangent_b: Any) -> Any:
        a, b = self.inputs
        if tangent_b is None:
            return tangent_a @ b
        if tangent_a is None:
            return a @ tangent_b
        return tangent_a @ b + a @ tangent_b


def check_reshape(shape: tuple, new_shape: tuple) -> tuple:
    """Resolve one -1 in `new_shape` and check the element count, naming both shapes."""
    size = math.prod(shape)
    unknown = [i for i, n in enumerate(new_shape) if n == -1]
    if len(unknown) > 1 or any((not isinstance(n, int)) or n < -1 for n in new_shape):
        raise TinyattnError(
            f"reshape: invalid target shape {new_shape} for a tensor of shape {shape}"
        )
    if unknown:
        known = math.prod(n for n in new_shape if n != -1)
        if known == 0 or size % known:
            raise TinyattnError(
                f"reshape: cannot reshape a tensor of shape {shape} into {new_shape}"
            )
        new_shape = tuple(size // known if n == -1 else n for n in new_shape)
    if math.prod(new_shape) != size:
        raise TinyattnError(
            f"reshape: cannot reshape a tensor of shape {shape} ({size} elements) into "
            f"{new_shape} ({math.prod(new_shape)} elements)"
        )
    return new_shape


class ToDevice(Function):
    """y = x copied to another device;  dL/dx = g copied back to x's device;
    dy = dx copied to y's device."""

    __slots__ = ()
    backward_reads = ()

    def forward(self, x: Any, device: Any = None) -> Any:
        return to_device(x, device)

    def backward(self, grad: Any) -> Any:
        return grad.to(self.inputs[0].device)

    def jvp(self, tangent: Any) -> Any:
        return tangent.to(self.output.device, copy=True)  # a copy even where nothing moves


# How vmap (tinyattn.func) runs each op on a batch at once: a kind of `batching.KINDS`.
VMAP_RULES = {
    Reshape: "reshape",
    Permute: "permute",
    Concat: "concat",
    Split: "along_axes",
    MatMul: "matmul",
    ToDevice: "elementwise",
}
