"""Numbers, dtypes and edge values as PyTorch has them, with torch as the oracle (the module is
skipped without it): -inf logits in cross entropy, float16 computed in float32, binary cross
entropy at p = 0 and 1, class weights that sum to zero or below, integer extremes, 0-d
tensors, variances without degrees of freedom, and PyTorch's optimizer state dicts.

Each row of CASES is a name, the inputs (values, dtype, requires_grad), a tinyattn call and the
same call in torch. Both run on the same inputs; values (NaN and inf in place), shapes, dtypes
and the gradients of the inputs that require grad are compared.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn.backend import dtype_name

torch = pytest.importorskip("torch")
TF = torch.nn.functional

INF = math.inf
I32, I64 = np.iinfo(np.int32), np.iinfo(np.int64)
# float16 values: large offsets (a float16 sum of them rounds), then many small ones.
HALF_ROW = [1000.0, 1001.0, 1002.0] + [0.1] * 2000


@dataclass(frozen=True)
class Case:
    name: str
    inputs: list  # (values, dtype, requires_grad) per input
    ours: Callable  # tinyattn tensors -> a tensor or a tuple of tensors
    theirs: Callable  # torch tensors -> the same
    grads: bool = True  # compare the inputs' gradients
    rtol: float = 0.0  # 0: by dtype (`_tolerance`)
    # Compare float16 gradients with torch's in float32: its float16 backward is the less
    # accurate one here (docs/from-pytorch.md), tinyattn's is closer to the exact value.
    float32_grads: bool = False


def x(values, dtype="float32", grad=True):
    return (values, dtype, grad)


def c(values, dtype="int64"):
    """A constant input (targets, indices): never requires grad."""
    return (values, dtype, False)


def same(call: Callable) -> tuple[Callable, Callable]:
    """A call spelled the same in both libraries, given its F (nn.functional) first."""
    return (lambda *a: call(F, *a)), (lambda *a: call(TF, *a))


MASKED = [[0.0, -INF, 1.0], [2.0, -INF, -INF], [-INF, 2.0, 3.0]]

# fmt: off
CASES = [
    # ------------------------------------------------ cross entropy and nll with -inf logits
    Case("cross_entropy, a masked class the target does not pick", [x(MASKED), c([0, 0, 2])],
         *same(lambda F, a, t: F.cross_entropy(a, t))),
    Case("cross_entropy, the target's own logit -inf", [x(MASKED), c([1, 0, 2])],
         *same(lambda F, a, t: F.cross_entropy(a, t))),
    Case("cross_entropy, masked, reduction none", [x(MASKED), c([0, 0, 1])],
         *same(lambda F, a, t: F.cross_entropy(a, t, reduction="none"))),
    Case("cross_entropy, masked, reduction sum", [x(MASKED), c([0, 0, 1])],
         *same(lambda F, a, t: F.cross_entropy(a, t, reduction="sum"))),
    Case("cross_entropy, masked, label smoothing", [x(MASKED), c([0, 0, 1])],
         *same(lambda F, a, t: F.cross_entropy(a, t, label_smoothing=0.1))),
    Case("cross_entropy, masked, ignored row, smoothing, none", [x(MASKED), c([0, -100, 2])],
         *same(lambda F, a, t: F.cross_entropy(a, t, label_smoothing=0.2, reduction="none"))),
    Case("cross_entropy, masked row ignored", [x(MASKED), c([2, -100, 2])],
         *same(lambda F, a, t: F.cross_entropy(a, t))),
    Case("cross_entropy, masked, class weights", [x(MASKED), c([0, 0, 1]), c([1, 2, 3], "float32")],
         *same(lambda F, a, t, w: F.cross_entropy(a, t, weight=w))),
    Case("cross_entropy, masked, weights and smoothing, none",
         [x(MASKED), c([0, -100, 2]), c([1, 2, 3], "float32")],
         *same(lambda F, a, t, w: F.cross_entropy(a, t, weight=w, label_smoothing=0.2,
                                                    reduction="none"))),
    Case("cross_entropy, masked, (N, C, d)", [x([[[0.0, 1.0], [-INF, 2.0]]]), c([[0, 1]])],
         *same(lambda F, a, t: F.cross_entropy(a, t))),
    Case("cross_entropy, probabilities, 0 at a -inf logit (NaN in both)",
         [x([[0.0, -INF, 1.0]]), c([[0.5, 0.0, 0.5]], "float32")],
         *same(lambda F, a, t: F.cross_entropy(a, t))),
    Case("nll_loss, -inf beside the target", [x([[0.0, -INF, -1.0]]), c([0])],
         *same(lambda F, a, t: F.nll_loss(a, t))),
    Case("nll_loss, -inf beside the target, weights",
         [x([[0.0, -INF, -1.0], [-2.0, -0.5, -INF]]), c([0, 1]), c([1, 2, 3], "float32")],
         *same(lambda F, a, t, w: F.nll_loss(a, t, weight=w))),
    # ------------------------------------------------------ weights summing to zero or below
    Case("cross_entropy, weights summing below zero",
         [x([[0.0, 1.0], [2.0, 3.0]]), c([0, 1]), c([1, -2], "float32")],
         *same(lambda F, a, t, w: F.cross_entropy(a, t, weight=w))),
    Case("nll_loss, weights summing below zero",
         [x([[-0.1, -2.0], [-1.0, -0.5]]), c([0, 1]), c([2, -3], "float32")],
         *same(lambda F, a, t, w: F.nll_loss(a, t, weight=w))),
    Case("cross_entropy, weights summing to zero (NaN)",
         [x([[0.0, 1.0], [2.0, 3.0]]), c([0, 1]), c([0, 0], "float32")],
         *same(lambda F, a, t, w: F.cross_entropy(a, t, weight=w))),
    Case("cross_entropy, weights summing to zero, loss not 0 (inf)",
         [x([[0.0, 1.0], [2.0, 3.0]]), c([0, 1]), c([1, -1], "float32")],
         *same(lambda F, a, t, w: F.cross_entropy(a, t, weight=w)), grads=False),
    # ----------------------------------------------------- binary cross entropy at 0 and 1
    Case("binary_cross_entropy at p = 0 and 1",
         [x([0.0, 1.0, 0.5, 0.3]), c([1, 0, 1, 0], "float32")],
         *same(lambda F, p, t: F.binary_cross_entropy(p, t))),
    Case("binary_cross_entropy at p = 0 and 1, right targets",
         [x([0.0, 1.0]), c([0, 1], "float32")],
         *same(lambda F, p, t: F.binary_cross_entropy(p, t))),
    Case("binary_cross_entropy at p = 0 and 1, soft targets, sum",
         [x([0.0, 1.0, 1e-20], "float64"), c([0.5, 0.5, 0.5], "float64")],
         *same(lambda F, p, t: F.binary_cross_entropy(p, t, reduction="sum"))),
    Case("binary_cross_entropy, weighted, none",
         [x([0.0, 1.0, 0.25]), c([1, 1, 0], "float32"), c([2, 3, 4], "float32")],
         *same(lambda F, p, t, w: F.binary_cross_entropy(p, t, weight=w, reduction="none"))),
    Case("binary_cross_entropy, target's gradient", [x([0.2, 0.7]), x([0.4, 0.9])],
         *same(lambda F, p, t: F.binary_cross_entropy(p, t))),
    # --------------------------------------------------- float16 computed in float32
    Case("layer_norm float16 [1000, 1001, 1002]", [x([[1000.0, 1001.0, 1002.0]], "float16")],
         *same(lambda F, a: F.layer_norm(a, (3,))), rtol=2e-2),
    Case("layer_norm float16, affine", [x([[1000.0, 1001.5, 1003.0, 999.0]], "float16"),
                                        x([1.0, 2.0, 0.5, 1.5], "float16"),
                                        x([0.0, 1.0, -1.0, 0.5], "float16")],
         *same(lambda F, a, w, b: F.layer_norm(a, (4,), w, b)), rtol=2e-3, float32_grads=True),
    Case("softmax float16", [x([[1000.0, 1001.0, 1002.0], [-3.0, 0.5, 7.25]], "float16")],
         *same(lambda F, a: F.softmax(a, dim=-1))),
    Case("log_softmax float16", [x([[1000.0, 1001.0, 1002.0], [-3.0, 0.5, 7.25]], "float16")],
         *same(lambda F, a: F.log_softmax(a, dim=-1))),
    Case("sum float16", [x(HALF_ROW, "float16")], *same(lambda F, a: a.sum())),
    Case("mean float16", [x(HALF_ROW, "float16")], *same(lambda F, a: a.mean())),
    Case("var float16", [x(HALF_ROW, "float16")], *same(lambda F, a: a.var())),
    Case("std float16", [x(HALF_ROW, "float16")], *same(lambda F, a: a.std())),
    Case("norm float16", [x(HALF_ROW, "float16")], *same(lambda F, a: a.norm())),
    Case("cumsum float16", [x(HALF_ROW, "float16", grad=False)], *same(lambda F, a: a.cumsum(0))),
    Case("cumprod float16", [x([300.0, 300.0, 1 / 300], "float16", grad=False)],
         *same(lambda F, a: a.cumprod(0))),
    Case("logsumexp float16", [x([[1000.0, 1001.0, 1002.0]], "float16")],
         *same(lambda F, a: a.logsumexp(1)), float32_grads=True),
    # ------------------------------------------------------------- integer extremes
    *[Case(f"minimum/maximum {d} at its extremes",
           [c([info.min, info.max, 0, -1], d), c([info.max, info.min, info.min, info.max], d)],
           lambda a, b: (ta.minimum(a, b), ta.maximum(a, b), a.min(b), a.max(b)),
           lambda a, b: (torch.minimum(a, b), torch.maximum(a, b), a.min(b), a.max(b)))
      for d, info in (("int32", I32), ("int64", I64))],
    *[Case(f"clamp {d} at its extremes", [c([info.min, info.max, 0, -7], d)],
           *same(lambda F, a, lo=info.min, hi=info.max: (
               a.clamp(lo, hi), a.clamp(min=lo + 1), a.clamp(max=hi - 1), a.clamp(-5, 5),
               a.clamp_min(lo), a.clamp_max(hi))))
      for d, info in (("int32", I32), ("int64", I64))],
    Case("sort, argsort and topk of int64 past 2**53",
         [c([2**62 + 1, 2**62, I64.min, I64.max, 5, 5])],
         *same(lambda F, a: (a.sort().values, a.sort(descending=True, stable=True).indices,
                             a.topk(3).values, a.topk(2, largest=False).indices))),
    Case("sort and topk of int32 at its extremes", [c([I32.max, I32.min, 0, I32.min + 1], "int32")],
         *same(lambda F, a: (a.sort(descending=True).values, a.argsort(stable=True),
                             a.topk(2).indices))),
    Case("clamp(min > max) gives max", [x([0.0, 5.0, 10.0])],
         *same(lambda F, a: a.clamp(min=7.0, max=3.0))),
    Case("clamp(min > max) of ints", [c([0, 5, 10])], *same(lambda F, a: a.clamp(7, 3))),
    # --------------------------------------------------------------------- 0-d tensors
    Case("cumsum of 0-d", [x(3.0)], *same(lambda F, a: (a.cumsum(0), a.cumsum(-1)))),
    Case("cumprod of 0-d", [x(3.0)], *same(lambda F, a: a.cumprod(0))),
    Case("squeeze(0) and squeeze(-1) of 0-d", [x(3.0)],
         *same(lambda F, a: (a.squeeze(0), a.squeeze(-1) * 2))),
    Case("logsumexp(0) and (-1) of 0-d", [x(3.0)],
         *same(lambda F, a: (a.logsumexp(0), a.logsumexp(-1), a.logsumexp(0, keepdim=True)))),
    Case("nonzero of 0-d", [c(3.0, "float32")],
         *same(lambda F, a: (a.nonzero(), *a.nonzero(as_tuple=True)))),
    Case("nonzero of a 0-d zero", [c(0.0, "float32")],
         *same(lambda F, a: (a.nonzero(), *a.nonzero(as_tuple=True)))),
    Case("argmax and max(dim=0) of 0-d", [x(3.0)],
         *same(lambda F, a: (a.argmax(), a.argmax(0), *a.max(dim=0), *a.min(-1)))),
    Case("flip of 0-d", [x(3.0)], *same(lambda F, a: (a.flip(0) * 2, a.flip(-1)))),
    Case("softmax(0) and log_softmax(0) of 0-d", [x(3.0)],
         *same(lambda F, a: (F.softmax(a, 0) * 2, F.log_softmax(a, 0)))),
]
# fmt: on


def _tensor(lib, values, dtype, grad):
    if lib is ta:
        return ta.tensor(values, dtype=dtype, requires_grad=grad)
    return torch.tensor(values, dtype=getattr(torch, dtype), requires_grad=grad)


def _tolerance(dtype: str) -> float:
    return {"float16": 2e-3, "float32": 2e-6, "float64": 1e-12}.get(dtype, 0.0)


def _as_numpy(t) -> np.ndarray:
    return t.detach().numpy()  # a tinyattn or a torch tensor


def _compare(name: str, ours, theirs, rtol: float = 0.0) -> None:
    ours_dtype = dtype_name(ours.dtype)
    assert ours_dtype == str(theirs.dtype).removeprefix("torch."), name
    assert tuple(ours.shape) == tuple(theirs.shape), name
    tol = rtol or _tolerance(ours_dtype)
    expected = _as_numpy(theirs).astype(np.float64 if tol else _as_numpy(theirs).dtype)
    np.testing.assert_allclose(
        _as_numpy(ours).astype(expected.dtype), expected, rtol=tol, atol=tol, err_msg=name
    )


def _outputs(result) -> tuple:
    return tuple(result) if isinstance(result, tuple | list) else (result,)


def _cotangent(lib, out):
    """A fixed cotangent 1, 2, ... (scaled to 1 at most) in the output's shape and dtype."""
    n = max(out.numel(), 1)
    values = (np.arange(1, n + 1) / n).reshape(tuple(out.shape))
    return _tensor(lib, values, str(out.dtype).removeprefix("torch."), False)


