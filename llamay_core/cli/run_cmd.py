"""`llamay run`: stream a continuation of a prompt."""
from __future__ import annotations

import argparse
import sys

from llamay_core.cli.args import backend_flag, flag, model_flag, positive_int
from llamay_core.files.model_names import DEFAULT_MODEL


def configure(p: argparse.ArgumentParser) -> None:
    model_flag(p)
    p.add_argument("-p", "--prompt", "-prompt", default=None, help="the prompt text")
    p.add_argument("-f", "--file", "-file", default=None, help="read the prompt from a file")
    p.add_argument("-n", "--n-predict", "-n-predict", dest="n", type=positive_int, default=64, help="tokens to generate")
    flag(p, "temp", type=float, default=0.0, help="temperature (0 = greedy)")
    flag(p, "seed", type=int, default=None)
    flag(p, "top-k", dest="top_k", type=int, default=0)
    flag(p, "top-p", dest="top_p", type=float, default=1.0)
    flag(p, "min-p", dest="min_p", type=float, default=0.0)
    flag(p, "repeat-penalty", dest="repeat_penalty", type=float, default=1.0)
    flag(p, "stop", action="append", default=[], help="a stop string (repeatable)")
    flag(p, "chat", action="store_true", help="wrap the prompt in the model's chat template")
    flag(p, "system", default=None, help="system message for -chat")
    flag(p, "stats", action="store_true", help="print timing statistics at the end")
    flag(p, "ctx", "-c", type=positive_int, default=None, help="context size")
    flag(p, "kv", default="f32", help="KV cache dtype: f32, f16, vq8")
    flag(p, "lookup", action="store_true", help="speculative decoding from n-grams in the context (= -spec ngram)")
    flag(p, "spec", choices=["ngram", "none"], default=None, help="speculative decoding: ngram (prompt lookup) or none")
    flag(p, "spec-draft-max", dest="spec_draft_max", type=positive_int, default=8, help="tokens drafted per pass")
    flag(p, "md", "-model-draft", dest="model_draft", default=None, help="a draft model (same backend) for speculative decoding")
    flag(p, "json-schema", dest="json_schema", default=None, help="constrain the output to a JSON Schema (FILE or JSON)")
    flag(p, "grammar", default=None, help="constrain the output to a GBNF (or Lark) grammar FILE")
    flag(p, "regex", default=None, help="constrain the output to a regular expression")
    backend_flag(p)


def run(args: argparse.Namespace) -> int:
    import llamay
    from llamay_core.constrain.sources import read_grammar_file
    from llamay_core.errors import UsageError

    if args.file is not None:
        try:
            with open(args.file, encoding="utf-8") as f:
                prompt = f.read()
        except OSError as exc:
            raise UsageError(f"cannot read prompt file {args.file}: {exc.strerror}") from None
    elif args.prompt is not None:
        prompt = args.prompt
    else:
        raise UsageError("give a prompt with -p TEXT or -f FILE")
    m = llamay.load(args.model or DEFAULT_MODEL, backend=args.backend, n_ctx=args.ctx, kv_dtype=args.kv, n_seq=1)
    if args.chat:
        messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
            {"role": "user", "content": prompt}]
        prompt = m.chat_prompt(messages)
    speculative = _speculative(args, m)
    grammar = read_grammar_file(args.grammar) if args.grammar is not None else None
    for piece in m.generate(prompt, max_tokens=args.n, temperature=args.temp, seed=args.seed, stream=True,
                            top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                            repeat_penalty=args.repeat_penalty, stop=args.stop, speculative=speculative,
                            json_schema=args.json_schema, grammar=grammar, regex=args.regex):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    if args.stats:
        sys.stderr.write("\n".join(m.last_stats.lines()) + "\n")
    return 0


def _speculative(args: argparse.Namespace, target: object) -> object:
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
