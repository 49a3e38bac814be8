"""Functional transforms, ``vmap``: a function of one sample run once on a whole batch.

``vmap(f, in_dims, out_dims)(*args)`` moves each batched argument's `in_dim` to the front,
wraps it as a batched tensor (`batching`), calls `f` once, and moves each result's batch dim to
its `out_dim` (a result that does not depend on the batch is expanded). `f` sees one sample's
shapes; its ops run through their batching rules. ``chunk_size`` runs the batch in chunks
(less memory, the same results); ``randomness`` says what a random draw inside `f` does:
"error" refuses it, "different" draws per sample, "same" draws once for all samples.
Imports the tensor layer and `batching`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..autograd import recording
from ..methods.common import concat
from ..ops.batching import expanded
from ..tensor import Tensor
from . import batching
from .pytree import broadcast_prefix, tree_flatten, tree_unflatten

_RANDOMNESS = ("error", "different", "same")


def vmap(
    func: Callable,
    in_dims: Any = 0,
    out_dims: Any = 0,
    randomness: str = "error",
    *,
    chunk_size: int | None = None,
) -> Callable:
    """``torch.func.vmap``: `func` mapped over dim `in_dims` of its inputs, as one call.

    Shapes: an input (..., B at in_dim, ...) is seen by `func` without its B; each output comes
    back with B at its out_dim."""
    if randomness not in _RANDOMNESS:
        raise RuntimeError(
            f"vmap: only allowed values for randomness are 'error', 'different', or 'same'. "
            f"Got {randomness!r}"
        )
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")
    if not isinstance(in_dims, int | tuple) and in_dims is not None:
        raise ValueError(
            f"vmap({_name(func)}, in_dims={in_dims!r}, ...)(<inputs>): expected `in_dims` to be "
            f"int or a (potentially nested) tuple matching the structure of inputs, got: "
            f"{type(in_dims)}."
        )

    @functools.wraps(func)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        recording.note_transform("vmap")
        leaves, spec = tree_flatten(args)
        dims = _input_dims(func, in_dims, args, leaves)
        size = _batch_size(func, leaves, dims)
        if chunk_size is None or chunk_size >= size:
            return _run(func, leaves, dims, spec, kwargs, size, out_dims, randomness)
        chunks = []
        for start in range(0, size, chunk_size):
            stop = min(size, start + chunk_size)
            part = [_narrow(x, d, start, stop) for x, d in zip(leaves, dims)]
            chunks.append(_run(func, part, dims, spec, kwargs, stop - start, out_dims, randomness))
        return _concat_chunks(chunks, out_dims)

    return wrapped


def _name(func: Callable) -> str:
    return getattr(func, "__name__", type(func).__name__)


def _is_tensor(value: Any) -> bool:
    return isinstance(value, Tensor)


def _input_dims(func: Callable, in_dims: Any, args: tuple, leaves: list) -> list:
    """Each leaf's in_dim, checked against its rank (negative dims counted from the end)."""
    what = f"vmap({_name(func)}, in_dims={in_dims!r}, ...)(<inputs>)"
    dims = broadcast_prefix(in_dims, args, what)
    checked = []
    for leaf, dim in zip(leaves, dims):
        if dim is None:
            checked.append(None)
            continue
        if not isinstance(dim, int):
            raise ValueError(f"{what}: in_dim must be an int or None, got {dim!r}")
        if not _is_tensor(leaf):
            raise ValueError(
                f"{what}: got in_dim={dim} for an input but the input is of type "
                f"{type(leaf).__name__}. We cannot vmap over non-Tensor arguments, please use "
                "None as the respective in_dim"
            )
        if not -leaf.ndim <= dim < leaf.ndim:
            raise ValueError(
                f"{what}: got in_dim={dim} for an input but the input is of type Tensor with "
                f"{leaf.ndim} dims (shape {tuple(leaf.shape)}). Expected in_dim to satisfy "
                f"-{leaf.ndim} <= in_dim < {leaf.ndim}."
            )
        checked.append(dim % leaf.ndim)
    if all(d is None for d in checked):
        raise ValueError(
            f"{what}: at least one input must be a Tensor mapped over (all in_dims are None, "
            "or no input is a Tensor)"
        )
    return checked


def _batch_size(func: Callable, leaves: list, dims: list) -> int:
    sizes = [leaf.shape[d] for leaf, d in zip(leaves, dims) if d is not None]
    if len(set(sizes)) != 1:
        raise ValueError(
            f"vmap({_name(func)}, ...): expected all tensors to have the same size in the mapped "
            f"dimension, got sizes {sizes} for the mapped dimension"
        )
    return sizes[0]


def _run(
    func: Callable,
    leaves: list,
    dims: list,
    spec: Any,
    kwargs: dict,
    size: int,
    out_dims: Any,
    randomness: str,
) -> Any:
    """One vmap level: the inputs batched, `func` called once, the outputs moved to out_dims."""
    with batching.entered_level(size, randomness) as level:
        inputs = [
            x if d is None else batching.wrap(x.movedim(d, 0) if d else x, level.number)
            for x, d in zip(leaves, dims)
        ]
        output = func(*tree_unflatten(inputs, spec), **kwargs)
        return _outputs(func, output, out_dims, level)


def _outputs(func: Callable, output: Any, out_dims: Any, level: Any) -> Any:
    leaves, spec = tree_flatten(output)
    dims = broadcast_prefix(out_dims, output, f"vmap({_name(func)}, ..., out_dims={out_dims!r})")
    results = []
    for leaf, dim in zip(leaves, dims):
        if not _is_tensor(leaf):
            raise ValueError(
                f"vmap({_name(func)}, ...): `{_name(func)}` must only return Tensors, got type "
                f"{type(leaf).__name__}. Did you mean to set out_dims= to None for output?"
            )
        value = batching.unwrap(leaf, level.number)
        if dim is None:
            if value is not None:
                raise ValueError(
                    f"vmap({_name(func)}, ..., out_dims={out_dims!r}): an output with out_dim "
                    "None must not vary over the batch, but it does"
                )
            results.append(leaf)
            continue
        if value is None:  # the same for every sample
            value = expanded(leaf, level.size)
        if not -value.ndim <= dim < value.ndim:
            raise ValueError(
                f"vmap({_name(func)}, ..., out_dims={out_dims!r}): out_dim {dim} is out of "
                f"range for an output with {value.ndim - 1} dims"
            )
        results.append(value.movedim(0, dim) if dim % value.ndim else value)
    return tree_unflatten(results, spec)


def _narrow(x: Any, dim: int | None, start: int, stop: int) -> Any:
    return x if dim is None else x.narrow(dim, start, stop - start)


def _concat_chunks(chunks: list, out_dims: Any) -> Any:
    flat = [tree_flatten(chunk)[0] for chunk in chunks]
    spec = tree_flatten(chunks[0])[1]
    dims = broadcast_prefix(out_dims, chunks[0], "vmap(..., out_dims)")
    joined = [
        pieces[0] if dim is None else concat(list(pieces), dim)
        for pieces, dim in zip(zip(*flat), dims)
    ]
    return tree_unflatten(joined, spec)
