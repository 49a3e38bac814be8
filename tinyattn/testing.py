"""Property-based gradient checks: Hypothesis strategies for tensors, and `check_grads`.

Sits beside `checking` at the top of the layers (imports `backend`, `tensor`, `checking`) and is
the one module that needs Hypothesis, an optional dependency (``pip install tinyattn[test]``):
``import tinyattn`` never imports it. Invariants:
- `tensors` draws its values in the dtype it returns (float32 values are exact float32 numbers),
  so the float64 and float32 checks of one example run at the same point;
- `check_grads` is deterministic: Hypothesis is seeded, draws no literals from the program's
  own modules (`_arguments_alone`), and writes no example database unless one is passed;
- kinks are not bugs: every check runs with ``allow_kinks=True`` (see `tinyattn.checking`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .errors import TinyattnError

try:
    import hypothesis
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hypothesis_numpy
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "tinyattn.testing needs the optional dependency Hypothesis: "
        "pip install tinyattn[test]  (or: pip install hypothesis)"
    ) from exc

from . import backend
from .checking import GradcheckError, gradcheck, gradgradcheck
from .creation import tensor
from .tensor import Tensor

FLOAT_DTYPES = ("float64", "float32")


# ----------------------------------------------------------------------------------- elements
def _round_to(value: float, width: int) -> float:
    """`value` rounded to the nearest float of `width` bits (so a float32 draw is exact)."""
    if width == 64:
        return value
    code = {32: "f", 16: "e"}[width]
    return struct.unpack(code, struct.pack(code, value))[0]


def _inward(bound: float, width: int, up: bool) -> float:
    """The float of `width` bits nearest to `bound` on the inner side of a [low, high] domain."""
    rounded = _round_to(bound, width)
    if rounded == bound or width == 64:
        return rounded
    ulp = 2.0 ** (math.floor(math.log2(abs(rounded))) - {32: 23, 16: 10}[width])
    if up and rounded < bound:
        return _round_to(rounded + ulp, width)
    if not up and rounded > bound:
        return _round_to(rounded - ulp, width)
    return rounded


def elements(low: float = -10.0, high: float = 10.0, width: int = 64) -> st.SearchStrategy[float]:
    """Finite floats in [low, high], with the values gradient bugs hide at drawn often: zero,
    tiny magnitudes (1e-6, 1e-3), +-1 and the bounds themselves (the large magnitudes)."""
    low, high = _inward(low, width, up=True), _inward(high, width, up=False)
    floats = st.floats(
        low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False, width=width
    )
    # Listed simplest first: Hypothesis shrinks a sampled value towards the start of the list.
    special = [0.0, 1.0, -1.0, 0.5, -0.5, 1e-3, -1e-3, 1e-6, -1e-6, low, high]
    special = list(dict.fromkeys(_round_to(v, width) for v in special if low <= v <= high))
    return st.one_of(st.sampled_from(special), floats) if special else floats


def _element_strategy(spec: Any, width: int) -> st.SearchStrategy:
    if isinstance(spec, st.SearchStrategy):
        return spec.map(lambda v: _round_to(float(v), width))
    low, high = spec
    return elements(float(low), float(high), width)


# ------------------------------------------------------------------------------------- shapes
def shapes(
    min_dims: int = 0, max_dims: int = 3, min_side: int = 1, max_side: int = 4
) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes with `min_dims`..`max_dims` axes of `min_side`..`max_side` elements each."""
    return st.lists(st.integers(min_side, max_side), min_size=min_dims, max_size=max_dims).map(
        tuple
    )


_pair_keys = itertools.count()


def broadcastable_shapes(
    count: int = 2, min_dims: int = 0, max_dims: int = 3, min_side: int = 1, max_side: int = 4
) -> list[st.SearchStrategy[tuple[int, ...]]]:
    """`count` shape strategies that draw mutually broadcastable shapes within one example.

    ``a, b = broadcastable_shapes(2)`` then ``tensors(a), tensors(b)``: the two share one draw
    (Hypothesis `shared`), so every example pairs shapes that NumPy would broadcast.
    """
    joint = st.shared(
        hypothesis_numpy.mutually_broadcastable_shapes(
            num_shapes=count,
            min_dims=min_dims,
            max_dims=max_dims,
            min_side=min_side,
            max_side=max_side,
        ),
        key=f"tinyattn.testing.broadcast.{next(_pair_keys)}",
    )
    return [joint.map(lambda drawn, i=i: tuple(drawn.input_shapes[i])) for i in range(count)]


