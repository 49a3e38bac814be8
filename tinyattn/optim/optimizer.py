"""Optim layer, part 1: the Optimizer base, SGD (momentum, Nesterov), Adam, AdamW, clip_grad_norm.

Imports `backend`, `autograd` and `tensor`. Invariants: updates run on raw arrays (no graph is
ever recorded) and are written into each parameter in place, as in PyTorch: views of a parameter
and ``state_dict()`` tensors (which share its array) see the new values, and the parameter's
version goes up, so backward through a graph kept from before the step raises instead of using
the new weights. Two paths compute the same update: the per-tensor loop (``foreach=False``),
which replaces each state array by a new one, and the multi-tensor path (the default), which
keeps each state key of a group in one flat buffer updated in place, each parameter's state entry
a view of its slice (as PyTorch updates its state tensors in place). ``state_dict()`` copies the
state, so a snapshot never changes with later steps. Both paths follow PyTorch's single-tensor
arithmetic step for step, so they agree bit for bit, and float64 runs agree with torch to ~1e-15.
float16 parameters take the loop, which computes each op in float32 as PyTorch's kernels do
(`_Opmath`): a step of lr / (1 - beta1) = 1e5 does not overflow to inf.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from .. import backend
from ..autograd import check_python_write, enable_grad, replayed_call
from ..errors import TinyattnError
from ..nn.module import zero_grads
from ..tensor import Tensor
from .flat import FlatGroup, into, same_kind, write_param

# ------------------------------------------------------------------------------------ checks


def _check_number(op: str, name: str, value: Any, low: float, high: float | None = None) -> None:
    """value must be a real number in [low, high] (high exclusive when given as a bound)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and value >= low and (high is None or value < high)
    if not ok:
        bound = f"[{low}, {high})" if high is not None else f">= {low}"
        raise TinyattnError(f"{op}: invalid {name} {value!r} (must be a finite number {bound})")


def _param_list(op: str, params: Any) -> list[dict]:
    """Normalise an iterable of Tensors, or of {"params": [...], **options} dicts, into groups."""
    if isinstance(params, Tensor):
        raise TypeError(f"{op}: params must be an iterable of Tensors, got a single Tensor")
    groups = list(params)
    if not groups:
        raise TinyattnError(f"{op}: got an empty parameter list")
    if not isinstance(groups[0], dict):
        groups = [{"params": groups}]
    return groups


# PyTorch's implementation hints: accepted (programs pass fused=True on CUDA) and ignored, since
# they choose a kernel, not a result (`foreach`, a real option here, picks the path; see
# Optimizer.step). Flags that change the result are accepted where they name what the optimizer
# does (off; decoupled_weight_decay=True for AdamW) and refused otherwise.
_HINTS = ("fused", "capturable", "differentiable")
_REFUSED_WHEN_ON = ("amsgrad", "maximize", "decoupled_weight_decay")


def _check_flags(op: str, flags: dict[str, Any], decoupled: bool = False) -> None:
    """Refuse a flag that would change the result (`decoupled`: the optimizer's own rule)."""
    for name, value in flags.items():
        if name in _HINTS:
            continue
        if name in _REFUSED_WHEN_ON:
            own = decoupled if name == "decoupled_weight_decay" else False
            if bool(value) != own:
                other = " (use AdamW)" if name == "decoupled_weight_decay" and value else ""
                raise NotImplementedError(f"{op}: {name}={value!r} is not supported{other}")
            continue
        raise TypeError(f"{op}: unexpected keyword argument {name!r}")


def _check_foreach(op: str, value: Any) -> None:
    if value is not None and not isinstance(value, bool):
        raise TinyattnError(f"{op}: invalid foreach {value!r} (must be None, True or False)")


# Keys a parameter group holds besides the optimizer's options: a scheduler adds initial_lr,
# OneCycleLR and CyclicLR the ends of their cycles (as in PyTorch).
_GROUP_KEYS = {"params", "initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum"}


