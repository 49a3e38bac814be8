"""CUDA graphs for compiled steps: capture a replay's array work once, then launch it.

The backend layer's helper, kept in its own file: it imports nothing (the CuPy module is handed
in by `backend.graph_runner`, the only place that imports CuPy), so it can be read, and tested
against a stand-in for CuPy's stream and graph API, without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class CudaGraphs:
    """Captures a replay's array work into CUDA graphs and launches them (CuPy).

    Everything runs on one private stream (entered with ``with``), ordered after the work
    already queued on the caller's stream and before what the caller queues next. Arrays made
    while capturing come from a private memory pool that nothing else allocates from, so the
    addresses a graph was captured with stay its own.
    """

    def __init__(self, cupy: Any) -> None:
        self.cupy = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.pool = cupy.cuda.MemoryPool()
        self._outer: list[Any] = []

    def __enter__(self) -> CudaGraphs:
        outer = self.cupy.cuda.get_current_stream()
        self.stream.wait_event(outer.record())
        self._outer.append(outer)
        self.stream.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stream.__exit__(*exc)
        self._outer.pop().wait_event(self.stream.record())

    def capture(self, run: Callable[[], None]) -> Any:
        """Capture what `run` queues (nothing runs yet); raises if it does what a graph
        cannot hold (a copy from host memory, a synchronisation)."""
        with self.cupy.cuda.using_allocator(self.pool.malloc):
            self.stream.begin_capture()
            try:
                run()
            except BaseException:
                self.stream.end_capture()  # end the capture; the partial graph is dropped
                raise
            return self.stream.end_capture()

    def launch(self, graph: Any) -> None:
        graph.launch(self.stream)
