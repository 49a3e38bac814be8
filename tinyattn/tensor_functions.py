"""Free functions composed from Tensor methods: einsum, pad, meshgrid, cosine_similarity, hstack
and vstack (PyTorch's names), ``cat``, ``equal``, and ``FUNCTIONS``: ``ta.exp(x)``, ``ta.sum(x)``
and every other function that is a Tensor method with the tensor first.

Imports `tensor`, `creation`, `methods` and `ops`. None holds derivative math: einsum is
diagonals, sums, permutes, reshapes and one batched matmul per pair; pad is a concat with constant
blocks (or a slice, for negative padding); meshgrid reshapes and broadcasts; cosine_similarity
divides by norms and sums; hstack and vstack are concatenations. Their gradients, of any order,
come from those ops.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from . import backend
from .creation import full
from .errors import TinyattnError
from .methods.common import concat, describe
from .methods.inplace import IN_PLACE_UNARY
from .ops import broadcast_shapes, normalize_axes
from .ops.table import BINARY, LOGICAL, UNARY
from .tensor import Tensor

_EINSUM_HELP = "e.g. 'bhtd,bhsd->bhts', 'ij,jk,kl->il', '...ij->...ji' or 'ii->i'"
_SUBLIST_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def einsum(*args: Any) -> Tensor:
    """Sum of products over the letters an equation names, as ``torch.einsum``.

    ``einsum("ij,jk->ik", a, b)``, a list of operands, or PyTorch's sublist form
    ``einsum(a, [0, 1], b, [1, 2], [0, 2])``. ``...`` stands for the dims no letter names
    (broadcast, right-aligned); a letter repeated within one operand takes its diagonal
    (``"ii->i"``); size-1 dims broadcast. Without ``->`` the output is ``...`` and then the
    letters seen once, in alphabetical order. Operands are contracted pairwise from left to
    right: letters no later operand or the output needs are summed out first, and each pair
    is one batched matmul. Gradients, of any order, come from those ops. A bad equation is a
    RuntimeError, as in PyTorch.
    """
    equation, operands = _einsum_arguments(args)
    inputs, output = _parse_einsum(equation, operands)
    terms = [_diagonals(operand, letters) for operand, letters in zip(operands, inputs)]
    sizes = _letter_sizes(equation, terms)
    terms = [(_broadcast_letters(t, letters, sizes), letters) for t, letters in terms]

    def needed(after: int) -> set:
        return set(output).union(*(letters for _, letters in terms[after + 1 :]))

    current = _sum_letters(*terms[0], needed(0))
    for i in range(1, len(terms)):
        following = needed(i)
        term = _sum_letters(*terms[i], following | set(current[1]))
        current = _sum_letters(*current, following | set(term[1]))
        kept = "".join(c for c in dict.fromkeys(current[1] + term[1]) if c in following)
        current = (_contract(current, term, kept, sizes), kept)
    return _permuted(current[0], current[1], output)


def _einsum_arguments(args: tuple) -> tuple[str, list]:
    """(equation, operands) from ``(equation, *operands)``, ``(equation, [operands])`` or the
    sublist form ``(op, sublist, op, sublist, ..., [output sublist])``."""
    if args and isinstance(args[0], str):
        operands = args[1:]
        if len(operands) == 1 and isinstance(operands[0], list | tuple):
            operands = tuple(operands[0])
        return args[0], list(operands)
    pairs, output = list(args), None
    if len(pairs) % 2:
        output = pairs.pop()
    operands, parts = pairs[0::2], [_sublist_letters(sub) for sub in pairs[1::2]]
    equation = ",".join(parts) + ("" if output is None else "->" + _sublist_letters(output))
    return equation, operands


def _sublist_letters(sublist: Any) -> str:
    """A sublist of ints in [0, 52) and Ellipsis as equation letters."""
    letters = []
    for item in sublist:
        if item is Ellipsis:
            letters.append("...")
        elif isinstance(item, int) and 0 <= item < len(_SUBLIST_LETTERS):
            letters.append(_SUBLIST_LETTERS[item])
        else:
            raise RuntimeError(
                f"einsum: sublist entries must be ints in [0, 52) or ..., got {item!r}"
            )
    return "".join(letters)


def _parse_einsum(equation: str, operands: list) -> tuple[list[str], str]:
    """Each operand's letters and the output's, with ``...`` written out as letters of its own."""
    if not isinstance(equation, str) or not operands:
        raise RuntimeError(f"einsum: expected an equation and operands; {_EINSUM_HELP}")
    for operand in operands:
        if not isinstance(operand, Tensor):
            raise TypeError(f"einsum: operands must be Tensors, got {type(operand).__name__}")
    left, arrow, output = equation.replace(" ", "").partition("->")
    inputs = left.split(",")
    if len(inputs) != len(operands):
        raise RuntimeError(
            f"einsum: {equation!r} names {len(inputs)} operand(s), got {len(operands)}"
        )
    for letters in (*inputs, output):
        plain = letters.replace("...", "", 1)
        if plain and not plain.isalpha() or "." in plain:
            raise RuntimeError(
                f"einsum: '{letters}' in {equation!r} is not letters; {_EINSUM_HELP}"
            )
    named = "".join(letters.replace("...", "") for letters in inputs)
    spare = iter(c for c in _SUBLIST_LETTERS[::-1] if c not in named + output)
    ellipsis = "".join(next(spare) for _ in range(_ellipsis_dims(equation, inputs, operands)))
    if not arrow:  # implicit output: the ``...`` dims, then the letters seen once, sorted
        output = "..." + "".join(sorted(c for c in set(named) if named.count(c) == 1))
    inputs = [_ellipsis_written(s, ellipsis, op.ndim) for s, op in zip(inputs, operands)]
    output = output.replace("...", ellipsis)
    if len(set(output)) != len(output) or set(output) - set("".join(inputs)):
        raise RuntimeError(f"einsum: output letters of {equation!r} repeat or appear in no operand")
    for letters, operand in zip(inputs, operands):
        if len(letters) != operand.ndim:
            raise RuntimeError(
                f"einsum: operand '{letters}' of {equation!r} has shape {operand.shape}"
            )
    return inputs, output


def _ellipsis_dims(equation: str, inputs: list, operands: list) -> int:
    """How many dims ``...`` stands for: the most any operand leaves unnamed."""
    most = 0
    for letters, operand in zip(inputs, operands):
        named = len(letters.replace("...", ""))
        if "..." in letters:
            most = max(most, operand.ndim - named)
        if operand.ndim < named or ("..." not in letters and operand.ndim != named):
            raise RuntimeError(
                f"einsum: operand '{letters}' of {equation!r} has shape {operand.shape}"
            )
    return most


def _ellipsis_written(letters: str, ellipsis: str, ndim: int) -> str:
    """An operand's letters with its ``...`` as the last letters of `ellipsis`: the dims
    ``...`` stands for broadcast right-aligned, as NumPy's do."""
    head, _, tail = letters.partition("...")
    count = ndim - len(head) - len(tail)
    return head + ellipsis[len(ellipsis) - count :] + tail


