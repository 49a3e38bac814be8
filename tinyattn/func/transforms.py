"""Functional transforms, derivatives: ``vjp``, ``grad``, ``jvp`` and their compositions.

- `vjp` runs f on fresh differentiable copies of its inputs and returns ``vjp_fn``, which runs
  the engine backwards from f's output (``tinyattn.autograd.grad``); `grad` and
  `grad_and_value` are `vjp` of a scalar with cotangent 1.
- `jvp` runs f on dual tensors (``tinyattn.autograd.forward_ad``): one forward pass carries
  ``J v`` beside the output.
- `jacrev` is `vjp` once per output element (the rows of J), `jacfwd` `jvp` once per input
  element (the columns), `hessian` is ``jacfwd(jacrev(f))``: compositions, not new engines.

Nesting: while a transform runs f, the transforms inside it keep their gradients' graphs
(create_graph), so ``grad(grad(f))`` and ``jacfwd(jacrev(f))`` differentiate through them.
Under vmap the engine runs on the physical tensors: an input is first given a batch dim for
every active vmap level (samples are independent, so the gradient of the batch's sum is each
sample's gradient), and the results are batched tensors again (`batching`).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..autograd import enable_grad, forward_ad, hooks, is_grad_enabled, recording
from ..autograd import grad as engine_grad
from ..tensor import Tensor
from . import batching
from .pytree import tree_flatten, tree_unflatten

_state = threading.local()  # .depth: how many transforms are running their function now


def _depth() -> int:
    return getattr(_state, "depth", 0)


@contextlib.contextmanager
def _running() -> Iterator[None]:
    """``with _running():`` a transform is running its function (inner ones keep graphs)."""
    _state.depth = _depth() + 1
    try:
        yield
    finally:
        _state.depth -= 1


# ------------------------------------------------------------------- physical tensors
def to_physical(tensor: Any, levels: list) -> Any:
    """`tensor`'s physical Tensor with a batch dim for each active vmap level, in level order
    (levels it is not batched at are expanded). Shapes: (*s) -> (B_1, ..., B_L, *s)."""
    present = []
    while batching.is_batched(tensor):
        present.append(tensor.array.level)
        tensor = tensor.array.value
    present.reverse()  # the lowest level's batch dim is the first
    for position, level in enumerate(levels):
        if level.number not in present:
            tensor = tensor.unsqueeze(position)
            shape = list(tensor.shape)
            shape[position] = level.size
            tensor = tensor.expand(*shape)
    return tensor


def from_physical(tensor: Any, levels: list) -> Any:
    """The inverse of `to_physical`: a batched tensor of every active level."""
    for level in levels:
        tensor = batching.wrap(tensor, level.number)
    return tensor


def _fresh(tensor: Any, levels: list, keep_graph: bool) -> tuple[Any, Any]:
    """A differentiable stand-in for an input: (its physical Tensor, the logical one f sees).
    It joins the caller's graph when there is one to keep, else it is a new leaf."""
    physical = to_physical(tensor, levels)
    if keep_graph and physical.requires_grad:
        return physical, from_physical(physical.view_as(physical), levels)
    fresh = physical.detach().requires_grad_()
    tangent = forward_ad.tangent_of(physical) if forward_ad.is_active() else None
    if tangent is not None:  # under jvp (forward over reverse): the tangent goes on with it
        fresh = forward_ad.make_dual(fresh, tangent)
    return fresh, from_physical(fresh, levels)


def _detached(tensor: Any, levels: list) -> Any:
    return from_physical(to_physical(tensor, levels).detach(), levels)


# ------------------------------------------------------------------------------- vjp
def _check_tensors(name: str, values: list, what: str) -> None:
    for value in values:
        if not isinstance(value, Tensor):
            raise RuntimeError(
                f"{name}: expected {what} to be Tensors (or nests of them), got "
                f"{type(value).__name__}"
            )


def _split_aux(name: str, output: Any, has_aux: bool) -> tuple[Any, Any]:
    if not has_aux:
        return output, None
    if not (isinstance(output, tuple) and len(output) == 2):
        raise RuntimeError(
            f"{name}(f, ...)(*args): output of function f should be a tuple: (output, aux) "
            "if has_aux is True"
        )
    return output