class ParamGroup(dict):
    """One entry of ``optimizer.param_groups``: a dict, as in PyTorch. Setting an option while
    a compiled step records (``group["lr"] = lr`` inside the step) is refused: a replay runs
    none of the step's Python, so the learning rate would silently stay at its recorded value.
    A scheduler's ``step()``, which a replay runs as Python, may set it."""

    __slots__ = ()

    def __setitem__(self, key: str, value: Any) -> None:
        check_python_write(f"a parameter group's {key!r}")
        super().__setitem__(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        check_python_write("a parameter group's options (update)")
        super().update(*args, **kwargs)

    # Every other way to change the dict: a dict subclass's own methods bypass __setitem__.
    def __ior__(self, other: Any) -> ParamGroup:
        check_python_write("a parameter group's options (|=)")
        return super().__ior__(other)

    def __delitem__(self, key: str) -> None:
        check_python_write(f"a parameter group's {key!r} (del)")
        super().__delitem__(key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            check_python_write(f"a parameter group's {key!r} (setdefault)")
        return super().setdefault(key, default)

    def pop(self, key: str, *default: Any) -> Any:
        check_python_write(f"a parameter group's {key!r} (pop)")
        return super().pop(key, *default)

    def popitem(self) -> tuple[str, Any]:
        check_python_write("a parameter group's options (popitem)")
        return super().popitem()

    def clear(self) -> None:
        check_python_write("a parameter group's options (clear)")
        super().clear()


# --------------------------------------------------------------------------------- Optimizer


class Optimizer:
    """Base class: parameter groups with hyper-parameters, per-parameter state, zero_grad and
    state_dict. Subclasses define `defaults`, `_validate(group)`, `state_keys`,
    `_update(param, grad, group, state) -> new parameter array` (the per-tensor rule) and, for
    the multi-tensor path, `_flat_ready(params, states, group)` and
    `_update_flat(flat, states, group)` (the same rule on a group's flat buffers)."""

    state_keys: tuple[str, ...] = ()
    array_keys: tuple[str, ...] = ()  # the state keys that hold arrays (not the step count)

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[Tensor, dict[str, Any]] = {}  # keyed by the Parameter itself
        self._flats: dict[int, FlatGroup] = {}  # group number -> its flat layout
        for group in _param_list(self.name, params):
            self.add_param_group(group)

    @property
    def name(self) -> str:
        return type(self).__name__

    def add_param_group(self, group: dict[str, Any]) -> None:
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        known = {id(p) for g in self.param_groups for p in g["params"]}
        for position, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"{self.name}: parameter {position} is a {type(p).__name__}, not a Tensor"
                )
            if not p.is_leaf:
                raise TinyattnError(
                    f"{self.name}: parameter {position} (shape {p.shape}) is not a leaf"
                )
            if id(p) in known:
                raise TinyattnError(
                    f"{self.name}: parameter {position} (shape {p.shape}) appears twice"
                )
            known.add(id(p))
        unknown = set(group) - set(self.defaults) - _GROUP_KEYS
        if unknown:
            raise TinyattnError(
                f"{self.name}: unknown option(s) {sorted(unknown)} in a parameter group"
            )
        full = ParamGroup({**self.defaults, **group, "params": params})
        self._validate(full)
        self.param_groups.append(full)

    def _validate(self, group: dict[str, Any]) -> None:
        raise NotImplementedError

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Set every parameter's gradient to None (PyTorch's default), or with
        ``set_to_none=False`` zero it in place, as PyTorch does."""
        zero_grads((p for group in self.param_groups for p in group["params"]), set_to_none)

    @replayed_call  # a compiled step runs it on every replay
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient (parameters without one are skipped).

        With a closure (PyTorch's form), it is called first, with grad mode on, to recompute
        the loss and gradients; its result is returned.

        A group with ``foreach=False`` runs the per-tensor loop: about a dozen array calls per
        parameter. With ``foreach=None`` (the default) or True, a group runs the multi-tensor
        path where it can: its gradients and parameters are copied into one flat buffer each and
        the rule runs as a handful of whole-buffer array calls on them and on the flat state,
        whatever the number of parameters. It gives the same bits as the loop, so the default
        takes it whenever it applies; the loop runs instead for a group of float16 parameters
        (`_Opmath`), or whose parameters mix dtypes or devices, whose gradients do not match their
        parameters, or whose parameters' states are out of step (some have taken more steps than
        others).
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        start = 0
        for number, group in enumerate(self.param_groups):
            if group.get("foreach") is False or not self._step_flat(number, group):
                self._step_each(group, start)
            start += len(group["params"])
        return loss

    def _step_each(self, group: dict[str, Any], start: int) -> None:
        """The per-tensor loop: one `_update` per parameter that has a gradient."""
        for position, p in enumerate(group["params"], start):
            if p.grad is None:
                continue
            self._check_grad(position, p)
            state = self.state.setdefault(p, {})
            write_param(p, self._update(p.array, p.grad.array, group, state), self.name)

    def _step_flat(self, number: int, group: dict[str, Any]) -> bool:
        """The multi-tensor path for one group (its parameters that have a gradient); False
        where it does not apply, having changed no values (it may have created fresh state
        entries, as the loop would, or moved state values into a flat buffer)."""
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return True
        if backend.is_half(params[0].array):  # the loop computes each op in float32 (`_Opmath`)
            return False
        states = [self.state.setdefault(p, {}) for p in params]
        if not self._flat_ready(params, states, group):
            return False
        flat = self._flats.get(number)
        if flat is None or not flat.fits(params, states, self.array_keys):
            flat = FlatGroup.build(params, states, self.array_keys)
            if flat is None:
                return False
            self._flats[number] = flat
        grads = [p.grad.array for p in params]
        if not flat.accepts(grads):
            return False
        flat.gather(grads)
        self._update_flat(flat, states, group)
        flat.scatter(self.name)
        return True

    def _update(self, param: Any, grad: Any, group: dict, state: dict) -> Any:
        raise NotImplementedError

    def _flat_ready(self, params: list[Tensor], states: list[dict], group: dict) -> bool:
        """Whether one flat update can stand for the per-tensor ones (states in step); an
        optimizer without a flat rule always runs the loop."""
        return False

    def _update_flat(self, flat: FlatGroup, states: list[dict], group: dict) -> None:
        raise NotImplementedError

    def _check_grad(self, position: int, p: Tensor) -> None:
        """A gradient set by hand must match its parameter (NumPy would broadcast it silently)."""
        if p.grad.shape != p.shape:
            raise TinyattnError(
                f"{self.name}.step: parameter {position} has shape {p.shape} but its gradient "
                f"has shape {p.grad.shape}"
            )
        if p.grad.device != p.device:
            raise RuntimeError(
                f"{self.name}.step: parameter {position} is on device '{p.device}' but its "
                f"gradient is on '{p.grad.device}'"
            )

    # ------------------------------------------------------------------------- state dict
    def _all_params(self) -> list[Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def state_dict(self) -> dict[str, Any]:
        """{"state": {index: {name: Tensor or number}}, "param_groups": [{options, "params":
        [indices]}]}, PyTorch's layout; indices count parameters across groups in order.

        The state arrays are copies: the multi-tensor path updates its buffers in place, and a
        snapshot must not change with later steps."""
        state = {}
        for index, p in enumerate(self._all_params()):
            if p in self.state:
                state[index] = {
                    key: _snapshot(v) if hasattr(v, "shape") else v
                    for key, v in self.state[p].items()
                }
        groups, start = [], 0
        for group in self.param_groups:
            count = len(group["params"])
            options = {k: v for k, v in group.items() if k != "params"}
            groups.append({**options, "params": list(range(start, start + count))})
            start += count
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore state and hyper-parameters, all or nothing: a mismatch changes nothing."""
        op = f"{self.name}.load_state_dict"
        if set(state_dict) != {"state", "param_groups"}:
            raise TinyattnError(
                f"{op}: expected keys 'state' and 'param_groups', got {sorted(state_dict)}"
            )
        groups = list(state_dict["param_groups"])
        if len(groups) != len(self.param_groups):
            raise TinyattnError(
                f"{op}: the checkpoint has {len(groups)} parameter group(s), this optimizer "
                f"has {len(self.param_groups)}"
            )
        new_groups = []
        for number, (saved, mine) in enumerate(zip(groups, self.param_groups, strict=True)):
            if not isinstance(saved, dict) or "params" not in saved:
                raise TinyattnError(f"{op}: parameter group {number} has no 'params' list")
            saved = self._without_torch_flags(op, saved)
            unknown = set(saved) - set(self.defaults) - _GROUP_KEYS
            if unknown:
                raise TinyattnError(
                    f"{op}: parameter group {number} has option(s) {sorted(unknown)} that "
                    f"{self.name} does not have (a checkpoint of another optimizer?)"
                )
            if len(saved["params"]) != len(mine["params"]):
                raise TinyattnError(
                    f"{op}: parameter group {number} has {len(saved['params'])} parameter(s) in "
                    f"the checkpoint but {len(mine['params'])} here"
                )
            options = {k: _plain(v) for k, v in saved.items() if k != "params"}
            new_group = ParamGroup({**mine, **options, "params": mine["params"]})
            self._validate(new_group)
            new_groups.append(new_group)
        new_state = self._converted_state(op, state_dict["state"])
        self.param_groups, self.state = new_groups, new_state
        self._flats.clear()  # the layouts would hold the old state: rebuilt on the next step

    def _without_torch_flags(self, op: str, group: dict[str, Any]) -> dict[str, Any]:
        """A saved group less PyTorch's flags that this optimizer has no option for (a PyTorch
        state dict carries them all): kernel hints dropped, result flags dropped when they
        name what this optimizer does, refused otherwise."""
        flags = {
            k: v
            for k, v in group.items()
            if k in _HINTS + _REFUSED_WHEN_ON and k not in self.defaults
        }
        _check_flags(op, flags, decoupled=getattr(self, "decoupled", False))
        return {k: v for k, v in group.items() if k not in flags}

    def _converted_state(self, op: str, saved: dict) -> dict[Tensor, dict[str, Any]]:
        params = self._all_params()
        new_state: dict[Tensor, dict[str, Any]] = {}
        for raw_index, entries in saved.items():
            try:
                index = int(raw_index)
            except (TypeError, ValueError):
                raise TinyattnError(
                    f"{op}: state key {raw_index!r} is not a parameter index"
                ) from None
            if not 0 <= index < len(params):
                raise TinyattnError(
                    f"{op}: state for parameter {index}, but there are {len(params)}"
                )
            unexpected = set(entries) - set(self.state_keys)
            if unexpected:
                raise TinyattnError(
                    f"{op}: unexpected state key(s) {sorted(unexpected)} for parameter {index} "
                    f"({self.name} keeps {list(self.state_keys)})"
                )
            p, converted = params[index], {}
            for key, value in entries.items():
                if key == "step":
                    converted[key] = int(_plain(value))
                    continue
                array = Tensor(value, dtype=backend.dtype_name(p.dtype), device=p.device).array
                if tuple(array.shape) != p.shape:
                    raise TinyattnError(
                        f"{op}: state '{key}' of parameter {index} has shape {tuple(array.shape)}, "
                        f"the parameter has shape {p.shape}"
                    )
                converted[key] = array
            new_state[p] = converted
        return new_state


