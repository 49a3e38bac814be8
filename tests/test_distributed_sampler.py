"""DistributedSampler against PyTorch's index lists; tinyattn.multiprocessing refuses clearly."""

from __future__ import annotations

import itertools

import pytest

import tinyattn.multiprocessing as mp
from tinyattn.utils.data.distributed import DistributedSampler

CASES = list(itertools.product([0, 1, 5, 7, 8, 10], [1, 2, 3, 4], [False, True]))


@pytest.mark.parametrize("length, replicas, drop_last", CASES)
def test_unshuffled_indices_equal_torch(length, replicas, drop_last):
    torch_dist = pytest.importorskip("torch.utils.data.distributed")
    dataset = list(range(length))
    for rank in range(replicas):
        ours = DistributedSampler(dataset, replicas, rank, shuffle=False, drop_last=drop_last)
        theirs = torch_dist.DistributedSampler(
            dataset, replicas, rank, shuffle=False, drop_last=drop_last
        )
        assert len(ours) == len(theirs)
        assert list(ours) == list(theirs), (length, replicas, rank, drop_last)


@pytest.mark.parametrize("length, replicas, drop_last", CASES)
def test_shuffled_indices_pad_and_stride_one_permutation(length, replicas, drop_last):
    """Every replica reads a stride of the same seeded permutation, padded by its head."""
    shares = [
        list(DistributedSampler(range(length), replicas, rank, seed=3, drop_last=drop_last))
        for rank in range(replicas)
    ]
    joined = [share[i] for i in range(len(shares[0])) for share in shares]
    if length:
        permutation = joined[:length] if not drop_last else None
        if permutation is not None:
            assert sorted(permutation) == list(range(length))
            padding = len(joined) - length
            assert joined[length:] == (permutation * (padding // length + 1))[:padding]
        else:
            assert len(set(joined)) == len(joined) <= length
    assert all(len(share) == len(shares[0]) for share in shares)


def test_shuffle_depends_on_seed_plus_epoch_only():
    sampler = DistributedSampler(range(50), num_replicas=2, rank=1, seed=4)
    first = list(sampler)
    assert list(sampler) == first  # no hidden state between iterations
    sampler.set_epoch(1)
    assert list(sampler) != first
    assert list(sampler) == list(DistributedSampler(range(50), 2, 1, seed=5))
    assert list(DistributedSampler(range(50), 2, 0, seed=4)) != first


def test_without_a_process_group_it_fails_as_torch_does():
    torch_dist = pytest.importorskip("torch.utils.data.distributed")
    with pytest.raises(ValueError) as theirs:
        torch_dist.DistributedSampler(list(range(4)))
    with pytest.raises(ValueError, match="process group"):
        DistributedSampler(list(range(4)))
    assert "process group" in str(theirs.value)
    with pytest.raises(ValueError, match="Invalid rank 2"):
        DistributedSampler(range(4), num_replicas=2, rank=2)


def test_loader_reads_the_share_of_one_rank():
    from tinyattn.utils.data import DataLoader

    sampler = DistributedSampler(list(range(10)), num_replicas=3, rank=2, shuffle=False)
    batches = [batch.tolist() for batch in DataLoader(list(range(10)), 2, sampler=sampler)]
    assert batches == [[2, 5], [8, 1]]


@pytest.mark.parametrize("name", ["spawn", "start_processes", "Process", "Pool", "Queue"])
def test_multiprocessing_calls_name_themselves(name):
    with pytest.raises(NotImplementedError, match=f"torch.multiprocessing.{name}"):
        getattr(mp, name)(print, args=())


def test_multiprocessing_cpu_count_is_pythons():
    import multiprocessing

    assert mp.cpu_count() == multiprocessing.cpu_count()
