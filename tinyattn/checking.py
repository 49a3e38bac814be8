"""Gradient checker: compare backward rules with central finite differences.

Imports `backend` and `autograd` only (the Tensors it is given make the ones it needs). Public
API (``ta.gradcheck``, ``ta.gradgradcheck``, ``ta.numerical_grad``), not a test helper. The
module is named `checking`, not `gradcheck`, so that ``ta.gradcheck`` is always the function: a
submodule of the same name would replace it as an attribute of the package when imported.
Invariants:
- the analytic gradient is computed in the inputs' own dtype (the code you ship), the numeric one in
  float64 whatever that dtype (inputs and params are cast for the check and restored afterwards);
- the output is contracted with a seeded random cotangent, never all-ones (with ones, a softmax
  whose backward returns zeros would pass, because every softmax row sums to one);
- a failure raises GradcheckError naming the input or parameter, the worst element's index, both
  values, the absolute and relative error and the tolerances used;
- with ``allow_kinks=True`` an element whose one-sided differences disagree (the step straddles a
  kink: relu or abs at 0, a tie in max, clip at a bound) passes when the analytic value lies
  between the two one-sided derivatives, the one-dimensional subgradient interval.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from . import backend
from .autograd import forward_ad
from .autograd.engine import grad as autograd_grad
from .errors import TinyattnError

# Defaults by the dtype of the inputs checked. The numeric side always runs in float64, so eps is
# small for both; float32 tolerances absorb the float32 rounding of the analytic gradient.
# docs/gradcheck.md shows the eps study: central differences computed *in* float32 are best near
# eps = 3e-3 (median relative error about 7e-6, worst over 200 points about 2e-3), which is why
# we evaluate them in float64.
DEFAULTS = {
    "float64": {"eps": 1e-6, "atol": 1e-5, "rtol": 1e-3},
    "float32": {"eps": 1e-6, "atol": 1e-4, "rtol": 2e-3},
    "float16": {"eps": 1e-6, "atol": 1e-2, "rtol": 1e-2},
}
# Used when the function ignores the float64 cast and still computes in float32: the eps with the
# smallest median and worst error in that study.
EPS_IF_STILL_FLOAT32 = 3e-3


class GradcheckError(AssertionError):
    """Raised when an analytic gradient disagrees with finite differences."""


# ------------------------------------------------------------------------------------ tensors
# The checker takes Tensors and makes new ones through their own methods: it imports the
# autograd layer, not the tensor layer, so autograd's gradcheck (PyTorch's path) can use it.
def _is_tensor(value: Any) -> bool:
    return hasattr(value, "_ctx") and hasattr(value, "array")


def _like(tensor: Any, values: Any) -> Any:
    """Host `values` as a constant Tensor of `tensor`'s dtype and device."""
    dtype = backend.dtype_name(tensor.dtype)
    return tensor.constant(backend.asarray(values, dtype=dtype, device=tensor.device))


# ------------------------------------------------------------------------------------ targets
class _Target:
    """One tensor whose gradient is checked: an input that requires grad, or a parameter."""

    __slots__ = ("tensor", "label", "original")

    def __init__(self, tensor: Any, label: str) -> None:
        self.tensor, self.label, self.original = tensor, label, tensor.array


def _targets(inputs: Sequence[Any], params: Any) -> list[_Target]:
    found = [
        _Target(t, f"input {i}") for i, t in enumerate(inputs) if _is_tensor(t) and t.requires_grad
    ]
    if hasattr(params, "named_parameters"):
        named = list(params.named_parameters())
    elif isinstance(params, dict):
        named = list(params.items())
    else:
        named = [(f"params[{i}]", p) for i, p in enumerate(params)]
    found += [_Target(p, f"parameter '{name}'") for name, p in named]
    if not found:
        raise TinyattnError("gradcheck: no input requires grad and no params were given")
    for target in found:
        if not backend.is_floating(backend.namespace(target.tensor.array), target.tensor.dtype):
            raise TypeError(
                f"gradcheck: {target.label} has non-floating dtype "
                f"{backend.dtype_name(target.tensor.dtype)}"
            )
    return found


