"""PyTorch's ``torch.backends``: the settings programs write (``allow_tf32``, ``benchmark``).

Imports nothing. tinyattn has no TF32 matmul switch and no cuDNN, so every flag here is stored
and read back but has no effect on what tinyattn computes: a program that sets
``torch.backends.cuda.matmul.allow_tf32 = True`` runs unchanged. ``mps.is_available()`` is
False: tinyattn has no Apple GPU backend.
"""

from . import cuda, cudnn, mps

__all__ = ["cuda", "cudnn", "mps"]
