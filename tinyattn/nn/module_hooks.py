"""nn layer, module hooks: PyTorch's forward pre-hooks, forward hooks and full backward hooks.

Imports `backend`, `autograd` and `tensor` only; `module.Module` inherits `HookMethods`. A module
without hooks is called as before (one dict lookup). With hooks, ``module(*args)`` runs
pre-hooks (which may replace the args), ``forward``, then forward hooks (which may replace the
output). Full backward hooks see gradients the way PyTorch's do: the tensor args that require
grad pass through one identity node, the output tensors through another, so a backward hook is
called once with all of ``grad_input`` (a gradient per positional arg: None for a number, zeros
for a tensor that requires no grad) and ``grad_output`` (one per output tensor), and may return
a replacement ``grad_input``. An output that reaches no loss has a zero gradient here (PyTorch
passes None). Hooks cannot be recorded by ``ta.compile``: a call with hooks in a recording is
refused with a CompileError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import autograd, backend
from ..autograd import RemovableHandle, is_grad_enabled
from ..ops.hook_points import GradientsMeet
from ..tensor import Tensor


class _Hooks:
    """A module's hooks, in call order; each entry is (hook, with_kwargs)."""

    __slots__ = ("forward_pre", "forward", "backward_pre", "backward")

    def __init__(self) -> None:
        self.forward_pre: list = []
        self.forward: list = []
        self.backward_pre: list = []
        self.backward: list = []


def _register(hooks: list, entry: tuple, prepend: bool) -> RemovableHandle:
    if prepend:
        hooks.insert(0, entry)
    else:
        hooks.append(entry)
    return RemovableHandle(hooks, entry)