def _outputs(result: Any) -> list[Any]:
    """The floating-point Tensor outputs (integer or bool outputs have no gradient)."""
    outs = list(result) if isinstance(result, tuple | list) else [result]
    return [
        o
        for o in outs
        if _is_tensor(o) and backend.is_floating(backend.namespace(o.array), o.dtype)
    ]


def _cotangents(outputs: Sequence[Any], seed: int) -> list[Any]:
    """Seeded standard-normal host arrays, one per output (fixed across dtypes and devices)."""
    rng = backend.make_rng(seed)
    return [rng.standard_normal(o.shape) for o in outputs]


def _input_dtype(targets: Sequence[_Target]) -> str:
    names = {backend.dtype_name(t.tensor.dtype) for t in targets}
    for name in ("float16", "float32", "float64"):
        if name in names:
            return name
    return "float64"


# ------------------------------------------------------------------------------------- analytic
def _analytic(fn: Callable, inputs: Sequence[Any], targets: list[_Target], seed: int) -> list:
    """VJP with the seeded cotangent, in the inputs' own dtypes, as host float64 arrays."""
    outputs = _outputs(fn(*inputs))
    if not outputs:
        raise TinyattnError("gradcheck: the function returned no floating-point tensor")
    pairs = [(o, c) for o, c in zip(outputs, _cotangents(outputs, seed)) if o.requires_grad]
    if not pairs:  # nothing depends on the targets: the gradient is zero
        return [backend.host_zeros(t.tensor.shape) for t in targets]
    seeds = [_like(o, c) for o, c in pairs]
    grads = autograd_grad(
        [o for o, _ in pairs], [t.tensor for t in targets], seeds, allow_unused=True
    )
    result = []
    for target, g in zip(targets, grads):
        if g is None:
            result.append(backend.host_zeros(target.tensor.shape))
        else:
            result.append(backend.to_numpy(g.array).astype("float64"))
    return result


# ------------------------------------------------------------------------------------- numeric
def _contracted(fn: Callable, inputs: Sequence[Any], cotangents: list) -> tuple[float, str, float]:
    """phi(x) = sum over outputs of <cotangent, output>, in float64; also the output dtype and
    the sum of the terms' magnitudes (what float64 rounding of phi is proportional to)."""
    outputs = _outputs(fn(*inputs))
    total = magnitude = 0.0
    dtype = "float64"
    for out, cot in zip(outputs, cotangents):
        terms = backend.to_numpy(out.array).astype("float64") * cot
        total += float(terms.sum())
        magnitude += float(abs(terms).sum())
        dtype = backend.dtype_name(out.dtype)
    return total, dtype, magnitude


# float64's machine epsilon: the rounding allowance of a difference is 4 * this * magnitude / eps.
FLOAT64_EPSILON = 2.0**-52


class _Float64View:
    """Swap every floating input and target to float64 for the numeric pass; restore on exit."""

    def __init__(self, inputs: Sequence[Any], targets: list[_Target]) -> None:
        seen: dict[int, Any] = {}
        for t in list(inputs) + [target.tensor for target in targets]:
            if _is_tensor(t) and backend.is_floating(backend.namespace(t.array), t.dtype):
                seen[id(t)] = t
        self.tensors = list(seen.values())
        self.saved = [t.array for t in self.tensors]

    def __enter__(self) -> _Float64View:
        for t in self.tensors:
            xp = backend.namespace(t.array)
            t.array = xp.astype(t.array, xp.float64)
        return self

    def __exit__(self, *exc: object) -> None:
        for t, data in zip(self.tensors, self.saved):
            t.array = data


def _perturbed(fn: Callable, inputs: Sequence[Any], target: Any, host: Any, cot: list) -> float:
    target.array = backend.asarray(host, dtype="float64", device=target.device)
    return _contracted(fn, inputs, cot)[0]


def _numeric_eps(fn: Callable, inputs: Sequence[Any], cotangents: list, eps: float | None) -> float:
    """The given eps, or the default for the dtype the function actually computes in."""
    if eps is not None:
        return eps
    out_dtype = _contracted(fn, inputs, cotangents)[1]
    return EPS_IF_STILL_FLOAT32 if out_dtype != "float64" else DEFAULTS["float64"]["eps"]


