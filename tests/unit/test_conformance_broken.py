"""Conformance must catch a wrong backend: each deliberately broken backend fails, bench refuses
to print numbers for it, and load(backend=None) does not pick it."""
from __future__ import annotations


import attrs
import numpy as np
import pytest

from tests.support.plugins import registered_backends
from llamay_backends.reference.backend import ReferenceBackend, ReferenceExecutable
from llamay_core.plugins_runtime.manager import get_registry


class BrokenExecutable(ReferenceExecutable):
    """The reference, with one fault injected into one op."""

    fault = ""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.buffers: dict[str, np.ndarray] = {}  # preallocated outputs, as a compiled plan keeps them

    def run_node(self, node, values, batch):
        out = super().run_node(node, values, batch)
        if self.fault == "off_by_small_error" and node.name == "rms_norm":
            return out * np.float32(1.001)  # NMSE 1e-6: invisible in text, 10x over the limit
        if self.fault == "skips_last_row" and node.name == "silu_mul":
            buf = self.buffers.get(node.out)
            if buf is None or buf.shape != out.shape:
                buf = self.buffers[node.out] = np.empty_like(out)
            buf[:-1] = out[:-1]
            return buf
        if self.fault == "nan_on_rare_shape" and node.name == "rope" and int(batch.positions.max()) > 4000:
            out = out.copy()
            out[0, 0] = np.nan  # only past position 4000: no short test would ever see it
        return out


def broken_backend(fault: str, backend_name: str) -> type:
    executable = type(f"{fault}_executable", (BrokenExecutable,), {"fault": fault})

    class Broken(ReferenceBackend):
        name = backend_name
        version = "0.0.1"
        capabilities = attrs.evolve(ReferenceBackend.capabilities, is_reference=False)  # it must earn trust

        def compile(self, graph, weights, store):
            return executable(graph, weights, store)

    return Broken


OffByBackend = broken_backend("off_by_small_error", "broken-offby")
LastRowBackend = broken_backend("skips_last_row", "broken-lastrow")
NanBackend = broken_backend("nan_on_rare_shape", "broken-nan")
BROKEN = {"broken-offby": ("OffByBackend", "rms_norm"), "broken-lastrow": ("LastRowBackend", "silu_mul"),
          "broken-nan": ("NanBackend", "rope")}


@pytest.fixture(scope="module")
def broken_backends():
    """Registers the three broken backends (priority 100: they would be picked first) and removes them."""
    factories = {name: f"{__name__}:{attr}" for name, (attr, _) in BROKEN.items()}
    with registered_backends("broken_backends_plugin", factories, priority=100):
        yield sorted(BROKEN)


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from tests.support.tiny_gguf import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="module")
def suite(tiny_path):
    from llamay_conformance.runner import Conformance

    return Conformance(model=str(tiny_path))


@pytest.fixture(scope="module")
def broken_reports(broken_backends, suite):
    """Each broken backend through the whole suite once (which writes its failing record)."""
    return {name: suite.check(name) for name in broken_backends}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_conformance_fails_each_broken_backend_on_its_op(broken_reports, name):
    report = broken_reports[name]
    assert not report.passed
    failing_ops = {c.op for c in report.cases if not c.passed}
    assert failing_ops == {BROKEN[name][1]}, report.summary()
    from llamay_core.state.records import find_record

    record = find_record(name, "0.0.1", report.model_hash)
    assert record is not None and record.level == "full" and not record.passed
    assert record.details["failed_cases"]


def test_each_fault_fails_for_the_reason_it_should(broken_backends, suite):
    from llamay_conformance.cases import grid

    cases = [c for c in grid({"F32"}) if c.op in ("rms_norm", "silu_mul", "rope")]
    offby = suite.check("broken-offby", model=False, case_ids=[c.id for c in cases if c.op == "rms_norm"])
    assert all("NMSE" in c.message for c in offby.cases)
    nan = suite.check("broken-nan", model=False, case_ids=[c.id for c in cases if c.op == "rope"])
    assert [c.passed for c in nan.cases].count(False) == 2  # only the two long-position cases
    assert all("NaN" in c.message for c in nan.cases if not c.passed)
    lastrow = suite.check("broken-lastrow", model=False, case_ids=[c.id for c in cases if c.op == "silu_mul"])
    assert not any(c.passed for c in lastrow.cases)


def test_bench_refuses_and_load_does_not_pick_a_failing_backend(broken_reports, tiny_path, monkeypatch):
    import llamay
    from llamay_core.bench.gate import check_backend
    from llamay_core.errors import CorrectnessGateError

    model = llamay.load(tiny_path, backend="broken-offby", n_ctx=64)
    with pytest.raises(CorrectnessGateError, match="no numbers printed"):
        check_backend(model)
    registry = get_registry()
    only = {n: registry.backends[n] for n in [*BROKEN, "reference"]}  # no other backend's quick check
    monkeypatch.setattr(registry, "backends", only)
    assert llamay.load(tiny_path, n_ctx=64).backend_name == "reference"


def test_bench_command_exits_3_before_printing_numbers(broken_reports, tiny_path, capsys):
    from llamay_core.cli.main import main

    code = main(["bench", "-m", str(tiny_path), "-backend", "broken-lastrow", "-prompt", "8", "-gen", "4", "-reps", "1"])
    captured = capsys.readouterr()
    assert code == 3
    assert "tok/s" not in captured.out and "disagrees with reference" in captured.err
