"""/metrics for a cluster: the replicas' own metrics summed, plus routing and replica health.

Each replica keeps the single-server metrics (`server/metrics.py`) in its process; the front's
health loop fetches their text every probe. Summing is exact for counters, histograms (same
buckets everywhere) and the gauges here (pages, queue, running); per-replica views are the
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
        for name, s in zip(self.names, stats):
            up.add_metric([name], 1.0 if s.get("alive") else 0.0)
            in_flight.add_metric([name], float(s.get("in_flight", 0)))
            replica_cached = 0.0
            for family in text_string_to_metric_families(s.get("metrics", "")):
                if family.name in FRONT_ONLY or family.name.endswith("_created"):
                    continue
                families.setdefault(family.name, family)
                for sample in family.samples:
                    if sample.name.endswith("_created"):
                        continue
                    key = (family.name, sample.name, tuple(sorted(sample.labels.items())))
                    sums[key] = sums.get(key, 0.0) + sample.value
                    if sample.name == "llamay_cached_tokens_total":
                        replica_cached = sample.value
            cached.add_metric([name], replica_cached)
        yield up
        yield in_flight
        yield cached
        for fname, family in families.items():
            out = Metric(fname, family.documentation, family.type)
            out.samples = [Sample(sname, dict(labels), value) for (f, sname, labels), value in sums.items() if f == fname]
            yield out
