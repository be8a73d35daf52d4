"""Prefix-aware routing: send a request to the replica most likely to hold its prompt's prefix pages.

The keys are the prefix cache's own chain hashes (`state/prefix_cache.chain_keys`) over the first
full pages of the prompt, so "replica k saw key K" means "replica k computed (and, budget
permitting, cached) exactly that prefix". The router remembers, per key, which replicas it sent
that prefix to; it never asks a replica what it holds (a guess that costs nothing per request and
is corrected by the replica's own cache: a wrong guess only costs a prefill).

Choice, for each request:
1. hit: the deepest known key held by an up replica with room; several holders with room: the
   least loaded. Room: fewer requests in flight than `saturation` (the replica's batch size) and
   fewer than `imbalance` more than the least loaded replica, so one hot prefix (a shared system
   prompt) is not piled on one replica while another idles: it spills once, and from then on
   both replicas hold it.
2. overflow: the prefix is known but no holder has room: the least loaded up replica.
3. miss: no replica holds any page of it: the least loaded up replica.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import attrs

from llamay_core.state.prefix_cache import chain_keys

OUTCOMES = ("hit", "overflow", "miss")


@attrs.frozen
class Route:
    """Where one request goes, why, and the prefix keys to record for it."""

    replica: int
    outcome: str
    keys: tuple[bytes, ...]


class PrefixRouter:
    """Chooses a replica per request; only the front's event loop calls it (no locking)."""

    def __init__(self, n_replicas: int, page_size: int, saturation: int, imbalance: int | None = None,
                 max_pages: int = 64, max_keys: int = 1 << 16) -> None:
        if n_replicas < 1 or page_size < 1 or saturation < 1:
            raise ValueError("a router needs at least one replica, a page size and a saturation of at least 1")
        self.n_replicas = n_replicas
        self.page_size = page_size
        self.saturation = saturation
        self.imbalance = imbalance if imbalance is not None else max(2, saturation // 2)
        self.max_pages = max_pages
        self.max_keys = max_keys
        self._holders: OrderedDict[bytes, set[int]] = OrderedDict()  # LRU: key -> replicas sent it
        self._turn = 0

    def keys(self, prompt_ids: Sequence[int]) -> tuple[bytes, ...]:
        """Chain keys of the prompt's full pages, as the prefix cache computes them (at least one
        token is always left to compute, so the last page counts only when a token follows it)."""
        usable = min(self.max_pages, (len(prompt_ids) - 1) // self.page_size)
        return tuple(chain_keys(prompt_ids, self.page_size, max(usable, 0)))

    def choose(self, prompt_ids: Sequence[int], load: Sequence[int], up: Sequence[bool]) -> Route:
        """The replica for a request; `load[k]` is requests in flight on replica k, `up[k]` its health.

        With no replica up, every replica is a candidate: Ray queues the call until one restarts.
        """
        alive = [k for k in range(self.n_replicas) if up[k]] or list(range(self.n_replicas))
        room = min(self.saturation, min(load[k] for k in alive) + self.imbalance)
        keys = self.keys(prompt_ids)
        known = False
        for key in reversed(keys):
            holders = [k for k in self._holders.get(key, ()) if k in alive]
            if not holders:
                continue
            known = True
            with_room = [k for k in holders if load[k] < room]
            if with_room:
                return Route(self._least_loaded(with_room, load), "hit", keys)
        return Route(self._least_loaded(alive, load), "overflow" if known else "miss", keys)

    def _least_loaded(self, candidates: list[int], load: Sequence[int]) -> int:
        """The least loaded candidate; ties take turns, so an idle cluster still spreads new prefixes."""
        self._turn += 1
        return min(candidates, key=lambda k: (load[k], (k - self._turn) % self.n_replicas))

    def record(self, route: Route) -> None:
        """Remember that `route.replica` now computes the prefix of `route.keys`."""
        for key in route.keys:
            holders = self._holders.get(key)
            if holders is None:
                self._holders[key] = {route.replica}
            else:
                holders.add(route.replica)
                self._holders.move_to_end(key)
        while len(self._holders) > self.max_keys:
            self._holders.popitem(last=False)

    def forget(self, replica: int) -> None:
        """Replica `replica` lost its cache (it died and restarts empty)."""
        emptied = []
        for key, holders in self._holders.items():
            holders.discard(replica)
            if not holders:
                emptied.append(key)
        for key in emptied:
            del self._holders[key]
