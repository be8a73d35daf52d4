"""The command line as llama.cpp and ollama users type it: exact flags, aliases, help, names."""
from __future__ import annotations

import argparse

import pytest

from llamay_core.cli.main import build_parser, main
from llamay_core.files import model_names


@pytest.fixture(scope="module")
def parser():
    return build_parser()[0]


def parse(parser, *argv):
    args, extras = parser.parse_known_args(list(argv))
    assert not extras, extras
    return args


def test_llama_cpp_short_flags_are_not_split_or_prefix_matched(parser, capsys):
    args = parse(parser, "run", "-ngl", "99", "-p", "x")
    assert args.n == 64 and args.prompt == "x"  # not "-n gl"
    assert "-ngl 99 ignored" in capsys.readouterr().err
    args = parse(parser, "run", "-cnv")
    assert args.cnv and args.ctx is None  # not "-ctx nv"
    assert parse(parser, "run", "-sys", "be brief").system == "be brief"
    assert parse(parser, "run", "--system-prompt", "hi").system == "hi"
    assert parse(parser, "run", "-m", "SmolLM2").model == "smollm2:135m"


@pytest.mark.parametrize("argv, model", [
    (["-hf", "someone/repo/file.Q4_0.gguf"], "hf:someone/repo/file.Q4_0.gguf"),
    (["-hf", "someone/repo:Q8_0"], "hf:someone/repo:Q8_0"),
    (["-hfr", "someone/repo", "-hff", "x.gguf"], "hf:someone/repo/x.gguf"),
    (["-hff", "x.gguf", "-hfr", "someone/repo"], "hf:someone/repo/x.gguf"),
    (["-hf", "someone/repo:Q8_0", "-hff", "x.gguf"], "hf:someone/repo/x.gguf"),
    (["-hfr", "someone/repo"], "hf:someone/repo"),
])
def test_hugging_face_flags_name_an_hf_model(parser, argv, model):
    assert parse(parser, "run", *argv, "-p", "x").model == model


def test_llama_cpp_aliases_share_one_meaning(parser):
    a = parse(parser, "run", "-c", "512", "-s", "7", "-t", "2", "--temp", "0.5", "--top-k", "5", "--top-p", "0.9",
              "--min-p", "0.1", "--repeat-penalty", "1.1", "--n-predict", "-1", "--grammar", "root ::= \"a\"")
    assert (a.ctx, a.seed, a.threads, a.temp, a.top_k, a.top_p, a.min_p, a.repeat_penalty, a.n) == \
        (512, 7, 2, 0.5, 5, 0.9, 0.1, 1.1, -1)
    assert a.grammar == 'root ::= "a"'
    assert parse(parser, "run", "--ctx-size", "256").ctx == 256
    assert parse(parser, "run", "-ctk", "q8_0", "-ctv", "q8_0").kv == "vq8"
    assert parse(parser, "bench", "-p", "64", "-n", "8", "-r", "2").prompt == 64


@pytest.mark.parametrize("argv, words", [
    (["run", "-tmp", "0.5"], "unknown flag -tmp (did you mean -temp?)"),
    (["run", "--n-predic", "4"], "unknown flag --n-predic (did you mean --n-predict?)"),
    (["run", "-pr", "hi"], "unknown flag -pr"),
    (["run", "-ctk", "f16", "-ctv", "f32"], "differ"),
    (["run", "-n", "0"], "expected a number >= 1, or -1"),
    (["chta"], "did you mean chat?"),
    (["bench", "-plt", "x.png"], "did you mean -plot?"),
    (["-m", "smollm2", "-p", "hi"], "a command comes first, e.g. llamay run -m smollm2 -p hi"),
    (["run", "-hff", "x.gguf", "-p", "hi"], "-hff FILE needs the repository too"),
    (["serve", "-port", "70000"], "expected a port from 0 to 65535, got 70000"),
    (["bench", "-d", "0,x"], "expected a whole number, got 'x'"),
    (["bench", "-d", "100,-5"], "expected a number >= 0, got -5"),
])
def test_bad_flags_are_one_line_with_a_suggestion(argv, words, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert len(err.strip().splitlines()) == 1 and words in err, err


def test_bench_depths_are_a_list_as_llama_bench_takes_them(parser):
    assert parse(parser, "bench").d == [0]
    assert parse(parser, "bench", "-d", "4096").d == [4096]
    assert parse(parser, "bench", "-d", "0, 1000,4096,1000").d == [0, 1000, 4096]  # each once, in order


def test_an_address_that_cannot_be_listened_on_is_a_usage_error():
    import socket

    from llamay_core.cli.serve_cmd import listen_socket
    from llamay_core.errors import UsageError

    with pytest.raises(UsageError, match="cannot listen on a..b:0: "):  # refused before any lookup
        listen_socket("a..b", 0)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=f"cannot listen on 127.0.0.1:{port}: Address already in use"):
            listen_socket("127.0.0.1", port)


