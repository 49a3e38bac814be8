"""PyTorch's checkpoint format both ways: `ta.load` reads torch.save's zip and `ta.save` to a
.pt/.pth/.bin/.ckpt name writes one that ``torch.load(weights_only=True)`` reads.

Without PyTorch: round trips through tinyattn alone, a file whose data.pkl is torch.save's own
bytes (checked in below), the format rule for `save`, and hostile files (a global such as
os.system, a storage whose size disagrees with data.pkl, a huge declared numel, a compressed
bomb, strides past the storage, 100,000 levels of nesting, opcodes and calls outside the
allowlist), each refused by name before memory is taken. With PyTorch: files of every dtype,
views, optimizer state, map_location and mmap against torch.save and torch.load, NumPy arrays,
and a nanoGPT-shaped checkpoint (model, optimizer, iteration, config) moved both ways with the
same outputs.
"""

from __future__ import annotations

import io
import tracemalloc
import types
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

import tinyattn as ta
from tinyattn.backend import torch_format
from tinyattn.serialization import UnsafeGlobalError

DTYPES = ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool"]


def values(dtype: str, shape: tuple = (3, 4)) -> np.ndarray:
    """Distinct values of a dtype (bool alternates), laid out row-major."""
    numbers = np.arange(int(np.prod(shape))).reshape(shape)
    return (numbers % 2 == 1) if dtype == "bool" else (numbers - 3).astype(dtype)


