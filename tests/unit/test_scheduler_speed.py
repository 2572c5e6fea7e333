"""The fast scheduler decides exactly as the plain one did: the plain implementation
(scheduler.py, cost.py, temperature.py at commit REF_COMMIT, the last before the speed-up;
pinned, since HEAD is the fast one once it is committed) is loaded beside the working tree's
and both are driven with the same churning workloads; every StepPlan field must be equal,
bit for bit (floats compared with ==). Also the pieces on their own: the KV share
water-filling in closed form, the scan for the least attention time, the vectorized
attention time, the temperatures in an array. A change meant to change decisions (or a
knob the plain implementation lacks) is not this test's to check: it compares the default
knobs' behaviour only."""
import importlib
import math
import pathlib
import random
import subprocess
import sys

import numpy as np
import pytest

from scheduler.config import load_scheduler_config
from scheduler.cost import AttentionScan
from scheduler.scheduler import Request, Scheduler
from scheduler.temperature import Temperatures

ROOT = pathlib.Path(__file__).resolve().parents[2]
REF_COMMIT = "5b8936b69393710e4469847ad694ca896b400f25"
REF_FILES = ("scheduler.py", "cost.py", "temperature.py")


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    """The plain scheduler as the package `ref_scheduler` (its other modules are today's: the
    relative import of device_timing resolves to the real package)."""
    texts = {}
    for name in REF_FILES:
        try:
            shown = subprocess.run(["git", "show", f"{REF_COMMIT}:scheduler/{name}"], cwd=ROOT,
                                   capture_output=True, text=True)
        except OSError as exc:
            pytest.skip(f"no git here: {exc}")
        if shown.returncode:
            pytest.skip(f"no git history with commit {REF_COMMIT} here: {shown.stderr.strip()}")
        texts[name] = shown.stdout
    root = tmp_path_factory.mktemp("ref")
    pkg = root / "ref_scheduler"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "device_timing.py").write_text("from scheduler.device_timing import DeviceTiming  # noqa: F401\n")
    for name, text in texts.items():
        (pkg / name).write_text(text)
    sys.path.insert(0, str(root))
    try:
        importlib.invalidate_caches()
        yield importlib.import_module("ref_scheduler.scheduler")
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == "ref_scheduler" or m.startswith("ref_scheduler.")]:
            del sys.modules[name]


def plan_fields(plan):
    """Every field of a StepPlan, with the reference's classes reduced to comparable values."""
    def cand(c):
        return (c.strategy.name, c.step_s, c.load_s, c.need_bytes, tuple(ev(e) for e in c.evictions), c.infeasible)

    def ev(e):
        target = tuple(e.target) if isinstance(e.target, tuple) else e.target
        return (e.kind, target, e.parts, e.nbytes, e.penalty_s)

    decisions = [(tuple(site), d.batch, d.rank, d.parts_before, tuple(cand(c) for c in d.candidates),
                  cand(d.chosen), d.reason) for site, d in plan.decisions.items()]
    loads = [(tuple(site), parts, n) for site, parts, n in plan.loads]
    return dict(step=plan.step, decisions=decisions, p_kv=plan.p_kv, kv_tokens=list(plan.kv_tokens.items()),
                kv_bytes=plan.kv_bytes, kv_load_bytes=plan.kv_load_bytes, loads=loads,
                evictions=[ev(e) for e in plan.evictions], precached=plan.precached,
                used_bytes=plan.used_bytes, budget_bytes=plan.budget_bytes)


def assert_same(ref, config, adapters, steps, rng, batch, contexts, popular, arrive):
    """Drive both schedulers with one stream: a churning batch of up to `batch` requests,
    `popular` of the adapters drawing 80% of them, contexts from `contexts`, growing by one
    token a step."""
    fast, slow = Scheduler(config), ref.Scheduler(config)
    for a in range(adapters):
        rank = rng.choice([8, 16, 32, 64, 128])
        fast.register(a, rank)
        slow.register(a, rank)
    live, rid = [], 0
    for step in range(steps):
        live = [(r, a, c + 1) for r, a, c in live if rng.random() > 1 / 40]
        new = set()
        while len(live) < batch and (rng.random() < arrive or not live):
            a = rng.randrange(popular) if rng.random() < 0.8 else rng.randrange(adapters)
            live.append((rid, a, contexts(rng)))
            new.add(rid)
            rid += 1
        if step % 50 == 25:         # now and then a step with nothing to serve
            assert plan_fields(fast.step([])) == plan_fields(slow.step([]))
        a_plan = fast.step([Request(r, a, c, r in new) for r, a, c in live])
        b_plan = slow.step([ref.Request(r, a, c, r in new) for r, a, c in live])
        a_fields, b_fields = plan_fields(a_plan), plan_fields(b_plan)
        for key in b_fields:
            assert a_fields[key] == b_fields[key], f"step {step}: {key} differs\n{a_plan.explain()}\n{b_plan.explain()}"
        assert a_plan.explain() == b_plan.explain()
        assert list(fast.cached.items()) == list(slow.cached.items())    # in the same order too
        assert fast.p_kv == slow.p_kv and fast.used_bytes() == slow.used_bytes()
        assert fast.cached_adapters() == slow.cached_adapters()


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
def test_plans_equal_the_plain_implementation(ref, name):
    knobs, adapters, steps, batch, contexts, popular, arrive = WORKLOADS[name]
    config = load_scheduler_config(**knobs)
    assert_same(ref, config, adapters, steps, random.Random(list(WORKLOADS).index(name)), batch, contexts, popular,
                arrive)


