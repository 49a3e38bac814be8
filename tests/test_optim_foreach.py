"""The multi-tensor optimizer path (``foreach=None`` or True) against the per-tensor loop
(``foreach=False``): equal bit for bit, with the flat state kept consistent when parameters,
gradients or state change under it; and against PyTorch's own ``foreach=True``. Runs on every
backend.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import backend, nn, optim

SHAPES = [(3, 4), (5,), (), (2, 3, 2), (1, 6)]


def make_params(device, dtype="float64", shapes=SHAPES, seed=0):
    rng = np.random.default_rng(seed)
    return [
        nn.Parameter(ta.tensor(rng.standard_normal(shape), dtype=dtype, device=device))
        for shape in shapes
    ]


def two_groups(params, **second):
    """Two parameter groups, the second with its own options."""
    return [{"params": params[:2]}, {"params": params[2:], **second}]


# Each row: optimizer class, options, options of the second group. Adam's betas (0.3, 0.6) take
# the other branch of the lerp (weight 1 - beta1 >= 0.5).
OPTIMIZERS = {
    "adam": (optim.Adam, {"lr": 0.05, "weight_decay": 0.1}, {"lr": 0.02, "betas": (0.3, 0.6)}),
    "adamw": (optim.AdamW, {"lr": 0.05, "weight_decay": 0.1}, {"lr": 0.2, "betas": (0.8, 0.9)}),
    "adam-plain": (optim.Adam, {"lr": 0.01, "eps": 1e-6}, {"eps": 1e-3, "weight_decay": 0.5}),
    "sgd": (optim.SGD, {"lr": 0.1}, {"lr": 0.3, "weight_decay": 0.2}),
    "sgd-momentum": (
        optim.SGD,
        {"lr": 0.1, "momentum": 0.9, "dampening": 0.25, "weight_decay": 0.1},
        {"momentum": 0.5, "dampening": 0.0},
    ),
    "sgd-nesterov": (
        optim.SGD,
        {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.05},
        {"lr": 0.2, "weight_decay": 0.0},
    ),
}


def make_optimizer(name, params, foreach):
    cls, options, second = OPTIMIZERS[name]
    return cls(two_groups(params, **second), foreach=foreach, **options)


def grads_for(params, rng, dtype, skip=()):
    """Random gradients; parameters whose position is in `skip` get none."""
    for position, p in enumerate(params):
        values = rng.standard_normal(p.shape)
        p.grad = None if position in skip else ta.tensor(values, dtype=dtype, device=p.device)


def snapshot(opt, params):
    """Parameter values and every state entry, as host arrays and numbers."""
    state = {
        index: {key: host(value) for key, value in entries.items()}
        for index, entries in opt.state_dict()["state"].items()
    }
    return [p.detach().numpy() for p in params], state


def host(value):
    return value.numpy() if isinstance(value, ta.Tensor) else np.array(value)


def assert_same(a, b):
    """Two snapshots equal bit for bit (the same numbers in the same dtype)."""
    (values_a, state_a), (values_b, state_b) = a, b
    for x, y in zip(values_a, values_b, strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)
    assert state_a.keys() == state_b.keys()
    for index in state_a:
        assert state_a[index].keys() == state_b[index].keys(), index
        for key in state_a[index]:
            np.testing.assert_array_equal(state_a[index][key], state_b[index][key], err_msg=key)


def train(name, foreach, device, dtype, steps=12, skips=None, before_step=None):
    """Snapshots after each of `steps` steps on seeded gradients; `skips[t]` lists parameters
    without a gradient at step t; `before_step(t, opt, params)` may change things between steps."""
    params = make_params(device, dtype)
    opt = make_optimizer(name, params, foreach)
    rng, path = np.random.default_rng(1), []
    for t in range(steps):
        grads_for(params, rng, dtype, skip=(skips or {}).get(t, ()))
        if before_step is not None:
            before_step(t, opt, params)
        opt.step()
        path.append(snapshot(opt, params))
    return path


def assert_paths_equal(name, device, dtype, **kwargs):
    loop = train(name, False, device, dtype, **kwargs)
    for foreach in (None, True):
        for a, b in zip(loop, train(name, foreach, device, dtype, **kwargs), strict=True):
            assert_same(a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_flat_path_equals_the_per_tensor_loop_bit_for_bit(device, name, dtype):
    assert_paths_equal(name, device, dtype, steps=25)


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd-momentum"])
def test_parameters_without_a_gradient_are_skipped_as_by_the_loop(device, name):
    # Parameter 4 never gets a gradient (no state, as in PyTorch); parameter 1 misses steps 2
    # and 3, so its step count falls behind and the group runs the loop, then flat again once
    # the states are rebuilt; at step 6 a whole group has no gradient.
    skips = {t: {4} for t in range(12)}
    skips.update({2: {1, 4}, 3: {1, 4}, 6: {2, 3, 4}})
    assert_paths_equal(name, device, "float64", skips=skips)
    if name.startswith("adam"):
        params = make_params(device)
        opt = make_optimizer(name, params, None)
        rng = np.random.default_rng(1)
        for t in range(12):
            grads_for(params, rng, "float64", skip=skips[t])
            opt.step()
        steps = [opt.state.get(p, {}).get("step") for p in params]
        assert steps == [12, 10, 11, 11, None]  # PyTorch's per-parameter step counts


def rebind_arrays(t, opt, params):
    """What a rebinding load does: the parameters get new array objects with the same values."""
    if t in (3, 7):
        for p in params[1:3]:
            p.array = backend.namespace(p.array).asarray(p.array, copy=True)


def set_state_by_hand(t, opt, params):
    if t == 4:
        for p in params[::2]:
            opt.state[p]["exp_avg"] = backend.namespace(p.array).ones_like(p.array)


def add_group(t, opt, params):
    if t == 5:
        extra = make_params(params[0].device, shapes=[(2, 2), (3,)], seed=9)
        opt.add_param_group({"params": extra, "lr": 0.01})
        params.extend(extra)
        for p in extra:
            p.grad = ta.ones(p.shape, dtype="float64", device=p.device)


def reload_own_state(t, opt, params):
    """load_state_dict of a checkpoint taken two steps earlier (its state replaces the flat)."""
    if t == 2:
        reload_own_state.saved = opt.state_dict()
    if t == 6:
        opt.load_state_dict(reload_own_state.saved)


def model_load_in_place(t, opt, params):
    """A model's load_state_dict writes into the same arrays: the flat path must read them."""
    if t == 5:
        for p in params:
            p.copy_(ta.full(p.shape, 0.5, dtype="float64", device=p.device))


