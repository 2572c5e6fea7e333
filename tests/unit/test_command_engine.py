"""The command engine: the model (sim/command_engine.py) against the RTL
(hw/command_engine.py), cycle for cycle, through the harness of ties.py (its docstring gives
the cycle convention)."""
import numpy as np
import pytest

from isa.slots import SQ_VALID
from hw.command_engine import CommandEngine
from sim import command_engine as model_engine
from sim import regfile as model_regfile
from sim.memory import SparseMemory

from ties import CFG, Clock, Dram, ENGINE_PORT, GRANT, SLOW, placed, simulate


SQ_BASE = 0x4000
ENGINE_REGS = dict(sq_base=SQ_BASE, cq_base=0x8000, data_base=0, data_limit=0, log2_depth=2,
                   log2_slot=7, pasid=5, enable=True, irq_en=False)
RING_AT, RING2_AT = 3, 150            # cycles the doorbell tail becomes 1, then 2


def set_valid_word(memory, seq, value):
    regs = model_regfile.QueueRegs(**ENGINE_REGS)
    memory.write(regs.slot_addr(SQ_BASE, seq) + SQ_VALID, value.to_bytes(8, "little"))


def engine_model(cfg):
    """The model's (AR handshakes, line arrivals, pushes as (cycle, seq, taken)) for the
    scenario of `engine_run`: tail 1 at RING_AT with a stale valid word, which is fixed
    after the first read; tail 2 at RING2_AT with its word in place."""
    memory = SparseMemory(1 << 20)
    set_valid_word(memory, 2, 2)
    engine = model_engine.CommandEngine(cfg, memory)
    queues = [model_regfile.QueueRegs(**ENGINE_REGS, tail=1)] + \
        [model_regfile.QueueRegs() for _ in range(cfg.num_queues - 1)]
    def grant(request):                             # the arbiter with no burst in the way
        return request + GRANT, request + GRANT + cfg.dram_read_latency
    arrivals, pushes = [], []

    def fetch(ring):
        t = max(engine.idle_at, ring)               # as sim/device.py: from IDLE, once eligible
        while engine.pick(queues, t) is None:
            t += 1
        entry, _, arrival = engine.fetch(queues, engine.pick(queues, t), t, grant)
        arrivals.append(arrival)
        if entry is not None:
            pushes.append((arrival + 1, entry.seq, entry.taken))
            engine.idle_at = arrival + 2            # PUSH, accepted at once
        return arrival

    first = fetch(RING_AT)                           # stale word: back-off
    set_valid_word(memory, 1, 1)
    fetch(RING_AT)
    queues[0].tail = 2
    fetch(RING2_AT)
    return [a - cfg.dram_read_latency for a in arrivals], arrivals, pushes, first


def engine_run(cfg, via_arbiter=True, fix_at=None):
    """hw/command_engine.py in the same scenario; the slot-1 valid word is fixed at cycle
    `fix_at`. Returns (AR handshake cycles, R beat cycles, pushes)."""
    engine = CommandEngine(cfg)
    top, bus = placed(cfg, engine, ENGINE_PORT, via_arbiter)
    memory = SparseMemory(1 << 20)
    set_valid_word(memory, 1, 0xDEAD)
    set_valid_word(memory, 2, 2)
    dram = Dram(cfg, bus, memory)
    pushes = []

    async def bench(ctx):
        clock = Clock(ctx, dram)
        for field, value in ENGINE_REGS.items():
            ctx.set(getattr(engine.queues[0], field), value)
        ctx.set(engine.push.ready, 1)
        while clock.t < RING2_AT + 80:
            ctx.set(engine.cycle, clock.t)
            ctx.set(engine.queues[0].tail, 2 if clock.t >= RING2_AT else 1 if clock.t >= RING_AT else 0)
            if clock.t == fix_at:
                set_valid_word(memory, 1, 1)
            if ctx.get(engine.push.valid):
                pushes.append((clock.t, ctx.get(engine.push.payload.seq), ctx.get(engine.push.payload.taken)))
            await clock.tick()

    simulate(top, bench)
    assert all(n == 1 for _, _, n in dram.ar)
    return [t for t, _, _ in dram.ar], dram.r, pushes


@pytest.mark.parametrize("cfg", [CFG, SLOW], ids=lambda c: c.name)
def test_command_engine_fetch_timing(cfg):
    """Can pick: the engine's FSM is in IDLE and the queue is eligible in that cycle
    (enabled, config_ok, rung tail ahead of next_seq - 1, back-off counter 0); here the
    cycle the tail is rung, the engine idle since reset. Through the arbiter the AR
    handshake comes ADDR_DELAY cycles later (IDLE -> LATCH -> ADDR, the grant). After a
    valid word that does not match, seen on the R beat at cycle a, the engine is in IDLE
    at a + 1 with the counter loaded with BACKOFF, which reaches 0 at a + 1 + BACKOFF: the
    next read's handshake is at a + 1 + BACKOFF + ADDR_DELAY. A match is pushed at a + 1
    with `taken` = a."""
    handshakes, arrivals, pushes, first = engine_model(cfg)
    got = engine_run(cfg, fix_at=first + 1)
    assert got == (handshakes, arrivals, pushes)
    ar, r, _ = got
    assert ar[0] - RING_AT == model_engine.ADDR_DELAY
    assert ar[1] - r[0] == 1 + model_engine.BACKOFF + model_engine.ADDR_DELAY


def test_command_engine_bare():
    """The bare engine on an always-ready responder: every read GRANT cycle earlier."""
    handshakes, arrivals, pushes, first = engine_model(CFG)
    ar, r, got_pushes = engine_run(CFG, via_arbiter=False, fix_at=first)
    early = GRANT * np.arange(1, 4)           # each fetch starts one cycle earlier than the last
    early[2] = GRANT                          # ... but the third waits for its doorbell
    assert ar == (np.asarray(handshakes) - early).tolist()
    assert r == (np.asarray(arrivals) - early).tolist()
    assert got_pushes == [(c - early[i + 1], s, t - early[i + 1]) for i, (c, s, t) in enumerate(pushes)]
