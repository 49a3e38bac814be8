"""ta.get_rng_state / ta.set_rng_state: one host generator, saved and restored exactly.

Every random draw of tinyattn (the random factories, layer initialisation, dropout masks) comes
from one generator, so restoring its state makes the draws that follow repeat bit for bit, on
every backend (the numbers are drawn on the host and then moved to the device).
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn
from tinyattn.backend import dtype_name

# Each row: a name and a draw on `device` that returns host numbers.
DRAWS = [
    ("randn", lambda device: ta.randn(3, 4, device=device).numpy()),
    ("rand", lambda device: ta.rand(5, device=device).numpy()),
    ("dropout mask", lambda device: F.dropout(ta.ones(4, 6, device=device), 0.5).numpy()),
    ("Dropout module", lambda device: nn.Dropout(0.3)(ta.ones(8, device=device)).numpy()),
    ("Linear init", lambda device: nn.Linear(4, 3).to(device).weight.detach().numpy()),
    ("randperm", lambda device: ta.randperm(50, device=device).numpy()),
    ("randn_like", lambda device: ta.randn_like(ta.ones(3, device=device)).numpy()),
]


@pytest.mark.parametrize(("name", "draw"), DRAWS, ids=[name for name, _ in DRAWS])
def test_restoring_the_state_repeats_the_draw(name, draw, device):
    ta.manual_seed(123)
    ta.randn(7)  # move away from the freshly seeded state
    state = ta.get_rng_state()
    first = draw(device)
    after_first = ta.get_rng_state()
    assert after_first != state, f"{name} drew nothing from the generator"
    ta.set_rng_state(state)
    np.testing.assert_array_equal(draw(device), first)
    assert ta.get_rng_state() == after_first  # the same number of draws, too


def test_all_draws_share_one_generator():
    """A dropout mask drawn in between shifts the next randn: there is one stream, not several."""
    ta.manual_seed(0)
    state = ta.get_rng_state()
    plain = ta.randn(4).numpy()
    ta.set_rng_state(state)
    F.dropout(ta.ones(3), 0.5)
    assert not np.array_equal(ta.randn(4).numpy(), plain)


def test_the_state_is_a_snapshot_not_a_view():
    state = ta.get_rng_state()
    copy = json.loads(json.dumps(state))
    ta.randn(10)
    assert state == copy  # later draws leave a taken state unchanged


@pytest.mark.parametrize(
    "roundtrip",
    [
        pytest.param(lambda state, path: json.loads(json.dumps(state)), id="json"),
        pytest.param(lambda state, path: pickle.loads(pickle.dumps(state)), id="pickle"),
        pytest.param(
            lambda state, path: (ta.save({"rng": state}, path), ta.load(path)["rng"])[1],
            id="ta.save",
        ),
    ],
)
def test_the_state_survives_serialisation(roundtrip, tmp_path):
    ta.manual_seed(5)
    state = ta.get_rng_state()
    expected = ta.randn(6).numpy()
    ta.manual_seed(99)
    ta.set_rng_state(roundtrip(state, tmp_path / "rng.npz"))
    np.testing.assert_array_equal(ta.randn(6).numpy(), expected)


def test_set_after_manual_seed_wins():
    ta.manual_seed(1)
    state = ta.get_rng_state()
    expected = ta.rand(3).numpy()
    ta.manual_seed(2)  # a fresh generator object: the state still goes where the draws come from
    ta.set_rng_state(state)
    np.testing.assert_array_equal(ta.rand(3).numpy(), expected)


@pytest.mark.parametrize(
    ("state", "error", "message"),
    [
        (None, TypeError, "set_rng_state: expected the dict returned by get_rng_state(), got"),
        (b"\x00" * 16, TypeError, "got bytes"),
        ({"seed": 3}, ValueError, "set_rng_state: expected a PCG64 state with keys"),
        (
            {"bit_generator": "MT19937", "state": {}, "has_uint32": 0, "uinteger": 0},
            ValueError,
            "expected a PCG64 state",
        ),
        (
            {
                "bit_generator": "PCG64",
                "state": {"state": -1, "inc": 1},
                "has_uint32": 0,
                "uinteger": 0,
            },
            ValueError,
            "set_rng_state: not a valid generator state",
        ),
    ],
)
def test_a_bad_state_is_refused_and_changes_nothing(state, error, message):
    ta.manual_seed(4)
    before = ta.get_rng_state()
    with pytest.raises(error) as info:
        ta.set_rng_state(state)
    assert message in str(info.value)
    assert ta.get_rng_state() == before


def test_pytorch_restores_the_same_way():
    """PyTorch's functions of these names snapshot and restore its default generator."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    state = torch.get_rng_state()
    first = torch.randn(4)
    torch.set_rng_state(state)
    assert torch.equal(torch.randn(4), first)


def test_randperm_is_a_permutation_drawn_again_in_each_replay(device):
    """Every value 0 .. n-1 once; in a compiled step (a shuffled minibatch) each replay draws
    a new order from the generator, as eager does."""
    assert sorted(ta.randperm(20, device=device).tolist()) == list(range(20))
    assert ta.randperm(0, device=device).shape == (0,)
    assert dtype_name(ta.randperm(3, dtype="int32", device=device).dtype) == "int32"
    rows = ta.tensor(np.arange(12.0).reshape(6, 2), device=device)

    def shuffled(x):
        return x[ta.randperm(6, device=device)] * 1.0

    results = []
    for run in (shuffled, ta.compile(shuffled)):
        ta.manual_seed(3)
        results.append([run(rows).numpy() for _ in range(5)])
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(b, a)
    assert len({r.tobytes() for r in results[1]}) > 1  # not the recorded order again
