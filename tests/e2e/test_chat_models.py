"""`llamay chat` on the known models, each in its own chat format, turns read from stdin."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.model

MARKERS = ("<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>")


def chat(model_path, turns, *flags):
    proc = subprocess.run([sys.executable, "-m", "llamay_core.cli.main", "chat", "-m", str(model_path),
                           "-backend", "reference", "-stats", *flags],
                          input=turns, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stdout, [line for line in proc.stderr.splitlines() if line.startswith("prompt ")]


def test_smollm2_answers_and_keeps_the_conversation_cached(smollm_path):
    out, stats = chat(smollm_path, "What is the capital of France?\nAnd of Italy?\n", "-n", "8")
    assert "Paris" in out.splitlines()[0]
    assert not any(m in out for m in MARKERS)
    assert len(stats) == 2 and " cached" not in stats[0] and " cached" in stats[1]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen2.5-coder:0.5b", "gemma3:270m"])
def test_the_other_models_chat_in_their_own_format(name):
    from tests.conftest import require_model

    out, stats = chat(require_model(name), "What is the capital of France?\n", "-n", "12")
    assert out.strip() and not any(m in out for m in MARKERS)
    assert len(stats) == 1
