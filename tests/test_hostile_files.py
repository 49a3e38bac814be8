"""Files built to hurt the loader are refused before they can: each case is a hostile file made
here, and the refusal names what is wrong with the numbers that show it.

An .npz entry may inflate only to the size its .npy header gives, and an archive only to 100
times its size beyond 64 MiB (a real zip bomb is refused without the memory it asks for); a
safetensors header's offsets must tile the data exactly as the dtypes and shapes say; a manifest
may nest 256 levels (100,000 is refused by name, not with a RecursionError); an object may only
get its own class's slots (``__class__`` is refused); a ``torch.save`` zip loads by its content
(its hostile forms are in test_torch_format.py), while the legacy format and a bare pickle are
named, with how to re-save them.
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import tracemalloc
import zipfile
import zlib

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import serialization
from tinyattn.backend import files
from tinyattn.serialization.tree import MAX_DEPTH

ONE_TENSOR = {"format": "tinyattn-checkpoint", "version": 1, "tree": {"tensor": "w"}}


# ------------------------------------------------------------------ building hostile archives
def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def archive(entries: dict[str, bytes], compression: int = zipfile.ZIP_STORED, level=None) -> bytes:
    """A zip of these members (no zip64 extras, so the size fields sit where patch_sizes looks)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression, compresslevel=level) as zipped:
        for name, data in entries.items():
            zipped.writestr(name, data)
    return buffer.getvalue()


def checkpoint_entries(manifest: dict = ONE_TENSOR, **arrays: np.ndarray) -> dict[str, bytes]:
    metadata = np.frombuffer(json.dumps(manifest).encode(), np.uint8)
    entries = {"__metadata__.npy": npy_bytes(metadata)}
    entries.update({f"{name}.npy": npy_bytes(array) for name, array in arrays.items()})
    return entries


def patch_sizes(data: bytes, name: str, file_size: int, crc: int | None = None) -> bytes:
    """The archive with the uncompressed size (and CRC) that `name` declares rewritten, in its
    local header and its central directory record alike."""
    patched = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as zipped:
        local = zipped.getinfo(name).header_offset
    central = central_record(data, name)
    struct.pack_into("<I", patched, local + 22, file_size)
    struct.pack_into("<I", patched, central + 24, file_size)
    if crc is not None:
        struct.pack_into("<I", patched, local + 14, crc)
        struct.pack_into("<I", patched, central + 16, crc)
    return bytes(patched)


def central_record(data: bytes, name: str) -> int:
    """Where `name`'s record starts in the central directory (the end record gives its offset)."""
    position = struct.unpack_from("<L", data, len(data) - 6)[0]
    while data[position + 46 : position + 46 + len(name)] != name.encode():
        position = data.index(b"PK\x01\x02", position + 4)
    return position


def with_overlapping_copies(data: bytes, name: str, copies: int) -> bytes:
    """The archive with `copies` more central directory records that all point at the bytes of
    `name` (renamed k1.npy, k2.npy, ...): many entries, one compressed stream."""
    count, size, offset = struct.unpack_from("<HLL", data, len(data) - 12)
    directory = data[offset : offset + size]
    start = central_record(data, name)
    record = bytearray(data[start : start + 46])  # the fixed part; here no extra field follows
    for n in range(1, copies + 1):
        copy = f"k{n}.npy".encode()
        struct.pack_into("<H", record, 28, len(copy))  # the name's length
        directory += bytes(record) + copy
    end = struct.pack(
        "<4s4H2LH", b"PK\x05\x06", 0, 0, count + copies, count + copies, len(directory), offset, 0
    )
    return data[:offset] + directory + end


def refusal(source, match: str = "") -> str:
    """The message `ta.load(source)` refuses with (a ValueError that starts with "load: ")."""
    with pytest.raises(ValueError, match="^load: ") as info:
        ta.load(io.BytesIO(source) if isinstance(source, bytes) else source)
    assert match in str(info.value), str(info.value)
    return str(info.value)


