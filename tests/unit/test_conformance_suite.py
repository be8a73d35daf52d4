"""The conformance suite itself: the grid, the error measure, the command, the example backend."""
from __future__ import annotations

import json
from importlib import metadata

import numpy as np
import pytest

from llamay_conformance.cases import build, find_case, grid
from llamay_conformance.harness import nmse
from llamay_conformance.limits import LIMITS


def example_installed() -> bool:
    return any(ep.name == "example" for ep in metadata.entry_points(group="llamay"))


needs_example = pytest.mark.skipif(not example_installed(),
                                   reason="pip install plugins/example_backend (.ci/run does)")


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from tests.support.tiny_gguf import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


def test_every_op_has_cases_and_a_documented_limit():
    from llamay_core.graph.ops import OP_NAMES

    cases = grid({"F32", "Q4_K", "Q8_0", "IQ1_S"})
    assert {c.op for c in cases} | {"kv_write"} == set(OP_NAMES)  # attention cases cover kv_write
    assert set(LIMITS) == set(OP_NAMES)
    assert all(why for _, why in LIMITS.values())
    assert not any(c.type_name == "IQ1_S" for c in cases)  # exotic types stay out of the grid
    assert len({c.id for c in cases}) == len(cases)


def test_a_case_id_rebuilds_the_same_inputs():
    case = next(c for c in grid({"Q4_K"}) if c.op == "matmul")
    again = find_case(case.id, {"Q4_K"})
    assert again == case
    a, b = build(case), build(again)
    np.testing.assert_array_equal(a.tensors["w"].data, b.tensors["w"].data)
    reseeded = find_case(case.id.rsplit("/s", 1)[0] + "/s7", {"Q4_K"})
    assert reseeded.seed == 7 and not np.array_equal(build(reseeded).tensors["w"].data, a.tensors["w"].data)


def test_nmse_is_relative_and_poison_rows_are_nan():
    b = np.ones((2, 4), np.float32)
    assert nmse(b, b) == 0.0
    assert nmse(b * 1.001, b) == pytest.approx(1e-6, rel=1e-3)
    built = build(next(c for c in grid(()) if c.op == "silu_mul"))
    table = built.tensors["in.gate"].data
    n = built.passes[0].n_rows
    assert np.isfinite(table[:n]).all() and np.isnan(table[n:]).all()


def test_reference_passes_against_itself_through_the_command(tiny_path, capsys):
    from llamay_core.cli.main import main

    code = main(["conformance", "-backend", "reference", "-m", str(tiny_path), "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out[0]["passed"]
    assert {row["op"] for row in out[0]["ops"]} >= {"matmul", "attention", "rope"}


def test_unknown_backend_is_a_one_line_error(capsys):
    from llamay_core.cli.main import main

    assert main(["conformance", "-backend", "nosuch", "-level", "op"]) == 2
    assert "unknown backend 'nosuch'" in capsys.readouterr().err


@needs_example
def test_the_example_plugin_is_discovered_from_its_own_distribution():
    from llamay_core.plugins_runtime.manager import get_registry

    registry = get_registry()
    info = registry.backends["example"]
    assert registry.distributions[info.plugin] == "llamay-example-backend"
    assert not info.create().__module__.startswith("llamay_backends")


@needs_example
def test_the_example_backend_passes_conformance_and_is_recorded(tiny_path, capsys):
    from llamay_core.cli.main import main
    from llamay_core.state.records import find_record

    code = main(["conformance", "-backend", "example", "-m", str(tiny_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "| matmul | Q4_K |" in out and "**example: PASS**" in out
    from llamay_core.files.gguf_file import file_identity

    record = find_record("example", "0.1.0", file_identity(tiny_path))
    assert record.passed and record.level == "full" and record.details["ops"]
    main(["version"])
    assert "PASS full on model" in capsys.readouterr().out


@needs_example
def test_a_failing_case_prints_its_rerun_command(capsys, monkeypatch):
    from llamay_conformance import limits
    from llamay_core.cli.main import main

    monkeypatch.setitem(limits.LIMITS, "matmul", (0.0, "test: nothing passes"))
    case = next(c for c in grid({"Q8_0"}) if c.op == "matmul" and c.type_name == "Q8_0")
    code = main(["conformance", "-backend", "example", "-case", case.id])
    out = capsys.readouterr().out
    assert code == 1
    assert f"`{case.id}`" in out and "llamay conformance -backend example -case ID" in out