def vjp(func: Callable, *primals: Any, has_aux: bool = False) -> tuple:
    """``torch.func.vjp``: (f(*primals), vjp_fn[, aux]), where ``vjp_fn(v)`` is ``v^T J``, one
    gradient per primal (a tuple, nests as the primals). Shapes: v as f's output."""
    recording.note_transform("vjp")
    leaves, spec = tree_flatten(primals)
    _check_tensors("vjp", leaves, "primals")
    levels = list(batching.active_levels())
    keep_graph = is_grad_enabled() and (_depth() > 0 or any(t.requires_grad for t in leaves))
    with enable_grad(), _running():
        fresh = [_fresh(t, levels, keep_graph) for t in leaves]
        output = func(*tree_unflatten([logical for _, logical in fresh], spec))
    output, aux = _split_aux("vjp", output, has_aux)
    out_leaves, out_spec = tree_flatten(output)
    _check_tensors("vjp", out_leaves, "the outputs of f")
    out_physical = [to_physical(t, levels) for t in out_leaves]
    inputs = [physical for physical, _ in fresh]
    if not keep_graph and is_grad_enabled():  # f read a tensor that requires grad (a closure's)
        keep_graph = _reads_other_leaves(out_physical, inputs)

    def vjp_fn(*cotangents: Any) -> tuple:
        given = cotangents[0] if len(cotangents) == 1 and len(out_leaves) == 1 else cotangents
        flat, given_spec = tree_flatten(given)
        if len(flat) != len(out_leaves):
            raise RuntimeError(
                f"vjp_fn: expected {len(out_leaves)} cotangents (the structure of f's "
                f"output), got {len(flat)}"
            )
        for cotangent, out in zip(flat, out_leaves):
            if tuple(cotangent.shape) != tuple(out.shape):
                raise RuntimeError(
                    f"vjp_fn: a cotangent has shape {tuple(cotangent.shape)} but the output "
                    f"it belongs to has shape {tuple(out.shape)}"
                )
        known = {level.number for level in levels}
        later = max((batching.level_of(c) for c in flat), default=-1)
        if later >= 0 and later not in known:  # under a vmap that began after vjp: per sample
            return _per_sample(vjp_fn, given, batching.find_level(later))
        grads = _backward(out_physical, flat, inputs, levels, keep_graph or _depth() > 0)
        return tree_unflatten(grads, spec)

    result_output = (
        output
        if keep_graph
        else tree_unflatten([_detached(t, levels) for t in out_leaves], out_spec)
    )
    return (result_output, vjp_fn, aux) if has_aux else (result_output, vjp_fn)


def _reads_other_leaves(outputs: list, inputs: list) -> bool:
    """Whether the graph of `outputs` reads a leaf that requires grad besides `inputs` (a
    parameter f closes over): then the gradients keep their graph, as torch.func's do, so a
    backward through them reaches it."""
    ids = {id(t) for t in inputs}
    return any(leaf.requires_grad and id(leaf) not in ids for leaf in hooks.graph_leaves(outputs))


def _per_sample(function: Callable, given: Any, level: Any) -> Any:
    """`function` (a vjp_fn whose graph has no batch dim of `level`) on each sample of the
    cotangents batched at `level`, the results stacked and batched there: one backward per
    sample, as a loop (PyTorch batches the backward itself)."""
    from ..methods.common import stack

    flat, spec = tree_flatten(given)
    physical = [batching.unwrap(c, level.number) for c in flat]
    columns, out_spec = None, None
    for i in range(level.size):
        sample = [c if p is None else p[i] for c, p in zip(flat, physical)]
        result, out_spec = tree_flatten(function(tree_unflatten(sample, spec)))
        columns = [[r] for r in result] if columns is None else columns
        if i:
            for column, r in zip(columns, result):
                column.append(r)
    stacked = [batching.wrap(stack(column, 0), level.number) for column in columns]
    return tree_unflatten(stacked, out_spec)


