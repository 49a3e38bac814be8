"""The CPU engine: MPI (MPICH through mpi4py) behind the ``"gloo"`` backend name.

The one module that imports mpi4py. It works on host arrays (``backend.collective`` stages
tensors into them) and returns MPI requests; the process-group layer above it turns them into
PyTorch's work handles. tinyattn writes no transport of its own: every byte between processes
moves through MPI.

How independent processes become one MPI world (PyTorch's model: each rank is started on its
own, told only ``RANK``, ``WORLD_SIZE`` and the master's address). Rank 0 opens an MPI port
(``MPI_Open_port``) and hands its name to the others through the rendezvous (a few bytes over
TCP, as PyTorch's TCPStore does); then, one rank at a time, the ranks joined so far accept
(``MPI_Comm_accept``) and the next one connects (``MPI_Comm_connect``), and the two sides merge
into one communicator (``MPI_Intercomm_merge``). Last, the ranks are numbered by ``RANK``
(``MPI_Comm_split``). MPICH tells processes apart by the process manager that started them, so
each rank runs under its own ``mpiexec -n 1``: the launcher does that.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..backend import collective as buffers

_MPI: Any = None


def load() -> Any:
    """mpi4py's MPI module, initialising MPI on first use (None when mpi4py is missing).

    MPICH's network module and libfabric provider are chosen here, before MPI starts, unless
    the user chose: TCP through libfabric works between processes of separate ``mpiexec``
    runs on one machine and on several (MPICH's default UCX module fails there)."""
    global _MPI
    if _MPI is None:
        os.environ.setdefault("MPICH_CH4_NETMOD", "ofi")
        os.environ.setdefault("FI_PROVIDER", "tcp")
        try:
            from mpi4py import MPI  # noqa: PLC0415  (MPI starts on this import)
        except ImportError:
            return None
        _MPI = MPI
    return _MPI


def importable() -> bool:
    """Whether mpi4py is installed, without starting MPI."""
    import importlib.util  # noqa: PLC0415

    return importlib.util.find_spec("mpi4py") is not None


def under_process_manager() -> bool:
    """Whether this process was started by MPICH's ``mpiexec`` (PMI variables are set)."""
    return "PMI_RANK" in os.environ or "PMI_FD" in os.environ


def _reduce_ops(MPI: Any) -> dict[tuple[str, bool], Any]:
    """(ReduceOp name, is bool) -> MPI op; bool SUM is logical or, as PyTorch's."""
    ops = {"SUM": MPI.SUM, "AVG": MPI.SUM, "PRODUCT": MPI.PROD, "MAX": MPI.MAX, "MIN": MPI.MIN}
    table = {(name, False): op for name, op in ops.items()}
    for name, op in (("SUM", MPI.LOR), ("MAX", MPI.LOR), ("PRODUCT", MPI.LAND), ("MIN", MPI.LAND)):
        table[(name, True)] = op
    return table


class MpiEngine:
    """One communicator: the world, or a subgroup made by `subgroup`."""

    name = "mpi"

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._ops = _reduce_ops(_MPI)

    # --------------------------------------------------------------------------- forming
    @classmethod
    def join(cls, rank: int, world_size: int, exchange: Callable[[str | None], str]) -> MpiEngine:
        """The world of `world_size` ranks; ``exchange(port)`` gives every rank rank 0's port
        name (rank 0 passes its own, the others None)."""
        MPI = load()
        if world_size == 1:
            return cls(MPI.COMM_SELF.Dup())
        port = MPI.Open_port() if rank == 0 else None
        port = exchange(port)
        comm = MPI.COMM_SELF
        if rank != 0:  # join the ranks accepted so far; then help accept the rest
            comm = MPI.COMM_SELF.Connect(port, MPI.INFO_NULL, 0).Merge(high=True)
        while comm.Get_size() < world_size:
            comm = comm.Accept(port, MPI.INFO_NULL, 0).Merge(high=False)
        if rank == 0:
            MPI.Close_port(port)
        return cls(comm.Split(0, rank))  # numbered by RANK, whatever the order of arrival

    def subgroup(self, ranks: list[int]) -> MpiEngine | None:
        """The communicator of `ranks` (None on a rank outside them); every rank calls it."""
        group = self.comm.Get_group().Incl(ranks)
        comm = self.comm.Create_group(group)
        return None if comm == _MPI.COMM_NULL else MpiEngine(comm)

    def close(self) -> None:
        self.comm.Free()

    # --------------------------------------------------------------------------- collectives
    def _op(self, op: str, array: Any) -> Any:
        return self._ops[(op, buffers.host_dtype_kind(array) == "b")]

    def all_reduce(self, array: Any, op: str) -> Any:
        return self.comm.Iallreduce(_MPI.IN_PLACE, array, self._op(op, array))

    def broadcast(self, array: Any, src: int) -> Any:
        return self.comm.Ibcast(array, root=src)

    def reduce(self, array: Any, op: str, dst: int) -> Any:
        send = _MPI.IN_PLACE if self.rank == dst else array
        return self.comm.Ireduce(send, array, self._op(op, array), root=dst)

    def all_gather(self, send: Any, recv: Any) -> Any:
        return self.comm.Iallgather(send, recv)

    def reduce_scatter(self, send: Any, recv: Any, op: str) -> Any:
        return self.comm.Ireduce_scatter_block(send, recv, self._op(op, send))

    def gather(self, send: Any, recv: Any | None, dst: int) -> Any:
        return self.comm.Igather(send, recv, root=dst)

    def scatter(self, send: Any | None, recv: Any, src: int) -> Any:
        return self.comm.Iscatter(send, recv, root=src)

    def send(self, array: Any, dst: int, tag: int) -> Any:
        return self.comm.Isend(array, dest=dst, tag=tag)

    def recv(self, array: Any, src: int | None, tag: int, status: Any) -> Any:
        """Start a receive; `status` (from `status()`) tells the sender once it is done."""
        source = _MPI.ANY_SOURCE if src is None else src
        return _StatusRequest(self.comm.Irecv(array, source=source, tag=tag), status)

    def status(self) -> Any:
        return _MPI.Status()

    def barrier(self) -> Any:
        return self.comm.Ibarrier()

    # ------------------------------------------------------------------ Python objects
    # mpi4py's lower-case calls pickle the object and send the bytes (blocking).
    def broadcast_object(self, obj: Any, src: int) -> Any:
        return self.comm.bcast(obj, root=src)

    def all_gather_object(self, obj: Any) -> list[Any]:
        return self.comm.allgather(obj)

    def gather_object(self, obj: Any, dst: int) -> list[Any] | None:
        return self.comm.gather(obj, root=dst)

    def scatter_object(self, objects: list[Any] | None, src: int) -> Any:
        return self.comm.scatter(objects, root=src)


class _StatusRequest:
    """A receive's request that fills its status when tested done (for the sender's rank)."""

    def __init__(self, request: Any, status: Any) -> None:
        self.request, self.status = request, status

    def Test(self) -> bool:  # noqa: N802  (MPI's spelling, as the requests it stands beside)
        return self.request.Test(self.status)
