"""The launcher: PyTorch's ``torchrun`` flags, ``python -m tinyattn.distributed.run``.

Imports the standard library only (it never imports tinyattn's tensors). On each node it starts
``--nproc_per_node`` copies of the program, each with PyTorch's variables: ``RANK`` (node_rank *
nproc_per_node + local rank), ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT``. Each copy runs under its own ``mpiexec -n 1`` (MPICH's
process manager), which the MPI engine needs to tell the processes apart.

When a rank exits with an error, the launcher ends the others (SIGTERM, then SIGKILL after a
grace period) and exits with that rank's exit code; the rank's traceback is on stderr, and the
launcher's last line names the rank. Several nodes: run the launcher on each with the same
``--nnodes``, ``--master_addr`` and ``--master_port`` and its own ``--node_rank``; a rank
that fails on another node ends the job here when the collectives' timeout passes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

GRACE_SECONDS = 5.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tinyattn-run", description="Start a data-parallel program, as torchrun does."
    )
    flag = parser.add_argument
    flag("--standalone", action="store_true", help="one node; pick a free master port")
    flag("--nnodes", "--nnodes", type=int, default=1, help="number of nodes (a fixed count)")
    flag("--nproc_per_node", "--nproc-per-node", type=_nproc, default=1, help="ranks per node")
    flag("--node_rank", "--node-rank", type=int, default=0, help="this node's number")
    flag("--master_addr", "--master-addr", default="127.0.0.1", help="rank 0's host")
    flag("--master_port", "--master-port", type=int, default=29500, help="rank 0's port")
    flag("--max_restarts", "--max-restarts", type=int, default=0, help="only 0 is supported")
    flag("-m", "--module", action="store_true", help="run the program as python -m would")
    flag("--no_python", "--no-python", action="store_true", help="run the program itself")
    flag("training_script", help="the program (or module with -m)")
    flag("training_script_args", nargs=argparse.REMAINDER)
    return parser


def _nproc(value: str) -> int:
    if value in ("cpu", "auto"):
        return os.cpu_count() or 1
    return int(value)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _mpiexec() -> str | None:
    """MPICH's mpiexec: beside this Python (the wheel puts it there), else on PATH."""
    beside = Path(sys.executable).with_name("mpiexec")
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def rank_environment(args: argparse.Namespace, local_rank: int) -> dict[str, str]:
    """The variables rank `local_rank` of this node starts with (torchrun's names)."""
    world_size = args.nnodes * args.nproc_per_node
    env = dict(os.environ)
    env.update(
        RANK=str(args.node_rank * args.nproc_per_node + local_rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(args.nproc_per_node),
        GROUP_RANK=str(args.node_rank),
        MASTER_ADDR=args.master_addr,
        MASTER_PORT=str(args.master_port),
    )
    if args.nproc_per_node > 1:  # as torchrun: one thread per rank unless the user chose
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _command(args: argparse.Namespace) -> list[str]:
    if args.no_python:
        program = [args.training_script]
    elif args.module:
        program = [sys.executable, "-u", "-m", args.training_script]
    else:
        program = [sys.executable, "-u", args.training_script]
    mpiexec = _mpiexec()
    wrapper = [mpiexec, "-n", "1"] if mpiexec is not None else []
    return wrapper + program + list(args.training_script_args)


def _end(processes: list[subprocess.Popen]) -> None:
    """SIGTERM every running rank's process group; SIGKILL what is left after the grace."""
    for process in processes:
        if process.poll() is None:
            _signal(process, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    for process in processes:
        try:
            process.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            _signal(process, signal.SIGKILL)
            process.wait()


def _signal(process: subprocess.Popen, number: int) -> None:
    try:
        os.killpg(process.pid, number)
    except ProcessLookupError:
        pass


def _watch(processes: list[subprocess.Popen], first_rank: int) -> int:
    """Wait for every rank; on the first failure end the others. Returns the exit code."""
    running = set(range(len(processes)))
    while running:
        for local_rank in sorted(running):
            code = processes[local_rank].poll()
            if code is None:
                continue
            running.discard(local_rank)
            if code != 0:
                _end(processes)
                ended = [r + first_rank for r in sorted(running)]
                print(
                    f"tinyattn.distributed.run: rank {first_rank + local_rank} (local rank "
                    f"{local_rank}) failed with exit code {code}; ended ranks {ended}",
                    file=sys.stderr,
                )
                return code if code > 0 else 128 - code
        time.sleep(0.05)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Start the ranks of this node, wait for them, and return the job's exit code."""
    args = _parser().parse_args(argv)
    if args.max_restarts:
        raise SystemExit("tinyattn.distributed.run: --max_restarts must be 0 (no restarts)")
    if args.standalone:
        args.nnodes, args.node_rank, args.master_addr = 1, 0, "127.0.0.1"
        args.master_port = _free_port()
    if not 0 <= args.node_rank < args.nnodes:
        raise SystemExit(f"tinyattn.distributed.run: --node_rank {args.node_rank} of {args.nnodes}")
    command = _command(args)
    first_rank = args.node_rank * args.nproc_per_node
    processes = [
        subprocess.Popen(command, env=rank_environment(args, r), start_new_session=True)
        for r in range(args.nproc_per_node)
    ]
    try:
        return _watch(processes, first_rank)
    except KeyboardInterrupt:
        _end(processes)
        return 130


if __name__ == "__main__":
    sys.exit(main())
