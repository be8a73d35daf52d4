"""The prefix router: same keys as the prefix cache, hits go to holders, saturation spills over."""
from __future__ import annotations

import pytest

from llamay_core.cluster.routing import PrefixRouter
from llamay_core.state.prefix_cache import chain_keys

PAGE = 4
SYSTEM = list(range(100, 100 + 5 * PAGE))  # five full pages shared by every "conversation"


def route(router: PrefixRouter, prompt: list[int], load: list[int], up: list[bool] | None = None):
    r = router.choose(prompt, load, up or [True] * len(load))
    router.record(r)
    return r


def test_keys_are_the_prefix_cache_keys_of_the_usable_full_pages():
    router = PrefixRouter(2, page_size=PAGE, saturation=4)
    prompt = SYSTEM + [1, 2]
    assert router.keys(prompt) == tuple(chain_keys(prompt, PAGE, 5))
    # A prompt of exactly five pages leaves its last token to compute: four usable pages.
    assert router.keys(SYSTEM) == tuple(chain_keys(SYSTEM, PAGE, 4))
    assert router.keys([1, 2, 3]) == ()


def test_a_shared_prefix_goes_to_the_replica_that_computed_it():
    router = PrefixRouter(3, page_size=PAGE, saturation=4, imbalance=4)
    load = [0, 0, 0]
    first = route(router, SYSTEM + [1], load)
    assert first.outcome == "miss"
    load[first.replica] += 1
    for user in range(2, 5):
        r = route(router, SYSTEM + [user, user], load)
        assert (r.replica, r.outcome) == (first.replica, "hit")
        load[r.replica] += 1
    # Unrelated prompts balance over the least loaded replicas.
    other = route(router, [7] * 30, load)
    assert other.outcome == "miss" and other.replica != first.replica


def test_a_saturated_holder_spills_to_the_least_loaded_replica_which_then_holds_it_too():
    router = PrefixRouter(2, page_size=PAGE, saturation=2, imbalance=8)
    a = route(router, SYSTEM + [1], [0, 0])
    load = [0, 0]
    load[a.replica] = 2
    spill = route(router, SYSTEM + [2], load)
    assert spill.outcome == "overflow" and spill.replica != a.replica
    load[spill.replica] = 1
    r = route(router, SYSTEM + [3], load)
    assert (r.replica, r.outcome) == (spill.replica, "hit")


def test_a_hot_prefix_spills_before_saturation_when_another_replica_idles():
    router = PrefixRouter(2, page_size=PAGE, saturation=8, imbalance=2)
    first = route(router, SYSTEM + [1], [0, 0])
    load = [0, 0]
    load[first.replica] = 1
    assert route(router, SYSTEM + [2], load).outcome == "hit"
    load[first.replica] = 2
    spill = route(router, SYSTEM + [3], load)
    assert spill.outcome == "overflow" and spill.replica != first.replica
    load[spill.replica] = 1
    # Both hold it now: the least loaded holder gets the next one, as a hit.
    assert (route(router, SYSTEM + [4], load).replica, route(router, SYSTEM + [5], [2, 2]).outcome) == \
        (spill.replica, "hit")


def test_the_deepest_holder_with_room_wins():
    router = PrefixRouter(2, page_size=PAGE, saturation=8)
    deep = SYSTEM + list(range(50, 50 + 3 * PAGE)) + [9]
    route(router, SYSTEM + [1], [0, 1])  # replica 0 holds the system prompt
    route(router, deep, [8, 0])  # replica 1 computed the longer conversation (replica 0 was saturated)
    assert router.choose(deep + [4, 4], [0, 3], [True, True]).replica == 1


def test_dead_replicas_are_skipped_and_forgotten():
    router = PrefixRouter(2, page_size=PAGE, saturation=4)
    a = route(router, SYSTEM + [1], [0, 0])
    up = [True, True]
    up[a.replica] = False
    r = router.choose(SYSTEM + [2], [0, 0], up)
    assert r.replica != a.replica and r.outcome == "miss"
    router.forget(a.replica)
    assert router.choose(SYSTEM + [2], [0, 1], [True, True]).outcome == "miss"
    # With every replica down, the call still goes somewhere (Ray queues it until a restart).
    assert router.choose(SYSTEM, [0, 0], [False, False]).replica in (0, 1)


def test_an_idle_cluster_spreads_new_prefixes():
    router = PrefixRouter(2, page_size=PAGE, saturation=4)
    replicas = {route(router, [i] * (3 * PAGE), [0, 0]).replica for i in range(2)}
    assert replicas == {0, 1}


def test_the_key_table_is_bounded():
    router = PrefixRouter(2, page_size=PAGE, saturation=4, max_keys=10)
    for i in range(20):
        route(router, [i] * (3 * PAGE), [0, 0])
    assert len(router._holders) == 10


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        PrefixRouter(0, page_size=16, saturation=8)
