"""/metrics for a cluster: the replicas' own metrics summed, plus routing and replica health.

Each replica keeps the single-server metrics (`server/metrics.py`) in its process; the front's
health loop fetches their text every probe. Summing is exact for counters, histograms (same
buckets everywhere) and the gauges of amounts (pages, queue, running; throughputs, since the
replicas run side by side); the gauges that are shares or per-call averages are the replicas'
values weighted by what each average is over (`AVERAGED`). Per-replica views are the
`llamay_replica_*` families.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from llamay_core.server.metrics import ServerMetrics

# The front answers HTTP itself; the replicas' request counters stay at zero.
FRONT_ONLY = frozenset({"llamay_requests"})

# Gauge -> the samples whose sum, per replica, weighs its value in the cluster's mean.
AVERAGED = {
    "llamacpp:prompt_cache_hit_ratio": ("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cache_total"),
    "llamacpp:n_busy_slots_per_decode": ("llamacpp:n_decode_total",),
    "llamacpp:kv_cache_usage_ratio": ("llamay_kv_pages_total",),
}


class ClusterMetrics(ServerMetrics):
    """ServerMetrics whose `render()` shows the cluster: summed replicas and routing.

    It is a ServerMetrics so the app can set its gauges as usual; the inherited per-server
    families stay unrendered, since the replicas' own (summed) take their place. The front's
    HTTP request counts are the app's own (`HttpMetrics`), rendered beside this.
    """

    def __init__(self, replica_names: Sequence[str], latest: Callable[[], Sequence[dict[str, Any]]]) -> None:
        super().__init__()
        self.replica_names = list(replica_names)
        self.view = CollectorRegistry()
        self.routes = Counter("llamay_route_requests", "requests routed, by replica and outcome "
                              "(hit: sent to a replica holding its prefix; overflow: the holders were "
                              "saturated; miss: no replica held it)", ["replica", "outcome"], registry=self.view)
        self.failures = Counter("llamay_replica_failures", "calls to a replica that failed (died, unreachable)",
                                ["replica"], registry=self.view)
        self.view.register(_ReplicaSum(self.replica_names, latest))

    def routed(self, replica: str, outcome: str) -> None:
        self.routes.labels(replica=replica, outcome=outcome).inc()

    def replica_failed(self, replica: str) -> None:
        self.failures.labels(replica=replica).inc()

    def render(self) -> bytes:
        return generate_latest(self.view)


class _ReplicaSum:
    """A collector over the replicas' last metrics texts: every family summed, plus health per replica."""

    def __init__(self, names: Sequence[str], latest: Callable[[], Sequence[dict[str, Any]]]) -> None:
        self.names = names
        self.latest = latest

    def collect(self) -> Iterator[Metric]:
        stats = list(self.latest())
        up = GaugeMetricFamily("llamay_replica_up", "1 when the replica answered the last health probe",
                               labels=["replica"])
        in_flight = GaugeMetricFamily("llamay_replica_in_flight", "requests accepted by the replica",
                                      labels=["replica"])
        cached = GaugeMetricFamily("llamay_replica_cached_tokens", "prompt tokens the replica took from its "
                                   "prefix cache (since it started)", labels=["replica"])
        families: dict[str, Metric] = {}
        sums: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}
        weighted: dict[str, list[float]] = {}  # averaged gauge -> [sum of value x weight, sum of weights]
        for name, s in zip(self.names, stats):
            up.add_metric([name], 1.0 if s.get("alive") else 0.0)
            in_flight.add_metric([name], float(s.get("in_flight", 0)))
            plain: dict[str, float] = {}  # this replica's unlabelled samples
            for family in text_string_to_metric_families(s.get("metrics", "")):
                if family.name in FRONT_ONLY or family.name.endswith("_created"):
                    continue
                families.setdefault(family.name, family)
                for sample in family.samples:
                    if sample.name.endswith("_created"):
                        continue
                    key = (family.name, sample.name, tuple(sorted(sample.labels.items())))
                    sums[key] = sums.get(key, 0.0) + sample.value
                    if not sample.labels:
                        plain[sample.name] = sample.value
            cached.add_metric([name], plain.get("llamay_cached_tokens_total", 0.0))
            for gauge, over in AVERAGED.items():
                if gauge in plain:
                    weight = sum(plain.get(w, 0.0) for w in over)
                    acc = weighted.setdefault(gauge, [0.0, 0.0])
                    acc[0] += plain[gauge] * weight
                    acc[1] += weight
        for gauge, (total, weight) in weighted.items():
            sums[(gauge, gauge, ())] = total / weight if weight else 0.0
        yield up
        yield in_flight
        yield cached
        for fname, family in families.items():
            out = Metric(fname, family.documentation, family.type)
            out.samples = [Sample(sname, dict(labels), value) for (f, sname, labels), value in sums.items() if f == fname]
            yield out
