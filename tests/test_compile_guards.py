"""ta.compile's guards reach what the step's code reads, its verification mode catches what they
cannot, and a compiled model's backward runs outside it, as with torch.compile.

Each case changes a Python value after the step was recorded and replayed: the compiled step
must then equal eager (it recorded again) or raise a CompileError, never replay the old value.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn, optim

# Module-level values the steps below read through helpers and chains (rebound by the tests).
SCALE = 2.0
CONFIG = {"optim": {"lr": 0.5}}
LRS = [0.5]
TENSORS = [None]


class Settings:
    """A plain configuration object (not a dict or namespace): only its attributes say."""

    def __init__(self) -> None:
        self.optim = types.SimpleNamespace(lr=0.5)
        self.lr = 0.5


SETTINGS = Settings()


@pytest.fixture(autouse=True)
def _verified(monkeypatch):
    """Every compiled step here also records again every third replayed call and compares."""
    monkeypatch.setenv("TINYATTN_COMPILE_VERIFY", "3")


def scaled_loss(out):
    return (out * SCALE).sum()


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self._scale = 1.0
        self.scales = [1.0]
        self.temperature = 1.0

    def forward(self, x):
        return self.lin(x) * self._scale * self.scales[0]

    def loss(self, x):
        return (self.lin(x) / self.temperature).sum()


def _run(step, change, calls=6, at=3):
    """(eager results, compiled results) of `calls` calls, `change()` run before call `at`."""
    results = []
    for compiled in (False, True):
        change(reset=True)
        run = ta.compile(step) if compiled else step
        values = []
        for number in range(calls):
            if number == at:
                change(reset=False)
            values.append(float(run(ta.ones(4, 3)).numpy()))
        results.append(values)
    return results


def _setter(apply):
    def change(reset):
        apply(reset)

    return change


@pytest.fixture
def model():
    ta.manual_seed(0)
    return Scaled()


def _cases(model):
    def helper_global(reset):
        global SCALE
        SCALE = 2.0 if reset else 3.0

    def object_attribute(reset):
        SETTINGS.lr = 0.5 if reset else 0.25
        SETTINGS.optim.lr = 0.5 if reset else 0.125

    def nested_dict(reset):
        CONFIG["optim"]["lr"] = 0.5 if reset else 0.25

    def list_entry(reset):
        LRS[0] = 0.5 if reset else 0.25

    def private_attribute(reset):
        model._scale = 1.0 if reset else 4.0

    def list_attribute(reset):
        model.scales[0] = 1.0 if reset else 5.0

    def method_setting(reset):
        model.temperature = 1.0 if reset else 2.0

    def replaced_tensor(reset):
        TENSORS[0] = ta.ones(2) if reset else ta.full((2,), 7.0)

    steps = {
        "helper global": (lambda x: scaled_loss(model.lin(x)), helper_global),
        "plain object attribute": (
            lambda x: (model.lin(x) * SETTINGS.lr * SETTINGS.optim.lr).sum(),
            object_attribute,
        ),
        "nested dict": (lambda x: (model.lin(x) * CONFIG["optim"]["lr"]).sum(), nested_dict),
        "list entry": (lambda x: (model.lin(x) * LRS[0]).sum(), list_entry),
        "module private attribute": (lambda x: model(x).sum(), private_attribute),
        "module list attribute": (lambda x: model(x).sum(), list_attribute),
        "module method": (lambda x: model.loss(x), method_setting),
        "replaced tensor in a list": (lambda x: (model.lin(x) + TENSORS[0]).sum(), replaced_tensor),
    }
    return steps


CASES = list(_cases(None))


@pytest.mark.parametrize("case", CASES)
def test_a_value_read_deep_in_the_step_records_again_when_it_changes(model, case):
    step, change = _cases(model)[case]
    with ta.no_grad():  # forward only: the whole function replays
        eager, compiled = _run(step, change)
    assert compiled == eager, case
    assert eager[3] != eager[2], "the change matters"


def test_a_closure_variable_of_a_helper_is_guarded(model):
    def make(scale):
        def helper(out):
            return (out * scale).sum()

        def rescale(value):
            nonlocal scale
            scale = value

        return helper, rescale

    helper, rescale = make(2.0)
    compiled = ta.compile(lambda x: helper(model.lin(x)))
    x = ta.ones(4, 3)
    with ta.no_grad():
        for _ in range(3):
            compiled(x)
        rescale(5.0)
        assert float(compiled(x).numpy()) == float(helper(model.lin(x)).numpy())


def test_a_value_that_changes_on_every_call_is_refused_naming_it(model):
    counter = [0.0]

    def step(x):
        counter[0] += 1.0
        return (model.lin(x) * counter[0]).sum()

    compiled = ta.compile(step, max_signatures=2)
    with ta.no_grad(), pytest.raises(ta.CompileError, match=r"`counter\[0\]` \(read by"):
        for _ in range(6):
            compiled(ta.ones(4, 3))


def test_verification_catches_a_read_the_guards_cannot_see(model):
    """`max(values)` reads the list in C code, where no guard reaches: the replay would go on
    with the recorded 1.0. Recording again every 2 calls finds the tape differs, and says in
    which op."""
    values = [1.0]

    def step(x):
        return (model.lin(x) * max(values)).sum()

    compiled = ta.compile(step, verify_every=2)
    with ta.no_grad():
        for _ in range(4):
            compiled(ta.ones(4, 3))
        values[0] = 3.0
        with pytest.raises(ta.CompileError, match=r"verification.*MulScalar.*c=1\.0 vs c=3\.0"):
            for _ in range(2):
                compiled(ta.ones(4, 3))


def test_verification_is_turned_on_by_the_environment(monkeypatch):
    monkeypatch.setenv("TINYATTN_COMPILE_VERIFY", "5")
    assert ta.compile(lambda x: x).verify_every == 5
    monkeypatch.setenv("TINYATTN_COMPILE_VERIFY", "often")
    with pytest.raises(ValueError, match="TINYATTN_COMPILE_VERIFY"):
        ta.compile(lambda x: x)


# ---------------------------------------------------------------- backward outside the call
def _lm():
    ta.manual_seed(0)
    return nn.Sequential(nn.Embedding(11, 8), nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 11))


def _train(compiled, steps=8):
    model = _lm()
    run = ta.compile(model) if compiled else model
    opt = optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for k in range(steps):
        tokens = ta.tensor([[(3 * k + j) % 11 for j in range(6)] for _ in range(2)])
        targets = ta.tensor([[(3 * k + j + 1) % 11 for j in range(6)] for _ in range(2)])
        loss = F.cross_entropy(run(tokens).view(-1, 11), targets.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach().numpy().item())
    return losses, [p.detach().numpy().copy() for p in model.parameters()], run


def test_a_compiled_model_with_backward_and_adamw_outside_equals_eager_bit_for_bit():
    eager, eager_params, _ = _train(False)
    compiled, compiled_params, run = _train(True)
    assert compiled == eager
    assert all((a == b).all() for a, b in zip(eager_params, compiled_params))
    assert len(run.tapes) == 1, "replayed after two recordings"


def test_a_compiled_function_with_several_outputs_hands_each_its_gradient():
    ta.manual_seed(0)
    lin = nn.Linear(3, 4)

    def two(x):
        h = lin(x)
        return h.relu(), h.tanh()

    grads = []
    for run in (two, ta.compile(two)):
        found = []
        for k in range(4):
            lin.zero_grad()
            a, b = run(ta.full((2, 3), 0.5 + k))
            (a.sum() * 2 + (b * b).sum()).backward()
            found.append(lin.weight.grad.numpy().copy())
        grads.append(found)
    assert all((e == c).all() for e, c in zip(*grads))


def test_a_compiled_model_under_no_grad_replays_forward_only():
    model = _lm()
    compiled = ta.compile(model)
    tokens = ta.tensor([[1, 2, 3]])
    with ta.no_grad():
        outs = [compiled(tokens) for _ in range(4)]
    assert not outs[-1].requires_grad
    (tape,) = compiled.tapes.values()
    assert tape.graph is None and not tape.backward_segments
    assert (outs[-1].detach().numpy() == model(tokens).detach().numpy()).all()


def test_backward_after_a_later_replay_is_refused_not_wrong():
    """A verifying call records on arrays of its own and leaves the tape's buffers alone, so a
    backward after it is still right; after a later replay it is refused."""
    model = _lm()
    compiled = ta.compile(model)
    tokens = ta.tensor([[1, 2, 3]])
    for _ in range(3):
        compiled(tokens).sum().backward()
    (tape,) = compiled.tapes.values()
    early = compiled(tokens).sum()
    verified, replays = tape.verified, tape.replays
    compiled(tokens)
    compiled(tokens)  # of two calls in a row, one replays (verification is every third)
    assert tape.replays > replays and tape.verified > verified
    with pytest.raises(ta.CompileError, match="Run backward before calling the compiled"):
        early.backward()


def test_a_non_leaf_input_with_its_own_graph_is_refused_clearly():
    model = _lm()
    body = ta.compile(model[1:])
    hidden = model[0](ta.tensor([[1, 2]]))
    with pytest.raises(ta.CompileError, match="computed outside it"):
        body(hidden)


# ------------------------------------------------------------------- gradients the step assigns
def _cleared(where, how):
    """A step whose optimizer is SGD with momentum, its gradients cleared `how` at `where`
    ("before" backward or "after" the optimizer's step)."""
    ta.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3))
    optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    clear = {
        "optimizer.zero_grad()": lambda: optimizer.zero_grad(),
        "optimizer.zero_grad(set_to_none=False)": lambda: optimizer.zero_grad(set_to_none=False),
        "model.zero_grad()": lambda: model.zero_grad(),
        "model.zero_grad(set_to_none=False)": lambda: model.zero_grad(set_to_none=False),
        "p.grad = None": lambda: [setattr(p, "grad", None) for p in model.parameters()],
    }[how]

    def step(x, y):
        if where == "before":
            clear()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if where == "after":
            clear()
        return loss

    return model, step


