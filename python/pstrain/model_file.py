"""The pstrain model file (model/model_file.h): named float32 tensors with a CRC-32.

    offset  size        field
    0       8           magic "PSTRAINM"
    8       4           uint32 version = 1
    12      4           uint32 number of tensors
            per tensor: uint32 name length, name (UTF-8), uint32 ndim, int64 dims[ndim]
            4 * total   float32 values of every tensor, back to back, row-major
    end-4   4           uint32 CRC-32 (zlib) of every byte before it

All integers and floats are little-endian. Needs only NumPy.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import TYPE_CHECKING, Mapping

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

MAGIC = b"PSTRAINM"
VERSION = 1


class ModelFileError(ValueError):
    """A file that is not a valid pstrain model file; the message says what is wrong and where."""


def read_model_file(path: str | os.PathLike[str]) -> dict[str, NDArray[np.float32]]:
    """The tensors of the model file at `path`, as a dict name -> float32 ndarray (in file order)."""
    with open(path, "rb") as f:
        data = f.read()
    return parse_model_file(data, os.fspath(path))


def parse_model_file(data: bytes, where: str = "model file") -> dict[str, NDArray[np.float32]]:
    """The tensors of a model file's bytes (as read_model_file); `where` names it in errors."""
    if len(data) < 20 or data[:8] != MAGIC:
        raise ModelFileError(f"{where}: not a pstrain model file (no {MAGIC.decode()} magic)")
    stored_crc = struct.unpack_from("<I", data, len(data) - 4)[0]
    if zlib.crc32(data[:-4]) & 0xFFFFFFFF != stored_crc:
        raise ModelFileError(f"{where}: checksum mismatch (the file is corrupt or truncated)")
    version, count = struct.unpack_from("<II", data, 8)
    if version != VERSION:
        raise ModelFileError(f"{where}: version {version}, expected {VERSION}")
    pos = 16
    header: list[tuple[str, tuple[int, ...]]] = []
    try:
        for i in range(count):
            (name_len,) = struct.unpack_from("<I", data, pos)
            pos += 4
            name = data[pos:pos + name_len].decode("utf-8")
            pos += name_len
            (ndim,) = struct.unpack_from("<I", data, pos)
            pos += 4
            dims = struct.unpack_from(f"<{ndim}q", data, pos)
            pos += 8 * ndim
            header.append((name, tuple(dims)))
    except (struct.error, UnicodeDecodeError) as e:
        raise ModelFileError(f"{where}: malformed header at tensor {len(header)}: {e}") from None
    total = sum(int(np.prod(dims, dtype=np.int64)) for _, dims in header)
    if pos + 4 * total + 4 != len(data):
        raise ModelFileError(f"{where}: {len(data) - pos - 4} bytes of values, expected {4 * total}")
    values = np.frombuffer(data, dtype="<f4", count=total, offset=pos)
    tensors = {}
    offset = 0
    for name, dims in header:
        n = int(np.prod(dims, dtype=np.int64))
        tensors[name] = values[offset:offset + n].reshape(dims).astype(np.float32)
        offset += n
    return tensors


def write_model_file(path: str | os.PathLike[str], tensors: Mapping[str, ArrayLike]) -> None:
    """Writes `tensors` (name -> array-like of floats, in order) as a pstrain model file."""
    parts = [MAGIC, struct.pack("<II", VERSION, len(tensors))]
    values = []
    for name, value in tensors.items():
        array = np.ascontiguousarray(value, dtype="<f4")
        encoded = name.encode("utf-8")
        parts.append(struct.pack("<I", len(encoded)) + encoded)
        parts.append(struct.pack("<I", array.ndim) + struct.pack(f"<{array.ndim}q", *array.shape))
        values.append(array.tobytes())
    body = b"".join(parts + values)
    with open(path, "wb") as f:
        f.write(body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF))
