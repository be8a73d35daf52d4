"""A GGUF file read into attrs classes: metadata, hyperparameters and tensor handles.

The bytes are read with `gguf.GGUFReader` (memory-mapped); nothing here parses GGUF itself.
Every problem with a file is raised as a one-line `ModelFileError` naming the file.
"""
from __future__ import annotations

import hashlib
import os
import pickle
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
    reader: GGUFReader | None = attrs.field(repr=False, eq=False)  # None when read from the index cache
    identity: str = ""  # file_identity(path), computed once when the file is opened

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def arch_value(self, key: str, default: Any = None) -> Any:
        """A metadata value under the architecture's prefix, e.g. `llama.block_count`."""
        return self.metadata.get(f"{self.architecture}.{key}", default)

    def file_hash(self) -> str:
        """The file's identity (see `file_identity`), as computed when it was opened."""
        return self.identity


def file_identity(path: Path, chunk: int = 1 << 20) -> str:
    """A fast identity for a file: SHA-256 over its size, first and last MiB.

    Hashing 500 MB on every load would cost seconds; the header holds every tensor's name,
    type and offset, and the tail the last weights, so this changes with the model.
    """
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


# Typed views for the plain types; block formats stay uint8 rows, as GGUFReader returns them.
_PLAIN_DTYPES = {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16,
                 GGMLQuantizationType.F64: np.float64, GGMLQuantizationType.I8: np.int8,
                 GGMLQuantizationType.I16: np.int16, GGMLQuantizationType.I32: np.int32,
                 GGMLQuantizationType.I64: np.int64}
INDEX_FORMAT = 1


def _index_path(path: Path, identity: str) -> Path:
    from llamay_core.files.model_names import llamay_home

    folder = Path(os.environ.get("LLAMAY_INDEX_DIR") or llamay_home() / "index")
    return folder / f"{path.stem}-{identity}.v{INDEX_FORMAT}.pkl"


def _from_index(path: Path, identity: str) -> GGUFFile | None:
    """The file as GGUFReader saw it last time: metadata from the index, tensors memory-mapped.

    GGUFReader builds a NumPy view per vocabulary entry, seconds for a 150k-token vocabulary;
    the index keeps what it found, keyed by the file's size, header and tail.
    """
    try:
        index = pickle.loads(_index_path(path, identity).read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError):
        return None
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    tensors = {}
    for name, type_id, shape, offset, nbytes in index["tensors"]:
        ggml_type = GGMLQuantizationType(type_id)
        raw = mm[offset:offset + nbytes]
        if ggml_type in _PLAIN_DTYPES:
            data = raw.view(_PLAIN_DTYPES[ggml_type]).reshape(shape)
        else:
            rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
            data = raw.reshape(rows, -1)
        tensors[name] = TensorInfo(name=name, ggml_type=ggml_type, shape=tuple(shape), data=data)
    return GGUFFile(path=path, metadata=index["metadata"], tensors=tensors, reader=None, identity=identity)


def _write_index(gguf_file: GGUFFile, offsets: dict[str, int]) -> None:
    try:
        target = _index_path(gguf_file.path, gguf_file.identity)
        target.parent.mkdir(parents=True, exist_ok=True)
        entries = [(t.name, int(t.ggml_type), t.shape, offsets[t.name], t.n_bytes) for t in gguf_file.tensors.values()]
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps({"metadata": dict(gguf_file.metadata), "tensors": entries}))
        tmp.replace(target)
    except OSError:
        pass  # a read-only home only costs the next load its speed


def open_gguf(path: str | os.PathLike[str], use_index: bool = True) -> GGUFFile:
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
    identity = file_identity(path)
    if use_index:
        indexed = _from_index(path, identity)
        if indexed is not None:
            return indexed
    try:
        reader = GGUFReader(path, "r")
    except (ValueError, IndexError, OverflowError, KeyError, MemoryError, EOFError) as exc:
        raise ModelFileError(path, f"truncated or damaged GGUF ({_short(exc)})") from None
    except Exception as exc:  # the reader raises bare exceptions on some damage
        raise ModelFileError(path, f"unreadable GGUF ({_short(exc)})") from None
    tensors: dict[str, TensorInfo] = {}
    offsets: dict[str, int] = {}
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
        offsets[t.name] = int(t.data_offset)
    result = GGUFFile(path=path, metadata=read_metadata(reader), tensors=tensors, reader=reader, identity=identity)
    if use_index:
        _write_index(result, offsets)
    return result


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]
