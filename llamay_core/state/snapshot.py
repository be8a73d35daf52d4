"""Snapshot files: a context's tokens and KV pages, checked on the way back in.

Layout: magic, format version, header length, JSON header, page bytes, then a SHA-256 over
everything before it. The header names the model file hash, architecture, KV dtype, page size
and the page encoding (`PageStore.encoding`, the byte layout of the pages) and the backend that
wrote it. A snapshot restores into any model of the same file whose store takes the same encoding,
on any backend; otherwise it is refused with the reason, and nothing is allocated until every
check has passed.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from typing import TYPE_CHECKING

from llamay_core.errors import SnapshotError
from llamay_core.version import __version__

if TYPE_CHECKING:
    from llamay_core.engine.context import Context
    from llamay_core.engine.model import Model

MAGIC = b"LLAMAYKV"
FORMAT_VERSION = 2  # 2: the header records the page encoding
_PREFIX = struct.Struct("<8sII")


def _header_for(model: "Model") -> dict:
    spec = model.kv_spec
    return {
        "model_hash": model.gguf.file_hash(),
        "architecture": model.hparams.architecture,
        "kv_dtype": spec.dtype,
        "page_size": spec.page_size,
        "page_bytes": len(model.store.read_page(0)) if spec.max_pages else 0,
        "n_layers": spec.n_layers,
        "page_encoding": model.store.encoding,
    }


def write_snapshot(ctx: "Context", path: str | os.PathLike[str]) -> int:
    model = ctx.model
    header = _header_for(model)
    n_pages = -(-len(ctx.tokens) // model.kv_spec.page_size)
    header.update({"tokens": ctx.tokens, "n_pages": n_pages, "llamay_version": __version__,
                   "backend": model.backend_name})
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    digest = hashlib.sha256()
    tmp = f"{os.fspath(path)}.partial"
    written = 0
    with open(tmp, "wb") as f:
        for block in (_PREFIX.pack(MAGIC, FORMAT_VERSION, len(header_bytes)), header_bytes,
                      *(model.store.read_page(p) for p in ctx.seq.pages[:n_pages])):
            f.write(block)
            digest.update(block)
            written += len(block)
        f.write(digest.digest())
    os.replace(tmp, path)
    return written + digest.digest_size


def read_snapshot(model: "Model", path: str | os.PathLike[str]) -> "Context":
    from llamay_core.engine.context import Context
    from llamay_core.engine.kv_pages import SequenceKV

    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise SnapshotError(f"{name}: cannot read ({exc.strerror})") from None
    if len(data) < _PREFIX.size + 32 or not data.startswith(MAGIC):
        raise SnapshotError(f"{name}: not a llamay snapshot")
    magic, version, header_len = _PREFIX.unpack_from(data)
    if version != FORMAT_VERSION:
        raise SnapshotError(f"{name}: snapshot format v{version}, this llamay reads v{FORMAT_VERSION}")
    body, checksum = data[:-32], data[-32:]
    if hashlib.sha256(body).digest() != checksum:
        raise SnapshotError(f"{name}: checksum mismatch: the file is damaged or truncated")
    try:
        header = json.loads(body[_PREFIX.size:_PREFIX.size + header_len])
    except ValueError:
        raise SnapshotError(f"{name}: damaged header") from None
    expected = _header_for(model)
    for key, label in (("architecture", "architecture"), ("model_hash", "model"), ("kv_dtype", "KV dtype"),
                       ("page_size", "page size"), ("n_layers", "layer count")):
        if header.get(key) != expected[key]:
            raise SnapshotError(f"{name}: snapshot is for {label} {header.get(key)!r}, "
                                f"this model has {expected[key]!r}")
    if header.get("page_encoding") != expected["page_encoding"] or header.get("page_bytes") != expected["page_bytes"]:
        raise SnapshotError(f"{name}: snapshot pages were written by backend {header.get('backend')!r} as "
                            f"{header.get('page_encoding')!r} ({header.get('page_bytes')} bytes a page); backend "
                            f"{model.backend_name!r} stores pages as {expected['page_encoding']!r} "
                            f"({expected['page_bytes']} bytes a page) and cannot take them")
    tokens, n_pages, page_bytes = header["tokens"], header["n_pages"], header["page_bytes"]
    payload = body[_PREFIX.size + header_len:]
    if len(payload) != n_pages * page_bytes or n_pages != -(-len(tokens) // model.kv_spec.page_size):
        raise SnapshotError(f"{name}: payload size does not match its header")
    if len(tokens) > model.n_ctx:
        raise SnapshotError(f"{name}: {len(tokens)} tokens exceed this model's context of {model.n_ctx}")
    seq = SequenceKV(model.pool)
    try:
        for i in range(n_pages):
            page = model.pool.alloc()
            seq.pages.append(page)
            model.store.write_page(page, payload[i * page_bytes:(i + 1) * page_bytes])
    except Exception:
        seq.release()  # nothing is half-loaded
        raise
    seq.length = len(tokens)
    return Context(model, seq, tokens)
