"""The calibration holds: the first-party test backends (tests/backends) through the whole suite.

An 8-bit-activation backend (a correct way to compute) passes and is trusted; every backend with
a realistic bug fails, for the reason it should, and `llamay bench` refuses it with exit 3.
"""
from __future__ import annotations

import pytest

from tests.backends.variants import VARIANTS
from tests.unit.test_conformance_suite import needs_example

pytestmark = needs_example

BROKEN = sorted(name for name, (_, passes) in VARIANTS.items() if not passes)


@pytest.fixture(scope="module")
def test_backends():
    from tests.backends import plugin

    plugin.register()
    yield
    plugin.unregister()


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from tests.support.tiny_gguf import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="module")
def reports(test_backends, tiny_path):
    """Every test backend through the whole suite once (which writes its record)."""
    from llamay_conformance.runner import Conformance

    suite = Conformance(model=str(tiny_path))
    return {name: suite.check(name) for name in VARIANTS}


def test_int8_activations_pass_and_are_trusted(reports):
    from llamay_core.state.records import find_record

    report = reports["test-int8"]
    assert report.passed, report.summary()
    kld = next(m for m in report.model_checks if m.name == "kld")
    assert 0 < kld.metrics["mean_kld"]  # it really computes differently from reference
    record = find_record("test-int8", "0.0.1", report.model_hash)
    assert record.passed and record.trusted_for_auto_pick()


@pytest.mark.parametrize("name", BROKEN)
def test_each_broken_backend_fails_and_is_not_trusted(reports, name):
    from llamay_core.state.records import find_record

    report = reports[name]
    assert not report.passed
    record = find_record(name, "0.0.1", report.model_hash)
    assert record is not None and not record.passed and not record.trusted_for_auto_pick()


def test_each_bug_is_caught_where_it_lives(reports):
    def failing(name):
        return {c.id.split("/")[2] for c in reports[name].cases if not c.passed}

    skip = failing("test-skip-full-page")
    assert {"one-full-page-p16", "full-pages-p32+t16", "decode-to-full-page-p31+t1"} <= skip
    assert "last-page-1-slot-p17" not in skip  # a partial last page is read right
    assert {c.type_name for c in reports["test-skip-full-page"].cases if not c.passed} == {"kv-f32", "kv-f16"}
    assert failing("test-neox-as-normal") == {"neox-h3x64-p0", "neox-h2x128-rot64-p32760"}
    scale = [c for c in reports["test-batch-scale"].cases if not c.passed]
    assert scale and all(c.op == "matmul" and "solo" in c.shape for c in scale)
    assert any("alone differs from the same row" in c.message for c in scale)
    raised = [c for c in reports["test-raises"].cases if not c.passed]
    assert raised and all(c.message.startswith("raised RuntimeError") for c in raised)
    model = {m.name: m for m in reports["test-raises"].model_checks}
    assert not model["kld"].passed and "raised" in model["kld"].summary
    assert not {m.name: m for m in reports["test-skip-full-page"].model_checks}["kld"].passed


@pytest.mark.parametrize("name", BROKEN)
def test_bench_refuses_each_broken_backend(reports, tiny_path, name, capsys):
    from llamay_core.cli.main import main

    code = main(["bench", "-m", str(tiny_path), "-backend", name, "-prompt", "8", "-gen", "4", "-reps", "1"])
    captured = capsys.readouterr()
    assert code == 3, captured.err
    assert "tok/s" not in captured.out and "disagrees with reference" in captured.err
