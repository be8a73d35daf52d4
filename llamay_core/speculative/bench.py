"""`llamay bench -spec ngram`: speculative against plain decoding on the same prompts.

Two prompts, like the performance page: one whose answer repeats the input (the case drafting is
for) and a summary (the case it is not for, which shows what wasted drafts cost). Both runs are
greedy, so they must produce the same tokens; the table says whether they did.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import attrs

from llamay_core.engine.sampling import SamplingParams
from llamay_core.speculative.config import SpeculativeConfig

if TYPE_CHECKING:
    from llamay_core.engine.model import Model

PARAGRAPH = (
    "The quarterly report states that revenue grew by 14 percent, driven by strong demand for the new "
    "storage line. Operating costs rose by 6 percent, mostly from hiring in the support team. The board "
    "approved a dividend of 40 cents per share and plans to open two regional offices next year. "
    "Inventory levels remained stable, and the company expects growth to continue at a similar pace."
)
PROMPTS = {
    "repeat": f"{PARAGRAPH}\n\n{PARAGRAPH}\n\nRepeat the paragraph above, word for word.",
    "summary": f"{PARAGRAPH}\n\n{PARAGRAPH}\n\nSummarise the text above in two sentences.",
}


def chat_or_plain(model: "Model", text: str) -> str:
    """The prompt in the model's chat template (instruction models follow "repeat" only there)."""
    from llamay_core.errors import LlamayError

    try:
        return model.chat_prompt([{"role": "user", "content": text}])
    except (LlamayError, ValueError, KeyError):
        return text


@attrs.define
class SpecResult:
    prompt: str
    plain_tok_s: float
    spec_tok_s: float
    same_tokens: bool
    draft_line: str
    generated: int

    @property
    def speedup(self) -> float:
        return self.spec_tok_s / self.plain_tok_s if self.plain_tok_s else 0.0


def _decode_rate(model: "Model", prompt: str, n_gen: int, speculative: SpeculativeConfig | None) -> tuple[float, list[int], object]:
    gen = model.start_generation(prompt, SamplingParams(), n_gen, ignore_eos=True, speculative=speculative)
    try:
        tokens = list(gen.tokens())
    finally:
        gen.ctx.close()
    s = gen.stats
    # The first token comes from the prompt pass in both runs; the decode rate counts the rest.
    rate = (s.generated_tokens - 1) / s.generate_seconds if s.generate_seconds > 0 else 0.0
    return rate, tokens, s


def bench_speculative(model: "Model", config: SpeculativeConfig, n_gen: int = 96, reps: int = 1,
                      progress: Callable[[str], None] | None = None) -> list[SpecResult]:
    """Plain and speculative decode of `n_gen` tokens on each prompt; best rate of `reps`."""
    results = []
    for name, text in PROMPTS.items():
        prompt = chat_or_plain(model, text)
        plain_best = spec_best = 0.0
        same = True
        draft_line = ""
        for rep in range(reps):
            plain_rate, plain_tokens, _ = _decode_rate(model, prompt, n_gen, None)
            spec_rate, spec_tokens, stats = _decode_rate(model, prompt, n_gen, config)
            plain_best, spec_best = max(plain_best, plain_rate), max(spec_best, spec_rate)
            same = same and plain_tokens == spec_tokens
            draft_line = stats.speculative.line()
            if progress:
                progress(f"{name} rep {rep + 1}: plain {plain_rate:.1f} tok/s, speculative {spec_rate:.1f} tok/s")
        results.append(SpecResult(name, plain_best, spec_best, same, draft_line, n_gen))
    return results


def report_lines(results: list[SpecResult]) -> list[str]:
    """A markdown table and each prompt's draft line."""
    lines = ["| prompt | plain decode | speculative decode | speedup | same tokens |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.prompt} | {r.plain_tok_s:.1f} tok/s | {r.spec_tok_s:.1f} tok/s | {r.speedup:.2f}x | "
                     f"{'yes' if r.same_tokens else 'NO'} |")
    lines.append("")
    lines.extend(f"{r.prompt}: {r.draft_line}" for r in results)
    return lines
