"""qwen2 and gemma3 against llama.cpp's perplexity anchors (slow: run with -m slow when pulled)."""
from __future__ import annotations

import re

import pytest

from tests.e2e.test_ppl_and_cli import GPL3, llamay_cli
from tests.conftest import require_model

pytestmark = [pytest.mark.model, pytest.mark.slow]

# ../shared/anchors/README.md: llama-perplexity -c 512 on GPL-3, 14 chunks
ANCHORS = {"qwen2.5-coder:0.5b": 5.3158, "gemma3:270m": 13.8844}


@pytest.mark.parametrize("name", sorted(ANCHORS))
def test_ppl_within_one_percent(name):
    path = require_model(name)
    if not GPL3.exists():
        pytest.skip("GPL-3 text not on this machine")
    proc = llamay_cli("ppl", "-m", str(path), "-f", str(GPL3), "-c", "512", timeout=3600)
    assert proc.returncode == 0, proc.stderr
    ppl = float(re.search(r"PPL = ([0-9.]+)", proc.stdout).group(1))
    assert abs(ppl - ANCHORS[name]) / ANCHORS[name] < 0.01, ppl


def test_gemma3_adds_bos_and_parses_turn_tokens():
    import llamay

    m = llamay.load(require_model("gemma3:270m"), backend="reference", n_ctx=64)
    ids = m.tokenize("<start_of_turn>user", parse_special=True)
    assert ids[0] == 2 and len(ids) == 3
