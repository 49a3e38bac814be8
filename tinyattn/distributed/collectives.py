"""The collectives on tensors, with PyTorch's signatures and meanings.

Imports `tensor`, `backend.collective` and `group`. Each call checks its tensors at this door,
stages each array into a host buffer the engine can use (the array itself when it is a
row-major host array), starts the engine's operation and returns a `Work`; the result is
written back into the tensors' own memory when the work finishes. With ``async_op=False``
(the default) the call waits and returns None, as PyTorch's.

Definitions, for ranks r = 0..n-1 holding x_r:
    all_reduce:            every rank gets op(x_0, ..., x_{n-1})  (AVG: the SUM divided by n)
    reduce:                only `dst` gets it
    broadcast:             every rank gets x_src
    all_gather:            every rank gets [x_0, ..., x_{n-1}]
    reduce_scatter_tensor: rank r gets block r of op(x_0, ..., x_{n-1})
    gather / scatter:      the list on `dst` / from `src`, one entry per rank
"""

from __future__ import annotations

import enum
from typing import Any

from ..backend import collective as buffers
from ..tensor import Tensor
from .group import NON_GROUP_MEMBER, ProcessGroup, Work, resolve


class ReduceOp(enum.Enum):
    """How all_reduce, reduce and reduce_scatter_tensor combine the ranks' values."""

    SUM = "SUM"
    AVG = "AVG"
    PRODUCT = "PRODUCT"
    MIN = "MIN"
    MAX = "MAX"


def _checked(call: str, tensor: Any, name: str = "tensor") -> Any:
    """The tensor's array, after checking it is a Tensor (the one check, at the door)."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{call}: {name} must be a Tensor, got {type(tensor).__name__}")
    return tensor.array


def _written(tensor: Tensor) -> None:
    """Count a write into `tensor` (its version counter), as an in-place op does."""
    tensor._version_counter[0] += 1


def _finish(call: str, group: ProcessGroup, request: Any, finish: Any, async_op: bool):
    work = Work(request, finish, call, group)
    if async_op:
        return work
    work.wait()
    return None


def _skip(group: Any) -> bool:
    """A rank outside `group` takes no part in its collectives (PyTorch returns at once)."""
    return group is NON_GROUP_MEMBER


def all_reduce(tensor: Tensor, op: ReduceOp = ReduceOp.SUM, group=None, async_op: bool = False):
    """In place: ``tensor = op(tensor of rank 0, ..., tensor of rank n-1)`` on every rank."""
    if _skip(group):
        return None
    g, array = resolve(group, "all_reduce"), _checked("all_reduce", tensor)
    if op is ReduceOp.AVG and buffers.host_dtype_kind(array) != "f":
        raise TypeError(f"all_reduce: ReduceOp.AVG needs a floating tensor, got {tensor.dtype}")
    engine = g.engine_for(array)
    if engine is not g.host:  # NCCL reduces the GPU array in place, AVG included
        return _finish("all_reduce", g, engine.all_reduce(array, op.name), None, async_op)
    host = buffers.host_buffer(array)

    def finish() -> None:
        if op is ReduceOp.AVG:
            host[...] /= g.size()
        buffers.write_back(array, host)
        _written(tensor)

    return _finish("all_reduce", g, engine.all_reduce(host, op.name), finish, async_op)


def reduce(tensor: Tensor, dst: int, op: ReduceOp = ReduceOp.SUM, group=None, async_op=False):
    """Like all_reduce, but only rank `dst` (a global rank) receives the result."""
    if _skip(group):
        return None
    g, array = resolve(group, "reduce"), _checked("reduce", tensor)
    root = g.group_rank(dst, "reduce")
    engine = g.engine_for(array)
    host = buffers.host_buffer(array) if engine is g.host else array

    def finish() -> None:
        if g.rank() == root:
            if op is ReduceOp.AVG and engine is g.host:
                host[...] /= g.size()
            buffers.write_back(array, host)
            _written(tensor)

    name = "SUM" if op is ReduceOp.AVG and engine is g.host else op.name
    return _finish("reduce", g, engine.reduce(host, name, root), finish, async_op)


def broadcast(tensor: Tensor, src: int, group=None, async_op: bool = False):
    """In place: every rank's `tensor` becomes rank `src`'s."""
    if _skip(group):
        return None
    g, array = resolve(group, "broadcast"), _checked("broadcast", tensor)
    root = g.group_rank(src, "broadcast")
    engine = g.engine_for(array)
    host = buffers.host_buffer(array) if engine is g.host else array

    def finish() -> None:
        if g.rank() != root:
            buffers.write_back(array, host)
            _written(tensor)

    return _finish("broadcast", g, engine.broadcast(host, root), finish, async_op)


def _same_shapes(call: str, tensors: list, like: Tensor, count: int) -> None:
    if len(tensors) != count:
        raise ValueError(f"{call}: the list holds {len(tensors)} tensors for {count} ranks")
    for position, other in enumerate(tensors):
        _checked(call, other, f"tensor {position} of the list")
        if tuple(other.shape) != tuple(like.shape) or other.dtype != like.dtype:
            raise ValueError(
                f"{call}: tensor {position} of the list has shape {tuple(other.shape)} and "
                f"dtype {other.dtype}, the input {tuple(like.shape)} and {like.dtype}"
            )


def _split_into(tensors: list, host: Any) -> None:
    """Write row r of `host` (one per rank) into tensors[r]."""
    for position, target in enumerate(tensors):
        buffers.write_back(target.array, host[position])
        _written(target)


def all_gather(tensor_list: list, tensor: Tensor, group=None, async_op: bool = False):
    """``tensor_list[r] = tensor of rank r`` on every rank."""
    if _skip(group):
        return None
    g, array = resolve(group, "all_gather"), _checked("all_gather", tensor)
    _same_shapes("all_gather", tensor_list, tensor, g.size())
    send = buffers.host_buffer(array)
    host = buffers.host_empty((g.size(), *array.shape), array)
    request = g.host.all_gather(send, host)
    return _finish("all_gather", g, request, lambda: _split_into(tensor_list, host), async_op)


def _blocks(call: str, big: Tensor, small: Tensor, count: int) -> None:
    """`big` holds `count` blocks of `small`'s size (concatenated or stacked), same dtype."""
    if big.numel() != count * small.numel() or big.dtype != small.dtype:
        raise ValueError(
            f"{call}: a tensor of shape {tuple(big.shape)} ({big.dtype}) must hold {count} "
            f"blocks of shape {tuple(small.shape)} ({small.dtype}), one per rank"
        )


