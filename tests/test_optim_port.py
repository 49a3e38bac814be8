"""PyTorch's optim surface on tinyattn, with torch as the oracle: parameter groups, lrs changed
by hand or by optim.lr_scheduler, optimizer and scheduler state dicts, zero_grad, and a dozen
float32 training steps with Adam/AdamW, groups, clip_grad_norm_ and LambdaLR whose losses equal
PyTorch's to float32 rounding. Skipped cleanly when torch is not importable.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tinyattn as ta  # noqa: E402  (after the skip)
from tinyattn import nn, optim  # noqa: E402
from tinyattn.optim import lr_scheduler  # noqa: E402

RNG = np.random.default_rng(5)


def two_group_optimizers(name="SGD", **options):
    """The same two parameter groups (different lrs) in tinyattn and in torch."""
    ours = [nn.Parameter(ta.zeros(2)), nn.Parameter(ta.zeros(3))]
    theirs = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))]
    groups = [{"params": [ours[0]]}, {"params": [ours[1]], "lr": 0.5}]
    torch_groups = [{"params": [theirs[0]]}, {"params": [theirs[1]], "lr": 0.5}]
    return (
        getattr(optim, name)(groups, lr=0.1, **options),
        getattr(torch.optim, name)(torch_groups, lr=0.1, **options),
    )


class Warmup:
    """A callable object: its attributes go into LambdaLR's state_dict (PyTorch's rule)."""

    def __init__(self, warmup):
        self.warmup = warmup

    def __call__(self, step):
        return min(1.0, (step + 1) / self.warmup)


SCHEDULERS = {
    "LambdaLR": lambda m, opt: m.LambdaLR(opt, lambda step: 0.95**step),
    "LambdaLR per group": lambda m, opt: m.LambdaLR(opt, [lambda s: 1 / (s + 1), Warmup(4)]),
    "StepLR": lambda m, opt: m.StepLR(opt, step_size=3, gamma=0.5),
    "CosineAnnealingLR": lambda m, opt: m.CosineAnnealingLR(opt, T_max=7, eta_min=0.01),
    "LinearLR": lambda m, opt: m.LinearLR(opt, start_factor=0.25, total_iters=6),
    "LinearLR decay": lambda m, opt: m.LinearLR(opt, 1.0, 0.1, total_iters=4),
}


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_schedulers_match_torch_exactly(name):
    opt, torch_opt = two_group_optimizers()
    sched = SCHEDULERS[name](lr_scheduler, opt)
    torch_sched = SCHEDULERS[name](torch.optim.lr_scheduler, torch_opt)
    assert sched.get_last_lr() == torch_sched.get_last_lr()
    for step in range(20):  # past T_max, step_size and total_iters
        opt.step()
        torch_opt.step()
        sched.step()
        torch_sched.step()
        assert sched.get_last_lr() == torch_sched.get_last_lr(), f"step {step}"
        assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in torch_opt.param_groups]
        assert sched.last_epoch == torch_sched.last_epoch


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_scheduler_state_dict_resumes(name):
    opt, _ = two_group_optimizers()
    sched = SCHEDULERS[name](lr_scheduler, opt)
    for _ in range(5):
        sched.step()
    saved_sched, saved_opt = sched.state_dict(), opt.state_dict()
    assert "optimizer" not in saved_sched and saved_sched["last_epoch"] == 5
    expected = []
    for _ in range(6):
        sched.step()
        expected.append(sched.get_last_lr())
    resumed_opt, _ = two_group_optimizers()
    resumed = SCHEDULERS[name](lr_scheduler, resumed_opt)
    resumed_opt.load_state_dict(saved_opt)
    resumed.load_state_dict(saved_sched)
    got = []
    for _ in range(6):
        resumed.step()
        got.append(resumed.get_last_lr())
    assert got == expected


def test_lambda_state_dict_follows_torch():
    opt, torch_opt = two_group_optimizers()
    sched = lr_scheduler.LambdaLR(opt, [lambda s: 1.0, Warmup(3)])
    torch_sched = torch.optim.lr_scheduler.LambdaLR(torch_opt, [lambda s: 1.0, Warmup(3)])
    ours, theirs = sched.state_dict(), torch_sched.state_dict()
    assert ours["lr_lambdas"] == theirs["lr_lambdas"] == [None, {"warmup": 3}]
    for key in ("base_lrs", "last_epoch", "_step_count", "_last_lr"):
        assert ours[key] == theirs[key], key
    with pytest.raises(KeyError, match="initial_lr"):
        lr_scheduler.StepLR(optim.SGD([nn.Parameter(ta.zeros(1))], lr=1.0), 2, last_epoch=3)


def test_param_group_lr_set_by_hand_and_zero_grad(device):
    """Noam-style `for g in opt.param_groups: g['lr'] = ...` changes the next step."""
    opt, torch_opt = two_group_optimizers("SGD", momentum=0.9)
    params = [p for g in opt.param_groups for p in g["params"]]
    torch_params = [p for g in torch_opt.param_groups for p in g["params"]]
    identities = [id(p) for p in params]
    for step in range(4):
        for group, torch_group in zip(opt.param_groups, torch_opt.param_groups, strict=True):
            group["lr"] = torch_group["lr"] = 0.1 * (step + 1)
        for p, tp in zip(params, torch_params, strict=True):
            g = RNG.standard_normal(p.shape).astype(np.float32)
            p.grad, tp.grad = ta.tensor(g), torch.tensor(g)
        opt.step()
        torch_opt.step()
        for p, tp in zip(params, torch_params, strict=True):
            np.testing.assert_allclose(
                p.detach().numpy(), tp.detach().numpy(), rtol=1e-6, atol=1e-7
            )
    assert [id(p) for g in opt.param_groups for p in g["params"]] == identities
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.numpy().any() for p in params)
    opt.zero_grad()
    assert all(p.grad is None for p in params)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_optimizer_state_dict_structure_matches_torch(name):
    options = {"momentum": 0.9} if name == "SGD" else {"betas": (0.8, 0.99)}
    opt, torch_opt = two_group_optimizers(name, **options)
    for _ in range(2):
        for p, tp in zip(
            [p for g in opt.param_groups for p in g["params"]],
            [p for g in torch_opt.param_groups for p in g["params"]],
            strict=True,
        ):
            g = RNG.standard_normal(p.shape).astype(np.float32)
            p.grad, tp.grad = ta.tensor(g), torch.tensor(g)
        opt.step()
        torch_opt.step()
    ours, theirs = opt.state_dict(), torch_opt.state_dict()
    assert list(ours) == list(theirs) == ["state", "param_groups"]
    assert [g["params"] for g in ours["param_groups"]] == [
        g["params"] for g in theirs["param_groups"]
    ]
    for group, torch_group in zip(ours["param_groups"], theirs["param_groups"], strict=True):
        for key, value in group.items():
            assert value == torch_group[key], key  # every option tinyattn has, as torch holds it
    assert list(ours["state"]) == list(theirs["state"])
    for index, entries in theirs["state"].items():
        assert set(ours["state"][index]) == set(entries)
        for key, value in entries.items():
            np.testing.assert_allclose(
                np.asarray(ours["state"][index][key]), value.numpy(), rtol=1e-6
            )


def make_models(device):
    ta.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 5))
    torch_model = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 5)
    )
    torch_model.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    return model.to(device), torch_model


def groups_of(named):
    """GPT-style groups: weight decay on matrices, none on biases and LayerNorm weights."""
    decay = [p for n, p in named if n.endswith("weight") and n != "2.weight"]
    no_decay = [p for n, p in named if not (n.endswith("weight") and n != "2.weight")]
    return [
        {"params": decay, "weight_decay": 0.1},
        {"params": no_decay, "weight_decay": 0.0, "lr": 3e-3, "betas": (0.9, 0.95)},
    ]


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_training_losses_match_torch_in_float32(device, name):
    model, torch_model = make_models(device)
    opt = getattr(optim, name)(groups_of(list(model.named_parameters())), lr=1e-2)
    torch_opt = getattr(torch.optim, name)(groups_of(list(torch_model.named_parameters())), lr=1e-2)

    def noam(step):
        return 16**-0.5 * min((step + 1) ** -0.5, (step + 1) * 4**-1.5)

    sched = lr_scheduler.LambdaLR(opt, noam)
    torch_sched = torch.optim.lr_scheduler.LambdaLR(torch_opt, noam)
    losses, torch_losses = [], []
    data = np.random.default_rng(0)
    x = data.standard_normal((8, 6)).astype(np.float32)  # one batch, fitted for 12 steps
    y = data.integers(0, 5, (8,))
    for _ in range(12):
        loss = nn.functional.cross_entropy(
            model(ta.tensor(x, device=device)), ta.tensor(y, device=device)
        )
        torch_loss = torch.nn.functional.cross_entropy(
            torch_model(torch.tensor(x)), torch.tensor(y)
        )
        opt.zero_grad()
        torch_opt.zero_grad()
        loss.backward()
        torch_loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        torch_norm = torch.nn.utils.clip_grad_norm_(torch_model.parameters(), 0.5)
        np.testing.assert_allclose(norm.numpy(), torch_norm.numpy(), rtol=1e-5)
        opt.step()
        torch_opt.step()
        sched.step()
        torch_sched.step()
        losses.append(float(loss))
        torch_losses.append(torch_loss.item())
    np.testing.assert_allclose(losses, torch_losses, rtol=2e-6)
    assert losses[-1] < losses[0]  # it trained
    for (key, p), tp in zip(model.named_parameters(), torch_model.parameters(), strict=True):
        np.testing.assert_allclose(
            p.detach().numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=key
        )
        assert str(p.detach().numpy().dtype) == "float32"


def test_scheduler_errors():
    opt = optim.SGD([nn.Parameter(ta.zeros(1))], lr=1.0)
    with pytest.raises(TypeError, match="not an Optimizer"):
        lr_scheduler.StepLR(object(), 2)
    with pytest.raises(ValueError, match="step_size"):
        lr_scheduler.StepLR(opt, 0)
    with pytest.raises(ValueError, match="T_max"):
        lr_scheduler.CosineAnnealingLR(opt, T_max=0)
    with pytest.raises(ValueError, match="start_factor"):
        lr_scheduler.LinearLR(opt, start_factor=0.0)
    with pytest.raises(ValueError, match="lr_lambdas"):
        lr_scheduler.LambdaLR(opt, [lambda s: 1.0, lambda s: 1.0])
    assert math.isclose(opt.param_groups[0]["lr"], 1.0)
    assert ta.optim.lr_scheduler is lr_scheduler


def test_step_with_closure_matches_torch():
    opt, torch_opt = two_group_optimizers("SGD")
    params = [p for g in opt.param_groups for p in g["params"]]
    torch_params = [p for g in torch_opt.param_groups for p in g["params"]]
    target = RNG.standard_normal(3).astype(np.float32)

    def closure():
        opt.zero_grad()
        loss = ((params[1] - ta.tensor(target)) ** 2.0).sum() + (params[0] * params[0]).sum()
        loss.backward()
        return loss

    def torch_closure():
        torch_opt.zero_grad()
        loss = ((torch_params[1] - torch.tensor(target)) ** 2).sum() + (torch_params[0] ** 2).sum()
        loss.backward()
        return loss

    with ta.no_grad():  # the closure still builds its graph, as in PyTorch
        loss = opt.step(closure)
    torch_loss = torch_opt.step(torch_closure)
    assert float(loss) == pytest.approx(torch_loss.item())
    for p, tp in zip(params, torch_params, strict=True):
        np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=1e-6)


def test_pytorch_kernel_hints_accepted_and_result_flags_refused():
    """nanoGPT passes fused=True on CUDA: a kernel choice, so it is accepted; amsgrad changes
    the result, so it is refused rather than ignored."""
    params = [nn.Parameter(ta.zeros(2))]
    optim.AdamW(params, lr=1e-3, fused=True, foreach=None)
    optim.SGD(params, lr=0.1, maximize=False)
    with pytest.raises(NotImplementedError, match="amsgrad"):
        optim.Adam(params, amsgrad=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'momentun'"):
        optim.SGD(params, lr=0.1, momentun=0.9)
