"""Tensor methods, shape family: views and rearrangements.

``size()``, ``numel()``, ``reshape``/``view``, ``permute``/``transpose``/``t``/``T``/``mT``,
``unsqueeze``/``squeeze``, ``flatten``, ``expand``/``broadcast_to``, ``split``/``chunk``/``unbind``,
``narrow``/``select``, ``diagonal``/``diag``, ``tril``/``triu``, and the copies ``repeat``,
``tile``, ``flip``, ``roll``, ``repeat_interleave``, ``contiguous`` and ``clone``. Part of the
tensor layer: imports `backend`, `ops` and `methods.common`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .. import backend
from ..errors import DimError, TinyattnError
from ..ops import (
    BroadcastTo,
    Clone,
    Diagonal,
    Flip,
    Permute,
    Reshape,
    Split,
    SumTo,
    broadcast_shapes,
    check_reshape,
    normalize_dim,
)
from ..ops.reductions import reduction_axes
from .common import (
    TensorBase,
    check_integral,
    checked_shape,
    concat,
    filled,
    index_range,
    merged_dims,
    new_leaf,
    shape_arg,
    where,
)


class ShapeMethods(TensorBase):
    """Shape: views, rearrangements and copies."""

    __slots__ = ()  # every tensor's slots are declared once, in Tensor

    @property
    def mT(self) -> TensorBase:  # noqa: N802  (the array API name)
        """The last two axes swapped (a batch of matrix transposes)."""
        if self.ndim < 2:
            raise TinyattnError(f"mT: needs at least 2 dimensions, got shape {self.shape}")
        return self.swapaxes(-1, -2)

    def size(self, dim: int | None = None) -> Any:
        """The shape (PyTorch's ``x.size()``), or the length of one dimension: ``x.size(0)``."""
        if dim is None:
            return self.shape
        return self.shape[normalize_dim("size", dim, self.ndim)]

    def numel(self) -> int:
        """The number of elements."""
        return math.prod(self.array.shape)

    def dim(self) -> int:
        """The number of dimensions (``ndim``)."""
        return self.array.ndim

    def reshape(self, *shape: Any) -> TensorBase:
        """The same values in a new shape; one size may be -1 (inferred)."""
        shape = shape_arg(shape)
        if shape == self.shape:
            return self
        return Reshape.apply(self, shape=check_reshape(self.shape, shape))

    def view(self, *shape: Any) -> TensorBase:
        """The same memory in a new shape (one size may be -1), as PyTorch's view: writes through
        either tensor reach the other. Refused where the strides cannot express the shape (a
        transposed matrix flattened, say): ``reshape`` copies there."""
        shape = check_reshape(self.shape, shape_arg(shape))
        if backend.reshape_view(self.array, shape) is None:
            raise RuntimeError(
                f"view: size {shape} is not compatible with the input tensor's size and stride "
                f"(shape {self.shape}, not contiguous): at least one dimension spans across two "
                "contiguous subspaces. Use .reshape(...) instead."
            )
        return Reshape.apply(self, shape=shape)

    def contiguous(self) -> TensorBase:
        """This tensor itself when its memory is row-major without gaps, else a row-major copy
        (a transposed or sliced tensor), as PyTorch's ``contiguous()``."""
        if backend.is_contiguous(self.array):
            return self
        return Clone.apply(self, contiguous=True)

    def is_contiguous(self) -> bool:
        """Whether the memory is row-major without gaps, so that ``view`` can take any shape."""
        return backend.is_contiguous(self.array)

    def clone(self) -> TensorBase:
        """A copy in new memory that stays in the graph (the gradient passes through)."""
        return Clone.apply(self)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> TensorBase:
        """Merge dims start_dim..end_dim into one."""
        if self.ndim == 0:
            return self.reshape(1)
        start, end = (normalize_dim("flatten", d, self.ndim) for d in (start_dim, end_dim))
        if start > end:
            raise TinyattnError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        return self.reshape(self.shape[:start] + (-1,) + self.shape[end + 1 :])

    def permute(self, *axes: Any, dims: Any = None) -> TensorBase:
        """Reorder the axes: ``y.shape[i] == x.shape[axes[i]]``."""
        axes = shape_arg(axes if dims is None else (dims,))
        if sorted(a % self.ndim if self.ndim else a for a in axes) != list(range(self.ndim)):
            raise TinyattnError(
                f"permute: axes {axes} are not a permutation of a tensor with shape {self.shape}"
            )
        return Permute.apply(self, axes=tuple(a % self.ndim for a in axes))

    def transpose(self, dim0: int, dim1: int) -> TensorBase:
        """Swap two dimensions (PyTorch's meaning; a full reordering is ``permute``)."""
        return self.swapaxes(dim0, dim1)

    @property
    def T(self) -> TensorBase:  # noqa: N802  (PyTorch's and NumPy's name)
        """All dimensions reversed (the matrix transpose of a 2-d tensor)."""
        return self.permute(*reversed(range(self.ndim)))

    def swapaxes(self, axis1: int, axis2: int) -> TensorBase:
        a, b = (
            normalize_dim("swapaxes", axis1, self.ndim),
            normalize_dim("swapaxes", axis2, self.ndim),
        )
        axes = list(range(self.ndim))
        axes[a], axes[b] = axes[b], axes[a]
        return Permute.apply(self, axes=tuple(axes))

    def expand_dims(self, axis: int) -> TensorBase:
        """Insert a size-1 axis at position `axis` of the result."""
        ndim = self.ndim + 1
        if not -ndim <= axis < ndim:
            raise DimError(
                f"expand_dims: axis {axis} is out of range for a result with {ndim} dimensions"
            )
        axis %= ndim
        return Reshape.apply(self, shape=self.shape[:axis] + (1,) + self.shape[axis:])

    def unsqueeze(self, dim: int) -> TensorBase:
        return self.expand_dims(dim)

    def squeeze(self, axis: Any = None, *, dim: Any = None) -> TensorBase:
        """Remove size-1 axes: all of them, or those of the given ones that have size 1 (a
        given axis of another size stays, as in PyTorch). Always a view."""
        axis, _ = merged_dims("squeeze", axis, False, dim, None)
        axes = range(self.ndim) if axis is None else reduction_axes("squeeze", axis, self.ndim)
        axes = tuple(a for a in axes if self.shape[a] == 1)
        return Reshape.apply(
            self, shape=tuple(n for i, n in enumerate(self.shape) if i not in axes)
        )

    def broadcast_to(self, *shape: Any) -> TensorBase:
        shape = shape_arg(shape)
        if shape == self.shape:
            return self
        if len(shape) < self.ndim or broadcast_shapes("broadcast_to", self.shape, shape) != shape:
            raise TinyattnError(f"broadcast_to: cannot broadcast shape {self.shape} to {shape}")
        return BroadcastTo.apply(self, shape=shape)

    def expand(self, *sizes: Any) -> TensorBase:
        """broadcast_to, where -1 keeps a dimension's size (PyTorch's expand)."""
        sizes = shape_arg(sizes)
        lead = len(sizes) - self.ndim
        return self.broadcast_to(
            tuple(self.shape[i - lead] if n == -1 and i >= lead else n for i, n in enumerate(sizes))
        )

    def repeat(self, *sizes: Any) -> TensorBase:
        """Tile the tensor `sizes[i]` times along dim i (PyTorch's repeat, NumPy's tile).

        Composed from reshape and broadcast_to: (a, b) -> (1, a, 1, b) -> (r, a, s, b) ->
        (r a, s b), so the gradient (a sum over the copies) comes from those ops.
        """
        sizes = checked_shape("repeat", shape_arg(sizes))
        if len(sizes) < self.ndim:
            raise TinyattnError(
                f"repeat: {len(sizes)} repeat count(s) for a tensor with {self.ndim} dimensions"
            )
        shape = (1,) * (len(sizes) - self.ndim) + self.shape
        spread = tuple(n for size in shape for n in (1, size))
        tiled = tuple(n for count, size in zip(sizes, shape) for n in (count, size))
        out = self.reshape(spread).broadcast_to(tiled)
        out = out.reshape(tuple(count * size for count, size in zip(sizes, shape)))
        # Counts of 1 everywhere leave a view of the input; repeat always owns new memory.
        return out.clone() if all(count == 1 for count in sizes) else out

    def flip(self, *dims: Any, **keywords: Any) -> TensorBase:
        """The values in reverse order along `dims` (``flip(0, 1)``, ``flip((0, 1))``,
        ``flip(dims=[0])``)."""
        # reduction_axes: a 0-d tensor takes dim 0 or -1, as in PyTorch (and is copied)
        axes = reduction_axes("flip", shape_arg(dims or (keywords.pop("dims", ()),)), self.ndim)
        if keywords:
            raise TypeError(f"flip: unexpected keyword argument(s) {sorted(keywords)}")
        return Flip.apply(self, axes=axes) if axes else self.clone()  # a copy, as PyTorch's

    def split(self, split_size_or_sections: Any, dim: int = 0) -> tuple[TensorBase, ...]:
        """Pieces of `split_size` along dim (the last may be shorter), or of the listed sizes."""
        axis = normalize_dim("split", dim, self.ndim)
        length = self.shape[axis]
        if isinstance(split_size_or_sections, int):
            step = split_size_or_sections
            if step <= 0:
                raise TinyattnError(f"split: split_size must be positive, got {step}")
            sizes = [min(step, length - start) for start in range(0, length, step)] or [0]
        else:
            sizes = list(split_size_or_sections)
            if sum(sizes) != length:
                raise TinyattnError(
                    f"split: sizes {sizes} sum to {sum(sizes)}, not to the length {length} of "
                    f"dim {dim} of shape {self.shape}"
                )
        # One node with a piece per output: backward concatenates the pieces' gradients once.
        return Split.apply(self, axis=axis, sizes=tuple(sizes))

    def chunk(self, chunks: int, dim: int = 0) -> tuple[TensorBase, ...]:
        """At most `chunks` pieces of equal size ceil(n / chunks) along dim."""
        if chunks <= 0:
            raise TinyattnError(f"chunk: chunks must be positive, got {chunks}")
        length = self.shape[normalize_dim("chunk", dim, self.ndim)]
        return self.split(max(1, -(-length // chunks)), dim)

    def tril(self, diagonal: int = 0) -> TensorBase:
        """Zeros above the `diagonal`-th diagonal of the last two dims."""
        return where(_band(self, diagonal, lower=True), self, 0)

    def triu(self, diagonal: int = 0) -> TensorBase:
        """Zeros below the `diagonal`-th diagonal of the last two dims."""
        return where(_band(self, diagonal, lower=False), self, 0)

    def sum_to(self, shape: tuple) -> TensorBase:
        """Sum over broadcast axes so the result has `shape` (the adjoint of broadcast_to)."""
        shape = tuple(shape)
        if shape == self.shape:
            return self
        return SumTo.apply(self, shape=shape)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> TensorBase:
        """The diagonal `offset` of the matrices that dims `dim1` and `dim2` span (above the
        main one for offset > 0), as a new last dim, as PyTorch orders it.
        dL/dx = g on that diagonal, 0 elsewhere.

        Shapes: (..., r, ..., c, ...) -> (the other dims..., the diagonal's length)."""
        if type(offset) is not int:
            raise TypeError(f"diagonal: offset must be an int, got {offset!r}")
        if self.ndim < 2:
            raise TinyattnError(f"diagonal: needs at least 2 dimensions, got shape {self.shape}")
        first, second = (normalize_dim("diagonal", d, self.ndim) for d in (dim1, dim2))
        if first == second:
            raise TinyattnError(f"diagonal: dim1 and dim2 must differ, got {dim1} and {dim2}")
        return Diagonal.apply(self, offset=offset, axes=(first, second))  # a view, as PyTorch's

    def t(self) -> TensorBase:
        """A matrix transposed; a tensor of 0 or 1 dims as it is (PyTorch's t())."""
        if self.ndim > 2:
            raise TinyattnError(
                f"t: expects a tensor of at most 2 dims, got shape {self.shape}; use "
                "transpose(dim0, dim1) or mT"
            )
        return self.transpose(0, 1) if self.ndim == 2 else self

    def view_as(self, other: TensorBase) -> TensorBase:
        return self.reshape(*other.shape)

    reshape_as = view_as

    def expand_as(self, other: TensorBase) -> TensorBase:
        return self.expand(*other.shape)

    def diag(self, diagonal: int = 0) -> TensorBase:
        """A 1-D tensor v -> the square matrix with v on diagonal `diagonal` (0 the main one,
        above it positive), zeros elsewhere; a 2-D tensor -> that diagonal of it, as 1-D.

        Shapes: (n,) -> (n + |k|, n + |k|);  (r, c) -> (the diagonal's length,)."""
        if type(diagonal) is not int:
            raise TypeError(f"diag: diagonal must be an int, got {diagonal!r}")
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise TinyattnError(f"diag: expected a 1-D or 2-D tensor, got shape {self.shape}")
        n = self.shape[0]
        size = n + abs(diagonal)
        # Row i of the result's n nonzero rows holds v[i] at column i + max(k, 0): a one-hot
        # matrix times v, padded with |k| zero rows (below for k >= 0, above for k < 0).
        columns = index_range(self, size)
        one_hot = columns == (index_range(self, n) + max(diagonal, 0)).unsqueeze(1)
        rows = self.unsqueeze(1) * one_hot
        if diagonal == 0:
            return rows
        padding = filled(self._from_op, (abs(diagonal), size), 0, self.dtype, self.device, False)
        return concat([rows, padding] if diagonal > 0 else [padding, rows], axis=0)

    def tile(self, *dims: Any) -> TensorBase:
        """The tensor repeated dims[i] times along dim i; fewer dims than dimensions count from
        the last (ones are put in front), as PyTorch's tile and NumPy's; the gradient sums the
        copies. Shapes: (..., n_i, ...) -> (..., dims_i * n_i, ...)."""
        dims = shape_arg(dims)
        return self.repeat(*((1,) * (self.ndim - len(dims)) + tuple(dims)))

    def repeat_interleave(self, repeats: Any, dim: int | None = None) -> TensorBase:
        """Each entry along `dim` repeated `repeats` times in place (``[a, b] -> [a, a, b, b]``);
        `repeats` an int or a 1-D integer tensor of one count per entry; with no dim the tensor
        is flattened first. The gradient sums the copies back.

        Shapes: (..., n, ...) -> (..., sum of the repeats, ...)."""
        source = self.reshape(-1) if dim is None else self
        axis = 0 if dim is None else dim
        size = source.shape[axis] if -source.ndim <= axis < source.ndim else 0
        key = source._along("repeat_interleave", axis)
        if type(repeats) is int:
            if repeats < 0:
                raise TinyattnError(f"repeat_interleave: repeats must be >= 0, got {repeats}")
            index = index_range(self, size * repeats) // max(repeats, 1)
            return source[(*key, index)]
        repeats = self._operand(repeats, "repeat_interleave")
        check_integral("repeat_interleave", repeats)
        if repeats.ndim > 1 or (repeats.ndim == 1 and repeats.shape[0] not in (1, size)):
            raise TinyattnError(
                f"repeat_interleave: repeats of shape {repeats.shape} for {size} entries along "
                f"dim {axis}; give one count, or one per entry"
            )
        counts = repeats.reshape(-1).tolist()
        counts = counts * size if len(counts) == 1 else counts  # one count for every entry
        if any(count < 0 for count in counts):
            raise TinyattnError(f"repeat_interleave: repeats must be >= 0, got {counts}")
        positions = [entry for entry, count in enumerate(counts) for _ in range(count)]
        return source[(*key, new_leaf(self._from_op, positions, "int64", self.device, False))]

    def _along(self, op: str, dim: int) -> tuple:
        """The indexing key's leading full slices up to `dim` (checked)."""
        if not -self.ndim <= dim < self.ndim:
            raise IndexError(f"{op}: dim {dim} is out of range for shape {self.shape}")
        return (slice(None),) * (dim % self.ndim)

    def select(self, dim: int, index: int) -> TensorBase:
        """``x[..., index, ...]`` at `dim`: that dimension removed."""
        return self[(*self._along("select", dim), index)]

    def narrow(self, dim: int, start: int, length: int) -> TensorBase:
        """`length` entries of `dim` from `start` (a view)."""
        size = self.shape[dim] if -self.ndim <= dim < self.ndim else 0
        start = start + size if start < 0 else start
        if length < 0 or not 0 <= start <= start + length <= size:
            raise IndexError(
                f"narrow: start {start} and length {length} do not fit dim {dim} of shape "
                f"{self.shape}"
            )
        return self[(*self._along("narrow", dim), slice(start, start + length))]

    def unbind(self, dim: int = 0) -> tuple[TensorBase, ...]:
        """The slices along `dim`, that dimension removed from each."""
        key = self._along("unbind", dim)
        return tuple(self[(*key, i)] for i in range(self.shape[dim]))

    def roll(self, shifts: Any, dims: Any = None) -> TensorBase:
        """Entries moved `shifts` places along `dims` (wrapping around); without `dims`, along
        the flattened tensor, then reshaped back."""
        if dims is None or dims == ():
            if isinstance(shifts, tuple | list) and len(shifts) != 1:
                raise RuntimeError(
                    f"roll: shifts and dimensions must align: {len(shifts)} shifts and no dims "
                    "(one shift rolls the flattened tensor)"
                )
            shift = shifts[0] if isinstance(shifts, tuple | list) else shifts
            return self.reshape(-1).roll(shift, 0).reshape(*self.shape)
        shifts = tuple(shifts) if isinstance(shifts, tuple | list) else (shifts,)
        dims = tuple(dims) if isinstance(dims, tuple | list) else (dims,)
        if len(shifts) != len(dims):
            raise RuntimeError(
                f"roll: shifts and dimensions must align: {len(shifts)} shifts for {len(dims)} dims"
            )
        out = self
        for shift, dim in zip(shifts, dims, strict=True):
            dim = normalize_dim("roll", dim, self.ndim)
            size = out.shape[dim]
            keep = (size - shift % size) % size if size else 0
            if keep:
                out = concat([out.narrow(dim, keep, size - keep), out.narrow(dim, 0, keep)], dim)
        return out.clone() if out is self else out  # a whole turn: still a copy, as PyTorch's

    def unfold(self, dimension: int, size: int, step: int) -> TensorBase:
        """The windows of `size` elements along `dimension`, `step` apart: that dimension
        becomes the window count (n - size) // step + 1 and a new last dimension holds each
        window. PyTorch returns a view; this is a copy (one index-array read, whose gradient
        adds the overlaps back).

        Shapes: (..., n, ...) -> (..., (n - size) // step + 1, ..., size)."""
        axis = normalize_dim("unfold", dimension, max(self.ndim, 1))
        length = self.shape[axis] if self.ndim else 1
        if type(step) is not int or step <= 0:
            raise RuntimeError(f"unfold: step is {step!r} but must be > 0")
        if type(size) is not int or not 0 <= size <= length:
            raise RuntimeError(
                f"unfold: maximum size for tensor at dimension {axis} is {length} but size is "
                f"{size!r}"
            )
        source = self.reshape(1) if not self.ndim else self
        xp = backend.namespace(self.array)
        device = self.array.device
        starts = xp.arange(0, length - size + 1, step, dtype=xp.int64, device=device)
        index = starts[:, None] + xp.arange(size, dtype=xp.int64, device=device)[None, :]
        windows = source[(slice(None),) * axis + (self._from_op(index, None),)]
        out = windows.movedim(axis + 1, -1)  # (..., count, size, ...) -> (..., count, ..., size)
        return out.reshape(size) if not self.ndim else out

    def unflatten(self, dim: int, sizes: Any) -> TensorBase:
        """Dimension `dim` split into `sizes` (one may be -1), a view where reshape gives one.

        Shapes: (..., n, ...) -> (..., *sizes, ...) with prod(sizes) = n."""
        axis = normalize_dim("unflatten", dim, self.ndim)
        sizes = tuple(sizes)
        if not sizes:
            raise RuntimeError("unflatten: sizes must be non-empty")
        known = math.prod(n for n in sizes if n != -1)
        n = self.shape[axis]
        fits = sizes.count(-1) <= 1 and (
            known == n if -1 not in sizes else known > 0 and n % known == 0
        )
        if not fits:
            raise RuntimeError(
                f"unflatten: provided sizes {list(sizes)} don't multiply up to the size of dim "
                f"{dim} ({n}) in the input tensor of shape {self.shape}"
            )
        return self.reshape(self.shape[:axis] + sizes + self.shape[axis + 1 :])

    def movedim(self, source: int | Sequence[int], destination: int | Sequence[int]) -> TensorBase:
        """Dims `source` moved to positions `destination` (two ints, or two sequences of the
        same length), the others keeping their order; a view, as PyTorch's.
        Shapes: (2, 3, 4).movedim((0, 1), (1, 0)) -> (3, 2, 4); .movedim(0, -1) -> (3, 4, 2)."""
        sources, destinations = _moved_dims(self.ndim, source, destination)
        order = [d for d in range(self.ndim) if d not in sources]
        # Filling the destinations from the lowest up leaves each earlier one where it is.
        for position, dim in sorted(zip(destinations, sources)):
            order.insert(position, dim)
        return self.permute(*order) if self.ndim else self.view(())

    moveaxis = movedim  # PyTorch's alias (NumPy's name)


def _moved_dims(ndim: int, source: Any, destination: Any) -> tuple[list[int], list[int]]:
    """`movedim`'s source and destination as equal-length lists of distinct non-negative dims,
    or PyTorch's TypeError (mixed or non-int arguments) or RuntimeError (lengths, repeats)."""
    pair = (source, destination)
    if all(isinstance(d, int) and not isinstance(d, bool) for d in pair):
        pair = ([source], [destination])
    elif not all(isinstance(d, tuple | list) for d in pair):
        raise TypeError(
            "movedim: source and destination must be two ints or two sequences of ints, got "
            f"{source!r} and {destination!r}"
        )
    if len(pair[0]) != len(pair[1]):
        raise RuntimeError(
            f"movedim: source {list(source)} and destination {list(destination)} must name the "
            "same number of dims"
        )
    named = []
    for role, dims in zip(("source", "destination"), pair, strict=True):
        # A 0-d tensor takes dim 0 or -1, as in PyTorch.
        wrapped = [normalize_dim("movedim", d, max(ndim, 1)) for d in dims]
        if len(set(wrapped)) != len(wrapped):
            raise RuntimeError(f"movedim: repeated dim in {role} {list(dims)}")
        named.append(wrapped)
    return named[0], named[1]


def _band(tensor: TensorBase, diagonal: int, lower: bool) -> TensorBase:
    """The bool mask of tril (lower) or triu over the last two dims of `tensor`."""
    if tensor.ndim < 2:
        raise TinyattnError(
            f"{'tril' if lower else 'triu'}: needs at least 2 dimensions, got shape {tensor.shape}"
        )
    rows, cols = tensor.shape[-2:]
    xp = backend.namespace(tensor.array)
    offset = (
        xp.arange(cols, device=tensor.array.device)[None, :]
        - xp.arange(rows, device=tensor.array.device)[:, None]
    )
    return tensor._from_op(offset <= diagonal if lower else offset >= diagonal, None)
