"""ta.compile: a replayed step equals the eager step, new shapes record again, and what cannot be
replayed faithfully is refused while recording (never replayed wrongly).

Every model is trained twice from the same seed, once eagerly and once through ``ta.compile``,
on the same changing batches; losses and parameters must agree bit for bit (the same kernels
run in the same order), on every backend.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn, optim


def _batches(device, count=12, batch=8, width=16, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    return [
        (
            ta.tensor(rng.standard_normal((batch, width)).astype("float32"), device=device),
            ta.tensor(rng.integers(0, classes, batch), device=device),
        )
        for _ in range(count)
    ]


def _mlp(device, dropout=0.0):
    ta.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(16, 32), nn.GELU(), nn.Dropout(dropout), nn.LayerNorm(32), nn.Linear(32, 4)
    ).to(device)
    optimizer = optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    return model, optimizer, scheduler


def _classifier_step(model, optimizer, scheduler):
    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        scheduler.step()
        return loss

    return step


def _squared_linear(device):
    """(a Linear(3, 1), a step: its gradients zeroed, then those of sum(lin(x)^2))."""
    ta.manual_seed(0)
    lin = nn.Linear(3, 1).to(device)

    def step(x):
        lin.zero_grad()
        loss = (lin(x) ** 2).sum()
        loss.backward()
        return loss

    return lin, step


def _token_model(device, vocab, optimizer=optim.SGD, lr=0.1):
    """(an embedding-and-linear model over `vocab` tokens, its optimizer), seeded."""
    ta.manual_seed(0)
    model = nn.Sequential(nn.Embedding(vocab, 8), nn.Linear(8, vocab)).to(device)
    return model, optimizer(model.parameters(), lr=lr)


def _token_step(model, optimizer):
    """A training step of `_token_model`'s model: cross-entropy of the next tokens."""
    vocab = model[1].out_features

    def step(tokens, targets):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(tokens).reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        return loss

    return step


def _mlp_and_optimizer(device):
    model, optimizer, _ = _mlp(device)
    return model, optimizer


def _plain_step(model, optimizer, zero_grad="none"):
    """Cross-entropy, backward and the optimizer's step; the gradients first set to None
    (``"none"``), zeroed in place (``"zeros"``), or kept to add to (None)."""

    def step(x, y):
        if zero_grad is not None:
            optimizer.zero_grad(set_to_none=zero_grad == "none")
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return step


def _same_training(make, make_step, batches):
    """Train eagerly and compiled from the same seed; return both loss lists and models."""
    results = []
    for compiled in (False, True):
        model, *rest = make()
        ta.manual_seed(1)  # dropout masks: the same draws in both runs
        step = make_step(model, *rest)
        step = ta.compile(step) if compiled else step
        losses = [float(step(*batch).detach().numpy()) for batch in batches]
        results.append((losses, model, step))
    return results


def _with_sgd(module_class, device):
    """A `make` for `_same_training`: the module, made from seed 0, with plain SGD."""

    def make():
        ta.manual_seed(0)
        model = module_class().to(device)
        return model, optim.SGD(model.parameters(), lr=0.1)

    return make


def _assert_same(eager, compiled):
    (eager_losses, eager_model, _), (compiled_losses, compiled_model, step) = eager, compiled
    assert compiled_losses == eager_losses
    for (name, p), q in zip(eager_model.named_parameters(), compiled_model.parameters()):
        np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy(), err_msg=name)
    assert len(step.tapes) == 1, "the replays must have run"


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_a_compiled_classifier_step_equals_the_eager_one(device, dropout):
    batches = _batches(device)
    eager, compiled = _same_training(lambda: _mlp(device, dropout), _classifier_step, batches)
    _assert_same(eager, compiled)


def test_rules_that_build_masks_with_array_code_replay_as_calls(device):
    """ReLU's, abs's, clamp's and maximum's rules build their masks from the input's values with
    array code: such a rule is recorded as one call of the rule, so the masks are rebuilt."""

    def make():
        ta.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
        return model, optim.Adam(model.parameters(), lr=1e-2)

    def make_step(model, optimizer):
        def step(x, y):
            h = model(x)
            logits = h.abs().clamp(0.0, 3.0) + ta.maximum(h, 0.5 * h)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            return loss

        return step

    eager, compiled = _same_training(make, make_step, _batches(device))
    _assert_same(eager, compiled)
    kinds = [entry[0] for entry in next(iter(compiled[2].tapes.values())).entries]
    assert "rule" in kinds


