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
PyTorch. As in PyTorch, forward may instead leave ctx out (``forward(x, c)``) beside a static
``setup_context(ctx, inputs, output)``; a static ``jvp(ctx, *tangents)`` (one tangent per
forward argument, zeros for a Tensor without one, None for a non-Tensor; one per output back)
gives forward mode, reading what ``ctx.save_for_forward`` kept as ``ctx.saved_tensors``; a
Function may have forward and jvp and no backward, which raises only when called. vmap support
is declared as in PyTorch (``generate_vmap_rule = True`` or a static ``vmap``) and checked by
`vmap_support`. forward runs under no_grad (and without forward AD), so its Tensor operations
record nothing; apply records one node whose inputs are the Tensor arguments, whatever forward
computed inside. Its outputs share the version counters of the Tensors forward returned, and an
output that no gradient reached gets a zero gradient (PyTorch's default). Only what forward
saved is version-checked, as in PyTorch.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

from .. import backend
from . import listeners
from .grad_mode import no_grad


class ContextMethods:
    """The methods PyTorch's protocol calls on ``ctx`` beyond those every Function has."""

    __slots__ = ()

    def mark_non_differentiable(self, *outputs: Any) -> None:
        """The given outputs of forward get no gradient and no history (an index, a mask);
        backward still receives a (zero) gradient for each of them."""
        self._non_differentiable = {id(t) for t in outputs}

    def save_for_forward(self, *tensors: Any) -> None:
        """Keep tensors for ``jvp``, which reads them as ``ctx.saved_tensors`` (PyTorch's)."""
        self._saved_forward = tensors
        self._saved_forward_versions = tuple(
            t._version_counter[0] if hasattr(t, "_version_counter") else None for t in tensors
        )

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        """PyTorch's second style: forward without ctx, this fills ctx from its arguments
        (`inputs`, a tuple) and its result (`output`)."""
        raise NotImplementedError("setup_context is not implemented.")


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
    """Prepare a PyTorch-protocol subclass: keep its static backward (or vjp) and jvp as
    ``_ctx_backward`` and ``_ctx_jvp``, and give the engine the rules it calls,
    ``backward(self, *grads)`` and ``jvp(self, *tangents)``."""
    own = vars(cls).get("backward", vars(cls).get("vjp"))
    if isinstance(own, staticmethod):
        cls._ctx_backward = own.__func__
    elif own is not None:
        raise TypeError(
            f"{cls.__name__}: forward is a staticmethod (PyTorch's protocol), so backward must "
            "be one too: @staticmethod def backward(ctx, *grads)"
        )
    elif not hasattr(cls, "_ctx_backward"):  # forward mode only: backward raises when called
        cls._ctx_backward = _no_backward
    own_jvp = vars(cls).get("jvp")
    if isinstance(own_jvp, staticmethod):
        cls._ctx_jvp = own_jvp.__func__
    elif own_jvp is not None:
        raise TypeError(
            f"{cls.__name__}: forward is a staticmethod (PyTorch's protocol), so jvp must be "
            "one too: @staticmethod def jvp(ctx, *tangents)"
        )
    _check_vmap_declaration(cls)
    cls._separate_context = cls.setup_context is not ContextMethods.setup_context
    cls._ctx_protocol = True
    cls.jvp = _jvp_rule
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
    cls = type(fn)
    with no_grad(), _without_forward_mode():
        if cls._separate_context:  # PyTorch's setup_context style: forward takes no ctx
            result = cls.forward(*args, **kwargs)
            cls.setup_context(fn, args, result)
        else:
            result = cls.forward(fn, *args, **kwargs)
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


def _no_backward(ctx: Any, *grads: Any) -> Any:
    raise NotImplementedError(
        f"{ctx.name}: you must implement either the backward or vjp method for your custom "
        "autograd.Function to use it with backward mode AD."
    )


def _without_forward_mode() -> Any:
    """PyTorch runs a custom forward without forward AD: its jvp gives the output's tangent."""
    if listeners.active is None:
        return contextlib.nullcontext()
    from . import forward_ad  # forward_ad imports function, which imports this module

    return forward_ad.paused()


def _jvp_rule(self: Any, *tangents: Any) -> Any:
    """forward mode's rule: the static jvp, given one tangent per forward argument (zeros for a
    Tensor without one, None for a non-Tensor, as PyTorch gives them) and, as
    ``ctx.saved_tensors``, what forward kept with ``save_for_forward``."""
    jvp = getattr(type(self), "_ctx_jvp", None)
    if jvp is None:
        raise NotImplementedError(
            f"{self.name}: you must implement the jvp function for custom autograd.Function "
            "to use it with forward mode AD."
        )
    given = []
    for place in self._arg_places:
        tangent = None if place is None else tangents[place]
        if place is not None and tangent is None:
            primal = self.inputs[place]
            xp = backend.namespace(primal.array)
            tangent = primal.constant(xp.zeros_like(primal.array))
        given.append(tangent)
    saved = getattr(self, "_saved", None), getattr(self, "_saved_versions", None)
    self._saved = getattr(self, "_saved_forward", None)
    self._saved_versions = getattr(self, "_saved_forward_versions", None)
    try:
        result = jvp(self, *given)
    finally:
        self._saved, self._saved_versions = saved
    return _without_constants(self, result)


def _without_constants(fn: Any, result: Any) -> Any:
    """The jvp's tangents, None for the outputs forward marked non-differentiable."""
    constant = getattr(fn, "_constant_outputs", ())
    if not isinstance(result, tuple | list):
        return None if 0 in constant else result
    result = tuple(result)
    if len(result) == 1 and not isinstance(fn.output, tuple):
        result = result[0]  # one output, its tangent given as a tuple of one
        return None if 0 in constant else result
    return tuple(None if k in constant else t for k, t in enumerate(result))


def _check_vmap_declaration(cls: type) -> None:
    """``generate_vmap_rule`` must be a bool and ``vmap`` a staticmethod (PyTorch's)."""
    generate = getattr(cls, "generate_vmap_rule", False)
    if not isinstance(generate, bool):
        raise TypeError(
            f"{cls.__name__}.generate_vmap_rule must be True or False, got {generate!r}"
        )
    own = vars(cls).get("vmap")
    if own is not None and not isinstance(own, staticmethod):
        raise TypeError(
            f"{cls.__name__}: vmap must be a staticmethod: "
            "@staticmethod def vmap(info, in_dims, *args)"
        )


def vmap_support(cls: type) -> str:
    """How `cls` runs under vmap, as PyTorch decides it: "generate" (run the Function on
    batched tensors: generate_vmap_rule=True) or "rule" (its static vmap); raises otherwise."""
    generate = getattr(cls, "generate_vmap_rule", False)
    custom = isinstance(inspect.getattr_static(cls, "vmap", None), staticmethod)
    details = "For more details, please see https://pytorch.org/docs/main/notes/extending.func.html"
    if not getattr(cls, "_separate_context", False):
        raise RuntimeError(
            "In order to use an autograd.Function with functorch transforms (vmap, grad, jvp, "
            "jacrev, ...), it must override the setup_context staticmethod. " + details
        )
    if generate and custom:
        raise RuntimeError(
            f"You tried to vmap over {cls.__name__}, but it has both generate_vmap_rule=True "
            "and an overridden vmap staticmethod. Please set generate_vmap_rule=False or delete "
            "the overridden vmap staticmethod to avoid ambiguity. " + details
        )
    if not generate and not custom:
        raise RuntimeError(
            f"You tried to vmap over {cls.__name__}, but it does not have vmap support. Please "
            "override and implement the vmap staticmethod or set generate_vmap_rule=True. "
            + details
        )
    return "generate" if generate else "rule"


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "_ctx") and hasattr(value, "array")
