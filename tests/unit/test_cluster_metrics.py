"""The cluster's /metrics: amounts summed over replicas, shares weighted by what they are shares of."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from llamay_core.cluster.cluster_metrics import ClusterMetrics


def replica_text(prompt: float, cached: float, decodes: float, busy_per_decode: float, pages_used: float,
                 pages_total: float, tps: float) -> str:
    seen = prompt + cached
    return "\n".join([
        "# TYPE llamacpp:prompt_tokens counter", f"llamacpp:prompt_tokens_total {prompt}",
        "# TYPE llamacpp:prompt_tokens_cache counter", f"llamacpp:prompt_tokens_cache_total {cached}",
        "# TYPE llamacpp:prompt_cache_hit_ratio gauge", f"llamacpp:prompt_cache_hit_ratio {cached / seen}",
        "# TYPE llamacpp:n_decode counter", f"llamacpp:n_decode_total {decodes}",
        "# TYPE llamacpp:n_busy_slots_per_decode gauge", f"llamacpp:n_busy_slots_per_decode {busy_per_decode}",
        "# TYPE llamay_kv_pages_used gauge", f"llamay_kv_pages_used {pages_used}",
        "# TYPE llamay_kv_pages_total gauge", f"llamay_kv_pages_total {pages_total}",
        "# TYPE llamacpp:kv_cache_usage_ratio gauge", f"llamacpp:kv_cache_usage_ratio {pages_used / pages_total}",
        "# TYPE llamacpp:predicted_tokens_seconds gauge", f"llamacpp:predicted_tokens_seconds {tps}",
        "",
    ])


def scraped(metrics: ClusterMetrics) -> dict[str, float]:
    text = metrics.render().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}


def test_shares_are_recomputed_over_the_cluster_and_amounts_summed():
    stats = [{"alive": True, "metrics": replica_text(100, 300, 10, 4.0, 10, 100, 20.0)},
             {"alive": True, "metrics": replica_text(300, 0, 30, 1.0, 50, 300, 30.0)}]
    got = scraped(ClusterMetrics(["a", "b"], lambda: stats))
    assert got["llamacpp:prompt_tokens_total"] == 400
    assert got["llamacpp:prompt_cache_hit_ratio"] == 300 / 700  # not 0.75 + 0.0
    assert got["llamacpp:n_busy_slots_per_decode"] == (4.0 * 10 + 1.0 * 30) / 40
    assert got["llamacpp:kv_cache_usage_ratio"] == 60 / 400
    assert got["llamay_kv_pages_used"] == 60
    assert got["llamacpp:predicted_tokens_seconds"] == 50.0  # replicas decode side by side


def test_a_cluster_that_saw_nothing_reports_zero_shares():
    stats = [{"alive": True, "metrics": "# TYPE llamacpp:prompt_cache_hit_ratio gauge\nllamacpp:prompt_cache_hit_ratio 0.0\n"}]
    assert scraped(ClusterMetrics(["a"], lambda: stats))["llamacpp:prompt_cache_hit_ratio"] == 0.0