@pytest.mark.parametrize("fused", [True, False], ids=["fused-heads", "reference-heads"])
def test_a_compiled_transformer_step_equals_the_eager_one(device, monkeypatch, fused):
    """Attention with a causal mask, embeddings, LayerNorm, GELU, AdamW with parameter groups;
    the attention's heads as one HeadsAttention node, or as the reference's ops."""
    monkeypatch.setattr(nn.attention, "FUSED_ATTENTION", fused)
    vocab, T = 11, 8

    class TinyLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, 16)
            self.pos = nn.Embedding(T, 16)
            self.block = nn.TransformerBlock(16, 2, 32, norm_first=True, activation="gelu")
            self.head = nn.Linear(16, vocab)

        def forward(self, idx):
            x = self.embed(idx) + self.pos(ta.arange(idx.shape[1], device=idx.device))
            return self.head(self.block(x, is_causal=True))

    def make():
        ta.manual_seed(0)
        model = TinyLM().to(device)
        decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
        rest = [p for n, p in model.named_parameters() if not n.endswith("weight")]
        groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
        return model, optim.AdamW(groups, lr=3e-3)

    def make_step(model, optimizer):
        def step(idx, targets):
            logits = model(idx)
            loss = F.cross_entropy(logits.view(-1, vocab), targets.view(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            return loss

        return step

    rng = np.random.default_rng(0)
    batches = []
    for _ in range(12):
        tokens = rng.integers(0, vocab, (4, T + 1))
        batches.append(
            (ta.tensor(tokens[:, :-1], device=device), ta.tensor(tokens[:, 1:], device=device))
        )
    eager, compiled = _same_training(make, make_step, batches)
    _assert_same(eager, compiled)
    labels = next(iter(compiled[2].tapes.values())).labels
    if fused:  # every head's products, mask and softmax in out= calls into the tape's buffers,
        # on the host only: off it the heads are merged by a copy, as in the eager forward
        assert ("HeadsAttention forward (out=)" in labels) == (device == "cpu"), labels
        assert "Where forward" not in labels and "Softmax forward" not in labels
    else:
        # The heads merged back (a reshape of a transposed array) copy with out=; the causal
        # mask's Where has its backward recorded as ops, not replayed as a call of the rule.
        assert ("Reshape forward (out=)" in labels) == (device != "strict"), labels
        assert "Where backward" not in labels and "Where forward" in labels
    # Both embeddings' gradients are one-hot products into the tape's buffers where out= exists.
    assert labels.count("IndexAdd forward (out=)") == (2 if device == "cpu" else 0), labels


@pytest.mark.parametrize("identity_rows", [1024, 4])
def test_a_replay_refuses_tokens_and_targets_out_of_range(device, monkeypatch, identity_rows):
    """The eager checks of a lookup and of cross-entropy's targets run while recording; a replay
    gets new batches, and an index or target out of range is refused with the op's name, never
    taken as some other row: through the table of target rows, and past IDENTITY_ROWS classes
    (here a limit of 4 for 7 classes) by comparing. Off the host (where CuPy's take would wrap
    an index) the targets are compared in both cases."""
    from tinyattn import kernels

    monkeypatch.setattr(kernels, "IDENTITY_ROWS", identity_rows)
    step = ta.compile(_token_step(*_token_model(device, 7)))
    tokens, targets = ta.tensor([[1, 2, 3]], device=device), ta.tensor([[2, 3, 4]], device=device)
    for _ in range(3):
        step(tokens, targets)
    (tape,) = step.tapes.values()

    def replayed(*batch):
        # A verifying call (every third) records eagerly, and eager's checks would refuse: a
        # good batch takes that turn, so that each bad one meets the replay's own check.
        if step.verify_every and (tape.calls + 1) % step.verify_every == 0:
            step(tokens, targets)
        verified = tape.verified
        step(*batch)
        assert tape.verified == verified, "refused by a replay"

    with pytest.raises(IndexError, match="getitem: .*out of range for axis 0 of size 7"):
        replayed(ta.tensor([[1, 7, 3]], device=device), targets)
    for bad in (7, -1):
        with pytest.raises(IndexError, match="cross_entropy: a target value is out of range"):
            replayed(tokens, ta.tensor([[1, bad, 3]], device=device))
    assert list(step.tapes.values()) == [tape] and tape.verified == 1


@pytest.mark.parametrize("identity_rows", [1024, 4])
def test_an_embedding_gradient_replays_as_its_forward_computes_it(
    device, monkeypatch, identity_rows
):
    """Up to IDENTITY_ROWS rows the gradient is the one-hot product, lowered to out= calls on
    NumPy; past it (here a vocabulary of 7 over a limit of 4) the forward compares indices with
    rows, and the replay calls that forward. Either way compiled equals eager."""
    from tinyattn import kernels

    monkeypatch.setattr(kernels, "IDENTITY_ROWS", identity_rows)
    vocab = 7
    rng = np.random.default_rng(0)
    batches = [
        tuple(ta.tensor(rng.integers(0, vocab, (4, 5)), device=device) for _ in "xy")
        for _ in range(8)
    ]
    eager, compiled = _same_training(lambda: _token_model(device, vocab), _token_step, batches)
    _assert_same(eager, compiled)
    labels = next(iter(compiled[2].tapes.values())).labels
    lowered = device == "cpu" and identity_rows >= vocab
    assert ("IndexAdd forward (out=)" in labels) == lowered, labels


def test_a_tensor_passed_twice_is_not_replayed_for_two_tensors(device):
    """step(a, a) records one buffer for both arguments; step(b, c) has another signature and
    records its own, rather than replaying c's values in place of b's."""
    ta.manual_seed(0)
    lin = nn.Linear(2, 2).to(device)

    def step(x, y):
        return (lin(x) * y).sum()

    compiled = ta.compile(step)
    rng = np.random.default_rng(0)

    def draw():
        return ta.tensor(rng.standard_normal((2, 2)).astype("float32"), device=device)

    for _ in range(3):
        shared = draw()
        assert float(compiled(shared, shared).detach().numpy()) == float(
            step(shared, shared).detach().numpy()
        )
    for _ in range(3):
        b, c = draw(), draw()
        assert float(compiled(b, c).detach().numpy()) == float(step(b, c).detach().numpy())
    assert len(compiled.tapes) == 2


def test_tensors_inside_tuples_lists_and_dicts_are_inputs(device):
    """``step(batch)`` with ``batch = (x, y)``, as a PyTorch loop writes it: every tensor in the
    arguments is an input, wherever it sits, and the containers' layout is part of the
    signature."""
    ta.manual_seed(0)
    lin = nn.Linear(3, 1).to(device)

    def step(batch, extra):
        x, y = batch
        return ((lin(x) - y) ** 2).mean() + extra["scale"].sum()

    compiled = ta.compile(step)
    x = ta.ones(2, 3, device=device)
    for value in (1.0, 2.0, 3.0, 4.0):
        for container in (tuple, list):
            batch = container([x, ta.full((2, 1), value, device=device)])
            extra = {"scale": ta.full((1,), value, device=device)}
            assert float(compiled(batch, extra).detach().numpy()) == float(
                step(batch, extra).detach().numpy()
            )
    assert len(compiled.tapes) == 2, "one tape for tuples, one for lists"


def test_a_changing_python_argument_warns_that_nothing_replays(device):
    """A Python number in the arguments is part of the signature: a new value on every call
    records every call. The recordings kept for checking stay bounded, and a warning says why
    nothing replays."""
    ta.manual_seed(0)
    lin = nn.Linear(3, 1).to(device)
    compiled = ta.compile(lambda x, scale: lin(x).sum() * scale, max_signatures=2)
    x = ta.ones(2, 3, device=device)
    with pytest.warns(RuntimeWarning, match="no later call repeated") as caught:
        for k in range(6):
            assert float(compiled(x, float(k)).detach().numpy()) == float(
                (lin(x).sum() * k).detach().numpy()
            )
    assert len(caught) == 1, "warned once"
    assert not compiled.tapes and len(compiled._first) <= 2


def test_an_input_that_requires_grad_gets_its_gradient_on_every_replay(device):
    """Whether an input requires grad is part of the signature: a step recorded on plain inputs
    has no gradient for them on its tape, so an input that requires grad records its own tape,
    and every call hands it the gradient eager gives (and a plain input none)."""
    lin, step = _squared_linear(device)
    compiled = ta.compile(step)
    rng = np.random.default_rng(0)
    for wants_grad in (False, False, False, True, True, True, False):
        data = rng.standard_normal((2, 3)).astype("float32")
        x = ta.tensor(data, device=device, requires_grad=wants_grad)
        twin = ta.tensor(data, device=device, requires_grad=wants_grad)
        compiled(x)
        step(twin)
        if wants_grad:
            np.testing.assert_array_equal(x.grad.numpy(), twin.grad.numpy())
        else:
            assert x.grad is None
    assert len(compiled.tapes) == 2


def test_in_place_writes_into_the_inputs_reach_the_callers_tensors(device):
    """A step that writes into its inputs (``x.add_``, ``y[0] = v``, or through a view,
    ``x[1:].mul_``) leaves the caller's tensors as eager does, on the recorded calls and on
    every replay, and their versions go up as many times."""

    def step(x, y):
        x.add_(1.0)
        y[0] = 7.0
        x[1:].mul_(3.0)
        return (x * y).sum()

    compiled = ta.compile(step)
    rng = np.random.default_rng(0)
    for _ in range(5):
        data = rng.standard_normal((2, 3)).astype("float32")
        x, y = (ta.tensor(data, device=device) for _ in "xy")
        x_eager, y_eager = (ta.tensor(data, device=device) for _ in "xy")
        got, want = compiled(x, y), step(x_eager, y_eager)
        assert float(got.numpy()) == float(want.numpy())
        np.testing.assert_array_equal(x.numpy(), x_eager.numpy())
        np.testing.assert_array_equal(y.numpy(), y_eager.numpy())
        assert (x._version, y._version) == (x_eager._version, y_eager._version)
    assert len(compiled.tapes) == 1


def test_tensors_passed_by_keyword_are_inputs_too(device):
    """A keyword tensor argument is copied into the replay like a positional one."""
    ta.manual_seed(0)
    lin = nn.Linear(3, 1).to(device)

    def step(x, target=None):
        return ((lin(x) - target) ** 2).mean()

    compiled = ta.compile(step)
    x = ta.ones(2, 3, device=device)
    for value in (1.0, 2.0, 3.0, 4.0):
        target = ta.full((2, 1), value, device=device)
        assert float(compiled(x, target=target).detach().numpy()) == float(
            step(x, target=target).detach().numpy()
        )
    assert len(compiled.tapes) == 1


def test_new_shapes_record_again_and_old_ones_still_replay(device):
    model, optimizer, scheduler = _mlp(device)
    step = ta.compile(_classifier_step(model, optimizer, scheduler))
    small, large = _batches(device, 3, batch=4), _batches(device, 3, batch=8, seed=1)
    for x, y in small + large + small:
        step(x, y)
    assert len(step.tapes) == 2  # one per batch size, each recorded twice then replayed


def test_replay_returns_fresh_tensors_holding_the_new_values(device):
    model, optimizer, scheduler = _mlp(device)
    step = ta.compile(_classifier_step(model, optimizer, scheduler))
    losses = [step(x, y) for x, y in _batches(device, 4)]
    assert len({id(loss) for loss in losses}) == 4
    assert len({float(loss.detach().numpy()) for loss in losses}) == 4


# ------------------------------------------------------------------------ buffers and writes
def test_in_place_writes_inside_the_step_replay(device):
    """A running average kept in a buffer (updated in place under no_grad, as BatchNorm's
    statistics are) and an in-place change of an intermediate are written again on every replay."""

    class Averaging(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(16, 4)
            self.register_buffer("running", ta.zeros(16))

        def forward(self, x):
            with ta.no_grad():
                self.running.mul_(0.9).add_(x.mean(axis=0) * 0.1)
            keep = x.detach()[:, :4] * 0.0 + 1.0
            keep[:, 0] = x.detach()[:, 1].tanh()  # an in-place write of values that change
            return self.linear(x - self.running) * keep

    make = _with_sgd(Averaging, device)

    def make_step(model, optimizer):
        def step(x, y):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            return loss, model.running * 1.0

        return step

    results = []
    for compiled in (False, True):
        model, optimizer = make()
        step = make_step(model, optimizer)
        step = ta.compile(step) if compiled else step
        outs = [step(*batch) for batch in _batches(device, 6)]
        results.append(([(float(a.detach().numpy()), b.detach().numpy()) for a, b in outs], model))
    (eager, eager_model), (replayed, replayed_model) = results
    for (loss_e, running_e), (loss_r, running_r) in zip(eager, replayed):
        assert loss_e == loss_r
        np.testing.assert_array_equal(running_r, running_e)
    np.testing.assert_array_equal(replayed_model.running.numpy(), eager_model.running.numpy())


class _ScaleOnArrays(ta.Function):
    """y = x * w; a rule on raw arrays, so a compiled step replays it as one call of the rule."""

    def forward(self, x, w):
        return x * w

    def backward(self, grad):
        x, w = self.inputs
        xp = ta.backend.namespace(grad.array)
        return grad.array * w.array, xp.sum(grad.array * x.array, axis=0)


def test_a_rule_replayed_as_a_call_leaves_the_recorded_arguments_alone(device):
    """Replaying a rule sets its inputs' arrays to this call's for the time of the rule: the
    tensors given to the recorded calls keep their own values afterwards."""
    w = ta.tensor(np.ones(3, dtype="float32"), device=device, requires_grad=True)

    def step(x):
        w.grad = None
        loss = _ScaleOnArrays.apply(x, w).sum()
        loss.backward()
        return loss

    compiled = ta.compile(step)
    rng = np.random.default_rng(7)
    batches = [
        ta.tensor(rng.standard_normal((4, 3)).astype("float32"), device=device) for _ in range(5)
    ]
    kept = [x.numpy().copy() for x in batches]
    for x in batches:
        compiled(x)
        np.testing.assert_allclose(w.grad.numpy(), x.numpy().sum(axis=0), rtol=1e-6)
    labels = next(iter(compiled.tapes.values())).labels
    assert "_ScaleOnArrays backward" in labels, labels
    for x, before in zip(batches, kept):
        np.testing.assert_array_equal(x.numpy(), before)


def test_replays_do_not_overwrite_what_they_handed_out(device):
    """The replay writes into the recording's arrays: the losses, gradients and inputs given to
    or by earlier calls must keep their values."""
    model, optimizer, scheduler = _mlp(device)
    step = ta.compile(_classifier_step(model, optimizer, scheduler))
    batches = _batches(device, 6)
    kept = [x.numpy().copy() for x, _ in batches]
    losses, grads = [], []
    for x, y in batches:
        losses.append(step(x, y))
        grads.append(model[0].weight.grad)
    values = [float(loss.detach().numpy()) for loss in losses]
    assert len(set(values)) == len(values)
    snapshots = [g.numpy().copy() for g in grads]
    step(*batches[0])
    assert [float(loss.detach().numpy()) for loss in losses] == values
    for g, snapshot in zip(grads, snapshots):
        np.testing.assert_array_equal(g.numpy(), snapshot)
    for (x, _), before in zip(batches, kept):
        np.testing.assert_array_equal(x.numpy(), before)


def test_a_gradient_for_an_input_goes_to_the_new_input(device):
    weight = ta.tensor(np.linspace(-1, 1, 16, dtype="float32"), device=device)

    def step(x):
        loss = (x * weight).sum()
        loss.backward()
        return loss

    compiled = ta.compile(step)
    rng = np.random.default_rng(3)
    for _ in range(4):
        x = ta.tensor(rng.standard_normal(16).astype("float32"), device=device)
        x.requires_grad_(True)
        compiled(x)
        np.testing.assert_array_equal(x.grad.numpy(), weight.numpy())
    assert len(compiled.tapes) == 1


def test_the_replay_drops_views_and_writes_results_in_place(device):
    """What the fast path removes: views of buffers are not made again, and on NumPy and CuPy the
    arithmetic, sums and means included, writes into the buffers with out= (the strict
    stand-in has no out=)."""
    model, optimizer, scheduler = _mlp(device)
    step = ta.compile(_classifier_step(model, optimizer, scheduler))
    for x, y in _batches(device, 3):
        step(x, y)
    tape = next(iter(step.tapes.values()))
    assert tape.dropped > 0
    assert len(tape.program) == len(tape.entries) - tape.dropped
    takes_out = device != "strict"  # NumPy and CuPy take out=
    assert (tape.lowered > 0) == takes_out
    sums = [label for label in tape.labels if label.split()[0] in ("Sum", "Mean", "SumTo")]
    assert sums and all(label.endswith("(out=)") == takes_out for label in sums)


# ---------------------------------------------------------------------------------- refusals
def test_reading_a_value_into_python_is_refused(device):
    model, optimizer, _ = _mlp(device)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        if loss.item() > 100:  # Python branching on a value: no recording can replay it
            loss = loss * 0.5
        return loss

    with pytest.raises(ta.CompileError, match=r"item\(\).*Return the tensor"):
        ta.compile(step)(*_batches(device, 1)[0])


def test_python_state_that_changes_the_ops_is_refused(device):
    model, _, _ = _mlp(device)
    calls = []

    def step(x):
        calls.append(1)
        out = model(x)
        return out * 2.0 if len(calls) % 2 else out.exp()

    compiled = ta.compile(step)
    x = _batches(device, 1)[0][0]
    compiled(x)
    compiled(x)  # differs from the first: compared again with the next (a first call may differ)
    with pytest.raises(ta.CompileError, match="differs between two calls"):
        compiled(x)


def test_a_constant_made_from_changing_python_values_is_refused(device):
    scale = [1.0]

    def step(x):
        scale[0] += 1.0
        # max() reads the list in C, where no guard sees it: a new constant each call
        return x * ta.tensor(max(scale), device=device)

    compiled = ta.compile(step)
    x = _batches(device, 1)[0][0]
    compiled(x)
    compiled(x)  # differs from the first: compared again with the next (a first call may differ)
    with pytest.raises(ta.CompileError, match="changes between calls but is not made"):
        compiled(x)


def test_a_python_number_that_changes_is_refused(device):
    scale = [1.0]

    def step(x):
        scale[0] += 1.0
        return x * max(scale)  # a scalar op whose constant changes, read where no guard sees

    compiled = ta.compile(step)
    x = _batches(device, 1)[0][0]
    compiled(x)
    compiled(x)  # differs from the first: compared again with the next (a first call may differ)
    with pytest.raises(ta.CompileError, match="differs between two calls"):
        compiled(x)


def test_sampling_inside_a_step_is_refused(device):
    def step(probs):
        return ta.multinomial(probs, 1)

    with pytest.raises(ta.CompileError, match="multinomial"):
        ta.compile(step)(ta.tensor([[0.2, 0.8]], device=device))


@pytest.mark.parametrize("reseed", ["manual_seed", "set_rng_state"])
def test_seeding_inside_a_step_is_refused(device, reseed):
    """A step that seeds the generator draws the same dropout mask on every eager call; a
    replay would not seed and would draw on, so the recording refuses it, saying why."""
    state = ta.get_rng_state()
    dropout = nn.Dropout(0.5)

    def step(x):
        ta.manual_seed(0) if reseed == "manual_seed" else ta.set_rng_state(state)
        return dropout(x)

    with pytest.raises(ta.CompileError, match="seeds or sets the random generator"):
        ta.compile(step)(ta.ones(8, device=device))


def test_a_returned_python_number_that_changes_is_refused(device):
    """A replay returns the step's Python values as recorded: a float norm from
    optim.clip_grad_norm would be frozen at its first value, so two recordings that returned
    different ones are refused; values that stay the same replay as they are."""
    ta.manual_seed(0)
    lin = nn.Linear(3, 1).to(device)
    sgd = optim.SGD(lin.parameters(), lr=0.1)

    def step(x, clip):
        sgd.zero_grad()
        loss = (lin(x) ** 2).sum()
        loss.backward()
        norm = optim.clip_grad_norm(lin.parameters(), 1e9)
        sgd.step()
        return (loss, norm) if clip else (loss, "done")

    compiled = ta.compile(step)
    for k in range(4):
        loss, label = compiled(ta.full((2, 3), float(k), device=device), False)
        assert label == "done"
    with pytest.raises(ta.CompileError, match="returned Python values that changed"):
        for k in range(3):  # the first two differ, and so do the second and the third
            compiled(ta.full((2, 3), float(k + 1), device=device), True)


def test_an_unsupported_result_is_refused(device):
    with pytest.raises(ta.CompileError, match="returned a"):
        ta.compile(lambda x: {1, 2})(ta.ones(2, device=device))


def test_compiled_steps_do_not_nest(device):
    """Refused whether the inner step would record or replay: a replay's array calls are not
    ops, so the outer recording would not see them."""
    inner = ta.compile(lambda x: x * 2.0)
    with pytest.raises(ta.CompileError, match="called another compiled step"):
        ta.compile(lambda x: inner(x))(ta.ones(2, device=device))
    for _ in range(3):
        inner(ta.ones(2, device=device))  # recorded and replaying outside
    with pytest.raises(ta.CompileError, match="called another compiled step"):
        ta.compile(lambda x: inner(x) + 1.0)(ta.ones(2, device=device))


def test_a_replayed_random_draw_is_new_each_time(device):
    step = ta.compile(lambda x: x + ta.randn(3, device=device))
    outs = [step(ta.zeros(3, device=device)).numpy() for _ in range(4)]
    assert len({tuple(o.tolist()) for o in outs}) == 4
    ta.manual_seed(5)
    eager = [ta.randn(3).numpy() for _ in range(4)]
    ta.manual_seed(5)
    step = ta.compile(lambda x: x + ta.randn(3, device=device))
    replayed = [step(ta.zeros(3, device=device)).numpy() for _ in range(4)]
    np.testing.assert_array_equal(np.array(replayed), np.array(eager))


def test_import_tinyattn_does_not_load_the_compiler():
    import subprocess
    import sys

    code = "import sys, tinyattn; print('tinyattn.compiler' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------------- CUDA-graph capture
class FakeGraphs:
    """Stands in for `backend.CudaGraphs` where there is no GPU: a "graph" is the function that
    was captured, run again at each launch. Like CUDA, capturing runs nothing; `fail` makes a
    capture fail the way CUDA refuses work a graph cannot hold."""

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.captures, self.launches, self.entered = fail, 0, 0, 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc) -> None:
        pass

    def capture(self, run):
        self.captures += 1
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        return run

    def launch(self, graph) -> None:
        self.launches += 1
        graph()


def _with_fake_graphs(monkeypatch, fail=False):
    fakes = []

    def runner(array):
        fakes.append(FakeGraphs(fail))
        return fakes[-1]

    monkeypatch.setattr(ta.backend, "graph_runner", runner)
    return fakes


@pytest.mark.parametrize("fail", [False, True])
def test_the_capture_path_equals_eager(device, monkeypatch, fail):
    """Array work between Python calls is captured once and launched on later replays; the
    optimizer's step and the gradients handed to leaves stay Python. A capture that fails leaves
    its segment as Python, with the same results."""
    fakes = _with_fake_graphs(monkeypatch, fail)
    batches = _batches(device)
    eager, compiled = _same_training(lambda: _mlp(device), _classifier_step, batches)
    _assert_same(eager, compiled)
    tape = next(iter(compiled[2].tapes.values()))
    (graphs,) = fakes
    # The calls after the two recordings find the tape; the verifying ones among them record
    # again (eagerly, outside the runner) instead of replaying.
    assert tape.calls == len(batches) - 2 and tape.verified == tape.calls // 3
    replays = tape.calls - tape.verified
    assert graphs.entered == replays  # every replay runs inside the runner
    array_segments = [s for s in tape.segments if s.array_work]
    # Off the host, cross-entropy's range check of the targets reads back to the host between
    # the forward's logits and the loss, so the pass is two runs of array work there.
    runs = 1 if device == "cpu" else 2
    assert len(array_segments) == runs, "forward and backward form one run of array work"
    assert graphs.captures == len(array_segments)  # one attempt per segment, on replay 2
    if fail:
        assert graphs.launches == 0
        assert not any(s.capturable for s in tape.segments)
    else:
        assert all(s.graph is not None for s in array_segments)
        assert graphs.launches == len(array_segments) * (replays - 1)
    python = [s for s in tape.segments if not s.array_work]
    # the gradients handed to leaves, clipping, the optimizer's step, the scheduler's step; off
    # the host also the targets' check, and the gradients handed at the end of the first run
    assert len(python) == 4 + 2 * (runs - 1)


def test_an_op_that_draws_is_never_captured(device, monkeypatch):
    """Dropout draws its mask inside the op: a graph would replay the first mask."""
    _with_fake_graphs(monkeypatch)
    batches = _batches(device)
    eager, compiled = _same_training(lambda: _mlp(device, 0.3), _classifier_step, batches)
    _assert_same(eager, compiled)
    tape = next(iter(compiled[2].tapes.values()))
    drawing = [s for s in tape.segments if any("Dropout" in name for name in s.names)]
    assert drawing and not any(s.capturable for s in drawing)


def test_cuda_graphs_drive_cupy_as_documented():
    """`backend.CudaGraphs` against a stand-in for CuPy's stream and graph API: the capture runs
    on the private stream with the private pool, and a failed capture is ended, not left open."""
    calls = []

    class Event:
        pass

    class Stream:
        def __init__(self, non_blocking=False):
            self.capturing = False

        def record(self):
            return Event()

        def wait_event(self, event):
            calls.append("wait")

        def __enter__(self):
            calls.append("enter")

        def __exit__(self, *exc):
            calls.append("exit")

        def begin_capture(self):
            self.capturing = True

        def end_capture(self):
            self.capturing = False
            return "graph"

    class Pool:
        def malloc(self, size):
            return size

    class UsingAllocator:
        def __init__(self, malloc):
            calls.append(("allocator", malloc.__self__.__class__.__name__))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            calls.append("allocator off")

    outer = Stream()
    cuda = type("cuda", (), {})()
    cuda.Stream, cuda.MemoryPool, cuda.using_allocator = Stream, Pool, UsingAllocator
    cuda.get_current_stream = lambda: outer
    graphs = ta.backend.CudaGraphs(type("cupy", (), {"cuda": cuda})())
    with graphs:
        assert graphs.capture(lambda: calls.append("run")) == "graph"
        with pytest.raises(ValueError, match="host read"):
            graphs.capture(lambda: (_ for _ in ()).throw(ValueError("host read")))
        assert not graphs.stream.capturing
    assert calls[:2] == ["wait", "enter"] and calls[-2:] == ["exit", "wait"]
    assert ("allocator", "Pool") in calls and "run" in calls


# ------------------------------------------------------------ the example and ported programs
TEXT = "the quick brown fox jumps over the lazy dog, and the small model learns to spell. " * 6


def _compare_losses(make, batches):
    """Train twice from the same seeds, eagerly and compiled; losses and weights must agree."""
    results = []
    for compiled in (False, True):
        model, step = make()
        ta.manual_seed(7)  # dropout draws the same masks in both runs
        step = ta.compile(step) if compiled else step
        losses = [float(step(*batch).detach().numpy()) for batch in batches]
        results.append((losses, model, step))
    _assert_same(*results)


def test_the_mingpt_program_compiles_exactly(device):
    """minGPT's shape with dropout, two AdamW groups, clipping and a LambdaLR warm-up."""
    from programs import load

    program = load("mingpt_style", "tinyattn")
    dataset = program.CharDataset(TEXT, 16)
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(8):
        pairs = [dataset[int(i)] for i in rng.integers(0, len(dataset), size=4)]
        batches.append(tuple(ta.stack([p[k] for p in pairs]).to(device) for k in (0, 1)))

    def make():
        ta.manual_seed(0)
        model = program.GPT(dataset.vocab_size, 16, n_layer=2, n_head=2, n_embd=32, dropout=0.1)
        model = model.to(device)
        optimizer = model.configure_optimizers(3e-3, 0.1, (0.9, 0.95))
        scheduler = optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 4))
        model.train()

        def step(x, y):
            _, loss = model(x, y)
            model.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            return loss

        return model, step

    _compare_losses(make, batches)


