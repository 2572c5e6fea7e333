"""The DRAM reader: the model (sim/dram_reader.py) against the RTL (hw/dram_reader.py), cycle
for cycle, through the harness of ties.py (its docstring gives the cycle convention)."""
import numpy as np
import pytest
from amaranth import Elaboratable, Module
from amaranth.lib.wiring import connect

from hw.dram_arbiter import DramArbiter
from hw.dram_reader import DramReader
from sim import dram_arbiter as model_arbiter
from sim import dram_reader as model_reader

from ties import CFG, CONTROL_PORT, Clock, Dram, ENGINE_PORT, SLOW, SMALL, placed, simulate


def reader_run(cfg, addr, beats, via_arbiter=True):
    """(AR handshakes as (cycle, addr, beats), R beat cycles, cycles the beats show at
    `out`) of a run started at cycle 0, `out.ready` high."""
    reader = DramReader(cfg)
    top, bus = placed(cfg, reader, CONTROL_PORT, via_arbiter)
    dram = Dram(cfg, bus)
    shown = []

    async def bench(ctx):
        clock = Clock(ctx, dram)
        ctx.set(reader.out.ready, 1)
        ctx.set(reader.run.valid, 1)
        ctx.set(reader.run.payload.addr, addr)
        ctx.set(reader.run.payload.lines, beats)
        for _ in range(4 * beats + 50 * (beats // cfg.max_burst_beats + 2)):
            if ctx.get(reader.out.valid):
                shown.append(clock.t)
            await clock.tick()
            ctx.set(reader.run.valid, 0)
            if len(shown) == beats and not ctx.get(reader.busy):
                break

    simulate(top, bench)
    return dram.ar, dram.r, shown


READER_RUNS = [(CFG, 0x1000, 1), (CFG, 0x0FC0, 3), (CFG, 0x0, 64), (CFG, 0x2000, 200), (CFG, 0x1F80, 70),
               (SMALL, 0x0, 100), (SMALL, 0xF40, 40), (SMALL, 0x7FC0, 2),
               (SLOW, 0x0FC0, 70), (SLOW, 0x40, 5)]


def run_id(run):
    return f"{run[0].name}-{run[1]:#x}-{run[2]}"


@pytest.mark.parametrize("run", READER_RUNS, ids=run_id)
def test_dram_reader_schedule(run):
    """Through the arbiter: the handshakes, beats and buffer output are the model's, offset 0."""
    cfg, addr, beats = run
    ar, r, shown = reader_run(cfg, addr, beats)
    handshakes, lengths, _ = model_reader.burst_schedule(0, addr, beats, cfg)
    addrs = addr + cfg.beat_bytes * (np.cumsum(lengths) - lengths)
    assert ar == list(zip(handshakes.tolist(), addrs.tolist(), lengths.tolist()))
    assert r == model_reader.beat_arrivals(0, addr, beats, cfg).tolist()
    assert shown == model_reader.beat_available(0, addr, beats, cfg).tolist()


def paced(ready, floor):
    """A consumer that takes each beat, in order, in the first cycle from `floor` on where
    `ready` is high, once it shows."""
    def take(shown):
        out, t = [], floor
        for s in shown.tolist():
            t = max(t, s)
            while not ready[t]:
                t += 1
            out.append(t)
            t += 1
        return np.array(out, np.int64)
    return take


# two runs back to back (the second started once the first is all issued), a consumer
# slower than the DRAM so that the buffer's room holds the bursts back, across the runs
@pytest.mark.parametrize("cfg,first,second,period", [
    (CFG, (0x0, 200), (0x8000, 70), 2), (CFG, (0x0FC0, 3), (0x40, 150), 3), (CFG, (0x1000, 64), (0x3000, 64), 1),
    (SMALL, (0x0, 100), (0xF40, 40), 2), (SLOW, (0x0FC0, 70), (0x40, 5), 3)],
    ids=lambda v: getattr(v, "name", str(v)))
def test_dram_reader_back_to_back(cfg, first, second, period):
    """Through the arbiter: a descriptor's runs on one reader (the fetcher's order) against
    sim/dram_reader.Reader: the handshakes, the beats and when the consumer takes them."""
    reader = DramReader(cfg)
    top, bus = placed(cfg, reader, CONTROL_PORT, via_arbiter=True)
    dram = Dram(cfg, bus)
    beats = first[1] + second[1]
    ready = [t % period == 0 for t in range(period * 8 * beats + 2000)]
    pulls = []

    async def bench(ctx):
        clock = Clock(ctx, dram)
        ctx.set(reader.run.valid, 1)
        ctx.set(reader.run.payload.addr, first[0])
        ctx.set(reader.run.payload.lines, first[1])
        started = 1
        while len(pulls) < beats:
            ctx.set(reader.out.ready, ready[clock.t])
            if ctx.get(reader.out.valid) and ready[clock.t]:
                pulls.append(clock.t)
            await clock.tick()
            ctx.set(reader.run.valid, 0)
            if started == 1 and ctx.get(reader.issued_all):
                ctx.set(reader.run.valid, 1)
                ctx.set(reader.run.payload.addr, second[0])
                ctx.set(reader.run.payload.lines, second[1])
                started = 2

    simulate(top, bench)
    model = model_reader.Reader(cfg)
    runs = [model_reader.run(0, first[0], first[1], cfg, paced(ready, 0), before=model)]
    after = int(runs[0][3][-1]) + 1
    runs.append(model_reader.run(model.issued_all, second[0], second[1], cfg, paced(ready, after),
                                 before=model, floor=after))
    handshakes = [h for run in runs for h in run[0].tolist()]
    assert [t for t, _, _ in dram.ar] == handshakes
    assert dram.r == [b for run in runs for b in run[2].tolist()]
    assert pulls == [p for run in runs for p in run[3].tolist()]


@pytest.mark.parametrize("cfg,first,side,third,period", [
    (CFG, (0x0, 200), (0x8000, 1), (0x9000, 40), 2), (CFG, (0x0FC0, 3), (0x4000, 8), (0x40, 3), 1),
    (SMALL, (0x0, 100), (0x200, 2), (0x4000, 60), 3), (SLOW, (0x40, 70), (0x1000, 8), (0x2000, 30), 2)],
    ids=lambda v: getattr(v, "name", str(v)))
def test_side_run_among_runs(cfg, first, side, third, period):
    """A run, then a side run (a paged list) once it is issued, then another run once that
    is issued, a slow consumer: the side run's beats leave on side as they arrive
    (sim/dram_reader.py side_run), between the two runs' beats, and never show at `out`;
    the runs' beats are taken as the model says (the side beats free their room as they
    arrive, before the first run's beats are taken)."""
    reader = DramReader(cfg)
    top, bus = placed(cfg, reader, CONTROL_PORT, via_arbiter=True)
    dram = Dram(cfg, bus)
    beats = first[1] + third[1]
    side_beats = -(-side[1] // cfg.dram_channels)
    ready = [t % period == 0 for t in range(period * 8 * beats + 2000)]
    pulls, sides = [], []

    async def bench(ctx):
        clock = Clock(ctx, dram)
        ctx.set(reader.run.valid, 1)
        ctx.set(reader.run.payload.addr, first[0])
        ctx.set(reader.run.payload.lines, first[1])
        started = 1
        while len(pulls) < beats or len(sides) < side_beats:
            ctx.set(reader.out.ready, ready[clock.t])
            if ctx.get(reader.out.valid) and ready[clock.t]:
                pulls.append(clock.t)
            if ctx.get(reader.side.valid):
                sides.append(clock.t)
            await clock.tick()
            ctx.set(reader.run.valid, 0)
            ctx.set(reader.run.payload.side, 0)
            if started == 2 and ctx.get(reader.issued_all):
                ctx.set(reader.run.valid, 1)
                ctx.set(reader.run.payload.addr, third[0])
                ctx.set(reader.run.payload.lines, third[1])
                started = 3
            if started == 1 and ctx.get(reader.issued_all):
                ctx.set(reader.run.valid, 1)
                ctx.set(reader.run.payload.side, 1)
                ctx.set(reader.run.payload.addr, side[0])
                ctx.set(reader.run.payload.lines, side[1])
                started = 2
            assert clock.t < 20_000

    simulate(top, bench)
    model = model_reader.Reader(cfg)
    runs = [model_reader.run(0, first[0], first[1], cfg, paced(ready, 0), before=model)]
    after = int(runs[0][3][-1]) + 1
    runs.append(model_reader.side_run(model.issued_all, side[0], side[1], cfg, before=model))
    runs.append(model_reader.run(model.issued_all, third[0], third[1], cfg, paced(ready, after),
                                 before=model, floor=after))
    assert [t for t, _, _ in dram.ar] == [h for run in runs for h in run[0].tolist()]
    assert pulls == runs[0][3].tolist() + runs[2][3].tolist()
    assert sides == runs[1][2].tolist()


class EngineRead:
    """A one-line read on the command engine's arbiter port, asked from cycle `request`
    and held until its handshake, as hw/command_engine.py's ADDR state does. Logs its
    handshake and beat."""
    def __init__(self, bus, request, addr):
        self.bus, self.request, self.addr = bus, request, addr
        self.handshake = self.beat = None

    def drive(self, ctx, t):
        bus = self.bus
        ctx.set(bus.arvalid, t >= self.request and self.handshake is None)
        ctx.set(bus.araddr, self.addr)
        ctx.set(bus.arlen, 0)
        ctx.set(bus.rready, 1)

    def sample(self, ctx, t):
        if self.handshake is None and ctx.get(self.bus.arvalid) and ctx.get(self.bus.arready):
            self.handshake = t
        if ctx.get(self.bus.rvalid) and self.beat is None and self.handshake is not None:
            self.beat = t


class ReaderAndEngine(Elaboratable):
    """A DramReader and a bare engine port behind the three-port DramArbiter of hw/device.py."""
    def __init__(self, cfg):
        self.reader, self.arbiter = DramReader(cfg), DramArbiter(cfg, 3)
        self.engine, self.dram = self.arbiter.ports[ENGINE_PORT], self.arbiter.dram

    def elaborate(self, platform):
        m = Module()
        m.submodules.reader, m.submodules.arbiter = self.reader, self.arbiter
        connect(m, self.reader.bus, self.arbiter.ports[CONTROL_PORT])
        return m


ENGINE_ADDR = 0x7_0000                            # the engine's line, apart from the runs


# a run, and a command-engine read asking at a cycle among its bursts (or before them)
@pytest.mark.parametrize("cfg,addr,beats,asked", [
    (CFG, 0x0, 200, 1), (CFG, 0x0, 200, 2), (CFG, 0x0, 200, 3), (CFG, 0x0, 200, 9), (CFG, 0x0, 200, 10),
    (CFG, 0x0FC0, 70, 40), (SMALL, 0x0, 100, 7), (SMALL, 0x0, 100, 8), (SLOW, 0x40, 90, 15), (SLOW, 0x40, 90, 16)],
    ids=lambda v: getattr(v, "name", str(v)))
def test_engine_read_among_reader_bursts(cfg, addr, beats, asked):
    """Through the arbiter: the engine's handshake and beat are sim/dram_arbiter.engine_grant's
    (from the reader's schedule without it), and the reader's bursts and beats are
    sim/dram_reader's with that read among its `steals`."""
    top = ReaderAndEngine(cfg)
    reader = top.reader
    dram = Dram(cfg, top.dram)
    engine = EngineRead(top.engine, asked, ENGINE_ADDR)
    shown = []

    async def bench(ctx):
        clock = Clock(ctx, dram, engine)
        ctx.set(reader.out.ready, 1)
        ctx.set(reader.run.valid, 1)
        ctx.set(reader.run.payload.addr, addr)
        ctx.set(reader.run.payload.lines, beats)
        for _ in range(4 * beats + 50 * (beats // cfg.max_burst_beats + 2)):
            if ctx.get(reader.out.valid):
                shown.append(clock.t)
            await clock.tick()
            ctx.set(reader.run.valid, 0)
            if len(shown) == beats and engine.beat is not None:
                break

    simulate(top, bench)
    handshakes, lengths, arrivals = model_reader.burst_schedule(0, addr, beats, cfg)
    bursts = list(zip(handshakes.tolist(), arrivals[np.cumsum(lengths) - 1].tolist()))
    grant = model_arbiter.engine_grant(asked, bursts, False, cfg)
    assert (engine.handshake, engine.beat) == grant
    steal = [(asked, grant[0], grant[1], 0)]
    handshakes, lengths, arrivals = model_reader.burst_schedule(0, addr, beats, cfg, steals=steal)
    reader_ar = [t for t, a, _ in dram.ar if a != ENGINE_ADDR]
    assert reader_ar == handshakes.tolist()
    assert [t for t in dram.r if t != engine.beat] == arrivals.tolist()
    assert shown == (arrivals + model_reader.BUFFER_LATENCY).tolist()
