"""tinyattn.utils.data: PyTorch's Dataset, TensorDataset, Subset, samplers and DataLoader.

A package laid out as PyTorch's ``torch.utils.data``: ``dataset``, ``sampler`` and
``dataloader`` (so ``from tinyattn.utils.data.dataloader import DataLoader`` works as
``from tinyattn.utils.data import DataLoader`` does). Everything runs in the calling process
(``num_workers > 0`` is refused). Shuffling and random sampling draw from tinyattn's seeded host
RNG (``ta.manual_seed``), so a seeded run repeats. Imports `backend` and `tensor` only.
"""

from .dataloader import DataLoader, default_collate, default_convert
from .dataset import (
    ConcatDataset,
    Dataset,
    IterableDataset,
    Subset,
    TensorDataset,
    random_split,
)
from .sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
)

__all__ = [
    "BatchSampler",
    "ConcatDataset",
    "DataLoader",
    "Dataset",
    "IterableDataset",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "Subset",
    "SubsetRandomSampler",
    "TensorDataset",
    "default_collate",
    "default_convert",
    "random_split",
]