def _run(lib, case: Case, float32: bool = False) -> tuple:
    specs = [(v, "float32" if float32 and d == "float16" else d, g) for v, d, g in case.inputs]
    tensors = [_tensor(lib, *spec) for spec in specs]
    outputs = _outputs((case.ours if lib is ta else case.theirs)(*tensors))
    differentiable = [o for o in outputs if o.requires_grad]
    if case.grads and differentiable:
        total = sum((o * _cotangent(lib, o)).sum() for o in differentiable)
        total.backward()
    grads = [t.grad for t in tensors if t.requires_grad]
    return outputs, grads


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_matches_pytorch(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy's and torch's warnings of inf/NaN
        ours, our_grads = _run(ta, case)
        theirs, their_grads = _run(torch, case)
    assert len(ours) == len(theirs), case.name
    for number, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        _compare(f"{case.name}: output {number}", a, b, case.rtol)
    if case.float32_grads:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            their_grads = [g.half() for g in _run(torch, case, float32=True)[1]]
    if case.grads:
        for number, (a, b) in enumerate(zip(our_grads, their_grads, strict=True)):
            assert (a is None) == (b is None), case.name
            if a is not None:
                half = dtype_name(a.dtype) == "float16"
                name = f"{case.name}: gradient of input {number}"
                _compare(name, a, b, case.rtol or 1e-2 * half)


def test_the_masked_loss_is_finite_without_warnings():
    """The common case itself, pinned: a masked class gives a finite loss and gradient, and
    NumPy is not asked to warn of the 0 * -inf it never keeps."""
    logits = ta.tensor(MASKED, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss = F.cross_entropy(logits, ta.tensor([0, 0, 2]))
        loss.backward()
    assert math.isfinite(loss.item()) and np.isfinite(logits.grad.numpy()).all()


@pytest.mark.parametrize("op", ["var", "std"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("values,correction", [([2.0], 1), ([1.0, 3.0], 2), ([[1.0], [2.0]], 1)])
def test_no_degrees_of_freedom_warn_and_divide_by_zero(op, values, correction, dtype):
    """One element with correction 1 (or N <= correction): PyTorch's warning, NaN or inf."""
    dim = -1 if np.ndim(values) == 2 else None
    with pytest.warns(UserWarning, match=rf"{op}\(\): degrees of freedom is <= 0") as ours:
        got = getattr(ta.tensor(values, dtype=dtype), op)(dim=dim, correction=correction)
    with pytest.warns(UserWarning, match=rf"{op}\(\): degrees of freedom is <= 0"):
        tensor = torch.tensor(values, dtype=getattr(torch, dtype))
        expected = getattr(tensor, op)(dim=dim, correction=correction)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    assert any(w.filename == __file__ for w in ours), "the warning points at the caller"
    assert not [w for w in ours if w.category is RuntimeWarning], "only PyTorch's warning"


@pytest.mark.parametrize("p,t,name", [([0.5], [1.5], "target"), ([1.5], [1.0], "input")])
def test_binary_cross_entropy_refuses_values_outside_0_1(p, t, name):
    message = f"all elements of {name} should be between 0 and 1"
    for lib, functional in ((ta, F), (torch, TF)):
        with pytest.raises(RuntimeError, match=message):
            functional.binary_cross_entropy(lib.tensor(p), lib.tensor(t))


def test_float16_prod_keeps_float32_precision_where_pytorch_overflows():
    """The one float16 reduction that differs (docs/from-pytorch.md): NumPy's prod carries
    float32 between the factors, PyTorch's CPU prod float16 (300 * 300 overflows)."""
    values = [300.0, 300.0, 1 / 300]
    assert ta.tensor(values, dtype="float16").prod().item() == pytest.approx(300.0, rel=1e-3)
    assert torch.tensor(values, dtype=torch.float16).prod().item() == INF


def test_float16_widening_leaves_float32_and_float64_alone():
    """float32 and float64 take their own path: the same numbers as before, the same dtype."""
    for dtype in ("float32", "float64"):
        a = ta.tensor([[1000.0, 1001.0, 1002.0]], dtype=dtype)
        for out in (F.layer_norm(a, (3,)), F.softmax(a, -1), a.sum(), a.var(), a.norm()):
            assert dtype_name(out.dtype) == dtype


# ------------------------------------------------------------------ optimizers and schedulers
OPTIMIZERS = [
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("Adam", dict(lr=0.01, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, momentum=0.5)),
    ("Adagrad", dict(lr=0.1)),
]


def _steps(lib, opt, weight, count):
    for _ in range(count):
        opt.zero_grad()
        (weight * weight * lib.tensor([1.0, 3.0], dtype=weight.dtype)).sum().backward()
        opt.step()


@pytest.mark.parametrize("name,options", OPTIMIZERS, ids=[f"{n}-{o}" for n, o in OPTIMIZERS])
def test_a_pytorch_optimizer_state_dict_loads_and_the_run_continues(name, options):
    """PyTorch 2.13's groups carry flags tinyattn has no option for (maximize, fused,
    capturable, differentiable, decoupled_weight_decay, ...): accepted, and the steps after the
    load equal PyTorch's."""
    theirs = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    their_opt = getattr(torch.optim, name)([theirs], **options)
    _steps(torch, their_opt, theirs, 3)
    state = their_opt.state_dict()
    ours = ta.nn.Parameter(ta.tensor(theirs.detach().numpy().copy()))
    our_opt = getattr(ta.optim, name)([ours], **options)
    our_opt.load_state_dict(state)
    _steps(torch, their_opt, theirs, 3)
    _steps(ta, our_opt, ours, 3)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12)


@pytest.mark.parametrize("flag", ["maximize", "amsgrad"])
def test_a_flag_that_changes_the_result_is_refused_on_load(flag):
    weight = torch.nn.Parameter(torch.ones(2))
    state = torch.optim.Adam([weight], **{flag: True}).state_dict()
    opt = ta.optim.Adam([ta.nn.Parameter(ta.ones(2))])
    with pytest.raises(NotImplementedError, match=f"{flag}=True is not supported"):
        opt.load_state_dict(state)


def test_decoupled_weight_decay_is_adamw_own_rule():
    """AdamW's state dict says decoupled_weight_decay=True: AdamW loads it, Adam refuses it."""
    weight = torch.nn.Parameter(torch.ones(2))
    state = torch.optim.AdamW([weight]).state_dict()
    assert state["param_groups"][0]["decoupled_weight_decay"] is True
    ta.optim.AdamW([ta.nn.Parameter(ta.ones(2))]).load_state_dict(state)
    for lib, param in ((torch, weight), (ta, ta.nn.Parameter(ta.ones(2)))):
        with pytest.raises(TypeError):  # not one of AdamW's arguments in either library
            lib.optim.AdamW([param], decoupled_weight_decay=True)
    with pytest.raises(NotImplementedError, match="use AdamW"):
        ta.optim.Adam([ta.nn.Parameter(ta.ones(2))]).load_state_dict(state)


@pytest.mark.parametrize("step_size", [2, 2.5, 0.5])
def test_step_lr_with_a_float_step_size(step_size):
    rates = []
    for lib in (ta, torch):
        opt = lib.optim.SGD([lib.nn.Parameter(lib.ones(1))], lr=1.0)
        scheduler = lib.optim.lr_scheduler.StepLR(opt, step_size=step_size, gamma=0.5)
        seen = []
        for _ in range(11):
            opt.step()
            scheduler.step()
            seen.append(scheduler.get_last_lr()[0])
        rates.append(seen)
    assert rates[0] == rates[1]