class _Numeric:
    """Central and one-sided differences for every target, and phi(x) itself."""

    def __init__(self, eps: float, center: float, magnitude: float) -> None:
        self.eps, self.center = eps, center
        # A difference of two values of phi cannot resolve less than their rounding: outputs
        # of very different sizes (a ** b up to 1e10 beside 1) need this allowance.
        self.rounding = 4.0 * FLOAT64_EPSILON * magnitude / eps
        self.central: list = []
        self.forward: list = []
        self.backward: list = []


def _numeric(
    fn: Callable, inputs: Sequence[Any], targets: list[_Target], seed: int, eps: float | None
) -> _Numeric:
    """Central differences of phi for every element of every target (2 forwards per element),
    and the forward and backward one-sided differences from the same calls plus phi(x)."""
    # Grad mode stays on: gradgradcheck's function calls grad() inside.
    cotangents = _cotangents(_outputs(fn(*inputs)), seed)
    with _Float64View(inputs, targets):
        eps = _numeric_eps(fn, inputs, cotangents, eps)
        center, _, magnitude = _contracted(fn, inputs, cotangents)
        result = _Numeric(eps, center, magnitude)
        for target in targets:
            tensor = target.tensor
            base = backend.to_numpy(tensor.array).astype("float64")
            up = _steps(fn, inputs, tensor, base, cotangents, eps)
            down = _steps(fn, inputs, tensor, base, cotangents, -eps)
            tensor.array = backend.asarray(base, dtype="float64", device=tensor.device)
            result.central.append(((up - down) / (2.0 * eps)).reshape(base.shape))
            result.forward.append(((up - result.center) / eps).reshape(base.shape))
            result.backward.append(((result.center - down) / eps).reshape(base.shape))
    return result


def _steps(
    fn: Callable,
    inputs: Sequence[Any],
    tensor: Any,
    base: Any,
    cot: list,
    step: float,
    where: Any = None,
) -> Any:
    """phi(x + step e_k) for every element k of `tensor` (or those where `where` is True)."""
    values = backend.host_zeros((base.size,))
    for k in range(base.size):
        if where is None or where.reshape(-1)[k]:
            moved = base.copy()
            moved.reshape(-1)[k] += step
            values[k] = _perturbed(fn, inputs, tensor, moved, cot)
    return values


def _accepted_at_kinks(
    fn: Callable,
    inputs: Sequence[Any],
    targets: list[_Target],
    seed: int,
    analytic: Any,
    numeric: _Numeric,
    i: int,
    tolerances: tuple,
) -> Any:
    """The elements of target `i` that fail the central check but sit at a kink or a jump.

    Three cases, tried in order (the last two probe the failing elements again at eps / 2):
    - a kink at x: the one-sided differences disagree, and the analytic value lies between
      them, the one-dimensional subgradient interval (relu at 0 may return 0 or 1 or between);
    - a jump at x (the first derivative of max at a tie, under gradgradcheck): on one side
      the change of phi does not shrink with the step, so no derivative exists there to check;
    - a kink or jump inside the step but not at x: the one-sided slopes at eps and eps / 2
      disagree; the analytic value must lie between the four of them.
    """
    atol, rtol = tolerances
    central, forward, backward = (
        a.reshape(-1) for a in (numeric.central[i], numeric.forward[i], numeric.backward[i])
    )
    analytic = analytic.reshape(-1)
    allowed = atol + rtol * abs(central) + numeric.rounding
    failing = abs(analytic - central) > allowed
    at_kink = (abs(forward - backward) > allowed) & _between(analytic, [forward, backward], allowed)
    probe = failing & ~at_kink
    if not probe.any():
        return failing & at_kink
    eps, center = numeric.eps, numeric.center
    cotangents = _cotangents(_outputs(fn(*inputs)), seed)
    with _Float64View(inputs, targets):
        tensor = targets[i].tensor
        base = backend.to_numpy(tensor.array).astype("float64")
        up = _steps(fn, inputs, tensor, base, cotangents, eps / 2, probe)
        down = _steps(fn, inputs, tensor, base, cotangents, -eps / 2, probe)
        tensor.array = backend.asarray(base, dtype="float64", device=tensor.device)
    forward_half, backward_half = (up - center) / (eps / 2), (center - down) / (eps / 2)
    # On either side: the change over eps / 2 about as large as over eps, and above rounding.
    floor = 1e-9 * (1.0 + abs(center))
    jump = _no_shrink(abs(up - center), abs(forward) * eps, floor) | _no_shrink(
        abs(center - down), abs(backward) * eps, floor
    )
    unsettled = (abs(forward_half - forward) > allowed) | (abs(backward_half - backward) > allowed)
    inside = unsettled & _between(
        analytic, [forward, backward, forward_half, backward_half], allowed
    )
    return failing & (at_kink | (probe & (jump | inside)))


