"""Load test for `llamay serve`: N concurrent clients, fixed prompts of varied length.

Each client sends streaming completions one after another (a closed loop) for a fixed time or
number of requests; every request generates exactly `-max-tokens` tokens (greedy, ignore_eos),
so runs at different client counts do the same work per request. Reports requests/s, generated
tok/s (all clients together), p50/p99 time to first token, and failed requests.

    python benchmarks/serve_load.py -m smollm2:135m -backend cpu -clients 1,8
    python benchmarks/serve_load.py -url http://127.0.0.1:8080 -clients 8 -api-key KEY

Without -url it starts `llamay serve` itself on a free loopback port (and stops it after).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any, Iterator

import httpx
import numpy as np

# Fixed prompts of varied length (short question to a long paragraph), used in turn by each client.
PROMPTS = [
    "The capital of France is",
    "Write a short poem about the sea.",
    "Explain in simple words why the sky is blue during the day and red at sunset.",
    "Here is a list of fruits: apple, banana, cherry, date, elderberry, fig, grape, honeydew, "
    "kiwi, lemon, mango, nectarine, orange, papaya, quince, raspberry. The third fruit in the list is",
    "Once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker "
    "who repaired every clock in the region. One winter morning a stranger arrived with a clock that "
    "ran backwards, and asked the clockmaker to make it run forwards again. The clockmaker opened the "
    "case, looked inside for a long time, and finally said",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Q: What is the boiling point of water at sea level in degrees Celsius?\nA:",
    "Summarize the following: Photosynthesis is the process by which green plants and some other "
    "organisms use sunlight to synthesize foods from carbon dioxide and water. It generally involves "
    "the green pigment chlorophyll and generates oxygen as a byproduct.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def spawned_server(args: argparse.Namespace, max_clients: int) -> Iterator[str]:
    """Start `llamay serve` for the run; yield its base URL; stop it with SIGTERM at the end."""
    port = free_port()
    cmd = [sys.executable, "-m", "llamay_core.cli.main", "serve", "-m", args.model, "-port", str(port),
           # -ctx is the whole cache, shared by the sequences (llama-server's -c with -np)
           "-concurrency", str(max(max_clients, 1)), "-ctx", str(args.ctx * max(max_clients, 1))]
    if args.backend:
        cmd += ["-backend", args.backend]
    if args.api_key:
        cmd += ["-api-key", args.api_key]
    cmd += args.serve_args
    with running_server(cmd, os.environ.copy(), port, args.startup_timeout, "serve_load") as base:
        yield base


@contextlib.contextmanager
def running_server(cmd: list[str], env: dict[str, str], port: int, startup_timeout: float, who: str,
                   **popen: Any) -> Iterator[str]:
    """Run `cmd` (a `llamay serve` on `port`); yield its base URL once /healthz answers 200; stop it
    with SIGTERM (then SIGKILL) at the end. `who` names the benchmark in its errors."""
    proc = subprocess.Popen(cmd, env=env, **popen)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"{who}: `{' '.join(cmd)}` exited with {proc.returncode} before it was ready")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"{who}: the server did not become ready in time")
            time.sleep(0.25)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def one_request(client: httpx.AsyncClient, prompt: str, max_tokens: int) -> dict[str, Any]:
    """One streamed completion; returns its time to first token, total time and tokens, or an error."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    ttft, tokens, done = None, 0, False
    try:
        async with client.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code != 200:
                await r.aread()
                return {"ok": False, "error": f"HTTP {r.status_code}: {r.text[:200]}"}
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                payload = line[6:]
                if payload == "[DONE]":
                    done = True
                    break
                event = json.loads(payload)
                if "error" in event:
                    return {"ok": False, "error": event["error"].get("message", "error")}
                if event.get("usage"):
                    tokens = event["usage"]["completion_tokens"]
                elif ttft is None and event["choices"] and event["choices"][0].get("text"):
                    ttft = time.perf_counter() - t0
    except httpx.HTTPError as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    if not done:
        return {"ok": False, "error": "stream ended without [DONE]"}
    return {"ok": True, "ttft": ttft if ttft is not None else time.perf_counter() - t0,
            "seconds": time.perf_counter() - t0, "tokens": tokens}


