"""Autograd: the graph, the walk, and what watches it. ``tinyattn.autograd`` is PyTorch's
``torch.autograd``: its public names are in ``__all__``.

The package, in the order a learner reads it:

- `function`: the `Function` base class and ``apply``, which runs an op's forward and, in grad
  mode, records the node (the op's Function, holding its input Tensors).
- `engine`: `run_backward`, the iterative walk from the newest node to the oldest, and `grad`.
- `grad_mode`: grad mode and anomaly mode, per thread (``no_grad``, ``detect_anomaly``).
- `hooks`: tensor hooks, ``retain_grad``'s mark, post-accumulate-grad hooks.
- `saved_values`: version checks of saved values, and what a released node keeps.
- `torch_protocol`: custom Functions written in PyTorch's ``ctx`` protocol.
- `listeners`: the one seam for everything that watches the engine (``ta.compile``'s recorder,
  anomaly mode, the backward page): `apply` and the walk test it once each.
- `recording`: what ``ta.compile`` must see, declared in one place (its recorder, random draws,
  in-place writes).
- `inference_mode`: PyTorch's ``inference_mode``, here ``no_grad``.
- `forward_ad`: forward mode, dual tensors (``dual_level``, ``make_dual``, ``unpack_dual``),
  a listener that calls each op's ``jvp`` rule while a level is open.
- `gradcheck`: PyTorch's ``gradcheck`` and ``gradgradcheck`` signatures over the checker.
- `functional`: ``jacobian``, ``hessian``, ``vjp``, ``jvp``, ``hvp``, ``vhp`` (loaded on first use).

Imports `backend` and `errors` only; the tensor layer above wires itself in with one call each
(`function.use_tensor_class`, `function.use_view_refresher`).
"""

from __future__ import annotations

from typing import Any

from . import forward_ad

# What the layers above tinyattn's autograd use of it (the ops' rules, the tensor layer, the
# compiler): imported here by name, and not part of torch.autograd's namespace (``__all__``).
from .engine import default_root_grad as default_root_grad
from .engine import grad
from .engine import input_as_read as input_as_read
from .engine import run_backward as run_backward
from .function import Function
from .function import _next_seq as _next_seq
from .function import constants as constants
from .function import rules_on_arrays as rules_on_arrays
from .function import use_tensor_class as use_tensor_class
from .function import use_view_refresher as use_view_refresher
from .grad_mode import (
    AnomalyError,
    detect_anomaly,
    enable_grad,
    is_anomaly_enabled,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)

# The functions, as PyTorch's package binds them over their submodule's name (the submodule
# imports the checker, a layer above, only when called).
from .gradcheck import gradcheck, gradgradcheck
from .hooks import RETAIN_GRAD as RETAIN_GRAD
from .hooks import RemovableHandle as RemovableHandle
from .inference_mode import inference_mode
from .recording import active_recorder as active_recorder
from .recording import check_host_read as check_host_read
from .recording import check_python_write as check_python_write
from .recording import note_created as note_created
from .recording import note_grad_set as note_grad_set
from .recording import note_mode as note_mode
from .recording import note_store as note_store
from .recording import replayed_call as replayed_call
from .recording import set_recorder as set_recorder
from .saved_values import KEPT_CONSTANT_SIZE as KEPT_CONSTANT_SIZE
from .saved_values import ReleasedConstant as ReleasedConstant


def __getattr__(name: str) -> Any:
    """``tinyattn.autograd.functional``, imported on first use as PyTorch's namespace has it."""
    if name == "functional":
        import importlib

        return importlib.import_module(".functional", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def backward(
    tensors: Any,
    grad_tensors: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    inputs: Any = None,
) -> None:
    """``torch.autograd.backward``: ``t.backward(g)`` for each tensor and its gradient at once,
    in one walk, accumulating into the leaves' ``.grad`` (only `inputs`' when given)."""
    roots = list(tensors) if isinstance(tensors, list | tuple) else [tensors]
    given = grad_tensors if isinstance(grad_tensors, list | tuple) else [grad_tensors] * len(roots)
    if len(given) != len(roots):
        raise RuntimeError(
            f"backward: got {len(given)} gradients for {len(roots)} tensors; give one per tensor"
        )
    seeds = [default_root_grad(t, g, "backward") for t, g in zip(roots, given)]
    if inputs is None:
        run_backward(roots, seeds, retain_graph, create_graph)
        return
    inputs = list(inputs) if isinstance(inputs, list | tuple) else [inputs]
    found = run_backward(roots, seeds, retain_graph, create_graph, capture=set(inputs))
    for tensor in inputs:
        gradient = found.get(id(tensor))
        if gradient is not None:
            tensor.grad = gradient if tensor.grad is None else tensor.grad + gradient


__all__ = [
    "AnomalyError",
    "Function",
    "backward",
    "detect_anomaly",
    "enable_grad",
    "forward_ad",
    "functional",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "inference_mode",
    "is_anomaly_enabled",
    "is_grad_enabled",
    "no_grad",
    "set_grad_enabled",
]
