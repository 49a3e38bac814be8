"""Adadelta, Adamax, NAdam, RAdam, Rprop, ASGD, LBFGS and Muon against PyTorch: a table of
optimizer x options, each run for a number of steps from the same start with the same gradients
(which depend on the parameters, so the runs must stay together to keep agreeing); float64 to
1e-12, float32 to its rounding. Then state dicts: PyTorch's layout, round trips, a PyTorch state
dict (through torch.save and ta.load) that continues identically; the hyper-parameter errors;
and PyTorch's optim names tinyattn lacks. Skipped cleanly when torch is not importable.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tinyattn as ta  # noqa: E402  (after the skip)
from tinyattn import optim  # noqa: E402

SHAPES = [(3, 4), (5,), (2, 6)]
MATRICES = [(4, 6), (7, 3)]  # Muon: wide and tall

CASES = {
    "Adadelta": [{}, {"lr": 0.5, "rho": 0.8, "weight_decay": 0.1}, {"maximize": True}],
    "Adamax": [{}, {"lr": 0.01, "betas": (0.8, 0.9), "weight_decay": 0.05}, {"maximize": True}],
    "NAdam": [
        {},
        {"lr": 0.01, "weight_decay": 0.1},
        {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True},
        {"momentum_decay": 0.01, "betas": (0.7, 0.95), "maximize": True},
    ],
    "RAdam": [
        {},
        {"lr": 0.01, "weight_decay": 0.1},
        {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True},
        {"betas": (0.5, 0.8), "maximize": True},  # rho_t > 5 from the first steps
    ],
    "Rprop": [{}, {"lr": 0.05, "etas": (0.3, 1.5), "step_sizes": (1e-4, 0.2)}, {"maximize": True}],
    "ASGD": [
        {},
        {"lr": 0.05, "lambd": 1e-2, "alpha": 0.5, "t0": 5, "weight_decay": 0.1},
        {"t0": 0, "maximize": True},
    ],
}
ROWS = [(name, options) for name, table in CASES.items() for options in table]
MUON_ROWS = [
    {},
    {"lr": 0.02, "nesterov": False, "weight_decay": 0.0},
    {"adjust_lr_fn": "match_rms_adamw", "momentum": 0.9, "ns_steps": 3},
]


def start_values(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for shape in shapes]


def pair(name, options, dtype, shapes=SHAPES, seed=0):
    """The same parameters in tinyattn and torch, with one optimizer each."""
    values = start_values(shapes, seed)
    ours = [ta.nn.Parameter(ta.tensor(v, dtype=dtype)) for v in values]
    theirs = [torch.nn.Parameter(torch.tensor(v, dtype=getattr(torch, dtype))) for v in values]
    return (
        ours,
        getattr(optim, name)(ours, **options),
        theirs,
        getattr(torch.optim, name)(theirs, **options),
    )


def gradients(step, values):
    """A gradient that depends on the parameters (so the runs must agree to keep agreeing) and
    changes sign now and then (Rprop's sign rule and Adamax's maximum see both cases)."""
    rng = np.random.default_rng(100 + step)
    return [np.sin(3 * v) + 0.5 * rng.standard_normal(v.shape) for v in values]


def set_grads(ours, theirs, step):
    values = [p.detach().numpy().astype(np.float64) for p in theirs]
    for p, q, grad in zip(ours, theirs, gradients(step, values), strict=True):
        p.grad = ta.tensor(grad.astype(p.detach().numpy().dtype))
        q.grad = torch.tensor(grad, dtype=q.dtype)


def largest_difference(ours, theirs):
    return max(
        float(np.max(np.abs(p.detach().numpy().astype(np.float64) - q.detach().numpy())))
        for p, q in zip(ours, theirs, strict=True)
    )


def run(ours, opt, theirs, torch_opt, steps, start=0):
    for step in range(start, start + steps):
        set_grads(ours, theirs, step)
        opt.step()
        torch_opt.step()


TOLERANCE = {"float64": 1e-12, "float32": 2e-5}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("name", "options"), ROWS, ids=lambda x: repr(x))
def test_trajectory_matches_torch(name, options, dtype):
    ours, opt, theirs, torch_opt = pair(name, options, dtype)
    run(ours, opt, theirs, torch_opt, steps=30)
    assert largest_difference(ours, theirs) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("options", MUON_ROWS, ids=repr)
def test_muon_matches_torch(options, dtype):
    """The Newton-Schulz iteration runs in bfloat16 in both; what remains is the order of float32
    sums inside a product, which can move a bfloat16 rounding by one unit (2^-8 relative) now and
    then: a few such units of lr, after 10 steps."""
    ours, opt, theirs, torch_opt = pair("Muon", options, dtype, shapes=MATRICES)
    run(ours, opt, theirs, torch_opt, steps=10)
    lr = options.get("lr", 1e-3) * max(1.0, 0.2 * 7**0.5, (7 / 3) ** 0.5)
    assert largest_difference(ours, theirs) < 10 * lr * 2**-8


def test_muon_orthogonalises_like_torch():
    """One Newton-Schulz call on the same matrix: bfloat16 values equal up to rare roundings."""
    from tinyattn.optim.muon import zeropower_via_newtonschulz

    matrix = start_values([(6, 10)], seed=3)[0].astype(np.float32)
    ours = zeropower_via_newtonschulz(ta.tensor(matrix).array, (3.4445, -4.775, 2.0315), 5, 1e-7)
    from torch.optim._muon import _zeropower_via_newtonschulz

    theirs = _zeropower_via_newtonschulz(torch.tensor(matrix), (3.4445, -4.775, 2.0315), 5, 1e-7)
    differ = np.asarray(ours) != theirs.float().numpy()
    assert differ.mean() < 0.05
    np.testing.assert_allclose(np.asarray(ours), theirs.float().numpy(), atol=2**-6)


# --------------------------------------------------------------------------------- LBFGS


def lbfgs_problem(module, dtype):
    """A smooth non-quadratic loss: sum((A x - b)^2) + 0.1 sum(x^4), on two parameters."""
    rng = np.random.default_rng(7)
    a, b, start = rng.standard_normal((6, 4)), rng.standard_normal(6), rng.standard_normal(4)
    make = ta.tensor if module is ta else torch.tensor
    kind = getattr(module, dtype)
    x = (ta.nn.Parameter if module is ta else torch.nn.Parameter)(make(start, dtype=kind))
    y = (ta.nn.Parameter if module is ta else torch.nn.Parameter)(make(start[:2], dtype=kind))
    a, b = make(a, dtype=kind), make(b, dtype=kind)

    def loss_fn():
        residual = a @ x - b
        return (residual * residual).sum() + 0.1 * (x**4).sum() + ((y - 1.0) ** 2).sum()

    return [x, y], loss_fn


LBFGS_ROWS = [
    {},
    {"line_search_fn": "strong_wolfe"},
    {"lr": 0.5, "max_iter": 4, "history_size": 3},
    {"line_search_fn": "strong_wolfe", "max_iter": 5, "history_size": 2, "max_eval": 8},
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("options", LBFGS_ROWS, ids=repr)
def test_lbfgs_matches_torch(options, dtype):
    """float64 runs to convergence; float32 stops after 4 iterations a step, before the
    stopping tests compare changes at float32's rounding (where one ulp decides a branch)."""
    if dtype == "float32":
        options = {**options, "max_iter": min(options.get("max_iter", 20), 4)}
    runs = []
    for module, optimizers in ((ta, optim), (torch, torch.optim)):
        params, loss_fn = lbfgs_problem(module, dtype)
        opt = optimizers.LBFGS(params, **options)

        def closure(opt=opt, loss_fn=loss_fn):
            opt.zero_grad()
            loss = loss_fn()
            loss.backward()
            return loss

        losses = [float(opt.step(closure).detach()) for _ in range(3)]
        state = opt.state[params[0]]
        runs.append((params, losses, state["func_evals"], state["n_iter"]))
    (ours, our_losses, *our_counts), (theirs, their_losses, *their_counts) = runs
    assert our_counts == their_counts  # the same iterations and evaluations
    tolerance = TOLERANCE[dtype] * (1 if dtype == "float64" else 10)
    np.testing.assert_allclose(our_losses, their_losses, rtol=tolerance, atol=tolerance)
    assert largest_difference(ours, theirs) < tolerance