def test_the_copy_task_compiles_exactly(device, copy_task):
    from dataclasses import replace

    config = replace(copy_task.Config(), device=device, batch=16)
    rng = np.random.default_rng(0)
    batches = [
        copy_task.make_batch(config.batch, config.seq_len, config.vocab, rng, device)
        for _ in range(8)
    ]

    def make():
        ta.manual_seed(0)
        model = copy_task.build_model(config)
        optimizer = optim.AdamW(model.parameters(), lr=config.lr)

        def step(inputs, targets):
            logits = copy_task.copied_half(model, inputs, config.seq_len)  # (B, n, V)
            loss = copy_task.F.cross_entropy(  # (B * n, V) rows, as the example
                logits.reshape(-1, config.vocab), targets.reshape(-1)
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            return loss

        return model, step

    _compare_losses(make, batches)


def test_the_copy_tasks_greedy_decoding_compiles_exactly(device, copy_task):
    """Generation: the copy task's greedy decoding, its model's forward compiled. Every length
    is one signature, recorded by the first two sequences and replayed by the others; the
    replayed logits equal the eager ones bit for bit, so the decoded digits are the same."""
    from dataclasses import replace

    config = replace(copy_task.Config(), device=device)
    ta.manual_seed(0)
    model = copy_task.build_model(config)
    model.eval()
    forward = ta.compile(lambda tokens: model(tokens), max_signatures=2 * config.seq_len)
    rng = np.random.default_rng(1)
    with ta.no_grad():
        for _ in range(4):
            sequence = [*rng.integers(0, config.vocab, config.seq_len).tolist(), config.sep]
            for _ in range(config.seq_len):
                tokens = ta.tensor([sequence], dtype="int64", device=device)
                eager, replayed = model(tokens).numpy(), forward(tokens).numpy()
                np.testing.assert_array_equal(replayed, eager)
                sequence.append(int(eager[0, -1].argmax()))
    assert len(forward.tapes) == config.seq_len  # one tape per length, each replayed twice


def test_the_annotated_transformer_compiles_exactly(device):
    """The Annotated Transformer's encoder-decoder with its Noam schedule. Its label-smoothing
    loss finds the padding with ``nonzero`` (a shape that depends on values), which a recording
    cannot replay: it is refused by name; cross-entropy with the same smoothing compiles."""
    from programs import load

    program = load("annotated_style", "tinyattn")
    rng = np.random.default_rng(1)
    batches = []
    for _ in range(6):
        data = rng.integers(1, 11, size=(8, 10))
        data[:, 0] = 1
        data[:2, -2:] = 0
        batch = program.Batch(ta.tensor(data, device=device), ta.tensor(data, device=device), 0)
        batches.append((batch.src, batch.tgt, batch.src_mask, batch.tgt_mask, batch.tgt_y))

    def make(loss_of=None):
        ta.manual_seed(0)
        model = program.make_model(11, 11, N=2).to(device)
        optimizer = optim.Adam(model.parameters(), lr=0.5, betas=(0.9, 0.98), eps=1e-9)
        scheduler = optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: program.rate(s, model_size=32, factor=1.0, warmup=400)
        )
        smoothing = program.LabelSmoothing(size=11, padding_idx=0, smoothing=0.1)

        def step(src, tgt, src_mask, tgt_mask, tgt_y):
            logits = model.generator(model(src, tgt, src_mask, tgt_mask)).reshape(-1, 11)
            if loss_of is None:
                loss = F.cross_entropy(logits, tgt_y.reshape(-1), ignore_index=0)
            else:
                loss = smoothing(logits, tgt_y.reshape(-1))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            return loss

        return model, step

    _compare_losses(make, batches)
    _, smoothed = make(loss_of="label smoothing")
    step = ta.compile(smoothed)
    with pytest.raises(ta.CompileError, match=r"nonzero\(\) \(its shape depends on the values\)"):
        for batch in batches:
            step(*batch)


