"""Where the ranks find each other: PyTorch's ``env://`` and ``tcp://`` init methods.

Imports the standard library only. Rank 0 listens on the master's address and port; every
other rank connects, says its rank, and receives one line: the name of rank 0's MPI port
(or of whatever the engine needs to meet). This is the only traffic outside the engine, a
few bytes once, as PyTorch's TCPStore carries its rendezvous; each step waits at most
`timeout` seconds, so a rank that never comes ends the others' start with an error.
"""

from __future__ import annotations

import os
import socket
import time
from urllib.parse import urlparse


def address(init_method: str | None) -> tuple[str, int]:
    """(host, port) of the master from `init_method` (``env://`` or ``tcp://host:port``)."""
    if init_method is None or init_method == "env://":
        host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if host is None or port is None:
            missing = "MASTER_ADDR" if host is None else "MASTER_PORT"
            raise ValueError(
                f"init_process_group: environment variable {missing} expected, but not set "
                "(start the program with python -m tinyattn.distributed.run, or set "
                "MASTER_ADDR and MASTER_PORT)"
            )
        return host, int(port)
    parsed = urlparse(init_method)
    if parsed.scheme != "tcp" or parsed.hostname is None or parsed.port is None:
        raise ValueError(
            f"init_process_group: init_method={init_method!r} is not supported; use 'env://' "
            "or 'tcp://host:port'"
        )
    return parsed.hostname, parsed.port


def exchange(host: str, port: int, rank: int, world_size: int, value: str | None, timeout: float):
    """Rank 0's `value` on every rank: rank 0 sends it once all others have connected."""
    deadline = time.monotonic() + timeout
    if rank == 0:
        return _serve(host, port, world_size, value, deadline)
    return _ask(host, port, rank, deadline)


def _serve(host: str, port: int, world_size: int, value: str, deadline: float) -> str:
    with socket.create_server((host, port), reuse_port=False) as server:
        peers = []
        try:
            while len(peers) < world_size - 1:
                server.settimeout(max(deadline - time.monotonic(), 0.001))
                try:
                    peer, _ = server.accept()
                except TimeoutError:
                    raise _timed_out(0, world_size, f"{len(peers) + 1} of {world_size}") from None
                peers.append(peer)
            for peer in peers:
                peer.sendall(value.encode() + b"\n")
        finally:
            for peer in peers:
                peer.close()
    return value


def _ask(host: str, port: int, rank: int, deadline: float) -> str:
    while True:
        try:
            connection = socket.create_connection((host, port), timeout=1.0)
            break
        except OSError:  # rank 0 is not listening yet
            if time.monotonic() > deadline:
                raise _timed_out(rank, None, f"no answer from {host}:{port}") from None
            time.sleep(0.05)
    with connection:
        connection.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            line = connection.makefile("rb").readline()
        except TimeoutError:
            raise _timed_out(rank, None, "rank 0 never answered") from None
    if not line.endswith(b"\n"):
        raise RuntimeError(f"init_process_group: rank {rank}: rank 0 closed the rendezvous")
    return line.decode().rstrip("\n")


def _timed_out(rank: int, world_size: int | None, what: str) -> RuntimeError:
    size = "" if world_size is None else f" of world_size {world_size}"
    return RuntimeError(
        f"init_process_group: rank {rank}{size} timed out waiting for the other ranks ({what})"
    )
