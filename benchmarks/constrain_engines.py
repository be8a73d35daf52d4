"""Compare constrained-decoding engines on llamay's tokenizers (docs/constrained-output.md).

    python benchmarks/constrain_engines.py [MODEL ...]    (default: smollm2:135m qwen2.5-coder:0.5b)

For each tokenizer and schema: the one-off vocabulary setup, the grammar compile, and the mean
time to compute one token's mask while walking a valid document token by token. xgrammar is
measured when it imports (it needs torch).
"""
from __future__ import annotations

import importlib.metadata
import json
import sys
import time

import numpy as np

SCHEMAS = {
    "person": {"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "age", "tags"]},
    "order": {"type": "object", "properties": {
        "id": {"type": "integer"}, "status": {"enum": ["open", "paid", "shipped"]},
        "customer": {"type": "object", "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
                     "required": ["name", "email"]},
        "lines": {"type": "array", "items": {"type": "object", "properties": {
            "sku": {"type": "string"}, "qty": {"type": "integer"}, "price": {"type": "number"}},
            "required": ["sku", "qty", "price"]}}},
        "required": ["id", "status", "customer", "lines"]},
}
DOCS = {
    "person": {"name": "Ada \"the\" Lovelace", "age": 36, "tags": ["math", "poetry", "engines"]},
    "order": {"id": 1042, "status": "paid", "customer": {"name": "Bo Li", "email": "bo@example.com"},
              "lines": [{"sku": "A-1", "qty": 2, "price": 9.5}, {"sku": "B-22", "qty": 1, "price": 120.0}]},
}


def load_tokenizer(name: str):
    from llamay_core.files.gguf_file import open_gguf
    from llamay_core.files.model_names import resolve_model
    from llamay_core.tokenizer import Tokenizer

    return Tokenizer.from_metadata(open_gguf(resolve_model(name)).metadata)


def bench_llguidance(tok, schema: dict, doc_ids: list[int]) -> dict:
    import llguidance

    from llamay_core.constrain.engines import compile_grammar, ll_tokenizer

    t0 = time.perf_counter()
    ll_tokenizer(tok)
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    grammar = compile_grammar(tok, "json_schema", schema)
    compile_s = time.perf_counter() - t0
    c = grammar.start()
    mask = c.bitmask
    times = []
    for t in doc_ids:
        t0 = time.perf_counter()
        c.matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        times.append(time.perf_counter() - t0)
        assert (mask[t // 32] >> (t % 32)) & 1, "document token not allowed"
        c.advance(t)
    return {"setup_s": setup, "compile_s": compile_s, "mask_ms": 1000 * float(np.mean(times)),
            "mask_max_ms": 1000 * float(np.max(times)), "version": llguidance.__version__}


def bench_outlines(tok, schema: dict, doc_ids: list[int]) -> dict:
    from outlines_core import Guide, Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema

    t0 = time.perf_counter()
    eos = tok.eos_id
    table: dict[bytes, list[int]] = {}
    for i in range(tok.n_vocab):
        if i == eos or tok.is_control(i):
            continue
        piece = tok.token_bytes(i)
        if piece:
            table.setdefault(piece, []).append(i)
    vocab = Vocabulary(eos, table)
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    regex = build_regex_from_schema(json.dumps(schema), r"[ ]?")
    index = Index(regex, vocab)
    compile_s = time.perf_counter() - t0
    guide = Guide(index)
    mask = np.zeros((tok.n_vocab + 31) // 32, np.int32)
    times = []
    for t in doc_ids:
        t0 = time.perf_counter()
        guide.write_mask_into(mask.ctypes.data, mask.size, mask.itemsize)
        times.append(time.perf_counter() - t0)
        guide.advance(t)
    return {"setup_s": setup, "compile_s": compile_s, "mask_ms": 1000 * float(np.mean(times)),
            "mask_max_ms": 1000 * float(np.max(times)), "version": importlib.metadata.version("outlines-core")}


def main(models: list[str]) -> None:
    engines = {"llguidance": bench_llguidance, "outlines-core": bench_outlines}
    print("| tokenizer | schema | engine | vocab setup | compile | mask per token (mean / max) |")
    print("|---|---|---|---|---|---|")
    for name in models:
        tok = load_tokenizer(name)
        for sname, schema in SCHEMAS.items():
            doc_ids = tok.encode(json.dumps(DOCS[sname]), add_special=False)
            for ename, fn in engines.items():
                try:
                    r = fn(tok, schema, doc_ids)
                except Exception as exc:  # an engine that cannot run this case is reported, not fatal
                    print(f"| {name} ({tok.n_vocab}) | {sname} | {ename} | failed: {' '.join(str(exc).split())[:80]} | | |")
                    continue
                print(f"| {name} ({tok.n_vocab}) | {sname} | {ename} {r['version']} | {r['setup_s']:.2f}s | "
                      f"{1000 * r['compile_s']:.1f} ms | {r['mask_ms']:.3f} / {r['mask_max_ms']:.2f} ms |")
    try:
        import xgrammar  # noqa: F401
    except ImportError as exc:
        print(f"\nxgrammar not measured: {exc} (it requires torch, transformers and triton)")


if __name__ == "__main__":
    main(sys.argv[1:] or ["smollm2:135m", "qwen2.5-coder:0.5b"])
