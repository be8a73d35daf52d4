"""`llamay serve`: an OpenAI-compatible HTTP server with continuous batching."""
from __future__ import annotations

import argparse
import socket
import sys

from llamay_core.cli.args import backend_flag, flag, model_flag, non_negative_int, positive_int
from llamay_core.files.model_names import DEFAULT_MODEL


def configure(p: argparse.ArgumentParser) -> None:
    model_flag(p)
    flag(p, "host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    flag(p, "port", type=non_negative_int, default=8080, help="TCP port (default 8080)")
    flag(p, "concurrency", type=positive_int, default=8,
         help="sequences decoded together; sizes the KV cache (default 8)")
    flag(p, "queue", type=non_negative_int, default=64,
         help="requests that may wait for a place in the batch before 503 (default 64)")
    flag(p, "batch", type=positive_int, default=512, help="most tokens in one forward pass (default 512)")
    flag(p, "prefill-chunk", dest="prefill_chunk", type=positive_int, default=256,
         help="most prompt tokens fed per step, so long prompts do not stall others (default 256)")
    flag(p, "ctx", "-c", type=positive_int, default=None, help="context size per sequence")
    flag(p, "kv", default="f32", help="KV cache dtype: f32, f16, vq8")
    flag(p, "cache-mib", dest="cache_mib", type=float, default=256.0,
         help="prefix cache budget in MiB (0 = off; default 256)")
    flag(p, "api-key", dest="api_key", default=None,
         help="require 'Authorization: Bearer KEY' on every endpoint but /healthz")
    flag(p, "max-body", dest="max_body", type=positive_int, default=1 << 20,
         help="largest request body in bytes (default 1 MiB)")
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
    import uvicorn

    import llamay
    from llamay_core.errors import UsageError
    from llamay_core.server.app import create_app

    if args.cache_mib < 0:
        raise UsageError(f"-cache-mib must be >= 0, got {args.cache_mib}")
    lookup = args.spec_draft_max if (args.lookup or args.spec == "ngram") else 0
    if args.replicas:
        from llamay_core.cluster.serve import run as run_cluster

        return run_cluster(args, lookup)
    if args.ray_address:
        raise UsageError("-ray-address needs -replicas N")
    m = llamay.load(args.model or DEFAULT_MODEL, backend=args.backend, n_ctx=args.ctx, kv_dtype=args.kv,
                    n_seq=args.concurrency, ubatch=args.batch, prefix_cache_mib=args.cache_mib or None)
    app = create_app(m, lookup_draft_max=lookup, max_running=args.concurrency, max_waiting=args.queue, prefill_chunk=args.prefill_chunk,
                     api_key=args.api_key, max_body_bytes=args.max_body)
    sock = listen_socket(args.host, args.port)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, host=args.host, port=port, log_level="warning", access_log=False, lifespan="on")
    sys.stderr.write(f"llamay serve: {m.display_name} on {m.backend_name}, "
                     f"http://{args.host}:{port}/v1 (concurrency {args.concurrency}, ctx {m.n_ctx})\n")
    if not args.api_key and args.host not in ("127.0.0.1", "localhost", "::1"):
        sys.stderr.write(f"llamay serve: warning: listening on {args.host} without -api-key: "
                         "anyone who can reach this address can use the model\n")
    sys.stderr.flush()
    # uvicorn handles SIGTERM/SIGINT: it stops accepting, lets in-flight requests finish, then runs
    # the app's shutdown, which drains the scheduler.
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def listen_socket(host: str, port: int) -> socket.socket:
    """The bound socket, made here so a taken port is a one-line error rather than uvicorn's log."""
    from llamay_core.errors import UsageError

    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock
