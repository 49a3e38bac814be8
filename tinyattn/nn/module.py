"""nn layer, part 1: Module (the container of parameters and submodules) and Parameter.

Imports `backend`, `autograd` and `tensor` only. Invariants: parameters, buffers and submodules are
kept in insertion (attribute) order, so parameters() and state_dict() are deterministic; a
Parameter keeps its identity for life (to() and load_state_dict() replace its array, never the
object, so optimizers holding it stay valid); load_state_dict changes nothing unless every key
checks out.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, NamedTuple

from .. import autograd, backend
from ..autograd import no_grad
from ..creation import zeros
from ..tensor import Tensor
from .module_hooks import HookMethods


class Parameter(Tensor):
    """A leaf Tensor that a Module registers as trainable (requires_grad=True by default).

    Results of operations on a Parameter are plain Tensors (ops always build the base class).
    """

    __slots__ = ()

    def __init__(self, data: Any, requires_grad: bool = True) -> None:
        super().__init__(data, requires_grad=requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


def _as_parameter(value: Tensor, requires_grad: bool) -> Parameter:
    """A Parameter sharing `value`'s storage and version counter, as PyTorch's Parameter(value)
    does (the constructor here copies): a detached view of it, given the Parameter class."""
    if isinstance(value, Parameter) and value.requires_grad == requires_grad:
        return value  # PyTorch assigns a Parameter as it is
    param = value.detach()
    param.__class__ = Parameter  # the same slots: Parameter declares none of its own
    return param.requires_grad_(requires_grad)


class IncompatibleKeys(NamedTuple):
    """What load_state_dict(strict=False) skipped."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class _Held:
    """How many times any module's parameters, buffers or submodules changed (every change goes
    through `Module._forget` or `Module.__setattr__`): `Module._replay_key` reads a module's
    holdings again only after this moved."""

    changes = 0


_PLAIN = (bool, int, float, complex, str, type(None))
_MISSING = object()  # an attribute not set before


def _is_plain(value: Any) -> bool:
    """A plain Python value (a number, a string, None, or a tuple of them): a module setting."""
    if isinstance(value, tuple):
        return all(isinstance(item, _PLAIN) for item in value)
    return isinstance(value, _PLAIN)