def test_lbfgs_state_dict_round_trip_and_refusals():
    params, loss_fn = lbfgs_problem(ta, "float64")
    opt = optim.LBFGS(params, max_iter=3, history_size=4)

    def closure():
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    opt.step(closure)
    saved = opt.state_dict()
    entry = saved["state"][0]
    assert isinstance(entry["old_dirs"], list) and isinstance(entry["old_dirs"][0], ta.Tensor)
    opt.step(closure)
    after = [p.detach().numpy().copy() for p in params]
    opt.load_state_dict(saved)
    for p, value in zip(params, start_values([(4,), (2,)]), strict=True):
        p.data.copy_(ta.tensor(value))
    with pytest.raises(ValueError, match="parameter groups"):
        optim.LBFGS([{"params": [params[0]]}, {"params": [params[1]]}])
    with pytest.raises(ValueError, match="line_search_fn"):
        optim.LBFGS(params, line_search_fn="armijo")
    assert after[0].shape == (4,)


# ---------------------------------------------------------------------------- state dicts


@pytest.mark.parametrize("name", list(CASES) + ["Muon"])
def test_state_dict_layout_matches_torch(name):
    shapes = MATRICES if name == "Muon" else SHAPES
    ours, opt, theirs, torch_opt = pair(name, {}, "float64", shapes=shapes)
    run(ours, opt, theirs, torch_opt, steps=2)
    mine, reference = opt.state_dict(), torch_opt.state_dict()
    assert mine["param_groups"][0].keys() == reference["param_groups"][0].keys()
    assert mine["state"].keys() == reference["state"].keys()
    for index in reference["state"]:
        assert mine["state"][index].keys() == reference["state"][index].keys()


