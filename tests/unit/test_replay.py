"""A decode step replayed through the driver on a model pool of two devices matches a
dense float64 computation of the same two layers.

Tolerance: the devices round their results to FP16 (relative 2^-11), E3 also its x A,
attention its S = exp(P - m); q is rounded to FP16 and prescaled once. Through two layers
of residual sums these stay below 2e-3 of the output's largest magnitude (measured:
4e-4); a descriptor with a wrong address, row, token split or
merge gives errors of the output's own size."""
import collections

import numpy as np

import isa
from driver import DevicePool
from driver.clock import run
from isa import validate
from isa.system import load_model
from scheduler.config import load_scheduler_config
from scheduler.replay import DenseBackend, PoolBackend, Step, forced_strategies, plan_strategies
from scheduler.scheduler import Request, Scheduler

TOLERANCE = 2e-3
PAGE = 16
RANKS = {0: 8, 1: 16, 2: 8, 3: 32}
REQUESTS = [(10, 0, 40), (11, 1, 70), (12, 0, 33), (13, 2, 100), (14, 3, 65), (15, 0, 7)]


def replay(strategy_of, kv_units, seed=0, requests=REQUESTS, page=PAGE):
    model = load_model("tiny")
    step = Step(model, RANKS, requests, np.random.default_rng(seed))

    async def on_pool():
        pool = await DevicePool.model(isa.load_config("default"), 2, log2_depth=3, log2_slot=14)
        backend = PoolBackend(pool, strategy_of, kv_units, page)
        await backend.place(step)
        out, _ = await step.forward(backend)
        return out, backend
    out, backend = run(on_pool())
    ref, _ = run(step.forward(DenseBackend()))
    return out, ref, backend


def error(out, ref):
    return float(np.abs(out - ref).max() / np.abs(ref).max())


def test_forced_mix_matches_dense():
    """Every strategy on some site, a GPU share of pages on most requests: one page of one
    device, three pages (every page of a short request, or one device's second page of a
    long one)."""
    model = load_model("tiny")
    kv_units = {10: 1, 11: 3, 12: 3, 13: 3, 14: 0, 15: 1}
    out, ref, backend = replay(forced_strategies(model, RANKS), kv_units)
    assert error(out, ref) < TOLERANCE, f"worst relative error {error(out, ref):.2e}"
    kinds = collections.Counter(op.kind for r in backend.rounds for op in r.device_ops)
    gpu = collections.Counter(op.kind for r in backend.rounds for op in r.gpu_ops)
    assert kinds["lora_xab"] and kinds["lora_xa"] and kinds["attention"], kinds
    assert gpu["lora_e1"] and gpu["lora_e2"] and gpu["lora_mb"] == kinds["lora_xa"], gpu
    # one ATTENTION per request, KV head and device page the GPU does not hold: written out
    # for these contexts (token i on device i mod 2, pages of 16 per device) and units taken
    # page 0 on each device (from device rid mod 2), then page 1, ...
    pages = {rid: -(-(t // 2 + t % 2) // PAGE) + -(-(t // 2) // PAGE) for rid, _, t in REQUESTS}
    assert pages == {10: 4, 11: 6, 12: 3, 13: 8, 14: 5, 15: 2}
    per_layer = sum(pages[rid] - kv_units[rid] for rid in pages) * model.kv_heads
    assert kinds["attention"] == model.layers * per_layer
    # what the GPU computes: its held pages' tokens; request 11 (70 tokens: 35 per device)
    # holds page 0 on devices 1 and 0, then page 1 of device 1 (its rotation starts there)
    share = next(op for r in backend.rounds for op in r.gpu_ops if op.key[:2] == (11, 0))
    assert share.key[2] == tuple(sorted(list(range(0, 32, 2)) + list(range(1, 64, 2))))
    assert {op.device for r in backend.rounds for op in r.device_ops} == {0, 1}


def test_paged_shares_match_dense():
    """Pages of 128 tokens (4 KiB of keys at the tiny model's head_dim 16: the paged
    layout): one paged ATTENTION per request, KV head and device with pages the GPU does
    not hold, those after a held page reading a suffix list the replay writes first."""
    model = load_model("tiny")
    requests = [(10, 0, 600), (11, 1, 530), (12, 2, 90)]     # 3, 3 and 1 pages a device
    kv_units = {10: 1, 11: 3, 12: 0}
    out, ref, backend = replay(forced_strategies(model, RANKS), kv_units, requests=requests, page=128)
    assert error(out, ref) < TOLERANCE, f"worst relative error {error(out, ref):.2e}"
    ops = [op for r in backend.rounds for op in r.device_ops if op.kind == "attention"]
    # request 10 holds page 0 of device 0; 11 page 0 of both and page 1 of device 1; 12 none
    shares = {10: 2, 11: 2, 12: 2}
    assert len(ops) == model.layers * model.kv_heads * sum(shares.values())
    suffixed = {(op.key[0], op.device) for op in ops if op.page_list is not None}
    assert suffixed == {(10, 0), (11, 0), (11, 1)}
    assert all(validate.paged(op.descriptor) for op in ops)


def test_a_wrong_stream_is_caught():
    """The comparison can fail: one adapter's strategy answered from another's factors."""
    model = load_model("tiny")
    forced = forced_strategies(model, RANKS)
    out, ref, backend = replay(forced, {rid: 0 for rid, _, _ in REQUESTS})
    assert error(out, ref) < TOLERANCE
    step = Step(model, RANKS, REQUESTS, np.random.default_rng(0))
    step.lora[(0, 0, "q")] = step.lora[(1, 0, "q")][0][:, :8], step.lora[(1, 0, "q")][1][:8]
    wrong, _ = run(step.forward(DenseBackend()))
    assert error(out, wrong) > 10 * TOLERANCE


def test_scheduler_plan_replays():
    """The scheduler's own decisions (tiny model, two default-config devices) replayed. On an
    8 GB/s link, so that its devices compute the pages the GPU does not hold (the tiny
    model's KV crosses a 128 GB/s link faster than the devices run its pages)."""
    config = load_scheduler_config(model="tiny", device="default", num_devices=2, kv_page_tokens=PAGE,
                                   gpu_budget_bytes=230e3, link_bytes_per_s=8e9)
    sched = Scheduler(config)
    for a, r in RANKS.items():
        sched.register(a, r)
    plan = sched.step([Request(rid, a, t, True) for rid, a, t in REQUESTS])
    assert len(plan.strategy_mix()) >= 2 and plan.p_kv > 0 and plan.attention_on_devices, plan.explain()
    out, ref, backend = replay(plan_strategies(plan), plan.kv_units)
    assert error(out, ref) < TOLERANCE, f"worst relative error {error(out, ref):.2e}"
