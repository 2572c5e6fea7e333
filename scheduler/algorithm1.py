"""Algorithm 1 of seed 000 (section VI-A) for one site, as a pure function of a snapshot.

"It sorts the four strategies by cost-model time (line 3) and takes the fastest that fits in
GPU memory (line 6). Otherwise it evicts cold adapters first (line 8), and if more space is
still needed it also considers evicting the other GPU memory residents, namely KV cache, hot
adapters, and serving adapters (lines 15-18). [...] we re-rank them all with the cost model
and take the fastest (lines 19 and 20)."

`decide(snapshot, residents_of)` reads nothing but its arguments and changes nothing: the
scheduler (scheduler.scheduler) prices the candidates and lists the residents, then applies
the decision (evictions, loads) to its ledger. Two of the inputs are functions, each for a
reason of cost, not of state: `residents_of` is called only when the fastest candidate does
not fit (listing the residents sorts every adapter's temperature), and `Residents.others`
only when cold adapters do not make the room (pricing a serving site's factors is a
cost-model search per site, and the KV duplicates' an attention round).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from .cost import INF
from .entities import BOTH, FASTEST, Candidate, Decision, Eviction, Site


@dataclasses.dataclass(frozen=True)
class SiteSnapshot:
    """What line 3 and line 6 read: the site, its candidates priced by the cost model (the
    time each adds to the step, its amortized load, the bytes its missing factors need),
    and the GPU memory and cache slot free now."""
    site: Site
    batch: int
    rank: int
    parts: frozenset            # the factors the GPU holds for the site
    candidates: tuple[Candidate, ...]
    free_bytes: float
    slot_free: bool             # the site's adapter holds a cache slot, or one is free (max_loras)


@dataclasses.dataclass(frozen=True)
class IdleAdapter:
    """An adapter holding factors that no request in the batch uses."""
    adapter: int
    nbytes: int                 # GPU memory its factors take
    hot: bool                   # among the hot set (the temperatures' hottest)
    reload_s: float             # its reload over the link, amortized: a hot one's eviction penalty


@dataclasses.dataclass(frozen=True)
class Others:
    """The residents lines 15-18 add to the hot adapters: the KV duplicates and the other
    serving adapters' factors."""
    kv_bytes: float                                 # the KV duplicates' bytes now
    kv_penalty_s: float                             # the attention time evicting all of them adds
    shrink_kv: Callable[[float], Eviction]          # the KV eviction leaving at most this many bytes
    serving: Sequence[Eviction]                     # one option per site of another serving adapter


@dataclasses.dataclass(frozen=True)
class Residents:
    """What lines 8-18 may evict to make room for one site: the idle adapters (cold and
    hot), and the others, listed only when cold adapters do not make the room."""
    idle: tuple[IdleAdapter, ...]                   # coldest first
    max_loras: int
    others: Callable[[], Others]


def rank(candidates: Sequence[Candidate]) -> tuple[Candidate, ...]:
    """Line 3: the candidates by the time each adds to the step, infeasible last (ties by name)."""
    return tuple(sorted(candidates, key=_by_time))


def decide(snapshot: SiteSnapshot, residents_of: Callable[[], Residents]) -> Decision:
    s = snapshot
    ranked = rank(s.candidates)

    def fits(c: Candidate) -> bool:
        return c.need_bytes <= s.free_bytes and (s.slot_free or not c.need_bytes)
    fitting = [c for c in ranked if not c.infeasible and fits(c)]   # E2 needs nothing: never empty
    best_fit = fitting[0]
    if best_fit is ranked[0]:
        return Decision(s.site, s.batch, s.rank, s.parts, ranked, best_fit, FASTEST)     # line 6

    # lines 8-20: make room for each faster candidate, price it, re-rank
    residents = residents_of()
    options = [best_fit]
    priced = []
    for c in ranked:
        if c is best_fit:
            break
        if c.infeasible:
            continue
        plan, why = eviction_plan(c.need_bytes - s.free_bytes, not s.slot_free, residents)
        if plan is None:
            priced.append(dataclasses.replace(c, infeasible=f"cannot free {c.need_bytes / 1e6:.2f} MB: {why}"))
            continue
        c = dataclasses.replace(c, evictions=tuple(plan))
        priced.append(c)
        options.append(c)
    chosen = min(options, key=_by_time)
    others = [c for c in ranked if c.strategy not in {p.strategy for p in priced} and c is not best_fit]
    table = tuple(sorted(priced + [best_fit] + others, key=_by_time))
    if chosen is best_fit:
        reason = "fastest that fits; every faster one costs more with its evictions (lines 19-20)"
    elif all(e.kind == "cold" for e in chosen.evictions):
        reason = "fastest after evicting cold adapters (line 8)"
    else:
        reason = "fastest after evictions, re-ranked with their penalties (lines 15-20)"
    return Decision(s.site, s.batch, s.rank, s.parts, table, chosen, reason)


def eviction_plan(short: float, need_slot: bool, residents: Residents) -> tuple[list[Eviction] | None, str | None]:
    """Residents to evict so that `short` more bytes (and a cache slot, if `need_slot`)
    are free: cold adapters first, coldest first (line 8); then, cheapest penalty per
    byte first, KV duplicates, hot adapters and other serving adapters' factors
    (lines 15-18). Returns (evictions, None) or (None, why)."""
    plan, freed, slot = [], 0.0, not need_slot
    for r in residents.idle:                                        # line 8
        if r.hot:
            continue
        if freed >= short and slot:
            break
        plan.append(Eviction("cold", r.adapter, BOTH, r.nbytes, 0.0))
        freed += r.nbytes
        slot = True
    if freed >= short and slot:
        return plan, None

    # lines 15-18, cheapest penalty per byte first (ties: hot adapters, KV, serving
    # factors, each group in its own order)
    hot_options = [Eviction("hot", r.adapter, BOTH, r.nbytes, r.reload_s) for r in residents.idle if r.hot]
    taken = None
    if not slot:
        # only a whole adapter frees a cache slot (max_loras): the cheapest hot one
        if not hot_options:
            return None, f"max_loras={residents.max_loras!r} adapters are cached and none is idle"
        taken = min(hot_options, key=lambda e: e.penalty_s)
        plan.append(taken)
        freed += taken.nbytes
        if freed >= short:
            return plan, None
    # (sort key, option); None stands for the KV duplicates, shrunk only as far as needed
    options: list[tuple[tuple[float, int, int], Eviction | None]] = [
        ((_penalty_per_byte(e), 0, i), e) for i, e in enumerate(hot_options) if e is not taken]
    others = residents.others()
    kv_now = others.kv_bytes
    if kv_now:
        options.append(((others.kv_penalty_s / kv_now, 1, 0), None))
    options += [((_penalty_per_byte(e), 2, i), e) for i, e in enumerate(others.serving)]
    for _, e in sorted(options, key=lambda option: option[0]):
        if freed >= short:
            break
        if e is None:
            # take only the KV that is needed: the largest share that frees enough
            e = others.shrink_kv(kv_now - (short - freed))
        plan.append(e)
        freed += e.nbytes
    if freed >= short:
        return plan, None
    return None, f"only {freed / 1e6:.2f} MB of {short / 1e6:.2f} MB can be freed"


def _by_time(c: Candidate) -> tuple[float, str]:
    return c.total_s, c.strategy.name


def _penalty_per_byte(e: Eviction) -> float:
    """The eviction options' sort key (lines 15-18)."""
    return e.penalty_s / e.nbytes if e.nbytes else INF