# ------------------------------------------------------------------------------------ tensors
def tensors(
    shape: tuple[int, ...] | st.SearchStrategy[tuple[int, ...]],
    dtype: str | None = None,
    elements: tuple[float, float] | st.SearchStrategy[float] = (-10.0, 10.0),
    *,
    requires_grad: bool = False,
    device: str | None = None,
) -> st.SearchStrategy[Tensor]:
    """A Hypothesis strategy of leaf tensors, usable directly with ``@given``.

    `shape` is a tuple or a strategy of tuples (`shapes`, `broadcastable_shapes`). `dtype`
    defaults to float32, tinyattn's default. `elements` is ``(low, high)`` (zero, tiny values,
    +-1 and the bounds are drawn often) or any Hypothesis float strategy, to narrow the domain:
    ``elements=(0.01, 10.0)`` for a logarithm.
    """
    name = dtype or "float32"
    values = _element_strategy(elements, {"float32": 32, "float16": 16}.get(name, 64))
    shape_strategy = shape if isinstance(shape, st.SearchStrategy) else st.just(tuple(shape))

    @st.composite
    def draw_tensor(draw: Callable) -> Tensor:
        drawn_shape = draw(shape_strategy)
        size = math.prod(drawn_shape)
        flat = draw(st.lists(values, min_size=size, max_size=size))
        result = tensor(flat, dtype=name, device=device).reshape(drawn_shape).detach()
        return result.requires_grad_() if requires_grad else result

    return draw_tensor()


# -------------------------------------------------------------------------------- check_grads
def _is_float_tensor(value: Any) -> bool:
    return isinstance(value, Tensor) and backend.is_floating(
        backend.namespace(value.array), value.dtype
    )


def _cast(value: Any, dtype: str) -> Any:
    """A fresh leaf that requires grad, in `dtype`, for a floating tensor; anything else as is."""
    if not _is_float_tensor(value):
        return value
    host = backend.to_numpy(value.array)
    return tensor(host, dtype=dtype, device=value.device, requires_grad=True)


def _describe(inputs: Sequence[Any]) -> str:
    lines = []
    for i, value in enumerate(inputs):
        if isinstance(value, Tensor):
            dtype = backend.dtype_name(value.dtype)
            values = backend.to_numpy(value.array).tolist()
            lines.append(f"    input {i} (shape {value.shape}, {dtype}): {values!r}")
        else:
            lines.append(f"    input {i}: {value!r}")
    return "\n".join(lines)


def _reproduce(inputs: Sequence[Any], order: int) -> str:
    check = "ta.gradgradcheck" if order >= 2 else "ta.gradcheck"
    args = []
    for value in inputs:
        if _is_float_tensor(value):
            values = backend.to_numpy(value.array).tolist()
            dtype = backend.dtype_name(value.dtype)
            args.append(f"ta.tensor({values!r}, dtype={dtype!r}, requires_grad=True)")
        else:
            args.append("<input as drawn>")
    return f"    {check}(fn, [{', '.join(args)}], allow_kinks=True)"


def _check_one(fn: Callable, inputs: list, order: int, options: dict, forward: bool) -> None:
    gradcheck(fn, inputs, allow_kinks=True, check_forward_ad=forward, **options)
    if order >= 2:
        gradgradcheck(fn, inputs, allow_kinks=True, **options)