def test_help_shows_every_default(parser):
    for name, sub in parser.commands.items():
        text = sub.format_help()
        for action in sub._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            assert "default" in sub._get_formatter()._get_help_string(action), (name, action.option_strings)
        assert "-q" in text


def test_version_flag(capsys):
    from llamay_core.version import __version__

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"llamay {__version__}"


@pytest.mark.parametrize("typed, name", [
    ("smollm2", "smollm2:135m"), ("SmolLM2:135M", "smollm2:135m"), ("Qwen2.5-Coder", "qwen2.5-coder:0.5b"),
    ("gemma3", "gemma3:270m"), ("GEMMA3:270m", "gemma3:270m"), ("llama", None), ("smollm2:1b", None),
])
def test_model_names_ignore_case_and_a_family_picks_its_default(typed, name):
    assert model_names.canonical_name(typed) == name


def test_a_typo_in_a_model_name_gets_a_suggestion():
    from llamay_core.errors import ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match="did you mean smollm2"):
        model_names.known_model("smolm2")


def test_every_known_model_is_pinned_with_its_size():
    for m in model_names.KNOWN_MODELS.values():
        assert m.source.sha256 and len(m.source.sha256) == 64 and int(m.source.sha256, 16) >= 0
        assert m.size_bytes > 1_000_000


def test_models_lists_sizes_and_downloads_and_rm_removes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path))
    (tmp_path / "models" / "hf" / "me" / "repo").mkdir(parents=True)
    (tmp_path / "models" / "gemma3-270m.gguf").write_bytes(b"GGUF")
    (tmp_path / "models" / "hf" / "me" / "repo" / "m.Q4_K_M.gguf").write_bytes(b"GGUF" * 10)
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "94 MiB" in out and "469 MiB" in out and "241 MiB" in out
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert rows["gemma3:270m"].split()[3] == "yes" and rows["smollm2:135m"].split()[3] == "no"
    assert "hf:me/repo/m.Q4_K_M.gguf" in out
    assert main(["rm", "Gemma3"]) == 0
    assert not (tmp_path / "models" / "gemma3-270m.gguf").exists()
    assert main(["rm", "hf:me/repo:Q4_K_M"]) == 0
    assert not (tmp_path / "models" / "hf").exists()  # empty folders go too
    capsys.readouterr()
    assert main(["rm", "smollm2"]) == 2
    assert "not downloaded" in capsys.readouterr().err


@pytest.mark.parametrize("words, model, prompt, chat", [
    (["smollm2", "Why", "is", "the", "sky", "blue?"], "smollm2:135m", "Why is the sky blue?", True),
    (["Qwen2.5-Coder"], "qwen2.5-coder:0.5b", None, True),
    (["tell me a joke"], None, "tell me a joke", True),
])
def test_ollama_style_run_model_prompt(parser, words, model, prompt, chat):
    from llamay_core.cli.run_cmd import ollama_style

    args = parse(parser, "run", *words)
    ollama_style(args)
    assert (args.model, args.prompt, args.chat) == (model, prompt, chat)


def test_ollama_command_names(capsys):
    assert main(["list"]) == 0 and "smollm2:135m" in capsys.readouterr().out
    assert main(["ls"]) == 0 and "gemma3:270m" in capsys.readouterr().out


def test_grammar_inline_and_from_a_file(tiny_model_path, tmp_path, capsys):
    common = ["run", "-m", str(tiny_model_path), "-backend", "reference", "-p", "x", "-n", "8"]
    assert main([*common, "--grammar", 'root ::= "the cat"']) == 0
    assert capsys.readouterr().out == "the cat\n"
    (tmp_path / "g.gbnf").write_text('root ::= "he"')
    assert main([*common, "-grammar-file", str(tmp_path / "g.gbnf")]) == 0
    assert capsys.readouterr().out == "he\n"


def test_llama_cpp_flags_without_a_meaning_here_are_accepted_with_a_note(parser, capsys):
    args = parse(parser, "run", "-fa", "--mlock", "--jinja", "-ub", "64", "--ignore-eos", "-p", "x")
    assert args.ubatch == 64 and args.ignore_eos and args.prompt == "x"
    err = capsys.readouterr().err
    assert "note: -fa ignored" in err and "note: --mlock ignored" in err and "note: --jinja ignored" in err
