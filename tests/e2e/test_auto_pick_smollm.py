"""load(backend=None) on a real model: the first available backend passes the quick check (which
covers multi-page contexts and batching) and is picked; the second load trusts its record."""
from __future__ import annotations

import pytest

import llamay
from llamay_core.state.records import find_record


@pytest.mark.slow
def test_the_best_backend_earns_its_pick_on_smollm(smollm_path, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("LLAMAY_RECORDS_DIR", str(tmp_path))
    with caplog.at_level("INFO", logger="llamay"):
        model = llamay.load(smollm_path, n_ctx=256)
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    if model.backend.capabilities.is_reference:
        pytest.skip("no other backend is available here")
    record = find_record(model.backend_name, str(model.backend.version), model.gguf.file_hash())
    assert record.passed and record.trusted_for_auto_pick(), record
    caplog.clear()
    with caplog.at_level("INFO", logger="llamay"):
        assert llamay.load(smollm_path, n_ctx=256).backend_name == model.backend_name
    assert not caplog.records