@pytest.mark.parametrize(("name", "options"), ROWS, ids=lambda x: repr(x))
def test_torch_state_dict_loads_and_continues(name, options, tmp_path):
    """Run torch 5 steps, save its optimizer with torch.save, load it here with ta.load, and
    continue both: the same values as a torch run that never stopped."""
    ours, opt, theirs, torch_opt = pair(name, options, "float64")
    for step in range(5):
        set_grads(ours, theirs, step)
        torch_opt.step()
    torch.save(torch_opt.state_dict(), tmp_path / "optimizer.pt")
    for p, q in zip(ours, theirs, strict=True):
        p.data.copy_(ta.tensor(q.detach().numpy()))
    opt.load_state_dict(ta.load(tmp_path / "optimizer.pt"))
    run(ours, opt, theirs, torch_opt, steps=10, start=5)
    assert largest_difference(ours, theirs) < 1e-12


@pytest.mark.parametrize(("name", "options"), ROWS, ids=lambda x: repr(x))
def test_own_state_dict_round_trip(name, options):
    """A snapshot after 4 steps, loaded into a fresh optimizer, continues as the original."""
    ours, opt, theirs, torch_opt = pair(name, options, "float64")
    run(ours, opt, theirs, torch_opt, steps=4)
    saved = opt.state_dict()
    fresh = getattr(optim, name)(ours, **options)
    fresh.load_state_dict(saved)
    run(ours, fresh, theirs, torch_opt, steps=6, start=4)
    assert largest_difference(ours, theirs) < 1e-12


# --------------------------------------------------------------------------------- errors

ERRORS = [
    ("Adadelta", {"rho": 1.5}, "rho"),
    ("Adadelta", {"lr": -1.0}, "lr"),
    ("Adamax", {"betas": (1.0, 0.9)}, "beta"),
    ("NAdam", {"momentum_decay": -0.1}, "momentum_decay"),
    ("RAdam", {"eps": -1e-8}, "eps"),
    ("Rprop", {"etas": (1.2, 0.5)}, "eta"),
    ("ASGD", {"weight_decay": -0.5}, "weight_decay"),
    ("Muon", {"adjust_lr_fn": "other"}, "adjust_lr_fn"),
]


@pytest.mark.parametrize(("name", "options", "word"), ERRORS)
def test_hyper_parameter_errors_name_the_optimizer_and_value(name, options, word):
    params = [ta.nn.Parameter(ta.zeros(2, 3))]
    with pytest.raises(ValueError, match=word) as caught:
        getattr(optim, name)(params, **options)
    assert name in str(caught.value)
    with pytest.raises(ValueError):  # PyTorch refuses the same values
        getattr(torch.optim, name)([torch.nn.Parameter(torch.zeros(2, 3))], **options)


def test_muon_refuses_parameters_that_are_not_matrices():
    with pytest.raises(ValueError, match="2-d"):
        optim.Muon([ta.nn.Parameter(ta.zeros(3))])


@pytest.mark.parametrize("name", ["Adafactor", "SparseAdam", "swa_utils", "NoSuchOptimizer"])
def test_missing_pytorch_names_say_so(name):
    with pytest.raises(AttributeError, match="not in tinyattn") as caught:
        getattr(optim, name)
    assert name in str(caught.value)
    if name != "NoSuchOptimizer":
        assert hasattr(torch.optim, name)