def _no_shrink(change_half: Any, change: Any, floor: float) -> Any:
    """A jump: halving the step leaves the change of phi at least 3/4 of what it was."""
    return (change_half > 0.75 * change) & (change_half > floor)


def _between(value: Any, bounds: list, allowed: Any) -> Any:
    """value within [min(bounds) - allowed, max(bounds) + allowed], element-wise."""
    low, high = bounds[0], bounds[0]
    for bound in bounds[1:]:
        low, high = _minimum(low, bound), _maximum(high, bound)
    return (value >= low - allowed) & (value <= high + allowed)


def numerical_grad(
    fn: Callable, inputs: Sequence[Any], params: Any = (), eps: float | None = None, seed: int = 0
) -> tuple[Any, ...]:
    """Finite-difference gradients of ``<v, fn(*inputs)>`` (v: the seeded random cotangent) with
    respect to every input that requires grad and every parameter, as float64 host tensors."""
    inputs = _as_tuple(inputs)
    targets = _targets(inputs, params)
    numeric = _numeric(fn, inputs, targets, seed, eps)
    return tuple(
        t.tensor.constant(backend.asarray(g, dtype="float64"))
        for t, g in zip(targets, numeric.central)
    )


# ------------------------------------------------------------------------------------ compare
def _report(
    target: _Target,
    analytic: Any,
    numeric: _Numeric,
    i: int,
    accepted: Any,
    tolerances: tuple,
) -> str | None:
    """A failure report for target `i`, or None when every element is within tolerance or
    is `accepted` (at a kink, with ``allow_kinks``)."""
    central = numeric.central[i]
    if analytic.shape != central.shape:
        return (
            f"{target.label}: analytic gradient has shape {analytic.shape}, "
            f"expected {central.shape}"
        )
    if analytic.size == 0:
        return None
    atol, rtol = tolerances
    shape = analytic.shape
    # Flat views: 0-d arithmetic would give NumPy scalars, which take no item assignment.
    analytic, central, forward, backward = (
        a.reshape(-1) for a in (analytic, central, numeric.forward[i], numeric.backward[i])
    )
    error = abs(analytic - central)
    allowed = atol + rtol * abs(central) + numeric.rounding
    bad = (error > allowed) & ~accepted
    nan = (analytic != analytic) | (central != central)
    if not bad.any() and not nan.any():
        return None
    ratio = error / allowed
    ratio[~bad] = 0.0
    ratio[nan] = float("inf")
    worst = int(ratio.argmax())
    index = tuple(int(k) for k in _unravel(worst, shape))
    a, n = float(analytic[worst]), float(central[worst])
    abs_err = abs(a - n)
    rel_err = abs_err / abs(n) if n != 0 else math.inf
    count = int((bad | nan).sum())
    dtype = backend.dtype_name(target.original.dtype)
    lines = [
        f"{target.label} (shape {shape}, {dtype}): {count} of {analytic.size} element(s) differ; "
        f"worst at index {index}:",
        f"    analytic  = {a:.10g}",
        f"    numeric   = {n:.10g}",
        f"    abs error = {abs_err:.3e}, rel error = {rel_err:.3e}",
        _allowed_line(atol, rtol, n, numeric),
    ]
    f, b = float(forward[worst]), float(backward[worst])
    if abs(f - b) > float(allowed[worst]):
        lines.append(
            f"    the step straddles a kink here: one-sided differences {b:.10g} (from below) "
            f"and {f:.10g} (from above)"
        )
    if accepted.any():
        lines.append(f"    ({int(accepted.sum())} other element(s) at kinks were accepted)")
    return "\n".join(lines)