def _backward(outputs: list, cotangents: list, inputs: list, levels: list, graph: bool) -> list:
    """The engine's gradients of the physical `outputs` with respect to `inputs`, as logical
    tensors (zeros where an input does not reach the outputs)."""
    roots, seeds = [], []
    for out, cotangent in zip(outputs, cotangents):
        if out.requires_grad:
            roots.append(out)
            seeds.append(to_physical(cotangent, levels).to(out.dtype))
    found = [None] * len(inputs)
    if roots:
        with enable_grad():
            found = engine_grad(
                roots, inputs, seeds, retain_graph=True, create_graph=graph, allow_unused=True
            )
    return [
        from_physical(x.detach() * 0 if g is None else g, levels) for x, g in zip(inputs, found)
    ]


# ------------------------------------------------------------------------------ grad
def _check_argnums(name: str, argnums: Any, count: int) -> tuple[int, ...]:
    several = isinstance(argnums, tuple)
    numbers = argnums if several else (argnums,)
    if several and not numbers:
        raise RuntimeError(f"{name}: argnums must be non-empty")
    for n in numbers:
        if not isinstance(n, int) or isinstance(n, bool):
            raise RuntimeError(
                f"{name}: argnums must be int or Tuple[int, ...], got: {type(argnums)}"
            )
        if not -count <= n < count:
            raise RuntimeError(f"{name}: Got argnums={argnums}, but only {count} positional inputs")
    normalized = tuple(n % count for n in numbers)
    if len(set(normalized)) != len(normalized):
        raise RuntimeError(f"{name}: argnums must be unique, got {argnums}")
    return normalized


def _with_args(args: tuple, numbers: tuple, chosen: tuple) -> tuple:
    args = list(args)
    for n, value in zip(numbers, chosen):
        args[n] = value
    return tuple(args)


