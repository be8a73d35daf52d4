"""load(backend=None) never crashes on a backend and never picks one that failed or is unchecked.

Each test registers one misbehaving backend above reference (priority 100) and keeps only it and
reference in the registry, so no other backend's quick check runs.
"""
from __future__ import annotations

import logging
import types

import numpy as np
import pytest

import llamay
from llamay_backends.reference.backend import ReferenceBackend, ReferenceExecutable
from llamay_core.backend_api import Capabilities
from llamay_core.engine.quick_check import compare_with_reference
from llamay_core.hookspecs import hookimpl
from llamay_core.plugins_runtime.manager import get_registry
from llamay_core.plugins_runtime.registry import BackendInfo
from llamay_core.state.records import ConformanceRecord, find_record, find_records, save_record

REF_CAPS = ReferenceBackend.capabilities
# A correct backend that is not the reference: same math, but it must earn its trust.
CANDIDATE_CAPS = Capabilities(ops=REF_CAPS.ops, weight_types=REF_CAPS.weight_types, kv_dtypes=REF_CAPS.kv_dtypes,
                              device_kind="host")


class Candidate(ReferenceBackend):
    name = "candidate"
    version = "7"
    capabilities = CANDIDATE_CAPS
    closed = 0

    def close(self):
        type(self).closed += 1


class RaisesInProbe(Candidate):
    def probe(self):
        raise RuntimeError("driver exploded in probe")


class RaisesInLoadWeights(Candidate):
    def load_weights(self, tensors):
        raise MemoryError("out of device memory")


class RaisesInCompile(Candidate):
    def compile(self, graph, weights, store):
        raise RuntimeError("kernel compile error: line 3")


class RaisingExecutable(ReferenceExecutable):
    def __call__(self, batch):
        if len(batch.page_tables) > 1:
            raise IndexError("batched pass out of range")
        return super().__call__(batch)


class RaisesInPass(Candidate):
    def compile(self, graph, weights, store):
        return RaisingExecutable(graph, weights, store)


class MixesSequencesExecutable(ReferenceExecutable):
    """Right on one sequence; with several, every sequence gets the first one's logits."""

    def __call__(self, batch):
        out = super().__call__(batch)
        if len(batch.page_tables) > 1:
            out = np.repeat(out[:1], out.shape[0], axis=0)
        return out


class WrongWhenBatched(Candidate):
    def compile(self, graph, weights, store):
        return MixesSequencesExecutable(graph, weights, store)


class NanExecutable(ReferenceExecutable):
    def __call__(self, batch):
        out = super().__call__(batch).copy()
        out[-1, 3] = np.nan
        return out


class NanLogits(Candidate):
    def compile(self, graph, weights, store):
        return NanExecutable(graph, weights, store)


@pytest.fixture()
def only(monkeypatch, tmp_path):
    """only(cls): registers `cls` as backend "candidate" (priority 100) next to reference, alone."""
    monkeypatch.setenv("LLAMAY_RECORDS_DIR", str(tmp_path / "records"))
    registry = get_registry()
    added = []

    def register(cls):
        mod = types.ModuleType("candidate_plugin")
        globals()["_current"] = cls

        @hookimpl
        def llamay_register_backends(register):
            register(BackendInfo(name="candidate", factory=f"{__name__}:_current", priority=100))

        mod.llamay_register_backends = llamay_register_backends
        registry.add_plugin(mod, "candidate_plugin")
        added.append("candidate_plugin")
        monkeypatch.setattr(registry, "backends", {n: registry.backends[n] for n in ("candidate", "reference")})
        cls.closed = 0

    yield register
    monkeypatch.undo()
    for name in added:
        registry.remove_plugin(name)


def load(path):
    return llamay.load(path, n_ctx=64, page_size=4)


def skip_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "llamay" and r.levelno == logging.WARNING]