def test_a_step_without_zero_grad_adds_to_the_gradients_as_eager_does(device):
    """No zero_grad: each call adds its gradients to those of all earlier calls. The gradients
    held before a call are an input of the tape: None on the first call (a tape of its own)
    and held from then on, so the step replays from the fourth call, equal to eager."""

    make = functools.partial(_mlp_and_optimizer, device)
    make_step = functools.partial(_plain_step, zero_grad=None)
    eager, compiled = _same_training(make, make_step, _batches(device, 8))
    _assert_same(eager, compiled)
    for p, q in zip(eager[1].parameters(), compiled[1].parameters()):
        np.testing.assert_array_equal(q.grad.numpy(), p.grad.numpy())


@pytest.mark.parametrize("set_to_none", [True, False])
def test_gradient_accumulation_over_calls_replays_equal_to_eager(device, set_to_none):
    """PyTorch's gradient accumulation: the compiled step runs forward and backward on a
    micro-batch, and every third call the optimizer steps and zeroes the gradients outside it.
    A call starting from None and one adding to held gradients are two tapes; with
    ``set_to_none=False`` the gradients are held on every call after the first, so one tape.
    A gradient tensor taken before a replay keeps its values (the replay hands out a new one,
    as eager's backward does)."""
    every = 3

    def train(compiled):
        model, optimizer, _ = _mlp(device)

        def micro(x, y):
            loss = F.cross_entropy(model(x), y) / every
            loss.backward()
            return loss

        step = ta.compile(micro) if compiled else micro
        losses, kept = [], []
        for number, batch in enumerate(_batches(device, 15)):
            losses.append(float(step(*batch).detach().numpy()))
            if number == 10:  # held from the call before: the replay must not write into it
                kept.append((model[0].weight.grad, model[0].weight.grad.numpy().copy()))
            if number % every == every - 1:
                grads = [p.grad.numpy().copy() for p in model.parameters()]
                optimizer.step()
                optimizer.zero_grad(set_to_none=set_to_none)
        for tensor, values in kept:
            np.testing.assert_array_equal(tensor.numpy(), values)
        return losses, model, step, grads

    eager, compiled = train(False), train(True)
    assert compiled[0] == eager[0]
    for p, q in zip(eager[1].parameters(), compiled[1].parameters()):
        np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy())
    for a, b in zip(eager[3], compiled[3]):
        np.testing.assert_array_equal(b, a)  # the accumulated gradients of the last window
    assert len(compiled[2].tapes) == (2 if set_to_none else 1)


def test_an_inputs_gradient_held_from_before_the_call_is_added_to(device):
    """A step input that requires grad and already holds a gradient (its own, from the
    caller's earlier backward): the replay adds to that tensor's gradient, found by the input's
    position, as eager does; a new input tensor without one takes the other tape."""
    weight = ta.tensor(np.linspace(-1, 1, 6, dtype="float32").reshape(3, 2), device=device)

    def step(x):
        loss = ((x @ weight) ** 2).sum()
        loss.backward()
        return loss

    rng = np.random.default_rng(5)
    hosts = [rng.standard_normal((4, 3)).astype("float32") for _ in range(6)]
    results, compiled = [], ta.compile(step)
    for run in (step, compiled):
        grads = []
        for host in hosts:
            x = ta.tensor(host, device=device).requires_grad_(True)
            run(x)  # None before: the gradient is made
            run(x)  # held: added to
            grads.append(x.grad.numpy())
        results.append(grads)
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(b, a)
        assert np.abs(a).sum() > 0
    assert len(compiled.tapes) == 2  # from None, and adding to the input's gradient
    compiled = ta.compile(step)
    x = ta.tensor(hosts[0], device=device).requires_grad_(True)
    for _ in range(4):
        compiled(x)
    np.testing.assert_allclose(x.grad.numpy(), 4 * results[0][0] / 2, rtol=1e-6)


def test_gradients_zeroed_in_place_replay_after_a_first_call_that_differs(device):
    """``zero_grad(set_to_none=False)``, the habit of older PyTorch: on the first call the
    gradients are None and backward makes them; from the second on they are zeroed in place
    and added to. The first two recordings differ, so a third is compared with the second, and
    the step replays from the fourth call, equal to eager."""

    make = functools.partial(_mlp_and_optimizer, device)
    make_step = functools.partial(_plain_step, zero_grad="zeros")
    eager, compiled = _same_training(make, make_step, _batches(device, 8))
    _assert_same(eager, compiled)


def test_masks_and_indices_computed_from_values_are_computed_again(device):
    """Comparisons, ~, argmax, gather, one_hot, a key-padding mask and nll_loss's count of
    kept targets are computed from the batch: they are ops, so each replay computes them from
    the new values. The first two batches (the recordings) have no padding at all, so a replay
    that kept their masks would pass the recording check and then be silently wrong."""
    vocab, width = 7, 8
    rng = np.random.default_rng(4)

    def make():
        ta.manual_seed(0)
        embed, attention = nn.Embedding(vocab, width), nn.MultiHeadAttention(width, 2)
        head = nn.Linear(width, vocab)
        model = nn.ModuleList([embed, attention, head]).to(device)
        optimizer = optim.SGD(model.parameters(), lr=0.1)

        def step(tokens, targets):
            optimizer.zero_grad()
            x = embed(tokens)
            x = x + attention(x, key_padding_mask=tokens == 0)
            logits = head(x * (x > 0) + 0.1 * x)
            loss = F.nll_loss(
                F.log_softmax(logits, -1).reshape(-1, vocab), targets.reshape(-1), ignore_index=0
            )
            picked = logits.gather(-1, targets[..., None]).mean()
            hot = F.one_hot(targets, vocab).float().mean(axis=(0, 1))
            accuracy = (logits.argmax(-1) == targets).float().mean()
            (loss + 0.01 * picked).backward()
            optimizer.step()
            return loss, accuracy, hot, (~(tokens == 0)).float().sum()

        return model, step

    batches = []
    for number in range(8):
        tokens = rng.integers(1, vocab, (3, 5))
        if number >= 2:
            tokens[number % 3, -(number % 4) - 1 :] = 0  # padding only after the recordings
        batches.append((ta.tensor(tokens, device=device), ta.tensor(tokens, device=device)))
    results = []
    for compiled in (False, True):
        _, step = make()
        step = ta.compile(step) if compiled else step
        results.append([[t.detach().numpy() for t in step(*batch)] for batch in batches])
    for eager, replayed in zip(*results):
        for a, b in zip(eager, replayed):
            np.testing.assert_array_equal(b, a)


def test_a_padding_mask_that_first_changes_after_the_recordings(device):
    """The smallest case of the test above: the key-padding mask is all False in both recordings
    and only then marks padding; kept as the recordings' constant, it would go stale silently."""
    rng = np.random.default_rng(4)
    ta.manual_seed(0)
    embed, attention = nn.Embedding(7, 8).to(device), nn.MultiHeadAttention(8, 2).to(device)

    def step(tokens):
        return attention(embed(tokens), key_padding_mask=tokens == 0).sum()

    compiled = ta.compile(step)
    for number in range(6):
        tokens = rng.integers(1, 7, (3, 5))
        tokens[0, 3:] = 0 if number >= 2 else tokens[0, 3:]
        tokens = ta.tensor(tokens, device=device)
        with ta.no_grad():
            assert float(compiled(tokens).numpy()) == float(step(tokens).numpy())


def test_ops_that_read_values_back_stay_out_of_graphs(device, monkeypatch):
    """An embedding lookup checks its indices' range on the host, which on a GPU waits for the
    device: such an op runs between graphs, and the rest of the pass is still one graph."""
    _with_fake_graphs(monkeypatch)
    vocab = 11
    step = ta.compile(_token_step(*_token_model(device, vocab, optim.Adam, lr=1e-2)))
    rng = np.random.default_rng(0)
    for _ in range(4):
        tokens = ta.tensor(rng.integers(0, vocab, (4, 5)), device=device)
        step(tokens, tokens)
    segments = next(iter(step.tapes.values())).segments
    lookups = [s for s in segments if "GetItem forward" in s.names]
    assert lookups and all(not s.array_work and len(s.runs) == 1 for s in lookups)
    # Off the host the targets' range check also runs between graphs (see CrossEntropy).
    checks = [s for s in segments if s.names == ("CrossEntropy forward",) and not s.array_work]
    assert len(checks) == (0 if device == "cpu" else 1)
    assert [s.capturable for s in segments].count(True) == 1 + len(checks)


def test_another_threads_work_is_not_recorded(device):
    """While one thread records its step, another thread's ops run plainly and stay out of the
    tape; two threads may also record their own steps at the same time."""
    import threading

    started, done = threading.Event(), threading.Event()
    seen = []

    def other_thread():
        started.wait()
        a = ta.ones(4, device=device) * 3.0  # eager work during the other thread's recording
        seen.append(float((a + 1.0).sum().numpy()))
        inner = ta.compile(lambda x: x * 2.0)  # a recording of its own on this thread
        seen.extend(float(inner(ta.ones(2, device=device)).sum().numpy()) for _ in range(4))
        done.set()

    def step(x):
        y = x * 5.0
        started.set()
        done.wait(timeout=30)  # the other thread works while this step is being recorded
        return y + 1.0

    worker = threading.Thread(target=other_thread)
    worker.start()
    compiled = ta.compile(step)
    first = compiled(ta.ones(3, device=device))
    worker.join()
    assert seen == [16.0, 4.0, 4.0, 4.0, 4.0]
    recorder_ops = [type(e[1]).__name__ for e in compiled._first[next(iter(compiled._first))].tape]
    assert recorder_ops == ["MulScalar", "AddScalar"]
    for _ in range(3):
        np.testing.assert_array_equal(compiled(ta.ones(3, device=device)).numpy(), first.numpy())