def _allowed_line(atol: float, rtol: float, n: float, numeric: _Numeric) -> str:
    """The tolerance applied, with the rounding allowance where it matters."""
    total = atol + rtol * abs(n)
    formula, values = "atol + rtol*|numeric|", f"{atol:g} + {rtol:g}*{abs(n):.4g}"
    if numeric.rounding > 1e-3 * atol:
        formula, values = formula + " + rounding", values + f" + {numeric.rounding:.3g}"
        total += numeric.rounding
    return f"    allowed   = {formula} = {values} = {total:.3e}   (eps={numeric.eps:g})"


def _minimum(a: Any, b: Any) -> Any:
    """Element-wise minimum of two host arrays (by mask: no NumPy import outside backend)."""
    result = a.copy()
    result[b < a] = b[b < a]
    return result


def _maximum(a: Any, b: Any) -> Any:
    result = a.copy()
    result[b > a] = b[b > a]
    return result


def _unravel(flat: int, shape: tuple) -> list[int]:
    index = []
    for n in reversed(shape):
        index.append(flat % n)
        flat //= n
    return list(reversed(index))


def _as_tuple(inputs: Any) -> tuple:
    return tuple(inputs) if isinstance(inputs, tuple | list) else (inputs,)


def _tolerances(targets: list[_Target], eps: Any, atol: Any, rtol: Any) -> tuple:
    defaults = DEFAULTS[_input_dtype(targets)]
    return (
        eps,
        defaults["atol"] if atol is None else atol,
        defaults["rtol"] if rtol is None else rtol,
    )


# --------------------------------------------------------------------------------------- public
def gradcheck(
    fn: Callable,
    inputs: Any,
    params: Any = (),
    eps: float | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    fast: bool = False,
    seed: int = 0,
    name: str = "gradcheck",
    allow_kinks: bool = False,
    check_forward_ad: bool = False,
    check_backward_ad: bool = True,
    check_batched_grad: bool = False,
) -> bool:
    """Check the backward of ``fn(*inputs)`` against central differences; True or GradcheckError.

    Every input with ``requires_grad`` and every tensor in `params` (a Module, a dict of named
    tensors, or a sequence) is checked. Defaults depend on the input dtype (see DEFAULTS).
    ``fast=True`` compares directional derivatives along three seeded random directions (each a
    JVP by differences against the VJP) and falls back to the element-wise check to report a
    failure. ``allow_kinks=True`` accepts, where the step straddles a kink (the one-sided
    differences disagree), any analytic value between the two one-sided derivatives.
    ``check_forward_ad=True`` also checks the jvp rules: J v by forward mode against central
    differences of the outputs along random directions v, and against the backward rules by the
    adjoint identity ``<J v, u> == <v, J^T u>``; ``check_backward_ad=False`` checks forward mode
    alone; ``check_batched_grad=True`` checks that gradients are linear in the cotangent.
    """
    inputs = _as_tuple(inputs)
    targets = _targets(inputs, params)
    eps, atol, rtol = _tolerances(targets, eps, atol, rtol)
    analytic, problems = None, []
    if check_backward_ad:
        analytic = _analytic(fn, inputs, targets, seed)
    elif check_forward_ad:  # J^T u for the adjoint identity, where backward exists at all
        analytic = _analytic_if_any(fn, inputs, targets, seed)
    if check_backward_ad:
        problems = _backward_problems(
            fn, inputs, targets, analytic, seed, eps, atol, rtol, fast, allow_kinks, name
        )
    if check_forward_ad and not problems:
        problems = _forward_check(
            fn, inputs, targets, seed, eps, (atol, rtol), allow_kinks, analytic
        )
    if check_batched_grad and check_backward_ad and not problems:
        problems = _batched_problem(fn, inputs, targets, seed, (atol, rtol))
    if problems:
        raise GradcheckError(f"{name} failed:\n" + "\n".join(problems))
    return True


