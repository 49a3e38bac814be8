"""Recurrent layers (nn.RNN, nn.LSTM, nn.GRU and their cells) against PyTorch's on the same
weights: outputs, final states and every gradient; state dicts both ways; the errors; the
gradient checker on float64 cells; a compiled LSTM language-model step equal to eager.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn, optim

IN, HIDDEN, T, B = 5, 6, 4, 3
MODULES = [("RNN", {}), ("RNN", {"nonlinearity": "relu"}), ("LSTM", {}), ("GRU", {})]


def _torch():
    return pytest.importorskip("torch")


def _pair(module_name, kwargs, torch, **extra):
    """(tinyattn module, torch module) of the same arguments, torch's weights loaded into ours."""
    torch.manual_seed(0)
    reference = getattr(torch.nn, module_name)(IN, HIDDEN, **kwargs, **extra)
    ours = getattr(nn, module_name)(IN, HIDDEN, **kwargs, **extra)
    ours.load_state_dict(
        {k: ta.tensor(v.detach().numpy()) for k, v in reference.state_dict().items()}
    )
    return ours, reference


def _states(is_lstm, rng, shape):
    count = 2 if is_lstm else 1
    return [rng.standard_normal(shape).astype("float32") for _ in range(count)]


def _close(ours, theirs, what):
    theirs = theirs.detach().numpy() if hasattr(theirs, "detach") else theirs
    np.testing.assert_allclose(ours.detach().numpy(), theirs, atol=1e-5, rtol=1e-5, err_msg=what)


def _loss_weights(shapes, rng):
    return [rng.standard_normal(shape).astype("float32") for shape in shapes]


def _run_both(ours, reference, x, initial, is_lstm, torch):
    """Forward both on x (and initial states), backward a random weighting of every output."""
    x_ours = ta.tensor(x, requires_grad=True)
    x_torch = torch.tensor(x, requires_grad=True)
    h_ours = [ta.tensor(s, requires_grad=True) for s in initial]
    h_torch = [torch.tensor(s, requires_grad=True) for s in initial]

    def state(hs):
        if not hs:
            return None
        return tuple(hs) if is_lstm else hs[0]

    out, final = ours(x_ours, state(h_ours))
    out_t, final_t = reference(x_torch, state(h_torch))
    finals, finals_t = (list(final), list(final_t)) if is_lstm else ([final], [final_t])
    rng = np.random.default_rng(1)
    weights = _loss_weights([out_t.shape] + [f.shape for f in finals_t], rng)
    loss = sum(((o * ta.tensor(w)).sum() for o, w in zip([out, *finals], weights)), ta.tensor(0.0))
    loss_t = sum((o * torch.tensor(w)).sum() for o, w in zip([out_t, *finals_t], weights))
    loss.backward()
    loss_t.backward()
    return (out, finals, x_ours, h_ours), (out_t, finals_t, x_torch, h_torch)


def _assert_parity(ours, reference, x, initial, is_lstm, torch):
    mine, theirs = _run_both(ours, reference, x, initial, is_lstm, torch)
    _close(mine[0], theirs[0], "output")
    for k, (f, f_t) in enumerate(zip(mine[1], theirs[1])):
        _close(f, f_t, f"final state {k}")
    _close(mine[2].grad, theirs[2].grad, "input gradient")
    for k, (h, h_t) in enumerate(zip(mine[3], theirs[3])):
        _close(h.grad, h_t.grad, f"initial state {k} gradient")
    named = dict(reference.named_parameters())
    for name, parameter in ours.named_parameters():
        _close(parameter.grad, named[name].grad, f"gradient of {name}")


GRID = list(itertools.product([1, 2], [False, True], [False, True], [False, True], [True, False]))