CLEARS = [
    "optimizer.zero_grad()",
    "optimizer.zero_grad(set_to_none=False)",
    "model.zero_grad()",
    "model.zero_grad(set_to_none=False)",
    "p.grad = None",
]


@pytest.mark.parametrize("how", CLEARS)
@pytest.mark.parametrize("where", ["before", "after"])
def test_gradients_the_step_clears_are_cleared_by_its_replays(where, how):
    """``zero_grad()`` runs no op, but what it leaves is part of the step's effects: cleared
    after ``optimizer.step()``, eager leaves every ``.grad`` None (or zeros), and so must a
    replay, which assigns them at the same point; cleared to zeros, the next call's backward
    adds to them. Losses, parameters and every ``.grad`` after every call equal eager's bit for
    bit, with verification recording again every third replay."""
    rng = np.random.default_rng(0)
    batches = [
        (ta.tensor(rng.standard_normal((5, 4)).astype("float32")), ta.tensor(rng.integers(0, 3, 5)))
        for _ in range(9)
    ]
    results = []
    for compiled in (False, True):
        model, step = _cleared(where, how)
        run = ta.compile(step) if compiled else step
        seen = []
        for x, y in batches:
            seen.append(run(x, y).detach().numpy().copy())
            seen += [None if p.grad is None else p.grad.numpy().copy() for p in model.parameters()]
        seen += [p.detach().numpy().copy() for p in model.parameters()]
        results.append(seen)
    eager, replayed = results
    assert len(eager) == len(replayed)
    for a, b in zip(eager, replayed):
        assert (a is None and b is None) or (a is not None and b is not None and (a == b).all())
    (tape,) = run.tapes.values()
    assert tape.calls - tape.verified >= 4 and tape.verified >= 1, "replayed and verified"
    if where == "after" and "set_to_none=False" not in how:
        cleared = [e for e in tape.entries if e[0] == "assign"]
        assert len(cleared) == len(list(model.parameters())), "one assignment per parameter"
    # zero_grad(set_to_none=False) zeroes in place, as PyTorch does: an in-place write the tape
    # replays like any other, not an assignment.