def peak_bytes(call) -> int:
    """The most memory Python and NumPy held at once while `call()` ran."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --------------------------------------------------------------------------- .npz: zip bombs
def test_a_real_zip_bomb_is_refused_before_it_inflates(tmp_path):
    """72 MiB of zeros in 0.3 MiB (DEFLATE level 1, about 230 times): past the 64 MiB that load
    always allows, and more than 100 times the file."""
    bomb = archive(
        checkpoint_entries(w=np.zeros(18 << 20, np.float32)), zipfile.ZIP_DEFLATED, level=1
    )
    path = tmp_path / "bomb.npz"
    path.write_bytes(bomb)
    message = ""

    def load():
        nonlocal message
        message = refusal(path, "its entries would inflate to 75497")

    assert peak_bytes(load) < 4 << 20  # nothing close to the 72 MiB was ever taken
    assert f"times the {len(bomb)} bytes of the file" in message
    assert "entry 'w'" in message and "at most 100 times its size" in message


def test_compressed_checkpoints_with_zero_buffers_still_load(monkeypatch):
    """Real weights barely compress: a checkpoint of them with an all-zero buffer is far below
    the bound; and below 64 MiB an archive of nothing but zeros loads too."""
    monkeypatch.setattr(files, "FREE_INFLATION", 1 << 20)  # so that a small file is judged
    weights = np.random.default_rng(0).standard_normal(1 << 19).astype(np.float32)  # 2 MiB
    manifest = {
        "format": "tinyattn-checkpoint",
        "version": 1,
        "tree": {"dict": [["w", {"tensor": "w"}], ["zeros", {"tensor": "zeros"}]]},
    }
    data = archive(
        checkpoint_entries(manifest, w=weights, zeros=np.zeros(1 << 20, np.float32)),
        zipfile.ZIP_DEFLATED,
    )
    loaded = ta.load(io.BytesIO(data))
    np.testing.assert_array_equal(loaded["w"].numpy(), weights)
    assert not loaded["zeros"].numpy().any()
    monkeypatch.undo()
    zeros = archive(checkpoint_entries(w=np.zeros(4 << 20, np.float32)), zipfile.ZIP_DEFLATED)
    assert len(zeros) * 500 < 16 << 20  # about 1000 times: DEFLATE's ceiling
    assert ta.load(io.BytesIO(zeros)).shape == (4 << 20,)


def test_a_declared_size_that_disagrees_with_the_header_is_refused():
    honest = archive(checkpoint_entries(w=np.ones(1000, np.float32)), zipfile.ZIP_DEFLATED)
    header = len(npy_bytes(np.ones(1000, np.float32))) - 4000
    for declared in (2 * (header + 4000), header + 3999):
        refusal(
            patch_sizes(honest, "w.npy", declared),
            f"entry 'w' claims shape (1000,) of float32 ({header + 4000} bytes with its header) "
            f"but the zip declares {declared} bytes",
        )


def test_a_stored_entry_must_hold_what_it_declares():
    honest = archive(checkpoint_entries(w=np.ones(10, np.float32)))
    size = len(npy_bytes(np.ones(10, np.float32)))
    refusal(
        patch_sizes(honest, "w.npy", 1 << 30),
        f"entry 'w' is stored uncompressed in {size} bytes but declares {1 << 30}",
    )


def test_a_stream_longer_than_its_declared_size_is_never_inflated_past_it():
    """The header and the zip promise 1000 floats; the stream goes on with 64 MiB of zeros. The
    load stops at the promise: it returns the promised floats and never inflates the rest."""
    promised = npy_bytes(np.arange(1000, dtype=np.float32))
    long = archive(
        checkpoint_entries() | {"w.npy": promised + bytes(64 << 20)}, zipfile.ZIP_DEFLATED, 1
    )
    short = patch_sizes(long, "w.npy", len(promised), crc=zlib.crc32(promised))
    loaded = []
    assert peak_bytes(lambda: loaded.append(ta.load(io.BytesIO(short)))) < 2 << 20
    np.testing.assert_array_equal(loaded[0].numpy(), np.arange(1000))


def test_entries_that_share_one_compressed_stream_are_refused():
    kernel = archive(checkpoint_entries(w=np.zeros(1 << 20, np.float32)), zipfile.ZIP_DEFLATED)
    overlapping = with_overlapping_copies(kernel, "w.npy", copies=20)
    with zipfile.ZipFile(io.BytesIO(overlapping)) as zipped:
        assert len(zipped.infolist()) == 22  # the manifest, w and its 20 copies
    refusal(overlapping, "compressed sizes add up to")
    refusal(overlapping, f"more than the {len(overlapping)} bytes of the file")


def test_an_entry_name_given_twice_is_refused():
    entries = checkpoint_entries(w=np.ones(2, np.float32))
    data = archive(entries | {"w": npy_bytes(np.zeros(2, np.float32))})
    refusal(data, "entry 'w' appears twice in the archive")


# ------------------------------------------------------------------------- safetensors headers
def safetensors_file(header: dict | bytes, data: bytes, length: int | None = None) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


def f32(shape, begin, end) -> dict:
    return {"dtype": "F32", "shape": shape, "data_offsets": [begin, end]}


SAFETENSORS = [
    ("header longer than the file", safetensors_file({}, b"", length=1 << 40),
     "the header length field says 1099511627776 bytes, but the file holds 2 after it"),
    ("offsets past the data", safetensors_file({"w": f32([4], 0, 16)}, bytes(8)),
     "tensor 'w' has data_offsets [0, 16], past the 8 bytes of data after the header"),
    ("shape larger than its range", safetensors_file({"w": f32([10**12], 0, 8)}, bytes(8)),
     "tensor 'w' of shape (1000000000000,) and dtype F32 needs 4000000000000 bytes, but its "
     "data_offsets [0, 8] span 8"),
    ("two tensors on one range", safetensors_file({"a": f32([2], 0, 8), "b": f32([2], 0, 8)},
     bytes(8)), "tensor 'b' (bytes 0 to 8) overlaps tensor 'a' (which ends at 8)"),
    ("a gap", safetensors_file({"a": f32([1], 0, 4), "b": f32([1], 8, 12)}, bytes(12)),
     "tensor 'b' (bytes 8 to 12) leaves a gap after tensor 'a' (which ends at 4)"),
    ("bytes no tensor owns", safetensors_file({"a": f32([1], 0, 4)}, bytes(4 << 20)),
     "the tensors cover 4 of the 4194304 data bytes"),
    ("a deep header", safetensors_file(b"[" * 100_000 + b"]" * 100_000, b""),
     "its header nests deeper than 3 levels"),
    ("an entry that is no object", safetensors_file({"w": [1, 2]}, b""),
     "tensor 'w' has a malformed header entry [1, 2]"),
    ("a dtype that is no string", safetensors_file({"w": {"dtype": [1]}}, b""),
     "tensor 'w' has dtype [1]"),
    ("negative offsets", safetensors_file({"w": f32([1], -4, 0)}, b""),
     "tensor 'w' has a malformed header entry"),
]  # fmt: skip


@pytest.mark.parametrize("name,data,fragment", SAFETENSORS, ids=[s[0] for s in SAFETENSORS])
def test_hostile_safetensors_headers_are_refused(tmp_path, name, data, fragment):
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(data)
    assert "hostile.safetensors" in refusal(path, fragment)


def test_an_honest_safetensors_file_reads_the_same_as_the_package_reads_it(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    arrays = {
        "b": np.arange(6, dtype=np.int64).reshape(2, 3),
        "a": np.ones((0, 4), np.float32),
        "m": np.array([True, False]),
    }
    data = safetensors_numpy.save(arrays, metadata={"format": "pt"})
    loaded = ta.load(io.BytesIO(data))
    assert list(loaded) == ["a", "b", "m"]
    for name, array in arrays.items():
        np.testing.assert_array_equal(loaded[name].numpy(), array)
        assert loaded[name].shape == array.shape


# --------------------------------------------------------------------------------- manifests
def nested(kind: str, levels: int) -> dict:
    tree: dict = {"value": 1}
    for _ in range(levels):
        tree = {kind: [tree]}
    return tree


def manifest_file(tree: dict | str) -> bytes:
    """A checkpoint of no arrays with this tree (or the tree's JSON text)."""
    text = tree if isinstance(tree, str) else json.dumps(tree)
    manifest = '{"format": "tinyattn-checkpoint", "version": 2, "tree": ' + text + "}"
    return archive({"__metadata__.npy": npy_bytes(np.frombuffer(manifest.encode(), np.uint8))})


def test_a_manifest_nested_100000_deep_is_refused_by_name():
    data = manifest_file('{"list": [' * 100_000 + '{"value": 1}' + "]}" * 100_000)
    message = refusal(data, f"has a manifest nested deeper than {MAX_DEPTH} levels")
    assert "RecursionError" not in message
    with pytest.raises(ValueError, match="nested deeper than"):
        serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))