def test_one_compiled_step_called_from_two_threads_at_once(device):
    """Calls from two threads take turns (a replay writes into buffers both would share): every
    result equals the eager one."""
    import threading

    weight = ta.tensor(np.linspace(-1.0, 1.0, 64, dtype="float32").reshape(8, 8), device=device)

    def step(x):
        return (x @ weight).tanh().sum(axis=-1)

    compiled = ta.compile(step)
    rng = np.random.default_rng(0)
    inputs = [
        ta.tensor(rng.standard_normal((16, 8)).astype("float32"), device=device) for _ in range(40)
    ]
    expected = [step(x).numpy() for x in inputs]
    got = [None] * len(inputs)

    def work(part):
        for i in range(part, len(inputs), 2):
            got[i] = compiled(inputs[i]).numpy()

    threads = [threading.Thread(target=work, args=(part,)) for part in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


def test_the_backend_helpers_of_the_buffers(device):
    """storage_root tells views from copies; is_buffer refuses what cannot be written into;
    copy_into casts and broadcasts; copied makes a new array."""
    from tinyattn import backend

    xp, native = backend.resolve_device(device)
    base = xp.reshape(xp.arange(12, dtype=xp.float32, device=native), (3, 4))
    view, copy = base[1:, ::2], base * 1.0
    assert backend.storage_root(view) == backend.storage_root(base)
    assert backend.storage_root(copy) != backend.storage_root(base)
    assert backend.is_buffer(base)
    if xp is np:
        assert not backend.is_buffer(np.float32(1.0))  # a NumPy scalar
        assert not backend.is_buffer(np.broadcast_to(base, (2, 3, 4)))  # read-only
    flags_without_writeable = type("Flags", (), {"c_contiguous": True})()
    assert backend.is_buffer(type("CupyLike", (), {"flags": flags_without_writeable})())
    target = xp.zeros((3, 4), dtype=xp.float32, device=native)
    backend.copy_into(target, xp.ones((4,), dtype=xp.float64, device=native))
    assert target.dtype == xp.float32 and float(xp.sum(target)) == 12.0
    again = backend.copied(target)
    assert backend.storage_root(again) != backend.storage_root(target)
    assert float(xp.sum(again)) == 12.0


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: ta.compile(3), TypeError, "step must be a function, got int"),
        (lambda: ta.compile(lambda x: x, max_signatures=0), ValueError, "max_signatures must"),
        (lambda: ta.compile(max_signatures=1.5)(lambda x: x), ValueError, "positive int, got 1.5"),
        (lambda: ta.compile(lambda x: x, cuda_graphs="yes"), TypeError, "True or False"),
    ],
)
def test_bad_arguments_of_compile_are_named(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_a_users_op_named_like_a_lowered_one_replays_its_own_forward(device):
    """The out= kernels are chosen by class: a Function of one's own called Exp is not np.exp."""
    from tinyattn.autograd import Function

    class Exp(Function):  # exp(x) - 1, under the name of tinyattn's Exp
        """y = exp(x) - 1;  dL/dx = g * (y + 1). Shapes: any."""

        def forward(self, x):
            return ta.backend.namespace(x).expm1(x)

        def backward(self, grad):
            return grad * self.inputs[0].exp()

    compiled = ta.compile(lambda x: Exp.apply(x) * 2.0)
    for value in (0.5, 1.0, 1.5, 2.0):
        x = ta.full((3,), value, device=device)
        np.testing.assert_allclose(compiled(x).numpy(), 2.0 * np.expm1(value), rtol=1e-6)


def test_buffers_whose_lives_do_not_overlap_share_memory(device):
    """The memory plan: a result read long after it was made (`a`, read by the last op) keeps
    its buffer to the end, while results that die young share buffers; the replay still equals
    eager, and on NumPy the held results are forgotten after their last reader."""
    from tinyattn.compiler.replay import MemoryPlan, reads_and_writes

    weight = ta.tensor(np.linspace(-1, 1, 32, dtype="float32").reshape(4, 8), device=device)
    weight.requires_grad_(True)

    def step(x):
        weight.grad = None
        a = x * 2.0
        b = (a * a).exp() * 0.5
        c = (b + 1.0) * (b - 1.0)
        d = ((c * a) @ weight.T).tanh()
        loss = (d * d).sum()
        loss.backward()
        return loss, weight.grad

    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((6, 8)).astype("float32") * 0.3 for _ in range(6)]
    eager = [tuple(t.detach().numpy() for t in step(ta.tensor(x, device=device))) for x in xs]
    compiled = ta.compile(step)
    for x, (loss, grad) in zip(xs, eager):
        got_loss, got_grad = compiled(ta.tensor(x, device=device))
        np.testing.assert_array_equal(got_loss.detach().numpy(), loss)
        np.testing.assert_array_equal(got_grad.numpy(), grad)
    tape = next(iter(compiled.tapes.values()))
    if device != "strict":  # results written with out= into buffers: some share one
        assert tape.shared_buffers, "results of one shape that die young must share a buffer"
    else:  # no out=: results are held as made, and forgotten after their last reader
        assert any(array is None for array in tape.env)
    # No two slots given one buffer are alive at once (recomputed from the entries).
    plan = MemoryPlan(tape, [True] * len(tape.env), 1)
    owners: dict[int, list[int]] = {}
    for slot in (tape.shared_buffers | set(plan.last_use)) - {
        s for s, a in enumerate(tape.env) if a is None
    }:
        owners.setdefault(id(tape.env[slot]), []).append(slot)
    lives = {}
    for position, entry in enumerate(tape.entries):
        if entry[0] in ("op", "rule", "store"):
            reads, writes = reads_and_writes(entry, tape._made_by)
            for slot in reads | writes:
                start, _ = lives.get(slot, (position, position))
                lives[slot] = (start, position)
    for slots in owners.values():
        spans = sorted(lives[s] for s in slots if s in lives)
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert end < start, f"two slots of one buffer overlap: {spans}"


def test_an_array_and_its_views_share_memory_as_one_family(device, monkeypatch):
    """A result read through views (the heads of an attention are reshapes and transposes of
    one product) lives until its last view is read; a later family of the same shape takes
    its memory, and that family's views are made again on it. The replay equals eager, and no
    two families of one memory are alive at once. (The reference attention, whose heads are
    views: the fused one reads the projections as they are.)"""
    from tinyattn import backend
    from tinyattn.compiler.replay import reads_and_writes

    monkeypatch.setattr(nn.attention, "FUSED_ATTENTION", False)

    ta.manual_seed(0)
    attention = nn.MultiHeadAttention(8, 2).to(device)
    head = nn.Linear(8, 8).to(device)
    optimizer = optim.SGD([*attention.parameters(), *head.parameters()], lr=0.1)

    def step(x):
        optimizer.zero_grad()
        y = attention(x, x, x, need_weights=False)[0]
        z = attention(head(y), y, y, need_weights=False)[0]
        loss = (z * z).mean()
        loss.backward()
        optimizer.step()
        return loss

    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((3, 5, 8)).astype("float32") for _ in range(6)]
    compiled = ta.compile(step)
    losses = [float(compiled(ta.tensor(x, device=device)).detach().numpy()) for x in xs]
    ta.manual_seed(0)
    attention.__init__(8, 2)
    head.__init__(8, 8)
    attention.to(device), head.to(device)
    optimizer = optim.SGD([*attention.parameters(), *head.parameters()], lr=0.1)
    assert losses == [float(step(ta.tensor(x, device=device)).detach().numpy()) for x in xs]
    tape = next(iter(compiled.tapes.values()))
    if device != "cpu":
        return  # no out=: results are held as made, and nothing is planned
    moved = [slot for slot in tape.shared_buffers if tape._shared[slot]]
    assert moved, "an array with views must take the memory of an earlier family"
    lives: dict[int, tuple[int, int]] = {}
    for position, entry in enumerate(tape.entries):
        if entry[0] in ("op", "rule", "store"):
            reads, writes = reads_and_writes(entry, tape._made_by)
            for slot in reads | writes:
                lives[slot] = (lives.get(slot, (position,))[0], position)
    families: dict[int, dict[int, list[int]]] = {}  # memory -> recorded family -> its life
    for slot, array in enumerate(tape.env):
        if slot in lives and hasattr(array, "shape"):
            memory, family = backend.storage_root(array), tape._roots[slot]
            span = families.setdefault(memory, {}).setdefault(family, [lives[slot][0], -1])
            span[0], span[1] = min(span[0], lives[slot][0]), max(span[1], lives[slot][1])
    for spans in families.values():
        ordered = sorted(spans.values())
        for (_, end), (start, _) in zip(ordered, ordered[1:]):
            assert end < start, f"two families of one memory overlap: {ordered}"


def test_a_result_read_only_through_a_view_keeps_its_memory_until_the_view_is_read(device):
    """`a` itself is read once, by the reshape; its view `v` is read at the end. `b`, of `a`'s
    shape, is made in between and must not take `a`'s memory (`c`, made after the last read of
    `v`, may)."""

    def step(x):
        a = x * 2.0
        v = a.reshape(8, 6)
        b = x * 3.0
        total = (b * b).sum() + (v * v).sum()
        c = x * 4.0
        return total + (c * c).sum()

    compiled = ta.compile(step)
    rng = np.random.default_rng(1)
    for _ in range(5):
        x = ta.tensor(rng.standard_normal((6, 8)).astype("float32"), device=device)
        assert float(compiled(x).numpy()) == float(step(x).numpy())


def test_model_eval_and_no_grad_record_again_instead_of_replaying_the_other_mode(device):
    """A PyTorch habit: the same compiled function called after ``model.eval()`` or under
    ``no_grad``. Every called module's ``training`` flag and grad mode are part of the key, so
    such a call records its own tape (no dropout in eval mode) and never replays the other
    mode's ops; switching back replays the first tape again."""
    ta.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2)).to(device)
    forward = ta.compile(lambda x: model(x))
    x = ta.tensor(np.linspace(-1, 1, 12, dtype="float32").reshape(3, 4), device=device)
    for _ in range(3):
        forward(x)  # training mode: recorded twice, then replayed with new masks
    assert len(forward.tapes) == 1
    model.eval()
    for _ in range(3):
        np.testing.assert_array_equal(forward(x).detach().numpy(), model(x).detach().numpy())
    with ta.no_grad():
        for _ in range(3):
            np.testing.assert_array_equal(forward(x).numpy(), model(x).numpy())
    assert len(forward.tapes) == 3
    model.train()
    ta.manual_seed(5)
    replayed = forward(x).detach().numpy().copy()
    ta.manual_seed(5)
    np.testing.assert_array_equal(
        replayed, model(x).detach().numpy()
    )  # the same mask: dropout again
    assert len(forward.tapes) == 3, "back in training mode, the first tape replays"


def test_a_changed_module_setting_records_again(device):
    """PyTorch habits that change a module's plain Python settings after compiling: dropout's
    ``p`` raised mid-training, a scale kept on a module. Its forward reads them as constants, so
    each module's settings are part of the key, as torch.compile guards on them: the call
    records again and equals eager, and setting a value back replays the first tape."""

    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(3, 2)
            self.drop = nn.Dropout(0.0)
            self.scale = 2.0

        def forward(self, x):
            return self.drop(self.linear(x)) * self.scale

    ta.manual_seed(0)
    model = Scaled().to(device)
    forward = ta.compile(lambda x: model(x))
    x = ta.tensor(np.linspace(-1, 1, 12, dtype="float32").reshape(4, 3), device=device)

    def same():
        for seed in range(3):
            ta.manual_seed(seed)
            got = forward(x).detach().numpy().copy()
            ta.manual_seed(seed)
            np.testing.assert_array_equal(got, model(x).detach().numpy())

    same()
    model.scale = 5.0
    same()
    model.drop.p = 0.5
    same()
    assert len(forward.tapes) == 3
    model.scale, model.drop.p = 2.0, 0.0
    same()
    assert len(forward.tapes) == 3, "the first settings replay the first tape"


def test_a_replaced_parameter_or_layer_records_again(device):
    """PyTorch habits that give a tensor or a module new storage after compiling: ``p.data =
    t``, a layer swapped for a new one. The tape would read the old arrays; instead the call
    records again and equals eager. In-place changes (load_state_dict) replay as they are."""
    ta.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).to(device)
    forward = ta.compile(lambda x: model(x))
    x = ta.tensor(np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3), device=device)

    def same():
        for _ in range(3):
            np.testing.assert_array_equal(forward(x).detach().numpy(), model(x).detach().numpy())

    same()
    with ta.no_grad():
        model[0].weight.data = ta.full((4, 3), 0.5, device=device)
    same()
    model[2] = nn.Linear(4, 2).to(device)
    same()
    model.load_state_dict({k: v * 2.0 for k, v in model.state_dict().items()})
    same()
    assert len(forward.tapes) == 2  # the swapped layer changed the key; the new array did not


def test_a_layer_frozen_after_compiling_gets_no_gradient(device):
    """Fine-tuning habit: ``requires_grad_(False)`` on a layer after some compiled steps. The
    tape would still compute and hand it a gradient, and the optimizer would move it; the call
    records again instead, and the frozen layer stays as it was, as in eager."""

    def make():
        ta.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)).to(device)
        return model, optim.SGD(model.parameters(), lr=0.1)

    def make_step(model, sgd):
        def step(x):
            sgd.zero_grad()
            loss = (model(x) ** 2).sum()
            loss.backward()
            sgd.step()
            return loss

        return step

    rng = np.random.default_rng(0)
    batches = [ta.tensor(rng.standard_normal((2, 3)).astype("float32"), device=device)]
    batches *= 4
    runs = []
    for compiled in (False, True):
        model, sgd = make()
        step = make_step(model, sgd)
        step = ta.compile(step) if compiled else step
        for x in batches:
            step(x)
        for p in model[0].parameters():
            p.requires_grad_(False)
        frozen = [p.numpy().copy() for p in model[0].parameters()]
        losses = [float(step(x).detach().numpy()) for x in batches]
        for p, before in zip(model[0].parameters(), frozen):
            np.testing.assert_array_equal(p.numpy(), before)
            assert p.grad is None
        runs.append((losses, [p.detach().numpy() for p in model.parameters()]))
    assert runs[0][0] == runs[1][0]
    for a, b in zip(runs[0][1], runs[1][1]):
        np.testing.assert_array_equal(a, b)


