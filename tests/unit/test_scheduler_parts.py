"""The scheduler's parts one at a time (issue 27, item 6): Algorithm 1 as a pure function of
a snapshot (scheduler.algorithm1), the GPU ledger's running totals (scheduler.ledger), the
settled-step cache and its value keys (scheduler.settled), and the public surface serving/
uses (no private attribute of the scheduler read from outside scheduler/)."""
import ast
import pathlib
import random

import pytest

from scheduler import algorithm1
from scheduler.adapters import Adapters
from scheduler.algorithm1 import IdleAdapter, Others, Residents, SiteSnapshot
from scheduler.config import load_scheduler_config
from scheduler.cost import Strategy
from scheduler.entities import BOTH, FASTEST, NOTHING, Candidate, Eviction, SchedulerError, Site
from scheduler.ledger import GpuLedger
from scheduler.scheduler import Request, Scheduler
from scheduler.settled import SettledSteps

ROOT = pathlib.Path(__file__).resolve().parents[2]
SITE = Site(0, "q")


def snapshot(times, needs, free, slot_free=True, infeasible=()):
    """A site whose candidate E<i> adds times[i] seconds and needs needs[i] bytes."""
    candidates = tuple(Candidate(s, t, 0.0, n, (), "no" if s.name in infeasible else None)
                       for s, t, n in zip(Strategy, times, needs, strict=True))
    return SiteSnapshot(SITE, 4, 16, NOTHING, candidates, free, slot_free)


def residents(idle=(), kv_bytes=0.0, kv_penalty_s=0.0, serving=(), max_loras=4):
    asked = []

    def others():
        asked.append(True)
        return Others(kv_bytes, kv_penalty_s,
                      lambda keep: Eviction("kv", max(keep, 0), NOTHING, kv_bytes - max(keep, 0), 1e-6),
                      tuple(serving))
    return Residents(tuple(idle), max_loras, others), asked


def no_residents():
    raise AssertionError("Algorithm 1 listed the residents though the fastest candidate fits")


def test_fastest_that_fits_needs_no_residents():
    """Line 3 ranks by time, line 6 takes the fastest that fits: the residents are never read."""
    d = algorithm1.decide(snapshot([3.0, 4.0, 1.0, 2.0], [10, 0, 0, 5], free=0), no_residents)
    assert d.chosen.strategy is Strategy.E3 and d.reason == FASTEST
    assert [c.strategy.name for c in d.candidates] == ["E3", "E4", "E1", "E2"]
    # infeasible last, whatever its time
    d = algorithm1.decide(snapshot([3.0, 4.0, 1.0, 2.0], [0, 0, 0, 0], free=0, infeasible=("E3",)), no_residents)
    assert d.chosen.strategy is Strategy.E4 and d.candidates[-1].strategy is Strategy.E3


def test_the_same_snapshot_gives_the_same_decision():
    snap = snapshot([1.0, 4.0, 3.0, 2.0], [100, 0, 0, 50], free=10)
    idle = [IdleAdapter(7, 60, False, 0.0), IdleAdapter(8, 60, False, 0.0)]
    a = algorithm1.decide(snap, lambda: residents(idle)[0])
    b = algorithm1.decide(snap, lambda: residents(idle)[0])
    assert a == b and a.chosen.strategy is Strategy.E1
    assert [(e.kind, e.target) for e in a.chosen.evictions] == [("cold", 7), ("cold", 8)]
    assert a.reason == "fastest after evicting cold adapters (line 8)"


def test_cold_first_then_the_others_by_penalty_per_byte():
    """Line 8 takes cold adapters coldest first and skips hot ones; lines 15-18 take the
    cheapest penalty per byte first (a hot adapter at 2e-6 s/B before KV at 3e-6 s/B) and
    shrink the KV only as far as needed; the others are listed only then."""
    idle = [IdleAdapter(1, 30, False, 0.0), IdleAdapter(2, 40, True, 80e-6), IdleAdapter(3, 20, False, 0.0)]
    res, asked = residents(idle, kv_bytes=100, kv_penalty_s=300e-6)
    plan, why = algorithm1.eviction_plan(45, False, res)
    assert why is None and [(e.kind, e.target) for e in plan] == [("cold", 1), ("cold", 3)] and not asked
    plan, why = algorithm1.eviction_plan(100, False, res)
    assert why is None and asked
    assert [(e.kind, e.target) for e in plan] == [("cold", 1), ("cold", 3), ("hot", 2), ("kv", 90)]
    plan, why = algorithm1.eviction_plan(1000, False, res)
    assert plan is None and why.startswith("only")