def _analytic_if_any(
    fn: Callable, inputs: Sequence[Any], targets: list[_Target], seed: int
) -> list | None:
    """The VJP, or None for a function with forward mode only (its backward raises)."""
    try:
        return _analytic(fn, inputs, targets, seed)
    except NotImplementedError:
        return None


def _backward_problems(
    fn: Callable,
    inputs: Sequence[Any],
    targets: list[_Target],
    analytic: list,
    seed: int,
    eps: float | None,
    atol: float,
    rtol: float,
    fast: bool,
    allow_kinks: bool,
    name: str,
) -> list[str]:
    """The backward rules' disagreements with central differences, element by element."""
    if fast and _fast_agrees(fn, inputs, targets, analytic, seed, eps, atol, rtol):
        return []
    numeric = _numeric(fn, inputs, targets, seed, eps)
    problems = []
    for i, (target, values) in enumerate(zip(targets, analytic)):
        accepted = backend.host_zeros((values.size,)) > 0.0
        if allow_kinks and values.shape == numeric.central[i].shape:
            accepted = _accepted_at_kinks(
                fn, inputs, targets, seed, values, numeric, i, (atol, rtol)
            )
        report = _report(target, values, numeric, i, accepted, (atol, rtol))
        if report is not None:
            problems.append(report)
    if not problems and fast and not allow_kinks:
        warnings.warn(
            f"{name}: the fast random-direction check failed but every element agrees within "
            "tolerance; the accumulated error of the directional derivative exceeded its bound",
            stacklevel=3,
        )
    return problems


FAST_DIRECTIONS = 3


def _fast_agrees(
    fn: Callable,
    inputs: Sequence[Any],
    targets: list[_Target],
    analytic: list,
    seed: int,
    eps: float | None,
    atol: float,
    rtol: float,
) -> bool:
    """Directional derivatives: <analytic, u> against (phi(x + eps u) - phi(x - eps u)) / 2 eps.

    u is a seeded random unit vector over all targets. Tolerance: atol + rtol * |numeric|, the
    element-wise rule applied to the directional derivative. A few directions are tried because
    one can be nearly orthogonal to the gradient, which hides a scale error (Chainer #8025).
    """
    rng = backend.make_rng(seed + 1)
    cotangents = _cotangents(_outputs(fn(*inputs)), seed)
    for _ in range(FAST_DIRECTIONS):
        directions = [rng.standard_normal(t.tensor.shape) for t in targets]
        norm = math.sqrt(sum(float((d * d).sum()) for d in directions)) or 1.0
        directions = [d / norm for d in directions]
        expected = sum(float((g * d).sum()) for g, d in zip(analytic, directions))
        with _Float64View(inputs, targets):
            eps = _numeric_eps(fn, inputs, cotangents, eps)
            bases = [backend.to_numpy(t.tensor.array).astype("float64") for t in targets]
            values = []
            for sign in (1.0, -1.0):
                for t, base, d in zip(targets, bases, directions):
                    shifted = base + sign * eps * d
                    t.tensor.array = backend.asarray(
                        shifted, dtype="float64", device=t.tensor.device
                    )
                values.append(_contracted(fn, inputs, cotangents)[0])
        numeric = (values[0] - values[1]) / (2.0 * eps)
        if abs(numeric - expected) > atol + rtol * abs(numeric):
            return False
    return True


# --------------------------------------------------------------------------------- forward mode
FORWARD_DIRECTIONS = 2  # random tangent directions per forward check


def _jvp(fn: Callable, inputs: Sequence[Any], targets: list[_Target], directions: list) -> list:
    """J v by forward mode: every target dual with its direction (in its own dtype), the
    outputs' tangents as host float64 arrays (zeros where an output got none)."""
    pairs = [(t.tensor, _like(t.tensor, d)) for t, d in zip(targets, directions)]
    with forward_ad.tangents_on(pairs) as tangent_of:
        outputs = _outputs(fn(*inputs))
        tangents = [tangent_of(o) for o in outputs]
    return [
        backend.host_zeros(o.shape) if t is None else backend.to_numpy(t.array).astype("float64")
        for o, t in zip(outputs, tangents)
    ]


