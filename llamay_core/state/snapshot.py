"""Snapshot files: a context's tokens and KV pages, checked on the way back in.

Layout: magic, format version, header length, JSON header, page bytes, then an XXH3-128 digest
over everything before it (a checksum against damage and truncation, not a signature: SHA-256
ran at ~0.5 GB/s and alone cost more than the 50x-faster-than-prefill restore allows). The
header names the model file hash, architecture, KV dtype, page size, the page encoding
(`PageStore.encoding`, the byte layout of the pages) and the backend that wrote it. A snapshot
restores into any model of the same file whose store takes the same encoding, on any backend;
otherwise it is refused with the reason, and nothing is allocated until every check has passed.
"""
from __future__ import annotations

import json
import os
import struct
from typing import TYPE_CHECKING

import numpy as np
import xxhash

from llamay_core.errors import SnapshotError
from llamay_core.version import __version__

if TYPE_CHECKING:
    from llamay_core.backend_api import PageStore
    from llamay_core.engine.context import Context
    from llamay_core.engine.model import Model

MAGIC = b"LLAMAYKV"
FORMAT_VERSION = 3  # 2: XXH3-128 digest; 3: the header records the page encoding
_PREFIX = struct.Struct("<8sII")
_DIGEST_SIZE = 16


def _header_for(model: "Model") -> dict:
    spec = model.kv_spec
    return {
        "model_hash": model.gguf.file_hash(),
        "architecture": model.hparams.architecture,
        "kv_dtype": spec.dtype,
        "page_size": spec.page_size,
        "page_bytes": len(model.store.read_page(0)) if spec.max_pages else 0,
        "n_layers": spec.n_layers,
        "page_encoding": page_encoding(model),
    }


def page_encoding(model: "Model") -> str:
    """The store's declared page layout; a store that declares none (an older plugin) gets a name
    private to its backend, so its snapshots restore on that backend only."""
    return getattr(model.store, "encoding", None) or f"private:{model.backend_name}/{model.kv_spec.dtype}"


def write_snapshot(ctx: "Context", path: str | os.PathLike[str]) -> int:
    model = ctx.model
    header = _header_for(model)
    n_pages = -(-len(ctx.tokens) // model.kv_spec.page_size)
    header.update({"tokens": ctx.tokens, "n_pages": n_pages, "llamay_version": __version__,
                   "backend": model.backend_name})
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    digest = xxhash.xxh3_128()
    tmp = f"{os.fspath(path)}.partial"
    written = 0
    with open(tmp, "wb") as f:
        for block in (_PREFIX.pack(MAGIC, FORMAT_VERSION, len(header_bytes)), header_bytes,
                      _read_pages(model.store, ctx.seq.pages[:n_pages])):
            f.write(block)
            digest.update(block)
            written += len(block)
        f.write(digest.digest())
    os.replace(tmp, path)
    return written + _DIGEST_SIZE


def read_snapshot(model: "Model", path: str | os.PathLike[str]) -> "Context":
    from llamay_core.engine.context import Context
    from llamay_core.engine.kv_pages import SequenceKV

    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            prefix = f.read(_PREFIX.size)
            if len(prefix) < _PREFIX.size or not prefix.startswith(MAGIC):
                raise SnapshotError(f"{name}: not a llamay snapshot")
            _, version, header_len = _PREFIX.unpack(prefix)
            if version != FORMAT_VERSION:
                raise SnapshotError(f"{name}: snapshot format v{version}, this llamay reads v{FORMAT_VERSION}")
            header_bytes = f.read(header_len)
            # the page bytes go in one copy from the page cache into an aligned buffer, which
            # the store then takes in one copy per layer array
            rest = np.empty(max(size - _PREFIX.size - len(header_bytes), 0), np.uint8)
            got = f.readinto(memoryview(rest))
    except OSError as exc:
        raise SnapshotError(f"{name}: cannot read ({exc.strerror})") from None
    payload, checksum = rest[:max(got - _DIGEST_SIZE, 0)], rest[max(got - _DIGEST_SIZE, 0):got]
    digest = xxhash.xxh3_128(prefix)
    digest.update(header_bytes)
    digest.update(memoryview(payload))
    if len(header_bytes) < header_len or len(checksum) < _DIGEST_SIZE or digest.digest() != checksum.tobytes():
        raise SnapshotError(f"{name}: checksum mismatch: the file is damaged or truncated")
    try:
        header = json.loads(header_bytes)
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
    if len(payload) != n_pages * page_bytes or n_pages != -(-len(tokens) // model.kv_spec.page_size):
        raise SnapshotError(f"{name}: payload size does not match its header")
    if len(tokens) > model.n_ctx:
        raise SnapshotError(f"{name}: {len(tokens)} tokens exceed this model's context of {model.n_ctx}")
    seq = SequenceKV(model.pool)
    try:
        for _ in range(n_pages):
            seq.pages.append(model.pool.alloc())
        _write_pages(model.store, seq.pages, payload)
    except Exception:
        seq.release()  # nothing is half-loaded
        raise
    seq.length = len(tokens)
    return Context(model, seq, tokens)


def _read_pages(store: "PageStore", pages: list[int]) -> bytes:
    # A store that moves many pages in one call (host stores: one copy per layer array) is used
    # that way; any other PageStore page by page.
    if hasattr(store, "read_pages"):
        return store.read_pages(pages)
    return b"".join(store.read_page(p) for p in pages)


def _write_pages(store: "PageStore", pages: list[int], payload: np.ndarray) -> None:
    if hasattr(store, "write_pages"):
        store.write_pages(pages, payload)
        return
    page_bytes = len(payload) // max(len(pages), 1)
    for i, page in enumerate(pages):
        store.write_page(page, payload[i * page_bytes:(i + 1) * page_bytes].tobytes())