def test_a_cache_slot_takes_a_whole_adapter():
    """With max_loras adapters held and none idle and cold, only a hot adapter frees a slot."""
    res, _ = residents([], max_loras=2)
    plan, why = algorithm1.eviction_plan(0, True, res)
    assert plan is None and "max_loras=2" in why
    res, _ = residents([IdleAdapter(5, 10, True, 9e-6), IdleAdapter(6, 10, True, 1e-6)])
    plan, why = algorithm1.eviction_plan(5, True, res)
    assert [(e.kind, e.target) for e in plan] == [("hot", 6)]


def test_ledger_totals_are_the_sums():
    """Random holds and drops: every running total equals its sum over the held factors."""
    model = load_scheduler_config(model="tiny").model_config()
    adapters = Adapters(model, 4, 128, 100)
    rng = random.Random(3)
    for a in range(12):
        adapters.register(a, rng.choice([8, 16, 64, 128]))
    ledger = GpuLedger(adapters, 1e12, 12)
    parts = [NOTHING, frozenset("A"), frozenset("B"), BOTH]
    for _ in range(400):
        a = rng.randrange(12)
        if rng.random() < 0.1:
            ledger.drop_adapter(a)
        else:
            ledger.hold(rng.choice(adapters.sites(a)), rng.choice(parts))
        held = dict(ledger.items())
        assert NOTHING not in held.values()
        assert ledger.adapter_bytes() == sum(adapters.site_bytes(s, p) for s, p in held.items())
        assert ledger.holding() == {s.adapter for s in held}
        for b in range(12):
            mine = sum(adapters.site_bytes(s, ledger.parts(s)) for s in adapters.sites(b))
            assert ledger.held_bytes(b) == mine and ledger.missing_bytes(b) == adapters.whole_bytes(b) - mine
            assert ledger.holds_whole(b) == all(ledger.parts(s) == BOTH for s in adapters.sites(b))
            assert ledger.adapter_parts(b) == tuple(ledger.parts(s) for s in adapters.sites(b))


def test_a_rank_is_fixed_once_registered():
    sched = Scheduler(load_scheduler_config(model="tiny"))
    sched.register(0, 16)
    sched.register(0, 16)           # again, the same: fine
    with pytest.raises(SchedulerError, match="registered with rank 16"):
        sched.register(0, 32)


def test_settled_steps_keep_the_most_recent():
    cache = SettledSteps(2)
    for key in ("a", "b", "c"):
        cache.put(key, {}, {})
    assert cache.get("a") is None and cache.get("b") is not None and cache.get("c") is not None
    assert (cache.hits, cache.lookups, cache.hit_rate) == (2, 3, 2 / 3)
    none = SettledSteps(0)
    none.put("a", {}, {})
    assert none.get("a") is None and none.hit_rate == 0.0


def test_value_keys_find_a_step_whose_factors_came_back():
    """The key holds the factors each site holds, not a count of changes: a site whose
    factors are dropped and held again finds the step settled before (the version counter
    the cache used before counted two changes and missed); a site whose factors are gone
    does not (its decision would need them). Every plan equals Algorithm 1's."""
    config = load_scheduler_config(model="tiny", gpu_budget_bytes=1e9, hot_set_size=0)
    plans = []
    for settled in (SettledSteps(1), SettledSteps(0)):
        sched = Scheduler(config, settled=settled)
        sched.register(0, 64)
        batch = [Request(i, 0, 100, i == 0) for i in range(8)]
        sched.step(batch)
        sched.step(batch)           # its loads done, the second step settles
        site = sched.sites(0)[0]
        held = sched.held(site)
        assert held, "the tiny model's adapter holds factors on the GPU"
        sched.ledger.hold(site, NOTHING)
        sched.ledger.hold(site, held)
        plans.append(sched.step(batch).explain())
        hits = settled.hits
        sched.ledger.hold(site, NOTHING)
        gone = sched.step(batch)
        plans.append(gone.explain())
        if settled.capacity:
            assert (hits, settled.hits, settled.lookups) == (1, 1, 4)
        assert gone.loads and gone.loads[0][0] == site     # Algorithm 1 loads them again
    assert plans[:2] == plans[2:]


def test_serving_reads_no_private_scheduler_state():
    """serving/ uses the scheduler's public surface: no `._name` read on anything named
    scheduler or sched, and no `cached` dict (the ledger's parts come through `held`)."""
    bad = []
    for path in sorted((ROOT / "serving").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name in ("scheduler", "sched") and (node.attr.startswith("_") or node.attr == "cached"):
                bad.append(f"{path.name}:{node.lineno}: {name}.{node.attr}")
    assert not bad, bad