def grad_and_value(func: Callable, argnums: Any = 0, has_aux: bool = False) -> Callable:
    """``torch.func.grad_and_value``: f's gradient with respect to the arguments `argnums`
    (nests as they are; a tuple for a tuple of argnums) and f's value: ``(grad, value)``, or
    ``(grad, (value, aux))``. f must return a scalar (one element) Tensor."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> tuple:
        recording.note_transform("grad")
        if not args:
            raise RuntimeError("grad_and_value(f)(*args): f must be called with at least one input")
        numbers = _check_argnums("grad_and_value(f)(*args)", argnums, len(args))

        def chosen_only(*chosen: Any) -> Any:
            output = func(*_with_args(args, numbers, chosen), **kwargs)
            value, aux = _split_aux("grad_and_value", output, has_aux)
            if not isinstance(value, Tensor):
                raise RuntimeError(
                    "grad_and_value(f)(*args): Expected f(*args) to return a Tensor, got "
                    f"{type(value)}"
                )
            if value.ndim != 0:
                raise RuntimeError(
                    "grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor, got "
                    f"tensor with {value.ndim} dims (shape {tuple(value.shape)}). Maybe you "
                    "wanted to use the vjp or jacrev APIs instead?"
                )
            return (value, aux) if has_aux else value

        chosen = tuple(args[n] for n in numbers)
        value, vjp_fn, *aux = vjp(chosen_only, *chosen, has_aux=has_aux)
        grads = vjp_fn(_ones_like(value))
        grads = grads if isinstance(argnums, tuple) else grads[0]
        return (grads, (value, aux[0])) if has_aux else (grads, value)

    return wrapper


def grad(func: Callable, argnums: Any = 0, has_aux: bool = False) -> Callable:
    """``torch.func.grad``: df/dx for a scalar f, as `grad_and_value` without the value
    (``(grad, aux)`` with has_aux)."""
    both = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        grads, value = both(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return wrapper


def _ones_like(tensor: Any) -> Any:
    from .. import creation

    return creation.ones(tuple(tensor.shape), dtype=tensor.dtype, device=tensor.device)


def _zeros_like(tensor: Any) -> Any:
    from .. import creation

    return creation.zeros(tuple(tensor.shape), dtype=tensor.dtype, device=tensor.device)


# ------------------------------------------------------------------------------- jvp
def jvp(
    func: Callable, primals: Any, tangents: Any, *, strict: bool = False, has_aux: bool = False
) -> tuple:
    """``torch.func.jvp``: (f(*primals), J v[, aux]) in one forward pass on dual tensors, where
    v are the tangents (nests as the primals). Shapes: each tangent as its primal; J v as f's
    output."""
    recording.note_transform("jvp")
    if not isinstance(primals, tuple):
        raise RuntimeError(
            "jvp(f, primals, tangents): Expected primals to be a tuple. E.g. it should be valid "
            "to call f(*primals)."
        )
    if not isinstance(tangents, tuple) or len(tangents) != len(primals):
        raise RuntimeError(
            "jvp(f, primals, tangents): Expected primals and tangents to have the same python "
            f"structure (a tuple of {len(primals)}), got {type(tangents).__name__}"
        )
    leaves, spec = tree_flatten(primals)
    tangent_leaves, tangent_spec = tree_flatten(tangents)
    if tangent_spec != spec:
        raise RuntimeError(
            "jvp(f, primals, tangents): Expected primals and tangents to have the same python "
            "structure"
        )
    _check_tensors("jvp", leaves + tangent_leaves, "primals and tangents")
    for primal, tangent in zip(leaves, tangent_leaves):
        if tuple(primal.shape) != tuple(tangent.shape):
            raise RuntimeError(
                f"jvp(f, primals, tangents): Expected primals and tangents to have the same "
                f"shapes, got a primal of shape {tuple(primal.shape)} and a tangent of shape "
                f"{tuple(tangent.shape)}"
            )
    from ..autograd import forward_ad

    # As vjp's: outside every transform, with no input that requires grad, the results hold no
    # graph (an inner transform's, kept for this one, ends here).
    keep_graph = _depth() > 0 or any(t.requires_grad for t in leaves + tangent_leaves)
    with forward_ad.nested_level() as level, _running():
        duals = [forward_ad.make_dual(p, t, level=level) for p, t in zip(leaves, tangent_leaves)]
        output = func(*tree_unflatten(duals, spec))
        output, aux = _split_aux("jvp", output, has_aux)
        out_leaves, out_spec = tree_flatten(output)
        _check_tensors("jvp", out_leaves, "the outputs of f")
        pairs = [forward_ad.unpack_dual(out, level=level) for out in out_leaves]
    values = [p.primal for p in pairs]
    changes = [_zeros_like(v) if p.tangent is None else p.tangent for v, p in zip(values, pairs)]
    if not keep_graph:
        values, changes = [v.detach() for v in values], [c.detach() for c in changes]
    result = (tree_unflatten(values, out_spec), tree_unflatten(changes, out_spec))
    return (*result, aux) if has_aux else result


# ------------------------------------------------------------------ Jacobians, Hessian
def _basis(tensor: Any) -> list:
    """The one-hot tensors of `tensor`'s shape, one per element (row-major order)."""
    count = tensor.numel()
    eye = _zeros_like(tensor).reshape(-1)
    rows = []
    for k in range(count):
        one = eye.clone()
        one[k] = 1
        rows.append(one.reshape(tuple(tensor.shape)))
    return rows


def _check_chunk(name: str, chunk_size: int | None) -> None:
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
        raise ValueError(f"{name}: `chunk_size` should be greater than 0.")


def _stacked(rows: list, leading: tuple, trailing: tuple) -> Any:
    from ..methods.common import stack

    return stack(rows, 0).reshape(leading + trailing)


