"""A PyTorch nn.TransformerEncoder language model (tests/programs/encoder_lm_style.py) run as
written and with only its imports swapped to tinyattn, from the same weights: two epochs of
training losses, validation losses and the kept best weights agree. Skipped without PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
from programs import load

import tinyattn as ta

torch = pytest.importorskip("torch")

WORDS = (
    "the quick brown fox jumps over the lazy dog and a small model learns which word comes "
    "next after the words it has seen so far in the text"
).split() * 12


@pytest.fixture(scope="module")
def programs():
    return load("encoder_lm_style", "torch"), load("encoder_lm_style", "tinyattn")


def _data(lib, vocab):
    ids = [vocab[w] for w in WORDS]
    cut = len(ids) * 3 // 4
    train = lib.tensor(ids[:cut], dtype=lib.long)
    val = lib.tensor(ids[cut:], dtype=lib.long)
    return train, val


@pytest.mark.parametrize("masked", [True, False])
def test_training_losses_and_best_weights_match_pytorch(programs, masked):
    theirs_program, ours_program = programs
    vocab = {w: i for i, w in enumerate(sorted(set(WORDS)))}
    ntokens = len(vocab)
    torch.manual_seed(0)
    theirs = theirs_program.WordModel(ntokens, 16, 2, 24, 2)
    ours = ours_program.WordModel(ntokens, 16, 2, 24, 2)
    state = {k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()}
    assert set(state) == set(ours.state_dict())
    ours.load_state_dict({k: ta.tensor(v) for k, v in state.items()})
    (ttrain, tval), (otrain, oval) = _data(torch, vocab), _data(ta, vocab)
    ttrain, otrain = theirs_program.batchify(ttrain, 4), ours_program.batchify(otrain, 4)
    tval, oval = theirs_program.batchify(tval, 2), ours_program.batchify(oval, 2)
    their_losses, their_lr = theirs_program.fit(theirs, ttrain, tval, 6, ntokens, 2, masked, lr=1.0)
    our_losses, our_lr = ours_program.fit(ours, otrain, oval, 6, ntokens, 2, masked, lr=1.0)
    assert len(our_losses) == len(their_losses) > 20
    np.testing.assert_allclose(our_losses, their_losses, rtol=1e-5)
    assert our_lr == pytest.approx(their_lr)
    for name, p in theirs.state_dict().items():
        np.testing.assert_allclose(
            ours.state_dict()[name].numpy(), p.numpy(), rtol=1e-4, atol=1e-5, err_msg=name
        )


def test_mask_is_pytorchs(programs):
    theirs_program, ours_program = programs
    np.testing.assert_array_equal(
        ours_program.square_subsequent_mask(5).numpy(),
        theirs_program.square_subsequent_mask(5).numpy(),
    )
    np.testing.assert_array_equal(
        ours_program.square_subsequent_mask(5).numpy(),
        torch.nn.Transformer.generate_square_subsequent_mask(5).numpy(),
    )
