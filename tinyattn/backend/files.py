"""Checkpoint file formats: the .npz container and safetensors, on host (NumPy) arrays.

Part of the backend layer (only the backend package imports NumPy); `backend` moves arrays to
the host before it calls these, and tinyattn.serialization is the public door (ta.save,
ta.load). Nothing here unpickles.
"""

from __future__ import annotations

import contextlib
import os
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


def _pickle_free(archive: Any, name: str) -> np.ndarray:
    """One entry of an open archive; an object (pickled) array raises naming the entry, and so
    does a member that is not a .npy array (NpzFile hands those back as raw bytes)."""
    try:
        entry = archive[name]
        if not isinstance(entry, np.ndarray):
            raise TinyattnError(
                f"entry {name!r} is not a .npy array (a zip, but not an .npz archive)"
            )
        return entry
    except ValueError as exc:
        if "allow_pickle" not in str(exc):
            raise
        raise TinyattnError(
            f"entry {name!r} holds pickled Python objects (an object array); tinyattn never "
            "unpickles"
        ) from None


def _check_member_sizes(file: Any) -> None:
    """Each .npy member's header must describe no more bytes than the member holds.

    A damaged or hostile header can claim a huge array; reading it would fail with a bare
    MemoryError (or allocate the memory) before any check could say what is wrong.
    """
    import zipfile  # noqa: PLC0415

    with zipfile.ZipFile(file) as archive:
        for info in archive.infolist():
            with archive.open(info) as member:
                try:
                    version = np.lib.format.read_magic(member)
                    read_header = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape, _, dtype = read_header(member, max_header_size=1 << 16)
                except ValueError:
                    continue  # not a .npy member: reported by the normal read
                claimed = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
                if claimed > info.file_size:
                    raise TinyattnError(
                        f"entry {info.filename!r} claims shape {shape} of {dtype} "
                        f"({claimed} bytes) but holds {info.file_size} bytes"
                    )


def load_npz(path: Any) -> tuple[dict[str, np.ndarray], str | None]:
    """Read every array of an .npz archive with allow_pickle=False, and its metadata string
    (None when the archive has no NPZ_METADATA_ENTRY). Anything that is not a complete,
    pickle-free .npz raises ValueError saying why; a missing file raises FileNotFoundError."""
    import zipfile  # noqa: PLC0415
    import zlib  # noqa: PLC0415

    try:
        # Our own open file (np.load(path) leaks its handle on a truncated zip), or the caller's.
        named = isinstance(path, str | os.PathLike)
        with open(path, "rb") if named else contextlib.nullcontext(path) as file:
            magic = file.read(6)
            # np.load takes any unknown bytes for a pickle, so a text file would be reported as
            # "contains pickled (object) data": check the zip (and .npy) signatures first.
            if not magic.startswith(b"PK\x03\x04") and magic != b"\x93NUMPY":
                raise TinyattnError(
                    f"not an .npz archive (it starts with {magic!r}, not a zip header)"
                )
            file.seek(0)
            if magic.startswith(b"PK"):
                _check_member_sizes(file)
                file.seek(0)
            archive = np.load(file, allow_pickle=False)
            if not isinstance(archive, np.lib.npyio.NpzFile):
                raise TinyattnError("it holds a single .npy array, not an .npz archive")
            with archive:
                arrays = {name: _pickle_free(archive, name) for name in archive.files}
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, EOFError, KeyError, OSError, zlib.error) as exc:
        raise TinyattnError(f"not a complete .npz archive ({type(exc).__name__}: {exc})") from None
    except (NotImplementedError, RuntimeError) as exc:  # zipfile on a flipped flag byte
        raise TinyattnError(f"a corrupt .npz archive ({type(exc).__name__}: {exc})") from None
    except ValueError as exc:
        raise TinyattnError(str(exc)) from None
    metadata = arrays.pop(NPZ_METADATA_ENTRY, None)
    if metadata is not None:
        metadata = metadata.tobytes().decode("utf-8", errors="replace")
    return arrays, metadata


# ------------------------------------------------------------------------------- safetensors
# The format PyTorch programs share weights in: a JSON header and raw little-endian arrays. The
# `safetensors` package's NumPy API reads and writes it; only flat {name: array} maps fit.


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


def load_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """The arrays of the safetensors file whose bytes are `data`. BF16 comes back as float32
    (exact: a bfloat16 is a float32's top 16 bits); other dtypes tinyattn lacks (U16, F8_E4M3,
    ...) and bad files raise ValueError, naming the tensor and the dtype."""
    from safetensors import deserialize  # noqa: PLC0415  (an optional dependency)

    try:
        entries = deserialize(data)
    except Exception as exc:  # noqa: BLE001  (the package's SafetensorError and others)
        raise TinyattnError(
            f"not a readable safetensors file ({type(exc).__name__}: {exc})"
        ) from None
    arrays = {}
    for name, entry in sorted(entries):
        kind, shape, raw = entry["dtype"], tuple(entry["shape"]), entry["data"]
        if kind not in _SAFETENSORS_DTYPES and kind != "BF16":
            readable = ", ".join(_SAFETENSORS_DTYPES)
            raise TinyattnError(
                f"tensor {name!r} has dtype {kind}; tinyattn reads {readable}, BF16"
            )
        if kind == "BF16":
            array = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(raw, _SAFETENSORS_DTYPES[kind])
        arrays[name] = array.reshape(shape)
    return arrays
