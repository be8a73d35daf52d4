"""Each family's chat format, written as the GGUF's jinja template, renders as llama.cpp renders it.

llama.cpp recognises a GGUF template by its markers and renders the family's format itself
(`llama_chat_apply_template`); llamay renders the template. llama.cpp from the `test` extra.
"""
from __future__ import annotations

import pytest

import llamay
from llamay_core.engine.chat_template import render_chat
from tests.support.family_gguf import write_family_gguf
from tests.support.llamacpp_reference import BINDING, MISSING, render_chat as llamacpp_render

if BINDING is None:
    pytest.skip(MISSING, allow_module_level=True)

# The turn formats of each family, as jinja (the markers are what llama.cpp detects).
TEMPLATES = {
    "qwen3": ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
              "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
    "phi3": ("{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}{% endfor %}"
             "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"),
    "granite": ("{% for m in messages %}{{ '<|start_of_role|>' + m['role'] + '<|end_of_role|>' + m['content'] + "
                "'<|end_of_text|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
                "{{ '<|start_of_role|>assistant<|end_of_role|>' }}{% endif %}"),
    "llama": ("{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + "
              "m['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
              "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"),
    "mistral3": ("{% for m in messages %}{% if m['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + m['content'] + "
                 "'[/SYSTEM_PROMPT]' }}{% elif m['role'] == 'user' %}{{ '[INST] ' + m['content'] + '[/INST]' }}"
                 "{% else %}{{ ' ' + m['content'] + '</s>' }}{% endif %}{% endfor %}"),
}
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Name a colour."}]


@pytest.mark.parametrize("arch", sorted(TEMPLATES))
def test_chat_template_renders_as_llamacpp(tmp_path, arch):
    path = tmp_path / "m.gguf"
    write_family_gguf(path, arch, n_layers=1, chat_template=TEMPLATES[arch])
    model = llamay.load(path, backend="reference", n_ctx=64)
    add_ass = arch != "mistral3"  # the v7 format has no assistant header
    assert render_chat(model, MESSAGES, add_generation_prompt=add_ass) == llamacpp_render(TEMPLATES[arch], MESSAGES, add_ass)
