"""`llamay serve -replicas N`: start the replicas, serve the usual app in front of them, drain on SIGTERM."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from llamay_core.cluster.replica import ReplicaConfig
from llamay_core.files.model_names import DEFAULT_MODEL


def replica_config(args: argparse.Namespace, n_ctx: int | None, lookup_draft_max: int) -> ReplicaConfig:
    """The per-replica settings from `llamay serve`'s flags (`n_ctx`: each sequence's context)."""
    return ReplicaConfig(model=args.model or DEFAULT_MODEL, backend=args.backend, threads=args.threads_per_replica,
                         n_ctx=n_ctx, kv_dtype=args.kv, ubatch=args.batch,
                         prefix_cache_mib=args.cache_mib or None, max_running=args.concurrency,
                         max_waiting=args.queue, prefill_chunk=args.prefill_chunk, lookup_draft_max=lookup_draft_max)


def build_front(config: ReplicaConfig, cluster: Any, *, api_key: str | None = None,
                max_body_bytes: int = 1 << 20) -> Any:
    """The app of `server/app.py` over the cluster's replicas."""
    from llamay_core.cluster.adapter import ClusterScheduler
    from llamay_core.cluster.front import FrontModel
    from llamay_core.server.app import create_app

    described = cluster.describe()
    scheduler = ClusterScheduler(cluster.clients, page_size=described["page_size"], max_running=config.max_running,
                                 max_waiting=config.max_waiting)
    front = FrontModel(config.model, described, len(cluster.clients), lambda: scheduler.latest)
    return create_app(front, scheduler=scheduler, api_key=api_key, max_body_bytes=max_body_bytes)


def run(args: argparse.Namespace, n_ctx: int | None, lookup_draft_max: int) -> int:
    import uvicorn

    from llamay_core.cli.serve_cmd import listen_socket
    from llamay_core.cluster.deploy import start_cluster
    from llamay_core.files.gguf_file import open_gguf
    from llamay_core.files.model_names import resolve_model

    config = replica_config(args, n_ctx, lookup_draft_max)
    open_gguf(resolve_model(config.model))  # a bad model is a one-line error here, not N replica crashes
    sock = listen_socket(args.host, args.port)
    port = sock.getsockname()[1]
    where = args.ray_address or "a local Ray instance"
    sys.stderr.write(f"llamay serve: starting {args.replicas} replicas on {where}...\n")
    sys.stderr.flush()
    cluster = start_cluster(config, args.replicas, args.ray_address)
    try:
        app = build_front(config, cluster, api_key=args.api_key, max_body_bytes=args.max_body)
        threads = f"{config.threads} thread{'s' if config.threads > 1 else ''} each"
        sys.stderr.write(f"llamay serve: {config.model} x {args.replicas} replicas ({threads}) on Ray, "
                         f"http://{args.host}:{port}/v1\n")
        sys.stderr.flush()
        # uvicorn handles SIGTERM/SIGINT: it stops accepting and lets in-flight requests finish;
        # the app's shutdown then waits for every relayed job, and shutdown() stops the replicas.
        config_uv = uvicorn.Config(app, host=args.host, port=port, log_level="warning", access_log=False,
                                   lifespan="on")
        uvicorn.Server(config_uv).run(sockets=[sock])
    finally:
        cluster.shutdown()
    return 0
