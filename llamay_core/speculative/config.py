"""What to draft with: `speculative=` in the API, `-lookup`/`-spec`/`-md` on the command line."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence

import attrs

from llamay_core.errors import UsageError

if TYPE_CHECKING:
    from llamay_core.engine.model import Model

DEFAULT_DRAFT_MAX = 8


class Drafter(Protocol):
    """Proposes tokens that may follow `tokens`; the target model verifies them."""

    name: str

    def propose(self, tokens: Sequence[int], max_drafts: int) -> list[int]: ...

    def close(self) -> None: ...


def _draft_max_valid(instance: object, attribute: attrs.Attribute, value: int) -> None:
    if not 1 <= value <= 64:
        raise UsageError(f"draft_max must be between 1 and 64, got {value}")


@attrs.frozen
class SpeculativeConfig:
    """How one generation drafts. method: "ngram" (prompt lookup) or "draft" (a draft model)."""

    method: str = attrs.field(validator=attrs.validators.in_(("ngram", "draft")))
    draft_max: int = attrs.field(default=DEFAULT_DRAFT_MAX, validator=_draft_max_valid)
    draft_model: Any = None
    ngram_max: int = 4
    ngram_min: int = 1

    def drafter(self, target: "Model") -> Drafter:
        """A fresh drafter for one generation on `target`."""
        if self.method == "ngram":
            from llamay_core.speculative.ngram import NgramDrafter

            return NgramDrafter(self.ngram_max, self.ngram_min)
        from llamay_core.speculative.draft_model import DraftModelDrafter

        return DraftModelDrafter(self.draft_model, target)


def speculative_config(value: Any, target: "Model", draft_max: int = DEFAULT_DRAFT_MAX) -> SpeculativeConfig | None:
    """Read `speculative=`: None/"none", "ngram"/"lookup", a loaded draft Model, a model name or
    path (loaded on the target's backend), or a SpeculativeConfig."""
    if value is None or value is False or value == "none":
        return None
    if isinstance(value, SpeculativeConfig):
        return value
    if value is True or value in ("ngram", "lookup"):
        return SpeculativeConfig("ngram", draft_max=draft_max)
    from llamay_core.engine.model import Model

    if isinstance(value, str):
        import llamay

        value = llamay.load(value, backend=target.backend_name, n_ctx=target.n_ctx)
    if not isinstance(value, Model):
        raise UsageError(f"speculative= expects 'ngram', a draft model or its name, got {type(value).__name__}")
    return SpeculativeConfig("draft", draft_max=draft_max, draft_model=value)
