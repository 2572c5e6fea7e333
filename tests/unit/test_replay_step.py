"""serving/replay_step.py: a whole decode step replayed descriptor by descriptor on model
devices and the link matches what the serving simulator charged (the tiny two-layer GQA
model, 8 requests on 2 paper devices, no GPU memory for KV or factors so that the pool does
the work: every round of make replay-step, in seconds); the
comparison can fail (a charge built on periods the devices do not have is caught); the
replay runs what the plan emits, descriptor for descriptor."""
import dataclasses

import pytest

from scheduler.rounds import ROUNDS
from serving import replay_step
from serving.replay_step import Case

SMALL = Case("tiny", "tiny", "uniform", batch=8, devices=2, gpu_budget_bytes=0.0)
MIXED = dataclasses.replace(SMALL, name="tiny-mixed", mixed=True)


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
