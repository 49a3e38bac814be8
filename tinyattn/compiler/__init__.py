"""The compiler: ``ta.compile`` records a step's array work once and replays it.

One package, apart from the engine it watches (the layer above `tensor`; nothing below imports
it, and ``import tinyattn`` does not load it):

- `step`: ``compile(fn)``, the compiled callable: records a step twice, checks the recordings
  agree, replays from then on, and verifies against eager when asked.
- `record`: the `Recorder`, the engine's listener while a step is recorded: every op's forward,
  every backward rule, random draw, in-place write and ``.grad`` set becomes a tape entry.
- `guards`: the Python values the recorded code read (by value or identity), checked before a
  replay.
- `graph`: a compiled model called with backward outside the step: forward and backward as one
  node of the caller's graph.
- `replay`: the tape, its shared buffers written in place, and CUDA graphs on a GPU.
- `replay_kernels`: the out= kernels each recorded op is lowered to.
- `fusion`: runs of elementwise and row-wise items as one kernel, described as plain data;
  `fused_runs` calls the kernels, `codegen_cpu` (Numba, with `numba_math`) and `codegen_gpu`
  (CuPy source) generate them from the description.

What the compiler must see (a side effect, a random draw, an in-place write, a Python value read
on the host) is declared to the engine in one place: the ``note_*`` and ``replayed_call``
functions of `tinyattn.autograd`.
"""

from .record import CompileError
from .step import compile  # noqa: A004  (PyTorch's name, ta.compile)

__all__ = ["CompileError", "compile"]