def test_kv_share_and_bytes_are_the_loop(ref):
    """The closed-form water-filling against the loop it replaces, on random batches and
    shares (the bisection's shares too)."""
    config = load_scheduler_config(model="tiny", kv_page_tokens=16, num_devices=3)
    fast, slow = Scheduler(config), ref.Scheduler(config)
    rng = random.Random(7)
    for _ in range(300):
        n = rng.choice([1, 2, 5, 17, 64])
        pool = [rng.randint(1, 3000) for _ in range(rng.randint(1, 6))]
        contexts = [rng.choice(pool) if rng.random() < 0.5 else rng.randint(1, 3000) for _ in range(n)]
        for p in [0.0, 1.0, rng.random(), rng.random() / 50, 1 - rng.random() / 50]:
            assert fast.kv_share(p, contexts) == slow.kv_share(p, contexts)
            assert fast.kv_bytes(p, contexts) == slow.kv_bytes(p, contexts)
            assert fast.attention_s(p, contexts) == slow.attention_s(p, contexts)


@pytest.mark.parametrize("loose", [False, True])
@pytest.mark.parametrize("knobs", [{}, dict(model="tiny", kv_page_tokens=16, num_devices=3)])
def test_kv_share_scan_is_the_plain_scan(ref, knobs, loose, monkeypatch):
    """The scan for the share of least attention time (bounds, then exact times where they
    decide) against the plain scan of 33 exact times, on random batches; with `above`, None
    only where the plain scan's answer is at most `above`. Loose: the bounds widened (still
    true), so that several shares are left to compare by their exact times."""
    if loose:
        bounds = AttentionScan.bounds
        monkeypatch.setattr(AttentionScan, "bounds", lambda *a: tuple(b * f for b, f in zip(bounds(*a), (0.8, 1.25))))
    config = load_scheduler_config(**knobs)
    fast, slow = Scheduler(config), ref.Scheduler(config)
    rng = random.Random(5)
    unit = config.kv_page_tokens * config.num_devices
    for case in range(150):
        n = rng.choice([1, 2, 3, 8, 32, 64])
        top = rng.choice([unit // 2, 2 * unit, 8 * unit, 40 * unit])
        pool = [rng.randint(1, top) for _ in range(3)]
        contexts = tuple(rng.choice(pool) if rng.random() < 0.3 else rng.randint(1, top) for _ in range(n))
        fast.contexts, slow.contexts = contexts, contexts
        want = slow._best_kv_share()
        assert fast._best_kv_share() == want
        for above in (0.0, rng.choice([i / 32 for i in range(33)]), rng.random(), 1.0):
            got = fast._best_kv_share(above)
            assert got == want or (got is None and want <= above), (contexts, above, got, want)
        if not loose:               # the exact times are the plain ones, the intervals hold them
            memo = fast._contexts()
            grid = [i / 32 for i in range(33)]
            assert [fast.attention_s(p) for p in grid] == [slow.attention_s(p) for p in grid]
            units = sorted({memo.units(p) for p in grid})
            lower, upper = memo._bounds(units)
            for u in units:
                assert lower[u] <= memo.attention[u] <= upper[u], (contexts, u)
            rows = memo._rows_of(units)     # each request's units: the shares, and all placed
            assert [fast.kv_share(p) for p in grid] == [slow.kv_share(p) for p in grid]
            assert (rows.sum(axis=1) == units).all()
            assert (rows * unit).tolist() == [memo._share_list(u) for u in units]
            assert (memo._q_counts(np.array(units)) == memo._scan_of().q_counts(rows)).all()


def test_attention_totals_are_attention_cost():
    """CostModel.attention_totals, row by row, is attention_cost's total_s to the bit, also
    for shares that are not the water-filling's (groups of equal pairs out of order)."""
    config = load_scheduler_config()
    sched = Scheduler(config)
    m, cost, rng = sched.model, sched.cost, np.random.default_rng(3)
    unit = config.kv_page_tokens * config.num_devices
    for _ in range(40):
        n = int(rng.integers(1, 40))
        contexts = rng.choice(rng.integers(1, 5000, size=4), size=n) if rng.random() < 0.5 \
            else rng.integers(1, 5000, size=n)
        rows = np.array([[int(rng.integers(0, t // unit + 1)) * unit for t in contexts] for _ in range(5)])
        got = cost.attention_totals(contexts, rows, m.q_heads, m.kv_heads, m.head_dim, config.kv_page_tokens)
        want = [cost.attention_cost(contexts.tolist(), row.tolist(), m.q_heads, m.kv_heads, m.head_dim,
                                    config.kv_page_tokens).total_s for row in rows]
        assert got == want
    with pytest.raises(ValueError, match="whole pages"):
        cost.attention_totals([1000], [[100]], m.q_heads, m.kv_heads, m.head_dim, config.kv_page_tokens)


@pytest.mark.parametrize("shuffled", [False, True])
def test_temperatures_are_the_scalar_rule(ref, shuffled):
    """Array temperatures against the dict ones: values, means and rankings equal to the bit
    (ties by id included: the adapters never requested all tie), adapters registered in id
    order or not."""
    Ref = importlib.import_module("ref_scheduler.temperature").Temperatures
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
