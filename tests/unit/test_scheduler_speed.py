"""The scheduler's caching layer decides exactly as Algorithm 1 run in full: a step whose
serving adapters, batches, ranks and held factors equal those of a settled step (one that
took every site's fastest candidate with nothing to load or evict) reuses that step's
decisions (scheduler/settled.py). A scheduler whose cache keeps nothing is driven beside the
one with it, over churning workloads; every StepPlan field must be equal, bit for bit
(floats compared with ==). And the temperatures in an array against the scalar rule as it
was written first (temperature.py at commit REF_COMMIT, pinned)."""
import importlib
import math
import pathlib
import random
import subprocess
import sys

import pytest

from scheduler.config import load_scheduler_config
from scheduler.scheduler import Request, Scheduler
from scheduler.settled import SettledSteps
from scheduler.temperature import Temperatures

ROOT = pathlib.Path(__file__).resolve().parents[2]
REF_COMMIT = "5b8936b69393710e4469847ad694ca896b400f25"


@pytest.fixture(scope="module")
def ref_temperatures(tmp_path_factory):
    """The scalar Temperatures of REF_COMMIT."""
    try:
        shown = subprocess.run(["git", "show", f"{REF_COMMIT}:scheduler/temperature.py"], cwd=ROOT,
                               capture_output=True, text=True)
    except OSError as exc:
        pytest.skip(f"no git here: {exc}")
    if shown.returncode:
        pytest.skip(f"no git history with commit {REF_COMMIT} here: {shown.stderr.strip()}")
    root = tmp_path_factory.mktemp("ref")
    (root / "ref_temperature.py").write_text(shown.stdout)
    sys.path.insert(0, str(root))
    try:
        importlib.invalidate_caches()
        yield importlib.import_module("ref_temperature").Temperatures
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("ref_temperature", None)


def full_scheduler(config):
    """Algorithm 1 on every site of every step: the caching layer keeps nothing."""
    return Scheduler(config, settled=SettledSteps(0))


def plan_fields(plan, link):
    """Every field of a StepPlan as comparable values."""
    def cand(c):
        return (c.strategy.name, c.step_s, c.load_s, c.need_bytes, tuple(ev(e) for e in c.evictions), c.infeasible)

    def ev(e):
        return (e.kind, e.target, e.parts, e.nbytes, e.penalty_s)

    decisions = [(tuple(site), d.batch, d.rank, d.parts_before, tuple(cand(c) for c in d.candidates),
                  cand(d.chosen), d.reason) for site, d in plan.decisions.items()]
    rounds = {name: (r.gemm_s, r.gpu_s, r.gpu_after_s, r.to_device, r.to_gpu, r.descriptors, tuple(r.busy),
                     tuple(r.drain), r.seconds(link)) for name, r in plan.rounds.items()}
    return dict(step=plan.step, decisions=decisions, p_kv=plan.p_kv, kv_units=list(plan.kv_units.items()),
                kv_tokens=list(plan.kv_tokens.items()), kv_bytes=plan.kv_bytes,
                loads=[(tuple(site), parts, n) for site, parts, n in plan.loads],
                evictions=[ev(e) for e in plan.evictions], precached=plan.precached,
                used_bytes=plan.used_bytes, budget_bytes=plan.budget_bytes, rounds=rounds)


def assert_same(config, adapters, steps, rng, batch, contexts, popular, arrive):
    """Drive both schedulers with one stream: a churning batch of up to `batch` requests,
    `popular` of the adapters drawing 80% of them, contexts from `contexts`, growing by one
    token a step. Returns how many steps the shortcut took."""
    fast, full = Scheduler(config), full_scheduler(config)
    for a in range(adapters):
        rank = rng.choice([8, 16, 32, 64, 128])
        fast.register(a, rank)
        full.register(a, rank)
    live, rid, repeated = [], 0, 0
    for step in range(steps):
        live = [(r, a, c + 1) for r, a, c in live if rng.random() > 1 / 40]
        new = set()
        while len(live) < batch and (rng.random() < arrive or not live):
            a = rng.randrange(popular) if rng.random() < 0.8 else rng.randrange(adapters)
            live.append((rid, a, contexts(rng)))
            new.add(rid)
            rid += 1
        if step % 50 == 25:         # now and then a step with nothing to serve
            assert plan_fields(fast.step([]), fast.link) == plan_fields(full.step([]), full.link)
        hits = fast.settled.hits
        a_plan = fast.step([Request(r, a, c, r in new) for r, a, c in live])
        repeated += fast.settled.hits - hits
        b_plan = full.step([Request(r, a, c, r in new) for r, a, c in live])
        a_fields, b_fields = plan_fields(a_plan, fast.link), plan_fields(b_plan, full.link)
        for key in b_fields:
            assert a_fields[key] == b_fields[key], f"step {step}: {key} differs\n{a_plan.explain()}\n{b_plan.explain()}"
        assert a_plan.explain() == b_plan.explain()
        assert list(fast.ledger.items()) == list(full.ledger.items())    # in the same order too
        assert fast.p_kv == full.p_kv and fast.used_bytes() == full.used_bytes()
    return repeated


