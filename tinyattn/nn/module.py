"""nn layer, part 1: Module (the container of parameters and submodules) and Parameter.

Imports `backend`, `autograd` and `tensor` only. Invariants: parameters, buffers and submodules are
kept in insertion (attribute) order, so parameters() and state_dict() are deterministic; a
Parameter keeps its identity for life (to() and load_state_dict() replace its array, never the
object, so optimizers holding it stay valid); load_state_dict changes nothing unless every key
checks out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from .. import backend
from ..autograd import no_grad
from ..tensor import Tensor


class Parameter(Tensor):
    """A leaf Tensor that a Module registers as trainable (requires_grad=True by default).

    Results of operations on a Parameter are plain Tensors (ops always build the base class).
    """

    __slots__ = ()

    def __init__(self, data: Any, requires_grad: bool = True) -> None:
        super().__init__(data, requires_grad=requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


class IncompatibleKeys(NamedTuple):
    """What load_state_dict(strict=False) skipped."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
    """Base class of layers: assign Parameters and Modules as attributes and they are tracked.

    Subclasses call ``super().__init__()`` first and implement ``forward``; ``module(x)`` calls it.
    """

    def __init__(self) -> None:
        # object.__setattr__: our own __setattr__ needs these dicts to exist.
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    # ------------------------------------------------------------------------ registration
    def __setattr__(self, name: str, value: Any) -> None:
        stores = self.__dict__.get("_parameters")
        if stores is None and isinstance(value, Parameter | Module):
            raise AttributeError(
                f"{type(self).__name__}: call super().__init__() before assigning {name!r}"
            )
        if isinstance(value, Parameter):
            self._forget(name)
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._forget(name)
            self._modules[name] = value
        elif stores is not None and name in self._parameters:
            if value is not None:
                raise TypeError(
                    f"{type(self).__name__}: cannot assign {type(value).__name__} to parameter "
                    f"{name!r}; wrap it in nn.Parameter (or assign None)"
                )
            self._parameters[name] = None
        elif stores is not None and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"{type(self).__name__}: buffer {name!r} must be a Tensor or None")
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: parameters, buffers and modules live in dicts.
        for store in ("_parameters", "_buffers", "_modules"):
            found = self.__dict__.get(store)
            if found is not None and name in found:
                return found[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        if not self._forget(name):
            object.__delattr__(self, name)

    def _forget(self, name: str) -> bool:
        found = False
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                found = True
        self._non_persistent.discard(name)
        self.__dict__.pop(name, None)
        return found

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register a Parameter (or None, for an optional one such as a missing bias)."""
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: {name!r} must be a Parameter or None")
        self._forget(name)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """A non-trainable tensor that moves with to(); in state_dict() only if persistent."""
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer: {name!r} must be a Tensor or None")
        self._forget(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)

    # ----------------------------------------------------------------------------- traversal
    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """This module and every submodule, depth first in attribute order, each once."""
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            children = [
                (f"{name}.{child_name}" if name else child_name, child)
                for child_name, child in module._modules.items()
                if child is not None
            ]
            stack.extend(reversed(children))

    def modules(self) -> Iterator[Module]:
        for _, module in self.named_modules():
            yield module

    def named_children(self) -> Iterator[tuple[str, Module]]:
        for name, child in self._modules.items():
            if child is not None:
                yield name, child

    def children(self) -> Iterator[Module]:
        for _, child in self.named_children():
            yield child

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, Parameter) in attribute order; a shared Parameter is listed once."""
        seen: set[int] = set()
        for prefix, module in self.named_modules():
            for name, param in module._parameters.items():
                if param is not None and id(param) not in seen:
                    seen.add(id(param))
                    yield (f"{prefix}.{name}" if prefix else name), param

    def parameters(self) -> Iterator[Parameter]:
        for _, param in self.named_parameters():
            yield param

    def named_buffers(self) -> Iterator[tuple[str, Tensor]]:
        for prefix, module in self.named_modules():
            for name, buffer in module._buffers.items():
                if buffer is not None:
                    yield (f"{prefix}.{name}" if prefix else name), buffer

    def _state_slots(self, prefix: str = "") -> Iterator[tuple[str, Module, str, Tensor]]:
        """Every state_dict entry as (key, owning module, attribute, tensor); shared tensors
        appear under each name, as in PyTorch."""
        for name, param in self._parameters.items():
            if param is not None:
                yield prefix + name, self, name, param
        for name, buffer in self._buffers.items():
            if buffer is not None and name not in self._non_persistent:
                yield prefix + name, self, name, buffer
        for name, child in self._modules.items():
            if child is not None:
                yield from child._state_slots(f"{prefix}{name}.")

    # ----------------------------------------------------------------------------------- modes
    def train(self, mode: bool = True) -> Module:
        """Set training mode (dropout active) on this module and every submodule."""
        for module in self.modules():
            object.__setattr__(module, "training", bool(mode))
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self) -> None:
        """Drop every parameter's gradient (set to None, so the next backward starts fresh)."""
        for param in self.parameters():
            param.grad = None

    def to(self, target: Any) -> Module:
        """Move every parameter and buffer to a device ("cpu", "cuda", "strict") or cast the
        floating ones to a dtype ("float64"), in place: the Parameter objects stay the same."""
        is_dtype = not (isinstance(target, str) and target not in backend.DTYPE_NAMES)
        tensors = {id(t): t for _, t in self.named_parameters()}
        tensors.update({id(t): t for _, t in self.named_buffers()})
        with no_grad():
            for tensor in tensors.values():
                xp = backend.namespace(tensor.data)
                if is_dtype and not backend.is_floating(xp, tensor.dtype):
                    continue  # integer buffers keep their dtype
                tensor.data = tensor.to(target).data
                if tensor.grad is not None:
                    tensor.grad = tensor.grad.to(target)
        return self

    def double(self) -> Module:
        return self.to("float64")

    def float(self) -> Module:
        return self.to("float32")

    # ------------------------------------------------------------------------------ state dict
    def state_dict(self) -> dict[str, Tensor]:
        """{dotted name: Tensor} of parameters and persistent buffers, detached (the arrays are
        shared; tinyattn never updates them in place)."""
        return {key: tensor.detach() for key, _, _, tensor in self._state_slots()}

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy values into the parameters and buffers, all or nothing.

        Every value is converted to its target's dtype and device first; missing and unexpected
        keys (with strict=True) and shape mismatches (always) are reported together in one
        error, naming each key, before anything is changed.
        """
        slots = {key: tensor for key, _, _, tensor in self._state_slots()}
        missing = [key for key in slots if key not in state_dict]
        unexpected = [key for key in state_dict if key not in slots]
        problems, converted = [], {}
        for key, target in slots.items():
            if key not in state_dict:
                continue
            try:
                value = Tensor(
                    state_dict[key], dtype=backend.dtype_name(target.dtype), device=target.device
                )
            except (TypeError, ValueError) as exc:
                problems.append(f"{key!r}: value cannot be converted ({exc})")
                continue
            if value.shape != target.shape:
                problems.append(
                    f"{key!r}: shape {value.shape} in the checkpoint, {target.shape} in the model"
                )
            converted[key] = value.data
        if strict and missing:
            problems.insert(0, "missing keys: " + ", ".join(repr(k) for k in missing))
        if strict and unexpected:
            problems.insert(0, "unexpected keys: " + ", ".join(repr(k) for k in unexpected))
        if problems:
            name = type(self).__name__
            raise RuntimeError(
                f"load_state_dict: cannot load into {name} (nothing was changed):\n  "
                + "\n  ".join(problems)
            )
        for key, array in converted.items():
            slots[key].data = array
        return IncompatibleKeys(missing, unexpected)

    # ------------------------------------------------------------------------------- calling
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement forward")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        children = [
            f"({name}): " + repr(child).replace("\n", "\n  ")
            for name, child in self.named_children()
        ]
        if not children:
            return f"{type(self).__name__}({self.extra_repr()})"
        lines = ([self.extra_repr()] if self.extra_repr() else []) + children
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"


class ModuleList(Module):
    """A list of submodules, registered as "0", "1", ... (a stack of Transformer blocks)."""

    def __init__(self, modules: Any = ()) -> None:
        super().__init__()
        for module in modules:
            self.append(module)

    def append(self, module: Module) -> ModuleList:
        if not isinstance(module, Module):
            raise TypeError(f"ModuleList: expected a Module, got {type(module).__name__}")
        setattr(self, str(len(self._modules)), module)
        return self

    def __getitem__(self, index: int) -> Module:
        return list(self._modules.values())[index]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))


class Sequential(ModuleList):
    """Submodules applied in order: ``Sequential(a, b)(x) == b(a(x))``."""

    def __init__(self, *modules: Module) -> None:
        super().__init__(modules)

    def forward(self, x: Any) -> Any:
        for module in self:
            x = module(x)
        return x


__all__ = ["IncompatibleKeys", "Module", "ModuleList", "Parameter", "Sequential"]
