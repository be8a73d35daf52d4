"""Speculative decoding: cheap drafts verified by the target model in one batched pass.

`config.py` says what to draft with, `ngram.py` and `draft_model.py` are the drafters,
`verify.py` is the accept/reject rule, `decode.py` the loop `Generation` runs, `stats.py` the
`-stats` line and `bench.py` the `llamay bench -spec` comparison.
"""
from llamay_core.speculative.config import SpeculativeConfig, speculative_config

__all__ = ["SpeculativeConfig", "speculative_config"]