class Module(HookMethods):
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
            _Held.changes += 1
            self._parameters[name] = None
        elif stores is not None and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"{type(self).__name__}: buffer {name!r} must be a Tensor or None")
            _Held.changes += 1
            self._buffers[name] = value
        else:
            if _is_plain(value) and not name.startswith("_"):
                # A setting its forward may read (dropout's p, a scale): part of _replay_key.
                old = self.__dict__.get(name, _MISSING)
                if old is _MISSING or not _is_plain(old) or old != value:
                    _Held.changes += 1
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
        _Held.changes += 1  # a removal, or the first half of a registration
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
    def named_modules(
        self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """This module and every submodule, depth first in attribute order, with PyTorch's dotted
        names; a module reachable twice is listed once unless remove_duplicate=False."""
        seen: set[int] = set() if memo is None else memo
        stack = [(prefix, self)]
        while stack:
            name, module = stack.pop()
            if remove_duplicate:
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

    def apply(self, fn: Any) -> Module:
        """Call fn on every submodule (children first) and then on this module; returns self
        (PyTorch's order, used for custom weight initialisation)."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def add_module(self, name: str, module: Module | None) -> None:
        """Register a submodule under `name` (the same as assigning the attribute)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {name!r} must be a Module or None")
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError("add_module: module name must be a non-empty string without '.'")
        self._forget(name)
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> Module:
        """The submodule at a dotted path ("blocks.0.attn"); "" is this module."""
        module: Module = self
        for part in target.split(".") if target else []:
            child = module._modules.get(part)
            if child is None:
                raise AttributeError(
                    f"get_submodule: {type(module).__name__} has no submodule {part!r}"
                )
            module = child
        return module

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, Parameter) in attribute order; a shared Parameter is listed once."""
        seen: set[int] = set()
        modules = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, param in module._parameters.items():
                if param is None or (remove_duplicate and id(param) in seen):
                    continue
                seen.add(id(param))
                yield (f"{module_prefix}.{name}" if module_prefix else name), param

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, buffer in self.named_buffers(recurse=recurse):
            yield buffer

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Turn gradient tracking of every parameter on or off (freezing a part of a model)."""
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        modules = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, buffer in module._buffers.items():
                if buffer is not None:
                    yield (f"{module_prefix}.{name}" if module_prefix else name), buffer

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

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's gradient (set to None, PyTorch's default), or with
        ``set_to_none=False`` zero it in place, as PyTorch does."""
        zero_grads(self.parameters(), set_to_none)

    def to(
        self, *args: Any, device: Any = None, dtype: Any = None, non_blocking: bool = False
    ) -> Module:
        """Move every parameter and buffer to a device ("cpu", "cuda", "strict") and/or cast the
        floating ones to a dtype ("float64"), in place: the Parameter objects stay the same.
        PyTorch's forms: ``to(device)``, ``to(dtype)``, ``to(device, dtype)``, keywords;
        `non_blocking` as in ``Tensor.to``."""
        for target in args:
            if isinstance(target, str) and target not in backend.DTYPE_NAMES + ("bfloat16",):
                device = target
            elif not isinstance(target, bool):
                dtype = target
        tensors = {id(t): t for _, t in self.named_parameters()}
        tensors.update({id(t): t for _, t in self.named_buffers()})
        with no_grad():
            for tensor in tensors.values():
                xp = backend.namespace(tensor.array)
                # integer buffers keep their dtype
                cast = dtype if backend.is_floating(xp, tensor.dtype) else None
                tensor.array = tensor.to(device=device, dtype=cast).array
                if tensor.grad is not None:
                    tensor.grad = tensor.grad.to(device=device, dtype=cast)
        return self

    def to_empty(self, *, device: Any, recurse: bool = True) -> Module:
        """Give every parameter and buffer (and gradient) new storage on `device` of its shape
        and dtype, copying no values: PyTorch leaves them unset, tinyattn fills zeros. The way a
        module on the meta device (shapes only) gets real tensors, before it loads or initialises
        its values; ``to(device)`` refuses, as there is nothing to copy. The Parameter objects
        stay the same; with ``recurse=False`` only this module's own."""
        modules = self.modules() if recurse else [self]
        owned = [(*m._parameters.values(), *m._buffers.values()) for m in modules]
        tensors = {id(t): t for group in owned for t in group if t is not None}
        with no_grad():
            for tensor in tensors.values():
                tensor.array = zeros(tensor.shape, dtype=tensor.dtype, device=device).array
                if tensor._grad is not None:
                    tensor.grad = zeros(tensor.shape, dtype=tensor.dtype, device=device)
        return self

    def double(self) -> Module:
        return self.to("float64")

    def cuda(self, device: int | None = None) -> Module:
        """Move to the GPU (the CuPy backend); refused with the probe's reason without one."""
        return self.to("cuda" if device is None else f"cuda:{device}")

    def cpu(self) -> Module:
        return self.to("cpu")

    def float(self) -> Module:
        return self.to("float32")

    # ------------------------------------------------------------------------------ state dict
    def state_dict(
        self, destination: dict | None = None, prefix: str = "", keep_vars: bool = False
    ) -> dict[str, Tensor]:
        """{dotted name: Tensor} of parameters and persistent buffers (PyTorch's keys), detached
        unless keep_vars=True. The arrays are shared, as in PyTorch: nn.init writes in place
        and shows through; optimizer steps and load_state_dict give parameters new arrays."""
        out = {} if destination is None else destination
        for key, _, _, tensor in self._state_slots(prefix):
            out[key] = tensor if keep_vars else tensor.detach()
        return out

    def load_state_dict(
        self, state_dict: dict[str, Any], strict: bool = True, assign: bool = False
    ) -> IncompatibleKeys:
        """Copy values into the parameters and buffers, all or nothing.

        Every value is converted to its target's dtype and device first; missing and unexpected
        keys (with strict=True) and shape mismatches (always) are reported together in one
        error, naming each key, before anything is changed. With ``assign=True`` (PyTorch's)
        nothing is copied or converted: each parameter becomes a new Parameter holding the
        value's storage, dtype and device (keeping its own requires_grad), and each buffer the
        value itself; so a module built on the meta device gets real tensors.
        """
        slots = {key: tensor for key, _, _, tensor in self._state_slots()}
        missing = [key for key in slots if key not in state_dict]
        unexpected = [key for key in state_dict if key not in slots]
        problems, converted = [], {}
        for key, target in slots.items():
            if key not in state_dict:
                continue
            try:
                value = state_dict[key]
                if not (assign and isinstance(value, Tensor)):
                    dtype = None if assign else backend.dtype_name(target.dtype)
                    value = Tensor(value, dtype=dtype, device=None if assign else target.device)
            except (TypeError, ValueError) as exc:
                problems.append(f"{key!r}: value cannot be converted ({exc})")
                continue
            if value.shape != target.shape:
                problems.append(
                    f"{key!r}: shape {value.shape} in the checkpoint, {target.shape} in the model"
                )
            converted[key] = value if assign else value.array
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
        if assign:
            self._assign_state(converted)
            return IncompatibleKeys(missing, unexpected)
        with no_grad():
            for key, array in converted.items():
                # Into the existing storage, as PyTorch copies: compiled steps and optimizers
                # that hold the array keep seeing the parameter, and its version goes up.
                slots[key]._store("load_state_dict", array)
        return IncompatibleKeys(missing, unexpected)

    def _assign_state(self, values: dict[str, Tensor]) -> None:
        """load_state_dict(assign=True): the values take the slots' places (their order kept)."""
        for key, owner, attr, target in self._state_slots():
            if key not in values:
                continue
            if attr in owner._parameters:
                owner._parameters[attr] = _as_parameter(values[key], target.requires_grad)
            else:
                owner._buffers[attr] = values[key]
            _Held.changes += 1

    # ------------------------------------------------------------------------------- calling
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement forward")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if autograd.recording.recorder is not None:  # recording: a replay must match the mode
            autograd.note_mode(self, "_replay_key")
        hooks = self._active_hooks()
        if hooks is not None:
            return self._call_with_hooks(hooks, args, kwargs)
        return self.forward(*args, **kwargs)

    def _active_hooks(self) -> Any:
        """The module's hooks when a forward or backward hook is registered, else None (a call
        is then `forward` itself)."""
        hooks = self.__dict__.get("_hooks")  # made by the first register_*_hook
        if hooks is not None and (
            hooks.forward_pre or hooks.forward or hooks.backward_pre or hooks.backward
        ):
            return hooks
        return None

    @property
    def _replay_key(self) -> tuple:
        """What a compiled step's recording depends on in this module (`ta.compile` keys its
        tapes on it): the mode; which parameters, buffers and submodules it holds, by
        identity; and its settings, the public attributes holding plain Python values (numbers,
        strings, None, tuples of them), so ``model.eval()``, a replaced layer or a new dropout
        ``p`` records again instead of replaying. The last two parts are read again only after
        some module's holdings or settings changed."""
        cached = self.__dict__.get("_held_key")
        if cached is None or cached[0] != _Held.changes:
            held = (*self._parameters.values(), *self._buffers.values(), *self._modules.values())
            settings = tuple(
                (name, value)
                for name, value in self.__dict__.items()
                if not name.startswith("_") and name != "training" and _is_plain(value)
            )
            cached = (_Held.changes, (tuple(map(id, held)), settings))
            object.__setattr__(self, "_held_key", cached)
        return self.training, cached[1]

    def __getstate__(self) -> dict:
        """What `ta.save` (and copy, pickle) keep of a module: its attributes, less the cache
        that `_replay_key` rebuilds (it holds ids, which mean nothing in another object)."""
        state = dict(self.__dict__)
        state.pop("_held_key", None)
        return state

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
        self.extend(modules)

    def append(self, module: Module) -> ModuleList:
        if not isinstance(module, Module):
            raise TypeError(
                f"{type(self).__name__}: expected a Module, got {type(module).__name__}"
            )
        setattr(self, str(len(self._modules)), module)
        return self

    def extend(self, modules: Any) -> ModuleList:
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module: Module) -> None:
        items = list(self._modules.values())
        items.insert(index, module)
        self._renumber(items)

    def pop(self, index: int | slice = -1) -> Any:
        """Remove and return the module (or the modules of a slice) at `index`."""
        taken = self[index]
        del self[index]
        return taken

    def __iadd__(self, modules: Any) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other: Any) -> ModuleList:
        """A new list of this list's modules, then `other`'s (the modules are shared)."""
        return type(self)._from_modules([*self, *other])

    def _renumber(self, items: list) -> None:
        for name in list(self._modules):
            self._forget(name)
        for module in items:
            self.append(module)

    def _index(self, index: int) -> int:
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"{type(self).__name__} indices must be ints or slices, got {index!r}")
        if not -len(self) <= index < len(self):
            raise IndexError(
                f"{type(self).__name__}: index {index} is out of range for {len(self)}"
            )
        return index % len(self)

    def __getitem__(self, index: int | slice) -> Any:
        items = list(self._modules.values())
        if isinstance(index, slice):
            return type(self)._from_modules(items[index])
        return items[self._index(index)]

    @classmethod
    def _from_modules(cls, modules: list) -> ModuleList:
        return cls(modules)

    def __setitem__(self, index: int, module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(
                f"{type(self).__name__}: expected a Module, got {type(module).__name__}"
            )
        setattr(self, str(self._index(index)), module)

    def __delitem__(self, index: int | slice) -> None:
        items = list(self._modules.values())
        del items[index if isinstance(index, slice) else self._index(index)]
        self._renumber(items)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))