def _snapshot(array: Any) -> Tensor:
    return Tensor._from_op(backend.namespace(array).asarray(array, copy=True), None)


def _plain(value: Any) -> Any:
    """Tensors (as ta.load returns numbers) back to Python numbers or tuples."""
    if isinstance(value, Tensor):
        value = value.numpy().tolist()
    return tuple(value) if isinstance(value, list) else value


# --------------------------------------------------------------------------------------- SGD


class _Opmath:
    """PyTorch's arithmetic on a float16 parameter: each of its ops computes in float32 (its
    "opmath" type; a factor such as Adam's lr / (1 - beta1) is not rounded to float16 first, so
    1e4 / 0.1 stays finite) and stores its result as float16. `wide` gives an operand in float32,
    `store` rounds a result where PyTorch stores a float16 tensor (and goes on in float32),
    `narrow` gives the float16 array to keep, and `added` a number that PyTorch's add rounds to
    float16 (``add_(x, alpha=-lr)``, ``add_(eps)``). For every other dtype each returns its
    argument: the dtype's own arithmetic is PyTorch's."""

    __slots__ = ("xp", "dtype", "half", "op")

    def __init__(self, like: Any, op: str) -> None:
        self.xp, self.dtype, self.half = backend.namespace(like), like.dtype, backend.is_half(like)
        self.op = op

    def wide(self, array: Any) -> Any:
        return self.xp.astype(array, self.xp.float32) if self.half else array

    def narrow(self, array: Any) -> Any:
        return self.xp.astype(array, self.dtype) if self.half else array

    def store(self, array: Any) -> Any:
        return self.wide(self.narrow(array)) if self.half else array

    def added(self, name: str, value: float) -> float:
        """`value` as PyTorch's add uses it: rounded to float16, and refused where it overflows
        (PyTorch: "value cannot be converted to type c10::Half without overflow")."""
        if not self.half:
            return value
        if math.isfinite(value) and abs(value) > float(self.xp.finfo(self.dtype).max):
            raise RuntimeError(
                f"{self.op}: {name} {value!r} cannot be converted to float16 without overflow: "
                "PyTorch's add rounds it to the float16 parameters' dtype"
            )
        return float(self.xp.asarray(value, dtype=self.dtype))