def all_gather_into_tensor(output_tensor: Tensor, input_tensor: Tensor, group=None, async_op=False):
    """`output_tensor` (n blocks along dim 0, or stacked) = every rank's `input_tensor`."""
    if _skip(group):
        return None
    g = resolve(group, "all_gather_into_tensor")
    out = _checked("all_gather_into_tensor", output_tensor, "output_tensor")
    source = _checked("all_gather_into_tensor", input_tensor, "input_tensor")
    _blocks("all_gather_into_tensor", output_tensor, input_tensor, g.size())
    engine = g.engine_for(source)
    host, send = (
        (buffers.host_buffer(out), buffers.host_buffer(source))
        if engine is g.host
        else (
            out,
            source,
        )
    )

    def finish() -> None:
        buffers.write_back(out, host)
        _written(output_tensor)

    return _finish("all_gather_into_tensor", g, engine.all_gather(send, host), finish, async_op)


def reduce_scatter_tensor(
    output: Tensor,
    input: Tensor,  # noqa: A002  (PyTorch's keyword)
    op: ReduceOp = ReduceOp.SUM,
    group=None,
    async_op=False,
):
    """`output` on rank r = block r (along dim 0) of op over every rank's `input`."""
    if _skip(group):
        return None
    g = resolve(group, "reduce_scatter_tensor")
    out = _checked("reduce_scatter_tensor", output, "output")
    source = _checked("reduce_scatter_tensor", input, "input")
    _blocks("reduce_scatter_tensor", input, output, g.size())
    engine = g.engine_for(source)
    host = buffers.host_buffer(out) if engine is g.host else out
    send = buffers.host_buffer(source) if engine is g.host else source

    def finish() -> None:
        if op is ReduceOp.AVG and engine is g.host:
            host[...] /= g.size()
        buffers.write_back(out, host)
        _written(output)

    name = "SUM" if op is ReduceOp.AVG and engine is g.host else op.name
    request = engine.reduce_scatter(send, host, name)
    return _finish("reduce_scatter_tensor", g, request, finish, async_op)


def gather(
    tensor: Tensor, gather_list: list | None = None, dst: int = 0, group=None, async_op=False
):
    """On rank `dst`, ``gather_list[r] = tensor of rank r``; other ranks pass no list."""
    if _skip(group):
        return None
    g, array = resolve(group, "gather"), _checked("gather", tensor)
    root = g.group_rank(dst, "gather")
    if g.rank() == root:
        if gather_list is None:
            raise ValueError(f"gather: rank {dst} (dst) must pass gather_list")
        _same_shapes("gather", gather_list, tensor, g.size())
    elif gather_list:
        raise ValueError(f"gather: only rank {dst} (dst) passes gather_list")
    host = buffers.host_empty((g.size(), *array.shape), array) if g.rank() == root else None
    request = g.host.gather(buffers.host_buffer(array), host, root)

    def finish() -> None:
        if host is not None:
            _split_into(gather_list, host)

    return _finish("gather", g, request, finish, async_op)


