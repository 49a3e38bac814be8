"""tinyattn.distributed on the CPU engine (MPI through mpi4py), run as real processes under the
launcher: every collective against its definition on 2 and 3 ranks, torchrun's variables, a
rank that dies or hangs ending the job, two "nodes" on one machine. Skipped, saying why, when
the engine (the ``distributed`` extra) is not installed."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tinyattn.distributed as dist

WORKERS = Path(__file__).parent / "distributed_workers"
needs_engine = pytest.mark.skipif(
    not dist.is_available(),
    reason="the distributed engine is not installed (pip install 'tinyattn[distributed]')",
)


def launch(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """python -m tinyattn.distributed.run ARGS, its output captured."""
    command = [sys.executable, "-m", "tinyattn.distributed.run", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@needs_engine
@pytest.mark.parametrize("ranks", [2, 3])
def test_every_collective_matches_its_definition(ranks):
    done = launch("--standalone", f"--nproc_per_node={ranks}", str(WORKERS / "collectives.py"))
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in range(ranks):
        assert f"rank {rank} of {ranks}: every collective matches its definition" in done.stdout


@needs_engine
def test_launcher_sets_torchruns_variables(tmp_path):
    program = tmp_path / "env.py"
    names = "RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT".split()
    program.write_text(f"import os; print(*[os.environ[n] for n in {names}], flush=True)\n")
    port = free_port()
    done = launch("--nproc_per_node=2", f"--master_port={port}", str(program))
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [
        f"0 0 2 2 127.0.0.1 {port}",
        f"1 1 2 2 127.0.0.1 {port}",
    ]


@needs_engine
def test_a_rank_that_dies_ends_the_job_with_its_error():
    started = time.monotonic()
    done = launch("--standalone", "--nproc_per_node=2", str(WORKERS / "failing.py"), "die")
    assert done.returncode == 1
    assert "ValueError: rank 1 fails on purpose" in done.stderr
    assert "rank 1 (local rank 1) failed with exit code 1; ended ranks [0]" in done.stderr
    assert "unreachable" not in done.stdout
    assert time.monotonic() - started < 20


@pytest.mark.slow  # waits out a timeout
@needs_engine
def test_a_rank_that_hangs_times_the_others_out():
    started = time.monotonic()
    done = launch("--standalone", "--nproc_per_node=2", str(WORKERS / "failing.py"), "hang")
    assert done.returncode == 1
    assert "DistBackendError: all_reduce: rank 0 of world size 2 timed out after 3 s" in done.stderr
    assert "rank 0 (local rank 0) failed" in done.stderr
    assert time.monotonic() - started < 20


@needs_engine
def test_two_nodes_on_one_machine_make_one_world():
    port = free_port()
    common = ["--nnodes=2", "--nproc_per_node=1", "--master_addr=127.0.0.1"]
    common += [f"--master_port={port}"]
    worker = str(WORKERS / "collectives.py")
    command = [sys.executable, "-m", "tinyattn.distributed.run", *common]
    nodes = [
        subprocess.Popen(
            [*command, f"--node_rank={node}", worker], stdout=subprocess.PIPE, text=True
        )
        for node in (0, 1)
    ]
    outputs = [node.communicate(timeout=60)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0]
    assert "rank 0 of 2" in outputs[0] and "rank 1 of 2" in outputs[1]


def test_calls_before_init_raise_pytorchs_error():
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        dist.get_rank()
    with pytest.raises(ValueError, match="init_process_group"):
        dist.all_reduce(__import__("tinyattn").ones(2))


@needs_engine
def test_one_process_world_without_a_launcher(monkeypatch):
    """world_size 1 needs no process manager: the collectives are identities."""
    import tinyattn as ta

    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        x = ta.tensor([1.0, 2.0])
        dist.all_reduce(x, dist.ReduceOp.AVG)
        assert x.tolist() == [1.0, 2.0] and dist.get_world_size() == 1
        with pytest.raises(ValueError, match="twice"):
            dist.init_process_group("gloo", rank=0, world_size=1)
    finally:
        dist.destroy_process_group()


def test_importing_tinyattn_does_not_import_mpi4py():
    code = "import sys, tinyattn, tinyattn.distributed; print('mpi4py' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr
