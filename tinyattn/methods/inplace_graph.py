"""In-place operations inside the graph: the tensor's history moves to the op, as in PyTorch.

``h.add_(v)`` on a tensor in the graph cannot overwrite the values its history produced and
pretend nothing happened: backward would run the old rules on the new values. So the op is
recorded. A stand-in for h's current history (`history_of`: h's storage, version counter and
producing node, under a new handle) is the op's input; the new values are computed from it out
of place, written into h's storage, and h takes the new node as its producer. Backward then
reaches the new node first, and from it the old history:

    before:  x --Mul--> h                   after h.add_(v):  x --Mul--> (old h) --Add--> h
                                                                         v ------/

A node recorded earlier that saved h's values now sees h's version moved on, and refuses to
run (PyTorch's "modified by an inplace operation"). The new node itself must not: when it reads
its input's values in backward (``h.mul_(w)``: dL/dw = g * old h), the stand-in is a copy.

A write through a view (``h[0].mul_(3)``) moves its base's history: the base's new values are
its old history with the view's elements replaced by the op's result (`replaced`), and the view
is that part of the base again. Part of the tensor layer: imports `backend`, `autograd`, `ops`.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import autograd, backend
from ..autograd import _next_seq
from ..backend import promotion
from ..ops import Clone, IndexAdd
from ..ops.indexing import parse_key
from .common import TensorBase, where


def recorded_inplace(tensor: TensorBase, op: str, compute: Callable, cast: bool) -> None:
    """Run `op` on `tensor` in grad mode as a recorded op, and move the history."""
    view = tensor._view
    base = view[0] if view is not None and view[0] is not tensor else None
    first = _next_seq()
    if base is None:
        history = history_of(tensor)
        result = _fresh(fitted(op, tensor, _computed_on(history, compute, first), cast), first)
        if history.requires_grad and not result.requires_grad:  # zero_(), fill_(number) ...
            # The tensor stays in the graph (its old history gets a zero gradient), as in PyTorch.
            xp = backend.namespace(tensor.array)
            keep = xp.ones(tensor.shape, dtype=xp.bool, device=tensor.array.device)
            result = where(tensor.constant(keep), result, history)
        tensor._store(op, result.array)
        adopt(tensor, result, history)
        return
    positions = tensor._from_op(backend.positions_in(tensor.array, base.array), None)
    history = history_of(base)
    current = history.reshape(-1)[positions]  # the view's values, from the base's history
    result = _fresh(fitted(op, tensor, compute(current), cast), first)
    new_base = replaced(history, positions, result)
    tensor._store(op, result.array)  # through the view, into the base's storage
    # The op's node reads `result` as its output: it is the view's values, so a later write
    # into the base or the view must be seen by its version check, as PyTorch's would be.
    result._version_counter = tensor._version_counter
    _output_read_at(result, tensor._version_counter[0])
    adopt(base, new_base, history)
    adopt(tensor, base.reshape(-1)[positions], history_of(tensor))  # that part of it
    tensor._view = (base, tensor._version_counter[0])


def history_of(tensor: TensorBase) -> TensorBase:
    """A new handle on `tensor`'s storage, version counter and producing node: what the tensor
    was before an in-place op, for that op to read."""
    handle = tensor._from_op(tensor.array, tensor._ctx)
    handle.requires_grad = tensor.requires_grad
    handle._version_counter = tensor._version_counter
    fn = tensor._ctx
    if fn is not None and fn._outputs is not None:  # output k of a node with several: the
        fn._outputs.stand_in(tensor, handle)  # node finds its output k by identity
    return handle


def _computed_on(history: TensorBase, compute: Callable, first: int) -> TensorBase:
    """``compute(history)``; where a node it records would read `history`'s values in backward
    (which the store is about to overwrite), it runs again on a copy of them."""
    result = compute(history)
    if _reads(result, history, first):
        result = compute(Clone.apply(history))
    return result


def _fresh(result: TensorBase, first: int) -> TensorBase:
    """`result` as a tensor of its own node: ``copy_(w)`` computes w itself, and a tensor may
    not share another's producer (the engine would run that node twice)."""
    if result.requires_grad and (result._ctx is None or result._ctx._seq <= first):
        return Clone.apply(result)
    return result