class Sequential(ModuleList):
    """Submodules applied in order: ``Sequential(a, b)(x) == b(a(x))``; also built from an
    ordered dict of names to modules, whose names become the state_dict prefixes."""

    def __init__(self, *modules: Any) -> None:
        if len(modules) == 1 and isinstance(modules[0], dict):
            Module.__init__(self)
            for name, module in modules[0].items():
                if not isinstance(module, Module):
                    raise TypeError(
                        f"Sequential: {name!r} is a {type(module).__name__}, not a Module"
                    )
                setattr(self, name, module)
            return
        super().__init__(modules)

    @classmethod
    def _from_modules(cls, modules: list) -> ModuleList:
        return cls(*modules)

    def forward(self, x: Any) -> Any:
        for module in self:
            x = module(x)
        return x


class ParameterList(Module):
    """A list of Parameters registered as "0", "1", ... (state_dict keys as PyTorch's)."""

    def __init__(self, values: Any = ()) -> None:
        super().__init__()
        for value in values:
            self.append(value)

    def append(self, value: Any) -> ParameterList:
        if not isinstance(value, Parameter):
            value = Parameter(value)
        self.register_parameter(str(len(self._parameters)), value)
        return self

    def extend(self, values: Any) -> ParameterList:
        for value in values:
            self.append(value)
        return self

    def __getitem__(self, index: int) -> Parameter:
        return list(self._parameters.values())[index]

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Parameter]:
        return iter(list(self._parameters.values()))


