"""ta.save / ta.load: round trips of model and optimizer state, atomic writes, and clear errors for
truncated, foreign and pickled files. Runs on every backend (`device`).
"""

from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import backend, nn, optim


def trained(device):
    ta.manual_seed(0)
    model = nn.TransformerBlock(4, 2, 8).to(device)
    opt = optim.AdamW(model.parameters(), lr=0.01)
    model(ta.randn(2, 3, 4, device=device)).sum().backward()
    opt.step()
    return model, opt


def test_model_round_trip(device, tmp_path):
    model, _ = trained(device)
    path = tmp_path / "model.npz"
    ta.save(model.state_dict(), path)
    loaded = ta.load(path)
    assert list(loaded) == list(model.state_dict())
    ta.manual_seed(1)
    fresh = nn.TransformerBlock(4, 2, 8).to(device)
    fresh.load_state_dict(loaded)
    for (name, a), (_, b) in zip(model.named_parameters(), fresh.named_parameters(), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
        assert a.dtype == b.dtype and b.device == a.device
    on_device = ta.load(path, device=device)
    assert on_device["norm1.weight"].device == model.norm1.weight.device


def test_optimizer_round_trip_and_nested_structure(device, tmp_path):
    model, opt = trained(device)
    path = tmp_path / "checkpoint.npz"
    ta.save(
        {"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3, "note": None}, path
    )
    loaded = ta.load(path)
    assert loaded["epoch"] == 3 and loaded["note"] is None
    state = loaded["optim"]
    assert state["param_groups"][0]["betas"] == (0.9, 0.999)
    assert sorted(state["state"][0]) == ["exp_avg", "exp_avg_sq", "step"]
    ta.manual_seed(1)
    other_model = nn.TransformerBlock(4, 2, 8).to(device)
    other_model.load_state_dict(loaded["model"])
    other = optim.AdamW(other_model.parameters(), lr=0.5)
    other.load_state_dict(state)
    assert other.param_groups[0]["lr"] == 0.01
    for a, b in zip(model.parameters(), other_model.parameters(), strict=True):
        saved, restored = opt.state[a], other.state[b]
        assert restored["step"] == saved["step"] == 1
        np.testing.assert_array_equal(
            ta.Tensor(restored["exp_avg"]).numpy(), ta.Tensor(saved["exp_avg"]).numpy()
        )
    with np.load(path, allow_pickle=False) as raw:  # readable without tinyattn
        assert "model.attn.q_proj.weight" in raw.files and "optim.state.0.exp_avg" in raw.files


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "weights.npz"
    ta.save({"w": ta.ones(3)}, path)

    def explode(file, arrays, metadata):
        file.write(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(backend, "save_npz", explode)
    with pytest.raises(OSError, match="disk full"):
        ta.save({"w": ta.zeros(3)}, path)
    monkeypatch.undo()
    np.testing.assert_array_equal(ta.load(path)["w"].numpy(), 1.0)  # the old file is intact
    assert os.listdir(tmp_path) == ["weights.npz"]  # and no temp file is left behind
    with pytest.raises(TypeError, match=r"save: cannot save a set at 'w'"):
        ta.save({"w": {1, 2}}, path)
    np.testing.assert_array_equal(ta.load(path)["w"].numpy(), 1.0)


def test_truncated_and_foreign_files_are_clear_errors(tmp_path):
    path = tmp_path / "good.npz"
    ta.save({"w": ta.ones(100)}, path)
    data = path.read_bytes()
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(
        ValueError, match=r"truncated.npz' is not a readable tinyattn checkpoint.*zip"
    ):
        ta.load(truncated)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(ValueError, match="notes.txt' is not a readable tinyattn checkpoint"):
        ta.load(text)
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, w=np.ones(3))
    with pytest.raises(ValueError, match="an .npz archive but not a tinyattn checkpoint"):
        ta.load(foreign)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, w=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="pickled.npz' is not a readable .*pickle"):
        ta.load(pickled)
    single = tmp_path / "single.npy"
    np.save(single, np.ones(2))
    with pytest.raises(ValueError, match="single .npy array"):
        ta.load(single)
    with pytest.raises(FileNotFoundError):
        ta.load(tmp_path / "missing.npz")


def test_manifest_version_is_checked(tmp_path):
    path = tmp_path / "future.npz"
    with zipfile.ZipFile(path, "w") as archive:
        with archive.open("__metadata__.npy", "w") as member:
            manifest = b'{"format": "tinyattn-checkpoint", "version": 99, "tree": {"value": 1}}'
            np.lib.format.write_array(member, np.frombuffer(manifest, dtype=np.uint8))
    with pytest.raises(ValueError, match="checkpoint version 99"):
        ta.load(path)


def test_keys_that_shadow_numpy_keywords_are_fine(tmp_path):
    path = tmp_path / "odd.npz"
    ta.save({"file": ta.ones(1), "allow_pickle": ta.zeros(1), 7: ta.ones(2, dtype="int64")}, path)
    loaded = ta.load(path)
    assert list(loaded) == ["file", "allow_pickle", 7]
    assert ta.backend.dtype_name(loaded[7].dtype) == "int64"
