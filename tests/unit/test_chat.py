"""Chat: family formats when a GGUF has none, the conversation kept in one Context, the REPL
driven through stdin and through a pseudo-terminal."""
from __future__ import annotations

import io
import os
import sys
import types

import pytest

import llamay
from llamay_core.engine.chat_template import CHATML, render_chat, template_source
from llamay_core.errors import UsageError

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]


def fake_model(arch, markers_known=True, template=None):
    def encode(text, add_special=False, parse_special=False):
        return [7] if markers_known and text.startswith("<") else [1, 2, 3]
    metadata = {"tokenizer.chat_template": template} if template else {}
    return types.SimpleNamespace(
        gguf=types.SimpleNamespace(metadata=metadata, architecture=arch), display_name=f"a {arch} model",
        tokenizer=types.SimpleNamespace(encode=encode, decode=lambda ids: "", bos_id=None, eos_id=None))


def test_a_gemma_gguf_without_a_template_gets_gemma_turns():
    text = render_chat(fake_model("gemma3"), MESSAGES)
    assert text == ("<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
                    "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")
    assert "<|im_start|>" not in text


def test_no_known_format_or_missing_markers_refuse_in_one_line():
    with pytest.raises(UsageError, match="knows no chat format for 'llama' models: use it without -chat"):
        template_source(fake_model("llama"))
    with pytest.raises(UsageError, match="vocabulary lacks <start_of_turn>, <end_of_turn>"):
        template_source(fake_model("gemma3", markers_known=False))
    assert template_source(fake_model("llama", template="{{ 'x' }}")) == "{{ 'x' }}"  # the GGUF's own wins


@pytest.fixture(scope="module")
def chat_gguf(tmp_path_factory):
    from tests.support.tiny_gguf import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("chat") / "tiny-chat.gguf",
                            extra_meta={"tokenizer.chat_template": CHATML})


def test_each_turn_prefills_only_what_is_new(chat_gguf):
    from llamay_core.cli.chat_session import ChatSession

    m = llamay.load(chat_gguf, backend="reference", n_ctx=256, n_seq=1)
    passes = []
    run = m.forward.run
    m.forward.run = lambda seq, ids, **kw: passes.append(len(ids)) or run(seq, ids, **kw)
    session = ChatSession(m, system="You are terse.", max_tokens=4)
    first = "".join(session.reply("the cat"))
    after_first = len(session.ctx.tokens)
    assert session.last_stats.cached_tokens == 0
    prompt_pass = passes[0]
    passes.clear()
    "".join(session.reply("the the"))
    stats = session.last_stats
    assert stats.cached_tokens >= after_first - 2 > 0  # the reply may re-tokenize differently at its end
    assert passes[0] == stats.prompt_tokens - stats.cached_tokens < prompt_pass + 12
    assert f"{stats.cached_tokens} cached" in stats.line()
    assert session.messages[1] == {"role": "assistant", "content": first}
    session.clear()
    assert session.ctx.tokens == [] and session.messages == []
    "".join(session.reply("the cat"))
    assert session.last_stats.cached_tokens == 0


def run_cli(monkeypatch, capsys, stdin, *argv):
    from llamay_core.cli.main import main

    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_piped_stdin_is_read_as_turns(chat_gguf, monkeypatch, capsys):
    turns = 'the cat\n/system be brief\n"""the\ncat"""\nthe \\\ncat\n/clear\nhe\n/bye\nnever read\n'
    code, out, err = run_cli(monkeypatch, capsys, turns, "chat", "-m", str(chat_gguf), "-backend", "reference",
                             "-n", "3", "-stats")
    assert code == 0, err
    lines = out.splitlines()
    assert "(system message set)" in lines and "(conversation cleared)" in lines
    stats = [line for line in err.splitlines() if line.startswith("prompt ")]
    assert len(stats) == 4
    assert " cached" not in stats[0] and " cached" in stats[1] and " cached" in stats[2]
    assert " cached" not in stats[3]  # after /clear


def test_run_chat_without_a_prompt_is_the_repl_and_f_dash_reads_stdin(chat_gguf, monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "the cat\n", "run", "-m", str(chat_gguf), "-backend", "reference",
                             "-chat", "-n", "2", "-stats")
    assert code == 0 and err.count("prompt ") == 1
    text = "the cat sat on the mat"
    n_tokens = len(llamay.load(chat_gguf, backend="reference", n_seq=1).tokenize(text, parse_special=True))
    code, out, err = run_cli(monkeypatch, capsys, text, "run", "-m", str(chat_gguf), "-backend", "reference",
                             "-f", "-", "-n", "2", "-stats")
    assert code == 0 and f"prompt {n_tokens} tokens" in err


def test_the_repl_in_a_terminal(chat_gguf):
    pexpect = pytest.importorskip("pexpect")
    env = dict(os.environ, LLAMAY_HOME=str(chat_gguf.parent / "home"), PYTHONUNBUFFERED="1")
    child = pexpect.spawn(sys.executable, ["-m", "llamay_core.cli.main", "chat", "-m", str(chat_gguf),
                                           "-backend", "reference", "-n", "3"],
                          env=env, encoding="utf-8", timeout=60)
    try:
        child.expect("/bye to leave")
        child.expect_exact(">>> ")
        child.sendline("the cat")
        child.expect_exact(">>> ")
        child.sendline('"""the')
        child.expect_exact("... ")
        child.sendline('cat"""')
        child.expect_exact(">>> ")
        child.send("\x1b[A")  # up arrow: readline history brings back the last line
        child.expect_exact('cat"""')
        child.send("\x15")  # Ctrl-U: drop it
        child.sendline("/?")
        child.expect_exact("/clear")
        child.expect_exact(">>> ")
        child.sendline("/bye")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    assert (chat_gguf.parent / "home" / "chat_history").exists()


def test_an_interrupted_reply_keeps_the_context_consistent(chat_gguf):
    from llamay_core.cli.chat_session import ChatSession

    m = llamay.load(chat_gguf, backend="reference", n_ctx=256, ubatch=4, n_seq=1)
    session = ChatSession(m, max_tokens=4)
    run_many = m.forward.run_many
    calls = []

    def interrupted(chunks, **kw):  # Ctrl-C after the first of several prefill passes
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return run_many(chunks, **kw)

    m.forward.run_many = interrupted
    with pytest.raises(KeyboardInterrupt):
        "".join(session.reply("the cat sat on the mat"))
    assert session.ctx.seq.length == len(session.ctx.tokens)
    m.forward.run_many = run_many
    "".join(session.reply("the cat"))
    assert session.ctx.seq.length == len(session.ctx.tokens) > 0
