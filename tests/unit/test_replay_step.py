"""serving/replay_step.py: a whole decode step replayed descriptor by descriptor on model
devices and the link matches what the serving simulator charged (the tiny two-layer GQA
model, 8 requests on 2 paper devices, no GPU memory for KV or factors so that the pool does
the work: every round of make replay-step, in seconds); the
comparison can fail (a charge built on periods the devices do not have is caught); the
replay runs what the plan emits, descriptor for descriptor; the attention round of long
contexts with part of their KV on the GPU runs as paged ATTENTIONs, one per request-head
share past the held pages, within 2 % of its charge."""
import dataclasses

import pytest

from scheduler.kv_pages import KvPages
from scheduler.rounds import ROUNDS
from serving import replay_step
from serving.replay_step import Case

SMALL = Case("tiny", "tiny", "uniform", batch=8, devices=2, gpu_budget_bytes=0.0)
MIXED = dataclasses.replace(SMALL, name="tiny-mixed", mixed=True)
# long contexts (2 to 4 pages of 512 tokens a device), a GPU budget that holds part of the
# KV, a link slow enough that the devices compute the rest: paged shares past held pages
SHARES = Case("tiny-shares", "tiny", "uniform-long", batch=8, devices=2, gpu_budget_bytes=3e6, link_bytes_per_s=8e9)


@pytest.mark.parametrize("case", [SMALL, MIXED], ids=lambda c: c.name)
def test_a_small_step_replays_within_2_percent(case):
    r = replay_step.replay(case)
    assert r.descriptors > 0 and r.error <= 0.02, (r.line(), r.rounds)
    for name, (charged, replayed) in r.rounds.items():
        assert (charged > 0) == (replayed > 0), (name, charged, replayed)
    assert r.rounds["attention"][1] > 0
    if case.mixed:
        assert set(r.mix) == {"E1", "E2", "E3", "E4"}, r.mix


def test_a_wrong_charge_is_caught(monkeypatch):
    """The same step charged with every device period halved: the replay disagrees."""
    stream = replay_step.device_timing("paper").stream
    monkeypatch.setattr(replay_step.device_timing("paper"), "stream",
                        lambda op, *dims: tuple(x * f for x, f in zip(stream(op, *dims), (0.5, 1.0))))
    r = replay_step.replay(SMALL)
    assert r.error > 0.05, r.line()


def test_the_replay_runs_the_emitted_stream():
    """Every device op of every round of every layer, once: the count the plan's rounds hold."""
    system, running, plan, _ = replay_step.decode_step(SMALL)
    r = replay_step.replay(SMALL)
    assert r.descriptors == system.model.layers * sum(plan.rounds[name].descriptors for name, _ in ROUNDS)


def test_paged_shares_past_the_held_pages_replay_within_2_percent():
    """The attention round as paged ATTENTIONs, one per request, KV head and device with a
    page the GPU does not hold (counted here from scheduler.kv_pages), most starting inside
    their list (skip lists), replayed on the model devices within 2 % of the charge."""
    system, running, plan, _ = replay_step.decode_step(SHARES)
    assert plan.attention_on_devices and 0 < plan.p_kv < 1, plan.explain()
    m, n, page = system.model, SHARES.devices, system.scheduler.config.kv_page_tokens
    pages = KvPages(n, page)
    held = {r.rid: pages.held_pages(r.context, r.rid, plan.kv_units[r.rid]) for r in running}
    local = {r.rid: [-(-len(range(d, r.context, n)) // page) for d in range(n)] for r in running}
    shares = sum(h < p for r in running for h, p in zip(held[r.rid], local[r.rid])) * m.kv_heads
    assert any(0 < h < p for r in running for h, p in zip(held[r.rid], local[r.rid]))     # a held prefix
    assert plan.rounds["attention"].descriptors == shares
    r = replay_step.replay(SHARES)
    assert r.paged == r.descriptors == m.layers * shares
    assert r.error <= 0.02, (r.line(), r.rounds)
