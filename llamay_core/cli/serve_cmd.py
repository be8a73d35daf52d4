"""`llamay serve`: an OpenAI-compatible HTTP server with continuous batching."""
from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from llamay_core.cli.args import backend_flag, flag, model_flag, non_negative_int, positive_int, tcp_port
from llamay_core.engine.pass_size import DEFAULT_UBATCH
from llamay_core.files.model_names import DEFAULT_MODEL


def configure(p: argparse.ArgumentParser) -> None:
    model_flag(p)
    flag(p, "host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    flag(p, "port", type=tcp_port, default=8080, help="TCP port (default 8080)")
    flag(p, "concurrency", "-np", "--parallel", type=positive_int, default=8,
         help="sequences decoded together (llama-server's -np); sizes the KV cache (default 8)")
    flag(p, "queue", type=non_negative_int, default=64,
         help="requests that may wait for a place in the batch before 503 (default 64)")
    flag(p, "batch", "-b", "-ub", "--ubatch-size", type=positive_int, default=DEFAULT_UBATCH,
         help="most tokens in one forward pass; a larger step runs as several passes (default 512)")
    flag(p, "prefill-chunk", dest="prefill_chunk", type=positive_int, default=256,
         help="most prompt tokens fed per step, so long prompts do not stall others (default 256)")
    flag(p, "ctx", "-c", type=positive_int, default=None,
         help="KV cache size in tokens, shared out among the -concurrency sequences as in llama-server "
              "(each request may use ctx/concurrency; default: 4096 per sequence)")
    flag(p, "kv", default="f32", help="KV cache dtype: f32, f16, vq8")
    flag(p, "cache-mib", dest="cache_mib", type=float, default=256.0,
         help="prefix cache budget in MiB (0 = off; default 256)")
    flag(p, "api-key", dest="api_key", default=None,
         help="require 'Authorization: Bearer KEY' (or 'X-Api-Key: KEY') on every endpoint but the health checks")
    flag(p, "alias", action="append", default=[], help="another name the model answers to (repeatable)")
    flag(p, "strict-model", dest="strict_model", action="store_true",
         help="answer 404 to requests naming a model other than the served one or its aliases")
    flag(p, "cors-origins", dest="cors_origins", default="",
         help="comma-separated origins browsers may call from ('*' for any; default none)")
    flag(p, "max-body", dest="max_body", type=positive_int, default=1 << 20,
         help="largest request body in bytes (default 1 MiB)")
    flag(p, "read-timeout", dest="read_timeout", type=float, default=30.0,
         help="seconds a client has to send a whole request (default 30)")
    flag(p, "shutdown-timeout", dest="shutdown_timeout", type=float, default=30.0,
         help="seconds in-flight requests may run on after SIGTERM before they are cancelled (default 30)")
    flag(p, "lookup", action="store_true", help="speculate with prompt lookup (n-gram drafts)")
    flag(p, "spec", default="none", choices=["none", "ngram"], help="speculative decoding: ngram = -lookup")
    flag(p, "spec-draft-max", dest="spec_draft_max", type=positive_int, default=8, help="drafts per step (default 8)")
    flag(p, "replicas", type=non_negative_int, default=0,
         help="serve N engine replicas on Ray Serve with prefix-aware routing (needs llamay[cluster]; default 0: off)")
    flag(p, "ray-address", dest="ray_address", default=None,
         help="join this Ray cluster (e.g. 10.0.0.5:6379) instead of starting a local one (with -replicas)")
    flag(p, "threads-per-replica", dest="threads_per_replica", type=positive_int, default=1,
         help="compute threads (and Ray CPUs) of each replica (default 1)")
    backend_flag(p)


def run(args: argparse.Namespace) -> int:
    import llamay
    from llamay_core.errors import UsageError
    from llamay_core.server.app import create_app
    from llamay_core.server.runner import Runner

    if args.cache_mib < 0:
        raise UsageError(f"-cache-mib must be >= 0, got {args.cache_mib}")
    for name in ("read_timeout", "shutdown_timeout"):
        value = getattr(args, name)
        if not value > 0 or value == float("inf"):
            raise UsageError(f"-{name.replace('_', '-')} must be a positive number of seconds, got {value}")
    name = args.model or DEFAULT_MODEL
    lookup = args.spec_draft_max if (args.lookup or args.spec == "ngram") else 0
    n_ctx = None
    if args.ctx is not None:
        n_ctx = args.ctx // args.concurrency
        if n_ctx < 1:
            raise UsageError(f"-ctx {args.ctx} is smaller than -concurrency {args.concurrency}: "
                             "each sequence needs at least one token of context")
    if args.replicas:
        from llamay_core.cluster.serve import run as run_cluster

        return run_cluster(args, n_ctx, lookup)
    if args.ray_address:
        raise UsageError("-ray-address needs -replicas N")
    m = llamay.load(name, backend=args.backend, n_ctx=n_ctx, kv_dtype=args.kv,
                    n_seq=args.concurrency, ubatch=args.batch, prefix_cache_mib=args.cache_mib or None)
    sock = listen_socket(args.host, args.port)
    runner = Runner(sock, read_timeout_s=args.read_timeout, shutdown_timeout_s=args.shutdown_timeout)
    origins = [o.strip() for o in args.cors_origins.split(",") if o.strip()]
    app = create_app(m, lookup_draft_max=lookup, max_running=args.concurrency, max_waiting=args.queue,
                     prefill_chunk=args.prefill_chunk, api_key=args.api_key, max_body_bytes=args.max_body,
                     model_id=served_name(name), aliases=args.alias, strict_model=args.strict_model,
                     cors_origins=origins, read_timeout_s=args.read_timeout,
                     shutdown_timeout_s=args.shutdown_timeout, on_fatal=runner.on_fatal)
    port = sock.getsockname()[1]
    sys.stderr.write(f"llamay serve: {served_name(name)} on {m.backend_name}, "
                     f"http://{args.host}:{port}/v1 (concurrency {args.concurrency}, ctx {m.n_ctx})\n")
    if not args.api_key and args.host not in ("127.0.0.1", "localhost", "::1"):
        sys.stderr.write(f"llamay serve: warning: listening on {args.host} without -api-key: "
                         "anyone who can reach this address can use the model\n")
    sys.stderr.flush()
    code = runner.run(app)
    if code:
        sys.stderr.write("llamay serve: the scheduler stopped after an internal error; exiting\n")
    return code


def served_name(model: str) -> str:
    """The id clients see: the name the user served (`smollm2:135m`), or a file's stem."""
    if model.endswith(".gguf") or "/" in model or os.sep in model:
        return Path(model).stem
    return model


def listen_socket(host: str, port: int) -> socket.socket:
    """The bound socket, made here so a taken port is a one-line error rather than uvicorn's log."""
    from llamay_core.errors import UsageError

    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except (OSError, UnicodeError) as exc:  # taken, not ours, no such host, a name IDNA cannot encode
        raise UsageError(f"cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from None
    return sock
