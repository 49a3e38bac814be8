"""PyTorch programs run on tinyattn with only their import lines changed, and agree with PyTorch.

Each program in tests/programs/ is written for PyTorch. It is loaded twice: as written, and with
every ``import torch...`` / ``from torch...`` line pointed at tinyattn. Both copies start from
the same weights (PyTorch's initialisation, moved through the state dict) and see the same
batches; logits, losses, every parameter's gradient, a dozen training steps and the generated
tokens must agree to float32 rounding. Skipped without PyTorch.
"""

from __future__ import annotations

import numpy as np
import pytest
from programs import load

import tinyattn as ta

torch = pytest.importorskip("torch")

TEXT = (
    "the quick brown fox jumps over the lazy dog. a small model learns to spell the words it "
    "has seen, one character after another, and then writes them back again.\n"
) * 4


def same_weights(theirs, ours) -> None:
    """Copy PyTorch's initial weights (and buffers) into the tinyattn model by state-dict key."""
    state = {k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()}
    assert set(state) == set(ours.state_dict()), "the state-dict keys must be PyTorch's"
    ours.load_state_dict({k: ta.tensor(v) for k, v in state.items()})


def as_numpy(value) -> np.ndarray:
    return value.detach().numpy() if isinstance(value, torch.Tensor) else value.detach().numpy()


def close(a, b, rtol=2e-5, atol=2e-6) -> None:
    np.testing.assert_allclose(as_numpy(a), as_numpy(b), rtol=rtol, atol=atol)


def compare_grads(theirs, ours) -> None:
    """Every parameter's gradient, to float32 rounding of the largest gradient in the model (a
    gradient that is zero in exact arithmetic, such as attention's key bias, is rounding noise
    in both libraries)."""
    mine = dict(ours.named_parameters())
    scale = max(float(p.grad.abs().max()) for p in theirs.parameters())
    for name, p in theirs.named_parameters():
        assert p.grad is not None and mine[name].grad is not None, name
        np.testing.assert_allclose(
            mine[name].grad.numpy(), p.grad.numpy(), rtol=1e-4, atol=2e-6 * scale, err_msg=name
        )


# ------------------------------------------------------------------------------- minGPT's shape
@pytest.fixture(scope="module")
def gpt_programs():
    return load("mingpt_style", "torch"), load("mingpt_style", "tinyattn")


def _gpt_pair(gpt_programs):
    theirs_program, ours_program = gpt_programs
    block = 16
    datasets = [p.CharDataset(TEXT, block) for p in gpt_programs]
    vocab = datasets[0].vocab_size
    torch.manual_seed(0)
    theirs = theirs_program.GPT(vocab, block, n_layer=2, n_head=2, n_embd=32)
    ta.manual_seed(0)
    ours = ours_program.GPT(vocab, block, n_layer=2, n_head=2, n_embd=32)
    same_weights(theirs, ours)
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(4):
        starts = rng.integers(0, len(datasets[0]), size=8)
        pairs = [[datasets[0][int(i)] for i in starts], [datasets[1][int(i)] for i in starts]]
        batches.append(
            (
                [torch.stack([p[0] for p in pairs[0]]), torch.stack([p[1] for p in pairs[0]])],
                [ta.stack([p[0] for p in pairs[1]]), ta.stack([p[1] for p in pairs[1]])],
            )
        )
    return theirs, ours, datasets, batches


def test_gpt_logits_loss_and_gradients_match(gpt_programs):
    theirs, ours, _, batches = _gpt_pair(gpt_programs)
    (tx, ty), (ox, oy) = batches[0]
    their_logits, their_loss = theirs(tx, ty)
    our_logits, our_loss = ours(ox, oy)
    close(our_logits, their_logits)
    close(our_loss, their_loss)
    their_loss.backward()
    our_loss.backward()
    compare_grads(theirs, ours)


def test_gpt_training_and_generation_match(gpt_programs):
    theirs_program, ours_program = gpt_programs
    theirs, ours, datasets, batches = _gpt_pair(gpt_programs)
    their_losses = theirs_program.train_steps(theirs, [b[0] for b in batches], 12)
    our_losses = ours_program.train_steps(ours, [b[1] for b in batches], 12)
    np.testing.assert_allclose(our_losses, their_losses, rtol=1e-4)
    assert our_losses[-1] < our_losses[0]
    theirs.eval()
    ours.eval()
    start = [datasets[0].stoi[c] for c in "the qu"]
    greedy = theirs.generate(torch.tensor([start]), 20, top_k=5)
    assert ours.generate(ta.tensor([start]), 20, top_k=5).tolist() == greedy.tolist()
    sampled = ours.generate(ta.tensor([start]), 20, do_sample=True, top_k=3)
    assert sampled.shape == (1, len(start) + 20) and sampled.dtype == ta.int64


