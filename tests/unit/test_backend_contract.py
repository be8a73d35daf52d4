"""The contract as declared: op records say what they read and write, optional backend members
have defaults, the fallback comes from capabilities, and `llamay version` says who gets picked."""
from __future__ import annotations

import types

import attrs
import pytest

from llamay_backends.reference.backend import ReferenceBackend
from llamay_core.backend_api import BackendBase, Capabilities, missing_members
from llamay_core.errors import BackendError
from llamay_core.graph import ops as G
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.manager import get_registry
from llamay_core.plugins_runtime.registry import BackendInfo


@pytest.mark.parametrize("op", G.OP_TYPES + G.SPLIT_OP_TYPES, ids=lambda t: t.name)
def test_every_field_naming_a_value_or_tensor_is_declared(op):
    fields = {f.name for f in attrs.fields(op)}
    declared = set(op.input_fields) | set(op.output_fields) | set(op.weight_fields)
    assert declared <= fields
    # Whatever is not declared must be a parameter: a number, a flag or a mode.
    for f in attrs.fields(op):
        if f.name not in declared:
            assert f.type in ("int", "float", "bool", "str") and f.name in (
                "layer", "eps", "group", "weight_offset", "scale", "factor", "n_heads", "head_dim", "n_rot",
                "mode", "base", "freq_scale", "n_kv_heads", "key_dim", "value_dim", "softcap", "window",
                "cap", "width"), f"{op.name}.{f.name} is neither declared nor a known parameter"


@pytest.mark.parametrize("arch, biases", [("llama", False), ("qwen2", True)])
def test_a_model_graph_reads_only_what_it_wrote_before(tmp_path, arch, biases):
    from llamay_core.engine.loader import build_spec
    from llamay_core.files.gguf_file import open_gguf
    from tests.support.tiny_gguf import write_tiny_llama

    gguf = open_gguf(write_tiny_llama(tmp_path / "m.gguf", arch=arch, biases=biases))
    graph = build_spec(gguf).graph
    written: set[str] = set()
    for node in graph:
        assert set(node.inputs()) <= written, node
        assert set(node.weights()) <= set(gguf.tensors), node
        written |= set(node.outputs())
    assert graph.output in written
    assert graph.weight_names() == list(dict.fromkeys(w for n in graph.nodes for w in n.weights()))


def test_optional_members_have_defaults_and_missing_ones_are_named():
    class Bare:
        name, version, capabilities = "bare", "1", None

        def probe(self): ...
        def load_weights(self, tensors): ...
        def kv_store(self, spec): ...
        def compile(self, graph, weights, store): ...

    assert missing_members(Bare()) == ["compile_seconds", "set_threads", "describe", "bench_lines", "close"]
    based = type("Based", (BackendBase, Bare), {})()
    assert missing_members(based) == []
    assert based.describe() == {} and based.bench_lines() == [] and based.compile_seconds == 0.0
    based.set_threads(3)
    based.close()


def test_an_older_backend_without_optional_members_gets_their_defaults():
    from llamay_core.engine.loader import check_contract

    class Older:
        name, version, capabilities = "older", "1", None

        def probe(self): ...
        def load_weights(self, tensors): ...
        def kv_store(self, spec): ...
        def compile(self, graph, weights, store): ...

    older = Older()
    check_contract("older", older)
    assert missing_members(older) == []
    assert older.describe() == {} and older.bench_lines() == [] and older.compile_seconds == 0.0
    older.close()

    with pytest.raises(BackendError, match="lacks probe, load_weights, kv_store, compile"):
        check_contract("incomplete", type("NoMethods", (), {"name": "x", "version": "1", "capabilities": None})())


def test_only_the_reference_is_the_reference_and_host_backends_say_so():
    from llamay_backends.cpu.backend import CpuBackend

    assert ReferenceBackend.capabilities.is_reference and ReferenceBackend.capabilities.device_kind == "host"
    assert not CpuBackend.capabilities.is_reference and CpuBackend.capabilities.device_kind == "host"
    assert Capabilities(ops=(), weight_types=()).device_kind == "gpu"
    with pytest.raises(ValueError):
        Capabilities(ops=(), weight_types=(), device_kind="tpu")


def test_the_fallback_is_the_first_host_backend_that_has_the_ops(monkeypatch):
    from llamay_core.engine import split

    gpu_caps = attrs.evolve(ReferenceBackend.capabilities, device_kind="gpu", is_reference=False)
    lacking = attrs.evolve(ReferenceBackend.capabilities, ops=(G.OP_NAMES | G.SPLIT_OP_NAMES) - {"rope"},
                           is_reference=False)
    made = {"fastgpu": type("FastGpu", (ReferenceBackend,), {"capabilities": gpu_caps})(),
            "partialhost": type("PartialHost", (ReferenceBackend,), {"capabilities": lacking})(),
            "reference": ReferenceBackend()}
    monkeypatch.setattr(split, "fallback_order", lambda primary: ["fastgpu", "partialhost", "reference"])
    name, _ = split.choose_fallback("mine", frozenset({"rope"}), made.__getitem__)
    assert name == "reference"
    monkeypatch.setattr(split, "fallback_order", lambda primary: ["fastgpu", "partialhost"])
    with pytest.raises(BackendError, match="fastgpu: not a host backend; partialhost: lacks rope"):
        split.choose_fallback("mine", frozenset({"rope"}), made.__getitem__)


def test_version_shows_priority_and_why_a_backend_would_or_would_not_be_picked(monkeypatch, tmp_path, capsys):
    from llamay_core.cli.main import main
    from llamay_core.state.records import ConformanceRecord, save_record

    monkeypatch.setenv("LLAMAY_RECORDS_DIR", str(tmp_path))
    caps = attrs.evolve(ReferenceBackend.capabilities, is_reference=False)
    globals()["Checked"] = type("Checked", (ReferenceBackend,), {"name": "checked", "version": "3", "capabilities": caps})
    registry = get_registry()
    mod = types.ModuleType("checked_plugin")

    @hookimpl
    def llamay_register_backends(register):
        register(BackendInfo(name="checked", factory=f"{__name__}:Checked", priority=77))

    mod.llamay_register_backends = llamay_register_backends
    registry.add_plugin(mod, "checked_plugin")
    try:
        monkeypatch.setattr(registry, "backends", {n: registry.backends[n] for n in ("checked", "reference")})
        for model_hash, passed, covers in (("aaa", False, []), ("bbb", True, ["multi_page", "batching"]),
                                           ("ccc", True, [])):
            save_record(ConformanceRecord(backend="checked", backend_version="3", model_hash=model_hash,
                                          passed=passed, level="full", summary=f"summary {model_hash}", covers=covers))
        assert main(["version"]) == 0
    finally:
        registry.remove_plugin("checked_plugin")
    out = capsys.readouterr().out
    assert "checked    ?                priority 77   available (host)" in out
    assert "model aaa: not picked (failed its full check on this model (summary aaa))" in out
    assert "model bbb: picked (passed conformance on this model)" in out
    assert "model ccc: decided by a quick check (its passing record does not cover" in out
    assert "other models: quick check against reference on first use" in out
    assert "priority 0" in out and "always trusted (the reference)" in out