class SGD(Optimizer):
    """Stochastic gradient descent, PyTorch's rule:
    g = grad + weight_decay * p;  b = g (first step) or momentum * b + (1 - dampening) * g;
    g = g + momentum * b (nesterov) or b;  p = p - lr * g.
    """

    state_keys = ("momentum_buffer",)
    array_keys = ("momentum_buffer",)

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        # PyTorch's order and keywords: `fused` and `differentiable` pick a kernel, not a result.
        flags = dict(maximize=maximize, differentiable=differentiable, fused=fused)
        _check_flags(type(self).__name__, flags)
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            nesterov=nesterov,
            weight_decay=weight_decay,
            foreach=foreach,
        )
        super().__init__(params, defaults)

    def _validate(self, group: dict[str, Any]) -> None:
        for name in ("lr", "momentum", "dampening", "weight_decay"):
            _check_number(self.name, name, group[name], 0.0)
        _check_foreach(self.name, group["foreach"])
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise TinyattnError("SGD: nesterov momentum needs momentum > 0 and dampening = 0")

    def _update(self, param: Any, grad: Any, group: dict, state: dict) -> Any:
        momentum, ops = group["momentum"], _Opmath(param, self.name)  # a PyTorch op per store
        param, grad = ops.wide(param), ops.wide(grad)
        if group["weight_decay"]:
            grad = ops.store(grad + ops.added("weight_decay", group["weight_decay"]) * param)
        if momentum:
            buffer = state.get("momentum_buffer")
            if buffer is None:
                buffer = grad
            else:
                buffer = ops.store(momentum * ops.wide(buffer))
                dampened = ops.added("1 - dampening", 1.0 - group["dampening"])
                buffer = ops.store(buffer + dampened * grad)
            state["momentum_buffer"] = ops.narrow(buffer)
            if group["nesterov"]:
                grad = ops.store(grad + ops.added("momentum", momentum) * buffer)
            else:
                grad = buffer
        return ops.narrow(param - ops.added("lr", group["lr"]) * grad)

    def _flat_ready(self, params: list[Tensor], states: list[dict], group: dict) -> bool:
        # Every parameter has a momentum buffer, or none has one yet.
        return len({"momentum_buffer" in state for state in states}) == 1

    def _update_flat(self, flat: FlatGroup, states: list[dict], group: dict) -> None:
        """`_update` on the flat buffers, operation for operation (each product in the order
        of its operands swapped, which IEEE multiplication allows)."""
        momentum, param, grad, scratch = group["momentum"], flat.values, flat.grads, flat.scratch
        if group["weight_decay"]:
            grad += into(scratch, "multiply", param, group["weight_decay"])
        if momentum:
            buffer = flat.state.get("momentum_buffer")
            if buffer is None:  # the first step: the buffer starts as the gradient
                flat.adopt("momentum_buffer", flat.xp.asarray(grad, copy=True), states)
                buffer = flat.state["momentum_buffer"]
            else:
                buffer *= momentum
                buffer += into(scratch, "multiply", grad, 1.0 - group["dampening"])
            if group["nesterov"]:
                grad += into(scratch, "multiply", buffer, momentum)
            else:
                grad = buffer
        param -= into(scratch, "multiply", grad, group["lr"])