class HookMethods:
    """``register_forward_pre_hook``, ``register_forward_hook``,
    ``register_full_backward_pre_hook`` and ``register_full_backward_hook``, as in PyTorch;
    each returns a handle whose ``remove()`` unregisters the hook."""

    def _hook_lists(self) -> _Hooks:
        hooks = self.__dict__.get("_hooks")
        if hooks is None:
            hooks = _Hooks()
            object.__setattr__(self, "_hooks", hooks)
        return hooks

    def register_forward_pre_hook(
        self, hook: Callable, *, prepend: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """``hook(module, args)`` (``hook(module, args, kwargs)`` with `with_kwargs`) before
        forward; a result other than None replaces args (a non-tuple is wrapped in one), or
        with `with_kwargs` must be a tuple (args, kwargs)."""
        return _register(self._hook_lists().forward_pre, (hook, with_kwargs), prepend)

    def register_forward_hook(
        self, hook: Callable, *, prepend: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """``hook(module, args, output)`` (``hook(module, args, kwargs, output)`` with
        `with_kwargs`) after forward; a result other than None replaces the output."""
        return _register(self._hook_lists().forward, (hook, with_kwargs), prepend)

    def register_full_backward_pre_hook(
        self, hook: Callable, prepend: bool = False
    ) -> RemovableHandle:
        """``hook(module, grad_output)`` when the gradients of the outputs are known; a tuple
        returned replaces grad_output."""
        return _register(self._hook_lists().backward_pre, (hook, False), prepend)

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_input, grad_output)`` when the gradients of the inputs are known
        (one per positional arg, None for one that is not a tensor; one per output tensor); a
        tuple returned replaces grad_input."""
        return _register(self._hook_lists().backward, (hook, False), prepend)

    def _call_with_hooks(self, hooks: _Hooks, args: tuple, kwargs: dict) -> Any:
        """``module(*args, **kwargs)`` with its hooks, in PyTorch's order."""
        if autograd.recording.recorder is not None:  # ta.compile records: hooks would run only once
            autograd.recording.recorder.module_hooks(type(self).__name__)
        args, kwargs = _run_pre_hooks(self, hooks.forward_pre, args, kwargs)
        meeting = None
        if (hooks.backward or hooks.backward_pre) and is_grad_enabled():
            meeting = _BackwardMeeting(self, hooks)
            args = meeting.inputs(args)
        output = self.forward(*args, **kwargs)
        for hook, with_kwargs in list(hooks.forward):
            result = hook(self, args, kwargs, output) if with_kwargs else hook(self, args, output)
            if result is not None:
                output = result
        return meeting.outputs(output) if meeting is not None else output


def _run_pre_hooks(module: Any, hooks: list, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    for hook, with_kwargs in list(hooks):
        if with_kwargs:
            result = hook(module, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(
                        "forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                        f"got {result!r}"
                    )
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    return args, kwargs


class _BackwardMeeting:
    """One call's backward hooks: collects grad_output, then hands grad_input to the hooks."""

    def __init__(self, module: Any, hooks: _Hooks) -> None:
        self.module, self.hooks = module, hooks
        self.args: tuple = ()
        self.arg_places: list = []
        self.grad_output: tuple = ()

    def inputs(self, args: tuple) -> tuple:
        """The args, those that require grad passed through one identity node together.
        grad_input has a place per positional arg, as in PyTorch: None for one that is not a
        tensor, zeros for a tensor that requires no grad (beside one that does)."""
        self.args = args
        self.arg_places = [i for i, arg in enumerate(args) if _requires_grad(arg)]
        if not self.arg_places:
            return args
        passed = GradientsMeet.apply(*(args[i] for i in self.arg_places), callback=self._inputs)
        passed = passed if isinstance(passed, tuple) else (passed,)
        args = list(args)
        for i, tensor in zip(self.arg_places, passed, strict=True):
            args[i] = tensor
        return tuple(args)

    def outputs(self, output: Any) -> Any:
        """The output (a tensor, or a tuple or list of values), its tensors that require grad
        passed through one identity node together."""
        items = list(output) if isinstance(output, tuple | list) else [output]
        tensors = [i for i, item in enumerate(items) if isinstance(item, Tensor)]
        self.output_places = [i for i in tensors if items[i].requires_grad]
        self.output_count = len(tensors)
        self.tensor_rank = {place: rank for rank, place in enumerate(tensors)}
        if not self.output_places:
            return output
        passed = GradientsMeet.apply(
            *(items[i] for i in self.output_places), callback=self._outputs
        )
        passed = passed if isinstance(passed, tuple) else (passed,)
        for i, tensor in zip(self.output_places, passed, strict=True):
            items[i] = tensor
        if isinstance(output, tuple | list):
            return type(output)(items)
        return items[0]

    def _outputs(self, grads: tuple) -> tuple:
        """The outputs' gradients: backward pre-hooks may replace them."""
        grad_output = [None] * self.output_count
        for place, grad in zip(self.output_places, grads, strict=True):
            grad_output[self.tensor_rank[place]] = grad
        grad_output = tuple(grad_output)
        for hook, _ in list(self.hooks.backward_pre):
            result = hook(self.module, grad_output)
            if result is not None:
                grad_output = _checked("backward pre-hook", result, grad_output)
        self.grad_output = grad_output
        if not self.arg_places:  # no input gets a gradient: the hooks run now, as in PyTorch
            self._inputs(())
        return tuple(grad_output[self.tensor_rank[place]] for place in self.output_places)

    def _inputs(self, grads: tuple) -> tuple:
        """The args' gradients: full backward hooks see them with grad_output, may replace."""
        grad_input = [None] * len(self.args)
        if grads:
            for i, arg in enumerate(self.args):
                if isinstance(arg, Tensor):
                    grad_input[i] = arg.constant(backend.namespace(arg.array).zeros_like(arg.array))
        for place, grad in zip(self.arg_places, grads, strict=True):
            grad_input[place] = grad
        grad_input = tuple(grad_input)
        for hook, _ in list(self.hooks.backward):
            result = hook(self.module, grad_input, self.grad_output)
            if result is not None:
                grad_input = _checked("backward hook", result, grad_input)
        return tuple(grad_input[place] for place in self.arg_places)


def _requires_grad(value: Any) -> bool:
    return isinstance(value, Tensor) and value.requires_grad


def _checked(what: str, result: Any, expected: tuple) -> tuple:
    """A hook's replacement gradients: a tuple as long as the one it was given."""
    result = tuple(result) if isinstance(result, list) else result
    if not isinstance(result, tuple) or len(result) != len(expected):
        raise RuntimeError(
            f"{what} returned {result!r}; it must return None or a tuple of {len(expected)} "
            "gradients (None where there is none), as it was given"
        )
    for new, old in zip(result, expected, strict=True):
        if new is not None and old is not None and tuple(new.shape) != tuple(old.shape):
            raise RuntimeError(
                f"{what} returned a gradient of shape {tuple(new.shape)} for one of shape "
                f"{tuple(old.shape)}"
            )
    return result