def _reads(result: TensorBase, stand_in: TensorBase, first: int) -> bool:
    """Whether a node recorded after sequence number `first` on the way from `result` back to
    `stand_in` checks `stand_in`'s version in backward."""
    stack, seen = [result], set()
    while stack:
        fn = stack.pop()._ctx
        if fn is None or id(fn) in seen or fn._seq <= first:
            continue
        seen.add(id(fn))
        if any(p >= 0 and fn.inputs[p] is stand_in for p, _ in fn._versions or ()):
            return True
        stack.extend(fn.inputs)
    return False


def adopt(tensor: TensorBase, result: TensorBase, before: TensorBase) -> None:
    """`tensor` (whose storage now holds `result`'s values) takes `result`'s producing node.
    Nodes recorded earlier that read `tensor` keep reading `before`, its old history: the
    engine follows ``tensor._rebased`` back to it."""
    tensor._rebased = (_next_seq(), before, tensor._rebased)
    tensor._ctx = result._ctx
    tensor.requires_grad = result.requires_grad
    _output_read_at(result, tensor._version_counter[0])  # its node's output is tensor now


def _output_read_at(result: TensorBase, version: int) -> None:
    """The version at which `result`'s node checks its output, if its rule reads it."""
    fn = result._ctx
    if fn is not None and fn._versions is not None:
        fn._versions = tuple((p, version if p < 0 else v) for p, v in fn._versions)


def replaced(x: TensorBase, positions: TensorBase, values: TensorBase) -> TensorBase:
    """x with the elements at the flat `positions` replaced by `values`, as graph ops:
    ``where(hit, values placed at positions, x)``. dL/dx = g off the positions,
    dL/dvalues = g at them. Shapes: x (...), positions and values (k...) -> x's shape."""
    size = x.numel()
    flat = positions.reshape(-1)
    key = parse_key((flat.array,), (size,))
    ones = x.constant(
        backend.namespace(x.array).ones(flat.shape, dtype=x.dtype, device=x.array.device)
    )
    hit = IndexAdd.apply(ones, shape=(size,), key=key).reshape(x.shape) > 0  # no gradient
    placed = IndexAdd.apply(values.reshape(-1).to(x.dtype), shape=(size,), key=key)
    return where(hit, placed.reshape(x.shape), x)


def fitted(op: str, tensor: TensorBase, result: TensorBase, cast: bool) -> TensorBase:
    """`result` checked to fit in place in `tensor`: its shape, and a dtype of its kind or
    below (cast to `tensor`'s dtype where the op allows, as copy_ and fill_ do)."""
    if result.shape != tensor.shape:
        raise RuntimeError(
            f"{op}: the result has shape {result.shape}, which does not fit in place in a "
            f"tensor of shape {tensor.shape} (in-place operations cannot broadcast their target)"
        )
    if not cast:
        check_dtype(op, tensor, result)
    return result if result.dtype == tensor.dtype else result._cast(tensor.dtype)


def dtype_kind(tensor: TensorBase) -> int:
    """0 bool, 1 integer, 2 floating: the category of the tensor's dtype in the promotion rule."""
    return promotion.CATEGORY[backend.dtype_name(tensor.dtype)]


def check_dtype(op: str, tensor: TensorBase, result: TensorBase) -> None:
    """PyTorch's in-place rule: a result may be stored only into its category or a higher one."""
    if not promotion.can_cast(backend.dtype_name(result.dtype), backend.dtype_name(tensor.dtype)):
        raise RuntimeError(
            f"{op}: result type {backend.dtype_name(result.dtype)} can't be cast to the desired "
            f"output type {backend.dtype_name(tensor.dtype)} (shape {tensor.shape})"
        )


def refresh_view(view: TensorBase) -> None:
    """A view whose base was written in place since its history was made: the view is that
    part of the base's history now (PyTorch regenerates a view's grad_fn the same way)."""
    base = view._view[0]
    if base.requires_grad:
        positions = view._from_op(backend.positions_in(view.array, base.array), None)
        adopt(view, base.reshape(-1)[positions], history_of(view))
    view._view = (base, view._version_counter[0])


autograd.use_view_refresher(refresh_view)
