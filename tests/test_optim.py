"""tinyattn.optim: the update rules against textbook NumPy references, no in-place writes,
state_dict round trips, clip_grad_norm, and hyper-parameter validation. Runs on every backend.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import nn, optim

RNG = np.random.default_rng(7)
START = RNG.standard_normal((3, 2))
GRADS = [RNG.standard_normal((3, 2)) for _ in range(4)]


def run(device, make, grads=GRADS, start=START):
    """Apply `make([p])`'s steps with the given gradients; return the trajectory."""
    p = nn.Parameter(ta.tensor(start, dtype="float64", device=device))
    opt = make([p])
    path = []
    for g in grads:
        p.grad = ta.tensor(g, dtype="float64", device=device)
        opt.step()
        path.append(p.detach().numpy().copy())
    return path


def sgd_reference(lr, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0):
    p, buffer, path = START.copy(), None, []
    for g in GRADS:
        g = g + weight_decay * p
        if momentum:
            buffer = g if buffer is None else momentum * buffer + (1 - dampening) * g
            g = g + momentum * buffer if nesterov else buffer
        p = p - lr * g
        path.append(p)
    return path


def adam_reference(lr, betas, eps, weight_decay, decoupled):
    p, m, v, path = START.copy(), 0.0, 0.0, []
    for t, g in enumerate(GRADS, start=1):
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        m_hat, v_hat = m / (1 - betas[0] ** t), v / (1 - betas[1] ** t)
        p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
        path.append(p)
    return path


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"momentum": 0.9},
        {"momentum": 0.9, "dampening": 0.3, "weight_decay": 0.1},
        {"momentum": 0.8, "nesterov": True, "weight_decay": 0.05},
    ],
)
def test_sgd_matches_reference(device, options):
    got = run(device, lambda params: optim.SGD(params, lr=0.1, **options))
    for step, (a, b) in enumerate(zip(got, sgd_reference(0.1, **options), strict=True)):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14, err_msg=f"step {step}")


@pytest.mark.parametrize("cls", [optim.Adam, optim.AdamW])
@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.3, 0.5)])
def test_adam_and_adamw_match_reference(device, cls, betas):
    options = {"lr": 0.05, "betas": betas, "eps": 1e-6, "weight_decay": 0.1}
    got = run(device, lambda params: cls(params, **options))
    expected = adam_reference(0.05, betas, 1e-6, 0.1, decoupled=cls is optim.AdamW)
    for step, (a, b) in enumerate(zip(got, expected, strict=True)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14, err_msg=f"step {step}")


def test_step_writes_in_place_bumps_the_version_and_records_no_graph(device):
    p = nn.Parameter(ta.tensor(START, dtype="float64", device=device))
    old_data = p.array
    old_values = p.detach().numpy().copy()
    opt = optim.Adam([p], lr=0.1)
    (p * p).sum().backward()
    grad_data = p.grad.array
    opt.step()
    assert p.is_leaf and p.grad_fn is None and p.requires_grad
    assert p.array is old_data and p._version == 1  # written in place, as in PyTorch
    assert not np.array_equal(p.detach().numpy(), old_values)
    assert p.grad.array is grad_data
    opt.zero_grad()
    assert p.grad is None
    opt.step()  # parameters without a gradient are skipped


def test_param_groups_have_their_own_options(device):
    a = nn.Parameter(ta.ones(2, dtype="float64", device=device))
    b = nn.Parameter(ta.ones(2, dtype="float64", device=device))
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 1.0}], lr=0.1)
    a.grad = ta.ones(2, dtype="float64", device=device)
    b.grad = ta.ones(2, dtype="float64", device=device)
    opt.step()
    np.testing.assert_allclose(a.detach().numpy(), 0.9)
    np.testing.assert_allclose(b.detach().numpy(), 0.0)


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
        lambda ps: optim.Adam(ps, lr=0.1),
        lambda ps: optim.AdamW(ps, lr=0.1),
    ],
    ids=["sgd", "adam", "adamw"],
)
def test_state_dict_resumes_exactly(device, make):
    full = run(device, make)
    p = nn.Parameter(ta.tensor(START, dtype="float64", device=device))
    opt = make([p])
    for g in GRADS[:2]:
        p.grad = ta.tensor(g, dtype="float64", device=device)
        opt.step()
    state = opt.state_dict()
    resumed_p = nn.Parameter(ta.tensor(p.detach().numpy(), dtype="float64", device=device))
    resumed = make([resumed_p])
    resumed.load_state_dict(state)
    for g, expected in zip(GRADS[2:], full[2:], strict=True):
        resumed_p.grad = ta.tensor(g, dtype="float64", device=device)
        resumed.step()
        np.testing.assert_array_equal(resumed_p.detach().numpy(), expected)


