"""The model level's state check: fork and snapshot/restore continue as a fresh prefill does,
and a fork whose pages hold the wrong tokens fails it."""
from __future__ import annotations

import pytest

import llamay
from llamay_conformance.model_level import Effort, check_state
from llamay_core.engine.context import Context


@pytest.fixture()
def model(tmp_path):
    from tests.support.family_gguf import write_family_gguf

    # logits of std ~3, so most steps are decisive (a tie-only model could not fail the check)
    return llamay.load(write_family_gguf(tmp_path / "llama.gguf", "llama", n_layers=2, d=64), backend="reference")


def test_a_correct_backend_passes(model, tmp_path):
    result = check_state(model, Effort(), tmp_path)
    assert result.passed, result.summary


def test_a_fork_with_the_wrong_pages_fails(model, tmp_path, monkeypatch):
    def wrong_pages(self):  # the child claims the parent's tokens but computed other ones
        child = self.model.context()
        child.extend([t ^ 1 for t in self.tokens])
        child.tokens[:] = list(self.tokens)
        return child

    monkeypatch.setattr(Context, "fork", wrong_pages)
    result = check_state(model, Effort(), tmp_path)
    assert not result.passed and result.summary.startswith("forked context, step "), result.summary
