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
    from llamay_core.graph.ops import EXTENDED_OP_NAMES, OP_NAMES

    cases = grid({"F32", "Q4_K", "Q8_0", "IQ1_S"})
    every_op = set(OP_NAMES) | set(EXTENDED_OP_NAMES)
    assert {c.op for c in cases} | {"kv_write"} == every_op  # attention cases cover kv_write
    assert set(LIMITS) == every_op
    assert all(why for _, why in LIMITS.values())
    assert not any(c.type_name == "IQ1_S" for c in cases)  # exotic types stay out of the grid
    assert len({c.id for c in cases}) == len(cases)


def test_a_case_id_rebuilds_the_same_inputs():
    case = next(c for c in grid({"Q4_K"}) if c.op == "matmul")
    again = find_case(case.id, {"Q4_K"})
    assert find_case("attention/kv-f16/one-full-page-p16/s2", (), {"f16"}).kv_dtype == "f16"
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


def test_reference_is_reported_as_the_reference_not_as_a_pass(tiny_path, capsys):
    from llamay_core.cli.main import main

    code = main(["conformance", "-backend", "reference", "-m", str(tiny_path), "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out[0]["reference"] and out[0]["passed"] is None and not out[0]["cases"]
    assert main(["conformance", "-backend", "reference", "-m", str(tiny_path)]) == 0
    text = capsys.readouterr().out
    assert "**reference: the reference**" in text and "0/0 backends pass (reference is the reference" in text


def test_an_unknown_case_id_is_a_one_line_error(capsys):
    from llamay_core.cli.main import main

    assert main(["conformance", "-backend", "example" if example_installed() else "cpu", "-case", "matmul/F32/nosuch/s0"]) == 2
    err = capsys.readouterr().err
    assert "unknown case id 'matmul/F32/nosuch/s0'" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_page_table_edges_run_for_every_declared_kv_dtype():
    from llamay_conformance.cases import PAGE_EDGES

    cases = grid({"F32"}, kv_dtypes={"f32", "f16", "vq8"})
    attention = [c for c in cases if c.op == "attention"]
    for kv in ("f32", "f16", "vq8"):
        assert {label for label, _, _ in PAGE_EDGES} <= {c.shape for c in attention if c.type_name == f"kv-{kv}"}
    assert not any(c.type_name == "kv-vq8" for c in grid({"F32"}, kv_dtypes={"f32", "f16"}))
    lens, mixed = set(), False
    for case in attention:
        for p in build(case).passes:
            lens |= set(p.batch.kv_lens.tolist())
            mixed |= len(set(np.bincount(p.batch.seq_index).tolist())) > 1  # sequences of different lengths
    assert {16, 32, 48, 17, 33} <= lens and max(lens) >= 10 * 16 and mixed


def test_fork_cases_share_pages_and_tables_are_out_of_order():
    case = next(c for c in grid((), kv_dtypes={"f32"}) if c.shape == "fork-at-p32+t5,7")
    last = build(case).passes[-1].batch
    parent, child = last.page_tables
    assert list(child[:2]) == list(parent[:2]) and child[2] != parent[2]
    assert last.positions[last.seq_index == 1][0] == 32
    reversed_case = next(c for c in grid(()) if c.shape == "reversed-pages-p40+t9")
    table = build(reversed_case).passes[0].batch.page_tables[0]
    assert list(table) == sorted(table, reverse=True)


def test_drawn_layouts_are_fixed_by_the_seed_and_rerunnable():
    drawn = [c for c in grid((), seed=3) if c.shape.startswith("drawn-")]
    assert drawn and [c.id for c in drawn] == [c.id for c in grid((), seed=3) if c.shape.startswith("drawn-")]
    assert {c.id for c in drawn} != {c.id for c in grid((), seed=4) if c.shape.startswith("drawn-")}
    assert find_case(drawn[0].id, ()) == drawn[0]


@pytest.mark.parametrize("dtype", ["f16", "vq8"])
def test_stale_f16_and_vq8_slots_are_poisoned(dtype):
    from llamay_conformance.harness import poison_pages
    from llamay_core.backend_api import KvSpec
    from llamay_core.state.host_pages import HostPageStore

    store = HostPageStore(KvSpec(n_layers=1, n_kv_heads=1, key_dim=32, value_dim=32, page_size=16, max_pages=3,
                                 dtype=dtype))
    poison_pages(store)
    k, v = store.gather(0, np.array([2, 0], np.int32), 20)
    assert np.isfinite(k).all() and (np.abs(k) >= 65504).all() and (np.abs(v) >= 65504).all()


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


def test_batched_sequences_give_the_logits_of_each_alone(tiny_path):
    from llamay_conformance.long_text import SequencePlan
    from llamay_conformance.model_level import batched_logits
    from llamay_core.engine.loader import load_model

    model = load_model(tiny_path, backend="reference", n_ctx=128, n_seq=3, ubatch=20)  # 20 < 7 + 13 + 16
    plan = SequencePlan(lengths=(33, 48, 70), ubatches=(7, 13, 16))
    sequences = plan.sequences(model)
    assert [len(s) for s in sequences] == [33, 48, 70] and sequences[0] != sequences[1]
    for ids, got in zip(sequences, batched_logits(model, sequences, plan.ubatches)):
        np.testing.assert_allclose(got, model.logits(ids), rtol=1e-4, atol=1e-4)
    assert model.pool.pages_in_use == 0


def test_the_packaged_text_stands_in_for_a_missing_gpl(monkeypatch, tmp_path):
    from llamay_conformance import long_text

    monkeypatch.setattr(long_text, "SYSTEM_TEXT", tmp_path / "absent")
    text = long_text.long_text()
    assert text.startswith(long_text.FALLBACK_TEXT.read_text()[:200]) and len(text.split()) > 1500