def test_load_state_dict_rejects_mismatches_and_changes_nothing(device):
    p = nn.Parameter(ta.zeros(3, dtype="float64", device=device))
    opt = optim.Adam([p], lr=0.1)
    p.grad = ta.ones(3, dtype="float64", device=device)
    opt.step()
    good = opt.state_dict()
    other = optim.Adam([nn.Parameter(ta.zeros(3, dtype="float64", device=device))], lr=0.5)
    bad_shape = {
        "state": {0: {**good["state"][0], "exp_avg": ta.zeros(4)}},
        "param_groups": good["param_groups"],
    }
    with pytest.raises(
        ValueError, match=r"state 'exp_avg' of parameter 0 has shape \(4,\).*\(3,\)"
    ):
        other.load_state_dict(bad_shape)
    assert other.state == {} and other.param_groups[0]["lr"] == 0.5  # nothing changed
    two = optim.Adam([p, nn.Parameter(ta.zeros(1, device=device))])
    with pytest.raises(ValueError, match="group 0 has 1 parameter.*but 2 here"):
        two.load_state_dict(good)
    with pytest.raises(
        ValueError, match=r"unexpected state key\(s\) \['exp_avg', 'exp_avg_sq', 'step'\]"
    ):
        optim.SGD([p], lr=0.1, momentum=0.9).load_state_dict(
            {"state": good["state"], "param_groups": [{"lr": 0.1, "params": [0]}]}
        )


def test_clip_grad_norm(device):
    a = nn.Parameter(ta.zeros(2, dtype="float64", device=device))
    b = nn.Parameter(ta.zeros(1, dtype="float64", device=device))
    c = nn.Parameter(ta.zeros(1, dtype="float64", device=device))  # no gradient: ignored
    a.grad = ta.tensor([3.0, 0.0], dtype="float64", device=device)
    b.grad = ta.tensor([4.0], dtype="float64", device=device)
    old = a.grad
    total = optim.clip_grad_norm([a, b, c], max_norm=1.0)
    assert total == pytest.approx(5.0)
    np.testing.assert_allclose(a.grad.numpy(), [3 / (5 + 1e-6), 0.0])
    np.testing.assert_allclose(b.grad.numpy(), [4 / (5 + 1e-6)])
    np.testing.assert_array_equal(old.numpy(), [3.0, 0.0])  # a new tensor, the old one untouched
    assert optim.clip_grad_norm([a, b], max_norm=10.0) == pytest.approx(1.0, rel=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), [4 / (5 + 1e-6)])  # below max_norm: unchanged


def test_clip_grad_norm_with_shared_gradient_arrays(device):
    """Add hands one gradient array to both inputs; clipping one must not clip the other twice."""
    a = nn.Parameter(ta.ones(2, dtype="float64", device=device))
    b = nn.Parameter(ta.ones(2, dtype="float64", device=device))
    ((a + b) * ta.tensor([3.0, 4.0], dtype="float64", device=device)).sum().backward()
    total = optim.clip_grad_norm([a, b], max_norm=1.0)
    assert total == pytest.approx(math.sqrt(50))
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy())
    np.testing.assert_allclose(a.grad.numpy(), np.array([3.0, 4.0]) / (math.sqrt(50) + 1e-6))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda ps: optim.SGD(ps, lr=-0.1), r"SGD: invalid lr -0.1 \(must be a finite number >= 0"),
        (lambda ps: optim.SGD(ps, lr=0.1, momentum=-1), "SGD: invalid momentum -1"),
        (lambda ps: optim.SGD(ps, lr=0.1, nesterov=True), "nesterov momentum needs momentum > 0"),
        (lambda ps: optim.SGD(ps, lr=float("nan")), "SGD: invalid lr nan"),
        (
            lambda ps: optim.Adam(ps, betas=(1.0, 0.9)),
            r"Adam: invalid beta at index 0 1.0 .*\[0.0, 1.0\)",
        ),
        (lambda ps: optim.Adam(ps, betas=(0.9,)), "betas must be a pair"),
        (lambda ps: optim.AdamW(ps, eps=-1e-8), "AdamW: invalid eps"),
        (lambda ps: optim.AdamW(ps, weight_decay=-0.1), "AdamW: invalid weight_decay"),
        (lambda ps: optim.Adam(ps, lr="fast"), "Adam: invalid lr 'fast'"),
    ],
)
def test_invalid_hyper_parameters_are_rejected(make, message):
    with pytest.raises(ValueError, match=message):
        make([nn.Parameter(ta.zeros(2))])


def test_invalid_parameter_lists_are_rejected():
    p = nn.Parameter(ta.zeros(2))
    with pytest.raises(ValueError, match="SGD: got an empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="iterable of Tensors, got a single Tensor"):
        optim.SGD(p, lr=0.1)
    with pytest.raises(ValueError, match="appears twice"):
        optim.Adam([p, p])
    with pytest.raises(TypeError, match="parameter 1 is a float"):
        optim.Adam([p, 1.0])
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['momentum'\]"):
        optim.Adam([{"params": [p], "momentum": 0.9}])


def test_flat_step_writes_each_parameter_once_and_names_a_read_only_one():
    """The multi-tensor write-back bumps each version once, and a parameter whose storage is
    read-only gets the in-place write's error, naming the op, not NumPy's."""
    params = [nn.Parameter(ta.tensor(np.ones(3))), nn.Parameter(ta.tensor(np.ones((2, 2))))]
    opt = optim.AdamW(params, lr=0.1)
    sum((p * p).sum() for p in params).backward()
    opt.step()
    assert [p._version for p in params] == [1, 1]
    assert opt._flats, "the multi-tensor path ran"
    params[1].array.flags.writeable = False
    with pytest.raises(RuntimeError, match=r"AdamW\.step: cannot write into .* read-only"):
        opt.step()