def scatter(
    tensor: Tensor, scatter_list: list | None = None, src: int = 0, group=None, async_op=False
):
    """``tensor = scatter_list[r]`` of rank `src` on each rank r."""
    if _skip(group):
        return None
    g, array = resolve(group, "scatter"), _checked("scatter", tensor)
    root = g.group_rank(src, "scatter")
    send = None
    if g.rank() == root:
        if scatter_list is None:
            raise ValueError(f"scatter: rank {src} (src) must pass scatter_list")
        _same_shapes("scatter", scatter_list, tensor, g.size())
        send = buffers.host_empty((g.size(), *array.shape), array)
        for position, part in enumerate(scatter_list):
            send[position] = buffers.host_buffer(part.array)
    elif scatter_list:
        raise ValueError(f"scatter: only rank {src} (src) passes scatter_list")
    host = buffers.host_buffer(array)

    def finish() -> None:
        buffers.write_back(array, host)
        _written(tensor)

    return _finish("scatter", g, g.host.scatter(send, host, root), finish, async_op)


def isend(tensor: Tensor, dst: int, group=None, tag: int = 0) -> Work | None:
    """Start sending `tensor` to rank `dst`; the Work finishes once it may be changed."""
    if _skip(group):
        return None
    g, array = resolve(group, "isend"), _checked("isend", tensor)
    request = g.host.send(buffers.host_buffer(array), g.group_rank(dst, "isend"), tag)
    return _finish("isend", g, request, None, True)


def irecv(tensor: Tensor, src: int | None = None, group=None, tag: int = 0) -> Work | None:
    """Start receiving into `tensor` from rank `src` (any rank when None)."""
    if _skip(group):
        return None
    g, array = resolve(group, "irecv"), _checked("irecv", tensor)
    host = buffers.host_buffer(array)
    source = None if src is None else g.group_rank(src, "irecv")
    status = g.host.status()

    def finish() -> int:
        buffers.write_back(array, host)
        _written(tensor)
        return g.ranks[status.Get_source()]

    request = g.host.recv(host, source, tag, status)
    return _finish("irecv", g, request, finish, True)


def send(tensor: Tensor, dst: int, group=None, tag: int = 0) -> None:
    """Send `tensor` to rank `dst`; returns once the tensor may be changed."""
    work = isend(tensor, dst, group, tag)
    if work is not None:
        work.wait()


def recv(tensor: Tensor, src: int | None = None, group=None, tag: int = 0) -> int:
    """Receive into `tensor` from rank `src` (any when None); returns the sender's rank."""
    work = irecv(tensor, src, group, tag)
    if work is None:
        return -1
    work.wait()
    return work.result()


def barrier(group=None, async_op: bool = False, device_ids: list[int] | None = None):
    """Return once every rank of the group has called barrier."""
    if _skip(group):
        return None
    g = resolve(group, "barrier")
    return _finish("barrier", g, g.host.barrier(), None, async_op)


# ------------------------------------------------------------------------- Python objects


def broadcast_object_list(object_list: list, src: int = 0, group=None, device=None) -> None:
    """In place: every rank's `object_list` becomes rank `src`'s (pickled on the way)."""
    if _skip(group):
        return
    g = resolve(group, "broadcast_object_list")
    received = g.host.broadcast_object(
        list(object_list), g.group_rank(src, "broadcast_object_list")
    )
    if len(received) != len(object_list):
        raise ValueError(
            f"broadcast_object_list: rank {g.rank()} passed a list of {len(object_list)}, "
            f"rank {src} one of {len(received)}"
        )
    object_list[:] = received


def all_gather_object(object_list: list, obj: Any, group=None) -> None:
    """``object_list[r] = obj of rank r`` (the list must have one place per rank)."""
    if _skip(group):
        return
    g = resolve(group, "all_gather_object")
    if len(object_list) != g.size():
        raise ValueError(
            f"all_gather_object: object_list has {len(object_list)} places for {g.size()} ranks"
        )
    object_list[:] = g.host.all_gather_object(obj)


def gather_object(obj: Any, object_gather_list: list | None = None, dst: int = 0, group=None):
    """On rank `dst`, ``object_gather_list[r] = obj of rank r``."""
    if _skip(group):
        return
    g = resolve(group, "gather_object")
    gathered = g.host.gather_object(obj, g.group_rank(dst, "gather_object"))
    if gathered is not None:
        if object_gather_list is None or len(object_gather_list) != g.size():
            raise ValueError(f"gather_object: rank {dst} must pass a list of {g.size()} places")
        object_gather_list[:] = gathered


def scatter_object_list(
    scatter_object_output_list: list, scatter_object_input_list=None, src=0, group=None
):
    """``scatter_object_output_list[0] = scatter_object_input_list[r]`` of rank `src`."""
    if _skip(group):
        return
    g = resolve(group, "scatter_object_list")
    root = g.group_rank(src, "scatter_object_list")
    objects = list(scatter_object_input_list) if g.rank() == root else None
    scatter_object_output_list[0] = g.host.scatter_object(objects, root)
