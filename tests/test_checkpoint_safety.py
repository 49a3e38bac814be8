"""Nothing is lost: failing saves keep the old checkpoint, loads never unpickle, loads of broken
files fail clearly, load_state_dict is all or nothing, and training resumes bit for bit.

tests/test_serialization.py already covers the plain round trips, one failing save (a writer
that raises half-way), an unsavable value, and one truncated, text, foreign and pickled file
each; this file adds the other ways a save can fail (a full disk in write and in fsync, a failed
rename, Ctrl-C, an error moving a tensor to the host), sweeps of truncations and flipped bytes,
pickle payloads that must never run, and the 100 + 100 == 200 steps resume for SGD and Adam.
"""

from __future__ import annotations

import errno
import os
import pickle
import tempfile
import zipfile

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import backend, nn, optim


def _touch(path: str) -> None:
    """What a malicious pickle would run: create a marker file."""
    with open(path, "w") as file:
        file.write("unpickled!")


class Payload:
    """Unpickling this calls _touch(marker): proof that a load ran pickle."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (_touch, (self.marker,))


def checkpoint() -> dict:
    return {"w": ta.arange(40, dtype="float32"), "nested": {"b": ta.ones(3, dtype="float64")}}


# ---------------------------------------------------------------------- saves that fail midway
class _FullDisk:
    """A binary file whose write() fails with ENOSPC once `budget` bytes have been written."""

    def __init__(self, file, budget: int) -> None:
        self._file, self._budget = file, budget

    def write(self, data) -> int:
        if len(data) > self._budget:
            self._file.write(bytes(data[: self._budget]))
            self._budget = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self._budget -= len(data)
        return self._file.write(data)

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()


def full_disk_in_write(monkeypatch):
    real = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, mode: _FullDisk(real(fd, mode), budget=300))
    return OSError, "No space left"


def full_disk_in_fsync(monkeypatch):
    def fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
    return OSError, "No space left"


def rename_fails(monkeypatch):
    def replace(source, target):
        raise PermissionError(errno.EACCES, "Permission denied", target)

    monkeypatch.setattr(os, "replace", replace)
    return PermissionError, "Permission denied"


def interrupted(monkeypatch):
    calls = []
    real = backend.to_numpy

    def to_numpy(array):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C between two tensors
        return real(array)

    monkeypatch.setattr(backend, "to_numpy", to_numpy)
    return KeyboardInterrupt, None


def transfer_fails(monkeypatch):
    real = backend.to_numpy

    def to_numpy(array):
        if array.shape == (3,):
            raise RuntimeError("device lost during the copy to the host")
        return real(array)

    monkeypatch.setattr(backend, "to_numpy", to_numpy)
    return RuntimeError, "device lost"


FAILURES = [
    ("disk full in write", full_disk_in_write),
    ("disk full in fsync", full_disk_in_fsync),
    ("rename fails", rename_fails),
    ("interrupted", interrupted),
    ("device copy fails", transfer_fails),
]


@pytest.mark.parametrize("name,inject", FAILURES, ids=[f[0] for f in FAILURES])
def test_a_failed_save_leaves_the_old_checkpoint_intact(tmp_path, monkeypatch, name, inject):
    path = tmp_path / "model.npz"
    ta.save({"w": ta.ones(40)}, path)
    old_bytes = path.read_bytes()
    error, fragment = inject(monkeypatch)
    with pytest.raises(error, match=fragment):
        ta.save(checkpoint(), path)
    monkeypatch.undo()
    assert path.read_bytes() == old_bytes  # byte for byte
    assert os.listdir(tmp_path) == ["model.npz"]  # the temporary file is gone
    np.testing.assert_array_equal(ta.load(path)["w"].numpy(), np.ones(40))
    ta.save(checkpoint(), path)  # and the next save works
    np.testing.assert_array_equal(ta.load(path)["w"].numpy(), np.arange(40))


def test_an_unsupported_value_fails_before_any_file_is_touched(tmp_path, monkeypatch):
    path = tmp_path / "model.npz"
    ta.save({"w": ta.ones(2)}, path)
    before = (path.read_bytes(), os.stat(path).st_mtime_ns)

    def no_files(*args, **kwargs):
        raise AssertionError("save created a file before checking every value")

    monkeypatch.setattr(tempfile, "mkstemp", no_files)
    value = {"a": ta.ones(2), "b": {"c": [ta.zeros(1), ta.ones(1)], "d": (1, 2.5, iter([]))}}
    with pytest.raises(TypeError, match=r"save: cannot save a list_iterator at 'b\.d\.2'"):
        ta.save(value, path)
    looped = [ta.ones(1)]
    looped.append(looped)
    with pytest.raises(TypeError, match=r"save: the list at 'b\.1' contains itself"):
        ta.save({"a": ta.ones(1), "b": looped}, path)
    assert (path.read_bytes(), os.stat(path).st_mtime_ns) == before
    assert os.listdir(tmp_path) == ["model.npz"]


def test_save_replaces_the_file_in_one_step(tmp_path):
    """The new file is written beside the old one and renamed over it: a reader holding the old
    file keeps reading a complete checkpoint."""
    path = tmp_path / "model.npz"
    ta.save({"w": ta.ones(40)}, path)
    with open(path, "rb") as reader:  # opened before the second save
        ta.save({"w": ta.zeros(40)}, path)
        assert zipfile.is_zipfile(reader)
    np.testing.assert_array_equal(ta.load(path)["w"].numpy(), 0.0)
    assert os.listdir(tmp_path) == ["model.npz"]


# --------------------------------------------------------------------- loads never unpickle
def test_no_pickle_payload_ever_runs(tmp_path):
    marker = tmp_path / "unpickled.txt"
    payload = Payload(str(marker))
    # 1. A real checkpoint with an extra object array, written by NumPy with allow_pickle=True.
    inside = tmp_path / "inside.npz"
    ta.save(checkpoint(), inside)
    with zipfile.ZipFile(inside, "a") as archive, archive.open("evil.npy", "w") as member:
        np.lib.format.write_array(member, np.array([payload], dtype=object), allow_pickle=True)
    # 2. np.savez of an object array; 3. np.save of one; 4. a bare pickle named .npz;
    # 5. a pickle stored as a member of a real checkpoint.
    savez, npy, bare, member = (tmp_path / n for n in ("savez.npz", "a.npy", "b.npz", "c.npz"))
    np.savez(savez, w=np.array([payload], dtype=object))
    np.save(npy, np.array([payload], dtype=object), allow_pickle=True)
    bare.write_bytes(pickle.dumps({"w": payload}))
    ta.save(checkpoint(), member)
    with zipfile.ZipFile(member, "a") as archive:
        archive.writestr("raw.npy", pickle.dumps(payload))
    expected = {
        inside: "entry 'evil' holds pickled Python objects",
        savez: "entry 'w' holds pickled Python objects",
        npy: "it holds a single .npy array",  # refused before its contents are read
        bare: "not an .npz archive",
        member: "entry 'raw' is not a .npy array",
    }
    for path, fragment in expected.items():
        with pytest.raises(ValueError) as info:
            ta.load(path)
        assert str(info.value).startswith(f"load: {str(path)!r} is not a readable")
        assert fragment in str(info.value)
    assert not marker.exists()  # nothing was unpickled
    pickle.loads(pickle.dumps(payload))  # the payload is live: unpickling does run it
    assert marker.exists()


def _good_file(tmp_path):
    path = tmp_path / "good.npz"
    ta.save({**checkpoint(), "epoch": 3}, path)
    return path, path.read_bytes()


def _loads_same_or_fails_clearly(path) -> str:
    try:
        loaded = ta.load(path)
    except ValueError as error:
        assert str(error).startswith("load: "), str(error)
        return "error"
    np.testing.assert_array_equal(loaded["w"].numpy(), np.arange(40))
    np.testing.assert_array_equal(loaded["nested"]["b"].numpy(), np.ones(3))
    assert loaded["epoch"] == 3 and list(loaded) == ["w", "nested", "epoch"]
    return "same"


def test_every_truncation_is_a_clear_error(tmp_path):
    path, data = _good_file(tmp_path)
    cut = tmp_path / "cut.npz"
    for length in range(0, len(data), 5):
        cut.write_bytes(data[:length])
        assert _loads_same_or_fails_clearly(cut) == "error", length


def test_flipped_bytes_never_load_different_values(tmp_path):
    """Zip CRCs cover the arrays; the manifest is checked node by node. A flipped byte either
    fails with a clear ValueError or hits bytes nobody reads (timestamps, version fields)."""
    path, data = _good_file(tmp_path)
    corrupt = tmp_path / "corrupt.npz"
    outcomes = {"same": 0, "error": 0}
    for position in range(0, len(data), 4):
        for mask in (0x01, 0x80):
            flipped = bytearray(data)
            flipped[position] ^= mask
            corrupt.write_bytes(bytes(flipped))
            outcomes[_loads_same_or_fails_clearly(corrupt)] += 1
    assert outcomes["error"] > 2 * outcomes["same"]  # most bytes matter


FOREIGN = [
    ("empty", b"", "not an .npz archive (it starts with b''"),
    ("png", b"\x89PNG\r\n\x1a\n" + bytes(40), "not an .npz archive"),
    ("json", b'{"w": [1, 2, 3]}', "not an .npz archive"),
]


@pytest.mark.parametrize("name,content,fragment", FOREIGN, ids=[f[0] for f in FOREIGN])
def test_foreign_files_are_clear_errors(tmp_path, name, content, fragment):
    path = tmp_path / f"{name}.npz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="^load: ") as info:
        ta.load(path)
    assert fragment in str(info.value)


def test_foreign_archives_are_clear_errors(tmp_path):
    plain = tmp_path / "plain.zip"
    with zipfile.ZipFile(plain, "w") as archive:
        archive.writestr("notes.txt", "hello")
    with pytest.raises(ValueError, match="entry 'notes.txt' is not a .npy array"):
        ta.load(plain)
    directory = tmp_path / "folder.npz"
    directory.mkdir()
    with pytest.raises(ValueError, match="not a complete .npz archive.*IsADirectoryError"):
        ta.load(directory)


def _with_manifest(path, manifest: bytes) -> None:
    with zipfile.ZipFile(path, "w") as archive, archive.open("__metadata__.npy", "w") as member:
        np.lib.format.write_array(member, np.frombuffer(manifest, dtype=np.uint8))


MANIFESTS = [
    ("not JSON", b"{not json", "corrupt manifest"),
    ("another format", b'{"format": "other", "version": 1}', "is not a tinyattn checkpoint"),
    ("a list for a dict", b'{"format": "tinyattn-checkpoint", "version": 1, "tree": '
     b'{"dict": 5}}', "malformed manifest node {'dict': 5}"),
    ("a missing entry", b'{"format": "tinyattn-checkpoint", "version": 1, "tree": '
     b'{"tensor": "w"}}', "names entry 'w', which is missing"),
    ("a list as a name", b'{"format": "tinyattn-checkpoint", "version": 1, "tree": '
     b'{"tensor": ["w"]}}', "malformed manifest node"),
]  # fmt: skip


@pytest.mark.parametrize("name,manifest,fragment", MANIFESTS, ids=[m[0] for m in MANIFESTS])
def test_damaged_manifests_are_clear_errors(tmp_path, name, manifest, fragment):
    path = tmp_path / "damaged.npz"
    _with_manifest(path, manifest)
    with pytest.raises(ValueError, match="^load: ") as info:
        ta.load(path)
    assert fragment in str(info.value)


# ------------------------------------------------------------ load_state_dict: all or nothing
def _snapshot(module):
    return [(name, p, p.array, p.detach().numpy()) for name, p in module.named_parameters()]


def _unchanged(module, snapshot) -> None:
    for (name, p, data, values), (name_now, p_now) in zip(
        snapshot, module.named_parameters(), strict=True
    ):
        assert name == name_now and p is p_now and p.array is data, name  # same objects
        np.testing.assert_array_equal(p.detach().numpy(), values, err_msg=name)


def _edits():
    return [
        ("last key mis-shaped", lambda s: s.update({"norm2.bias": ta.zeros(5)})),
        ("last key unconvertible", lambda s: s.update({"norm2.bias": "zeros"})),
        ("last key ragged", lambda s: s.update({"norm2.bias": [[1.0], [1.0, 2.0]]})),
        ("a deep key missing", lambda s: s.pop("attn.v_proj.bias")),
        ("an unexpected key", lambda s: s.update({"attn.extra": ta.ones(1)})),
    ]


@pytest.mark.parametrize("name,edit", _edits(), ids=[e[0] for e in _edits()])
def test_load_state_dict_changes_nothing_when_it_raises(device, name, edit):
    ta.manual_seed(0)
    block = nn.TransformerBlock(4, 2, 8).to(device)
    ta.manual_seed(1)
    state = {k: v + 1.0 for k, v in nn.TransformerBlock(4, 2, 8).to(device).state_dict().items()}
    edit(state)  # every other key is good and would change the block
    snapshot = _snapshot(block)
    with pytest.raises(RuntimeError, match="nothing was changed"):
        block.load_state_dict(state)
    _unchanged(block, snapshot)


def test_optimizer_load_changes_nothing_when_a_later_entry_is_bad(device):
    params = [nn.Parameter(ta.zeros(n, dtype="float64", device=device)) for n in (2, 3)]
    opt = optim.Adam(params, lr=0.1)
    for p in params:
        p.grad = ta.ones(*p.shape, dtype="float64", device=device)
    opt.step()
    state = opt.state_dict()
    state["param_groups"][0]["lr"] = 0.5  # a good change
    state["state"][1]["exp_avg"] = ta.zeros(4)  # the second parameter's state is bad
    before_state, before_groups = opt.state, opt.param_groups
    with pytest.raises(ValueError, match="parameter 1 has shape"):
        opt.load_state_dict(state)
    assert opt.state is before_state and opt.param_groups is before_groups
    assert opt.param_groups[0]["lr"] == 0.1


# ----------------------------------------------------------- resume: 100 + 100 == 200 steps
VOCAB, WIDTH = 7, 8


class TinyLanguageModel(nn.Module):
    """Embedding, causal self-attention with a residual and LayerNorm, unembedding."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.attn = nn.MultiHeadAttention(WIDTH, 2)
        self.norm = nn.LayerNorm(WIDTH)
        self.out = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens)  # (B, T) -> (B, T, C)
        x = self.norm(x + self.attn(x, is_causal=True))
        return self.out(x)  # (B, T, C) -> (B, T, V)


