"""Issue 17's goal: 2 replicas x 1 thread on Ray vs one 2-thread `llamay serve`, shared system prompt.

Both servers get the same closed-loop workload: N streaming clients, each request = one shared
system prompt (~400 tokens) + a short question of its own, greedy, `-max-tokens` tokens with
ignore_eos. Reported per server: generated tok/s over wall time (prefill included), TTFT p50/p99,
prefix hits (prompt tokens the replicas took from their prefix cache / all prompt tokens, from
each response's usage.prompt_tokens_details.cached_tokens) and, for the cluster, the router's
hit/overflow/miss counts from /metrics.

Routing cost: one client, the same short cached prompt, against one 1-thread server and against
a 1-replica x 1-thread cluster: the TTFT p50 difference is what the front, the router and the
Ray hop add.

    python benchmarks/serve_cluster.py -m smollm2:135m -backend cpu -clients 16 -duration 60
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from typing import Any, Iterator

import httpx
import numpy as np
from serve_load import free_port, running_server  # the sibling script: python benchmarks/serve_cluster.py

SYSTEM = ("You are the help desk of the Northwind public library. The library opens at nine in the "
          "morning and closes at seven in the evening from Monday to Friday, and at five on Saturday; "
          "it is closed on Sunday. Members may borrow up to twelve items at a time for three weeks, "
          "renew them twice online unless someone has reserved them, and return them at any branch. "
          "Late returns cost twenty cents a day per item, capped at five dollars. Children's cards are "
          "free and have no late fees. The reading room on the second floor is silent; group study "
          "rooms on the third floor can be booked for two hours a day. Printing costs ten cents a page "
          "in black and white and fifty cents in colour. Wireless internet is free for everyone, with "
          "no password. Lost cards are replaced for two dollars. Answer the visitor's question in one "
          "or two friendly sentences, using only these facts, and say so when you do not know. ") * 2
QUESTIONS = ["When do you open on Saturday?", "How many books can I borrow?", "What does colour printing cost?",
             "Can I renew a reserved book?", "Is the wifi free?", "Where is the silent room?",
             "How much is a late fee?", "Do children pay late fees?"]


@contextlib.contextmanager
def server(args: argparse.Namespace, extra: list[str], threads: int) -> Iterator[str]:
    """`llamay serve` with `extra` flags on a free port; numba limited to `threads` in its process."""
    port = free_port()
    cmd = [sys.executable, "-m", "llamay_core.cli.main", "serve", "-m", args.model, "-port", str(port),
           # -ctx is the whole cache of a server or replica, shared by its sequences (llama-server's -c)
           "-ctx", str(args.ctx * args.concurrency), "-concurrency", str(args.concurrency), *extra]
    if args.backend:
        cmd += ["-backend", args.backend]
    with running_server(cmd, {**os.environ, "NUMBA_NUM_THREADS": str(threads)}, port, args.startup_timeout,
                        "serve_cluster", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as base:
        yield base


async def one_request(client: httpx.AsyncClient, prompt: str, max_tokens: int) -> dict[str, Any]:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    ttft, usage = None, None
    async with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:
            await r.aread()
            return {"ok": False, "error": f"HTTP {r.status_code}: {r.text[:200]}"}
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                return {"ok": False, "error": event["error"].get("message", "error")}
            if event.get("usage"):
                usage = event["usage"]
            elif ttft is None and event["choices"] and event["choices"][0].get("text"):
                ttft = time.perf_counter() - t0
    if usage is None:
        return {"ok": False, "error": "no usage chunk"}
    return {"ok": True, "ttft": ttft if ttft is not None else time.perf_counter() - t0,
            "tokens": usage["completion_tokens"], "prompt": usage["prompt_tokens"],
            "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)}


async def closed_loop(base: str, clients: int, duration: float, max_tokens: int, shared: bool) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    results: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as client:
        def prompt(i: int) -> str:
            return (SYSTEM if shared else "") + QUESTIONS[i % len(QUESTIONS)]

        await one_request(client, prompt(0), 2)  # warm-up, outside the figures
        stop_at = time.perf_counter() + duration
        start = time.perf_counter()

        async def loop(index: int) -> None:
            k = 0
            while time.perf_counter() < stop_at:
                results.append(await one_request(client, prompt(index + k * clients), max_tokens))
                k += 1

        await asyncio.gather(*(loop(i) for i in range(clients)))
        wall = time.perf_counter() - start
        metrics = (await client.get("/metrics")).text
    ok = [r for r in results if r["ok"]]
    ttft = np.array([r["ttft"] for r in ok] or [np.nan])
    routes: dict[str, float] = {}
    for line in metrics.splitlines():
        found = re.match(r'llamay_route_requests_total\{.*outcome="(\w+)".*\} (\S+)$', line)
        if found:
            routes[found[1]] = routes.get(found[1], 0.0) + float(found[2])
    return {"requests": len(results), "failed": len(results) - len(ok),
            "errors": sorted({r["error"] for r in results if not r["ok"]})[:3],
            "generated_tok_per_s": sum(r["tokens"] for r in ok) / wall,
            "ttft_p50_s": float(np.percentile(ttft, 50)), "ttft_p99_s": float(np.percentile(ttft, 99)),
            "prompt_tokens_mean": float(np.mean([r["prompt"] for r in ok])) if ok else 0.0,
            "prefix_hits": sum(r["cached"] for r in ok) / max(1, sum(r["prompt"] for r in ok)),
            "routes": routes}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-m", "--model", default="smollm2:135m")
    p.add_argument("-backend", "--backend", default="cpu")
    p.add_argument("-ctx", "--ctx", type=int, default=1024, help="context of each sequence")
    p.add_argument("-clients", "--clients", type=int, default=16)
    p.add_argument("-concurrency", "--concurrency", type=int, default=8, help="sequences per server or replica")
    p.add_argument("-max-tokens", "--max-tokens", dest="max_tokens", type=int, default=32)
    p.add_argument("-duration", "--duration", type=float, default=60.0)
    p.add_argument("-overhead-duration", "--overhead-duration", dest="overhead_duration", type=float, default=15.0)
    p.add_argument("-startup-timeout", "--startup-timeout", dest="startup_timeout", type=float, default=600.0)
    p.add_argument("-rows", "--rows", choices=("all", "throughput", "overhead"), default="all",
                   help="throughput: the N-client pair only; overhead: the 1-client routing-cost pair only")
    p.add_argument("-json", "--json", dest="json_out", default=None)
    args = p.parse_args(argv)

    rows: dict[str, dict[str, Any]] = {}
    plan = [("single 1x2 threads", [], 2, args.clients, args.duration, True),
            ("cluster 2x1 thread", ["-replicas", "2", "-threads-per-replica", "1"], 1, args.clients, args.duration, True),
            ("single 1x1 thread, 1 client", [], 1, 1, args.overhead_duration, False),
            ("cluster 1x1 thread, 1 client", ["-replicas", "1", "-threads-per-replica", "1"], 1, 1,
             args.overhead_duration, False)]
    if args.rows != "all":
        plan = plan[:2] if args.rows == "throughput" else plan[2:]
    for name, extra, threads, clients, duration, shared in plan:
        with server(args, extra, threads) as base:
            rows[name] = asyncio.run(closed_loop(base, clients, duration, args.max_tokens, shared))
        r = rows[name]
        print(f"{name:<30} {r['requests']:>5} req {r['failed']:>3} failed {r['generated_tok_per_s']:>8.1f} tok/s "
              f"ttft p50 {r['ttft_p50_s'] * 1000:7.1f} ms p99 {r['ttft_p99_s'] * 1000:7.1f} ms "
              f"prompt {r['prompt_tokens_mean']:.0f} tok, prefix hits {r['prefix_hits']:.1%} {r['routes'] or ''}",
              flush=True)
        for e in r["errors"]:
            print(f"    error: {e}")
    speedup = overhead_ms = None
    if "cluster 2x1 thread" in rows:
        single, cluster = rows["single 1x2 threads"], rows["cluster 2x1 thread"]
        speedup = cluster["generated_tok_per_s"] / max(single["generated_tok_per_s"], 1e-9)
        print(f"cluster / single throughput: {speedup:.2f}x (goal >= 1.3x); cluster prefix hits "
              f"{cluster['prefix_hits']:.1%} (goal >= 90%)")
    if "cluster 1x1 thread, 1 client" in rows:
        overhead_ms = (rows["cluster 1x1 thread, 1 client"]["ttft_p50_s"]
                       - rows["single 1x1 thread, 1 client"]["ttft_p50_s"]) * 1000
        print(f"routing adds {overhead_ms:.1f} ms to TTFT p50 (goal < 5 ms)")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"args": vars(args), "rows": rows, "speedup": speedup, "routing_ttft_ms": overhead_ms}, f,
                      indent=2)
    return 1 if any(r["failed"] for r in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
