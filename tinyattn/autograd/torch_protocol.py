"""PyTorch's custom-Function protocol: a second door to the same graph node.

Below `autograd`, which calls it; imports only `backend` and `grad_mode`. tinyattn's own protocol
(``forward(self, *arrays)`` on arrays, ``backward(self, grad)`` with Tensor ops) is the teaching
form. A subclass of `Function` whose ``forward`` is a staticmethod follows PyTorch's instead::

    class MulConstant(ta.autograd.Function):
        @staticmethod
        def forward(ctx, x, c):  # Tensors in (and any other arguments), Tensors out
            ctx.c = c
            return x * c
        @staticmethod
        def backward(ctx, grad):  # one gradient per output
            return grad * ctx.c, None  # one per forward argument: None for a non-Tensor

``ctx`` is the node itself (the Function instance): ``save_for_backward``, ``saved_tensors``,
``needs_input_grad`` (one flag per forward argument) and ``mark_non_differentiable`` work as in
PyTorch. forward runs under no_grad, so its Tensor operations record nothing; apply records one
node whose inputs are the Tensor arguments, whatever forward computed inside. Its outputs share
the version counters of the Tensors forward returned, and an output that no gradient reached gets
a zero gradient (PyTorch's default). Only what forward saved is version-checked, as in PyTorch.
"""

from __future__ import annotations

import inspect
from typing import Any

from .. import backend
from .grad_mode import no_grad


class ContextMethods:
    """The methods PyTorch's protocol calls on ``ctx`` beyond those every Function has."""

    __slots__ = ()

    def mark_non_differentiable(self, *outputs: Any) -> None:
        """The given outputs of forward get no gradient and no history (an index, a mask);
        backward still receives a (zero) gradient for each of them."""
        self._non_differentiable = {id(t) for t in outputs}


def is_ctx_protocol(cls: type) -> bool:
    """Whether a Function subclass follows PyTorch's protocol: its forward is a staticmethod."""
    return isinstance(inspect.getattr_static(cls, "forward"), staticmethod)


def check_grad_reads(cls: type) -> None:
    """``grad_reads`` must give, for each input, a tuple of input positions and "output"."""
    reads = cls.grad_reads
    if reads is None:
        return
    for entry in reads if isinstance(reads, tuple) else (None,):
        if not isinstance(entry, tuple) or not all(
            v == "output" or (isinstance(v, int) and not isinstance(v, bool)) for v in entry
        ):
            raise TypeError(
                f"{cls.__name__}.grad_reads must be a tuple with, for each input, a tuple of "
                f"input positions and 'output'; got {reads!r}"
            )


def adopt(cls: type) -> None:
    """Prepare a PyTorch-protocol subclass: keep its static backward as ``_ctx_backward`` and
    give the engine the rule it calls, ``backward(self, *grads)``."""
    own = vars(cls).get("backward")
    if isinstance(own, staticmethod):
        cls._ctx_backward = own.__func__
    elif own is not None or not hasattr(cls, "_ctx_backward"):
        raise TypeError(
            f"{cls.__name__}: forward is a staticmethod (PyTorch's protocol), so backward must "
            "be one too: @staticmethod def backward(ctx, *grads)"
        )
    cls._ctx_protocol = True
    cls.backward_reads = ()  # only what forward saved is read, and saved_tensors checks it
    cls._reads_inputs = cls._reads_output = False
    cls.backward = _backward_rule


def run_forward(fn: Any, args: tuple, kwargs: dict) -> tuple[tuple, bool]:
    """Call the static forward with ``ctx=fn`` under no_grad: (its output Tensors, whether it
    returned a tuple). Sets ``fn.inputs`` to the Tensor arguments."""
    places, inputs = [], []
    for value in args:
        places.append(len(inputs) if _is_tensor(value) else None)
        if places[-1] is not None:
            inputs.append(value)
    fn.inputs, fn._arg_places, fn._non_differentiable = tuple(inputs), tuple(places), set()
    with no_grad():
        result = type(fn).forward(fn, *args, **kwargs)
    several = isinstance(result, tuple)
    outputs = result if several else (result,)
    for k, out in enumerate(outputs):
        if not _is_tensor(out):
            raise TypeError(
                f"{fn.name}.forward returned a {type(out).__name__} as output {k}; in PyTorch's "
                "protocol forward returns Tensors (or a tuple of them)"
            )
    return outputs, several


def constant_outputs(fn: Any, outputs: tuple) -> set[int]:
    """Positions of the outputs that get no gradient: marked, or not floating point."""
    return {
        k
        for k, out in enumerate(outputs)
        if id(out) in fn._non_differentiable
        or not backend.is_floating(backend.namespace(out.array), out.array.dtype)
    }


def _backward_rule(self: Any, *grads: Any) -> tuple:
    """The engine's rule: the static backward's results, one per forward argument, mapped to
    the node's inputs (the Tensor arguments)."""
    result = type(self)._ctx_backward(self, *grads)
    result = tuple(result) if isinstance(result, tuple | list) else (result,)
    places = self._arg_places
    extra = result[len(places) :]
    if len(result) < len(places) or any(g is not None for g in extra):
        raise RuntimeError(
            f"{self.name}.backward returned {len(result)} gradient(s) for {len(places)} "
            "forward argument(s): return one per argument (None for a non-Tensor)"
        )
    input_grads: list = [None] * len(self.inputs)
    for position, (grad, place) in enumerate(zip(result, places)):
        if place is not None:
            input_grads[place] = grad
        elif grad is not None:
            raise RuntimeError(
                f"{self.name}.backward returned a gradient for forward argument {position}, "
                "which is not a Tensor: return None there"
            )
    return tuple(input_grads)


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "_ctx") and hasattr(value, "array")
