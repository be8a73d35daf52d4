"""Every family and new weight type on cpu equals reference; MoE's definition; the split fallback."""
from __future__ import annotations


import numpy as np
import pytest

import llamay
from tests.support.plugins import registered_backends
from llamay_backends.reference import ops
from llamay_backends.reference.backend import ReferenceBackend
from llamay_core.backend_api import Capabilities
from llamay_core.graph import ops as G
from tests.support.family_gguf import write_family_gguf

IDS = [int(i) for i in np.random.default_rng(5).integers(0, 263, 24)]
FAMILIES = {
    "llama-rope-freqs": ("llama", dict(rope_freqs=True)),
    "llama-yarn": ("llama", dict(meta={"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                                       "rope.scaling.original_context_length": 16})),
    "mistral3": ("mistral3", {}),
    "qwen3": ("qwen3", dict(head_dim=32)),
    "qwen3moe": ("qwen3moe", dict(head_dim=32)),
    "olmoe": ("olmoe", dict(n_kv=4)),
    "phi3": ("phi3", dict(n_rot=12, rope_freqs=True)),
    "granite": ("granite", {}),
    "olmo2": ("olmo2", {}),
}


def nmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a - b) ** 2).sum() / (b ** 2).sum())


@pytest.fixture()
def float_activations(monkeypatch):
    """Exact float activations on cpu: these check each graph and weight format, which int8
    activations' noise (and MoE's routing flips under it) would blur; the int8 default is
    gated by the conformance on real models and by test_cpu_q8_scheme."""
    monkeypatch.setenv("LLAMAY_CPU_ACTIVATIONS", "float")


@pytest.mark.parametrize("case", sorted(FAMILIES))
def test_cpu_equals_reference(tmp_path, case, float_activations):
    arch, kw = FAMILIES[case]
    path = write_family_gguf(tmp_path / "m.gguf", arch, weight_type="Q8_0", **kw)
    ref = llamay.load(path, backend="reference", n_ctx=64).logits(IDS)
    cpu = llamay.load(path, backend="cpu", n_ctx=64).logits(IDS)
    # float activations, but each backend sums in its own order: the conformance matmul limit
    assert nmse(cpu, ref) < 5e-4
    assert (cpu.argmax(1) == ref.argmax(1)).mean() >= 0.9


@pytest.mark.parametrize("weight_type", ["IQ4_NL", "IQ4_XS", "MXFP4"])
def test_new_weight_types_load_on_cpu_and_match_reference(tmp_path, weight_type, float_activations):
    path = write_family_gguf(tmp_path / "m.gguf", "llama", weight_type=weight_type, d=256, ff=256)  # IQ4_XS: 256-wide blocks
    ref = llamay.load(path, backend="reference", n_ctx=64)
    cpu = llamay.load(path, backend="cpu", n_ctx=64)
    assert weight_type in cpu.backend.capabilities.weight_types
    a, b = ref.logits(IDS), cpu.logits(IDS)
    assert nmse(b, a) < 1e-6


def test_moe_reference_is_topk_softmax_routing():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    router = rng.standard_normal((4, 8)).astype(np.float32)
    gate, up = rng.standard_normal((2, 4, 6, 8)).astype(np.float32)
    down = rng.standard_normal((4, 8, 6)).astype(np.float32)
    for normalize in (True, False):
        got = ops.moe(x, router, gate, up, down, n_used=2, normalize=normalize)
        for t in range(3):
            logits = router.astype(np.float64) @ x[t]
            p = np.exp(logits - logits.max())
            p /= p.sum()
            top = np.argsort(p)[::-1][:2]
            w = p[top] / p[top].sum() if normalize else p[top]
            want = sum(wi * down[e] @ ((gate[e] @ x[t]) / (1 + np.exp(-(gate[e] @ x[t]))) * (up[e] @ x[t]))
                       for wi, e in zip(w, top))
            np.testing.assert_allclose(got[t], want, rtol=1e-4, atol=1e-5)


class NoExtended(ReferenceBackend):
    """A backend with only the core ops: the new ops must run on the fallback."""

    name = "no-extended"
    capabilities = Capabilities(ops=G.OP_NAMES | G.SPLIT_OP_NAMES, weight_types=ReferenceBackend.capabilities.weight_types,
                                kv_dtypes={"f32"})


@pytest.fixture()
def no_extended(monkeypatch):
    from llamay_core.engine import split

    monkeypatch.setattr(split, "fallback_order", lambda primary: ["reference"])
    with registered_backends("no_extended_plugin", {"no-extended": f"{__name__}:NoExtended"}, priority=1):
        yield


@pytest.mark.parametrize("case", ["qwen3moe", "phi3", "llama-rope-freqs"])
def test_backends_without_the_new_ops_fall_back_through_the_split(tmp_path, no_extended, case):
    arch, kw = FAMILIES[case]
    path = write_family_gguf(tmp_path / "m.gguf", arch, **kw)
    ref = llamay.load(path, backend="reference", n_ctx=64).logits(IDS)
    split = llamay.load(path, backend="no-extended", n_ctx=64)
    assert not split.spec.graph.op_names() <= NoExtended.capabilities.ops
    np.testing.assert_allclose(split.logits(IDS), ref, rtol=1e-5, atol=1e-4)
