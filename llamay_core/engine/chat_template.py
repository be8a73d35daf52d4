"""Chat prompts from the GGUF's `tokenizer.chat_template`, rendered in a sandboxed jinja2."""
from __future__ import annotations

import datetime
from typing import Any

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from llamay_core.errors import LlamayError, UsageError

# Used when a GGUF has no template: ChatML, the most common format among small models.
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def _raise(message: str) -> None:
    raise TemplateError(message)


def render_chat(model: Any, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                tools: list[dict[str, Any]] | None = None) -> str:
    """The prompt text for `messages` ([{"role", "content"}]) in the model's own chat format."""
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content", ""), str):
            raise UsageError("each message needs a string 'role' and a string 'content'")
    source = model.gguf.metadata.get("tokenizer.chat_template") or CHATML
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    tok = model.tokenizer
    try:
        template = env.from_string(source)
        return template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, tools=tools,
            bos_token=tok.decode([tok.bos_id]) if tok.bos_id is not None and tok.bos_id >= 0 else "",
            eos_token=tok.decode([tok.eos_id]) if tok.eos_id is not None and tok.eos_id >= 0 else "",
        )
    except TemplateError as exc:
        raise LlamayError(f"chat template: {exc}") from None