def test_in_eval_mode_with_grad_on_the_backward_replays_only_when_backward_comes(monkeypatch):
    """As with torch.compile, a model in eval mode with grad mode on returns tensors that
    require grad (a backward through them is allowed): the backward is recorded, but a replay
    runs the forward only, and the recorded backward runs when the caller's backward reaches
    the call."""
    from tinyattn.compiler.replay import Tape

    runs = []
    replay_backward = Tape.replay_backward
    monkeypatch.setattr(
        Tape, "replay_backward", lambda tape, grads: runs.append(1) or replay_backward(tape, grads)
    )
    model = _lm().eval()
    compiled = ta.compile(model)
    tokens = ta.tensor([[1, 2, 3]])
    outs = [compiled(tokens) for _ in range(5)]
    (tape,) = compiled.tapes.values()
    assert all(out.requires_grad for out in outs) and tape.graph is not None
    assert not runs, "no backward replayed before one was asked for"
    verified = tape.verified
    out = compiled(tokens)
    replayed = tape.verified == verified
    out.sum().backward()
    compiled_grads = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    model(tokens).sum().backward()
    assert all((p.grad.numpy() == g).all() for p, g in zip(model.parameters(), compiled_grads))
    assert len(runs) == (1 if replayed else 0)


def test_a_write_into_the_zeroed_gradient_replays_as_eager():
    """``zero_grad(set_to_none=False)`` zeroes the gradient in place, as PyTorch does, so a step
    that then writes into ``p.grad`` writes into the array its replays write: equal to eager."""
    from tinyattn import nn, optim

    def run(compiled: bool) -> list[float]:
        ta.manual_seed(0)
        layer = nn.Linear(3, 2)
        optimizer = optim.SGD(layer.parameters(), lr=0.1)

        def step(x):
            optimizer.zero_grad(set_to_none=False)
            if layer.weight.grad is not None:
                with ta.no_grad():
                    layer.weight.grad.add_(1.0)
            loss = layer(x).pow(2).sum()
            loss.backward()
            optimizer.step()
            return loss

        step = ta.compile(step) if compiled else step
        rng = np.random.default_rng(0)
        return [step(ta.tensor(rng.normal(size=(4, 3)), dtype="float32")).item() for _ in range(7)]

    assert run(compiled=True) == run(compiled=False)


