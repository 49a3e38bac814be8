"""Every schedule of torch.optim.lr_scheduler against PyTorch: the learning rates (and, for
CyclicLR and OneCycleLR, the momenta and betas) of two parameter groups over 50 steps, equal to
the last bit; ReduceLROnPlateau over a metric with plateaus in each mode; state dicts that
resume, PyTorch's scheduler state dicts that load and continue; step(epoch); the names tinyattn
lacks. Skipped cleanly when torch is not importable.
"""

from __future__ import annotations

import math
import warnings

import pytest

torch = pytest.importorskip("torch")

import tinyattn as ta  # noqa: E402  (after the skip)
from tinyattn import nn, optim  # noqa: E402
from tinyattn.optim import lr_scheduler  # noqa: E402

# torch warns when a scheduler steps before its optimizer: these runs step schedules alone.
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")


def optimizers(name="SGD", **options):
    """The same two parameter groups (different lrs) in tinyattn and in torch."""
    ours = [nn.Parameter(ta.zeros(2)), nn.Parameter(ta.zeros(3))]
    theirs = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))]
    lr = options.pop("lr", 0.1)
    groups = [{"params": [ours[0]]}, {"params": [ours[1]], "lr": 0.5}]
    torch_groups = [{"params": [theirs[0]]}, {"params": [theirs[1]], "lr": 0.5}]
    return (
        getattr(optim, name)(groups, lr=lr, **options),
        getattr(torch.optim, name)(torch_groups, lr=lr, **options),
    )


class Scale:
    """A callable object: PyTorch saves its attributes in the state dict."""

    def __init__(self, rate):
        self.rate = rate

    def __call__(self, x):
        return self.rate**x


def sequential(m, opt):
    warm = m.LinearLR(opt, start_factor=0.1, total_iters=5)
    decay = m.ExponentialLR(opt, gamma=0.9)
    return m.SequentialLR(opt, [warm, decay], milestones=[5])


def chained(m, opt):
    return m.ChainedScheduler([m.ConstantLR(opt, factor=0.5, total_iters=4), m.StepLR(opt, 7)])


SCHEDULES = {
    "MultiplicativeLR": lambda m, o: m.MultiplicativeLR(o, lambda epoch: 0.97),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, milestones=[3, 10, 10, 25], gamma=0.5),
    "ConstantLR": lambda m, o: m.ConstantLR(o, factor=0.25, total_iters=6),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, gamma=0.93),
    "PolynomialLR": lambda m, o: m.PolynomialLR(o, total_iters=30, power=2.0),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, T_max=12, eta_min=0.001),
    "CosineAnnealingWarmRestarts": lambda m, o: m.CosineAnnealingWarmRestarts(o, 4, 2, 0.01),
    "WarmRestarts T_mult 1": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=7),
    "SequentialLR": sequential,
    "ChainedScheduler": chained,
    "CyclicLR triangular": lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=5),
    "CyclicLR triangular2": lambda m, o: m.CyclicLR(
        o, [0.01, 0.02], [0.1, 0.3], 4, 7, mode="triangular2", base_momentum=0.7
    ),
    "CyclicLR exp_range": lambda m, o: m.CyclicLR(o, 0.01, 0.1, 6, mode="exp_range", gamma=0.97),
    "CyclicLR scale_fn": lambda m, o: m.CyclicLR(
        o, 0.01, 0.1, 5, scale_fn=Scale(0.9), scale_mode="iterations", cycle_momentum=False
    ),
    "OneCycleLR cos": lambda m, o: m.OneCycleLR(o, max_lr=[0.4, 1.0], total_steps=51),
    "OneCycleLR linear three_phase": lambda m, o: m.OneCycleLR(
        o,
        0.4,
        epochs=5,
        steps_per_epoch=11,
        pct_start=0.25,
        anneal_strategy="linear",
        three_phase=True,
        div_factor=10.0,
    ),  # fmt: skip
}
ADAM_SCHEDULES = ["CyclicLR triangular", "OneCycleLR cos"]  # beta1 cycles instead of momentum


def momenta(opt):
    return [(group.get("momentum"), group.get("betas")) for group in opt.param_groups]


def assert_same(sched, torch_sched, opt, torch_opt, where):
    assert sched.get_last_lr() == torch_sched.get_last_lr(), where
    assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in torch_opt.param_groups], where
    assert momenta(opt) == momenta(torch_opt), where


@pytest.mark.parametrize(
    ("name", "optimizer"),
    [(name, "SGD") for name in SCHEDULES] + [(name, "Adam") for name in ADAM_SCHEDULES],
)
def test_schedule_matches_torch_for_50_steps(name, optimizer):
    options = {"momentum": 0.9} if optimizer == "SGD" else {}
    opt, torch_opt = optimizers(optimizer, **options)
    sched, torch_sched = (
        SCHEDULES[name](lr_scheduler, opt),
        SCHEDULES[name](torch.optim.lr_scheduler, torch_opt),
    )
    assert_same(sched, torch_sched, opt, torch_opt, "at construction")
    for step in range(50):
        opt.step()
        torch_opt.step()
        sched.step()
        torch_sched.step()
        assert_same(sched, torch_sched, opt, torch_opt, f"step {step}")


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_state_dict_resumes_and_torch_state_loads(name):
    """Ours resumed from its own state dict, and from torch's, follows torch's run."""
    opt, torch_opt = optimizers("SGD", momentum=0.9)
    sched = SCHEDULES[name](lr_scheduler, opt)
    torch_sched = SCHEDULES[name](torch.optim.lr_scheduler, torch_opt)
    for _ in range(13):
        sched.step()
        torch_sched.step()
    for source in (sched.state_dict(), torch_sched.state_dict()):
        saved_opt = opt.state_dict()
        again, torch_again = optimizers("SGD", momentum=0.9)
        again.load_state_dict(saved_opt)
        torch_again.load_state_dict(torch_opt.state_dict())
        resumed = SCHEDULES[name](lr_scheduler, again)
        torch_resumed = SCHEDULES[name](torch.optim.lr_scheduler, torch_again)
        again.load_state_dict(saved_opt)  # construction moved the lrs: back to step 13's
        torch_again.load_state_dict(torch_opt.state_dict())
        resumed.load_state_dict(source)
        torch_resumed.load_state_dict(torch_sched.state_dict())
        for step in range(20):
            resumed.step()
            torch_resumed.step()
            assert_same(resumed, torch_resumed, again, torch_again, f"resumed step {step}")


