"""Checkpoint file formats: the .npz container and safetensors, on host (NumPy) arrays.

Part of the backend layer (only the backend package imports NumPy); tinyattn.serialization, the
public door (ta.save, ta.load), moves arrays to the host (`backend.to_numpy`) before it calls
these. Nothing here unpickles (torch_format.py reads torch.save's zip, by its own rules). A
file is untrusted input: every size it gives (an entry's declared and compressed size, its .npy
header, a safetensors offset) is checked against the others and against the file before memory
is taken for it, and a refusal names the entry and the numbers.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from typing import Any

import numpy as np

from ..errors import TinyattnError

# The .npz container (used by tinyattn.serialization): NumPy's own format. Pickle is never
# written and never accepted.
NPZ_METADATA_ENTRY = "__metadata__"


def save_npz(file: Any, arrays: dict[str, Any], metadata: str) -> None:
    """Write the host `arrays` and a UTF-8 `metadata` string (stored as a uint8 array
    named NPZ_METADATA_ENTRY) to the open binary `file` as an uncompressed .npz archive."""
    import zipfile  # noqa: PLC0415  (only checkpoints need it)

    entries = {NPZ_METADATA_ENTRY: np.frombuffer(metadata.encode("utf-8"), dtype=np.uint8)}
    entries.update(arrays)
    with zipfile.ZipFile(file, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in entries.items():
            # What np.savez does, minus its keyword names: a key may be "file" or "allow_pickle".
            with archive.open(name + ".npy", "w", force_zip64=True) as member:
                # np.ascontiguousarray would turn a 0-d array into shape (1,).
                array = array if array.flags.c_contiguous else np.array(array, order="C")
                np.lib.format.write_array(member, array, allow_pickle=False)


# What an archive may make the loader allocate. Every entry's size is checked against its own
# .npy header before it is read, so an entry never inflates past what its shape and dtype say; and
# an archive as a whole may inflate to at most MAX_INFLATION times its size on disk, beyond the
# first FREE_INFLATION bytes. Real weights barely compress (DEFLATE stores float32 noise at about
# 1.1x; tinyattn's own checkpoints are not compressed at all), so a checkpoint of real weights
# stays near 1x even with zero buffers inside; a constant array reaches DEFLATE's ceiling of about
# 1030x (bzip2: 370,000x). 100x is the bound Apache POI's zip-bomb guard uses; under 64 MiB an
# archive of zeros (a fresh optimizer state) loads whatever its ratio.
MAX_INFLATION = 100
FREE_INFLATION = 64 << 20
CHUNK = 1 << 20  # entries are read this many bytes at a time
_NPY_MAGIC = b"\x93NUMPY"
# A JSON string (escapes included) or a bracket: what json_depth needs to see of a text.
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[][{}]')


def json_depth(text: str, limit: int) -> int:
    """How deeply the arrays and objects of the JSON `text` nest, counted without parsing it
    (json.loads recurses, so it must not see a text nested deeper than `limit`); the count
    stops at limit + 1."""
    depth = deepest = 0
    for token in _JSON_TOKENS.finditer(text):
        bracket = token.group()
        if bracket in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                break
        elif bracket in ("]", "}"):
            depth -= 1
    return deepest


def _pickle_kind(start: bytes) -> str | None:
    """What a file that starts with `start` is, if it is a pickle stream (which tinyattn never
    unpickles): PyTorch's legacy torch.save format starts with a pickled magic number."""
    if start.startswith(b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"):
        return "a PyTorch checkpoint in torch.save's legacy format (a Python pickle stream)"
    if len(start) >= 2 and start[0] == 0x80 and 2 <= start[1] <= 5:  # pickle's PROTO opcode
        return "a Python pickle stream"
    return None


def _torch_zip(names: list[str]) -> str | None:
    """The pickle member that marks a zip as torch.save's format, if it is one."""
    return next((name for name in names if name.rpartition("/")[2] == "data.pkl"), None)


def _torch_kind(pickled: str) -> str:
    return f"a PyTorch checkpoint written by torch.save (a zip whose {pickled!r} is a pickle)"


def pytorch_refusal(kind: str) -> str:
    """Why a pickle file does not load (tinyattn reads pickles only inside torch.save's zip
    format, torch_format.py), and how to re-save it."""
    return (
        f"it is {kind}, not an .npz archive or a safetensors file, and not torch.save's zip "
        "format (which tinyattn reads). Re-save it where PyTorch is installed: "
        "torch.save(torch.load(path, weights_only=True), 'model.pt'), and load that file"
    )


def _check_archive(infos: list[Any], size: int) -> None:
    """Refuse, before reading anything, an archive whose entries could not come from a real
    checkpoint: a name twice, entries that share bytes, a stored entry whose sizes disagree,
    or more inflation than MAX_INFLATION allows."""
    import zipfile  # noqa: PLC0415

    seen = set()
    for info in infos:
        name = info.filename.removesuffix(".npy")
        if name in seen:
            raise TinyattnError(f"entry {name!r} appears twice in the archive")
        seen.add(name)
        stored = info.compress_type == zipfile.ZIP_STORED
        if stored and info.compress_size != info.file_size:  # it would take what it declares
            raise TinyattnError(
                f"entry {name!r} is stored uncompressed in {info.compress_size} bytes but "
                f"declares {info.file_size}"
            )
    compressed = sum(info.compress_size for info in infos)
    if compressed > size:  # entries that overlap reuse one compressed stream many times
        raise TinyattnError(
            f"its entries' compressed sizes add up to {compressed} bytes, more than the {size} "
            "bytes of the file (entries that overlap)"
        )
    inflated = sum(info.file_size for info in infos)
    if inflated > max(FREE_INFLATION, MAX_INFLATION * size):
        largest = max(infos, key=lambda info: info.file_size)
        raise TinyattnError(
            f"its entries would inflate to {inflated} bytes, {inflated / max(size, 1):.0f} times "
            f"the {size} bytes of the file (the largest, entry "
            f"{largest.filename.removesuffix('.npy')!r}: {largest.compress_size} compressed bytes "
            f"declaring {largest.file_size}); tinyattn inflates an archive to at most "
            f"{MAX_INFLATION} times its size beyond the first {FREE_INFLATION} bytes, since "
            "real checkpoints inflate about 1.1 times. If you trust the file, rewrite it "
            "uncompressed: numpy.savez(new_path, **numpy.load(path))"
        )


def _npy_header(member: Any, name: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """The shape, Fortran order and dtype an entry's .npy header describes."""
    try:
        version = np.lib.format.read_magic(member)
    except ValueError:  # NpzFile would hand such a member back as raw bytes
        raise TinyattnError(
            f"entry {name!r} is not a .npy array (a zip, but not an .npz archive)"
        ) from None
    read = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0
    )
    try:
        shape, fortran_order, dtype = read(member, max_header_size=1 << 16)
    except ValueError as exc:
        raise TinyattnError(f"entry {name!r} has a damaged .npy header ({exc})") from None
    if dtype.hasobject:
        raise TinyattnError(
            f"entry {name!r} holds pickled Python objects (an object array); tinyattn never "
            "unpickles"
        )
    return shape, fortran_order, dtype


def _read_entry(archive: Any, info: Any) -> np.ndarray:
    """One entry, checked against its header before any memory is taken for it, and read in
    CHUNK-sized pieces: it can never inflate to more than its header describes."""
    name = info.filename.removesuffix(".npy")
    with archive.open(info) as member:
        shape, fortran_order, dtype = _npy_header(member, name)
        count = math.prod(shape)  # Python ints: no overflow
        expected = member.tell() + count * dtype.itemsize
        if expected != info.file_size:
            raise TinyattnError(
                f"entry {name!r} claims shape {shape} of {dtype} ({expected} bytes with its "
                f"header) but the zip declares {info.file_size} bytes"
            )
        array = np.empty(count, dtype)
        buffer = memoryview(array.view(np.uint8))
        done = 0
        while done < len(buffer):
            got = member.readinto(buffer[done : done + CHUNK])
            if not got:
                raise TinyattnError(f"entry {name!r} ends after {done} of {len(buffer)} bytes")
            done += got
        if member.read(1):  # zipfile stops at the declared size; this guards that promise
            raise TinyattnError(f"entry {name!r} holds more than its declared {expected} bytes")
    if fortran_order:  # stored column-major, as np.lib.format.read_array rebuilds it
        return array.reshape(shape[::-1]).transpose()
    return array.reshape(shape)


def _read_archive(file: Any) -> dict[str, np.ndarray]:
    """Every entry of the zip `file`, after the checks of `_check_archive`."""
    import zipfile  # noqa: PLC0415  (only checkpoints need it)

    size = file.seek(0, os.SEEK_END)
    file.seek(0)
    with zipfile.ZipFile(file) as archive:
        infos = archive.infolist()
        pickled = _torch_zip([info.filename for info in infos])
        if pickled is not None:
            raise TinyattnError(pytorch_refusal(_torch_kind(pickled)))
        _check_archive(infos, size)
        return {info.filename.removesuffix(".npy"): _read_entry(archive, info) for info in infos}


def load_npz(path: Any) -> tuple[dict[str, np.ndarray], str | None]:
    """Read every array of an .npz archive without unpickling, and its metadata string (None
    when the archive has no NPZ_METADATA_ENTRY). Anything that is not a complete, pickle-free
    .npz of honest sizes raises ValueError saying why; a missing file raises FileNotFoundError."""
    import zipfile  # noqa: PLC0415
    import zlib  # noqa: PLC0415

    try:
        named = isinstance(path, str | os.PathLike)
        with open(path, "rb") if named else contextlib.nullcontext(path) as file:
            start = file.read(14)
            if start.startswith(_NPY_MAGIC):
                raise TinyattnError("it holds a single .npy array, not an .npz archive")
            pickled = _pickle_kind(start)
            if pickled is not None:
                raise TinyattnError(pytorch_refusal(pickled))
            if not start.startswith(b"PK\x03\x04"):
                raise TinyattnError(
                    f"not an .npz archive (it starts with {start[:6]!r}, not a zip header)"
                )
            arrays = _read_archive(file)
    except (FileNotFoundError, TinyattnError):
        raise
    except (zipfile.BadZipFile, EOFError, KeyError, OSError, zlib.error) as exc:
        raise TinyattnError(f"not a complete .npz archive ({type(exc).__name__}: {exc})") from None
    except (NotImplementedError, RuntimeError, ValueError) as exc:  # e.g. a flipped flag byte
        raise TinyattnError(f"a corrupt .npz archive ({type(exc).__name__}: {exc})") from None
    metadata = arrays.pop(NPZ_METADATA_ENTRY, None)
    if metadata is not None:
        metadata = metadata.tobytes().decode("utf-8", errors="replace")
    return arrays, metadata


# ------------------------------------------------------------------------------- safetensors
# The format PyTorch programs share weights in: a JSON header and raw little-endian arrays; only
# flat {name: array} maps fit. The `safetensors` package's NumPy API writes it; it is read here,
# so that every size and offset a file gives is checked, and named in the error, by this code.


def safetensors_bytes(arrays: dict[str, Any], metadata: dict[str, str] | None) -> bytes:
    """The safetensors encoding of host copies of `arrays`."""
    from safetensors.numpy import save  # noqa: PLC0415  (an optional dependency)

    host = {}
    for name, array in arrays.items():
        host[name] = array if array.flags.c_contiguous else np.array(array, order="C")
    return save(host, metadata=metadata)


# The safetensors dtypes tinyattn holds, as little-endian NumPy dtypes (BF16 is widened).
_SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
                       "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}  # fmt: skip
MAX_SAFETENSORS_HEADER = 100_000_000  # bytes; the reference implementation's own limit
_SAFETENSORS_DEPTH = 3  # {name: {"shape": [...], ...}}: deeper JSON is no safetensors header


def _zip_kind(data: bytes) -> str | None:
    """What a zip given as a safetensors file is: torch.save's format, or an .npz (None)."""
    import io  # noqa: PLC0415
    import zipfile  # noqa: PLC0415

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            pickled = _torch_zip(archive.namelist())
    except zipfile.BadZipFile:
        return None
    if pickled is None:
        raise TinyattnError(
            "it is a zip archive (an .npz checkpoint?), not a safetensors file; give it a name "
            "that does not end in .safetensors"
        )
    return _torch_kind(pickled)


def _safetensors_header(data: bytes) -> dict:
    """The JSON header of the safetensors bytes `data`, its length checked against the file."""
    if len(data) < 8:
        raise TinyattnError(f"{len(data)} bytes, shorter than the 8-byte header length")
    length = int.from_bytes(data[:8], "little")
    if length > min(MAX_SAFETENSORS_HEADER, len(data) - 8):
        raise TinyattnError(
            f"the header length field says {length} bytes, but the file holds {len(data) - 8} "
            f"after it (and headers are at most {MAX_SAFETENSORS_HEADER})"
        )
    try:
        text = data[8 : 8 + length].decode("utf-8")
        if json_depth(text, _SAFETENSORS_DEPTH) > _SAFETENSORS_DEPTH:
            raise TinyattnError(f"its header nests deeper than {_SAFETENSORS_DEPTH} levels")
        header = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TinyattnError(f"its header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise TinyattnError(f"its header is a JSON {type(header).__name__}, not an object")
    return header


def _tensor_range(name: str, entry: Any, data_size: int) -> tuple[str, tuple, int, int]:
    """(dtype, shape, begin, end) of one header entry, its byte range checked against its dtype
    and shape and against the data that follows the header."""
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if (
        not isinstance(shape, list)
        or not all(type(n) is int and n >= 0 for n in shape)
        or not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(n) is int and n >= 0 for n in offsets)
    ):
        raise TinyattnError(f"tensor {name!r} has a malformed header entry {entry!r:.120}")
    kind, (begin, end) = entry["dtype"], offsets
    itemsize = 2 if kind == "BF16" else np.dtype(_SAFETENSORS_DTYPES[kind]).itemsize
    needed = math.prod(shape) * itemsize
    if end - begin != needed:
        raise TinyattnError(
            f"tensor {name!r} of shape {tuple(shape)} and dtype {kind} needs {needed} bytes, "
            f"but its data_offsets [{begin}, {end}] span {end - begin}"
        )
    if end > data_size:
        raise TinyattnError(
            f"tensor {name!r} has data_offsets [{begin}, {end}], past the {data_size} bytes of "
            "data after the header"
        )
    return kind, tuple(shape), begin, end


def _check_ranges(ranges: dict[str, tuple], data_size: int) -> None:
    """The tensors' byte ranges tile the data exactly, as the format requires: no tensor shares
    a byte with another, and no byte belongs to none."""
    covered, previous = 0, None
    for name, (_, _, begin, end) in sorted(ranges.items(), key=lambda item: item[1][2:]):
        if begin != covered:
            what = "overlaps" if begin < covered else "leaves a gap after"
            after = f"tensor {previous!r}" if previous is not None else "the header"
            raise TinyattnError(
                f"tensor {name!r} (bytes {begin} to {end}) {what} {after} (which ends at {covered})"
            )
        covered, previous = end, name
    if covered != data_size:
        raise TinyattnError(f"the tensors cover {covered} of the {data_size} data bytes")


def load_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """The arrays of the safetensors file whose bytes are `data`. BF16 comes back as float32
    (exact: a bfloat16 is a float32's top 16 bits); other dtypes tinyattn lacks (U16, F8_E4M3,
    ...) and bad files raise ValueError, naming the tensor, the dtype and the sizes. Every byte
    range is checked against the file and against its tensor's dtype and shape before any
    array is made; the arrays are views of `data`."""
    pickled = _pickle_kind(data[:14])
    if pickled is None and data.startswith(b"PK\x03\x04"):
        pickled = _zip_kind(data)
    if pickled is not None:
        raise TinyattnError(pytorch_refusal(pickled))
    header = _safetensors_header(data)
    body = memoryview(data)[8 + int.from_bytes(data[:8], "little") :]
    ranges = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            raise TinyattnError(f"tensor {name!r} has a malformed header entry {entry!r:.120}")
        kind = entry.get("dtype")
        if not isinstance(kind, str) or (kind not in _SAFETENSORS_DTYPES and kind != "BF16"):
            readable = ", ".join(_SAFETENSORS_DTYPES)
            raise TinyattnError(
                f"tensor {name!r} has dtype {kind}; tinyattn reads {readable}, BF16"
            )
        ranges[name] = _tensor_range(name, entry, len(body))
    _check_ranges(ranges, len(body))
    arrays = {}
    for name, (kind, shape, begin, end) in sorted(ranges.items()):
        if kind == "BF16":
            raw = np.frombuffer(body[begin:end], "<u2")
            array = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(body[begin:end], _SAFETENSORS_DTYPES[kind])
        arrays[name] = array.reshape(shape)
    return arrays
