"""Functional transforms: PyTorch's ``torch.func``, composable.

- `vmap`: a function of one sample run once on a batch (`vmap`, `batching`).
- `grad`, `grad_and_value`, `vjp`: reverse mode, on the engine (`transforms`).
- `jvp`: forward mode, on dual tensors (``tinyattn.autograd.forward_ad``).
- `jacrev`, `jacfwd`, `hessian`: compositions of the above.
- `functional_call`, `stack_module_state`: a module run with other parameters (`modules`).

Sits above the tensor layer and `nn`, and imports them.
"""

from __future__ import annotations

from .vmap import vmap

__all__ = ["vmap"]
