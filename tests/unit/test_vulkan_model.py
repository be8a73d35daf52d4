"""The tiny random model end to end on Vulkan against the reference: prefill, decode, forks."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType

import llamay
from tests.support.tiny_gguf import write_tiny_llama


@pytest.fixture(scope="module", autouse=True)
def vulkan_available():
    from llamay_backends.vulkan.backend import VulkanBackend

    availability = VulkanBackend().probe()
    if not availability.available:
        pytest.skip(f"vulkan unavailable: {availability.reason}")


@pytest.mark.parametrize("weight_type,kv,biases", [("Q8_0", "f32", False), ("Q4_0", "f16", True),
                                                   ("Q5_0", "f32", False), ("F16", "f32", False)])
def test_tiny_model_matches_reference(tmp_path, weight_type, kv, biases):
    path = write_tiny_llama(tmp_path / "tiny.gguf", weight_type=GGMLQuantizationType[weight_type], biases=biases)
    ref = llamay.load(path, backend="reference", n_ctx=128, kv_dtype=kv)
    vk = llamay.load(path, backend="vulkan", n_ctx=128, kv_dtype=kv, ubatch=8)  # 3 passes for the prompt
    ids = list(range(3, 22))
    a, b = ref.context(), vk.context()
    la, lb = a.extend_all(ids), b.extend_all(ids)
    tol = 2e-3 if kv == "f16" else 2e-4
    assert np.abs(la - lb).max() <= tol * np.abs(la).max()
    for _ in range(3):  # greedy decode: same tokens, same logits
        tok = int(np.argmax(a.last_logits()))
        assert tok == int(np.argmax(b.last_logits()))
        da, db = a.extend([tok]), b.extend([tok])
        assert np.abs(da - db).max() <= tol * np.abs(da).max()


def test_fork_and_snapshot_on_device_pages(tmp_path):
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    ref = llamay.load(path, backend="reference", n_ctx=128)
    vk = llamay.load(path, backend="vulkan", n_ctx=128)
    outs = []
    for m in (ref, vk):
        ctx = m.context()
        ctx.extend(list(range(5, 40)))  # 35 tokens: a partly filled third page is shared by the fork
        fork = ctx.fork()
        ctx.snapshot(tmp_path / f"{m.backend_name}.snap")
        restored = m.restore(tmp_path / f"{m.backend_name}.snap")
        outs.append((ctx.extend([7]), fork.extend([9]), restored.extend([11])))
    for r, v in zip(outs[0], outs[1]):
        assert np.abs(r - v).max() <= 2e-4 * np.abs(r).max()


def test_bench_reports_dispatches_and_submissions(tmp_path):
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    m = llamay.load(path, backend="vulkan", n_ctx=64)
    m.context().extend([1, 2, 3])
    lines = m.backend.bench_lines()
    assert "dispatches per token" in lines[0] and "one submission" in lines[0]
    assert "cpu encoding" in lines[1] and "gpu execution" in lines[1]
    assert set(m.backend.describe()) == {"kernels", "matmul", "gemm", "repack"}
