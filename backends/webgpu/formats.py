"""GGML block formats as the WGSL kernels read them: word-aligned payloads, then packed headers.

WGSL has no 8-bit storage, so kernels read u32 words. Many GGML blocks are not a multiple of four
bytes (Q4_0 is 18: an f16 scale then 16 bytes of nibbles), so each block is split at load time
into its payload (word-aligned quants, read as u32) and its header (the f16 scale, and minimum
where there is one), packed densely after all payloads. The size stays the quantized size, plus
at most three bytes of padding per chunk. Pure NumPy: testable without a GPU.
"""
from __future__ import annotations

import attrs
import numpy as np

SUB_BLOCK = 32  # kernels dequantize 32 weights at a time, whatever the block size


@attrs.frozen
class BlockLayout:
    """Where a GGML block's bytes go: `payload` byte ranges (concatenated, a multiple of 4 bytes)
    and `header` byte ranges (packed densely after every payload of the chunk)."""

    elements: int
    block_bytes: int
    payload: tuple[tuple[int, int], ...]
    header: tuple[tuple[int, int], ...] = ()

    @property
    def payload_bytes(self) -> int:
        return sum(b - a for a, b in self.payload)

    @property
    def header_bytes(self) -> int:
        return sum(b - a for a, b in self.header)


LAYOUTS: dict[str, BlockLayout] = {
    "F32": BlockLayout(1, 4, ((0, 4),)),
    "F16": BlockLayout(1, 2, ((0, 2),)),
    "Q4_0": BlockLayout(32, 18, ((2, 18),), ((0, 2),)),
    "Q4_1": BlockLayout(32, 20, ((4, 20),), ((0, 4),)),
    "Q5_0": BlockLayout(32, 22, ((2, 22),), ((0, 2),)),
    "Q5_1": BlockLayout(32, 24, ((4, 24),), ((0, 4),)),
    "Q8_0": BlockLayout(32, 34, ((2, 34),), ((0, 2),)),
    "Q4_K": BlockLayout(256, 144, ((0, 144),)),
    "Q5_K": BlockLayout(256, 176, ((0, 176),)),
    "Q6_K": BlockLayout(256, 210, ((0, 208),), ((208, 210),)),
}
WEIGHT_TYPES = frozenset(LAYOUTS)


@attrs.frozen
class PackedChunk:
    """Rows [row0, row0 + n_rows) of a matrix as one word array; headers start at word `header_word`."""

    row0: int
    n_rows: int
    words: np.ndarray = attrs.field(repr=False)  # uint32
    header_word: int


def row_bytes(type_name: str, n_cols: int) -> int:
    """Bytes one row takes once repacked (payload plus header; the padding is per chunk)."""
    layout = LAYOUTS[type_name]
    blocks = n_cols // layout.elements
    return blocks * (layout.payload_bytes + layout.header_bytes)


def pack_rows(type_name: str, raw_rows: np.ndarray) -> tuple[np.ndarray, int]:
    """Repack raw GGML rows (uint8 [rows, bytes per row]) into (uint32 words, header word offset)."""
    layout = LAYOUTS[type_name]
    blocks = np.ascontiguousarray(raw_rows).reshape(-1, layout.block_bytes)
    payload = np.concatenate([blocks[:, a:b] for a, b in layout.payload], axis=1).reshape(-1)
    parts = [payload]
    if layout.header:
        parts.append(np.concatenate([blocks[:, a:b] for a, b in layout.header], axis=1).reshape(-1))
    data = np.concatenate(parts)
    pad = (-data.size) % 4
    if pad:
        data = np.concatenate([data, np.zeros(pad, np.uint8)])
    return data.view(np.uint32), payload.size // 4


def pack_matrix(type_name: str, raw_rows: np.ndarray, max_chunk_bytes: int) -> list[PackedChunk]:
    """Split a matrix into chunks of whole rows, each at most `max_chunk_bytes` once packed."""
    n_rows = raw_rows.shape[0]
    per_row = max(raw_rows.shape[1], 1)
    rows_per_chunk = max(1, (max_chunk_bytes - 4) // per_row)
    chunks = []
    for row0 in range(0, n_rows, rows_per_chunk):
        part = raw_rows[row0:row0 + rows_per_chunk]
        words, header_word = pack_rows(type_name, part)
        chunks.append(PackedChunk(row0, part.shape[0], words, header_word))
    return chunks