@pytest.mark.parametrize("kind", ["list", "tuple", "frozenset"])
def test_a_manifest_at_the_depth_limit_loads_and_one_level_more_does_not(kind):
    levels = (MAX_DEPTH - 2) // 2  # the top object and the {"value": 1} leaf, 2 per container
    loaded = ta.load(io.BytesIO(manifest_file(nested(kind, levels))))
    for _ in range(levels):
        (loaded,) = loaded
    assert loaded == 1
    refusal(manifest_file(nested(kind, levels + 1)), "nested deeper than")


def test_a_value_too_deep_to_load_is_refused_at_save(tmp_path):
    for depth in (200, 5_000):  # past the limit; past Python's recursion limit
        value: list = [1]
        for _ in range(depth):
            value = [value]
        with pytest.raises(TypeError, match=f"^save: the value nests deeper than the {MAX_DEPTH}"):
            ta.save(value, tmp_path / "deep.npz")
    assert not (tmp_path / "deep.npz").exists()


class Point:
    """An allowed class with one slot."""

    __slots__ = ("x",)


class Plain:
    """An allowed class with an instance dict and no slots."""


def object_file(**body) -> bytes:
    return manifest_file({"object": {"id": 0, **body}})


OBJECTS = [
    ("__class__ set to a number", object_file(
        **{"class": f"{__name__}:Point", "slots": [["__class__", {"value": 1}]]}),
     "the manifest sets slot '__class__' of a Point, whose slots are ['x']"),
    ("__class__ set to another allowed class", object_file(
        **{"class": f"{__name__}:Plain",
           "slots": [["__class__", {"global": f"{__name__}:Point"}]]}),
     "the manifest sets slot '__class__' of a Plain, whose slots are []"),
    ("a slot the class lacks", object_file(
        **{"class": f"{__name__}:Point", "slots": [["y", {"value": 1}]]}),
     "the manifest sets slot 'y' of a Point"),
    ("attributes for a class without __dict__", object_file(
        **{"class": f"{__name__}:Point", "dict": [["y", {"value": 1}]]}),
     "gives instance attributes to a Point, whose instances have no __dict__"),
]  # fmt: skip