def test_a_gradient_hook_registered_after_compiling_runs_on_replays(device):
    """``p.register_hook(fn)`` after some compiled steps (clipping or logging one parameter's
    gradient): the call records again, so the hook runs as in eager; removing it records
    again without it."""
    lin, step = _squared_linear(device)
    compiled = ta.compile(step)
    x = ta.ones(2, 3, device=device)

    def grads():
        compiled(x)
        got = lin.weight.grad.numpy()
        step(x)
        np.testing.assert_array_equal(got, lin.weight.grad.numpy())
        return got

    plain = [grads() for _ in range(3)][-1]
    handle = lin.weight.register_hook(lambda g: g * 0.5)
    hooked = [grads() for _ in range(3)][-1]
    np.testing.assert_array_equal(hooked, plain * 0.5)
    handle.remove()
    np.testing.assert_array_equal([grads() for _ in range(3)][-1], plain)


def test_a_mode_switch_between_the_two_recordings_starts_over(device):
    """model.eval() between the first and the second call: the second recording is a first
    one in the new mode, not a mismatch; a module made anew inside the step on every call is
    still refused (its parameters change between the calls), never recorded forever."""
    ta.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2)).to(device)
    forward = ta.compile(lambda x: model(x))
    x = ta.tensor(np.linspace(-1, 1, 12, dtype="float32").reshape(3, 4), device=device)
    forward(x)
    model.eval()
    for _ in range(3):
        np.testing.assert_array_equal(forward(x).detach().numpy(), model(x).detach().numpy())
    assert len(forward.tapes) == 1
    # Switching on every call (a validation batch after each training step): each mode's
    # recording is confirmed by the next call in that mode, and both replay from then on.
    alternating = ta.compile(lambda x: model(x))
    for k in range(8):
        model.train() if k % 2 == 0 else model.eval()
        ta.manual_seed(k)
        got = alternating(x).detach().numpy().copy()
        ta.manual_seed(k)
        np.testing.assert_array_equal(got, model(x).detach().numpy())
    assert len(alternating.tapes) == 2

    fresh = ta.compile(lambda x: nn.Linear(4, 2).to(device)(x))
    fresh(x)
    fresh(x)
    with pytest.raises(ta.CompileError, match="changes between calls"):
        fresh(x)


def test_a_tape_keeps_only_its_buffers_of_the_recordings_arrays(monkeypatch):
    """Once the tape is built, an array of either recording is alive only if the tape replays
    into it (or reads it: inputs, parameters, optimizer state), even with every loss the step
    returned kept in a list: graph nodes are released as a backward releases them, and the ops
    replayed by `forward` alone (those run inside backward rules) drop their input Tensors."""
    import gc
    import weakref

    from tinyattn.autograd import KEPT_CONSTANT_SIZE  # a released node keeps those whole
    from tinyattn.compiler import step as compiler

    recorders = []
    original = compiler.Recorder.__init__

    def keep(self, inputs):
        original(self, inputs)
        recorders.append(self)

    made_first = []
    keep_for_checking = compiler.Recorder.keep_for_checking

    def note_made(self):
        arrays = zip(self.arrays, self.made, strict=True)
        made_first.extend(weakref.ref(a) for a, m in arrays if m and isinstance(a, np.ndarray))
        keep_for_checking(self)

    monkeypatch.setattr(compiler.Recorder, "__init__", keep)
    monkeypatch.setattr(compiler.Recorder, "keep_for_checking", note_made)
    model, optimizer, scheduler = _mlp("cpu")
    step = ta.compile(_classifier_step(model, optimizer, scheduler))
    batches = _batches("cpu", 4, batch=32)  # activations larger than a kept small constant
    losses = [step(*batches[0])]
    # While the next call records, the first recording holds none of the arrays it made: the
    # live ones are what the call handed out (its loss, the gradients).
    handed_out = {id(losses[0].array)} | {id(p.grad.array) for p in model.parameters()}
    gc.collect()
    assert made_first, "the first recording made arrays"
    alive = [ref() for ref in made_first if ref() is not None]
    assert {id(a) for a in alive if a.size > KEPT_CONSTANT_SIZE} <= handed_out
    losses += [step(x, y) for x, y in batches[1:]]
    refs = [
        [weakref.ref(a) for a in recorder.arrays if isinstance(a, np.ndarray)]
        for recorder in recorders
    ]
    recorders.clear()
    gc.collect()
    tape = next(iter(step.tapes.values()))
    kept = {id(a) for a in tape.env} | {id(a.base) for a in tape.env if hasattr(a, "base")}
    for recording, made in zip(refs, ("first", "second"), strict=True):
        alive = [ref() for ref in recording if ref() is not None]
        stray = [a.shape for a in alive if id(a) not in kept and a.size > KEPT_CONSTANT_SIZE]
        assert not stray, f"arrays of the {made} recording kept alive: {stray}"
    assert any(ref() is not None for ref in refs[1]), "the tape replays into its arrays"
    assert len(losses) == 4 and losses[0]._ctx is not None  # the recorded call's loss


@pytest.mark.parametrize(
    ("affine", "bias"), [(True, True), (True, False), (False, False)], ids=["wb", "w", "none"]
)
@pytest.mark.parametrize("shape", [(6,), (2, 3)], ids=["one-axis", "two-axes"])
def test_layer_norm_replays_as_out_calls_equal_to_eager(device, affine, bias, shape):
    """LayerNorm with a weight is lowered where out= exists: its forward writes x_hat and rstd
    into the buffers its backward reads, with the forward's own calls, so the step equals eager
    bit for bit."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 6)
            self.norm = nn.LayerNorm(shape, elementwise_affine=affine, bias=bias)

        def forward(self, x):
            hidden = self.linear(x).reshape(x.shape[0], *shape)
            return self.norm(hidden).reshape(x.shape[0], 6)

    def make_step(model, optimizer):
        def step(x, y):
            optimizer.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
            return loss

        return step

    rng = np.random.default_rng(3)
    batches = [
        (
            ta.tensor(rng.standard_normal((5, 4)).astype("float32"), device=device),
            ta.tensor(rng.standard_normal((5, 6)).astype("float32"), device=device),
        )
        for _ in range(6)
    ]
    eager, compiled = _same_training(_with_sgd(Net, device), make_step, batches)
    _assert_same(eager, compiled)
    labels = next(iter(compiled[2].tapes.values())).labels
    with_out = device != "strict"  # the strict namespace has no out=
    assert ("LayerNorm forward (out=)" in labels) == (affine and with_out), labels


def _replayed_like_eager(step, shape, seed, device, calls=5):
    """Run `step` on `calls` random float32 inputs of `shape` eagerly, then compiled on the same
    inputs (two recordings, then replays): every result equal bit for bit. Returns the eager
    results (as host arrays) and the tape's program labels."""
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(shape).astype("float32") for _ in range(calls)]
    eager = [tuple(t.detach().numpy() for t in step(ta.tensor(x, device=device))) for x in xs]
    compiled = ta.compile(step)
    for x, expected in zip(xs, eager, strict=True):
        got = compiled(ta.tensor(x, device=device))
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_array_equal(a.detach().numpy(), b)
    return eager, next(iter(compiled.tapes.values())).labels


def test_a_sum_into_a_0d_buffer_is_lowered_whatever_shares_memory_answers():
    """A full sum writes through the (1,) view of its 0-d buffer. CuPy's shares_memory answers
    False for that pair (a NumPy stand-in answering so here); the view is still one, so the sum
    is lowered all the same and writes the right value."""
    from types import SimpleNamespace

    from tinyattn.compiler import replay_kernels

    def like_cupy(a, b):
        return False if 0 in (a.ndim, b.ndim) else np.shares_memory(a, b)

    u = SimpleNamespace(**{k: getattr(np, k) for k in ("reshape", "matmul", "divide")})
    u.shares_memory, u.float32, u.float64 = like_cupy, np.float32, np.float64
    x, out = np.arange(8, dtype="float32"), np.zeros((), dtype="float32")
    for divisor, expected in ((None, 28.0), (8, 3.5)):
        kernel = replay_kernels._lowered_sum(u, x, out, (0,), divisor)
        assert kernel is not None
        kernel(out, x)
        assert out == expected


def test_softmax_and_log_softmax_replay_as_out_calls_equal_to_eager(device):
    """Both are lowered where out= exists, rows of 5 (short: the max over a transposed copy) and
    of 70 (the plain max), a fully masked row included: its softmax is 0, never NaN."""
    weight = ta.tensor(np.linspace(-1, 1, 20, dtype="float32").reshape(4, 5), device=device)
    weight.requires_grad_(True)
    wide = ta.tensor(np.linspace(-2, 2, 70, dtype="float32"), device=device)
    wide.requires_grad_(True)
    masked = ta.tensor([[True] * 5, [False, True, True, False, True]] * 2, device=device)

    def step(x):
        weight.grad = wide.grad = None
        scores = (x * weight).masked_fill(~masked, float("-inf"))
        short = F.softmax(scores, dim=-1) * 2.0 + F.log_softmax(x * weight, dim=-1)
        long = F.log_softmax(x[:, :1] * wide, dim=-1) + F.softmax(x[:, 1:2] * wide, dim=-1)
        loss = (short * short).sum() + (long * long).sum()
        loss.backward()
        return loss, weight.grad, wide.grad

    masked[0] = False  # the first row fully masked
    eager, labels = _replayed_like_eager(step, (4, 5), seed=7, device=device)
    assert not np.isnan(eager[-1][0]).any()
    with_out = device != "strict"  # the strict namespace has no out=
    assert (labels.count("Softmax forward (out=)") == 2) == with_out, labels
    assert (labels.count("LogSoftmax forward (out=)") == 2) == with_out, labels


def test_masks_and_casts_replay_as_out_calls_equal_to_eager(device):
    """A comparison (`x > 0`, ReLU's mask in its backward), a logical function of masks and a
    cast are lowered where out= exists: each writes into its buffer, and a replay on new values
    gives eager's bits. A float times a bool mask multiplies without a float copy of the mask
    where the library mixes the two (NumPy, CuPy); the strict stand-in casts it first."""
    weight = ta.tensor(np.linspace(-1, 1, 12, dtype="float32").reshape(3, 4), device=device)
    weight.requires_grad_(True)

    def step(x):
        weight.grad = None
        hidden = F.relu(x @ weight)  # its backward multiplies by the mask [x > 0]
        kept = (hidden > 0.1) & ~(x[:, :1] > 1.0)  # a comparison, a logical and a not
        loss = (hidden * kept).sum() + (hidden * kept.to(ta.float32)).mean()
        loss.backward()
        return loss, weight.grad, kept

    eager, labels = _replayed_like_eager(step, (5, 3), seed=11, device=device)
    assert len({e[2].tobytes() for e in eager}) > 1  # the masks changed with the values
    with_out = device != "strict"  # the strict namespace has no out=
    computed = [label for label in labels if label.startswith("Computed")]
    assert len(computed) == 5, labels  # relu's mask, >, >, ~, &
    assert all(label.endswith("(out=)") == with_out for label in computed), labels
    casts = [label for label in labels if label.startswith("Cast")]
    # The cast asked for, and on the strict stand-in the masks cast to multiply them.
    assert len(casts) == (1 if with_out else 3), labels
    assert all(label.endswith("(out=)") == with_out for label in casts), labels


