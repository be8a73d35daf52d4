"""The Prometheus metrics of one server, in registries of their own (several servers can share a
process): `HttpMetrics` counts answers by route (the HTTP side), `ServerMetrics` describes the
engine, under llamay's names and under llama-server's (`llamacpp:*`), so dashboards built for
either read it."""
from __future__ import annotations

from typing import Any, Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class ServerMetrics:
    """Counters and histograms the scheduler and the routes update; `render()` is /metrics."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
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

    def watch_llama_server(self, scheduler: Any, model: Any) -> None:
        """llama-server's metric names, read at scrape time from the scheduler and the KV pool."""
        self.registry.register(_LlamaServerNames(scheduler, model))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class HttpMetrics:
    """Answers counted by route and status."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("llamay_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _LlamaServerNames:
    """The `llamacpp:*` metrics llama-server's /metrics has, from llamay's own counts."""

    def __init__(self, scheduler: Any, model: Any) -> None:
        self.scheduler = scheduler
        self.model = model

    def collect(self) -> Iterator[Metric]:
        s, t = self.scheduler, self.scheduler.totals
        pool = self.model.pool
        page = self.model.kv_spec.page_size

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            return CounterMetricFamily(f"llamacpp:{name}", doc, value=value)

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"llamacpp:{name}", doc, value=value)

        yield counter("prompt_tokens", "Number of prompt tokens processed.", t.prompt_tokens)
        yield counter("prompt_seconds", "Prompt process time", t.prompt_seconds)
        yield counter("prompt_tokens_cache", "Prompt tokens taken from the prompt cache.", t.cached_tokens)
        seen = t.cached_tokens + t.prompt_tokens
        yield gauge("prompt_cache_hit_ratio", "Share of prompt tokens taken from the prompt cache.",
                    t.cached_tokens / seen if seen else 0.0)
        yield counter("tokens_predicted", "Number of generation tokens processed.", t.predicted_tokens)
        yield counter("tokens_predicted_seconds", "Predict process time", t.predicted_seconds)
        yield counter("n_decode", "Total number of llama_decode() calls", s.steps)
        yield gauge("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
                    t.busy_slots / s.steps if s.steps else 0.0)
        yield gauge("prompt_tokens_seconds", "Average prompt throughput in tokens/s.",
                    t.prompt_tokens / t.prompt_seconds if t.prompt_seconds else 0.0)
        yield gauge("predicted_tokens_seconds", "Average generation throughput in tokens/s.",
                    t.predicted_tokens / t.predicted_seconds if t.predicted_seconds else 0.0)
        yield gauge("kv_cache_usage_ratio", "KV-cache usage. 1 means 100 percent usage.",
                    pool.pages_in_use / pool.capacity if pool.capacity else 0.0)
        yield gauge("kv_cache_tokens", "KV-cache tokens.", pool.pages_in_use * page)
        yield gauge("requests_processing", "Number of requests processing.", s.n_running)
        yield gauge("requests_deferred", "Number of requests deferred.", s.queue_depth)