def _outputs_along(
    fn: Callable, inputs: Sequence[Any], targets: list[_Target], directions: list, step: float
) -> list:
    """The outputs at x + step * v, as host float64 arrays (inside `_Float64View`), each with
    the machine epsilon of the dtype it came in (an output cast to float32 is rounded so)."""
    for t, d in zip(targets, directions):
        base = backend.to_numpy(t.original).astype("float64")
        t.tensor.array = backend.asarray(base + step * d, dtype="float64", device=t.tensor.device)
    outputs = [backend.to_numpy(o.array) for o in _outputs(fn(*inputs))]
    return [(o.astype("float64"), _epsilon(o.dtype)) for o in outputs]


def _epsilon(dtype: Any) -> float:
    """The machine epsilon of a host float dtype: float16's, float32's, else float64's."""
    return {2: 2.0**-10, 4: 2.0**-23}.get(dtype.itemsize, FLOAT64_EPSILON)


def _forward_report(
    label: str, jvp: Any, steps: tuple, eps: float, tolerances: tuple, allow_kinks: bool
) -> str | None:
    """Output `label`'s J v against central differences along v; one-sided ones at kinks.
    `steps`: the output at x, x + eps v and x - eps v, each (float64 values, its epsilon)."""
    atol, rtol = tolerances
    center, up, down = (a.reshape(-1) for a, _ in steps)
    jvp = jvp.reshape(-1)
    central = (up - down) / (2.0 * eps)
    rounding = 4.0 * steps[0][1] * (abs(center) + abs(up) + abs(down)) / eps
    allowed = atol + rtol * abs(central) + rounding
    bad = ~(abs(jvp - central) <= allowed)  # NaN fails
    if allow_kinks and bad.any():
        one_sided = [(up - center) / eps, (center - down) / eps]
        bad &= ~((abs(one_sided[0] - one_sided[1]) > allowed) & _between(jvp, one_sided, allowed))
    if not bad.any():
        return None
    worst = int((abs(jvp - central) / allowed * bad).argmax()) if not (jvp != jvp).any() else 0
    return (
        f"{label}: forward-mode JVP disagrees with finite differences along a random direction "
        f"in {int(bad.sum())} of {jvp.size} element(s); worst at flat index {worst}: "
        f"jvp = {float(jvp[worst]):.10g}, numeric = {float(central[worst]):.10g}, "
        f"allowed = {float(allowed[worst]):.3e} (eps={eps:g})"
    )


def _forward_check(
    fn: Callable,
    inputs: Sequence[Any],
    targets: list[_Target],
    seed: int,
    eps: float | None,
    tolerances: tuple,
    allow_kinks: bool,
    analytic: list | None,
) -> list[str]:
    """Forward mode, along random directions v: J v against central differences of the outputs
    along v, and (given the VJP `analytic` = J^T u for the seeded cotangent u) the adjoint
    identity <J v, u> == <v, J^T u>. Returns the problems found."""
    rng = backend.make_rng(seed + 11)
    cotangents = _cotangents(_outputs(fn(*inputs)), seed)
    problems = []
    for _ in range(FORWARD_DIRECTIONS):
        directions = [rng.standard_normal(t.tensor.shape) for t in targets]
        jvps = _jvp(fn, inputs, targets, directions)
        with _Float64View(inputs, targets):
            step = _numeric_eps(fn, inputs, cotangents, eps)
            steps = [_outputs_along(fn, inputs, targets, directions, h) for h in (0, step, -step)]
        for k, jvp in enumerate(jvps):
            outs = tuple(s[k] for s in steps)  # (values, epsilon) at x, x + step v, x - step v
            report = _forward_report(f"output {k}", jvp, outs, step, tolerances, allow_kinks)
            if report is not None:
                problems.append(report)
        if analytic is not None:
            problems += _adjoint_problem(jvps, cotangents, directions, analytic, tolerances)
        if problems:
            break
    return problems


