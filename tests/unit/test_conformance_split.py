"""A backend that lacks ops still works: the graph is split and the rest runs on a fallback."""
from __future__ import annotations


import numpy as np
import pytest

from tests.support.plugins import registered_backends
from llamay_backends.reference.backend import ReferenceBackend
from llamay_core.backend_api import Capabilities
from llamay_core.graph import ops as G


def partial(name: str, lacks: set[str], split_ops: bool = True) -> type:
    ops = (G.OP_NAMES - lacks) | (G.SPLIT_OP_NAMES if split_ops else frozenset())
    caps = Capabilities(ops=ops, weight_types=ReferenceBackend.capabilities.weight_types, kv_dtypes={"f32"})
    return type(name, (ReferenceBackend,), {"name": name, "version": "0.0.1", "capabilities": caps})


NoRope = partial("NoRope", {"rope", "silu_mul", "embed"})
NoKv = partial("NoKv", {"kv_write", "attention"})
NoSplit = partial("NoSplit", {"rope"}, split_ops=False)
PARTIAL = {"partial-norope": "NoRope", "partial-nokv": "NoKv", "partial-nosplit": "NoSplit"}


@pytest.fixture(scope="module")
def partial_backends():
    factories = {name: f"{__name__}:{attr}" for name, attr in PARTIAL.items()}
    with registered_backends("partial_backends_plugin", factories, priority=1):
        yield


@pytest.fixture(autouse=True)
def reference_fallback(monkeypatch):
    """Tests use reference as the fallback: the cpu backend's first compile is slow."""
    from llamay_core.engine import split

    monkeypatch.setattr(split, "fallback_order", lambda primary: ["reference"])


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from tests.support.tiny_gguf import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


def test_plan_cuts_where_the_backend_changes_and_hands_over_what_is_read(tiny_path):
    from llamay_core.engine.loader import build_spec
    from llamay_core.engine.split import plan_split
    from llamay_core.files.gguf_file import open_gguf

    gguf = open_gguf(tiny_path)
    graph = build_spec(gguf).graph
    segments = plan_split(graph, NoRope.capabilities.ops, gguf.tensors)
    assert not segments[0].on_primary and segments[0].graph.nodes[0].name == "embed"
    computed: set[str] = set()
    for seg in segments:
        assert set(seg.inputs) <= computed  # only values an earlier segment exported
        assert all(n.name != "rope" for n in seg.graph.nodes) or not seg.on_primary
        computed |= set(seg.exports)
    assert graph.output in computed
    kv = [s.on_primary for s in segments for n in s.graph.nodes if n.name in ("kv_write", "attention")]
    assert all(kv)  # the KV ops stay on the backend that owns the pages


@pytest.mark.parametrize("name", ["partial-norope", "partial-nokv"])
def test_a_split_model_matches_reference(partial_backends, tiny_path, name):
    import llamay

    ref = llamay.load(tiny_path, backend="reference", n_ctx=64)
    split = llamay.load(tiny_path, backend=name, n_ctx=64)
    placement = split.executable.placement()
    assert {b for b, _ in placement} == {name, "reference"}
    ids = list(range(5, 30))
    np.testing.assert_array_equal(split.logits(ids), ref.logits(ids))
    assert split.generate("the", max_tokens=6) == ref.generate("the", max_tokens=6)
    ctx = split.context().prefill("the the")
    child = ctx.fork()
    assert child.generate(" he", max_tokens=4) == split.generate("the the he", max_tokens=4)


def test_conformance_covers_the_split_and_passes(partial_backends, tiny_path):
    from llamay_conformance.runner import Conformance

    report = Conformance(model=str(tiny_path)).check("partial-norope")
    assert report.passed, report.summary()
    assert report.missing_ops == ["embed", "rope", "silu_mul"]
    assert any(c.placement for c in report.cases)
    assert "reference:" in report.placement and "rope" in report.placement
    assert "(split)" in report.markdown()
    from llamay_core.cli.version_cmd import backend_rows

    assert any("lacks embed,rope,silu_mul" in row for row in backend_rows(verbose=False))


def test_a_backend_that_cannot_split_says_why(partial_backends, tiny_path):
    import llamay
    from llamay_core.errors import BackendError

    with pytest.raises(BackendError, match="lacks ops rope and cannot share a graph"):
        llamay.load(tiny_path, backend="partial-nosplit", n_ctx=64)