@pytest.mark.parametrize(("module_name", "kwargs"), MODULES, ids=lambda v: str(v))
@pytest.mark.parametrize(("layers", "bidirectional", "batch_first", "initial", "bias"), GRID)
def test_layers_equal_torch(module_name, kwargs, layers, bidirectional, batch_first, initial, bias):
    torch = _torch()
    ours, reference = _pair(
        module_name,
        kwargs,
        torch,
        num_layers=layers,
        bidirectional=bidirectional,
        batch_first=batch_first,
        bias=bias,
    )
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, T, IN) if batch_first else (T, B, IN)).astype("float32")
    is_lstm = module_name == "LSTM"
    directions = 2 if bidirectional else 1
    states = _states(is_lstm, rng, (layers * directions, B, HIDDEN)) if initial else []
    _assert_parity(ours, reference, x, states, is_lstm, torch)


@pytest.mark.parametrize(("module_name", "kwargs"), MODULES, ids=lambda v: str(v))
@pytest.mark.parametrize("initial", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])  # no batch axis: batch_first changes nothing
def test_unbatched_input_equals_torch(module_name, kwargs, initial, batch_first):
    torch = _torch()
    ours, reference = _pair(
        module_name, kwargs, torch, num_layers=2, bidirectional=True, batch_first=batch_first
    )
    rng = np.random.default_rng(2)
    x = rng.standard_normal((T, IN)).astype("float32")  # (T, in): no batch axis
    is_lstm = module_name == "LSTM"
    states = _states(is_lstm, rng, (4, HIDDEN)) if initial else []
    _assert_parity(ours, reference, x, states, is_lstm, torch)
    out, _ = ours(ta.tensor(x))
    assert out.shape == (T, 2 * HIDDEN)


def test_dropout_between_layers_in_training_only():
    """With p = 1 every unit between the layers is dropped, so the result is deterministic and
    equals PyTorch's; in eval mode dropout does nothing."""
    torch = _torch()
    ours, reference = _pair("LSTM", {}, torch, num_layers=2, dropout=1.0)
    x = np.random.default_rng(3).standard_normal((T, B, IN)).astype("float32")
    _assert_parity(ours, reference, x, [], True, torch)
    ours.eval()
    reference.eval()
    _assert_parity(ours, reference, x, [], True, torch)
    ours.train()
    trained, _ = ours(ta.tensor(x))
    ours.eval()
    evaluated, _ = ours(ta.tensor(x))
    assert not np.allclose(trained.detach().numpy(), evaluated.detach().numpy())


def test_dropout_with_one_layer_warns_as_torch():
    with pytest.warns(UserWarning, match="LSTM: dropout=0.5 acts between layers only"):
        nn.LSTM(3, 4, dropout=0.5)