def _adjoint_problem(
    jvps: list, cotangents: list, directions: list, analytic: list, tolerances: tuple
) -> list[str]:
    """<J v, u> (forward mode) against <v, J^T u> (reverse mode): the two rules are adjoint."""
    atol, rtol = tolerances
    forward = sum(float((j * u).sum()) for j, u in zip(jvps, cotangents))
    reverse = sum(float((v * g).sum()) for v, g in zip(directions, analytic))
    magnitude = sum(float(abs(j * u).sum()) for j, u in zip(jvps, cotangents))
    magnitude += sum(float(abs(v * g).sum()) for v, g in zip(directions, analytic))
    allowed = atol + rtol * magnitude
    if abs(forward - reverse) <= allowed:
        return []
    return [
        "forward and reverse mode disagree: <J v, u> (from the jvp rules) = "
        f"{forward:.10g} but <v, J^T u> (from the backward rules) = {reverse:.10g}; "
        f"allowed {allowed:.3e}"
    ]


def _batched_problem(
    fn: Callable, inputs: Sequence[Any], targets: list[_Target], seed: int, tolerances: tuple
) -> list[str]:
    """Batched gradients, by a loop: the VJP of a sum of two cotangents equals the sum of the
    VJPs (what a vmap over cotangents relies on)."""
    first, second = _analytic(fn, inputs, targets, seed + 3), _analytic(fn, inputs, targets, seed)
    outputs = _outputs(fn(*inputs))
    both = [a + b for a, b in zip(_cotangents(outputs, seed + 3), _cotangents(outputs, seed))]
    pairs = [(o, c) for o, c in zip(outputs, both) if o.requires_grad]
    if not pairs:
        return []
    seeds = [_like(o, c) for o, c in pairs]
    grads = autograd_grad(
        [o for o, _ in pairs], [t.tensor for t in targets], seeds, allow_unused=True
    )
    atol, rtol = tolerances
    problems = []
    for target, g, a, b in zip(targets, grads, first, second):
        summed = backend.host_zeros(a.shape) if g is None else backend.to_numpy(g.array)
        if not (abs(summed - (a + b)) <= atol + rtol * abs(a + b)).all():
            problems.append(f"{target.label}: batched gradients are not linear in the cotangent")
    return problems


def gradgradcheck(
    fn: Callable,
    inputs: Any,
    params: Any = (),
    eps: float | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    fast: bool = False,
    seed: int = 0,
    allow_kinks: bool = False,
    check_forward_ad: bool = False,
    check_backward_ad: bool = True,
    check_batched_grad: bool = False,
) -> bool:
    """Check second derivatives: gradcheck of ``x -> grad(<v, fn(x)>, x, create_graph=True)``.

    The inner cotangent v is seeded and fixed, so the function checked is deterministic.
    ``check_forward_ad`` checks forward mode over that reverse-mode gradient (PyTorch's
    ``check_fwd_over_rev``), ``check_backward_ad`` reverse over reverse.
    """
    inputs = _as_tuple(inputs)
    targets = _targets(inputs, params)
    tensors = [t.tensor for t in targets]

    def first_derivative(*args: Any) -> tuple:
        outputs = _outputs(fn(*args))
        cotangents = _cotangents(outputs, seed + 7)
        seeds = [_like(o, c) for o, c in zip(outputs, cotangents)]
        grads = autograd_grad(outputs, tensors, seeds, create_graph=True, allow_unused=True)
        # A gradient without a graph is kept: its (zero) derivative is checked too.
        return tuple(g for g in grads if g is not None)

    return gradcheck(
        first_derivative,
        inputs,
        params,
        eps,
        atol,
        rtol,
        fast,
        seed,
        name="gradgradcheck",
        allow_kinks=allow_kinks,
        check_forward_ad=check_forward_ad,
        check_backward_ad=check_backward_ad,
        check_batched_grad=check_batched_grad,
    )


__all__ = ["DEFAULTS", "GradcheckError", "gradcheck", "gradgradcheck", "numerical_grad"]
