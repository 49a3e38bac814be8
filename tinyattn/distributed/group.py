"""Process groups and work handles: PyTorch's ``init_process_group`` and what it sets up.

Imports `backend`, the engines (`mpi`, ``backend.nccl``) and `rendezvous`. A `ProcessGroup` is
a set of ranks with the engines that talk among them: MPI for host arrays (the ``"gloo"``
name), and with ``"nccl"`` also NCCL for arrays on GPUs. A `Work` is one started operation:
``wait()`` returns once it is done (and raises `DistBackendError` past the group's timeout,
rather than hanging), ``is_completed()`` asks without waiting.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ..backend import collective as buffers
from . import mpi, rendezvous

DEFAULT_TIMEOUT = timedelta(minutes=10)  # PyTorch's default for gloo


class DistError(RuntimeError):
    """PyTorch's ``torch.distributed.DistError``: a distributed operation failed."""


class DistBackendError(DistError):
    """PyTorch's ``torch.distributed.DistBackendError``: the engine failed or timed out."""


class ProcessGroup:
    """The ranks `ranks` (global rank numbers) and the engines among them; this rank is
    ``rank()`` of ``size()`` in the group."""

    def __init__(self, backend: str, host: Any, ranks: list[int], timeout: timedelta) -> None:
        self.backend_name, self.host, self.ranks, self.timeout = backend, host, ranks, timeout
        self.device_engine: Any = None  # NCCL's communicator, made on first use on a GPU

    def rank(self) -> int:
        return self.host.rank

    def size(self) -> int:
        return self.host.size

    def group_rank(self, global_rank: int, call: str) -> int:
        """The rank within this group of global rank `global_rank` (PyTorch's src/dst)."""
        if global_rank not in self.ranks:
            raise ValueError(
                f"{call}: rank {global_rank} is not in the group of ranks {self.ranks}"
            )
        return self.ranks.index(global_rank)

    def engine_for(self, array: Any) -> Any:
        """MPI for host arrays; NCCL for GPU arrays in an ``"nccl"`` group."""
        if buffers.is_host_array(array) or self.backend_name != "nccl":
            return self.host
        if self.device_engine is None:
            from ..backend import nccl  # noqa: PLC0415  (CuPy is imported only here)

            self.device_engine = nccl.NcclEngine.join(self.host, array)
        return self.device_engine

    def __repr__(self) -> str:
        return f"ProcessGroup(backend={self.backend_name!r}, ranks={self.ranks})"


class Work:
    """One started operation: ``wait()`` blocks until it is done, then runs `finish` (copying
    a staged result back into the tensor, dividing for AVG) once."""

    def __init__(self, request: Any, finish: Callable[[], Any] | None, call: str, group) -> None:
        self._request, self._finish, self._call, self._group = request, finish, call, group
        self._done = request is None
        self._result: Any = None
        if self._done and finish is not None:
            self._result = finish()

    def is_completed(self) -> bool:
        """Whether the operation has finished (asking moves the engine's progress on)."""
        if not self._done and self._request.Test():
            self._complete()
        return self._done

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Block until done; raise DistBackendError after `timeout` (the group's by default)."""
        limit = (timeout or self._group.timeout).total_seconds()
        deadline = time.monotonic() + limit
        started = time.monotonic()
        while not self.is_completed():
            now = time.monotonic()
            if now > deadline:
                raise DistBackendError(
                    f"{self._call}: rank {self._group.rank()} of world size "
                    f"{self._group.size()} timed out after {limit:g} s waiting for the other "
                    "ranks (one may have died or be stuck)"
                )
            if now - started > 0.002:  # a long wait: leave the core to the others a little
                time.sleep(0.0001)
        return True

    def _complete(self) -> None:
        self._done = True
        if self._finish is not None:
            self._result = self._finish()

    def result(self) -> Any:
        return self._result


class _State:
    """This process's default group (None before init_process_group)."""

    world: ProcessGroup | None = None


STATE = _State()


def init(backend: str | None, init_method: str | None, rank: int, world_size: int, timeout):
    """Form the world: see ``tinyattn.distributed.init_process_group``."""
    if STATE.world is not None:
        raise ValueError(
            "init_process_group: trying to initialize the default process group twice!"
        )
    backend = (backend or "gloo").lower()
    if backend not in ("gloo", "nccl", "mpi", "cpu:gloo,cuda:nccl"):
        raise ValueError(
            f"init_process_group: backend {backend!r} is not one of 'gloo' (MPI on the CPU), "
            "'nccl' (NCCL on NVIDIA GPUs, MPI on the CPU) or 'mpi'"
        )
    if mpi.load() is None:
        raise RuntimeError(
            "init_process_group: the distributed engine (mpi4py with MPICH) is not installed; "
            "pip install 'tinyattn[distributed]'"
        )
    rank = int(os.environ["RANK"]) if rank == -1 and "RANK" in os.environ else rank
    if world_size == -1 and "WORLD_SIZE" in os.environ:
        world_size = int(os.environ["WORLD_SIZE"])
    if rank < 0 or world_size < 1 or rank >= world_size:
        raise ValueError(
            f"init_process_group: rank {rank} and world_size {world_size} do not make a world "
            "(set RANK and WORLD_SIZE, or pass rank= and world_size=)"
        )
    if world_size > 1 and not mpi.under_process_manager():
        raise RuntimeError(
            f"init_process_group: rank {rank} of world_size {world_size} was not started by "
            "MPI's process manager; start the program with python -m tinyattn.distributed.run "
            "(torchrun's flags), or each rank with mpiexec -n 1"
        )
    timeout = timeout or DEFAULT_TIMEOUT
    host, port = rendezvous.address(init_method) if world_size > 1 else ("", 0)

    def exchange(value: str | None) -> str:
        seconds = timeout.total_seconds()
        return rendezvous.exchange(host, port, rank, world_size, value, seconds)

    engine = mpi.MpiEngine.join(rank, world_size, exchange)
    STATE.world = ProcessGroup(backend, engine, list(range(world_size)), timeout)


def destroy(group: ProcessGroup | None = None) -> None:
    """Free `group`'s communicators (the default group's, and end the world, when None)."""
    target = group or STATE.world
    if target is None:
        raise ValueError("destroy_process_group: no process group has been initialized")
    target.host.close()
    if target.device_engine is not None:
        target.device_engine.close()
    if group is None or group is STATE.world:
        STATE.world = None


def world(call: str) -> ProcessGroup:
    """The default group, or the error PyTorch raises before init_process_group."""
    if STATE.world is None:
        raise ValueError(
            f"{call}: Default process group has not been initialized, please make sure to call "
            "init_process_group."
        )
    return STATE.world


def resolve(group: ProcessGroup | None, call: str) -> ProcessGroup:
    return world(call) if group is None else group


def new(ranks: list[int] | None, timeout: timedelta | None, backend: str | None):
    """A group of `ranks` (every rank of the world calls this, as in PyTorch); on a rank
    outside it, `NON_GROUP_MEMBER`."""
    parent = world("new_group")
    members = sorted(set(range(parent.size()) if ranks is None else ranks))
    if any(r < 0 or r >= parent.size() for r in members):
        raise ValueError(f"new_group: ranks {members} must lie in [0, {parent.size() - 1}]")
    engine = parent.host.subgroup(members)
    if engine is None:
        return NON_GROUP_MEMBER
    return ProcessGroup(backend or parent.backend_name, engine, members, timeout or parent.timeout)


class _NonGroupMember:
    def __repr__(self) -> str:
        return "NON_GROUP_MEMBER"


NON_GROUP_MEMBER = _NonGroupMember()
