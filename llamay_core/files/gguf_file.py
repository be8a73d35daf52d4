"""A GGUF file read into attrs classes: metadata, hyperparameters and tensor handles.

The bytes are read with `gguf.GGUFReader` (memory-mapped); nothing here parses GGUF itself.
Every problem with a file is raised as a one-line `ModelFileError` naming the file.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Mapping

import attrs
import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType
from gguf.constants import GGML_QUANT_SIZES

from llamay_core.errors import ModelFileError

GGUF_MAGIC = b"GGUF"


@attrs.frozen
class TensorInfo:
    """One tensor of the file: its name, GGML type and logical shape (rows last, like numpy)."""

    name: str
    ggml_type: GGMLQuantizationType
    shape: tuple[int, ...]  # numpy order: (rows, cols) for a matrix; cols is the input width
    data: np.ndarray = attrs.field(eq=False, repr=False)  # raw bytes (uint8) or typed array

    @property
    def type_name(self) -> str:
        return self.ggml_type.name

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape))

    @property
    def n_bytes(self) -> int:
        return int(self.data.nbytes)

    def raw_rows(self) -> np.ndarray:
        """The stored bytes as uint8 [rows, bytes per row]: the GGML block layout, untouched."""
        rows = int(np.prod(self.shape[:-1])) if len(self.shape) > 1 else 1
        return self.data.reshape(-1).view(np.uint8).reshape(rows, -1)


@attrs.frozen
class GGUFFile:
    """A GGUF file: its path, metadata as plain Python values, and tensors by name."""

    path: Path
    metadata: Mapping[str, Any] = attrs.field(repr=False)
    tensors: Mapping[str, TensorInfo] = attrs.field(repr=False)
    reader: GGUFReader = attrs.field(repr=False, eq=False)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def arch_value(self, key: str, default: Any = None) -> Any:
        """A metadata value under the architecture's prefix, e.g. `llama.block_count`."""
        return self.metadata.get(f"{self.architecture}.{key}", default)

    def file_hash(self) -> str:
        """A fast identity for the file: SHA-256 over its size, header and tail.

        Hashing 500 MB on every load would cost seconds; the header holds every tensor's
        name, type and offset, and the tail the last weights, so this changes with the model.
        """
        return file_identity(self.path)


def file_identity(path: Path, chunk: int = 1 << 20) -> str:
    size = os.path.getsize(path)
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(chunk))
        if size > chunk:
            f.seek(max(chunk, size - chunk))
            h.update(f.read(chunk))
    return h.hexdigest()[:16]


def _field_value(field: Any) -> Any:
    types = field.types
    if not types:
        return None
    if types[0] == GGUFValueType.ARRAY:
        if len(types) > 1 and types[1] == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
        if len(types) > 1 and types[1] == GGUFValueType.ARRAY:
            return [field.parts[i].tolist() for i in field.data]
        if not field.data:
            return []
        return np.concatenate([field.parts[i] for i in field.data]).tolist()
    if types[0] == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")
    value = field.parts[field.data[0]]
    return value.tolist()[0] if hasattr(value, "tolist") else value


def read_metadata(reader: GGUFReader) -> dict[str, Any]:
    """GGUF key/value pairs as Python values (str, int, float, bool, lists)."""
    return {name: _field_value(field) for name, field in reader.fields.items()}


def open_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Open and validate the container. Raises ModelFileError with a one-line reason."""
    path = Path(path)
    if not path.exists():
        raise ModelFileError(path, "no such file")
    if path.is_dir():
        raise ModelFileError(path, "is a directory, not a GGUF file")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ModelFileError(path, f"not a GGUF file (magic bytes {magic!r}, expected b'GGUF')")
    try:
        reader = GGUFReader(path, "r")
    except (ValueError, IndexError, OverflowError, KeyError, MemoryError, EOFError) as exc:
        raise ModelFileError(path, f"truncated or damaged GGUF ({_short(exc)})") from None
    except Exception as exc:  # the reader raises bare exceptions on some damage
        raise ModelFileError(path, f"unreadable GGUF ({_short(exc)})") from None
    tensors: dict[str, TensorInfo] = {}
    file_size = os.path.getsize(path)
    for t in reader.tensors:
        try:
            ggml_type = GGMLQuantizationType(int(t.tensor_type))
        except ValueError:
            raise ModelFileError(path, f"tensor {t.name}: unknown GGML type {int(t.tensor_type)}") from None
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        block, type_size = GGML_QUANT_SIZES[ggml_type]
        expected = int(np.prod(shape)) // block * type_size
        if int(t.data_offset) + expected > file_size or t.data.nbytes < expected:
            raise ModelFileError(path, f"truncated: tensor {t.name} runs past the end of the file")
        tensors[t.name] = TensorInfo(name=t.name, ggml_type=ggml_type, shape=shape, data=t.data)
    return GGUFFile(path=path, metadata=read_metadata(reader), tensors=tensors, reader=reader)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]
