"""PyTorch's ``torch.distributed``: process groups and collectives for data-parallel training.

The public face: every name here means what PyTorch's does. The work is done by an established
collective engine, never by tinyattn's own transport:

- ``backend="gloo"`` (and ``"mpi"``) runs on MPI: MPICH through mpi4py, on host (CPU) memory;
- ``backend="nccl"`` runs NCCL through CuPy for tensors on NVIDIA GPUs, and MPI for host
  tensors and Python objects.

The engine is an optional extra (``pip install 'tinyattn[distributed]'``); ``is_available()``
says whether it is installed, and ``import tinyattn`` never imports it. Programs start under
the launcher, ``python -m tinyattn.distributed.run`` (torchrun's flags), which sets ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` for ``init_process_group()``.

Layout: `group` (process groups, work handles, init), `collectives` (the calls on tensors),
`rendezvous` (how ranks meet), `mpi` (the CPU engine), `run` (the launcher); the NCCL engine is
``tinyattn.backend.nccl``.
"""

from __future__ import annotations

from datetime import timedelta

from . import group as _group
from . import mpi as _mpi
from .collectives import (
    ReduceOp,
    all_gather,
    all_gather_into_tensor,
    all_gather_object,
    all_reduce,
    barrier,
    broadcast,
    broadcast_object_list,
    gather,
    gather_object,
    irecv,
    isend,
    recv,
    reduce,
    reduce_scatter_tensor,
    scatter,
    scatter_object_list,
    send,
)
from .group import NON_GROUP_MEMBER, DistBackendError, DistError, ProcessGroup, Work


def is_available() -> bool:
    """Whether the distributed engine (mpi4py, with an MPI library) is installed."""
    return _mpi.importable()


def is_mpi_available() -> bool:
    return _mpi.importable()


def is_gloo_available() -> bool:
    """True where the CPU engine is installed: ``"gloo"`` runs on MPI in tinyattn."""
    return _mpi.importable()


def is_nccl_available() -> bool:
    """Whether CuPy with NCCL is installed (a GPU is needed to use it)."""
    from ..backend import nccl  # noqa: PLC0415  (imports CuPy only when asked)

    return nccl.available()


def is_initialized() -> bool:
    """Whether init_process_group has made the default group (and it is not destroyed)."""
    return _group.STATE.world is not None


def init_process_group(
    backend: str | None = None,
    init_method: str | None = None,
    timeout: timedelta | None = None,
    world_size: int = -1,
    rank: int = -1,
    store: object = None,
    group_name: str = "",
    pg_options: object = None,
    device_id: object = None,
) -> None:
    """Join this process to the world of `world_size` ranks as `rank` (from ``RANK`` and
    ``WORLD_SIZE`` by default) and make the default group.

    `init_method` is ``"env://"`` (``MASTER_ADDR``/``MASTER_PORT``, the default) or
    ``"tcp://host:port"``. `timeout` (10 minutes by default) bounds the rendezvous and every
    wait on a collective: past it the call raises DistBackendError instead of hanging."""
    if store is not None:
        raise NotImplementedError(
            "init_process_group: store= is not supported by tinyattn; pass init_method="
        )
    _group.init(backend, init_method, rank, world_size, timeout)


def destroy_process_group(group: ProcessGroup | None = None) -> None:
    """Free `group` (the default group and with it the world, when None)."""
    _group.destroy(group)


def get_rank(group: ProcessGroup | None = None) -> int:
    """This process's rank in `group` (the default group when None); -1 outside it."""
    if group is NON_GROUP_MEMBER:
        return -1
    return _group.resolve(group, "get_rank").rank()


def get_world_size(group: ProcessGroup | None = None) -> int:
    """How many ranks `group` has (the default group when None); -1 outside it."""
    if group is NON_GROUP_MEMBER:
        return -1
    return _group.resolve(group, "get_world_size").size()


def get_backend(group: ProcessGroup | None = None) -> str:
    """The backend name the group was made with: ``"gloo"``, ``"nccl"`` or ``"mpi"``."""
    return _group.resolve(group, "get_backend").backend_name


def new_group(
    ranks: list[int] | None = None,
    timeout: timedelta | None = None,
    backend: str | None = None,
    pg_options: object = None,
    use_local_synchronization: bool = False,
) -> ProcessGroup | object:
    """A group of `ranks` (all of the world's when None). Every rank of the world must call
    it; a rank outside `ranks` gets ``GroupMember.NON_GROUP_MEMBER``."""
    return _group.new(ranks, timeout, backend)


def get_process_group_ranks(group: ProcessGroup) -> list[int]:
    """The global ranks of `group`'s members, in group-rank order."""
    return list(_group.resolve(group, "get_process_group_ranks").ranks)


class _WorldProxy:
    """``group.WORLD``: the default group (None before init_process_group), as in PyTorch."""

    @property
    def WORLD(self) -> ProcessGroup | None:  # noqa: N802  (PyTorch's name)
        return _group.STATE.world


group = _WorldProxy()


class _GroupMember(_WorldProxy):
    """``GroupMember.WORLD`` and ``GroupMember.NON_GROUP_MEMBER``, as PyTorch's."""

    NON_GROUP_MEMBER = NON_GROUP_MEMBER


GroupMember = _GroupMember()

__all__ = [
    "DistBackendError",
    "DistError",
    "GroupMember",
    "ProcessGroup",
    "ReduceOp",
    "Work",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_reduce",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "destroy_process_group",
    "gather",
    "gather_object",
    "get_backend",
    "get_process_group_ranks",
    "get_rank",
    "get_world_size",
    "group",
    "init_process_group",
    "irecv",
    "is_available",
    "is_gloo_available",
    "is_initialized",
    "is_mpi_available",
    "is_nccl_available",
    "isend",
    "new_group",
    "recv",
    "reduce",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
    "send",
]