def _diagonals(operand: Tensor, letters: str) -> tuple[Tensor, str]:
    """A letter repeated within one operand (``ii``) takes the diagonal of its dims."""
    for letter in letters:
        while letters.count(letter) > 1:
            first = letters.index(letter)
            second = letters.index(letter, first + 1)
            operand = operand.diagonal(0, first, second)  # that dim moves last
            letters = letters[:first] + letters[first + 1 : second] + letters[second + 1 :]
            letters += letter
    return operand, letters


def _letter_sizes(equation: str, terms: list) -> dict[str, int]:
    """Each letter's size; a size-1 dim broadcasts against the others, as in PyTorch."""
    sizes: dict[str, int] = {}
    for operand, letters in terms:
        for letter, n in zip(letters, operand.shape, strict=True):
            known = sizes.setdefault(letter, n)
            if known != n and 1 not in (known, n):
                raise RuntimeError(
                    f"einsum: letter '{letter}' of {equation!r} has sizes {known} and {n}"
                )
            sizes[letter] = max(known, n) if 1 in (known, n) else n
    return sizes


def _broadcast_letters(operand: Tensor, letters: str, sizes: dict) -> Tensor:
    shape = tuple(sizes[c] for c in letters)
    return operand if operand.shape == shape else operand.broadcast_to(shape)


