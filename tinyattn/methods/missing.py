"""PyTorch names tinyattn does not have: the error that says so, and what to use instead.

A program written for PyTorch that touches a name tinyattn lacks (``torch.take_along_dim``,
``x.ravel()``, ``F.pdist``) gets an AttributeError (so ``hasattr`` and ``getattr(obj, name,
default)`` keep working) whose message says the name is not in tinyattn and, where tinyattn can
compose it, how. ``Tensor`` gets one descriptor per such name (`with_missing_names`); ``tinyattn``
and ``tinyattn.nn.functional`` call `missing_attribute` from their module ``__getattr__``. Imports
nothing of tinyattn: it sits below the Tensor class like the other families.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# What to write instead, for names a PyTorch program is likely to use. A name absent here gets
# the general message (and close matches among the names that exist).
_INSTEAD = {
    "absolute": "x.abs()",
    "negative": "-x or x.neg()",
    "positive": "+x (the tensor itself)",
    "ravel": "x.reshape(-1)",
    "nelement": "x.numel()",
    "ndimension": "x.dim()",
    "fliplr": "x.flip(1)",
    "flipud": "x.flip(0)",
    "swapdims": "x.transpose(dim0, dim1) or x.swapaxes(dim0, dim1)",
    "multiply": "x * y or x.mul(y)",
    "greater": "x > y",
    "greater_equal": "x >= y",
    "less": "x < y",
    "less_equal": "x <= y",
    "not_equal": "x != y",
    "arctan2": "ta.atan2(y, x)",
    "arccos": "x.acos()",
    "arcsin": "x.asin()",
    "arctan": "x.atan()",
    "take_along_dim": "x.gather(dim, indices)",
    "take": "x.reshape(-1)[indices]",
    "split_with_sizes": "x.split(sizes, dim)",
    "tensor_split": "x.split(sizes, dim) or x.chunk(n, dim)",
    "hsplit": "x.split(sizes, dim=1)",
    "vsplit": "x.split(sizes, dim=0)",
    "nansum": "ta.where(x.isnan(), 0.0, x).sum(dim)",
    "nanmean": "ta.where(x.isnan(), 0.0, x).sum(dim) / (~x.isnan()).sum(dim)",
    "xlogy": "ta.where(x == 0, 0.0, x * y.log())",
    "logit": "(p / (1 - p)).log()",
    "hypot": "(a.square() + b.square()).sqrt()",
    "rad2deg": "x * (180 / math.pi)",
    "deg2rad": "x * (math.pi / 180)",
    "inner": "(a * b).sum(-1)",
    "tensordot": "ta.einsum with the contracted letters",
    "kron": "ta.einsum('ij,kl->ikjl', a, b).reshape(...)",
    "dist": "(a - b).norm(p)",
    "pdist": "ta.cdist(x, x) (each pair appears twice)",
    "pairwise_distance": "(x1 - x2 + eps).norm(p, dim=-1)",
    "logspace": "base ** ta.linspace(start, end, steps)",
    "normal": "ta.randn(size) * std + mean",
    "bernoulli": "(ta.rand_like(p) < p).to(p.dtype)",
    "broadcast_tensors": "x.broadcast_to(shape) for each tensor",
    "column_stack": "ta.stack(tensors, dim=1) (1-d tensors) or ta.hstack",
    "row_stack": "ta.vstack",
    "dstack": "ta.stack(tensors, dim=2) (2-d tensors)",
    "argwhere": "x.nonzero()",
    "bucketize": "(boundaries < x.unsqueeze(-1)).sum(-1) (right=False)",
    "searchsorted": "(sorted_sequence < values.unsqueeze(-1)).sum(-1) (right=False)",
    "index_copy": "x.clone() with out[(slice(None),) * dim + (index,)] = source",
    "index_fill": "x.clone().index_fill_(dim, index, value)",
    "masked_scatter": "out = x.clone(); out[mask] = source[: mask.sum()]",
    "diag_embed": "x.unsqueeze(-1) * ta.eye(n)",
    "diagflat": "ta.diag(x.reshape(-1))",
    "rot90": "x.flip(dim).transpose(dim0, dim1)",
    "cross": "a.roll(-1, d) * b.roll(-2, d) - a.roll(-2, d) * b.roll(-1, d) (3-vectors along d)",
    "sinc": "ta.where(x == 0, 1.0, (math.pi * x).sin() / (math.pi * x))",
    "signbit": "x < 0 (negative zero not told apart)",
    "sgn": "x.sign()",
    "fix": "x.trunc()",
    "stride": "nothing: tinyattn exposes no strides (x.is_contiguous() exists)",
    "data_ptr": "nothing: tinyattn exposes no storage addresses",
    "storage": "nothing: tinyattn has no storages; x.array is the backend array",
    "untyped_storage": "nothing: tinyattn has no storages; x.array is the backend array",
    "share_memory_": "nothing: tinyattn does not share tensors with child processes",
    "set_printoptions": "numpy.set_printoptions (tinyattn prints tensors as NumPy does)",
    "det": "nothing: tinyattn has no linear algebra beyond products (matmul, einsum)",
    "inverse": "nothing: tinyattn has no linear algebra beyond products (matmul, einsum)",
    "cholesky": "nothing: tinyattn has no linear algebra beyond products (matmul, einsum)",
    "svd": "nothing: tinyattn has no linear algebra beyond products (matmul, einsum)",
    "qr": "nothing: tinyattn has no linear algebra beyond products (matmul, einsum)",
    "linalg": "nothing: tinyattn has no linear algebra beyond products (matmul, einsum)",
    "fft": "nothing: tinyattn has no Fourier transforms",
    "is_complex": "nothing: tinyattn has no complex dtypes (always False there)",
    "hardshrink": "x * (x.abs() > lambd)",
    "softshrink": "x - x.clamp(-lambd, lambd)",
    "tanhshrink": "x - x.tanh()",
    "threshold": "ta.where(x > threshold, x, value)",
    "gumbel_softmax": "F.softmax((logits - (-ta.rand_like(logits).log()).log()) / tau, dim)",
    "adaptive_max_pool1d": "F.max_pool1d with the kernel and stride the sizes give",
    "adaptive_max_pool2d": "F.max_pool2d with the kernel and stride the sizes give",
}


def missing_attribute(owner: str, torch_path: str, name: str, known: Iterable[str]) -> str:
    """The message for ``owner.name`` missing: `owner` is how tinyattn's object is named
    ('tinyattn', 'tinyattn.Tensor', 'tinyattn.nn.functional'), `torch_path` PyTorch's
    (``torch.x``, ``Tensor.x``, ``torch.nn.functional.x``), `known` the names that exist."""
    instead = _INSTEAD.get(name)
    if instead is not None:
        return (
            f"{owner} has no {name!r} (PyTorch's {torch_path}.{name} is not in tinyattn): "
            f"use {instead}"
        )
    close = difflib.get_close_matches(name, [k for k in known if not k.startswith("_")], n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return (
        f"{owner} has no {name!r}: where PyTorch has {torch_path}.{name}, it is not in tinyattn "
        f"(docs/from-pytorch.md lists what is supported){hint}"
    )


# The names of `_INSTEAD` that PyTorch's Tensor has as methods or attributes.
_TENSOR_NAMES = (
    "absolute", "negative", "positive", "ravel", "nelement", "ndimension", "fliplr", "flipud",
    "swapdims", "multiply", "greater", "greater_equal", "less", "less_equal", "not_equal",
    "arctan2", "arccos", "arcsin", "arctan", "take_along_dim", "take", "split_with_sizes",
    "tensor_split", "hsplit", "vsplit", "nansum", "nanmean", "xlogy", "logit", "hypot",
    "rad2deg", "deg2rad", "inner", "kron", "dist", "bernoulli", "argwhere", "index_copy",
    "index_fill", "masked_scatter", "diag_embed", "diagflat", "rot90", "cross", "sinc",
    "signbit", "sgn", "fix", "stride", "data_ptr", "storage", "untyped_storage",
    "share_memory_", "det", "inverse", "cholesky", "svd", "qr", "is_complex",
)  # fmt: skip


class _MissingName:
    """A PyTorch Tensor name tinyattn lacks: reading it raises the AttributeError that says so
    and what to use instead (``hasattr`` is False). A descriptor per name, not ``__getattr__``:
    a class with ``__getattr__`` pays for it on every attribute read (about 4x a slot's cost on
    CPython 3.11), and a tensor's attributes are read on every op."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, tensor: object, owner: type | None = None) -> None:
        message = missing_attribute("tinyattn.Tensor", "Tensor", self.name, dir(owner))
        raise AttributeError(message, name=self.name)


def with_missing_names(cls: type) -> type:
    """Class decorator: give `cls` (Tensor) a `_MissingName` for each PyTorch Tensor name with
    a known replacement that no method family defines. Other missing names get Python's plain
    AttributeError."""
    for name in _TENSOR_NAMES:
        if not hasattr(cls, name):
            setattr(cls, name, _MissingName(name))
    return cls
