"""Speculative decoding on the tiny model: same tokens as plain decoding, a clean cache after
rejections, and an accept/reject rule that preserves the target distribution."""
from __future__ import annotations

import math

import numpy as np
import pytest

import llamay
from llamay_core.engine.sampling import SamplingParams
from llamay_core.errors import ContextOverflowError
from llamay_core.speculative import SpeculativeConfig
from llamay_core.speculative.ngram import NgramDrafter
from llamay_core.speculative.verify import accept_or_resample

PROMPT = "the cat sat on the mat. the cat sat on the mat. the cat sat on"


@pytest.fixture()
def tiny(tiny_model_path):
    return llamay.load(tiny_model_path, backend="reference", n_ctx=256, n_seq=4)


@pytest.fixture()
def other_tiny(tmp_path):
    from tests.support.tiny_gguf import write_tiny_llama

    return llamay.load(write_tiny_llama(tmp_path / "other.gguf", seed=7), backend="reference", n_ctx=256, n_seq=2)


class ScriptedDrafter:
    """Drafts the known greedy continuation with every third position wrong: both paths get run."""

    name = "scripted"

    def __init__(self, prompt_len: int, answer: list[int], n_vocab: int) -> None:
        self.prompt_len, self.answer, self.n_vocab = prompt_len, answer, n_vocab

    def propose(self, tokens, max_drafts):
        done = len(tokens) - self.prompt_len
        drafts = list(self.answer[done:done + max_drafts])
        return [(t + 1) % self.n_vocab if (done + i) % 3 == 2 else t for i, t in enumerate(drafts)]

    def close(self):
        pass


def _ids(model, prompt, n, **kw):
    gen = model.start_generation(prompt, SamplingParams(**kw.pop("params", {})), n, **kw)
    try:
        return list(gen.tokens()), gen
    finally:
        if "context" not in kw:
            gen.ctx.close()


def test_ngram_greedy_equals_plain(tiny):
    plain, _ = _ids(tiny, PROMPT, 40)
    spec, gen = _ids(tiny, PROMPT, 40, speculative="ngram")
    assert spec == plain
    s = gen.stats.speculative
    assert s.generated == 40 and s.drafted > 0 and s.target_passes < 40
    # Each pass yields its accepted drafts plus one token of the target's own (the last may be cut).
    assert s.generated in (s.accepted + s.target_passes, s.accepted + s.target_passes - 1)
    assert s.line().startswith("draft ngram · 40 tokens in ")
    assert tiny.pool.pages_in_use == 0


def test_draft_model_greedy_equals_plain(tiny, other_tiny):
    plain, _ = _ids(tiny, PROMPT, 30)
    self_draft, gen = _ids(tiny, PROMPT, 30, speculative=tiny)
    assert self_draft == plain
    assert gen.stats.speculative.acceptance > 0.9
    other_draft, gen = _ids(tiny, PROMPT, 30, speculative=SpeculativeConfig("draft", draft_max=5, draft_model=other_tiny))
    assert other_draft == plain
    assert gen.stats.speculative.drafted > 0


@pytest.mark.parametrize("draft_max", [1, 3, 8])
def test_rejections_leave_no_trace_in_cache(tiny, monkeypatch, draft_max):
    plain, _ = _ids(tiny, PROMPT, 25)
    prompt_ids = tiny.tokenize(PROMPT)
    config = SpeculativeConfig("ngram", draft_max=draft_max)
    monkeypatch.setattr(SpeculativeConfig, "drafter",
                        lambda self, target: ScriptedDrafter(len(prompt_ids), plain, target.hparams.n_vocab))
    ctx = tiny.context()
    spec, gen = _ids(tiny, prompt_ids, 25, speculative=config, context=ctx)
    assert spec == plain
    stats = gen.stats.speculative
    assert stats.accepted < stats.drafted
    # The cache holds the prompt and every generated token but the last, as after plain decoding.
    assert ctx.tokens == prompt_ids + plain[:-1]
    assert ctx.seq.length == len(ctx.tokens)
    assert len(ctx.seq.pages) == math.ceil(len(ctx.tokens) / tiny.pool.page_size)
    assert tiny.pool.pages_in_use == len(ctx.seq.pages)
    fresh = tiny.context()
    np.testing.assert_allclose(ctx.extend([plain[-1]]), fresh.extend(prompt_ids + plain), rtol=1e-4, atol=1e-4)
    ctx.close()
    fresh.close()
    assert tiny.pool.pages_in_use == 0