@pytest.mark.parametrize("cls, reason", [
    (RaisesInProbe, "probe raised RuntimeError: driver exploded in probe"),
    (RaisesInLoadWeights, "load_weights raised MemoryError: out of device memory"),
    (RaisesInCompile, "compile raised RuntimeError: kernel compile error: line 3"),
    (RaisesInPass, "the quick check raised IndexError: batched pass out of range"),
    (WrongWhenBatched, "failed the quick check against reference (top-1 token differs from reference"),
    (NanLogits, "failed the quick check against reference (non-finite logits"),
])
def test_a_failing_backend_is_skipped_with_one_warning_and_recorded(only, tiny_model_path, caplog, cls, reason):
    only(cls)
    with caplog.at_level(logging.INFO, logger="llamay"):
        model = load(tiny_model_path)
    assert model.backend_name == "reference"
    warnings = skip_warnings(caplog)
    assert len(warnings) == 1 and warnings[0].startswith(f"backend candidate skipped: {reason}"), warnings
    record = find_record("candidate", "7", model.gguf.file_hash())
    assert record is not None and not record.passed and record.summary in warnings[0]
    if cls is not RaisesInProbe:  # it got as far as holding device resources: they are released
        assert cls.closed == 1

    caplog.clear()  # the next load reads the failing record instead of trying again
    with caplog.at_level(logging.INFO, logger="llamay"):
        assert load(tiny_model_path).backend_name == "reference"
    assert not any("checking candidate" in r.getMessage() for r in caplog.records)
    assert len(skip_warnings(caplog)) == 1


def test_a_correct_backend_passes_the_quick_check_once_and_is_picked(only, tiny_model_path, caplog):
    only(Candidate)
    with caplog.at_level(logging.INFO, logger="llamay"):
        model = load(tiny_model_path)
    assert model.backend_name == "candidate"
    assert [r.getMessage() for r in caplog.records if r.name == "llamay.progress"] == [
        "checking candidate against reference (first use of this model)"]
    assert not skip_warnings(caplog)
    record = find_record("candidate", "7", model.gguf.file_hash())
    assert record.passed and record.level == "quick" and record.trusted_for_auto_pick()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="llamay"):
        assert load(tiny_model_path).backend_name == "candidate"
    assert not caplog.records  # trusted by its record: no second check


def test_a_passing_record_without_coverage_is_not_enough(only, tiny_model_path):
    only(WrongWhenBatched)
    model_hash = llamay.load(tiny_model_path, backend="reference", n_ctx=8).gguf.file_hash()
    save_record(ConformanceRecord(backend="candidate", backend_version="7", model_hash=model_hash, passed=True,
                                  level="full", summary="greedy tokens match", covers=[]))
    assert load(tiny_model_path).backend_name == "reference"
    quick = [r for r in find_records("candidate", "7", model_hash) if r.level == "quick"]
    assert len(quick) == 1 and not quick[0].passed


def test_a_failing_full_record_vetoes_without_running_anything(only, tiny_model_path, caplog):
    only(RaisesInCompile)
    model_hash = llamay.load(tiny_model_path, backend="reference", n_ctx=8).gguf.file_hash()
    save_record(ConformanceRecord(backend="candidate", backend_version="7", model_hash=model_hash, passed=False,
                                  level="full", summary="matmul/Q8_0 NMSE 3e-2", covers=["multi_page", "batching"]))
    with caplog.at_level(logging.WARNING, logger="llamay"):
        assert load(tiny_model_path).backend_name == "reference"
    assert skip_warnings(caplog) == ["backend candidate skipped: failed its full check on this model "
                                     "(matmul/Q8_0 NMSE 3e-2)"]
    assert find_records("candidate", "7", model_hash)[-1].level == "full"  # compile never ran: no new record


def test_quick_check_covers_multi_page_and_batching(only, tiny_model_path):
    only(Candidate)
    for page_size in (1, 4, 16):
        model = llamay.load(tiny_model_path, backend="candidate", n_ctx=64, page_size=page_size)
        result = compare_with_reference(model)
        assert result.passed and sorted(result.covers) == ["batching", "multi_page"]
        assert result.comparison.n > 2 * page_size
        assert model.pool.pages_in_use == 0


def test_an_explicit_broken_backend_is_one_clear_error(only, tiny_model_path):
    from llamay_core.errors import BackendError

    only(RaisesInCompile)
    with pytest.raises(BackendError, match=r"^backend 'candidate' failed in compile: RuntimeError: kernel compile"):
        llamay.load(tiny_model_path, backend="candidate", n_ctx=64)


def test_model_close_calls_the_backend_close_once(only, tiny_model_path):
    only(Candidate)
    with llamay.load(tiny_model_path, backend="candidate", n_ctx=64) as model:
        assert Candidate.closed == 0
    assert Candidate.closed == 1
    model.close()
    assert Candidate.closed == 1


def test_a_dropped_model_is_closed_when_collected(only, tiny_model_path):
    import gc

    only(Candidate)
    llamay.load(tiny_model_path, backend="candidate", n_ctx=64)
    gc.collect()
    assert Candidate.closed == 1