def jacrev(
    func: Callable,
    argnums: Any = 0,
    *,
    has_aux: bool = False,
    chunk_size: int | None = None,
    _preallocate_and_copy: bool = False,
) -> Callable:
    """``torch.func.jacrev``: the Jacobian of f with respect to the arguments `argnums`, one
    `vjp` per output element (its rows). Shapes: output (*o), input (*i) -> (*o, *i); nests
    as f's outputs, then as the argnums (a tuple for a tuple of argnums)."""
    _check_chunk("jacrev", chunk_size)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        recording.note_transform("jacrev")
        numbers = _check_argnums("jacrev(f)(*args)", argnums, len(args))
        chosen = tuple(args[n] for n in numbers)
        output, vjp_fn, *aux = vjp(
            lambda *c: func(*_with_args(args, numbers, c), **kwargs), *chosen, has_aux=has_aux
        )
        out_leaves, out_spec = tree_flatten(output)
        per_output = []
        for k, out in enumerate(out_leaves):
            rows = []
            for one in _basis(out):
                cotangents = [one if j == k else _zeros_like(o) for j, o in enumerate(out_leaves)]
                rows.append(tree_flatten(vjp_fn(tree_unflatten(cotangents, out_spec)))[0])
            in_leaves = tree_flatten(chosen)[0]
            jac = [
                _stacked([r[i] for r in rows], tuple(out.shape), tuple(x.shape))
                for i, x in enumerate(in_leaves)
            ]
            jac = tree_unflatten(jac, tree_flatten(chosen)[1])
            per_output.append(jac if isinstance(argnums, tuple) else jac[0])
        result = tree_unflatten(per_output, out_spec)
        return (result, aux[0]) if has_aux else result

    return wrapper


def jacfwd(
    func: Callable, argnums: Any = 0, has_aux: bool = False, *, randomness: str = "error"
) -> Callable:
    """``torch.func.jacfwd``: the Jacobian of f with respect to the arguments `argnums`, one
    `jvp` per input element (its columns). Shapes: output (*o), input (*i) -> (*o, *i)."""
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(
            f"jacfwd: only allowed values for randomness are 'error', 'different', "
            f"or 'same'. Got {randomness!r}"
        )

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        recording.note_transform("jacfwd")
        numbers = _check_argnums("jacfwd(f)(*args)", argnums, len(args))
        chosen = tuple(args[n] for n in numbers)
        in_leaves, in_spec = tree_flatten(chosen)

        def call(*c: Any) -> Any:
            return func(*_with_args(args, numbers, c), **kwargs)

        zeros = [_zeros_like(x) for x in in_leaves]
        columns: list = [[] for _ in in_leaves]  # per input: per element, the outputs' J e
        output = aux = None
        for i, x in enumerate(in_leaves):
            for one in _basis(x):
                tangents = tree_unflatten(
                    [one if j == i else z for j, z in enumerate(zeros)], in_spec
                )
                output, change, *rest = jvp(call, chosen, tangents, has_aux=has_aux)
                aux = rest[0] if rest else None
                columns[i].append(tree_flatten(change)[0])
        if output is None:  # no input elements: one call for the output's shape
            output, *rest = jvp(call, chosen, tree_unflatten(zeros, in_spec), has_aux=has_aux)[::2]
        out_leaves, out_spec = tree_flatten(output)
        per_output = []
        for k, out in enumerate(out_leaves):
            jac = []
            for i, x in enumerate(in_leaves):
                cols = [c[k] for c in columns[i]]
                stacked = _stacked(cols, tuple(x.shape), tuple(out.shape)) if cols else None
                jac.append(_columns_last(stacked, out, x))
            jac = tree_unflatten(jac, in_spec)
            per_output.append(jac if isinstance(argnums, tuple) else jac[0])
        result = tree_unflatten(per_output, out_spec)
        return (result, aux) if has_aux else result

    return wrapper


def _columns_last(stacked: Any, out: Any, x: Any) -> Any:
    """(*i, *o) -> (*o, *i): the input's dims after the output's, as jacrev's."""
    if stacked is None:
        from .. import creation

        return creation.zeros(tuple(out.shape) + tuple(x.shape), dtype=out.dtype)
    ni = x.ndim
    order = tuple(range(ni, stacked.ndim)) + tuple(range(ni))
    return stacked.permute(*order)


def hessian(func: Callable, argnums: Any = 0) -> Callable:
    """``torch.func.hessian``: ``jacfwd(jacrev(f, argnums), argnums)``, forward over reverse.
    Shapes: a scalar f of x (*i) -> (*i, *i)."""
    return jacfwd(jacrev(func, argnums), argnums)
