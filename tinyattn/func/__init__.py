"""Functional transforms: PyTorch's ``torch.func``, composable.

- `vmap`: a function of one sample run once on a batch (`vmap`, `batching`).
- `grad`, `grad_and_value`, `vjp`: reverse mode, on the engine (`transforms`).
- `jvp`: forward mode, on dual tensors (``tinyattn.autograd.forward_ad``).
- `jacrev`, `jacfwd`, `hessian`: compositions of the above.
- `functional_call`, `stack_module_state`: a module run with other parameters (`modules`).

Sits above the tensor layer and `nn`, and imports them.
"""

from __future__ import annotations

from .modules import functional_call, stack_module_state
from .transforms import grad, grad_and_value, hessian, jacfwd, jacrev, jvp, vjp
from .vmap import vmap

__all__ = [
    "functional_call",
    "grad",
    "grad_and_value",
    "hessian",
    "jacfwd",
    "jacrev",
    "jvp",
    "stack_module_state",
    "vjp",
    "vmap",
]
