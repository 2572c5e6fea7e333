"""The caching layer around Algorithm 1: a step's decisions kept by the value of what they
were decided from, and handed out again when a step asks the same.

Which steps may be kept: those where every site took its fastest candidate (line 6) and
nothing was loaded or evicted. Such a step's decisions depend on the serving adapters (in
the order Algorithm 1 visits them, largest batch first), each one's batch and rank, and the
factors each of its sites holds, and on nothing else: a site's candidates are priced
against the rounds the sites before it filled (scheduler.layer_rounds), which those values
fix, and the fastest candidate needs nothing loaded, so it fits whatever memory is free
and whatever the temperatures are (scheduler.algorithm1). A forced strategy (the serving
ablations) reads the same values. So `key()` is those values, and an entry holds the
decisions and the rounds they filled.

A step that loads or evicts anything is not kept: its decisions read the free memory, the
cache slots and the temperatures, which the key leaves out. tests/unit/test_scheduler_speed.py
drives a scheduler with the cache beside one without it and finds every plan equal.
"""
from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping

from .entities import Decision, Site
from .rounds import RoundLoad

# (adapter, its batch, its rank, the parts each of its sites holds), per serving adapter in order
StepKey = tuple[tuple[int, int, int, tuple[frozenset, ...]], ...]


@dataclasses.dataclass(frozen=True)
class Settled:
    """A kept step: its decisions and the rounds of one layer they filled."""
    decisions: Mapping[Site, Decision]
    rounds: Mapping[str, RoundLoad]


class SettledSteps:
    """Settled steps by key, the `capacity` most recently used (0 keeps none: Algorithm 1
    on every site of every step), and how often a step found one."""

    def __init__(self, capacity: int = 1):
        self.capacity = capacity
        self._kept: collections.OrderedDict[StepKey, Settled] = collections.OrderedDict()
        self.lookups = 0
        self.hits = 0

    @property
    def hit_rate(self) -> float:
        """The share of lookups that found a settled step (0 before the first)."""
        return self.hits / self.lookups if self.lookups else 0.0

    def get(self, key: StepKey) -> Settled | None:
        self.lookups += 1
        found = self._kept.get(key)
        if found is not None:
            self.hits += 1
            self._kept.move_to_end(key)
        return found

    def put(self, key: StepKey, decisions: Mapping[Site, Decision], rounds: Mapping[str, RoundLoad]) -> None:
        """Keep a settled step (the caller says it is one: see the module docstring)."""
        if not self.capacity:
            return
        self._kept[key] = Settled(dict(decisions), {n: r.copy() for n, r in rounds.items()})
        self._kept.move_to_end(key)
        while len(self._kept) > self.capacity:
            self._kept.popitem(last=False)

    def stats(self) -> dict[str, float]:
        return {"lookups": self.lookups, "hits": self.hits, "hit_rate": self.hit_rate, "kept": len(self._kept)}