PLATEAU_ROWS = [
    {},
    {"mode": "max", "factor": 0.5, "patience": 2},
    {"threshold_mode": "abs", "threshold": 0.05, "patience": 1, "cooldown": 2},
    {"mode": "max", "threshold_mode": "abs", "threshold": 0.1, "patience": 0, "min_lr": 0.02},
    {"patience": 1, "min_lr": [0.03, 0.001], "eps": 0.01, "factor": 0.3},
]


def metric(step):
    """Improves, then plateaus and wobbles: every mode sees improvements and bad epochs."""
    return 1.0 / (1 + min(step, 8)) + 0.01 * math.sin(step) + (0.3 if step % 17 == 16 else 0)


@pytest.mark.parametrize("options", PLATEAU_ROWS, ids=repr)
def test_reduce_lr_on_plateau_matches_torch(options):
    opt, torch_opt = optimizers()
    sched = lr_scheduler.ReduceLROnPlateau(opt, **options)
    torch_sched = torch.optim.lr_scheduler.ReduceLROnPlateau(torch_opt, **options)
    for step in range(60):
        value = metric(step) * (-1 if options.get("mode") == "max" else 1)
        sched.step(value)
        torch_sched.step(value)
        assert sched.get_last_lr() == torch_sched.get_last_lr(), f"step {step}"
        assert (sched.best, sched.num_bad_epochs, sched.cooldown_counter) == (
            torch_sched.best,
            torch_sched.num_bad_epochs,
            torch_sched.cooldown_counter,
        )
    resumed = lr_scheduler.ReduceLROnPlateau(opt, **options)
    resumed.load_state_dict(torch_sched.state_dict())
    assert resumed.best == torch_sched.best and resumed.mode == torch_sched.mode


@pytest.mark.parametrize(
    "make",
    [
        lambda m, o: m.StepLR(o, 3, 0.5),
        lambda m, o: m.MultiStepLR(o, [2, 5]),
        lambda m, o: m.ExponentialLR(o, 0.9),
        lambda m, o: m.PolynomialLR(o, 10),
        lambda m, o: m.CosineAnnealingLR(o, 10),
        lambda m, o: m.ConstantLR(o),
        lambda m, o: m.LinearLR(o),
    ],
)
def test_step_with_an_epoch_uses_the_closed_form_and_warns(make):
    opt, torch_opt = optimizers()
    sched, torch_sched = make(lr_scheduler, opt), make(torch.optim.lr_scheduler, torch_opt)
    for epoch in (4, 7, 2, 11):
        with pytest.warns(UserWarning, match="epoch parameter"):
            sched.step(epoch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch_sched.step(epoch)
        assert sched.get_last_lr() == torch_sched.get_last_lr()


def test_warm_restarts_step_to_a_fractional_epoch_without_warning():
    """PyTorch's way of stepping within an epoch (no deprecation warning there)."""
    opt, torch_opt = optimizers()
    sched = lr_scheduler.CosineAnnealingWarmRestarts(opt, 3, 2)
    torch_sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(torch_opt, 3, 2)
    for epoch in (0.5, 2.25, 4.0, 9.5, 1.0, 30.75):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sched.step(epoch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch_sched.step(epoch)
        assert sched.get_last_lr() == torch_sched.get_last_lr()


def test_one_cycle_refuses_a_step_past_total_steps():
    opt, _ = optimizers()
    sched = lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=3)
    for _ in range(3):
        sched.step()
    with pytest.raises(ValueError, match="total steps"):
        sched.step()


def test_schedule_errors_follow_torch():
    opt, _ = optimizers()
    with pytest.raises(ValueError, match="factor"):
        lr_scheduler.ReduceLROnPlateau(opt, factor=1.5)
    with pytest.raises(ValueError, match="mode"):
        lr_scheduler.ReduceLROnPlateau(opt, mode="lowest")
    with pytest.raises(ValueError, match="T_0"):
        lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=0)
    with pytest.raises(ValueError, match="total_steps"):
        lr_scheduler.OneCycleLR(opt, max_lr=1.0)
    with pytest.raises(ValueError, match="momentum"):
        lr_scheduler.CyclicLR(optim.Adagrad(opt.param_groups[0]["params"]), 0.01, 0.1)
    with pytest.raises(ValueError, match="milestone"):
        lr_scheduler.SequentialLR(opt, [lr_scheduler.ConstantLR(opt)], milestones=[3])


def test_every_torch_schedule_name_exists():
    """The public classes of torch.optim.lr_scheduler are all here (the typing helpers it
    imports are not schedules)."""
    names = [n for n in torch.optim.lr_scheduler.__all__]
    assert [n for n in names if not hasattr(lr_scheduler, n)] == []
    assert lr_scheduler._LRScheduler is lr_scheduler.LRScheduler
    with pytest.raises(AttributeError, match="not in tinyattn"):
        lr_scheduler.WarmupCosineLR  # noqa: B018  (a name some other libraries have)