FILL = float("nan")  # read by a helper at every call: NaN != NaN must still count as unchanged


def nan_filled(out):
    return ta.where(ta.isnan(out), ta.tensor(FILL), out).sum() * 0 + out.sum()


def test_a_nan_the_step_reads_is_the_same_value_at_every_call():
    """A constant NaN (array libraries read ``xp.nan`` in their own code, a user's helper may
    too) must not make every call record again: the guard keys NaN as one value."""
    lin = nn.Linear(3, 2)
    step = ta.compile(lambda x: nan_filled(lin(x)))
    x = ta.ones(4, 3)
    for _ in range(12):
        assert float(step(x).detach().numpy()) == float(nan_filled(lin(x)).detach().numpy())
    (tape,) = step.tapes.values()
    assert tape.calls >= 9  # replayed, not recorded twelve times


def test_array_library_code_is_not_followed_wherever_it_is_installed(monkeypatch):
    """Installed packages are skipped by sysconfig's folders; an array library on PYTHONPATH
    (as a GPU machine's added wheels are) is not under them, and is skipped all the same."""
    from tinyattn.compiler import guards as compile_guards

    code = np.lib.stride_tricks.as_strided.__code__
    monkeypatch.setattr(compile_guards, "_SKIPPED", ())  # as if NumPy were on PYTHONPATH
    monkeypatch.setattr(compile_guards, "_chains", {})
    assert compile_guards.chains_of(code) == ()
    monkeypatch.setattr(compile_guards, "_chains", {})
    monkeypatch.setattr(compile_guards, "_array_libraries", lambda: ())
    assert compile_guards.chains_of(code) != ()  # the control: followed without the rule
