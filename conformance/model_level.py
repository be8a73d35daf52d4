"""Model level: a backend's tokens on a real model against reference's, and its KV state engine.

Three checks, each against the reference backend on the same file:
- greedy: for fixed prompts, the first N greedy tokens are identical;
- teacher forcing: on golden sequences (llama.cpp's, when the model has them; else reference's
  own greedy continuations) the backend's top-1 token agrees with reference's at >= 99% of
  positions (near-ties may legitimately flip);
- state: a forked context and a snapshot restored into a fresh context generate exactly what
  a fresh prefill of the same text generates, on the backend itself.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from llamay_core.engine.quick_check import first_divergence, greedy_ids

AGREEMENT_LIMIT = 0.99
PROMPTS = ("The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village",
           "Water boils at a temperature of")
STATE_SHARED = "The library opened in 1902 with four thousand books. A fire in 1931 destroyed the east wing."
STATE_QUESTIONS = (" When did the library open?", " What happened in 1931?")
GOLDEN_FILES = {"smollm2:135m": "smollm2.jsonl", "qwen2.5-coder:0.5b": "qwen.jsonl"}


@attrs.frozen
class ModelCheck:
    name: str  # greedy, teacher_forcing, state
    passed: bool
    summary: str


@attrs.frozen
class Effort:
    """How much model-level work to do: the default is small, `-full` is thorough."""

    prompts: int = 2
    greedy_tokens: int = 8
    goldens: int = 4
    state_tokens: int = 4

    @classmethod
    def full(cls) -> "Effort":
        return cls(prompts=len(PROMPTS), greedy_tokens=32, goldens=1000, state_tokens=16)


def goldens_dir() -> Path:
    """$LLAMAY_GOLDENS_DIR, else shared/goldens next to the repository checkout."""
    override = os.environ.get("LLAMAY_GOLDENS_DIR")
    return Path(override) if override else Path(__file__).resolve().parents[2] / "shared" / "goldens"


def golden_sequences(model_path: Path) -> list[dict]:
    from llamay_core.files.model_names import local_path

    for name, filename in GOLDEN_FILES.items():
        try:
            same = local_path(name).resolve() == Path(model_path).resolve()
        except Exception:
            same = False
        path = goldens_dir() / filename
        if same and path.exists():
            return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return []


class ReferenceModel:
    """The reference model on one file, with its results cached across backends."""

    def __init__(self, path: Path) -> None:
        from llamay_core.engine.loader import load_model

        self.path = path
        self.model = load_model(path, backend="reference", n_ctx=512, n_seq=4)
        self._greedy: dict[tuple[str, int], list[int]] = {}
        self._top1: dict[tuple[int, ...], np.ndarray] = {}

    def prompt_ids(self, prompt: str) -> list[int]:
        return self.model.tokenize(prompt, add_special=True, parse_special=True)

    def greedy(self, prompt: str, n: int) -> list[int]:
        key = (prompt, n)
        if key not in self._greedy:
            self._greedy[key] = greedy_ids(self.model, self.prompt_ids(prompt), n)
        return self._greedy[key]

    def top1(self, ids: list[int]) -> np.ndarray:
        key = tuple(ids)
        if key not in self._top1:
            self._top1[key] = np.argmax(self.model.logits(ids), axis=-1)
        return self._top1[key]

    def sequences(self, effort: Effort) -> list[tuple[list[int], int]]:
        """(full ids, prompt length) to teacher-force: goldens, else reference continuations."""
        goldens = golden_sequences(self.path)[:effort.goldens]
        if goldens:
            return [(g["full_ids"], len(g["prompt_ids"])) for g in goldens]
        out = []
        for prompt in PROMPTS[:effort.prompts]:
            ids = self.prompt_ids(prompt)
            out.append((ids + self.greedy(prompt, effort.greedy_tokens), len(ids)))
        return out


def check_greedy(model: Any, ref: ReferenceModel, effort: Effort) -> ModelCheck:
    for prompt in PROMPTS[:effort.prompts]:
        want = ref.greedy(prompt, effort.greedy_tokens)
        got = greedy_ids(model, ref.prompt_ids(prompt), effort.greedy_tokens)
        at = first_divergence(want, got)
        if at is not None:
            return ModelCheck("greedy", False, f"prompt {prompt!r}: token {at} is {got[at]} "
                                               f"{model.detokenize([got[at]])!r}, reference {want[at]} "
                                               f"{model.detokenize([want[at]])!r}")
    return ModelCheck("greedy", True, f"{effort.prompts} prompts x {effort.greedy_tokens} tokens equal reference")


def check_teacher_forcing(model: Any, ref: ReferenceModel, effort: Effort) -> ModelCheck:
    agree = total = 0
    for full, n in ref.sequences(effort):
        want = ref.top1(full)[n - 1:len(full) - 1]
        got = np.argmax(model.logits(full), axis=-1)[n - 1:len(full) - 1]
        agree += int((got == want).sum())
        total += len(want)
    rate = agree / max(total, 1)
    return ModelCheck("teacher_forcing", rate >= AGREEMENT_LIMIT,
                      f"top-1 agrees with reference at {agree}/{total} positions ({rate:.1%}, need {AGREEMENT_LIMIT:.0%})")


def check_state(model: Any, effort: Effort, scratch: Path) -> ModelCheck:
    """Fork and snapshot/restore on this backend generate what a fresh prefill generates."""
    n = effort.state_tokens
    base = model.context().prefill(STATE_SHARED)
    try:
        for q in STATE_QUESTIONS:
            child = base.fork()
            forked = child.generate(q, max_tokens=n, ignore_eos=True)
            child.close()
            fresh = model.generate(STATE_SHARED + q, max_tokens=n, ignore_eos=True)
            if forked != fresh:
                return ModelCheck("state", False, f"forked context generated {forked!r}, fresh prefill {fresh!r}")
        snap = scratch / "conformance-state.kv"
        base.snapshot(snap)
        restored = model.restore(snap)
        try:
            again = restored.generate(STATE_QUESTIONS[0], max_tokens=n, ignore_eos=True)
        finally:
            restored.close()
            snap.unlink(missing_ok=True)
        fresh = model.generate(STATE_SHARED + STATE_QUESTIONS[0], max_tokens=n, ignore_eos=True)
        if again != fresh:
            return ModelCheck("state", False, f"restored snapshot generated {again!r}, fresh prefill {fresh!r}")
    finally:
        base.close()
    return ModelCheck("state", True, f"fork x{len(STATE_QUESTIONS)} and snapshot/restore equal fresh prefill")


def run_model_level(backend_name: str, ref: ReferenceModel, effort: Effort, scratch: Path) -> tuple[list[ModelCheck], str]:
    """The three checks on `backend_name`; also returns where each op ran when the graph was split."""
    from llamay_core.engine.loader import load_model

    try:
        model = load_model(ref.path, backend=backend_name, n_ctx=512, n_seq=4)
    except Exception as exc:  # a backend that cannot even load the model fails, with the reason
        return [ModelCheck("load", False, f"{type(exc).__name__}: {exc}")], ""
    placement = ""
    if len(model.placement()) > 1:  # split across backends: say what ran where
        placement = " | ".join(f"{b}:{'+'.join(sorted(set(ops)))}" for b, ops in model.placement())
    checks = []
    for check in (lambda: check_greedy(model, ref, effort), lambda: check_teacher_forcing(model, ref, effort),
                  lambda: check_state(model, effort, scratch)):
        try:
            checks.append(check())
        except Exception as exc:
            name = ("greedy", "teacher_forcing", "state")[len(checks)]
            checks.append(ModelCheck(name, False, f"raised {type(exc).__name__}: {exc}"))
    return checks, placement
