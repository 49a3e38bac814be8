"""tinyattn.utils.data.sampler: PyTorch's samplers, which yield dataset indices. Random ones
draw from tinyattn's seeded host RNG. Imports `backend` only."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ... import backend
from ...errors import TinyattnError


class Sampler:
    """Yields dataset indices; subclasses define ``__iter__`` (and ``__len__`` where known)."""

    def __iter__(self) -> Iterator[int]:
        raise NotImplementedError


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source: Any) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation of the indices (new each epoch), or with ``replacement=True``
    num_samples independent uniform draws; without replacement, num_samples beyond the
    dataset's length repeat whole permutations (PyTorch's rule)."""

    def __init__(
        self,
        data_source: Any,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: Any = None,
    ) -> None:
        if not isinstance(replacement, bool):
            raise TypeError(f"RandomSampler: replacement must be a bool, got {replacement!r}")
        if generator is not None:
            raise NotImplementedError(
                "RandomSampler: generator= is not supported; tinyattn samples from its one "
                "host RNG, seeded by ta.manual_seed"
            )
        if num_samples is not None and (
            isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples <= 0
        ):
            raise TinyattnError(
                f"RandomSampler: num_samples must be a positive int, got {num_samples!r}"
            )
        self.data_source, self.replacement = data_source, replacement
        self._num_samples = num_samples
        if self.num_samples <= 0:
            raise TinyattnError(
                f"RandomSampler: num_samples should be a positive integer, got {self.num_samples} "
                "(is the dataset empty?)"
            )

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n, rng = len(self.data_source), backend.host_rng()
        if self.replacement:
            # In chunks of 32, as PyTorch draws them: num_samples may be huge (minGPT's 1e10
            # makes the loader endless), and only the draws consumed are made.
            left = self.num_samples
            while left > 0:
                yield from rng.integers(0, n, size=min(32, left)).tolist()
                left -= 32
            return
        for _ in range(self.num_samples // n):
            yield from rng.permutation(n).tolist()
        yield from rng.permutation(n).tolist()[: self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order."""

    def __init__(self, indices: Sequence[int], generator: Any = None) -> None:
        self.indices = list(indices)

    def __iter__(self) -> Iterator[int]:
        for position in backend.host_rng().permutation(len(self.indices)).tolist():
            yield self.indices[position]

    def __len__(self) -> int:
        return len(self.indices)


class BatchSampler(Sampler):
    """Groups the indices of `sampler` into lists of batch_size (the last one shorter, or
    dropped with drop_last=True)."""

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise TinyattnError(
                f"BatchSampler: batch_size must be a positive int, got {batch_size!r}"
            )
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


__all__ = [
    "BatchSampler",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "SubsetRandomSampler",
]
