"""The Prometheus metrics of one server, in a registry of its own (several servers can share a process)."""
from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class ServerMetrics:
    """Counters and histograms the scheduler and the routes update; `render()` is /metrics."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("llamay_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=r)
        self.prompt_tokens = Counter("llamay_prompt_tokens", "prompt tokens of finished requests", registry=r)
        self.cached_tokens = Counter("llamay_cached_tokens", "prompt tokens reused from the prefix cache", registry=r)
        self.generated_tokens = Counter("llamay_generated_tokens", "tokens generated", registry=r)
        self.queue_seconds = Histogram("llamay_queue_seconds", "time from arrival to joining the batch",
                                       buckets=SECONDS_BUCKETS, registry=r)
        self.prefill_seconds = Histogram("llamay_prefill_seconds", "time from joining the batch to the first token",
                                         buckets=SECONDS_BUCKETS, registry=r)
        self.decode_seconds = Histogram("llamay_decode_seconds", "time from the first token to the last",
                                        buckets=SECONDS_BUCKETS, registry=r)
        self.batch_size = Histogram("llamay_batch_size", "sequences in each scheduler step",
                                    buckets=BATCH_BUCKETS, registry=r)
        self.step_seconds = Histogram("llamay_step_seconds", "duration of one scheduler step (one forward pass)",
                                      buckets=SECONDS_BUCKETS, registry=r)
        self.kv_pages_used = Gauge("llamay_kv_pages_used", "KV cache pages in use (sequences and prefix cache)",
                                   registry=r)
        self.kv_pages_total = Gauge("llamay_kv_pages_total", "KV cache pages in the pool", registry=r)
        self.queue_depth = Gauge("llamay_queue_depth", "requests waiting to join the batch", registry=r)
        self.running = Gauge("llamay_running_sequences", "sequences in the batch", registry=r)

    def watch(self, *, kv_pages_used: Callable[[], float], kv_pages_total: int,
              queue_depth: Callable[[], float], running: Callable[[], float]) -> None:
        """Gauges read at scrape time from the live objects."""
        self.kv_pages_used.set_function(kv_pages_used)
        self.kv_pages_total.set(kv_pages_total)
        self.queue_depth.set_function(queue_depth)
        self.running.set_function(running)

    def render(self) -> bytes:
        return generate_latest(self.registry)
