"""The long real text the model level scores, and how it is cut into batched sequences.

The text is the GPL-3 as Debian ships it (CI runs on Debian); where it is missing, the Apache-2.0
licence text kept in this package. Both are ordinary English prose of the kind a small model
predicts well, so a wrong backend shows up as a large KL divergence rather than as noise.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

SYSTEM_TEXT = Path("/usr/share/common-licenses/GPL-3")
FALLBACK_TEXT = Path(__file__).with_name("texts") / "apache-2.0.txt"


def long_text() -> str:
    """The scored text: the system's GPL-3 when present, else the packaged fallback."""
    path = SYSTEM_TEXT if SYSTEM_TEXT.is_file() else FALLBACK_TEXT
    return path.read_text(encoding="utf-8")


@attrs.frozen
class SequencePlan:
    """Sequences of different lengths fed together, each `ubatches[i]` tokens per pass.

    Different ubatch sizes put the sequences out of step, so passes mix lengths and cut pages
    in the middle; lengths that are multiples of the page size end on a full last page.
    """

    lengths: tuple[int, ...]
    ubatches: tuple[int, ...]

    @property
    def positions(self) -> int:
        return sum(self.lengths)

    def sequences(self, model: Any) -> list[list[int]]:
        """Token ids per sequence: BOS (when the model uses one), then disjoint runs of the text."""
        prefix = model.tokenize("", add_special=True)
        ids = model.tokenize(long_text(), add_special=False)
        out, at = [], 0
        for n in self.lengths:
            body = n - len(prefix)
            if at + body > len(ids):
                raise ValueError(f"the scored text has {len(ids)} tokens, too few for {self.lengths}")
            out.append(prefix + ids[at:at + body])
            at += body
        return out
