"""ta.save / ta.load: round trips of model and optimizer state, atomic writes, and clear errors for
truncated, foreign and pickled files. Runs on every backend (`device`).
"""

from __future__ import annotations

import io
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
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy(), err_msg=name)
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

    monkeypatch.setattr(backend.files, "save_npz", explode)
    with pytest.raises(OSError, match="disk full"):
        ta.save({"w": ta.zeros(3)}, path)
    monkeypatch.undo()
    np.testing.assert_array_equal(ta.load(path)["w"].numpy(), 1.0)  # the old file is intact
    assert os.listdir(tmp_path) == ["weights.npz"]  # and no temp file is left behind
    with pytest.raises(TypeError, match=r"save: cannot save '.*<lambda>' at 'w'"):
        ta.save({"w": lambda: 0}, path)
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


# ------------------------------------------------------------------ PyTorch's ways to call them
def test_bfloat16_safetensors_written_by_pytorch_load_as_float32(tmp_path):
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    torch.manual_seed(0)
    weights = {"w": torch.randn(3, 4).to(torch.bfloat16), "ids": torch.arange(5)}
    path = tmp_path / "half.safetensors"
    safetensors_torch.save_file(weights, str(path))
    loaded = ta.load(path)
    assert ta.backend.dtype_name(loaded["w"].dtype) == "float32"
    assert ta.backend.dtype_name(loaded["ids"].dtype) == "int64"
    # bfloat16 -> float32 is exact, so the values equal PyTorch's own widening bit for bit.
    np.testing.assert_array_equal(loaded["w"].numpy(), weights["w"].float().numpy())
    np.testing.assert_array_equal(loaded["ids"].numpy(), np.arange(5))


@pytest.mark.parametrize("dtype", ["uint16", "float8_e4m3fn"])
def test_safetensors_dtypes_tinyattn_lacks_are_named_with_their_key(tmp_path, dtype):
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    if not hasattr(torch, dtype):
        pytest.skip(f"this PyTorch has no {dtype}")
    path = tmp_path / "odd.safetensors"
    safetensors_torch.save_file(
        {"fine": torch.ones(2), "odd": torch.zeros(2).to(getattr(torch, dtype))}, str(path)
    )
    with pytest.raises(
        ValueError, match=r"load: .*odd.safetensors.*tensor 'odd' has dtype (U16|F8_E4M3)"
    ):
        ta.load(path)


@pytest.mark.parametrize("obj", [{"w": ta.arange(6).reshape(2, 3), "step": 3}, {"w": ta.ones(2)}])
def test_save_and_load_take_file_objects(obj):
    buffer = io.BytesIO()
    ta.save(obj, buffer)
    buffer.seek(0)
    loaded = ta.load(buffer)
    assert list(loaded) == list(obj)
    for key, value in obj.items():
        if isinstance(value, ta.Tensor):
            np.testing.assert_array_equal(loaded[key].numpy(), value.numpy())
        else:
            assert loaded[key] == value


def test_load_reads_a_safetensors_file_object(tmp_path):
    path = tmp_path / "w.safetensors"
    ta.save({"w": ta.arange(4, dtype="float32")}, path)
    with open(path, "rb") as file:
        loaded = ta.load(file)
    np.testing.assert_array_equal(loaded["w"].numpy(), np.arange(4, dtype=np.float32))


def test_load_takes_map_location_and_weights_only(tmp_path):
    path = tmp_path / "w.npz"
    ta.save({"w": ta.ones(2)}, path)
    for location in ("cpu", ta.device("cpu"), {"cpu": "cpu"}):
        loaded = ta.load(path, map_location=location, weights_only=True)
        assert loaded["w"].device == "cpu"
    assert ta.load(path, weights_only=False)["w"].shape == (2,)
    with pytest.raises(TypeError, match="map_location"):
        ta.load(path, map_location=lambda storage, location: storage)
    with pytest.raises(TypeError, match="not both"):
        ta.load(path, device="cpu", map_location="cpu")


@pytest.mark.parametrize(
    "bad", ["", b"", 3, None, "no/such/directory/w.npz", ".", "a\0b.npz"], ids=repr
)
def test_a_bad_save_path_raises_an_error_that_starts_with_save(tmp_path, monkeypatch, bad):
    monkeypatch.chdir(tmp_path)
    with pytest.raises((ValueError, TypeError, OSError)) as info:
        ta.save({"w": ta.ones(1)}, bad)
    assert str(info.value).startswith("save:"), str(info.value)


def test_an_os_error_while_saving_names_save_and_the_path(tmp_path, monkeypatch):
    """A directory the process may not write to (simulated: tests may run as root, who may)."""
    import tempfile

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(PermissionError, match=r"^save: cannot write .*w.npz.*Permission denied"):
        ta.save({"w": ta.ones(1)}, tmp_path / "w.npz")
    assert not (tmp_path / "w.npz").exists()
