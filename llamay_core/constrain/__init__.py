"""Constrained output: JSON Schema, GBNF/Lark grammars and regexes, enforced token by token.

`engines.py` adapts llguidance to llamay's tokenizer, `mask.py` applies its allowed-token bitmask
to the logits in one vectorized step, `sources.py` turns `-json-schema`, `-grammar`, `-regex`
and OpenAI's `response_format` into a Constraint. See docs/constrained-output.md.
"""
from llamay_core.constrain.engines import Constraint, ConstraintStats
from llamay_core.constrain.sources import constraint_from_options, constraint_from_response_format

__all__ = ["Constraint", "ConstraintStats", "constraint_from_options", "constraint_from_response_format"]
