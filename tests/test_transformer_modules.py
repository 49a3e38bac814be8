"""nn.Transformer, nn.TransformerEncoder(Layer) and nn.TransformerDecoder(Layer) against PyTorch.

Each module is built in both libraries with the same arguments; PyTorch's weights move into
tinyattn's module by state-dict key (the keys must be PyTorch's) and back, and the outputs agree
to 1e-5 in eval mode, with every kind of mask. PyTorch runs with grad mode on, so its inference
fast path (which zeroes padded positions) stays out of the comparison. Skipped without PyTorch.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import nn

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
E, HEADS, FF, N, S, T = 16, 4, 32, 3, 5, 4


def data(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def copy_weights(theirs, ours) -> None:
    """PyTorch's weights into tinyattn's module, by key: the key sets must be equal."""
    state = {k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()}
    assert list(state) == list(ours.state_dict()), "state-dict keys and order must be PyTorch's"
    ours.load_state_dict({k: ta.tensor(v) for k, v in state.items()})


def close(ours, theirs, atol=1e-5) -> None:
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-5, atol=atol)


def pair(name: str, *args, **kwargs):
    torch.manual_seed(0)
    theirs = getattr(torch.nn, name)(*args, **kwargs).eval()
    ours = getattr(nn, name)(*args, **kwargs).eval()
    copy_weights(theirs, ours)
    return theirs, ours


def causal(size: int) -> np.ndarray:
    return np.triu(np.ones((size, size), dtype=bool), k=1)  # True = may NOT attend (PyTorch)


def padding(lengths: list[int], size: int) -> np.ndarray:
    return np.arange(size)[None, :] >= np.asarray(lengths)[:, None]  # True = padding


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_encoder_layer_matches_torch(norm_first, activation, batch_first):
    kwargs = dict(
        dim_feedforward=FF, activation=activation, norm_first=norm_first, batch_first=batch_first
    )
    theirs, ours = pair("TransformerEncoderLayer", E, HEADS, **kwargs)
    src = data(N, S, E) if batch_first else data(S, N, E)
    pad = padding([5, 3, 1], S)
    mask = causal(S)
    close(ours(ta.tensor(src)), theirs(torch.tensor(src)))
    close(
        ours(ta.tensor(src), src_mask=ta.tensor(mask), src_key_padding_mask=ta.tensor(pad)),
        theirs(
            torch.tensor(src), src_mask=torch.tensor(mask), src_key_padding_mask=torch.tensor(pad)
        ),
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first):
    theirs, ours = pair(
        "TransformerDecoderLayer", E, HEADS, dim_feedforward=FF, norm_first=norm_first
    )
    tgt, memory = data(T, N, E), data(S, N, E)
    masks = {
        "tgt_mask": causal(T),
        "memory_mask": RNG.random((T, S)) < 0.3,
        "tgt_key_padding_mask": padding([4, 2, 3], T),
        "memory_key_padding_mask": padding([5, 4, 2], S),
    }
    close(
        ours(ta.tensor(tgt), ta.tensor(memory), **{k: ta.tensor(v) for k, v in masks.items()}),
        theirs(
            torch.tensor(tgt),
            torch.tensor(memory),
            **{k: torch.tensor(v) for k, v in masks.items()},
        ),
    )


def test_transformer_matches_torch_with_float_masks_and_weights_load_back():
    theirs, ours = pair(
        "Transformer",
        d_model=E,
        nhead=HEADS,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=FF,
        batch_first=True,
    )
    src, tgt = data(N, S, E), data(N, T, E)
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(T)
    torch_mask = torch.nn.Transformer.generate_square_subsequent_mask(T)
    np.testing.assert_array_equal(tgt_mask.numpy(), torch_mask.numpy())
    src_pad = padding([5, 4, 3], S)
    expected = theirs(
        torch.tensor(src),
        torch.tensor(tgt),
        tgt_mask=torch_mask,
        src_key_padding_mask=torch.tensor(src_pad),
        memory_key_padding_mask=torch.tensor(src_pad),
        tgt_is_causal=True,
    )
    got = ours(
        ta.tensor(src),
        ta.tensor(tgt),
        tgt_mask=tgt_mask,
        src_key_padding_mask=ta.tensor(src_pad),
        memory_key_padding_mask=ta.tensor(src_pad),
        tgt_is_causal=True,
    )
    close(got, expected)
    # ... and tinyattn's weights (after a training step) load into PyTorch's module.
    ours.train()
    loss = ours(ta.tensor(src), ta.tensor(tgt), tgt_mask=tgt_mask).pow(2).mean()
    loss.backward()
    ta.optim.SGD(ours.parameters(), lr=0.1).step()
    ours.eval()
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})
    close(ours(ta.tensor(src), ta.tensor(tgt)), theirs(torch.tensor(src), torch.tensor(tgt)))


def test_encoder_stack_with_final_norm_and_gradients_match_torch():
    torch.manual_seed(0)
    theirs = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(E, HEADS, FF, dropout=0.0),
        3,
        torch.nn.LayerNorm(E),
        enable_nested_tensor=False,
    )
    ours = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(E, HEADS, FF, dropout=0.0), 3, nn.LayerNorm(E)
    )
    copy_weights(theirs, ours)
    src = data(S, N, E)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(S)
    expected = theirs(torch.tensor(src), mask=mask, is_causal=True)
    got = ours(ta.tensor(src), mask=ta.tensor(mask.numpy()), is_causal=True)
    close(got, expected)
    expected.pow(2).sum().backward()
    got.pow(2).sum().backward()
    mine = dict(ours.named_parameters())
    for name, p in theirs.named_parameters():
        np.testing.assert_allclose(mine[name].grad.numpy(), p.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_unbatched_input_and_callable_activation():
    theirs, ours = pair(
        "TransformerEncoderLayer", E, HEADS, dim_feedforward=FF, activation=torch.nn.functional.silu
    )
    ours.activation = nn.functional.silu  # the same callable, from tinyattn
    src = data(S, E)
    close(ours(ta.tensor(src)), theirs(torch.tensor(src)))


def test_defaults_are_pytorchs():
    layer = nn.TransformerEncoderLayer(8, 2)
    assert layer.linear1.weight.shape == (2048, 8)  # dim_feedforward=2048
    assert layer.dropout.p == layer.dropout1.p == 0.1
    assert layer.norm1.eps == 1e-5 and not layer.norm_first
    assert not layer.self_attn.batch_first
    model = nn.Transformer(d_model=8, nhead=2, dim_feedforward=16)
    assert len(model.encoder.layers) == len(model.decoder.layers) == 6
    assert model.encoder.norm is not None and model.decoder.norm is not None
    no_bias = nn.TransformerDecoderLayer(8, 2, 16, bias=False)
    assert not any(name.endswith("bias") for name, _ in no_bias.named_parameters())


def test_bad_arguments_are_refused_as_pytorch_does():
    with pytest.raises(RuntimeError, match="relu/gelu"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
    model = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1)
    with pytest.raises(RuntimeError, match="batch number"):
        model(ta.zeros(3, 2, 8), ta.zeros(3, 4, 8))
    with pytest.raises(RuntimeError, match="d_model"):
        model(ta.zeros(3, 2, 6), ta.zeros(3, 2, 6))
    with pytest.raises(RuntimeError, match="is_causal"):  # a hint with no mask, as in PyTorch
        model.encoder(ta.zeros(3, 2, 8), is_causal=True)