class ParameterDict(Module):
    """A dict of Parameters registered under their keys. As in PyTorch, a plain dict is taken
    in sorted key order (an OrderedDict or ParameterDict in its own order)."""

    def __init__(self, values: Any = None) -> None:
        super().__init__()
        values = {} if values is None else values
        ordered = isinstance(values, OrderedDict | ParameterDict)
        pairs = values.items() if ordered else sorted(dict(values).items())
        for key, value in pairs:
            self[key] = value

    def __setitem__(self, key: str, value: Any) -> None:
        self.register_parameter(key, value if isinstance(value, Parameter) else Parameter(value))

    def __getitem__(self, key: str) -> Parameter:
        if key not in self._parameters:
            raise KeyError(f"ParameterDict has no key {key!r} (keys: {list(self._parameters)})")
        return self._parameters[key]

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._parameters))

    def __contains__(self, key: str) -> bool:
        return key in self._parameters

    def keys(self) -> list[str]:
        return list(self._parameters)

    def items(self) -> list[tuple[str, Parameter]]:
        return list(self._parameters.items())

    def values(self) -> list[Parameter]:
        return list(self._parameters.values())


class ModuleDict(Module):
    """A dict of submodules registered under their keys (``transformer.wte`` in minGPT)."""

    def __init__(self, modules: Any = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        if key not in self._modules:
            raise KeyError(f"ModuleDict has no key {key!r} (keys: {list(self._modules)})")
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        self._forget(key)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._modules))

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def keys(self) -> list[str]:
        return list(self._modules)

    def values(self) -> list[Module]:
        return list(self._modules.values())

    def items(self) -> list[tuple[str, Module]]:
        return list(self._modules.items())

    def update(self, modules: Any) -> None:
        pairs = modules.items() if isinstance(modules, dict | ModuleDict) else modules
        for key, module in pairs:
            if not isinstance(module, Module):
                raise TypeError(f"ModuleDict: {key!r} is a {type(module).__name__}, not a Module")
            self[key] = module

    def pop(self, key: str) -> Module:
        module = self[key]
        del self[key]
        return module


__all__ = [
    "IncompatibleKeys",
    "Module",
    "ModuleDict",
    "ModuleList",
    "Parameter",
    "ParameterDict",
    "ParameterList",
    "Sequential",
]


def zero_grads(params: Any, set_to_none: bool) -> None:
    """Each parameter's gradient set to None, or zeroed in place (``set_to_none=False``): the
    same array holds the zeros, so a step that then writes into ``p.grad`` writes into the
    array a compiled step replays (a read-only gradient, a broadcast, is replaced by zeros)."""
    for param in params:
        grad = param.grad
        if set_to_none or grad is None:
            param.grad = None
        elif grad._ctx is None and backend.is_buffer(grad.array):
            with no_grad():
                grad.zero_()
        else:  # a gradient with a graph (create_graph=True) or read-only: new zeros, detached
            xp = backend.namespace(grad.array)
            param.grad = Tensor._from_op(xp.zeros_like(grad.array), None)