@pytest.mark.parametrize("name,data,fragment", OBJECTS, ids=[o[0] for o in OBJECTS])
def test_an_object_gets_only_its_own_classs_attributes(name, data, fragment):
    with ta.serialization.safe_globals([Point, Plain]):
        refusal(data, fragment)


def test_an_objects_own_slot_still_loads():
    data = object_file(**{"class": f"{__name__}:Point", "slots": [["x", {"value": 7}]]})
    with ta.serialization.safe_globals([Point]):
        point = ta.load(io.BytesIO(data))
    assert type(point) is Point and point.x == 7


# ------------------------------------------------------------------------------ PyTorch files
HOW = "torch.save(torch.load(path, weights_only=True), 'model.pt')"


def synthetic_torch_zip() -> bytes:
    """What torch.save writes, as far as the loader looks: a zip with <name>/data.pkl."""
    return archive(
        {
            "archive/data.pkl": pickle.dumps({"w": [1.0, 2.0]}, protocol=2),
            "archive/byteorder": b"little",
            "archive/version": b"3\n",
        }
    )


def test_a_torch_save_zip_loads_by_its_content_whatever_its_name(tmp_path):
    data = synthetic_torch_zip()
    for suffix in (".pt", ".safetensors", ".npz"):
        path = tmp_path / f"model{suffix}"
        path.write_bytes(data)
        assert ta.load(path) == {"w": [1.0, 2.0]}
    assert ta.load(io.BytesIO(data)) == {"w": [1.0, 2.0]}  # a file object


def test_legacy_torch_save_files_are_named_with_how_to_resave_them(tmp_path):
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.ones(3)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    message = refusal(tmp_path / "legacy.pt", "torch.save's legacy format (a Python pickle stream)")
    assert HOW in message


def test_a_bare_pickle_is_named_as_one(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(pickle.dumps({"w": [1.0]}))
    message = refusal(
        path, "it is a Python pickle stream, not an .npz archive or a safetensors file"
    )
    assert HOW in message
