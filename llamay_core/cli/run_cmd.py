"""`llamay run`: stream a continuation of a prompt, or chat (`-chat`/`-cnv` with no prompt)."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from llamay_core.cli.args import AcceptedAndIgnored, backend_flag, flag, kv_flag, model_flag, n_predict, positive_int
from llamay_core.engine.pass_size import DEFAULT_UBATCH
from llamay_core.files.model_names import DEFAULT_MODEL


def sampling_flags(p: argparse.ArgumentParser, n_default: int) -> None:
    """Flags shared by `run` and `chat`, under llamay's and llama.cpp's names."""
    p.add_argument("-n", "--n-predict", "-n-predict", dest="n", type=n_predict, default=n_default,
                   help="tokens to generate; -1 = until the end of the text (or of the context)")
    flag(p, "temp", "--temperature", type=float, default=0.0, help="temperature (0 = greedy)")
    flag(p, "seed", "-s", type=int, default=None, help="sampling seed (default: none, a fresh one each run)")
    flag(p, "top-k", dest="top_k", type=int, default=0, help="keep the K likeliest tokens (0 = off)")
    flag(p, "top-p", dest="top_p", type=float, default=1.0, help="nucleus sampling mass (1 = off)")
    flag(p, "min-p", dest="min_p", type=float, default=0.0, help="drop tokens below P x the likeliest (0 = off)")
    flag(p, "repeat-penalty", dest="repeat_penalty", type=float, default=1.0, help="repetition penalty (1 = off)")
    flag(p, "stop", action="append", default=[], help="a stop string (repeatable)")
    p.add_argument("-system", "--system", "-sys", "--system-prompt", dest="system", default=None,
                   help="system message for chat")
    flag(p, "stats", action="store_true", help="print timing statistics (compile and checks are never counted)")
    p.add_argument("-ctx", "--ctx", "-c", "--ctx-size", dest="ctx", type=positive_int, default=None,
                   help="context size in tokens (default: the model's, at most 4096)")
    p.add_argument("-t", "--threads", "-threads", dest="threads", type=positive_int, default=None,
                   help="CPU threads for backends that use them (default: the backend's choice)")
    p.add_argument("-ub", "--ubatch-size", "-b", "--batch-size", dest="ubatch", type=positive_int, default=DEFAULT_UBATCH,
                   help="most prompt tokens per forward pass")
    flag(p, "ignore-eos", dest="ignore_eos", action="store_true", help="keep generating past end-of-text tokens")
    kv_flag(p)
    backend_flag(p)
    p.add_argument("--jinja", "-jinja", action=AcceptedAndIgnored, nargs=0, default=None,
                   help="llamay always renders the GGUF's own jinja chat template")
    p.add_argument("-fa", "--flash-attn", action=AcceptedAndIgnored, nargs="?", default=None, metavar="on|off|auto",
                   help="each backend chooses its own attention kernel")
    p.add_argument("--mlock", "--no-mmap", action=AcceptedAndIgnored, nargs=0, default=None,
                   help="llamay memory-maps the GGUF and lets the OS page it")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("words", nargs="*", metavar="[MODEL] [PROMPT]", default=[],
                   help="as ollama: `llamay run MODEL` chats, `llamay run MODEL \"PROMPT\"` answers one chat turn")
    model_flag(p)
    p.add_argument("-p", "--prompt", "-prompt", default=None, help="the prompt text")
    p.add_argument("-f", "--file", "-file", default=None, help="read the prompt from a file (- for stdin)")
    sampling_flags(p, n_default=64)
    flag(p, "chat", action="store_true",
         help="wrap the prompt in the model's chat format; with no -p/-f, chat interactively")
    p.add_argument("-cnv", "--conversation", "-conversation", dest="cnv", action="store_true",
                   help="interactive chat, as llama.cpp's -cnv (a -p prompt is then the system message)")
    p.add_argument("-no-cnv", "--no-conversation", dest="cnv", action="store_false",
                   help="no interactive chat (the default for run)")
    flag(p, "lookup", action="store_true", help="speculative decoding from n-grams in the context (= -spec ngram)")
    flag(p, "spec", choices=["ngram", "none"], default=None, help="speculative decoding: ngram (prompt lookup) or none")
    flag(p, "spec-draft-max", dest="spec_draft_max", type=positive_int, default=8, help="tokens drafted per pass")
    flag(p, "md", "-model-draft", "--model-draft", dest="model_draft", default=None,
         help="a draft model (same backend) for speculative decoding")
    flag(p, "json-schema", "-j", dest="json_schema", default=None,
         help="constrain the output to a JSON Schema (FILE or JSON)")
    flag(p, "grammar", default=None, help="constrain the output to this GBNF (or Lark) grammar text")
    flag(p, "grammar-file", dest="grammar_file", default=None, help="constrain the output to the grammar in FILE")
    flag(p, "regex", default=None, help="constrain the output to a regular expression")


def read_prompt(args: argparse.Namespace) -> str | None:
    """The prompt from -p, -f FILE, -f - (stdin), or piped stdin; None when there is none."""
    from llamay_core.errors import UsageError

    if args.file is not None:
        if args.file == "-":
            return sys.stdin.read()
        try:
            with open(args.file, encoding="utf-8") as f:
                return f.read()
        except OSError as exc:
            raise UsageError(f"cannot read prompt file {args.file}: {exc.strerror}") from None
    if args.prompt is not None:
        return args.prompt
    return None


def load_for_cli(args: argparse.Namespace, n_seq: int = 1) -> Any:
    """The model the flags ask for, threads set, its kernels compiled before anything is timed."""
    import llamay
    from llamay_core.cli.warm_up import warm_up
    from llamay_core.progress import PROGRESS

    PROGRESS.info("loading %s", args.model or DEFAULT_MODEL)
    m = llamay.load(args.model or DEFAULT_MODEL, backend=args.backend, n_ctx=args.ctx, kv_dtype=args.kv, n_seq=n_seq,
                    ubatch=args.ubatch)
    if args.threads and hasattr(m.backend, "set_threads"):
        m.backend.set_threads(args.threads)
    warm_up(m)
    return m


def sampling_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"temperature": args.temp, "seed": args.seed, "top_k": args.top_k, "top_p": args.top_p,
            "min_p": args.min_p, "repeat_penalty": args.repeat_penalty, "stop": args.stop,
            "ignore_eos": args.ignore_eos}


def run(args: argparse.Namespace) -> int:
    from llamay_core.constrain.sources import read_grammar_file
    from llamay_core.errors import UsageError

    ollama_style(args)
    if args.cnv:  # llama.cpp's conversation mode: -p is the system message
        if args.prompt is not None and args.system is None:
            args.system, args.prompt = args.prompt, None
        args.chat = True
    prompt = read_prompt(args)
    if prompt is None and not args.chat and not sys.stdin.isatty():
        prompt = sys.stdin.read()
    if prompt is None:
        if not args.chat:
            raise UsageError("give a prompt with -p TEXT or -f FILE (- for stdin), or chat with llamay chat")
        from llamay_core.cli.chat_cmd import chat

        return chat(args)
    if args.grammar is not None and args.grammar_file is not None:
        raise UsageError("give -grammar TEXT or -grammar-file FILE, not both")
    grammar = read_grammar_file(args.grammar_file) if args.grammar_file is not None else args.grammar
    m = load_for_cli(args)
    if args.chat:
        messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
            {"role": "user", "content": prompt}]
        prompt = m.chat_prompt(messages)
    n = args.n if args.n > 0 else max(1, m.n_ctx - len(m.tokenize(prompt, parse_special=True)))
    speculative = _speculative(args, m)
    for piece in m.generate(prompt, max_tokens=n, stream=True, speculative=speculative,
                            json_schema=args.json_schema, grammar=grammar, regex=args.regex,
                            **sampling_options(args)):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    if args.stats:
        sys.stderr.write("\n".join(m.last_stats.lines()) + "\n")
    return 0


def ollama_style(args: argparse.Namespace) -> None:
    """`llamay run MODEL [PROMPT]` as ollama users type it: a chat turn, or the chat itself."""
    from pathlib import Path

    from llamay_core.errors import UsageError
    from llamay_core.files.model_names import canonical_name, is_model_name

    words = list(args.words)
    if not words:
        return
    first = words[0]
    if args.model is None and (is_model_name(first) or first.endswith(".gguf") or Path(first).is_file()):
        args.model = canonical_name(first) or first
        words = words[1:]
    if words:
        if args.prompt is not None or args.file is not None:
            raise UsageError("give the prompt once: -p TEXT, -f FILE, or after the model name")
        args.prompt = " ".join(words)
    elif args.prompt is None and args.file is not None:
        return
    args.chat = True


def _speculative(args: argparse.Namespace, target: Any) -> object:
    """The SpeculativeConfig that -lookup / -spec / -md / -spec-draft-max ask for, or None."""
    import llamay
    from llamay_core.errors import UsageError
    from llamay_core.speculative import SpeculativeConfig

    ngram = args.lookup or args.spec == "ngram"
    if ngram and args.model_draft:
        raise UsageError("choose one drafter: -lookup/-spec ngram or -md MODEL")
    if ngram:
        return SpeculativeConfig("ngram", draft_max=args.spec_draft_max)
    if args.model_draft and args.spec != "none":
        draft = llamay.load(args.model_draft, backend=target.backend_name, n_ctx=target.n_ctx, kv_dtype=args.kv, n_seq=1)
        return SpeculativeConfig("draft", draft_max=args.spec_draft_max, draft_model=draft)
    return None
