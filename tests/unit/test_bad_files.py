"""Every kind of bad model file gets a one-line error naming the file, from the API and the CLI."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType

import llamay
from llamay_core.errors import ModelFileError
from tests.support.tiny_gguf import write_tiny_llama


def _cases(tmp_path):
    good = write_tiny_llama(tmp_path / "good.gguf")
    text = tmp_path / "notes.gguf"
    text.write_text("this is not a model\n")
    truncated = tmp_path / "truncated.gguf"
    data = good.read_bytes()
    truncated.write_bytes(data[: len(data) - 3000])
    header_cut = tmp_path / "header_cut.gguf"
    header_cut.write_bytes(data[:200])
    arch = write_tiny_llama(tmp_path / "arch.gguf", arch="mamba9")
    bad_type = write_tiny_llama(tmp_path / "type.gguf", weight_type=GGMLQuantizationType.F32,
                                mutate=lambda t: t.update({"blk.0.attn_q.weight": t["blk.0.attn_q.weight"].astype(np.int32)}))
    missing = write_tiny_llama(tmp_path / "missing.gguf", drop=("blk.1.ffn_up.weight",))
    shape = write_tiny_llama(tmp_path / "shape.gguf",
                             mutate=lambda t: t.update({"blk.0.attn_k.weight": np.zeros((48, 128), np.float32)}))
    return {
        "not-gguf": (text, "not a GGUF file"),
        "truncated": (truncated, "truncated"),
        "header-cut": (header_cut, "GGUF"),
        "unsupported-architecture": (arch, "unsupported architecture 'mamba9'"),
        "unsupported-tensor-type": (bad_type, "unsupported tensor type I32"),
        "missing-tensor": (missing, "missing tensor blk.1.ffn_up.weight"),
        "shape-mismatch": (shape, "tensor blk.0.attn_k.weight has shape [48, 128], expected [64, 128]"),
        "no-such-file": (tmp_path / "absent.gguf", "no such file"),
    }


CASE_NAMES = ["not-gguf", "truncated", "header-cut", "unsupported-architecture", "unsupported-tensor-type",
              "missing-tensor", "shape-mismatch", "no-such-file"]


@pytest.mark.parametrize("case", CASE_NAMES)
def test_api_raises_one_line_error(tmp_path, case):
    path, expected = _cases(tmp_path)[case]
    with pytest.raises(llamay.LlamayError) as info:
        llamay.load(path, backend="reference")
    message = str(info.value)
    assert "\n" not in message
    assert expected in message
    assert str(path) in message
    if case != "no-such-file":
        assert isinstance(info.value, ModelFileError)


@pytest.mark.parametrize("case", ["not-gguf", "truncated", "unsupported-architecture", "missing-tensor",
                                  "shape-mismatch", "unsupported-tensor-type"])
def test_cli_exit_code_2_without_traceback(tmp_path, case):
    path, expected = _cases(tmp_path)[case]
    proc = subprocess.run([sys.executable, "-m", "llamay_core.cli.main", "run", "-m", str(path), "-p", "hi",
                           "-backend", "reference"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert expected in lines[0]


def test_index_cache_gives_the_same_file_and_follows_changes(tmp_path, monkeypatch):
    from llamay_core.files.gguf_file import open_gguf

    # A fresh index: other tests open tiny models with the same bytes (the same identity).
    monkeypatch.setenv("LLAMAY_INDEX_DIR", str(tmp_path / "index"))
    path = write_tiny_llama(tmp_path / "m.gguf")
    first = open_gguf(path)
    cached = open_gguf(path)
    assert first.reader is not None and cached.reader is None
    assert cached.metadata == first.metadata
    for name, t in first.tensors.items():
        c = cached.tensors[name]
        assert (c.shape, c.ggml_type, c.data.dtype) == (t.shape, t.ggml_type, t.data.dtype)
        assert np.array_equal(c.raw_rows(), t.raw_rows())
    data = path.read_bytes()
    path.write_bytes(data[:-3000])  # a changed file is never served from a stale index
    with pytest.raises(ModelFileError, match="truncated"):
        open_gguf(path)
