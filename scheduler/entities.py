"""The scheduler's values: what it is asked (a `Request`), what it decides about (a `Site`),
and what it answers (an `Eviction`, a `Candidate`, a `Decision`, a `StepPlan`).

All but StepPlan are frozen: Algorithm 1 (scheduler.algorithm1) builds them from a snapshot
and nothing changes them afterwards, so a step's plan can be kept and handed out again
(scheduler.settled) and compared field by field (tests/unit/test_scheduler_speed.py).
"""
from __future__ import annotations

import collections
import dataclasses
import typing
from typing import NamedTuple

from .cost import INF, Strategy
from .rounds import RoundLoad

PARTS = ("A", "B")                  # an adapter's two factors at a site: x A (D x R), then B (R x D)
BOTH = frozenset(PARTS)
NOTHING: frozenset = frozenset()
# the reason of a site that took its fastest candidate with nothing to evict (line 6); the
# settled-step cache (scheduler.settled) reuses only steps whose every site has it
FASTEST = "fastest, fits the GPU budget (line 6)"


class SchedulerError(ValueError):
    """A request, adapter or configuration the scheduler cannot serve."""


@dataclasses.dataclass(frozen=True)
class Request:
    """A request in this step's batch: its adapter and its context (KV tokens so far)."""
    rid: int
    adapter: int
    context: int
    new: bool = False           # arrived this step: raises its adapter's temperature


class Site(NamedTuple):
    """One adapter's product at one injected weight (a projection), the unit Algorithm 1 decides."""
    adapter: int
    projection: str


@dataclasses.dataclass(frozen=True)
class Eviction:
    kind: str                   # "cold", "hot", "kv", "serving"
    target: int | Site | float  # the adapter ("cold", "hot"), the Site ("serving"), the KV share left ("kv")
    parts: frozenset            # for serving sites: the factors dropped
    nbytes: float
    penalty_s: float            # added step time this eviction costs (amortized for reloads)
    for_kv: bool = False        # made room for the KV duplicates (not for a site)

    def describe(self) -> str:
        if self.kind == "kv":
            return f"KV duplicates ({self.nbytes / 1e6:.1f} MB, +{self.penalty_s * 1e6:.2f} us)"
        if self.kind in ("cold", "hot"):
            what = f"adapter {self.target}"
        else:
            site = typing.cast(Site, self.target)
            what = f"{site.adapter}/{site.projection}:{''.join(sorted(self.parts))}"
        why = " for KV duplicates" if self.for_kv else ""
        return f"{self.kind} {what} ({self.nbytes / 1e6:.1f} MB, +{self.penalty_s * 1e6:.2f} us){why}"


@dataclasses.dataclass(frozen=True)
class Candidate:
    strategy: Strategy
    step_s: float               # this step's time of the site under the strategy (all layers)
    load_s: float = 0.0         # the missing factors' load, amortized over expected_steps
    need_bytes: float = 0.0     # GPU memory the missing factors take
    evictions: tuple = ()
    infeasible: str | None = None

    @property
    def penalty_s(self) -> float:
        return sum(e.penalty_s for e in self.evictions)

    @property
    def total_s(self) -> float:
        return INF if self.infeasible else self.step_s + self.load_s + self.penalty_s


@dataclasses.dataclass(frozen=True)
class Decision:
    site: Site
    batch: int
    rank: int
    parts_before: frozenset
    candidates: tuple           # ranked by total_s, infeasible last
    chosen: Candidate
    reason: str

    def explain(self) -> str:
        cached = "".join(sorted(self.parts_before)) or "nothing"
        lines = [f"adapter {self.site.adapter} / {self.site.projection} (batch {self.batch}, R={self.rank}, "
                 f"GPU holds {cached}) -> {self.chosen.strategy.name}: {self.reason}"]
        for c in self.candidates:
            if c.infeasible:
                lines.append(f"    {c.strategy.name}  infeasible: {c.infeasible}")
                continue
            evict = ", ".join(e.describe() for e in c.evictions) or "-"
            lines.append(f"    {c.strategy.name}  step {c.step_s * 1e6:9.2f} us  load {c.load_s * 1e6:7.2f} us  "
                         f"needs {c.need_bytes / 1e6:8.2f} MB  evicts {evict}  = {c.total_s * 1e6:9.2f} us")
        return "\n".join(lines)


@dataclasses.dataclass
class StepPlan:
    step: int
    decisions: dict[Site, Decision]
    p_kv: float                 # share of the batch's KV tokens duplicated on the GPU
    kv_units: dict[int, int]    # rid -> KV units (pages, scheduler.kv_pages) the GPU holds
    kv_tokens: dict[int, int]   # rid -> the tokens of those pages
    kv_bytes: float             # GPU memory the duplicates take (every layer)
    loads: list                 # (Site, parts, bytes) loaded into GPU memory this step
    evictions: list[Eviction]   # in order
    precached: list[int]        # adapters pre-cached this step
    used_bytes: float
    budget_bytes: float
    rounds: dict[str, RoundLoad]    # round name -> RoundLoad of one layer (scheduler.rounds)
    attention_on_devices: bool = True   # the devices compute the pages the GPU does not hold (else the GPU reads them)

    def strategy_mix(self) -> collections.Counter:
        return collections.Counter(d.chosen.strategy.name for d in self.decisions.values())

    def explain(self) -> str:
        mix = ", ".join(f"{k} {v}" for k, v in sorted(self.strategy_mix().items()))
        rest = "the devices compute the rest" if self.attention_on_devices else "the GPU reads the rest over the link"
        lines = [f"step {self.step}: {len(self.decisions)} sites ({mix}); GPU {self.used_bytes / 1e9:.3f} of "
                 f"{self.budget_bytes / 1e9:.3f} GB; KV duplicated {self.p_kv:.3f} "
                 f"({self.kv_bytes / 1e9:.3f} GB), {rest}"]
        lines += [d.explain() for d in self.decisions.values()]
        room = [e.describe() for e in self.evictions if e.for_kv]
        if room:
            lines.append(f"evicted for KV duplicates: {', '.join(room)}")
        if self.precached:
            lines.append(f"pre-cached: {self.precached}")
        return "\n".join(lines)
