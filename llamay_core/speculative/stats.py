"""What speculative decoding did for one generation: the `-stats` draft line."""
from __future__ import annotations

import attrs


@attrs.define
class SpeculativeStats:
    method: str
    draft_max: int
    generated: int = 0
    target_passes: int = 0  # including the prompt pass, which yields the first token
    drafted: int = 0
    accepted: int = 0
    draft_seconds: float = 0.0

    @property
    def tokens_per_pass(self) -> float:
        return self.generated / self.target_passes if self.target_passes else 0.0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def line(self) -> str:
        """`draft ngram · 96 tokens in 15 passes (6.40x) · 81/88 drafts accepted (92%) · ...`."""
        tpp = self.tokens_per_pass
        return (f"draft {self.method} · {self.generated} tokens in {self.target_passes} passes ({tpp:.2f}x) · "
                f"{self.accepted}/{self.drafted} drafts accepted ({100 * self.acceptance:.0f}%) · "
                f"{tpp:.2f} tokens per target pass · lookahead {self.draft_max}")