def test_truncate_after_verify_pass_equals_fresh_context(tiny):
    ids = tiny.tokenize(PROMPT)
    ctx = tiny.context()
    ctx.extend(ids)
    rows = ctx.extend_all([5, 6, 7, 8, 9] * 4)
    assert rows.shape == (20, tiny.hparams.n_vocab)
    pages_before = tiny.pool.pages_in_use
    ctx.truncate(len(ids) + 2)
    assert tiny.pool.pages_in_use < pages_before  # whole pages past the kept tokens are released
    fresh = tiny.context()
    np.testing.assert_allclose(ctx.extend([11, 12]), fresh.extend(ids + [5, 6, 11, 12]), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rows[1], tiny.logits(ids + [5, 6])[-1], rtol=1e-4, atol=1e-4)


def test_sampled_speculative_runs_and_is_seeded(tiny, other_tiny):
    params = {"temperature": 0.8, "seed": 3}
    a, gen = _ids(tiny, PROMPT, 20, params=dict(params), speculative=other_tiny)
    b, _ = _ids(tiny, PROMPT, 20, params=dict(params), speculative=other_tiny)
    assert a == b and len(a) == 20
    assert gen.stats.speculative.target_passes <= 20


def test_stops_at_max_tokens_and_context_end(tiny):
    for n in (1, 2, 9):
        plain, _ = _ids(tiny, PROMPT, n)
        spec, _ = _ids(tiny, PROMPT, n, speculative="ngram")
        assert spec == plain and len(spec) == n
    small = llamay.load(tiny.gguf.path, backend="reference", n_ctx=40, n_seq=2)
    with pytest.raises(ContextOverflowError):
        _ids(small, PROMPT, 60, speculative="ngram")


@pytest.mark.parametrize("with_q", [False, True])
def test_accept_reject_rule_preserves_distribution(with_q):
    rng = np.random.default_rng(0)
    p = np.array([0.05, 0.4, 0.25, 0.2, 0.1])
    q = np.array([0.3, 0.1, 0.4, 0.1, 0.1]) if with_q else None
    n = 40000
    counts = np.zeros(5)
    for _ in range(n):
        draft = int(rng.choice(5, p=q)) if with_q else 2
        token, _ = accept_or_resample(p, draft, rng, q)
        counts[token] += 1
    # Chi-square against p, 4 degrees of freedom: 18.5 is the 0.1% tail.
    chi2 = float(((counts - n * p) ** 2 / (n * p)).sum())
    assert chi2 < 18.5, (counts / n, chi2)


def test_greedy_rule_accepts_only_the_argmax():
    rng = np.random.default_rng(0)
    p = np.array([0.0, 1.0, 0.0])
    assert accept_or_resample(p, 1, rng) == (1, True)
    assert accept_or_resample(p, 2, rng) == (1, False)


def test_ngram_drafter_follows_the_last_occurrence():
    d = NgramDrafter(ngram_max=3, ngram_min=2)
    toks = [1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2]
    assert d.propose(toks, 3) == [3, 7, 8]  # the most recent "1 2" was followed by 3 7 8
    assert d.propose(toks + [3], 2) == [7, 8]  # "1 2 3" (longest) wins
    assert d.propose([4, 4], 5) == []  # "4 4" never occurred before: no draft
    assert d.propose([6, 6, 6], 4) == [6, 6, 6, 6]  # a repeat shorter than the lookahead still fills it
    assert d.propose([5, 6], 0) == []