@pytest.mark.parametrize(
    "before_step",
    [rebind_arrays, set_state_by_hand, add_group, reload_own_state, model_load_in_place],
)
def test_flat_state_is_rebuilt_when_it_would_be_stale(device, before_step):
    with ta.no_grad():
        assert_paths_equal("adam", device, "float64", before_step=before_step)


def test_module_to_after_steps_rebuilds_the_layout(device):
    """module.to(dtype) gives the parameters new arrays: the flat path follows, as the loop."""
    results = []
    for foreach in (False, None):
        model = nn.Linear(3, 2).to(device).to("float32")
        for p in model.parameters():
            p.array = backend.namespace(p.array).ones_like(p.array)
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=foreach)
        for t in range(6):
            if t == 3:
                model.to("float64")
            for p in model.parameters():
                p.grad = ta.full(
                    p.shape, 0.1 * (t + 1), dtype=str(p.detach().numpy().dtype), device=device
                )
            opt.step()
        results.append([p.detach().numpy() for p in model.parameters()])
        assert all(str(p.detach().numpy().dtype) == "float64" for p in model.parameters())
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


def test_moving_parameters_to_another_device_rebuilds_the_layout(device):
    model = nn.Linear(4, 3)  # float32 on the CPU
    opt = optim.SGD(model.parameters(), lr=0.5)
    for p in model.parameters():
        p.grad = ta.ones(p.shape)
    opt.step()  # a flat layout over the CPU arrays
    model.to(device)
    expected = [p.detach().numpy() - 0.5 * 2.0 for p in model.parameters()]
    for p in model.parameters():
        p.grad = ta.full(p.shape, 2.0, device=device)
    opt.step()
    for p, values in zip(model.parameters(), expected, strict=True):
        assert p.device == ta.tensor(0.0, device=device).device
        np.testing.assert_array_equal(p.detach().numpy(), values)


def test_mixed_dtypes_in_a_group_fall_back_to_the_loop(device):
    results = []
    for foreach in (False, None):
        params = make_params(device, "float64")[:2] + make_params(device, "float32")[2:]
        opt = optim.Adam(params, lr=0.1, foreach=foreach)
        rng = np.random.default_rng(2)
        for _ in range(5):
            for p in params:
                values = rng.standard_normal(p.shape)
                p.grad = ta.tensor(values, dtype=str(p.detach().numpy().dtype), device=device)
            opt.step()
        results.append(snapshot(opt, params))
    assert_same(*results)


def test_state_entries_are_views_updated_in_place_and_state_dict_is_a_snapshot(device):
    params = make_params(device)
    opt = optim.AdamW(params, lr=0.1)
    rng = np.random.default_rng(4)
    grads_for(params, rng, "float64")
    opt.step()
    entry = opt.state[params[0]]["exp_avg"]
    before = backend.to_numpy(entry).copy()
    saved = opt.state_dict()
    saved_values = {k: host(v) for k, v in saved["state"][0].items()}
    grads_for(params, rng, "float64")
    opt.step()
    assert opt.state[params[0]]["exp_avg"] is entry  # the same view, updated in place
    assert not np.array_equal(backend.to_numpy(entry), before)
    for key, value in saved["state"][0].items():  # the snapshot did not move
        np.testing.assert_array_equal(host(value), saved_values[key])
    assert saved["state"][0]["step"] == 1