async def run_level(base: str, n_clients: int, args: argparse.Namespace) -> dict[str, Any]:
    """N clients, each sending requests back to back until the duration or request count is reached."""
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    limits = httpx.Limits(max_connections=n_clients + 4, max_keepalive_connections=n_clients + 4)
    results: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=args.timeout, limits=limits) as client:
        await one_request(client, PROMPTS[0], 2)  # warm-up: first-call costs stay out of the figures
        start = time.perf_counter()
        stop_at = start + args.duration

        async def client_loop(index: int) -> None:
            k = 0
            while (args.requests and k < args.requests) or (not args.requests and time.perf_counter() < stop_at):
                prompt = PROMPTS[(index + k * n_clients) % len(PROMPTS)]
                results.append(await one_request(client, prompt, args.max_tokens))
                k += 1

        await asyncio.gather(*(client_loop(i) for i in range(n_clients)))
        wall = time.perf_counter() - start
    ok = [r for r in results if r["ok"]]
    ttfts = np.array([r["ttft"] for r in ok]) if ok else np.array([np.nan])
    generated = sum(r["tokens"] for r in ok)
    return {
        "clients": n_clients,
        "requests": len(results),
        "failed": len(results) - len(ok),
        "errors": sorted({r["error"] for r in results if not r["ok"]})[:5],
        "seconds": wall,
        "requests_per_s": len(ok) / wall,
        "generated_tok_per_s": generated / wall,
        "ttft_p50_s": float(np.percentile(ttfts, 50)),
        "ttft_p99_s": float(np.percentile(ttfts, 99)),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-url", "--url", default=None, help="a running server (default: start one)")
    p.add_argument("-m", "--model", default="smollm2:135m")
    p.add_argument("-backend", "--backend", default=None)
    p.add_argument("-ctx", "--ctx", type=int, default=1024)
    p.add_argument("-api-key", "--api-key", dest="api_key", default=None)
    p.add_argument("-clients", "--clients", default="1,8", help="comma-separated client counts (default 1,8)")
    p.add_argument("-max-tokens", "--max-tokens", dest="max_tokens", type=int, default=64)
    p.add_argument("-duration", "--duration", type=float, default=30.0, help="seconds per level (default 30)")
    p.add_argument("-requests", "--requests", type=int, default=0,
                   help="requests per client instead of a duration (0: use -duration)")
    p.add_argument("-timeout", "--timeout", type=float, default=600.0)
    p.add_argument("-startup-timeout", "--startup-timeout", dest="startup_timeout", type=float, default=300.0)
    p.add_argument("-json", "--json", dest="json_out", default=None, help="also write the results as JSON here")
    p.add_argument("serve_args", nargs="*", help="extra `llamay serve` flags after --")
    args = p.parse_args(argv)
    levels = [int(c) for c in args.clients.split(",") if c.strip()]
    if not levels or min(levels) < 1:
        p.error("-clients needs counts >= 1")

    with contextlib.ExitStack() as stack:
        base = args.url or stack.enter_context(spawned_server(args, max(levels)))
        health = httpx.get(base + "/healthz", timeout=10).json()
        print(f"server: {health.get('model')} on {health.get('backend')} ({health.get('device')}), "
              f"{args.max_tokens} tokens per request, {len(PROMPTS)} prompts")
        rows = [asyncio.run(run_level(base, n, args)) for n in levels]

    print(f"{'clients':>7} {'requests':>8} {'failed':>6} {'req/s':>7} {'gen tok/s':>9} {'ttft p50':>9} {'ttft p99':>9}")
    for r in rows:
        print(f"{r['clients']:>7} {r['requests']:>8} {r['failed']:>6} {r['requests_per_s']:>7.2f} "
              f"{r['generated_tok_per_s']:>9.1f} {r['ttft_p50_s']:>8.3f}s {r['ttft_p99_s']:>8.3f}s")
        for e in r["errors"]:
            print(f"        error: {e}")
    single = next((r for r in rows if r["clients"] == 1), None)
    if single and single["generated_tok_per_s"] > 0:
        for r in rows:
            if r["clients"] > 1:
                print(f"{r['clients']} clients: {r['generated_tok_per_s'] / single['generated_tok_per_s']:.2f}x "
                      "the generated tok/s of one client")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"health": health, "max_tokens": args.max_tokens, "levels": rows}, f, indent=2)
    return 1 if any(r["failed"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