def check_grads(
    fn: Callable,
    *tensor_strategies: st.SearchStrategy,
    max_examples: int = 100,
    seed: int = 0,
    order: int = 1,
    dtype: str | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    database: Any = None,
    check_forward_ad: bool = False,
    check_backward_ad: bool = True,
) -> None:
    """Check the gradients of ``fn(*inputs)`` on inputs drawn from `tensor_strategies`.

    Every floating tensor drawn is checked (others, such as an index tensor from
    ``st.just(...)``, are passed as they are). Each example is checked in float64 and then in
    float32, or only in `dtype` when given; ``order=2`` adds `gradgradcheck`. Kinks are
    accepted (``allow_kinks=True``). ``check_forward_ad=True`` checks the jvp rules too: J v
    by forward mode against finite differences along random directions v, and against the
    backward rules by ``<J v, u> == <v, J^T u>`` for a random cotangent u (a wrong jvp fails
    one or the other); ``check_backward_ad=False`` leaves backward out (and ``order`` then
    must be 1). `max_examples` is fixed (100 by default), not taken from
    the active Hypothesis profile, so a report reads the same everywhere. On failure raises
    `GradcheckError` with the input Hypothesis shrank to, the checker's report and how to
    reproduce it; the error's ``inputs`` and ``dtype`` attributes hold that example.
    """
    if order not in (1, 2):
        raise TinyattnError(f"check_grads: order must be 1 or 2, got {order!r}")
    if dtype is not None and dtype not in FLOAT_DTYPES + ("float16",):
        raise TinyattnError(f"check_grads: dtype must be a float dtype name, got {dtype!r}")
    if not check_backward_ad and order != 1:
        raise TinyattnError("check_grads: order=2 checks backward twice; leave check_backward_ad")
    dtypes = (dtype,) if dtype is not None else FLOAT_DTYPES
    options = {"atol": atol, "rtol": rtol, "check_backward_ad": check_backward_ad}
    failure: dict[str, Any] = {}
    examples = [0]

    def one_example(drawn: tuple) -> None:
        examples[0] += 1
        for name in dtypes:
            inputs = [_cast(value, name) for value in drawn]
            try:
                _check_one(fn, inputs, order, options, check_forward_ad)
            except GradcheckError as error:
                # Hypothesis replays the minimal example last: this keeps the shrunk input.
                failure.update(inputs=inputs, dtype=name, report=str(error))
                raise

    run = _hypothesis_test(one_example, tensor_strategies, max_examples, seed, database)
    try:
        with _arguments_alone():
            run()
    except GradcheckError:
        error = GradcheckError(_failure_report(failure, seed, order, examples[0]))
        error.inputs, error.dtype = failure["inputs"], failure["dtype"]  # the shrunk example
        raise error from None


_CONSTANTS_LOCK = threading.RLock()


@contextlib.contextmanager
def _arguments_alone() -> Any:
    """Run Hypothesis without the number literals of the program's own modules.

    Now and then (5% of draws) Hypothesis draws a literal found in the source of a module the
    process has loaded from outside the standard library and site-packages. The examples a
    check tries, and in principle which failure it finds first, would then change with what
    else the program imported, and with whether tinyattn is installed or run from a checkout.
    Here its pool of local literals is empty for the duration (its own special values, 0, the
    float limits, inf and NaN, stay), so a check depends on its arguments alone. This reaches
    into Hypothesis's internals; where they differ (another version), it changes nothing.
    """
    try:
        from hypothesis.internal.conjecture import providers

        provider, cache = providers.HypothesisProvider, providers.CONSTANTS_CACHE
        original = provider.__dict__["_local_constants"]
        empty = type(providers._local_constants)()
        cache.cache.clear()  # drawable values worked out with the local literals
    except (ImportError, AttributeError, KeyError, TypeError):  # pragma: no cover
        yield
        return
    with _CONSTANTS_LOCK:
        provider._local_constants = property(lambda self: empty)
        try:
            yield
        finally:
            provider._local_constants = original
            cache.cache.clear()


def _hypothesis_test(
    body: Callable, strategies: Sequence, max_examples: int, seed: int, database: Any
) -> Callable:
    """`body` as a seeded Hypothesis test over a tuple of the strategies' draws."""
    overrides: dict[str, Any] = {
        "database": database,
        "deadline": None,
        "derandomize": False,  # @seed below makes the run deterministic
        "suppress_health_check": list(hypothesis.HealthCheck),
        "verbosity": hypothesis.Verbosity.quiet,
        "report_multiple_bugs": False,
        "phases": [p for p in hypothesis.Phase if p.name != "explain"],
        "max_examples": max_examples,
    }
    test = hypothesis.given(st.tuples(*strategies))(body)
    test = hypothesis.settings(hypothesis.settings(), **overrides)(test)
    return hypothesis.seed(seed)(test)


def _failure_report(failure: dict, seed: int, order: int, examples: int) -> str:
    inputs, dtype = failure["inputs"], failure["dtype"]
    return (
        f"check_grads failed in {dtype} (order {order}, seed {seed}, {examples} example(s) run "
        f"including shrinking). Hypothesis shrank the failing input to:\n"
        f"{_describe(inputs)}\n"
        f"{failure['report']}\n"
        f"To reproduce: check_grads(..., seed={seed}) fails the same way; or, at this input:\n"
        f"{_reproduce(inputs, order)}"
    )


__all__ = ["broadcastable_shapes", "check_grads", "elements", "shapes", "tensors"]
