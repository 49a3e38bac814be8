"""PyTorch's ``DistributedSampler``: the share of a dataset's indices that one replica reads.

Imports `backend` (and `distributed` when the ranks are not given). With ``num_replicas``
and ``rank`` given, the indices are PyTorch's: the dataset's order (or a permutation seeded
by ``seed + epoch``), padded by repeating its head up to a multiple of ``num_replicas`` (or
cut to one with ``drop_last``), then every ``num_replicas``-th index from ``rank``. The
shuffled order comes from NumPy's generator, so it differs from PyTorch's. Without them,
they come from the default process group (``tinyattn.distributed``), and the constructor
raises as PyTorch's does before ``init_process_group``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from ... import backend
from .sampler import Sampler


class DistributedSampler(Sampler):
    """Indices ``rank, rank + num_replicas, ...`` of the (shuffled, padded) index list.

    Shapes: ``len(sampler) == ceil(len(dataset) / num_replicas)``, or with ``drop_last`` and an
    uneven split ``ceil((len(dataset) - num_replicas) / num_replicas)``."""

    def __init__(
        self,
        dataset: Any,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if num_replicas is None or rank is None:
            from ... import distributed  # noqa: PLC0415  (loads the process-group layer on use)

            if not distributed.is_initialized():
                raise ValueError(
                    "DistributedSampler: num_replicas and rank default to the process group's, "
                    "and no process group has been initialized; call init_process_group first "
                    "or pass num_replicas= and rank="
                )
            num_replicas = distributed.get_world_size() if num_replicas is None else num_replicas
            rank = distributed.get_rank() if rank is None else rank
        if rank >= num_replicas or rank < 0:
            raise ValueError(
                f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]"
            )
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.epoch, self.drop_last, self.shuffle, self.seed = 0, drop_last, shuffle, seed
        if drop_last and len(dataset) % num_replicas != 0:
            # Cut the tail so that every replica gets the same count without padding.
            self.num_samples = math.ceil((len(dataset) - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(len(dataset) / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def _ordered_indices(self) -> list[int]:
        if self.shuffle:
            # Seeded by seed + epoch alone, so that every replica draws the same permutation.
            return backend.make_rng(self.seed + self.epoch).permutation(len(self.dataset)).tolist()
        return list(range(len(self.dataset)))

    def __iter__(self) -> Iterator[int]:
        indices = self._ordered_indices()
        if self.drop_last:
            indices = indices[: self.total_size]
        else:
            padding = self.total_size - len(indices)
            indices += (indices * math.ceil(padding / max(len(indices), 1)))[:padding]
        return iter(indices[self.rank : self.total_size : self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use the permutation of `epoch` from the next iteration on (shuffle only)."""
        self.epoch = epoch


__all__ = ["DistributedSampler"]