WORKLOADS = {
    # name: (knobs, adapters, steps, batch, contexts, popular, arrival rate)
    "default, short contexts": ({}, 300, 80, 32, lambda r: r.randint(64, 512), 20, 0.9),
    "default, long contexts": ({}, 300, 70, 24, lambda r: r.randint(2500, 3500), 20, 0.9),
    "default, duplicate contexts": ({}, 100, 60, 40, lambda r: r.choice([600, 1100, 2048, 3000]), 8, 0.9),
    "default, KV at capacity": (dict(gpu_budget_bytes=2e10), 300, 70, 24, lambda r: r.randint(2500, 3500), 20, 0.9),
    "small budget, few slots, uniform": (dict(gpu_budget_bytes=3e9, max_loras=6, hot_set_size=4), 60, 110, 16,
                                         lambda r: r.randint(32, 3000), 60, 0.7),
    "small budget, skewed": (dict(gpu_budget_bytes=6e9, max_loras=10, hot_set_size=8), 200, 80, 24,
                             lambda r: r.randint(500, 4000), 5, 0.8),
    "tiny model, tight budget": (dict(model="tiny", gpu_budget_bytes=2e6, max_loras=3, hot_set_size=3,
                                      kv_page_tokens=16), 20, 160, 20, lambda r: r.randint(1, 600), 4, 0.6),
    "tiny model, long contexts, churn": (dict(model="tiny", gpu_budget_bytes=1.5e7, max_loras=5, hot_set_size=2,
                                              kv_page_tokens=16), 30, 120, 16,
                                         lambda r: r.choice([r.randint(1, 40), r.randint(2000, 6000)]), 30, 0.5),
}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_plans_equal_algorithm_1_in_full(name):
    knobs, adapters, steps, batch, contexts, popular, arrive = WORKLOADS[name]
    config = load_scheduler_config(**knobs)
    repeated = assert_same(config, adapters, steps, random.Random(name), batch, contexts, popular, arrive)
    assert repeated or name.startswith(("small budget", "tiny"))      # the shortcut is exercised


def test_plans_equal_when_a_batch_returns_to_evicted_factors():
    """A batch that comes back after another took its factors (A A B A A B ... with room
    for one adapter's factors) must not reuse the step it settled before: the key holds the
    factors each site holds. The random workloads above rarely return to an older batch;
    here every A after a B does (a key without the factors reuses 6 steps, 9 plans differ)."""
    probe = Scheduler(load_scheduler_config(model="tiny"))
    probe.register(0, 64)
    config = load_scheduler_config(model="tiny", gpu_budget_bytes=1.5 * probe.adapters.whole_bytes(0),
                                   hot_set_size=0, kv_page_tokens=16)
    fast, full = Scheduler(config), full_scheduler(config)
    for sched in (fast, full):
        sched.register(0, 64)
        sched.register(1, 64)
    for step in range(12):
        adapter = int(step % 3 == 2)
        batch = [Request(100 * step + i, adapter, 50 + step, i == 0) for i in range(64)]
        a_plan, b_plan = fast.step(batch), full.step(batch)
        assert plan_fields(a_plan, fast.link) == plan_fields(b_plan, full.link), f"step {step}"
    assert fast.settled.hits == 3       # the second A of each pair


@pytest.mark.parametrize("shuffled", [False, True])
def test_temperatures_are_the_scalar_rule(ref_temperatures, shuffled):
    """Array temperatures against the dict ones: values, means and rankings equal to the bit
    (ties by id included: the adapters never requested all tie), adapters registered in id
    order or not."""
    Ref = ref_temperatures
    rng = random.Random(11)
    fast, slow = Temperatures(1.0, 0.1), Ref(1.0, 0.1)
    ids = list(range(300))
    if shuffled:
        rng.shuffle(ids)
    for a in ids[:200]:
        fast.register(a)
        slow.register(a)
    for step in range(150):
        for _ in range(rng.randint(0, 4)):
            a = rng.choice(ids[:250] if step > 50 else ids[:40])    # arrivals register the rest
            fast.arrive(a)
            slow.arrive(a)
        fast.relax()
        slow.relax()
        assert len(fast) == len(slow) and fast.mean() == slow.mean()
        assert all(fast[a] == slow[a] for a in ids if a in slow)
        exclude = set(rng.sample(ids, 30))
        for count in (0, 1, 5, 50, 400):
            assert fast.hottest(count, exclude) == slow.hottest(count, exclude)
    odd = Temperatures(1.0, 0.1)        # ids that are not integers: the sort as written
    for a in ("b", "a", "c"):
        odd.register(a)
    odd.arrive("c")
    odd.relax()
    assert odd.hottest(2) == ["c", "a"] and math.isclose(odd["c"], 0.9 + 1 / 30)