def test_a_learning_rate_set_by_hand_inside_the_step_is_refused_and_outside_replays(device):
    """``group["lr"] = ...`` inside the step is Python a replay would not run: the learning rate
    would silently stay at its recorded value, so the recording refuses it. Set between calls,
    outside the step, the replayed ``optimizer.step()`` reads it, equal to eager; a scheduler's
    ``step()`` inside the step is replayed and may set it."""
    model, optimizer, _ = _mlp(device)

    def by_hand(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        for group in optimizer.param_groups:
            group["lr"] = group["lr"] * 0.5
        optimizer.step()
        return loss

    batches = _batches(device, 3)
    with pytest.raises(ta.CompileError, match="sets a parameter group's 'lr'"):
        ta.compile(by_hand)(*batches[0])
    with pytest.raises(ta.CompileError, match="parameter group's options"):
        ta.compile(lambda x, y: optimizer.param_groups[0].update(lr=0.1))(*batches[0])

    def merged(x, y):
        optimizer.param_groups[0] |= {"lr": 0.1}

    for write, what in (
        (merged, r"options \(\|=\)"),
        (lambda x, y: optimizer.param_groups[0].setdefault("momentum_2", 0.5), "setdefault"),
        (lambda x, y: optimizer.param_groups[0].pop("weight_decay", None), "pop"),
    ):
        with pytest.raises(ta.CompileError, match=what):
            ta.compile(write)(*batches[0])

    results = []
    for compiled in (False, True):
        model, optimizer, _ = _mlp(device)
        step = _plain_step(model, optimizer)
        run = ta.compile(step) if compiled else step
        losses = []
        for number, batch in enumerate(_batches(device, 8)):
            optimizer.param_groups[0]["lr"] = 0.05 / (1 + number)  # outside the step
            losses.append(float(run(*batch).detach().numpy()))
        results.append((losses, model, run))
    _assert_same(*results)


def test_param_groups_stay_dicts_that_copy_and_pickle():
    import copy
    import pickle

    optimizer = optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)
    group = optimizer.param_groups[0]
    assert isinstance(group, dict) and group["lr"] == 0.1
    for clone in (copy.deepcopy(optimizer), pickle.loads(pickle.dumps(optimizer))):
        assert type(clone.param_groups[0]) is type(group)
        assert clone.param_groups[0]["lr"] == 0.1
    state = optimizer.state_dict()
    optimizer.load_state_dict(state)
    optimizer.param_groups[0]["lr"] = 0.2  # no recording: a plain assignment
    assert optimizer.param_groups[0]["lr"] == 0.2


def test_a_gradient_holder_learned_from_an_input_position_does_not_break_shorter_calls(device):
    """An input at position 1 whose gradient a call added to is a holder from then on; a later
    call of the same step with one tensor argument has no position 1 and still runs, as eager."""
    weight = ta.tensor(np.ones((3, 2), dtype="float32"), device=device).requires_grad_(True)

    def step(x, *more):
        weight.grad = None
        loss = (x @ weight).sum() + sum((m * m).sum() for m in more)
        loss.backward()
        return loss

    compiled = ta.compile(step)
    x = ta.tensor(np.ones((4, 3), dtype="float32"), device=device)
    extra = ta.tensor(np.ones(2, dtype="float32"), device=device).requires_grad_(True)
    compiled(x, extra)
    compiled(x, extra)  # extra holds a gradient now: added to
    np.testing.assert_array_equal(extra.grad.numpy(), [4.0, 4.0])
    for _ in range(3):
        assert float(compiled(x).detach().numpy()) == 24.0
    np.testing.assert_array_equal(weight.grad.numpy(), np.full((3, 2), 4.0))


def test_gradient_hooks_kept_for_their_side_effects_run_on_every_replay(device):
    """A hook that returns None is there for what it does with the gradient (keeps it, logs a
    norm with ``.item()``): a replay calls it, with that call's gradient, as eager's backward
    does, on an intermediate tensor (a lambda registered inside the step, a new object on every
    call) and on a parameter. A hook that returns a new gradient is replayed by its ops, and one
    that also reads a value into Python is refused."""

    def train(compiled):
        ta.manual_seed(0)
        first, second = nn.Linear(4, 8).to(device), nn.Linear(8, 3).to(device)
        optimizer = optim.SGD([*first.parameters(), *second.parameters()], lr=0.1)
        kept, norms = [], []
        second.weight.register_hook(lambda g: norms.append(float((g * g).sum().item())))

        def step(x, y):
            optimizer.zero_grad()
            hidden = first(x)
            hidden.register_hook(lambda g: kept.append(g))  # kept for a look after the step
            scaled = hidden.tanh()
            scaled.register_hook(lambda g: g * 0.5)  # a new gradient: replayed by its ops
            loss = F.cross_entropy(second(scaled), y)
            loss.backward()
            optimizer.step()
            return loss

        run = ta.compile(step) if compiled else step
        losses = [
            float(run(*batch).detach().numpy()) for batch in _batches(device, 6, width=4, classes=3)
        ]
        return losses, [g.numpy() for g in kept], norms, run

    eager, compiled = train(False), train(True)
    assert compiled[0] == eager[0] and compiled[2] == eager[2] and len(eager[2]) == 6
    assert len(compiled[1]) == 6 and len({g.tobytes() for g in compiled[1]}) == 6
    for a, b in zip(eager[1], compiled[1], strict=True):
        np.testing.assert_array_equal(b, a)
    labels = next(iter(compiled[3].tapes.values())).labels
    assert sum(label.startswith("hook") for label in labels) == 2, labels

    weight = ta.tensor(np.ones((3, 2), dtype="float32"), device=device).requires_grad_(True)

    def reads_and_returns(x):
        weight.grad = None
        hidden = x @ weight
        hidden.register_hook(lambda g: g * float(g.sum().item()))
        hidden.sum().backward()
        return weight.grad

    with pytest.raises(ta.CompileError, match="reads a tensor's value into Python and returns"):
        ta.compile(reads_and_returns)(ta.ones(4, 3, device=device))


def test_a_tensor_the_recording_handed_out_keeps_its_values(device):
    """``history.append(hidden.detach())`` inside the step is a Python side effect, done on the
    recorded calls only (the two that make the tape, and every verifying one); what it kept
    must keep the values eager had. The recording's arrays become no tape buffers, so the
    replays that follow never write into such a tensor."""
    history = []

    def train(compiled):
        history.clear()
        model, optimizer, _ = _mlp(device)
        appended = []  # the calls that appended (ran the step's Python)

        def step(x, y):
            optimizer.zero_grad()
            hidden = model[0](x)
            history.append(hidden.detach())
            loss = F.cross_entropy(model[1:](hidden), y)
            loss.backward()
            optimizer.step()
            return loss

        run = ta.compile(step) if compiled else step
        for number, batch in enumerate(_batches(device, 6)):
            length = len(history)
            run(*batch)
            appended += [number] * (len(history) - length)
        return [h.numpy().copy() for h in history], appended

    (eager, _), (compiled, appended) = train(False), train(True)
    # Recorded: calls 0 and 1; then calls 2, 3, 5 replay and call 4, the third, verifies.
    assert len(eager) == 6 and appended == [0, 1, 4]
    for number, kept in zip(appended, compiled):
        np.testing.assert_array_equal(kept, eager[number])


@pytest.mark.parametrize(
    "habit", ["sgd by hand, grad.zero_()", "clip, then sgd by hand", "grad.mul_"]
)
def test_in_place_writes_to_gradients_inside_the_step_replay_like_eager(device, habit):
    """The step's own in-place writes to .grad after backward (a hand-written SGD loop that
    zeroes each gradient, a gradient scaled in place) and `clip_grad_norm_`, replayed as Python,
    act on the gradient the recorded ops read, as in eager: .grad is the replay's own array until
    the replay ends, and gets a copy then."""

    def make():
        model, optimizer, _ = _mlp(device)
        return model, optimizer

    def make_step(model, optimizer):
        params = list(model.parameters())

        def step(x, y):
            if habit != "sgd by hand, grad.zero_()":
                optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            if habit == "grad.mul_":
                for p in params:
                    p.grad.mul_(0.5)
                optimizer.step()
                return loss
            if habit == "clip, then sgd by hand":
                nn.utils.clip_grad_norm_(params, 0.05)
            with ta.no_grad():
                for p in params:
                    p -= 0.05 * p.grad
                    if habit == "sgd by hand, grad.zero_()":
                        p.grad.zero_()
            return loss

        return step

    eager, compiled = _same_training(make, make_step, _batches(device, 8))
    _assert_same(eager, compiled)
    for p, q in zip(eager[1].parameters(), compiled[1].parameters()):
        np.testing.assert_array_equal(q.grad.numpy(), p.grad.numpy())


@pytest.mark.parametrize("build", ["index assignment", "scatter_", "a row filled"])
def test_an_array_made_in_the_step_and_written_in_place_is_made_again_on_replays(device, build):
    """``onehot = zeros(...); onehot[rows, y] = 1`` (or ``zeros(...).scatter_(...)``): eager makes
    the zeros anew on every call, so a replay starts the array from the values it was made with
    before writing into it again; without that, the ones of earlier batches would stay."""

    def make():
        model, optimizer, _ = _mlp(device)
        return model, optimizer

    def make_step(model, optimizer):
        def step(x, y):
            optimizer.zero_grad()
            log_probs = F.log_softmax(model(x), dim=-1)
            if build == "index assignment":
                target = ta.zeros(8, 4, device=device)
                target[ta.arange(8, device=device), y] = 1.0
            elif build == "scatter_":
                target = ta.zeros(8, 4, device=device).scatter_(1, y.unsqueeze(1), 1.0)
            else:
                target = ta.full((8, 4), 0.25, device=device)
                target[0] = x[0, :4].detach()
            loss = -(log_probs * target).sum(-1).mean()
            loss.backward()
            optimizer.step()
            return loss

        return step

    eager, compiled = _same_training(make, make_step, _batches(device, 8))
    _assert_same(eager, compiled)


def test_an_array_made_from_a_changing_value_and_written_in_place_is_refused(device):
    """Made from a Python number that changes between the calls (a scale read from a list),
    then written in place: a replay would start it from the recorded number, so it is refused."""
    scales = iter([0.5, 0.25, 0.125, 0.0625])

    def step(x):
        buffer = ta.full((3,), next(scales), device=device)
        buffer[0] = x.sum()
        return buffer * 2.0

    compiled = ta.compile(step)
    compiled(ta.ones(3, device=device))
    compiled(ta.ones(3, device=device))  # a first call may differ: compared with the next
    with pytest.raises(ta.CompileError, match="changes between calls"):
        compiled(ta.ones(3, device=device))


def test_a_retained_gradient_returned_by_the_step_replays_like_eager(device):
    """``h.retain_grad()`` inside the step: the copy backward stores in ``h.grad`` is an op of
    the recording, so the gradient the step returns is that call's, as in eager."""

    def train(compiled):
        ta.manual_seed(0)
        model = nn.Linear(4, 3).to(device)
        optimizer = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            optimizer.zero_grad()
            logits = model(x)
            logits.retain_grad()
            loss = F.cross_entropy(logits, y)
            loss.backward()
            optimizer.step()
            return loss, logits.grad

        run = ta.compile(step) if compiled else step
        results = [run(*batch) for batch in _batches(device, 6, width=4, classes=3)]
        return [(loss.detach().numpy(), grad.detach().numpy()) for loss, grad in results]

    eager, compiled = train(False), train(True)
    assert len({grad.tobytes() for _, grad in compiled}) == 6  # each call's own gradient
    for (loss_e, grad_e), (loss_c, grad_c) in zip(eager, compiled, strict=True):
        np.testing.assert_array_equal(loss_c, loss_e)
        np.testing.assert_array_equal(grad_c, grad_e)


def test_a_non_leaf_input_where_a_leaf_held_a_gradient_does_not_warn(device):
    """The call's key asks each known gradient holder for its gradient; an input passed at a
    holder's position may be a non-leaf, whose .grad a program would be warned about reading:
    the compiler reads it quietly."""
    weight = ta.tensor(np.ones((3, 2)), dtype="float64", device=device).requires_grad_(True)

    def step(x):
        (x @ weight).sum().backward()  # no zero_grad: x's and weight's gradients accumulate
        return weight.grad

    run = ta.compile(step)
    leaf = ta.tensor(np.ones((4, 3)), dtype="float64", device=device).requires_grad_(True)
    run(leaf)
    run(leaf)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(leaf * 1.0)  # a non-leaf where the leaf held a gradient


@pytest.fixture(autouse=True)
def _verified(monkeypatch):
    """Every compiled step here also records again every third replayed call and compares it
    with the tape it replays (ta.compile's verification mode): a stale replay fails the test."""
    monkeypatch.setenv("TINYATTN_COMPILE_VERIFY", "3")