def test_gpt_loader_batches(gpt_programs):
    _, ours_program = gpt_programs
    dataset = ours_program.CharDataset(TEXT, 16)
    batches = ours_program.loader_batches(dataset, 8, 3)
    assert len(batches) == 3
    for x, y in batches:
        assert x.shape == (8, 16) and y.shape == (8, 16) and x.dtype == ta.int64
        np.testing.assert_array_equal(x.numpy()[:, 1:], y.numpy()[:, :-1])


# ------------------------------------------------------------------ the Annotated Transformer's
@pytest.fixture(scope="module")
def annotated_programs():
    return load("annotated_style", "torch"), load("annotated_style", "tinyattn")


def _annotated_pair(programs, vocab=11):
    theirs_program, ours_program = programs
    torch.manual_seed(0)
    theirs = theirs_program.make_model(vocab, vocab, N=2)
    ta.manual_seed(0)
    ours = ours_program.make_model(vocab, vocab, N=2)
    same_weights(theirs, ours)
    rng = np.random.default_rng(1)
    batches = []
    for _ in range(3):
        data = rng.integers(1, vocab, size=(8, 10))
        data[:, 0] = 1
        data[:2, -2:] = 0  # some padding, so the masks matter
        batches.append(
            (
                theirs_program.Batch(torch.from_numpy(data), torch.from_numpy(data), 0),
                ours_program.Batch(ta.tensor(data), ta.tensor(data), 0),
            )
        )
    return theirs, ours, batches


def test_annotated_forward_loss_and_gradients_match(annotated_programs):
    theirs_program, ours_program = annotated_programs
    theirs, ours, batches = _annotated_pair(annotated_programs)
    tb, ob = batches[0]
    assert int(ob.ntokens) == int(tb.ntokens)
    np.testing.assert_array_equal(ob.tgt_mask.numpy(), tb.tgt_mask.numpy())
    their_out = theirs(tb.src, tb.tgt, tb.src_mask, tb.tgt_mask)
    our_out = ours(ob.src, ob.tgt, ob.src_mask, ob.tgt_mask)
    close(our_out, their_out)
    criterion = [
        p.LabelSmoothing(size=11, padding_idx=0, smoothing=0.1) for p in annotated_programs
    ]
    their_loss, their_node = theirs_program.SimpleLossCompute(theirs.generator, criterion[0])(
        their_out, tb.tgt_y, tb.ntokens
    )
    our_loss, our_node = ours_program.SimpleLossCompute(ours.generator, criterion[1])(
        our_out, ob.tgt_y, ob.ntokens
    )
    close(criterion[1].true_dist, criterion[0].true_dist)
    close(our_loss, their_loss)
    their_node.backward()
    our_node.backward()
    compare_grads(theirs, ours)


def test_annotated_training_and_greedy_decoding_match(annotated_programs):
    theirs_program, ours_program = annotated_programs
    theirs, ours, batches = _annotated_pair(annotated_programs)
    their_losses = theirs_program.train_steps(theirs, [b[0] for b in batches], 12, 11)
    our_losses = ours_program.train_steps(ours, [b[1] for b in batches], 12, 11)
    np.testing.assert_allclose(our_losses, their_losses, rtol=1e-4)
    theirs.eval()
    ours.eval()
    src = np.array([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]])
    their_ys = theirs_program.greedy_decode(
        theirs, torch.from_numpy(src), torch.ones(1, 1, 10, dtype=torch.bool), 10, 1
    )
    our_ys = ours_program.greedy_decode(
        ours, ta.tensor(src), ta.ones(1, 1, 10, dtype=ta.bool), 10, 1
    )
    assert our_ys.tolist() == their_ys.tolist()


def test_annotated_data_gen_runs(annotated_programs):
    _, ours_program = annotated_programs
    batch = next(ours_program.data_gen(11, 4, 1))
    assert batch.src.shape == (4, 10) and (batch.src.numpy()[:, 0] == 1).all()
