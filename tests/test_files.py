"""Saves respect the file system, and weights move to PyTorch and back through safetensors.

A save through a symbolic link updates the link's target; special files are refused; a new file
gets the umask's permissions and an existing one keeps its own; 0-d tensors keep their shape; a
header that claims a huge array is a clear ValueError. A state dict written by tinyattn loads
with ``safetensors.torch.load_file`` into the same PyTorch module tree with equal outputs, and
the reverse.
"""

from __future__ import annotations

import os
import stat
import struct
import zipfile

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import nn


def _weights() -> dict:
    return {"w": ta.arange(6, dtype="float32").reshape(2, 3), "b": ta.ones(3, dtype="float64")}


# ------------------------------------------------------------------------------ the file system
def test_a_save_through_a_symlink_updates_its_target(tmp_path):
    (tmp_path / "run7").mkdir()
    target = tmp_path / "run7" / "ckpt.npz"
    ta.save({"step": 1, "w": ta.zeros(2)}, target)
    link = tmp_path / "latest.npz"
    link.symlink_to(target)
    ta.save({"step": 2, "w": ta.ones(2)}, link)
    assert link.is_symlink(), "the link itself must stay a link"
    assert os.path.realpath(link) == str(target)
    assert ta.load(target)["step"] == 2
    np.testing.assert_array_equal(ta.load(link)["w"].numpy(), np.ones(2, np.float32))


def test_a_save_through_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "latest.safetensors"
    link.symlink_to(tmp_path / "new.safetensors")
    ta.save(_weights(), link)
    assert link.is_symlink() and (tmp_path / "new.safetensors").is_file()


@pytest.mark.parametrize("kind", ["directory", "fifo", "device"])
def test_special_files_are_refused_not_replaced(tmp_path, kind):
    if kind == "directory":
        path = tmp_path / "a_directory"
        path.mkdir()
    elif kind == "fifo":
        path = tmp_path / "a_fifo"
        os.mkfifo(path)
    else:
        path = "/dev/null"
        if not os.path.exists(path):
            pytest.skip("no /dev/null here")
    with pytest.raises(ValueError, match="refusing to replace"):
        ta.save(_weights(), path)
    if kind == "fifo":
        assert stat.S_ISFIFO(os.stat(path).st_mode)
    if kind == "device":
        assert stat.S_ISCHR(os.stat(path).st_mode)


def test_a_symlink_to_a_special_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link.npz").symlink_to(tmp_path / "fifo")
    with pytest.raises(ValueError, match="refusing to replace"):
        ta.save(_weights(), tmp_path / "link.npz")


def test_new_files_honour_the_umask_and_old_files_keep_their_mode(tmp_path):
    previous = os.umask(0o027)
    try:
        ta.save(_weights(), tmp_path / "new.npz")
        ta.save(_weights(), tmp_path / "new.safetensors")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(tmp_path / "new.npz").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(tmp_path / "new.safetensors").st_mode) == 0o640
    os.chmod(tmp_path / "new.npz", 0o604)
    ta.save(_weights(), tmp_path / "new.npz")
    assert stat.S_IMODE(os.stat(tmp_path / "new.npz").st_mode) == 0o604


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_zero_d_tensors_keep_their_shape(tmp_path, device, suffix):
    path = tmp_path / f"scalar{suffix}"
    ta.save({"s": ta.tensor(3.5, device=device)}, path)
    back = ta.load(path, device=device)["s"]
    assert (
        back.shape == ()
        and back.item() == 3.5
        and back.device == ta.tensor(0, device=device).device
    )


def test_a_header_claiming_a_huge_array_is_a_value_error(tmp_path):
    path = tmp_path / "huge.npz"
    ta.save({"w": ta.zeros(4)}, path)
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    header = members["w.npy"]
    members["w.npy"] = header.replace(b"(4,)", b"(1000000000000,)".ljust(4))
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    with pytest.raises(ValueError, match="claims shape"):
        ta.load(path)


# --------------------------------------------------------------------------------- safetensors
def test_safetensors_round_trip_keeps_names_dtypes_and_values(tmp_path, device):
    weights = {k: v.to(device) for k, v in _weights().items()}
    ta.save(weights, tmp_path / "w.safetensors")
    back = ta.load(tmp_path / "w.safetensors", device=device)
    assert set(back) == {"w", "b"}
    for name, value in weights.items():
        assert back[name].dtype == value.dtype and back[name].shape == value.shape
        np.testing.assert_array_equal(back[name].numpy(), value.numpy())


def test_safetensors_refuses_nested_objects_before_touching_the_file(tmp_path):
    path = tmp_path / "opt.safetensors"
    with pytest.raises(TypeError, match="npz"):
        ta.save({"state": {"0": ta.zeros(2)}}, path)
    with pytest.raises(TypeError, match="flat"):
        ta.save([ta.zeros(2)], path)
    assert not path.exists()


def test_safetensors_content_is_recognised_without_the_suffix(tmp_path):
    ta.save(_weights(), tmp_path / "w.safetensors")
    os.rename(tmp_path / "w.safetensors", tmp_path / "weights.bin")
    assert set(ta.load(tmp_path / "weights.bin")) == {"w", "b"}


def test_a_damaged_safetensors_file_is_a_value_error(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", 10**9) + b"{")
    with pytest.raises(ValueError, match="bad.safetensors"):
        ta.load(path)


class _Net(nn.Module):
    """The same module tree as _torch_net below, so the state-dict keys agree."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 11)

    def forward(self, tokens):
        return self.head(self.norm(self.proj(self.embed(tokens)).relu()))


def _torch_net(torch):
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(11, 8)
            self.proj = torch.nn.Linear(8, 8)
            self.norm = torch.nn.LayerNorm(8)
            self.head = torch.nn.Linear(8, 11)

        def forward(self, tokens):
            return self.head(self.norm(self.proj(self.embed(tokens)).relu()))

    return Net()


def test_weights_move_from_tinyattn_to_pytorch_and_back(tmp_path):
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    ta.manual_seed(0)
    model = _Net()
    tokens = np.array([[1, 4, 9], [0, 2, 10]])
    expected = model(ta.tensor(tokens)).detach().numpy().copy()

    ta.save(model.state_dict(), tmp_path / "from_ta.safetensors")
    theirs = _torch_net(torch)
    theirs.load_state_dict(safetensors_torch.load_file(str(tmp_path / "from_ta.safetensors")))
    with torch.no_grad():
        got = theirs(torch.from_numpy(tokens)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)

    torch.manual_seed(1)
    theirs = _torch_net(torch)
    safetensors_torch.save_file(theirs.state_dict(), str(tmp_path / "from_torch.safetensors"))
    model.load_state_dict(ta.load(tmp_path / "from_torch.safetensors"))
    with torch.no_grad():
        expected = theirs(torch.from_numpy(tokens)).numpy()
    np.testing.assert_allclose(
        model(ta.tensor(tokens)).detach().numpy(), expected, rtol=1e-6, atol=1e-6
    )
