"""The GPU engine: NCCL through CuPy (``cupy.cuda.nccl``), behind the ``"nccl"`` backend.

Part of `backend` (the one place that imports CuPy). `NcclEngine` offers the operations of the
CPU engine (``tinyattn.distributed.mpi``) on CuPy arrays, in place, on one CUDA stream: each
returns a request whose ``Test()`` says whether the GPU has finished it (a CUDA event), so the
process-group layer waits on both engines alike. The communicator is made once per group: rank
0 makes NCCL's unique id and the group's MPI communicator carries it to the others.
"""

from __future__ import annotations

from typing import Any


def _nccl() -> Any:
    from cupy.cuda import nccl  # noqa: PLC0415  (only with CuPy, on first use)

    return nccl


def available() -> bool:
    """Whether CuPy and its NCCL bindings import (a GPU is needed to use them)."""
    try:
        return _nccl().available if hasattr(_nccl(), "available") else True
    except ImportError:
        return False


def _dtype(nccl: Any, array: Any) -> Any:
    names = {
        "float16": nccl.NCCL_FLOAT16,
        "float32": nccl.NCCL_FLOAT32,
        "float64": nccl.NCCL_FLOAT64,
        "int32": nccl.NCCL_INT32,
        "int64": nccl.NCCL_INT64,
        "uint8": nccl.NCCL_UINT8,
        "int8": nccl.NCCL_INT8,
        "bool": nccl.NCCL_UINT8,
    }
    name = str(array.dtype)
    if name not in names:
        raise TypeError(f"nccl: dtype {name} has no NCCL type")
    return names[name]


def _op(nccl: Any, name: str, array: Any) -> Any:
    if str(array.dtype) == "bool":  # PyTorch: bool SUM/MAX is or, PRODUCT/MIN is and
        name = {"SUM": "MAX", "PRODUCT": "MIN"}.get(name, name)
    ops = {"SUM": nccl.NCCL_SUM, "PRODUCT": nccl.NCCL_PROD, "MAX": nccl.NCCL_MAX}
    ops.update({"MIN": nccl.NCCL_MIN, "AVG": getattr(nccl, "NCCL_AVG", None)})
    if ops[name] is None:
        raise RuntimeError("nccl: ReduceOp.AVG needs NCCL 2.10 or newer")
    return ops[name]


class _EventRequest:
    """A request on the GPU: done once the stream has passed the event recorded after it."""

    def __init__(self, event: Any) -> None:
        self.event = event

    def Test(self) -> bool:  # noqa: N802  (MPI's spelling: the two engines' requests match)
        return bool(self.event.done)


class NcclEngine:
    """One NCCL communicator among a group's ranks, working on one CUDA stream."""

    name = "nccl"

    def __init__(self, comm: Any, rank: int, size: int) -> None:
        import cupy  # noqa: PLC0415

        self.cupy, self.nccl = cupy, _nccl()
        self.comm, self.rank, self.size = comm, rank, size
        self.stream = cupy.cuda.Stream(non_blocking=True)

    @classmethod
    def join(cls, host: Any, array: Any) -> NcclEngine:
        """The communicator of `host`'s ranks (every rank calls this with its GPU array)."""
        nccl = _nccl()
        unique_id = nccl.get_unique_id() if host.rank == 0 else None
        unique_id = host.broadcast_object(unique_id, 0)
        with array.device:
            comm = nccl.NcclCommunicator(host.size, unique_id, host.rank)
        return cls(comm, host.rank, host.size)

    def close(self) -> None:
        self.comm.destroy()

    def _launched(self, array: Any, launch: Any) -> _EventRequest:
        """Run `launch` on the engine's stream after the work already queued for `array`."""
        self.stream.wait_event(self.cupy.cuda.get_current_stream().record())
        launch(self.stream.ptr)
        return _EventRequest(self.stream.record())

    def all_reduce(self, array: Any, op: str) -> _EventRequest:
        count, kind = array.size, _dtype(self.nccl, array)
        reduce_op, ptr = _op(self.nccl, op, array), array.data.ptr
        return self._launched(
            array, lambda s: self.comm.allReduce(ptr, ptr, count, kind, reduce_op, s)
        )

    def broadcast(self, array: Any, src: int) -> _EventRequest:
        count, kind, ptr = array.size, _dtype(self.nccl, array), array.data.ptr
        return self._launched(array, lambda s: self.comm.broadcast(ptr, ptr, count, kind, src, s))

    def reduce(self, array: Any, op: str, dst: int) -> _EventRequest:
        count, kind, ptr = array.size, _dtype(self.nccl, array), array.data.ptr
        reduce_op = _op(self.nccl, op, array)
        return self._launched(
            array, lambda s: self.comm.reduce(ptr, ptr, count, kind, reduce_op, dst, s)
        )

    def all_gather(self, send: Any, recv: Any) -> _EventRequest:
        count, kind = send.size, _dtype(self.nccl, send)
        source, target = send.data.ptr, recv.data.ptr
        return self._launched(send, lambda s: self.comm.allGather(source, target, count, kind, s))

    def reduce_scatter(self, send: Any, recv: Any, op: str) -> _EventRequest:
        count, kind = recv.size, _dtype(self.nccl, recv)
        reduce_op, source, target = _op(self.nccl, op, send), send.data.ptr, recv.data.ptr
        return self._launched(
            send, lambda s: self.comm.reduceScatter(source, target, count, kind, reduce_op, s)
        )