# -------------------------------------------------------------------------------------- Adam


def _lerp(start: Any, end: Any, weight: float) -> Any:
    """start + weight * (end - start), in the form PyTorch's CPU kernel picks for this weight."""
    if weight < 0.5:
        return start + weight * (end - start)
    return end - (end - start) * (1.0 - weight)


class Adam(Optimizer):
    """Adam (Kingma & Ba), PyTorch's rule, with t the step count:
    g = grad + weight_decay * p;  m = lerp(m, g, 1 - beta1);  v = beta2 v + (1 - beta2) g^2;
    p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
    """

    state_keys = ("step", "exp_avg", "exp_avg_sq")
    array_keys = ("exp_avg", "exp_avg_sq")
    decoupled = False  # AdamW: decay the weights directly instead of through the gradient

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        decoupled_weight_decay: bool = False,
    ) -> None:
        # PyTorch's keywords: the kernel hints are accepted, the result flags checked.
        flags = dict(
            amsgrad=amsgrad,
            maximize=maximize,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=decoupled_weight_decay or self.decoupled,
        )
        _check_flags(type(self).__name__, flags, decoupled=self.decoupled)
        defaults = dict(
            lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, foreach=foreach
        )
        super().__init__(params, defaults)

    def _validate(self, group: dict[str, Any]) -> None:
        for name in ("lr", "eps", "weight_decay"):
            _check_number(self.name, name, group[name], 0.0)
        _check_foreach(self.name, group["foreach"])
        betas = group["betas"]
        if not isinstance(betas, tuple | list) or len(betas) != 2:
            raise TinyattnError(f"{self.name}: betas must be a pair (beta1, beta2), got {betas!r}")
        for index, beta in enumerate(betas):
            _check_number(self.name, f"beta at index {index}", beta, 0.0, 1.0)
        group["betas"] = tuple(betas)

    @staticmethod
    def _init_state(state: dict, param: Any) -> None:
        xp = backend.namespace(param)
        state["step"] = 0
        state["exp_avg"] = xp.zeros_like(param)
        state["exp_avg_sq"] = xp.zeros_like(param)

    def _update(self, param: Any, grad: Any, group: dict, state: dict) -> Any:
        xp = backend.namespace(param)
        lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        if not state:
            self._init_state(state, param)
        ops = _Opmath(param, self.name)  # one PyTorch op per `ops.store`
        param, grad = ops.wide(param), ops.wide(grad)
        exp_avg, exp_avg_sq = ops.wide(state["exp_avg"]), ops.wide(state["exp_avg_sq"])
        if self.decoupled:
            param = ops.store(param * (1.0 - lr * decay))
        elif decay:
            grad = ops.store(grad + ops.added("weight_decay", decay) * param)
        state["step"] += 1
        step = state["step"]
        exp_avg = ops.store(_lerp(exp_avg, grad, 1.0 - beta1))
        exp_avg_sq = ops.store(ops.store(exp_avg_sq * beta2) + (1.0 - beta2) * (grad * grad))
        step_size = lr / (1.0 - beta1**step)
        root = ops.store(xp.sqrt(exp_avg_sq))
        denominator = ops.store(
            ops.store(root / math.sqrt(1.0 - beta2**step)) + ops.added("eps", eps)
        )
        state["exp_avg"], state["exp_avg_sq"] = ops.narrow(exp_avg), ops.narrow(exp_avg_sq)
        return ops.narrow(param + (-step_size) * (exp_avg / denominator))

    def _flat_ready(self, params: list[Tensor], states: list[dict], group: dict) -> bool:
        # One step count t serves the whole buffer: every parameter must have taken as many steps.
        for p, state in zip(params, states, strict=True):
            if not state:
                self._init_state(state, p.array)
        return len({state.get("step") for state in states}) == 1

    def _update_flat(self, flat: FlatGroup, states: list[dict], group: dict) -> None:
        """`_update` on the flat buffers, operation for operation (each product in the order
        of its operands swapped, which IEEE multiplication allows):
        m = lerp(m, g, 1 - beta1);  v = v beta2 + (1 - beta2) g^2;
        p = p + (-lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)."""
        lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        param, grad, scratch, spare = flat.values, flat.grads, flat.scratch, flat.spare
        exp_avg, exp_avg_sq = flat.state["exp_avg"], flat.state["exp_avg_sq"]
        if self.decoupled:
            param *= 1.0 - lr * decay
        elif decay:
            grad += into(scratch, "multiply", param, decay)
        for state in states:
            state["step"] += 1
        step = states[0]["step"]
        # exp_avg = _lerp(exp_avg, grad, weight), in the same branch
        weight = 1.0 - beta1
        difference = into(scratch, "subtract", grad, exp_avg)
        if weight < 0.5:
            difference *= weight
            exp_avg += difference
        else:
            difference *= 1.0 - weight
            into(exp_avg, "subtract", grad, difference)
        exp_avg_sq *= beta2
        square = into(scratch, "multiply", grad, grad)
        square *= 1.0 - beta2
        exp_avg_sq += square
        step_size = lr / (1.0 - beta1**step)
        denominator = into(spare, "sqrt", exp_avg_sq)
        denominator /= math.sqrt(1.0 - beta2**step)
        denominator += eps
        update = into(spare, "divide", exp_avg, denominator)
        update *= -step_size
        param += update


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter), PyTorch's rule:
    p = p * (1 - lr * weight_decay), then the Adam step on the raw gradient.
    """

    decoupled = True

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        super().__init__(
            params,
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            foreach=foreach,
            maximize=maximize,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
        )


# ---------------------------------------------------------------------------------- clipping


@replayed_call  # a compiled step runs it on every replay
def clip_grad_norm(params: Iterable[Tensor] | Tensor, max_norm: float, eps: float = 1e-6) -> float:
    """Scale all gradients by min(1, max_norm / (total + eps)), total = sqrt(sum of |g|^2) over
    every parameter (PyTorch's rule); returns the total norm before clipping as a float.

    Gradients that share an array type, dtype and device are laid end to end and summed in one
    call, so the total reaches Python in one host read (one device synchronisation on a GPU),
    not one per parameter. Each gradient is replaced by a new Tensor, never scaled in place
    (gradients may share arrays).
    """
    _check_number("clip_grad_norm", "max_norm", max_norm, 0.0)
    params = [params] if isinstance(params, Tensor) else list(params)
    grads = [p for p in params if p.grad is not None]
    arrays = [p.grad.array for p in grads]
    if arrays and same_kind(arrays[0], arrays):
        xp = backend.namespace(arrays[0])
        flat = xp.concat([xp.reshape(array, (-1,)) for array in arrays])
        squares = float(xp.sum(flat * flat))
    else:  # mixed dtypes or devices: one partial sum (and host read) per gradient
        squares = 0.0
        for array in arrays:
            squares += float(backend.namespace(array).sum(array * array))
    total = math.sqrt(squares)
    scale = min(1.0, max_norm / (total + eps))
    for p in grads:
        p.grad = Tensor._from_op(p.grad.array * scale, None)
    return total


__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "clip_grad_norm"]