def train(model, opt, steps: range) -> None:
    for step in steps:  # the batch depends on the step only, so a resumed run sees the same data
        sequence = np.random.default_rng(step).integers(0, VOCAB, size=(4, 6))
        logits = model(ta.tensor(sequence[:, :-1]))
        # (B, T, V) and (B, T) as rows: (B * T, V) and (B * T,)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), ta.tensor(sequence[:, 1:]).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()


OPTIMIZERS = [
    ("sgd momentum", lambda ps, lr: optim.SGD(ps, lr=lr, momentum=0.9, nesterov=True,
                                              weight_decay=1e-3)),
    ("adam", lambda ps, lr: optim.Adam(ps, lr=lr, weight_decay=1e-3)),
]  # fmt: skip


@pytest.mark.parametrize("name,make", OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_resuming_from_a_checkpoint_is_bit_for_bit(tmp_path, name, make):
    ta.manual_seed(0)
    straight = TinyLanguageModel()
    straight_opt = make(straight.parameters(), 0.05)
    train(straight, straight_opt, range(200))

    ta.manual_seed(0)
    first = TinyLanguageModel()
    first_opt = make(first.parameters(), 0.05)
    train(first, first_opt, range(100))
    path = tmp_path / "resume.npz"
    ta.save({"model": first.state_dict(), "optim": first_opt.state_dict(), "step": 100}, path)
    del first, first_opt

    ta.manual_seed(99)  # fresh objects with other weights and another learning rate
    resumed = TinyLanguageModel()
    resumed_opt = make(resumed.parameters(), 0.5)
    loaded = ta.load(path)
    resumed.load_state_dict(loaded["model"])
    resumed_opt.load_state_dict(loaded["optim"])
    assert resumed_opt.param_groups[0]["lr"] == 0.05
    train(resumed, resumed_opt, range(loaded["step"], 200))

    for (key, a), (_, b) in zip(
        straight.state_dict().items(), resumed.state_dict().items(), strict=True
    ):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=key)  # bit for bit
    for p, q in zip(straight.parameters(), resumed.parameters(), strict=True):
        for key, value in straight_opt.state[p].items():
            other = resumed_opt.state[q][key]
            if key == "step":
                assert value == other == 200
            else:
                assert np.array_equal(ta.Tensor(value).numpy(), ta.Tensor(other).numpy()), key


def test_a_truncated_resume_file_does_not_touch_the_objects(tmp_path):
    ta.manual_seed(0)
    model = TinyLanguageModel()
    opt = optim.Adam(model.parameters(), lr=0.01)
    train(model, opt, range(3))
    path = tmp_path / "resume.npz"
    ta.save({"model": model.state_dict(), "optim": opt.state_dict()}, path)
    path.write_bytes(path.read_bytes()[:-100])
    snapshot = _snapshot(model)
    with pytest.raises(ValueError, match="^load: .*not a complete .npz archive"):
        ta.load(path)
    _unchanged(model, snapshot)