# Module-level names a step reads as globals (the tests below rebind them between calls).
LEARNING_RATE = 0.1
SHIFT = None
step = 0  # a loop counter named like `optimizer.step`: an attribute, not a global the step reads


_collections_seen = 0.0  # what a profiler's gc callback would keep: a clock read at each start


def _profiler_callback(phase, info):
    global _collections_seen
    _collections_seen = _collections_seen + 1.0  # reads the global: a guard, were it followed


@pytest.mark.parametrize("threads", [1, 2])
def test_code_a_garbage_collection_runs_inside_the_step_is_not_followed(device, threads):
    """A collection can start inside any allocation of the step and runs the process's gc
    callbacks there. They are not the step's: a value they read, new at every call, must not
    become a guard (every call would record again and nothing would replay). In two threads at
    once, each thread's collections are its own."""
    import gc
    import threading

    weight = ta.tensor(np.ones(4, dtype="float32"), device=device)

    def step(x):
        gc.collect()  # a collection starts inside the step
        return (x * weight).sum()

    gc.callbacks.append(_profiler_callback)
    try:
        steps = [ta.compile(step) for _ in range(threads)]

        def calls(compiled):
            for k in range(5):
                compiled(ta.tensor(np.full(4, k, dtype="float32"), device=device))

        workers = [threading.Thread(target=calls, args=(s,)) for s in steps]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        gc.callbacks.remove(_profiler_callback)
    for compiled in steps:
        (tape,) = compiled.tapes.values()
        assert tape.calls == 3, "the three calls after the two recordings replay"
        assert not any("_collections_seen" in g.describe(g.value) for g in tape.guards)
    assert all(
        c.__self__.__class__.__name__ != "Tracer" for c in gc.callbacks if hasattr(c, "__self__")
    )


def test_a_global_or_enclosing_number_changed_after_recording_records_again(device):
    """A replay runs none of the step's Python, so a learning rate read from a global or an
    enclosing variable would stay at its recorded value. The step's own global and closure
    names are part of the signature (as torch.compile guards on them): a new value records
    again, equal to eager, and an unchanged one replays."""
    global LEARNING_RATE
    batches = _batches(device, 10)
    for where in ("global", "closure"):
        results = []
        for compiled, change in ((False, True), (True, True), (False, False)):
            model, _ = _mlp_and_optimizer(device)
            rate = 0.1

            def by_global(x, y, model=model):
                loss = F.cross_entropy(model(x), y)
                model.zero_grad()
                loss.backward()
                with ta.no_grad():
                    # read late on purpose: the name is rebound between calls
                    [p.sub_(LEARNING_RATE * p.grad) for p in model.parameters()]  # noqa: B023
                return loss

            def by_closure(x, y, model=model):
                loss = F.cross_entropy(model(x), y)
                model.zero_grad()
                loss.backward()
                with ta.no_grad():
                    for p in model.parameters():
                        p -= rate * p.grad  # noqa: B023  (read late on purpose)
                return loss

            chosen = by_global if where == "global" else by_closure
            run = ta.compile(chosen) if compiled else chosen
            losses = []
            LEARNING_RATE = 0.1
            for number, batch in enumerate(batches):
                if number == 5 and change:  # after the recordings and some replays
                    LEARNING_RATE = rate = 0.0
                losses.append(float(run(*batch).detach().numpy()))
            results.append((losses, run))
        (eager, _), (compiled_losses, run), (unchanged, _) = results
        assert compiled_losses == eager, where
        assert unchanged[6:] != eager[6:], "the new rate matters (a frozen one would differ)"
        assert len(run.tapes) == 2, f"{where}: one tape per rate, each replayed"


def test_a_global_bound_to_a_new_tensor_records_again(device):
    """A tensor read from a global is a constant of the tape; binding the name to another
    tensor after recording must not replay the old one's values."""
    global SHIFT
    ta.manual_seed(0)
    lin = nn.Linear(3, 2).to(device)

    def shifted(x):
        return (lin(x) + SHIFT).sum()

    compiled = ta.compile(shifted)
    x = ta.ones(4, 3, device=device)
    SHIFT = ta.zeros(2, device=device)
    for _ in range(4):
        assert float(compiled(x).detach().numpy()) == float(shifted(x).detach().numpy())
    SHIFT = ta.full((2,), 10.0, device=device)
    assert float(compiled(x).detach().numpy()) == float(shifted(x).detach().numpy())
    assert float(compiled(x).detach().numpy()) == float(shifted(x).detach().numpy())


def test_an_attribute_named_like_a_changing_global_does_not_stop_replays(device):
    """Only names the step loads as globals are keyed: `optimizer.step()` beside a module-level
    loop counter `step` replays as usual."""
    global step
    model, optimizer = _mlp_and_optimizer(device)
    compiled = ta.compile(_plain_step(model, optimizer))
    records = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step, batch in enumerate(_batches(device, 6)):  # noqa: B007
            compiled(*batch)
            records.append(len(compiled._first) + len(compiled.tapes))
    assert len(compiled.tapes) == 1 and records[-1] == 1


def test_a_bound_methods_attribute_changed_after_recording_records_again(device):
    """``trainer.step`` reading ``self.lr``: the object's public attributes count like globals."""

    class Trainer:
        def __init__(self) -> None:
            self.model, _ = _mlp_and_optimizer(device)
            self.lr = 0.1

        def step(self, x, y):
            loss = F.cross_entropy(self.model(x), y)
            self.model.zero_grad()
            loss.backward()
            with ta.no_grad():
                for p in self.model.parameters():
                    p -= self.lr * p.grad
            return loss

    batches = _batches(device, 8)
    results = []
    for compiled in (False, True):
        trainer = Trainer()
        run = ta.compile(trainer.step) if compiled else trainer.step
        losses = []
        for number, batch in enumerate(batches):
            if number == 5:
                trainer.lr = 0.0
            losses.append(float(run(*batch).detach().numpy()))
        results.append((losses, run))
    (eager, _), (compiled_losses, run) = results
    assert compiled_losses == eager
    assert len(run.tapes) == 2


CONFIG = {"lr": 0.1, "clip": 1.0}


def test_a_setting_in_a_small_config_dict_or_namespace_records_again(device):
    """``config["lr"]`` and ``args.lr`` read inside the step: a small dict or namespace of
    settings is keyed by its entries too, so a rate lowered after recording records again."""
    import argparse

    batches = _batches(device, 8)
    args = argparse.Namespace(lr=0.1, steps=8)
    for where in ("dict", "namespace"):
        results = []
        for compiled in (False, True):
            model, _ = _mlp_and_optimizer(device)
            CONFIG["lr"], args.lr = 0.1, 0.1

            def step(x, y, model=model, where=where):
                loss = F.cross_entropy(model(x), y)
                model.zero_grad()
                loss.backward()
                rate = CONFIG["lr"] if where == "dict" else args.lr
                with ta.no_grad():
                    for p in model.parameters():
                        p -= rate * p.grad
                return loss

            run = ta.compile(step) if compiled else step
            losses = []
            for number, batch in enumerate(batches):
                if number == 5:
                    CONFIG["lr"], args.lr = 0.0, 0.0
                losses.append(float(run(*batch).detach().numpy()))
            results.append((losses, run))
        (eager, _), (compiled_losses, run) = results
        assert compiled_losses == eager, where
        assert len(run.tapes) == 2, where


def test_a_large_dict_read_by_the_step_is_keyed_by_identity_only(device):
    """A vocabulary-sized dict is keyed by identity only (reading it on every call would cost
    more than the replay saves); binding the name to another dict records again."""
    global CONFIG
    saved = CONFIG
    try:
        CONFIG = {f"token{k}": k for k in range(100)} | {"scale": 1.0}
        ta.manual_seed(0)
        lin = nn.Linear(3, 1).to(device)
        compiled = ta.compile(lambda x: lin(x).sum() * CONFIG["scale"])
        x = ta.ones(2, 3, device=device)
        for _ in range(3):
            compiled(x)
        assert len(compiled.tapes) == 1
        CONFIG = dict(CONFIG, scale=2.0)
        expected = float((lin(x).sum() * 2.0).detach().numpy())
        assert float(compiled(x).detach().numpy()) == expected
    finally:
        CONFIG = saved


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("ignore_index", [-100, 2, None])
def test_cross_entropy_replays_as_out_calls_equal_to_eager(
    device, smoothing, ignore_index, reduction
):
    """Cross-entropy's node replays as out= calls where out= exists (NumPy), equal to eager
    bit for bit on batches whose ignored targets change, all of them ignored in one (the count
    of kept targets is then 1, the loss 0), and whose masked classes (-inf logits) change: a
    masked class counts 0 unless smoothing weighs it (the loss is then inf, as PyTorch's)."""
    weight = ta.tensor(np.linspace(-1, 1, 15, dtype="float32").reshape(3, 5), device=device)
    weight.requires_grad_(True)
    kwargs = {} if ignore_index is None else {"ignore_index": ignore_index}

    def step(x, mask, targets):
        weight.grad = None
        logits = x @ weight + mask
        loss = F.cross_entropy(
            logits, targets, label_smoothing=smoothing, reduction=reduction, **kwargs
        )
        loss.sum().backward()
        return loss, weight.grad

    rng = np.random.default_rng(3)
    ignored = -100 if ignore_index is None else ignore_index
    batches = []
    for call in range(6):
        targets = rng.integers(0, 5, size=8)
        if ignore_index is not None:
            targets[rng.random(8) < 0.4] = ignored
            if call == 3:
                targets[:] = ignored
        mask = np.zeros((8, 5), dtype="float32")
        if call in (2, 4):  # a class the targets never name, masked in some rows
            targets[targets == 4] = 0
            mask[::2, 4] = -np.inf
        batches.append((rng.standard_normal((8, 3)).astype("float32"), mask, targets))
    as_tensors = [tuple(ta.tensor(a, device=device) for a in b) for b in batches]
    eager = [tuple(r.detach().numpy() for r in step(*b)) for b in as_tensors]
    compiled = ta.compile(step)
    for b, expected in zip(as_tensors, eager, strict=True):
        for got, want in zip(compiled(*b), expected, strict=True):
            np.testing.assert_array_equal(got.detach().numpy(), want)
    if ignore_index is not None and reduction != "none":
        assert eager[3][0] == 0.0, "every target ignored: loss 0, not 0/0"
    assert np.isfinite(eager[2][1]).all() and np.isinf(eager[2][0]).any() == (smoothing > 0)
    labels = next(iter(compiled.tapes.values())).labels
    lowered = device == "cpu"
    assert ("CrossEntropy forward (out=)" in labels) == lowered, labels
    assert ("CrossEntropy forward" in labels) != lowered, labels


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # -inf * 0
@pytest.mark.parametrize("shape", [(5, 7), (3, 128, 200)], ids=["one piece", "three pieces"])
def test_gelu_replays_as_out_calls_equal_to_eager(device, shape):
    """GELU's forward replays as out= calls into scratch buffers, piece by piece, where out=
    exists (NumPy): equal to eager bit for bit (loss, input gradient and the saved CDF its
    backward reads), on inputs with NaN, infinities, values past both ends of Phi's table
    and a last piece shorter than the others, each batch's values new."""
    weight = ta.tensor(np.linspace(-2, 2, shape[-1], dtype="float32"), device=device)
    weight.requires_grad_(True)

    def step(x):
        weight.grad = None
        y = F.gelu(x * weight)
        loss = (y * y).sum()
        loss.backward()
        return y, weight.grad

    rng = np.random.default_rng(5)
    batches = []
    for call in range(4):
        x = (rng.standard_normal(shape) * (2.0 + 4 * call)).astype("float32")
        x.flat[:6] = [np.nan, np.inf, -np.inf, -40.0, 30.0, -0.0]
        batches.append(ta.tensor(x, device=device))
    eager = [tuple(r.detach().numpy() for r in step(b)) for b in batches]
    compiled = ta.compile(step)
    for b, expected in zip(batches, eager, strict=True):
        for got, want in zip(compiled(b), expected, strict=True):
            np.testing.assert_array_equal(got.detach().numpy(), want)
    labels = next(iter(compiled.tapes.values())).labels
    lowered = device == "cpu"
    assert ("Gelu forward (out=)" in labels) == lowered, labels
