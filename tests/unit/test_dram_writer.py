"""The DRAM writer: the model (sim/dram_writer.py) against the RTL (hw/dram_writer.py), cycle
for cycle, through the harness of ties.py (its docstring gives the cycle convention)."""
import numpy as np
import pytest

from hw.dram_writer import DramWriter
from sim import dram_reader as model_reader
from sim import dram_writer as model_writer

from ties import CFG, CONTROL_PORT, Clock, Dram, GRANT, POSTED, SLOW, SMALL, Source, placed, simulate


def writer_run(cfg, addr, available=None, via_arbiter=True, then_line=None):
    """A job started at cycle 0: one line when `available` is None, else a run from the
    stream whose beats are available then; with `then_line`, a one-line job with `report`
    started at that cycle or as soon as the writer is idle again. Returns the first cycle
    the writer is idle again after each job, the first cycle it is quiet after the last,
    the AW handshakes as (cycle, addr, beats), the B handshakes and the `reported` pulses."""
    writer = DramWriter(cfg)
    top, bus = placed(cfg, writer, CONTROL_PORT, via_arbiter)
    dram = Dram(cfg, bus)
    src = Source(writer.src, available or [])
    idle, quiet, reported = [], [], []

    async def bench(ctx):
        clock = Clock(ctx, src, dram)
        ctx.set(writer.job.valid, 1)
        ctx.set(writer.job.payload.addr, addr)
        ctx.set(writer.job.payload.from_stream, available is not None)
        ctx.set(writer.job.payload.lines, len(available or []))
        ctx.set(writer.job.payload.line, 0x1234)
        ctx.set(writer.job.payload.strb, 0x0F0F)
        jobs = 1 if then_line is None else 2
        limit = max(available or [0]) + 10 * len(available or [1]) + 400
        for _ in range(limit):
            await clock.tick()
            ctx.set(writer.job.valid, 0)
            if ctx.get(writer.reported):
                reported.append(clock.t)
            if len(idle) < jobs and ctx.get(writer.idle) and clock.t > (idle[-1] if idle else 0):
                idle.append(clock.t)
                if len(idle) < jobs:
                    while clock.t < then_line:
                        await clock.tick()
                        if ctx.get(writer.reported):
                            reported.append(clock.t)
                    ctx.set(writer.job.valid, 1)
                    ctx.set(writer.job.payload.from_stream, 0)
                    ctx.set(writer.job.payload.addr, addr + 0x4000)
                    ctx.set(writer.job.payload.report, 1)
            elif len(idle) == jobs and ctx.get(writer.quiet):
                quiet.append(clock.t)
                break

    simulate(top, bench)
    assert quiet, "the writer never went quiet"
    assert len(src.taken) == len(available or []) and len(dram.w) == max(1, len(available or [])) + (then_line is not None)
    return idle, quiet[0], dram.aw, dram.b, reported


def model_writer_run(cfg, addr, available=None, then_line=None):
    """The model's (idle cycles, quiet cycle, AW handshake cycles, responses, reported) for `writer_run`."""
    writer = model_writer.Writer(cfg)
    writer.log = []
    if available is None:
        writer.line(0, addr)
    else:
        writer.run(0, addr, len(available), np.asarray(available, np.int64))
    idle = [writer.idle_at]
    reported = []
    if then_line is not None:
        reported.append(writer.line(max(then_line, writer.idle_at), addr + 0x4000)[1])
        idle.append(writer.idle_at)
    return idle, writer.quiet_at(), writer.log, reported


WRITER_RUNS = [  # (config, addr, kind of availability, beats)
    (CFG, 0x1000, "now", 1), (CFG, 0x0FC0, "now", 10), (CFG, 0x0, "every", 64), (CFG, 0x0F00, "gaps", 100),
    (CFG, 0x2000, "slow", 40), (CFG, 0x0FC0, "dram", 70), (SMALL, 0x0, "now", 100), (SMALL, 0xF40, "gaps", 45),
    (SMALL, 0x0, "dram", 33), (SLOW, 0x0FC0, "gaps", 20), (SLOW, 0x0, "dram", 90),
    (POSTED, 0x0, "now", 60), (POSTED, 0x40, "gaps", 41), (POSTED, 0xFC0, "slow", 9)]


def write_availability(cfg, kind, beats, rng):
    if kind == "now":                              # the whole run waiting in the buffer
        return [0] * beats
    if kind == "every":
        return [5 + i for i in range(beats)]
    if kind == "slow":                             # a source slower than the writer
        return [20 + 3 * i for i in range(beats)]
    if kind == "gaps":
        return (np.cumsum(rng.choice([0, 0, 1, 1, 3, 9], beats))).tolist()
    if kind == "dram":                             # a copy: the reader started with the writer
        return model_reader.beat_available(0, 0x10000 - 64, beats, cfg).tolist()
    raise ValueError(kind)


@pytest.mark.parametrize("cfg", [CFG, SLOW], ids=lambda c: c.name)
@pytest.mark.parametrize("addr", [0x0, 0x0FC0, 0x12340])
def test_dram_writer_line(cfg, addr):
    """from_stream=0, through the arbiter: the handshake, idle, response and quiet cycles
    are sim/dram_writer.Writer.line's."""
    idle, quiet, aw, b, _ = writer_run(cfg, addr)
    assert aw == [(model_writer.ISSUE_DELAY, addr, 1)]
    assert (idle, quiet, b, []) == model_writer_run(cfg, addr)


@pytest.mark.parametrize("run", WRITER_RUNS, ids=lambda r: f"{r[0].name}-{r[1]:#x}-{r[2]}-{r[3]}")
def test_dram_writer_run(run):
    """from_stream=1, through the arbiter, then a reporting line posted behind the run:
    the bursts are cut as the reader's, and the idle, response, quiet and reported cycles
    are sim/dram_writer.Writer's (its in-flight limit across the two jobs included)."""
    cfg, addr, kind, beats = run
    available = write_availability(cfg, kind, beats, np.random.default_rng(beats))
    idle, quiet, aw, b, reported = writer_run(cfg, addr, available, then_line=0)
    assert [n for _, _, n in aw][:-1] == model_reader.burst_lengths(addr, beats, cfg).tolist()
    assert (idle, quiet, b, reported) == model_writer_run(cfg, addr, available, then_line=0)
    assert reported == b[-1:]


def test_dram_writer_bare():
    """The bare writer on an always-ready responder, where the arbiter's grant (a pick,
    then the handshake, at most one address every two cycles) is gone: its first address
    goes the cycle after `start`, the next ones one a cycle, and the beats follow back to
    back from the cycle after the first address, so a run of n lines is idle again at
    n + 2; behind the arbiter the model's cycles (checked above) are later by GRANT for
    the first address and by as much as the grant's cadence holds the later ones back."""
    idle, quiet, aw, _, _ = writer_run(CFG, 0x40, via_arbiter=False)
    assert aw == [(1, 0x40, 1)] and idle == [3]
    assert (idle, quiet) == ([model_writer_run(CFG, 0x40)[0][0] - GRANT], model_writer_run(CFG, 0x40)[1] - GRANT)
    for cfg, addr, beats in ((CFG, 0x0FC0, 10), (SMALL, 0x0, 100)):
        idle, _, aw, _, _ = writer_run(cfg, addr, [0] * beats, via_arbiter=False)
        assert [t for t, _, _ in aw] == list(range(1, len(aw) + 1))
        assert idle == [beats + 2]