def test_a_mismatched_gradient_is_reported_as_by_the_loop(device):
    params = make_params(device)
    opt = optim.Adam(params)
    params[1]._grad = ta.zeros((5, 1), dtype="float64", device=device)  # past the setter's check
    with pytest.raises(ValueError, match=r"parameter 1 has shape \(5,\) but its gradient"):
        opt.step()


def test_foreach_is_an_option_with_pytorchs_meaning():
    p = nn.Parameter(ta.zeros(2))
    opt = optim.AdamW([p], foreach=False)
    assert opt.state_dict()["param_groups"][0]["foreach"] is False
    assert optim.SGD([p], lr=0.1).param_groups[0]["foreach"] is None
    with pytest.raises(ValueError, match=r"SGD: invalid foreach 'yes'"):
        optim.SGD([p], lr=0.1, foreach="yes")


def test_clip_grad_norm_reads_one_total(device):
    rng = np.random.default_rng(5)
    params = make_params(device)
    grads = [rng.standard_normal(p.shape) for p in params]
    for p, g in zip(params, grads, strict=True):
        p.grad = ta.tensor(g, dtype="float64", device=device)
    expected = np.sqrt(sum(float((g * g).sum()) for g in grads))
    total = optim.clip_grad_norm(params, max_norm=1.0)
    assert total == pytest.approx(expected, rel=1e-14)
    for p, g in zip(params, grads, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), g / (expected + 1e-6), rtol=1e-14)
    # mixed dtypes: one partial sum per gradient, the same total
    mixed = make_params(device, "float32")[:2] + params[2:]
    for p, g in zip(mixed, grads, strict=True):
        p.grad = ta.tensor(g, dtype=str(p.detach().numpy().dtype), device=device)
    assert optim.clip_grad_norm(mixed, max_norm=1.0) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("name", ["adamw", "sgd-nesterov"])
def test_a_compiled_step_with_the_flat_path_equals_the_eager_loop(device, name):
    """ta.compile replays optimizer.step() as Python: the flat path runs on every replay."""
    rng = np.random.default_rng(8)
    batches = [
        ta.tensor(rng.standard_normal((4, 3)), dtype="float64", device=device) for _ in range(6)
    ]
    results = []
    for foreach, compiled in ((False, False), (None, True)):
        ta.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).to(device).double()
        opt = make_optimizer(name, list(model.parameters()), foreach)

        def step(x, model=model, opt=opt):
            opt.zero_grad()
            loss = (model(x) ** 2.0).mean()
            loss.backward()
            opt.step()
            return loss

        step = ta.compile(step) if compiled else step
        losses = [float(step(x).detach().numpy()) for x in batches]
        results.append((losses, [p.detach().numpy() for p in model.parameters()]))
    (eager_losses, eager_values), (compiled_losses, compiled_values) = results
    assert compiled_losses == eager_losses
    for a, b in zip(eager_values, compiled_values, strict=True):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------------------------ PyTorch


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["adam", "adamw", "sgd-momentum", "sgd-nesterov"])
def test_flat_path_matches_torch_foreach(name, dtype):
    torch = pytest.importorskip("torch")
    cls, options, second = OPTIMIZERS[name]
    params = make_params("cpu", dtype)
    torch_params = [torch.nn.Parameter(torch.tensor(p.detach().numpy())) for p in params]
    opt = cls(two_groups(params, **second), foreach=True, **options)
    torch_cls = getattr(torch.optim, cls.__name__)
    torch_opt = torch_cls(two_groups(torch_params, **second), foreach=True, **options)
    rng = np.random.default_rng(6)
    for _ in range(10):
        for p, tp in zip(params, torch_params, strict=True):
            g = rng.standard_normal(p.shape).astype(dtype)
            p.grad, tp.grad = ta.tensor(g), torch.tensor(g)
        opt.step()
        torch_opt.step()
    rtol, atol = (1e-6, 1e-7) if dtype == "float32" else (1e-12, 1e-14)
    for p, tp in zip(params, torch_params, strict=True):
        np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=rtol, atol=atol)


def test_two_parameters_holding_one_array_run_the_loop(device):
    """The loop updates a shared array twice, the second time from the first's result."""
    results = []
    for foreach in (False, None):
        a, b = make_params(device, shapes=[(3,), (3,)])
        b.array = a.array
        opt = optim.SGD([a, b], lr=0.1, momentum=0.5, foreach=foreach)
        for _ in range(3):
            a.grad = ta.ones(3, dtype="float64", device=device)
            b.grad = ta.full((3,), 2.0, dtype="float64", device=device)
            opt.step()
        results.append(a.detach().numpy().copy())
    np.testing.assert_array_equal(*results)