def _sum_letters(operand: Tensor, letters: str, keep: set) -> tuple[Tensor, str]:
    """Sum out the letters that no later step needs."""
    drop = tuple(i for i, c in enumerate(letters) if c not in keep)
    if drop:
        operand = operand.sum(axis=drop)
        letters = "".join(c for c in letters if c in keep)
    return operand, letters


def _permuted(operand: Tensor, letters: str, order: str) -> Tensor:
    if letters == order:
        return operand
    return operand.permute(*(letters.index(c) for c in order))


def _contract(first: tuple, second: tuple, output: str, sizes: dict) -> Tensor:
    """(batch, M, K) @ (batch, K, N): the batched matmul every two-operand einsum becomes."""
    (a, a_letters), (b, b_letters) = first, second
    batch = "".join(c for c in output if c in a_letters and c in b_letters)
    summed = "".join(c for c in a_letters if c in b_letters and c not in output)
    rows = "".join(c for c in a_letters if c not in b_letters)
    cols = "".join(c for c in b_letters if c not in a_letters)

    def count(letters: str) -> int:
        return math.prod(sizes[c] for c in letters)

    # a: (batch..., rows..., summed...) -> (B, M, K); b: (batch..., summed..., cols...) -> (B, K, N)
    a = _permuted(a, a_letters, batch + rows + summed).reshape(
        count(batch), count(rows), count(summed)
    )
    b = _permuted(b, b_letters, batch + summed + cols).reshape(
        count(batch), count(summed), count(cols)
    )
    out = (a @ b).reshape(tuple(sizes[c] for c in batch + rows + cols))
    return _permuted(out, batch + rows + cols, output)


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float = 0.0) -> Tensor:  # noqa: A002
    """Pad (PyTorch's F.pad): `pad` lists (before, after) counts for the last dimension first,
    then the one before it, and so on; negative counts crop. ``mode="constant"`` fills with
    `value`; "reflect", "replicate" and "circular" repeat the input's own elements
    (`pad_from_input`)."""
    if mode in _PAD_MODES:
        return pad_from_input(input, pad, mode)
    if mode != "constant":
        raise NotImplementedError(
            f"pad: unrecognised padding mode {mode!r}; use 'constant', 'reflect', 'replicate' "
            "or 'circular'"
        )
    pad = tuple(pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise TinyattnError(
            f"pad: expected pairs (before, after) for at most {input.ndim} dims, got {pad}"
        )
    out = input
    for pair in range(len(pad) // 2):
        axis = input.ndim - 1 - pair
        out = _pad_axis(out, axis, pad[2 * pair], pad[2 * pair + 1], value)
    # Padding by nothing (or only cropping) leaves the input or a view of it; pad, as PyTorch's,
    # always returns new memory.
    return out if any(count > 0 for count in pad) else out.clone()


def _pad_axis(x: Tensor, axis: int, before: int, after: int, value: float) -> Tensor:
    length = x.shape[axis]
    if -min(before, 0) - min(after, 0) > length:
        raise TinyattnError(
            f"pad: cropping {before}, {after} exceeds dim {axis} of shape {x.shape}"
        )
    start, stop = max(-before, 0), length - max(-after, 0)
    if start or stop != length:  # negative padding crops
        x = x[(slice(None),) * axis + (slice(start, stop),)]
    parts = []
    for count in (before, after):
        shape = x.shape[:axis] + (max(count, 0),) + x.shape[axis + 1 :]
        parts.append(full(shape, value, dtype=x.dtype, device=x.device) if count > 0 else None)
    pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
    return concat(pieces, axis=axis) if len(pieces) > 1 else x


_PAD_MODES = ("reflect", "replicate", "circular")


def pad_from_input(input: Tensor, pad: Sequence[int], mode: str) -> Tensor:  # noqa: A002
    """Padding by the input's own elements, PyTorch's rules: `pad` holds 2, 4 or 6 counts for
    the last 1, 2 or 3 dims of an input with one or two more dims (channels, batch). Each
    padded dim is one index-array read: "reflect" mirrors about the edge element (x2 x1 | x0
    x1 x2 ...), "replicate" repeats the edge, "circular" wraps around. The gradient of a read
    adds the copies back, so the edge elements collect their copies' gradients.

    Shapes: (N, C, d1, ..., dk) or (C, d1, ..., dk) -> each d_i + before_i + after_i."""
    pad = tuple(pad)
    if len(pad) % 2:
        raise RuntimeError(f"pad: padding length must be divisible by 2, got {len(pad)}")
    padded = len(pad) // 2
    if padded not in (1, 2, 3) or input.ndim not in (padded + 1, padded + 2):
        raise NotImplementedError(
            f"pad: padding size {len(pad)} is not supported for a {input.ndim}-D input in mode "
            f"{mode!r}; non-constant padding takes 2, 4 or 6 counts for the last 1, 2 or 3 dims "
            "of an input with 1 or 2 more dims (channels, or batch and channels)"
        )
    out = input
    for pair in range(padded):
        axis = input.ndim - 1 - pair
        positions = _padded_positions(mode, input.shape, axis, pad[2 * pair], pad[2 * pair + 1])
        index = Tensor(positions, dtype="int64", device=out.device)
        out = out[(slice(None),) * axis + (index,)]
    return out


def _padded_positions(mode: str, shape: tuple, axis: int, before: int, after: int) -> Any:
    """Which element of the input (along `axis`) each output element copies, checked."""
    length = shape[axis]
    if mode == "circular" and (before > length or after > length):
        raise RuntimeError(
            f"pad: padding ({before}, {after}) in mode 'circular' wraps around more than once "
            f"at dimension {axis} of input {list(shape)}"
        )
    if mode != "circular" and any(n == 0 for n in shape[-(len(shape) - 1) :]):
        raise RuntimeError(
            f"pad: mode {mode!r} expects non-zero dimensions (a zero batch size is allowed), "
            f"got input {list(shape)}"
        )
    if mode == "reflect" and (before >= length or after >= length):
        raise RuntimeError(
            f"pad: padding size should be less than the corresponding input dimension in mode "
            f"'reflect', but got padding ({before}, {after}) at dimension {axis} of input "
            f"{list(shape)}"
        )
    if mode == "circular":  # a negative count crops first; the rest wraps around what is left
        start, stop = max(-before, 0), length - max(-after, 0)
        kept = stop - start
        if kept <= 0 and (before > 0 or after > 0):
            raise RuntimeError(
                f"pad: padding ({before}, {after}) in mode 'circular' crops all of dimension "
                f"{axis} of input {list(shape)} and has nothing left to wrap"
            )
        return [start + i % kept for i in range(-max(before, 0), kept + max(after, 0))]
    positions = list(range(-before, length + after))
    if mode == "replicate":
        return [min(max(i, 0), length - 1) for i in positions]
    return [(length - 1) - abs((length - 1) - abs(i)) for i in positions]  # reflect


def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-D tensors: with "ij" the i-th output varies along dim i; with
    "xy" the first two dims are swapped (NumPy's default, Cartesian). PyTorch's default is
    "ij", which tinyattn takes without PyTorch's warning. The outputs are broadcast views.

    Shapes: (n1,), ..., (nk,) -> k tensors of (n1, ..., nk) ("ij")."""
    if len(tensors) == 1 and isinstance(tensors[0], list | tuple):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise TinyattnError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in tensors:
        if not isinstance(t, Tensor) or t.ndim > 1:
            raise TinyattnError(f"meshgrid: expected 0-D or 1-D Tensors, got {t!r}")
    sizes = [t.numel() for t in tensors]
    swap = indexing == "xy" and len(tensors) > 1
    if swap:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    grids = []
    for position, t in enumerate(tensors):
        axis = (1 - position if position < 2 else position) if swap else position
        shape = [1] * len(tensors)
        shape[axis] = sizes[axis]
        grids.append(t.reshape(tuple(shape)).broadcast_to(tuple(sizes)))
    return tuple(grids)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """(x1 / max(|x1|, eps)) . (x2 / max(|x2|, eps)) along `dim`, x1 and x2 broadcast together:
    PyTorch's formula. As in PyTorch, the norms are clamped in value only: the gradient flows
    through them as if unclamped.

    Shapes: x1, x2 broadcast to (..., n at dim, ...) -> (...) (dim removed)."""
    if not isinstance(x1, Tensor) or not isinstance(x2, Tensor):
        raise TypeError(
            f"cosine_similarity: expected two Tensors, got {type(x1).__name__} and "
            f"{type(x2).__name__}"
        )
    shape = broadcast_shapes("cosine_similarity", x1.shape, x2.shape)
    normalize_axes("cosine_similarity", dim, len(shape))  # an error naming this function
    x1, x2 = x1.broadcast_to(shape), x2.broadcast_to(shape)
    norms = []
    for x in (x1, x2):
        norm = x.norm(dim=dim, keepdim=True)
        norms.append(norm + (norm.clamp_min(eps) - norm).detach())
    return ((x1 / norms[0]) * (x2 / norms[1])).sum(dim=dim)


def _stacked_tensors(op: str, tensors: Any) -> list[Tensor]:
    if not isinstance(tensors, list | tuple) or not tensors:
        got = (
            f"{len(tensors)} tensors"
            if isinstance(tensors, list | tuple)
            else type(tensors).__name__
        )
        raise TypeError(f"{op}: expected a non-empty list or tuple of Tensors, got {got}")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: expected Tensors, got {type(t).__name__}")
    return list(tensors)


def vstack(tensors: Sequence[Tensor]) -> Tensor:
    """Rows on top of each other: 1-D tensors become rows (1, n), then concat along dim 0.

    Shapes: (n,) or (r_i, ...) -> (sum of r_i, ...)."""
    rows = _stacked_tensors("vstack", tensors)
    return _joined("vstack", [t.reshape(1, -1) if t.ndim < 2 else t for t in rows], 0)


def hstack(tensors: Sequence[Tensor]) -> Tensor:
    """Side by side: concat along dim 1, or along dim 0 for 1-D tensors (0-d become (1,)).

    Shapes: (n_i,) -> (sum of n_i,);  (r, c_i, ...) -> (r, sum of c_i, ...)."""
    parts = [t.reshape(1) if t.ndim == 0 else t for t in _stacked_tensors("hstack", tensors)]
    return _joined("hstack", parts, 0 if parts[0].ndim == 1 else 1)


def _joined(op: str, parts: list[Tensor], dim: int) -> Tensor:
    """concat, with a shape mismatch reported under the name the program called."""
    try:
        return concat(parts, dim=dim)
    except ValueError as exc:
        raise TinyattnError(f"{op}: {exc}") from None


def _free_function(name: str) -> Callable:
    """``tinyattn.name(input, *args)``: the method ``input.name(*args)`` (a number first, as in
    ``tinyattn.pow(2.0, x)``, is turned into a tensor beside the other operand)."""

    def function(input: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002  (PyTorch's name)
        if getattr(input, "is_sparse", False):  # ta.mm(sparse, dense): the sparse method
            return getattr(input, name)(*args, **kwargs)
        if not isinstance(input, Tensor):
            anchor = next((a for a in args if isinstance(a, Tensor)), None)
            if anchor is None:
                raise TypeError(f"{name}: expected a Tensor, got {type(input).__name__}")
            input = anchor._operand(input, name)  # noqa: A001
        return getattr(input, name)(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"``tinyattn.{name}(x, ...)`` is ``x.{name}(...)``."
    return function


def cat(tensors: Sequence[Tensor], dim: int = 0, *, axis: int | None = None) -> Tensor:
    """PyTorch's name of `concat`."""
    return concat(tensors, axis=dim if axis is None else axis)


def is_tensor(value: Any) -> bool:
    return isinstance(value, Tensor)


def equal(a: Tensor, b: Tensor) -> bool:
    """PyTorch's ``torch.equal``: True when both have the same shape and the same values."""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError(f"equal: expected two Tensors, got {describe(a)} and {describe(b)}")
    if a.shape != b.shape:
        return False
    return bool((a == b).all().item()) if a.numel() else True


_FLOAT_NAMES = ("float16", "float32", "float64")


class finfo:  # noqa: N801  (PyTorch's name)
    """The limits of a float dtype, as ``torch.finfo``: ``bits``, ``eps``, ``max``, ``min``,
    ``tiny`` (= ``smallest_normal``), ``resolution``; float32 when no dtype is given."""

    def __init__(self, type: Any = "float32") -> None:  # noqa: A002  (PyTorch's name)
        name = backend.dtype_name(type)
        if name not in _FLOAT_NAMES:
            raise TypeError(f"finfo: expected a floating point dtype, got {name!r}")
        self.dtype = name
        for field, value in backend.type_limits(name).items():
            setattr(self, field, value)

    def __repr__(self) -> str:
        return (
            f"finfo(resolution={self.resolution}, min={self.min}, max={self.max}, "
            f"eps={self.eps}, dtype={self.dtype})"
        )


class iinfo:  # noqa: N801  (PyTorch's name)
    """The limits of an integer dtype, as ``torch.iinfo``: ``bits``, ``max``, ``min``."""

    def __init__(self, type: Any) -> None:  # noqa: A002  (PyTorch's name)
        name = backend.dtype_name(type)
        if name in (*_FLOAT_NAMES, "bool") or name not in backend.DTYPE_NAMES:
            raise TypeError(f"iinfo: expected an integer dtype, got {name!r}")
        self.dtype = name
        for field, value in backend.type_limits(name).items():
            setattr(self, field, value)

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"


# The free functions that are a Tensor method with the tensor first: ta.exp(x) is x.exp().
FUNCTIONS = {
    name: _free_function(name)
    for name in (
        *(spec.name for spec in (*UNARY, *BINARY, *LOGICAL)),
        *("amax", "amin", "argmax", "argmin", "chunk", "clone", "cumsum", "flatten", "flip"),
        *("gather", "logsumexp", "masked_fill", "matmul", "max", "mean", "min", "minimum"),
        *("multinomial", "nonzero", "numel", "permute", "reshape", "scatter", "softmax"),
        *("log_softmax", "split", "squeeze", "std", "sum", "topk", "transpose", "tril", "triu"),
        *("unsqueeze", "var", "clip", "clamp", "relu", "logical_not", "bitwise_not", "neg"),
        *("all", "any"),
        *("mm", "bmm", "mv", "dot", "outer", "t", "sign", "isnan", "isinf", "isfinite"),
        *("square", "reciprocal", "rsqrt", "clamp_min", "clamp_max", "select", "narrow"),
        *("unbind", "index_select", "movedim", "sort", "argsort", "roll", "isclose"),
        *("allclose", "norm", "frac", "lerp", "addmm", "diag", "tile", "repeat_interleave"),
        *("nan_to_num", "diff", "masked_select", "prod", "cumprod", "unique", "bincount"),
        *("swapaxes", "broadcast_to", "detach", "trace", "count_nonzero", "logaddexp"),
        *("logaddexp2", "logical_and", "logical_or", "logical_xor", "addcmul", "addcdiv"),
        *("scatter_add", "index_add", "diagonal"),
        *("median", "nanmedian", "kthvalue", "quantile", "nanquantile", "moveaxis"),
        *("divide", "true_divide", "subtract", "fmod", "copysign", "cummax", "cummin"),
        *("logcumsumexp", "std_mean", "var_mean", "scatter_reduce", "index_put", "unflatten"),
        *(f"{name}_" for name in IN_PLACE_UNARY),
        *("clamp_", "clip_", "fill_", "zero_"),
    )
}