CELLS = [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu"}), ("LSTMCell", {}), ("GRUCell", {})]


@pytest.mark.parametrize(("cell_name", "kwargs"), CELLS, ids=lambda v: str(v))
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch", [B, None])
@pytest.mark.parametrize("initial", [False, True])
def test_cells_equal_torch(cell_name, kwargs, bias, batch, initial):
    torch = _torch()
    torch.manual_seed(0)
    reference = getattr(torch.nn, cell_name)(IN, HIDDEN, bias=bias, **kwargs)
    ours = getattr(nn, cell_name)(IN, HIDDEN, bias=bias, **kwargs)
    ours.load_state_dict(
        {k: ta.tensor(v.detach().numpy()) for k, v in reference.state_dict().items()}
    )
    rng = np.random.default_rng(4)
    lead = (batch,) if batch else ()  # None: unbatched (in,) input
    x = rng.standard_normal((*lead, IN)).astype("float32")
    is_lstm = cell_name == "LSTMCell"
    states = _states(is_lstm, rng, (*lead, HIDDEN)) if initial else []
    x_ours, x_torch = ta.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    h_ours = [ta.tensor(s, requires_grad=True) for s in states]
    h_torch = [torch.tensor(s, requires_grad=True) for s in states]
    hx_ours = (tuple(h_ours) if is_lstm else h_ours[0]) if states else None
    hx_torch = (tuple(h_torch) if is_lstm else h_torch[0]) if states else None
    out, out_t = ours(x_ours, hx_ours), reference(x_torch, hx_torch)
    out, out_t = (list(out), list(out_t)) if is_lstm else ([out], [out_t])
    weights = _loss_weights([o.shape for o in out_t], rng)
    sum((o * ta.tensor(w)).sum() for o, w in zip(out, weights)).backward()
    sum((o * torch.tensor(w)).sum() for o, w in zip(out_t, weights)).backward()
    for k, (o, o_t) in enumerate(zip(out, out_t)):
        _close(o, o_t, f"output {k}")
    _close(x_ours.grad, x_torch.grad, "input gradient")
    for h, h_t in zip(h_ours, h_torch):
        _close(h.grad, h_t.grad, "state gradient")
    named = dict(reference.named_parameters())
    for name, parameter in ours.named_parameters():
        _close(parameter.grad, named[name].grad, f"gradient of {name}")


@pytest.mark.parametrize("module_name", ["RNN", "LSTM", "GRU"])
def test_state_dict_keys_and_round_trip_to_torch(module_name):
    """Our weights loaded into PyTorch's module give our outputs (and the keys are PyTorch's)."""
    torch = _torch()
    ta.manual_seed(0)
    ours = getattr(nn, module_name)(IN, HIDDEN, num_layers=2, bidirectional=True)
    reference = getattr(torch.nn, module_name)(IN, HIDDEN, num_layers=2, bidirectional=True)
    assert list(ours.state_dict()) == list(reference.state_dict())
    for key, value in ours.state_dict().items():
        assert tuple(value.shape) == tuple(reference.state_dict()[key].shape), key
    reference.load_state_dict(
        {k: torch.tensor(v.detach().numpy()) for k, v in ours.state_dict().items()}
    )
    x = np.random.default_rng(5).standard_normal((T, B, IN)).astype("float32")
    out, _ = ours(ta.tensor(x))
    _close(out, reference(torch.tensor(x))[0], "output after loading into torch")


@pytest.mark.parametrize(
    ("module", "gates"),
    [(nn.RNN(4, 8), 1), (nn.LSTM(4, 8), 4), (nn.GRU(4, 8), 3), (nn.LSTMCell(4, 8), 4)],
    ids=["RNN", "LSTM", "GRU", "LSTMCell"],
)
def test_init_is_uniform_within_one_over_sqrt_hidden(module, gates):
    bound = 1.0 / math.sqrt(8)
    for name, parameter in module.named_parameters():
        values = parameter.detach().numpy()
        assert parameter.dtype == ta.float32
        assert values.shape[0] == gates * 8, name
        assert np.abs(values).max() <= bound, name
        assert np.abs(values).max() > 0.8 * bound, name  # spread over the interval, not clustered


def test_rnn_base_takes_torch_mode_names():
    """PyTorch's RNNBase(mode, ...) has no forward of its own; tinyattn's runs its mode."""
    torch = _torch()
    torch.manual_seed(0)
    reference = torch.nn.RNN(IN, HIDDEN, num_layers=2, nonlinearity="relu")
    ours = nn.RNNBase("RNN_RELU", IN, HIDDEN, num_layers=2)
    ours.load_state_dict(
        {k: ta.tensor(v.detach().numpy()) for k, v in reference.state_dict().items()}
    )
    x = np.random.default_rng(9).standard_normal((T, B, IN)).astype("float32")
    _close(ours(ta.tensor(x))[0], reference(torch.tensor(x))[0], "RNNBase output")
    assert isinstance(nn.LSTM(3, 4), nn.RNNBase) and isinstance(nn.GRUCell(3, 4), nn.RNNCellBase)
    with pytest.raises(ValueError, match=r"RNNBase: unknown mode 'LSTM2'; expected one of"):
        nn.RNNBase("LSTM2", 3, 4)


def test_bias_false_has_no_bias_parameters():
    names = [name for name, _ in nn.GRU(3, 4, num_layers=2, bias=False).named_parameters()]
    assert names == ["weight_ih_l0", "weight_hh_l0", "weight_ih_l1", "weight_hh_l1"]
    assert nn.LSTMCell(3, 4, bias=False).bias_ih is None


def test_all_weights_and_flatten_parameters():
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    lstm.flatten_parameters()  # PyTorch programs call it; here it does nothing
    assert len(lstm.all_weights) == 4 and len(lstm.all_weights[0]) == 4
    assert lstm.all_weights[1][0] is lstm.weight_ih_l0_reverse


# ------------------------------------------------------------------------------------ errors
def _zeros(*shape):
    return ta.zeros(*shape)


ERRORS = [
    (
        lambda: nn.LSTM(5, 6)(_zeros(4, 3, 7)),
        RuntimeError,
        r"LSTM: input.size\(-1\) must equal input_size=5, got input of shape \(4, 3, 7\)",
    ),
    (
        lambda: nn.GRU(5, 6)(_zeros(2, 4, 3, 5)),
        ValueError,
        r"GRU: expected input of 2 \(unbatched\) or 3 dimensions, got shape \(2, 4, 3, 5\)",
    ),
    (
        lambda: nn.RNN(5, 6, num_layers=2)(_zeros(4, 3, 5), _zeros(1, 3, 6)),
        RuntimeError,
        r"RNN: expected h_0 of shape \(2, 3, 6\), got \(1, 3, 6\)",
    ),
    (
        lambda: nn.LSTM(5, 6)(_zeros(4, 3, 5), _zeros(1, 3, 6)),
        TypeError,
        r"LSTM: hx must be a pair \(h_0, c_0\), got Tensor",
    ),
    (
        lambda: nn.LSTM(5, 6)(_zeros(4, 3, 5), (_zeros(1, 3, 6), _zeros(1, 2, 6))),
        RuntimeError,
        r"LSTM: expected c_0 of shape \(1, 3, 6\), got \(1, 2, 6\)",
    ),
    (
        lambda: nn.LSTM(5, 6)(_zeros(4, 5), (_zeros(1, 3, 6), _zeros(1, 3, 6))),
        RuntimeError,
        r"LSTM: expected h_0 of shape \(1, 6\), got \(1, 3, 6\)",  # unbatched input
    ),
    (
        lambda: nn.LSTMCell(5, 6)(_zeros(3, 4)),
        RuntimeError,
        r"LSTMCell: input.size\(-1\) must equal input_size=5, got input of shape \(3, 4\)",
    ),
    (
        lambda: nn.GRUCell(5, 6)(_zeros(3, 5), _zeros(2, 6)),
        RuntimeError,
        r"GRUCell: expected hx of shape \(3, 6\), got \(2, 6\)",
    ),
    (
        lambda: nn.RNNCell(5, 6)(_zeros(1, 3, 5)),
        ValueError,
        r"RNNCell: expected input of 1 \(unbatched\) or 2 dimensions, got shape \(1, 3, 5\)",
    ),
    (
        lambda: nn.LSTM(5, 6)(_zeros(4, 3, 5).double()),
        RuntimeError,
        r"LSTM: input is float64 but the parameters are float32; cast one with .to\(dtype\)",
    ),
    (
        lambda: nn.GRUCell(5, 6)(_zeros(3, 5), _zeros(3, 6).double()),
        RuntimeError,
        r"GRUCell: hx is float64 but the parameters are float32",
    ),
    (
        lambda: nn.RNN(5, 6)(_zeros(4, 3, 5), _zeros(1, 3, 6).double()),
        RuntimeError,
        r"RNN: h_0 is float64 but the parameters are float32",
    ),
    (lambda: nn.RNN(5, 6, nonlinearity="gelu"), ValueError, "RNN: unknown nonlinearity 'gelu'"),
    (lambda: nn.LSTM(5, 6, proj_size=3), NotImplementedError, "LSTM: proj_size=3 .* not"),
    (lambda: nn.GRU(5, 0), ValueError, "GRU: hidden_size must be a positive int, got 0"),
    (lambda: nn.GRU(5, 6, dropout=1.5), ValueError, r"GRU: dropout must be in \[0, 1\], got 1.5"),
]


@pytest.mark.parametrize(("call", "error", "message"), ERRORS, ids=[e[2][:20] for e in ERRORS])
def test_errors_name_the_module_and_shapes(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ----------------------------------------------------------------------------- gradient checks
@pytest.mark.parametrize("cell_class", [nn.LSTMCell, nn.GRUCell, nn.RNNCell])
def test_cells_gradcheck_in_float64(cell_class):
    ta.manual_seed(0)
    cell = cell_class(3, 2).to("float64")
    rng = np.random.default_rng(6)
    x = ta.tensor(rng.standard_normal((2, 3)), requires_grad=True)
    h = ta.tensor(rng.standard_normal((2, 2)), requires_grad=True)
    c = ta.tensor(rng.standard_normal((2, 2)), requires_grad=True)
    if cell_class is nn.LSTMCell:
        assert ta.gradcheck(lambda x, h, c: ta.stack(cell(x, (h, c))), [x, h, c], params=cell)
    else:
        assert ta.gradcheck(lambda x, h: cell(x, h), [x, h], params=cell)


def test_lstm_cell_check_grads_over_drawn_inputs():
    """The property checker over drawn inputs, states and a float64 LSTMCell's parameters."""
    pytest.importorskip("hypothesis")
    from tinyattn.testing import check_grads, tensors  # noqa: PLC0415

    ta.manual_seed(0)
    cell = nn.LSTMCell(2, 2).to("float64")
    values = tensors((2, 2), "float64", (-2.0, 2.0), requires_grad=True)

    def step(x, h, c, weight_hh):
        input_gates = F.linear(x, cell.weight_ih, cell.bias_ih)
        return ta.stack(nn.rnn.lstm_step(input_gates, (h, c), weight_hh, cell.bias_hh))

    weights = tensors((8, 2), "float64", (-1.0, 1.0), requires_grad=True)
    check_grads(step, values, values, values, weights, max_examples=15, dtype="float64")


def test_two_layer_bidirectional_gru_gradcheck():
    ta.manual_seed(0)
    gru = nn.GRU(2, 2, num_layers=2, bidirectional=True).to("float64")
    x = ta.tensor(np.random.default_rng(7).standard_normal((3, 1, 2)), requires_grad=True)
    assert ta.gradcheck(lambda x: gru(x)[0], [x], params=gru)


# ----------------------------------------------------------------------------------- compile
class CharModel(nn.Module):
    """Embedding -> LSTM -> Linear: a next-token language model."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, 6)
        self.lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True)
        self.head = nn.Linear(8, vocab)

    def forward(self, tokens):
        out, _ = self.lstm(self.embed(tokens))  # (B, T) -> (B, T, 8)
        return self.head(out)  # (B, T, V)


def test_a_compiled_lstm_language_model_step_equals_eager(device):
    vocab, rng = 7, np.random.default_rng(8)
    counting = (rng.integers(0, vocab, (8, 4, 1)) + np.arange(6)) % vocab  # learnable: t + 1
    batches = [ta.tensor(tokens, device=device) for tokens in counting]
    results = []
    for compiled in (False, True):
        ta.manual_seed(0)
        model = CharModel(vocab).to(device)
        optimizer = optim.Adam(model.parameters(), lr=3e-2)

        def step(tokens, model=model, optimizer=optimizer):
            optimizer.zero_grad()
            logits = model(tokens[:, :-1])  # (B, T - 1, V)
            loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
            loss.backward()
            optimizer.step()
            return loss

        step = ta.compile(step) if compiled else step
        losses = [step(tokens).item() for tokens in batches]
        results.append((losses, model))
    (eager_losses, eager), (compiled_losses, compiled) = results
    assert compiled_losses == eager_losses
    assert eager_losses[-1] < eager_losses[0]
    for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
        assert np.array_equal(p.detach().numpy(), q.detach().numpy()), name
