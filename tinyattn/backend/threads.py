"""The CPU thread pool: PyTorch's ``set_num_threads`` / ``get_num_threads`` for NumPy's BLAS.

tinyattn's CPU ops run on NumPy, whose matrix products use the BLAS library's thread pool
(OpenBLAS, MKL, ...); that pool is the one these functions size. They go through threadpoolctl
(the optional ``threads`` extra: ``pip install tinyattn[threads]``), which finds the loaded BLAS
and calls its own setter. Nothing here runs at import: the host program's settings change only
when it calls `set_num_threads`, as with PyTorch.
"""

from __future__ import annotations

import os
import warnings

# The count the last `set_num_threads` asked for, reported by `get_num_threads` when
# threadpoolctl is missing (the BLAS cannot be asked then).
_requested: list[int] = []


def _threadpoolctl():
    try:
        import threadpoolctl  # noqa: PLC0415  (optional; imported on first use)
    except ImportError:
        return None
    return threadpoolctl


def set_num_threads(num: int) -> None:
    """Use `num` threads in NumPy's BLAS from now on (matrix products, ``einsum``), as
    ``torch.set_num_threads`` sizes PyTorch's intra-op pool. Without threadpoolctl the pool
    cannot be reached once NumPy is loaded: a RuntimeWarning says so, and nothing changes
    (set ``OMP_NUM_THREADS`` before Python starts instead)."""
    if isinstance(num, bool) or not isinstance(num, int) or num <= 0:
        raise RuntimeError(f"set_num_threads expects a positive integer, got {num!r}")
    _requested[:] = [num]
    threadpoolctl = _threadpoolctl()
    if threadpoolctl is None:
        warnings.warn(
            f"set_num_threads({num}): NumPy's BLAS thread pool is unchanged, because "
            "threadpoolctl is not installed (pip install tinyattn[threads]); set "
            "OMP_NUM_THREADS before Python starts instead",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    # Not used as a context manager: the limit stays, as torch.set_num_threads's does.
    threadpoolctl.threadpool_limits(limits=num, user_api="blas")


def get_num_threads() -> int:
    """The threads NumPy's BLAS uses (the largest pool, if several BLAS libraries are loaded).
    Without threadpoolctl: the last `set_num_threads` count, else ``OMP_NUM_THREADS``, else the
    CPU count (what OpenBLAS and MKL start with)."""
    threadpoolctl = _threadpoolctl()
    if threadpoolctl is not None:
        blas = [
            p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"
        ]
        if blas:
            return max(blas)
    if _requested:
        return _requested[0]
    configured = os.environ.get("OMP_NUM_THREADS", "")
    return int(configured) if configured.isdigit() and int(configured) > 0 else os.cpu_count() or 1