def torch_zip(pickled: bytes, storages: dict[str, bytes], compression=zipfile.ZIP_STORED) -> bytes:
    """A zip laid out as torch.save lays it out, around the given data.pkl and storages."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        archive.writestr("archive/data.pkl", pickled)
        archive.writestr("archive/byteorder", "little")
        for key, data in storages.items():
            archive.writestr(f"archive/data/{key}", data)
        archive.writestr("archive/version", "3\n")
    return buffer.getvalue()


def refusal(data: bytes, error=ValueError, **kwargs) -> str:
    with pytest.raises(error) as info:
        ta.load(io.BytesIO(data), **kwargs)
    assert str(info.value).startswith("load: the file object"), str(info.value)
    return str(info.value)


# ------------------------------------------------------------------ through tinyattn alone
def test_every_dtype_round_trips_through_a_pt_file(tmp_path):
    state = {}
    for dtype in DTYPES:
        base = ta.tensor(values(dtype))
        state[dtype] = base
        state[f"{dtype}.t"] = base.t()  # a view: the same storage, other strides
        state[f"{dtype}.row"] = base[1]  # a view at an offset
        state[f"{dtype}.scalar"] = ta.tensor(values(dtype, ())[()])  # 0-d
    ta.save(state, tmp_path / "all.pt")
    loaded = ta.load(tmp_path / "all.pt")
    assert list(loaded) == list(state)
    for key, tensor in state.items():
        assert loaded[key].dtype == tensor.dtype and loaded[key].shape == tensor.shape, key
        np.testing.assert_array_equal(loaded[key].numpy(), tensor.numpy(), err_msg=key)
    loaded["float32"][1, 2] = 100.0  # views of one storage stay views of one buffer
    assert loaded["float32.t"][2, 1].item() == 100.0 and loaded["float32.row"][2].item() == 100.0
    with zipfile.ZipFile(tmp_path / "all.pt") as archive:  # one storage per base tensor
        assert sum("/data/" in name for name in archive.namelist()) == 2 * len(DTYPES)


def test_a_model_on_any_backend_round_trips(device, tmp_path):
    ta.manual_seed(0)
    model = ta.nn.TransformerBlock(4, 2, 8).to(device)
    ta.save(model.state_dict(), tmp_path / "block.pt")
    loaded = ta.load(tmp_path / "block.pt", map_location=device)
    fresh = ta.nn.TransformerBlock(4, 2, 8).to(device)
    fresh.load_state_dict(loaded)
    x = ta.randn(2, 3, 4, device=device)
    np.testing.assert_array_equal(fresh(x).detach().numpy(), model(x).detach().numpy())
    assert all(tensor.device == model.norm1.weight.device for tensor in loaded.values())


def test_containers_numbers_and_parameters_round_trip(tmp_path):
    weight = ta.nn.Parameter(ta.ones(2, 3))
    ordered = OrderedDict([("b", 2), ("a", 1)])
    ordered._metadata = {"": {"version": 1}}  # what Module.state_dict adds
    value = {
        "model": ordered,
        "w": weight,
        "again": weight,
        "nested": [1, (2.5, "x", None, True), {3: [ta.zeros(1)]}],
        "big": 2**70,
        "set": {1, 2},
        "bytes": b"\x00\xff",
        "complex": 1 + 2j,
        "device": ta.device("cpu"),
    }
    ta.save(value, tmp_path / "mixed.pth")
    loaded = ta.load(tmp_path / "mixed.pth")
    assert type(loaded["model"]) is OrderedDict and list(loaded["model"]) == ["b", "a"]
    assert loaded["model"]._metadata == {"": {"version": 1}}
    assert type(loaded["w"]) is ta.nn.Parameter and loaded["w"].requires_grad
    assert loaded["again"] is loaded["w"]  # one object saved twice loads as one
    assert loaded["nested"][:2] == [1, (2.5, "x", None, True)]
    np.testing.assert_array_equal(loaded["nested"][2][3][0].numpy(), [0.0])
    assert (loaded["big"], loaded["set"], loaded["bytes"]) == (2**70, {1, 2}, b"\x00\xff")
    assert loaded["complex"] == 1 + 2j and loaded["device"] == ta.device("cpu")


def test_an_optimizer_state_dict_round_trips(tmp_path):
    ta.manual_seed(0)
    model = ta.nn.Linear(3, 2)
    optimizer = ta.optim.AdamW(model.parameters(), lr=0.01)
    model(ta.randn(4, 3)).sum().backward()
    optimizer.step()
    ta.save({"optimizer": optimizer.state_dict(), "iter_num": 1}, tmp_path / "opt.ckpt")
    loaded = ta.load(tmp_path / "opt.ckpt")
    again = ta.optim.AdamW(ta.nn.Linear(3, 2).parameters(), lr=0.5)
    again.load_state_dict(loaded["optimizer"])
    assert again.param_groups[0]["lr"] == 0.01 and loaded["iter_num"] == 1
    before, after = optimizer.state_dict()["state"], again.state_dict()["state"]
    for index, state in before.items():
        assert after[index]["step"] == state["step"] == 1
        np.testing.assert_array_equal(after[index]["exp_avg"].numpy(), state["exp_avg"].numpy())


@pytest.mark.parametrize("name", ["arrays.npz", "arrays.pt"])
def test_numpy_values_load_back_as_numpy_values(tmp_path, name):
    value = {"a": np.arange(6.0).reshape(2, 3), "s": np.float32(1.5), "t": ta.ones(2)}
    ta.save(value, tmp_path / name)
    loaded = ta.load(tmp_path / name, weights_only=False)  # a .pt file names NumPy's functions
    assert type(loaded["a"]) is np.ndarray and loaded["a"].dtype == np.float64
    np.testing.assert_array_equal(loaded["a"], value["a"])
    assert type(loaded["s"]) is np.float32 and loaded["s"] == 1.5
    assert type(loaded["t"]) is ta.Tensor


def test_the_name_chooses_the_format(tmp_path):
    state = {"w": ta.ones(2)}
    for name in ("m.pt", "m.pth", "m.pth.tar", "m.bin", "m.ckpt"):
        ta.save(state, tmp_path / name)
        with zipfile.ZipFile(tmp_path / name) as archive:
            assert "archive/data.pkl" in archive.namelist(), name
    ta.save(state, tmp_path / "m.npz")
    with zipfile.ZipFile(tmp_path / "m.npz") as archive:
        assert "__metadata__.npy" in archive.namelist()
    with open(tmp_path / "object.pt", "wb") as file:  # a file object's name counts too
        ta.save(state, file)
    assert zipfile.ZipFile(tmp_path / "object.pt").namelist()[0] == "archive/data.pkl"
    buffer = io.BytesIO()  # no name: tinyattn's .npz checkpoint, as before
    ta.save(state, buffer)
    assert "__metadata__.npy" in zipfile.ZipFile(buffer).namelist()


def test_a_whole_module_is_refused_under_a_pytorch_name(tmp_path):
    model = ta.nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"cannot write the Linear at 'the top' in PyTorch's"):
        ta.save(model, tmp_path / "model.pt")
    with pytest.raises(TypeError, match=r"the Linear at 'layers.0'.*model.state_dict\(\)"):
        ta.save({"layers": [model]}, tmp_path / "model.pt")
    assert not (tmp_path / "model.pt").exists()  # nothing written
    ta.save(model, tmp_path / "model.npz")  # tinyattn's own format takes the whole object
    with ta.serialization.safe_globals([ta.nn.Linear]):
        assert type(ta.load(tmp_path / "model.npz")) is ta.nn.Linear


def test_every_truncation_and_flipped_byte_is_an_error_or_the_same_values(tmp_path):
    """Zip CRCs cover data.pkl and the storages; a flipped byte either fails with a clear
    ValueError or hits bytes nobody reads (timestamps, padding)."""
    path = tmp_path / "good.pt"
    ta.save({"w": ta.arange(6.0).reshape(2, 3), "step": 3}, path)
    data = path.read_bytes()
    outcomes = {"same": 0, "error": 0}
    cases = [data[:length] for length in range(0, len(data), 7)]
    for position in range(0, len(data), 3):
        flipped = bytearray(data)
        flipped[position] ^= 0x10
        cases.append(bytes(flipped))
    for case in cases:
        try:
            loaded = ta.load(io.BytesIO(case))
        except ValueError as exc:
            assert str(exc).startswith("load: the file object"), str(exc)
            outcomes["error"] += 1
            continue
        assert loaded["step"] == 3 and loaded["w"].tolist() == [[0, 1, 2], [3, 4, 5]]
        outcomes["same"] += 1
    assert outcomes["error"] > outcomes["same"] > 0


# torch.save({"weight": w, "weight_t": w.t(), "count": torch.tensor(7),
#             "bias": nn.Parameter(torch.tensor([0.5])), "note": "x"}), w = [[1, 2], [3, 4]]:
# its data.pkl and storages, byte for byte.
TORCH_PICKLE = (
    b"\x80\x02}q\x00(X\x06\x00\x00\x00weightq\x01ctorch._utils\n_rebuild_tensor_v2\nq\x02((X\x07"
    b"\x00\x00\x00storageq\x03ctorch\nFloatStorage\nq\x04X\x01\x00\x00\x000q\x05X\x03\x00\x00\x00"
    b"cpuq\x06K\x04tq\x07QK\x00K\x02K\x02\x86q\x08K\x02K\x01\x86q\t\x89ccollections\nOrderedDict"
    b"\nq\n)Rq\x0btq\x0cRq\rX\x08\x00\x00\x00weight_tq\x0eh\x02((h\x03h\x04h\x05h\x06K\x04tq\x0fQ"
    b"K\x00K\x02K\x02\x86q\x10K\x01K\x02\x86q\x11\x89h\n)Rq\x12tq\x13Rq\x14X\x05\x00\x00\x00count"
    b"q\x15h\x02((h\x03ctorch\nLongStorage\nq\x16X\x01\x00\x00\x001q\x17h\x06K\x01tq\x18QK\x00))"
    b"\x89h\n)Rq\x19tq\x1aRq\x1bX\x04\x00\x00\x00biasq\x1cctorch._utils\n_rebuild_parameter\nq"
    b"\x1dh\x02((h\x03h\x04X\x01\x00\x00\x002q\x1eh\x06K\x01tq\x1fQK\x00K\x01\x85q K\x01\x85q!"
    b"\x89h\n)Rq\"tq#Rq$\x88h\n)Rq%\x87q&Rq'X\x04\x00\x00\x00noteq(X\x01\x00\x00\x00xq)u."
)
TORCH_STORAGES = {
    "0": np.array([1, 2, 3, 4], "<f4").tobytes(),
    "1": np.array([7], "<i8").tobytes(),
    "2": np.array([0.5], "<f4").tobytes(),
}


def test_torch_saves_own_bytes_load_without_pytorch():
    loaded = ta.load(io.BytesIO(torch_zip(TORCH_PICKLE, TORCH_STORAGES)))
    np.testing.assert_array_equal(loaded["weight"].numpy(), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(loaded["weight_t"].numpy(), [[1, 3], [2, 4]])
    assert loaded["count"].shape == () and loaded["count"].item() == 7
    assert ta.backend.dtype_name(loaded["count"].dtype) == "int64"
    assert type(loaded["bias"]) is ta.nn.Parameter and loaded["bias"].requires_grad
    assert loaded["note"] == "x"
    assert np.shares_memory(loaded["weight"].numpy(), loaded["weight_t"].numpy())


def test_map_location_and_a_missing_device(tmp_path):
    def on_cuda(value):  # tensors as a GPU run saves them: their storages say "cuda:0"
        if isinstance(value, ta.Tensor):
            return ta.backend.to_numpy(value.array), False, False, "cuda:0"
        return None

    buffer = io.BytesIO()
    torch_format.save_torch_zip(buffer, {"w": ta.arange(3.0)}, on_cuda, lambda value: None)
    data = buffer.getvalue()
    for location in ("cpu", ta.device("cpu"), {"cuda:0": "cpu"}):
        loaded = ta.load(io.BytesIO(data), map_location=location)
        assert loaded["w"].device == "cpu" and loaded["w"].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(TypeError, match="map_location must be a device"):
        ta.load(io.BytesIO(data), map_location=lambda storage, location: storage)
    if not ta.cuda.is_available():  # PyTorch's rule: the saved device, unless mapped
        with pytest.raises(RuntimeError, match=r"saved on 'cuda:0'.*map_location='cpu'"):
            ta.load(io.BytesIO(data))


def test_mmap_maps_the_storages_copy_on_write(tmp_path):
    path = tmp_path / "mapped.pt"
    ta.save({"w": ta.arange(6.0).reshape(2, 3), "i": ta.arange(4)}, path)
    before = path.read_bytes()
    loaded = ta.load(path, mmap=True)
    assert isinstance(loaded["w"].numpy().base, np.memmap)
    np.testing.assert_array_equal(loaded["w"].numpy(), np.arange(6.0).reshape(2, 3))
    loaded["w"][0, 0] = 50.0  # a private map: the file stays as it was
    assert loaded["w"][0, 0].item() == 50.0 and path.read_bytes() == before
    with zipfile.ZipFile(path) as archive:  # each storage starts on a 64-byte boundary
        for info in archive.infolist():
            extra = int.from_bytes(path.read_bytes()[info.header_offset + 28 :][:2], "little")
            start = info.header_offset + 30 + len(info.filename) + extra
            assert start % 64 == 0, info.filename


def test_unsafe_globals_are_listed_without_loading(tmp_path):
    # {"w": collections.Counter(), "f": tests.test_torch_format.values}: one global outside
    # PyTorch's weights-only set.
    pickled = (
        b"\x80\x02}(X\x01\x00\x00\x00wccollections\nCounter\n)RX\x01\x00\x00\x00f"
        b"c" + __name__.encode() + b"\nvalues\nu."
    )
    data = torch_zip(pickled, {})
    names = ta.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
    assert names == [f"{__name__}.values"]
    message = refusal(data, UnsafeGlobalError)
    assert f"global {__name__}.values" in message and "add_safe_globals" in message
    with ta.serialization.safe_globals([values]):
        assert ta.load(io.BytesIO(data))["f"] is values


# ------------------------------------------------------------------------------ hostile files
def _marker_payload(marker: Path) -> bytes:
    """data.pkl that calls os.system (posix.system on Linux) to create `marker`."""
    command = f"touch {marker}".encode()
    return b"\x80\x02cposix\nsystem\nX" + len(command).to_bytes(4, "little") + command + b"\x85R."


def test_a_global_like_os_system_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "ran.txt"
    for module in (b"posix", b"os", b"nt"):
        data = torch_zip(_marker_payload(marker).replace(b"posix", module), {})
        message = refusal(data, UnsafeGlobalError)
        assert f"the global {module.decode()}.system" in message
        for allowed in ({"weights_only": False},):  # blocked even when every global is allowed
            refusal(data, UnsafeGlobalError, **allowed)
    assert not marker.exists()
    data = torch_zip(b"\x80\x02cbuiltins\neval\nX\x01\x00\x00\x001\x85R.", {})
    assert "the global builtins.eval" in refusal(data, UnsafeGlobalError)


HOSTILE = [
    ("an opcode outside the allowlist (INST)", b"\x80\x02(ibuiltins\nlist\n.",
     "uses the pickle opcode INST (0x69) at byte 3"),
    ("a call of something no global gave", b"\x80\x02X\x01\x00\x00\x00a)R.",
     "calls a str that is not a global it named"),
    ("bytearray of a huge number", b"\x80\x02cbuiltins\nbytearray\nJ\x00\xca\x9a;\x85R.",
     "bytearray of a int, not of bytes"),
    ("a persistent id that is no storage", b"\x80\x02X\x03\x00\x00\x00abc\x85Q.",
     "names a persistent id ('abc',), not a storage"),
    ("a truncated data.pkl", b"\x80\x02X\xff\x00\x00\x00abc",
     "ends at byte 10, inside an opcode that needs 255 bytes from byte 7"),
    ("an unfinished stream", b"\x80\x02]", "ends at byte 3"),
]  # fmt: skip


@pytest.mark.parametrize("name,pickled,fragment", HOSTILE, ids=[case[0] for case in HOSTILE])
def test_hostile_pickles_are_refused_by_name(name, pickled, fragment):
    assert fragment in refusal(torch_zip(pickled, {}))


def tensor_pickle(numel: int, size: tuple, stride: tuple, key: str = "0") -> bytes:
    """data.pkl of one float32 tensor as torch.save writes it, with these numbers."""

    def ints(numbers: tuple) -> bytes:
        return b"(" + b"".join(b"J" + n.to_bytes(4, "little", signed=True) for n in numbers) + b"t"

    storage = (
        b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX"
        + len(key).to_bytes(4, "little")
        + key.encode()
        + b"X\x03\x00\x00\x00cpu\x8a\x08"
        + numel.to_bytes(8, "little", signed=True)
        + b"tQ"
    )
    return (
        b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n("
        + storage
        + b"K\x00"
        + ints(size)
        + ints(stride)
        + b"\x89ccollections\nOrderedDict\n)RtR."
    )


STORAGES = [
    ("a storage smaller than data.pkl says", tensor_pickle(4, (4,), (1,)), {"0": bytes(12)},
     "storage '0' holds 4 float32 elements (16 bytes) by data.pkl, but entry "
     "'archive/data/0' declares 12 bytes"),
    ("a huge declared numel", tensor_pickle(10**15, (4,), (1,)), {"0": bytes(16)},
     "storage '0' holds 1000000000000000 float32 elements (4000000000000000 bytes)"),
    ("a negative numel", tensor_pickle(-1, (4,), (1,)), {"0": bytes(16)},
     "storage '0' declares -1 elements"),
    ("a missing storage", tensor_pickle(4, (4,), (1,), key="7"), {"0": bytes(16)},
     "names storage '7', but there is no entry 'archive/data/7'"),
    ("strides past the storage", tensor_pickle(4, (3, 3), (3, 1)), {"0": bytes(16)},
     "a tensor of size (3, 3), stride (3, 1) and offset 0 reaches element 8 of a storage of 4"),
    ("a negative stride", tensor_pickle(4, (4,), (-1,)), {"0": bytes(16)},
     "a tensor has offset 0, size (4,) and stride (-1,)"),
    ("state given to a tensor", tensor_pickle(4, (4,), (1,))[:-1] + b"}b.", {"0": bytes(16)},
     "gives state to a Tensor that is not a global it named"),
]  # fmt: skip


@pytest.mark.parametrize("name,pickled,storages,fragment", STORAGES, ids=[s[0] for s in STORAGES])
def test_storages_that_disagree_with_data_pkl_are_refused(name, pickled, storages, fragment):
    data = torch_zip(pickled, storages)
    tracemalloc.start()
    try:
        message = refusal(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert fragment in message
    assert peak < 4 << 20  # refused before the declared memory was taken


def test_an_honest_tensor_pickle_loads():
    loaded = ta.load(io.BytesIO(torch_zip(tensor_pickle(4, (2, 2), (1, 2)), {"0": bytes(16)})))
    assert loaded.shape == (2, 2) and loaded.tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_a_compressed_storage_bomb_is_refused_before_it_inflates():
    numel = 18 << 20  # 72 MiB of float32 zeros, which DEFLATE stores in about 70 KiB
    data = torch_zip(tensor_pickle(numel, (numel,), (1,)), {"0": bytes(4 * numel)}, 8)
    tracemalloc.start()
    try:
        message = refusal(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "would inflate to" in message and "entry 'archive/data/0'" in message
    assert peak < 4 << 20
    with pytest.raises(ValueError, match="is compressed: load it without mmap"):
        small = torch_zip(tensor_pickle(4, (4,), (1,)), {"0": bytes(16)}, zipfile.ZIP_DEFLATED)
        path = Path(__import__("tempfile").mkdtemp()) / "small.pt"
        path.write_bytes(small)
        ta.load(path, mmap=True)


def test_100000_levels_of_nesting_load_without_recursion():
    depth = 100_000
    loaded = ta.load(
        io.BytesIO(torch_zip(b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b".", {}))
    )
    for _ in range(depth - 1):
        (loaded,) = loaded
    assert loaded == []


# ------------------------------------------------------------------------- against PyTorch
@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_save_files_of_every_dtype_load(tmp_path, dtype):
    torch = pytest.importorskip("torch")
    base = torch.from_numpy(values(dtype, (4, 5)).copy())
    state = {
        "base": base,
        "view": base[1:, 1:4].t(),  # offset 6, strides (1, 5)
        "expanded": base[0, :1].expand(3, 2),  # stride 0
        "scalar": base[2, 3].clone(),  # 0-d
        "empty": base[:0],
    }
    torch.save(state, tmp_path / "state.pt")
    loaded = ta.load(tmp_path / "state.pt")
    for key, tensor in state.items():
        assert ta.backend.dtype_name(loaded[key].dtype) == dtype, key
        assert loaded[key].shape == tuple(tensor.shape), key
        np.testing.assert_array_equal(loaded[key].numpy(), tensor.numpy(), err_msg=key)
    assert np.shares_memory(loaded["base"].numpy(), loaded["view"].numpy())
    # and back: torch.load reads tinyattn's file, views still sharing one storage
    ta.save(loaded, tmp_path / "again.pt")
    again = torch.load(tmp_path / "again.pt", weights_only=True)
    for key, tensor in state.items():
        assert again[key].dtype == tensor.dtype and torch.equal(again[key], tensor), key
    base_pointer = again["base"].untyped_storage().data_ptr()
    assert again["view"].untyped_storage().data_ptr() == base_pointer
    assert again["view"].stride() == (1, 5) and again["view"].storage_offset() == 6


def test_bfloat16_loads_as_float32_exactly(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    weight = torch.randn(3, 4).to(torch.bfloat16)
    torch.save({"w": weight, "w_t": weight.t()}, tmp_path / "half.pt")
    loaded = ta.load(tmp_path / "half.pt")
    assert ta.backend.dtype_name(loaded["w"].dtype) == "float32"
    np.testing.assert_array_equal(loaded["w"].numpy(), weight.float().numpy())
    np.testing.assert_array_equal(loaded["w_t"].numpy(), weight.float().t().numpy())


@pytest.mark.parametrize("dtype", ["uint16", "complex64"])
def test_dtypes_tinyattn_lacks_are_named(tmp_path, dtype):
    torch = pytest.importorskip("torch")
    torch.save({"odd": torch.zeros(2, dtype=getattr(torch, dtype))}, tmp_path / "odd.pt")
    with pytest.raises(ValueError, match=r"load: .*odd.pt.*(torch.uint16|ComplexFloatStorage)"):
        ta.load(tmp_path / "odd.pt")


def test_torch_containers_and_optimizer_state_load(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.randn(2, 3)).sum().backward()
    optimizer.step()
    value = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "nested": [1, (2.5, "x", None), {"deep": [True, 2**40]}],
        "dtype": torch.float16,
        "device": torch.device("cpu"),
    }
    torch.save(value, tmp_path / "mixed.pt")
    loaded = ta.load(tmp_path / "mixed.pt")
    assert type(loaded["model"]) is OrderedDict and list(loaded["model"]) == list(value["model"])
    assert loaded["model"]._metadata == value["model"]._metadata
    assert loaded["nested"] == [1, (2.5, "x", None), {"deep": [True, 2**40]}]
    assert loaded["dtype"] == ta.float16 and loaded["device"] == ta.device("cpu")
    state = loaded["optimizer"]
    assert state["param_groups"][0]["betas"] == (0.9, 0.999)
    np.testing.assert_array_equal(
        state["state"][0]["exp_avg"].numpy(), optimizer.state_dict()["state"][0]["exp_avg"].numpy()
    )
    ta_model = ta.nn.Sequential(ta.nn.Linear(3, 4), ta.nn.LayerNorm(4))
    ta_model.load_state_dict(loaded["model"])
    ta.optim.AdamW(ta_model.parameters(), lr=0.5).load_state_dict(state)


def test_map_location_and_mmap_match_torch(tmp_path):
    torch = pytest.importorskip("torch")
    weights = {"w": torch.arange(12.0).reshape(3, 4), "i": torch.arange(5)}
    torch.save(weights, tmp_path / "w.pt")
    for kwargs in ({"map_location": "cpu"}, {"map_location": {"cpu": "cpu"}}, {"mmap": True}):
        loaded = ta.load(tmp_path / "w.pt", **kwargs)
        theirs = torch.load(tmp_path / "w.pt", weights_only=True, **kwargs)
        for key in weights:
            np.testing.assert_array_equal(loaded[key].numpy(), theirs[key].numpy())
    ta.save({"w": ta.arange(12.0)}, tmp_path / "ours.pt")  # aligned: PyTorch can map it
    mapped = torch.load(tmp_path / "ours.pt", weights_only=True, mmap=True)
    assert mapped["w"].tolist() == list(range(12))


def test_torch_loads_what_tinyattn_saves_with_weights_only(tmp_path):
    torch = pytest.importorskip("torch")
    weight = ta.nn.Parameter(ta.randn(2, 3))
    value = OrderedDict(
        w=weight,
        w_t=weight.detach().t(),
        step=3,
        nested={"list": [1.5, "x", None, (True, 2**70)], 7: ta.arange(3)},
        set={1, 2},
        bytes=b"\x00\xff",
        complex=1 - 2j,
        device=ta.device("cpu"),
    )
    ta.save(value, tmp_path / "ours.pt")
    theirs = torch.load(tmp_path / "ours.pt", weights_only=True)
    assert type(theirs) is OrderedDict and list(theirs) == list(value)
    assert isinstance(theirs["w"], torch.nn.Parameter) and theirs["w"].requires_grad
    np.testing.assert_array_equal(theirs["w"].detach().numpy(), weight.detach().numpy())
    assert theirs["w_t"].untyped_storage().data_ptr() == theirs["w"].untyped_storage().data_ptr()
    assert theirs["nested"]["list"] == [1.5, "x", None, (True, 2**70)]
    assert theirs["nested"][7].dtype == torch.int64 and theirs["nested"][7].tolist() == [0, 1, 2]
    assert (theirs["set"], theirs["bytes"], theirs["complex"]) == ({1, 2}, b"\x00\xff", 1 - 2j)
    assert theirs["device"] == torch.device("cpu") and theirs["step"] == 3


def test_numpy_arrays_load_back_as_numpy_arrays(tmp_path):
    torch = pytest.importorskip("torch")
    array = np.arange(6, dtype=np.float64).reshape(2, 3)
    ta.save({"a": array, "s": np.float32(1.5)}, tmp_path / "ours.pt")
    torch.save({"a": array, "s": np.float32(1.5)}, tmp_path / "theirs.pt")
    for path in (tmp_path / "ours.pt", tmp_path / "theirs.pt"):
        # as in PyTorch, NumPy's functions are globals a weights_only load must be told about
        with pytest.raises(UnsafeGlobalError, match=r"numpy\._?core\.multiarray\._reconstruct"):
            ta.load(path)
        for loaded in (ta.load(path, weights_only=False), torch.load(path, weights_only=False)):
            assert type(loaded["a"]) is np.ndarray and loaded["a"].dtype == np.float64
            np.testing.assert_array_equal(loaded["a"], array)
            assert loaded["s"] == np.float32(1.5) and loaded["s"].dtype == np.float32
    names = ta.serialization.get_unsafe_globals_in_checkpoint(tmp_path / "ours.pt")
    allowed = [np.ndarray, np.dtype, type(np.dtype(np.float64)), type(np.dtype(np.float32))]
    with ta.serialization.safe_globals(allowed + [_numpy_global(name) for name in names]):
        loaded = ta.load(tmp_path / "ours.pt")
    np.testing.assert_array_equal(loaded["a"], array)


def _numpy_global(name: str):
    module, _, attribute = name.rpartition(".")
    return (getattr(__import__(module, fromlist=[attribute]), attribute), name)


# ------------------------------------------------------------- a nanoGPT checkpoint, both ways
SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "gpt.py"
CONFIG = {"vocab_size": 20, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 16}


def gpt_module(library: str) -> types.ModuleType:
    """examples/gpt.py (minGPT's shape, nanoGPT's names) under tinyattn or, imports swapped,
    under PyTorch."""
    source = SCRIPT.read_text()
    if library == "torch":
        for line in ("import tinyattn as torch", "import tinyattn.nn as nn"):
            source = source.replace(line, line.replace("tinyattn", "torch"))
        source = source.replace("import tinyattn.nn.functional", "import torch.nn.functional")
    module = types.ModuleType(f"gpt_{library}")
    module.__file__ = str(SCRIPT)
    exec(compile(source, str(SCRIPT), "exec"), module.__dict__)  # noqa: S102
    return module


def trained(gpt: types.ModuleType, steps: int):
    """A tied-weights GPT and its AdamW after `steps` steps on fixed batches."""
    lib = gpt.torch
    lib.manual_seed(0)
    model = gpt.GPT(**CONFIG)
    model.lm_head.weight = model.wte.weight  # nanoGPT's weight tying
    optimizer = gpt.optimizer_for(model, 1e-2)
    for step in range(steps):
        idx, targets = batch(lib, step)
        optimizer.zero_grad()
        model(idx, targets)[1].backward()
        optimizer.step()
    return model, optimizer


def batch(lib, step: int):
    rows = np.random.default_rng(step).integers(0, CONFIG["vocab_size"], (3, 9))
    return lib.tensor(rows[:, :-1]), lib.tensor(rows[:, 1:])


def checkpoint(model, optimizer, iter_num: int) -> dict:
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "model_args": dict(CONFIG),
        "iter_num": iter_num,
        "best_val_loss": 2.5,
        "config": {"learning_rate": 1e-2, "dataset": "shakespeare_char", "compile": False},
    }


def logits(model, lib) -> np.ndarray:
    with lib.no_grad():
        return model(batch(lib, 99)[0])[0].detach().numpy()


@pytest.mark.parametrize("source", ["tinyattn", "torch"])
def test_a_nanogpt_checkpoint_moves_both_ways(tmp_path, source):
    pytest.importorskip("torch")
    gpts = {"tinyattn": gpt_module("tinyattn"), "torch": gpt_module("torch")}
    target = "torch" if source == "tinyattn" else "tinyattn"
    model, optimizer = trained(gpts[source], 3)
    saver = gpts[source].torch
    saver.save(checkpoint(model, optimizer, 3), tmp_path / "ckpt.pt")

    loader = gpts[target].torch
    loaded = (
        loader.load(tmp_path / "ckpt.pt", map_location="cpu", weights_only=True)
        if target == "torch"
        else loader.load(tmp_path / "ckpt.pt", map_location="cpu")
    )
    assert loaded["iter_num"] == 3 and loaded["model_args"] == CONFIG
    assert loaded["config"]["dataset"] == "shakespeare_char"
    other = gpts[target].GPT(**loaded["model_args"])
    other.lm_head.weight = other.wte.weight
    other.load_state_dict(loaded["model"])
    np.testing.assert_allclose(logits(other, loader), logits(model, saver), rtol=0, atol=1e-6)
    # the optimizer resumes where it stopped: one more step agrees in both libraries
    other_optimizer = gpts[target].optimizer_for(other, 1e-2)
    other_optimizer.load_state_dict(loaded["optimizer"])
    for mine, lib, opt in ((model, saver, optimizer), (other, loader, other_optimizer)):
        idx, targets = batch(lib, 3)
        opt.zero_grad()
        mine(idx, targets)[1].backward()
        opt.step()
    np.testing.assert_allclose(logits(other, loader), logits(model, saver), rtol=0, atol=1e-6)


def test_a_deep_value_in_an_error_message_is_cut_short():
    """A refusal shows a hostile value by a depth-limited repr: no RecursionError."""
    deep = b"]" * 100_000 + b"a" * 99_999  # [[[...]]]
    pickled = b"\x80\x02ccollections\nOrderedDict\n)R" + deep + b"b."  # BUILD with a list
    assert "BUILD of an OrderedDict with [[[[[[[...]]]]]]]" in refusal(torch_zip(pickled, {}))
