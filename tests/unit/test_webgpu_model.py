"""The webgpu backend on tiny random models against reference, and its behaviour without an adapter."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType

import llamay
from llamay_core.engine import loader
from llamay_core.engine.forward import SequenceChunk
from llamay_core.engine.kv_pages import SequenceKV
from llamay_core.errors import BackendError
from tests.support.tiny_gguf import write_tiny_llama

IDS = [5, 70, 80, 90, 100, 33, 12, 250, 7, 9, 11, 13, 200, 201, 202, 17, 18, 19, 20]


@pytest.fixture(scope="module")
def adapter():
    from llamay_backends.webgpu.backend import WebGPUBackend

    availability = WebGPUBackend().probe()
    if not availability.available:
        pytest.skip(f"webgpu unavailable: {availability.reason}")


def load_webgpu(monkeypatch, path, max_chunk_bytes=None, **options):
    """Load on a WebGPUBackend built here, so a test can make its weight chunks small."""
    from llamay_backends.webgpu.backend import WebGPUBackend

    real = loader.create_backend
    monkeypatch.setattr(loader, "create_backend",
                        lambda name: WebGPUBackend(max_chunk_bytes) if name == "webgpu" else real(name))
    return llamay.load(path, backend="webgpu", **options)


@pytest.mark.parametrize("weight_type", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "F16"])
def test_tiny_model_matches_reference(adapter, tmp_path, monkeypatch, weight_type):
    path = write_tiny_llama(tmp_path / "tiny.gguf", weight_type=GGMLQuantizationType[weight_type],
                            biases=weight_type == "Q5_0", tied=weight_type != "Q4_1")
    ref = llamay.load(path, backend="reference", n_ctx=64, page_size=4)
    # 3000-byte chunks split every matrix of the tiny model into several bindings.
    gpu = load_webgpu(monkeypatch, path, max_chunk_bytes=3000 if weight_type == "Q8_0" else None,
                      n_ctx=64, page_size=4)
    want = ref.logits(IDS)
    got = gpu.logits(IDS)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
    assert (got.argmax(-1) == want.argmax(-1)).all()


def test_prefill_then_decode_and_two_sequences(adapter, tmp_path, monkeypatch):
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    m = load_webgpu(monkeypatch, path, n_ctx=64, page_size=4)
    full = m.logits(IDS)
    ctx = m.context()
    ctx.extend(IDS[:-1])
    last = ctx.extend(IDS[-1:])
    np.testing.assert_allclose(last, full[-1], atol=1e-4 * np.abs(full[-1]).max())
    ctx.close()
    a, b = SequenceKV(m.pool), SequenceKV(m.pool)
    out = m.forward.run_many([SequenceChunk(a, IDS[:7], True), SequenceChunk(b, IDS[3:12], True)])
    np.testing.assert_allclose(out[0], m.logits(IDS[:7]), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out[1], m.logits(IDS[3:12]), rtol=1e-4, atol=1e-4)
    a.release()
    b.release()
    assert m.executable.submits > 0 and m.executable.last_dispatches == len(m.executable.dispatches)
    assert len(m.backend.bench_lines()) == 2 and set(m.backend.describe()) == {"kernels", "matmul", "gemm", "repack"}


def test_generation_equals_reference(adapter, tmp_path, monkeypatch):
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    ref = llamay.load(path, backend="reference", n_ctx=64)
    gpu = load_webgpu(monkeypatch, path, n_ctx=64)
    assert gpu.generate("the cat", max_tokens=8) == ref.generate("the cat", max_tokens=8)


def test_no_adapter_is_a_clear_unavailable(tmp_path, monkeypatch):
    from llamay_backends.webgpu import device
    from llamay_backends.webgpu.backend import WebGPUBackend

    def no_adapter():
        raise device.NoAdapter("no WebGPU adapter: No suitable graphics adapter found")

    monkeypatch.setattr(device, "open_gpu", no_adapter)
    availability = WebGPUBackend().probe()
    assert not availability.available and "No suitable graphics adapter" in availability.reason
    with pytest.raises(BackendError, match="webgpu' is unavailable: no WebGPU adapter"):
        llamay.load(write_tiny_llama(tmp_path / "tiny.gguf"), backend="webgpu")


def test_registration_imports_no_wgpu():
    code = ("import sys; import llamay_backends.webgpu.plugin, llamay_backends.webgpu.backend; "
            "assert 'wgpu' not in sys.modules, 'wgpu imported at registration'")
    subprocess.run([sys.executable, "-c", code], check=True)
