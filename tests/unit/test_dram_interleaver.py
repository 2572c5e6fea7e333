"""hw/dram_interleaver.py against its model (sim/dram_interleaver.py, and the channels'
timing in sim/dram_reader.py's loop) and against memory, on Amaranth's simulator.

The DRAM reader and writer sit behind the three-port arbiter of hw/device.py and the
interleaver, one DRAM agent per channel port (tests/unit/ties.py's `Dram`:
every address taken at once, a burst's lines one per cycle from `dram_read_latency`
after its address and after the channel's earlier lines; each burst's response
`dram_write_latency` after its last line). The cycles must be the model's exactly and
every byte must land where the spec's interleaving puts it (byte a on channel
(a >> 8) mod C, each channel port carrying the full address).
"""
import dataclasses

import numpy as np
import pytest
from amaranth import Elaboratable, Module
from amaranth.lib.wiring import connect

import isa
from hw.dram_arbiter import DramArbiter
from hw.dram_interleaver import DramInterleaver
from hw.dram_reader import DramReader
from hw.dram_writer import DramWriter
from sim import dram_reader as model_reader
from sim import dram_writer as model_writer
from sim.dram_interleaver import channel_of
from sim.memory import SparseMemory
from ties import CONTROL_PORT, Clock, Dram, Source, simulate

QUAD = isa.load_config("quad")
QUAD_SLOW = dataclasses.replace(QUAD, name="quad-slow", dram_read_latency=9, dram_write_latency=7)
# 2 channels: a beat is half a granule, bursts of 4 beats cross granules
DUAL = dataclasses.replace(QUAD, name="dual", lanes=64, dram_channels=2, softmax_lanes=16)
MEMORY = 1 << 20


class Behind(Elaboratable):
    """`block` on the control unit's arbiter port, the arbiter on the interleaver."""
    def __init__(self, cfg, block):
        self.block, self.arbiter, self.interleaver = block, DramArbiter(cfg, 3), DramInterleaver(cfg)

    def elaborate(self, platform):
        m = Module()
        m.submodules.block, m.submodules.arbiter, m.submodules.interleaver = \
            self.block, self.arbiter, self.interleaver
        connect(m, self.block.bus, self.arbiter.ports[CONTROL_PORT])
        connect(m, self.arbiter.dram, self.interleaver.bus)
        return m


class Channel(Dram):
    """A channel's DRAM agent that also stores what is written (per-byte strobes)."""
    def __init__(self, cfg, bus, memory, index):
        super().__init__(cfg, bus, memory, cfg.port_bytes)
        self.index, self._writes = index, []

    def sample(self, ctx, t):
        bus = self.bus
        if ctx.get(bus.awvalid):
            self._writes.append([ctx.get(bus.awaddr), ctx.get(bus.awlen) + 1])
        if ctx.get(bus.wvalid):
            addr, left = self._writes[0]
            assert channel_of(addr // 64, self.cfg.dram_channels) == self.index, "a line on the wrong channel"
            data, strb = ctx.get(bus.wdata).to_bytes(64, "little"), ctx.get(bus.wstrb)
            old = bytearray(self.memory.read(addr, 64))
            for i in range(64):
                if strb >> i & 1:
                    old[i] = data[i]
            self.memory.write(addr, bytes(old))
            self._writes[0] = [addr + 64, left - 1]
            if left == 1:
                self._writes.pop(0)
        if ctx.get(bus.arvalid):
            addr, n = ctx.get(bus.araddr), ctx.get(bus.arlen) + 1
            assert all(channel_of(addr // 64 + i, self.cfg.dram_channels) == self.index for i in range(n))
            assert addr // 256 == (addr + 64 * n - 1) // 256, "a channel burst crosses a granule"
        super().sample(ctx, t)


def memory_with_pattern(seed):
    memory = SparseMemory(MEMORY)
    memory.write(0, np.random.default_rng(seed).integers(0, 256, MEMORY // 4, dtype=np.uint8).tobytes())
    return memory


READ_RUNS = [(QUAD, 0x0, 64), (QUAD, 5 * 64, 11), (QUAD, 0x3C0, 200), (QUAD, 0x1000 - 64, 3), (QUAD, 0x40, 1),
             (QUAD_SLOW, 7 * 64, 150), (DUAL, 3 * 64, 70), (DUAL, 0, 9)]


@pytest.mark.parametrize("run", READ_RUNS, ids=lambda r: f"{r[0].name}-{r[1]:#x}-{r[2]}")
def test_reads_through_the_interleaver(run):
    """A reader run: the handshakes and the beats on the internal bus are the model's
    (sim/dram_reader.burst_schedule), and each beat holds, in slot j, the line of its
    address, only where the run has lines."""
    cfg, addr, lines = run
    reader = DramReader(cfg)
    top = Behind(cfg, reader)
    memory = memory_with_pattern(1)
    channels = [Channel(cfg, top.interleaver.channels[c], memory, c) for c in range(cfg.dram_channels)]
    handshakes, beats, data = [], [], []
    bus = top.arbiter.dram

    async def bench(ctx):
        clock = Clock(ctx, *channels)
        ctx.set(reader.out.ready, 1)
        ctx.set(reader.run.valid, 1)
        ctx.set(reader.run.payload.addr, addr)
        ctx.set(reader.run.payload.lines, lines)
        expected = int(model_reader.bursts(addr, lines, cfg)[2].sum())
        for _ in range(20 * expected + 200):
            if ctx.get(bus.arvalid) and ctx.get(bus.arready):
                handshakes.append(clock.t)
            if ctx.get(bus.rvalid) and ctx.get(bus.rready):
                beats.append(clock.t)
                data.append(ctx.get(bus.rdata))
            await clock.tick()
            ctx.set(reader.run.valid, 0)
            if len(beats) == expected:
                break

    simulate(top, bench)
    model_handshakes, _, arrivals = model_reader.burst_schedule(0, addr, lines, cfg)
    assert handshakes == model_handshakes.tolist()
    assert beats == arrivals.tolist()
    first, n = addr // 64, cfg.dram_channels
    for k, beat in enumerate(data):
        for j in range(n):
            line = (first // n + k) * n + j
            if first <= line < first + lines:
                assert (beat >> (512 * j)) & ((1 << 512) - 1) == int.from_bytes(memory.read(64 * line, 64), "little")


WRITE_RUNS = [(QUAD, 0x0, "now", 64), (QUAD, 5 * 64, "now", 11), (QUAD, 0x3C0, "gaps", 90), (QUAD, 0xFC0, "now", 2),
              (QUAD_SLOW, 9 * 64, "gaps", 70), (DUAL, 3 * 64, "now", 33)]


@pytest.mark.parametrize("run", WRITE_RUNS, ids=lambda r: f"{r[0].name}-{r[1]:#x}-{r[2]}-{r[3]}")
def test_writes_through_the_interleaver(run):
    """A writer job from a stream, then a one-line job: the responses are the model's
    (sim/dram_writer.Writer with sim/dram_interleaver.WriteChannels), and exactly the run's
    lines are written, each byte from its slot of its beat."""
    cfg, addr, kind, lines = run
    rng = np.random.default_rng(lines)
    n = cfg.dram_channels
    first = addr // 64
    beats = int(model_reader.bursts(addr, lines, cfg)[2].sum())
    payload = rng.integers(0, 256, (beats, cfg.beat_bytes), dtype=np.uint8)
    strobes = []
    for k in range(beats):
        strb = 0
        for j in range(n):
            if first <= (first // n + k) * n + j < first + lines:
                strb |= ((1 << 64) - 1) << (64 * j)
        strobes.append(strb)
    available = [0] * beats if kind == "now" else np.cumsum(rng.choice([0, 0, 1, 3], beats)).tolist()
    writer = DramWriter(cfg)
    top = Behind(cfg, writer)
    memory = SparseMemory(MEMORY)
    channels = [Channel(cfg, top.interleaver.channels[c], memory, c) for c in range(n)]
    src = Source(writer.src, available, [int.from_bytes(p.tobytes(), "little") for p in payload])
    responses, idle = [], []
    bus = top.arbiter.dram
    line_addr = 0x8000

    async def bench(ctx):
        clock = Clock(ctx, src, *channels)
        ctx.set(writer.job.valid, 1)
        ctx.set(writer.job.payload.addr, addr)
        ctx.set(writer.job.payload.from_stream, 1)
        ctx.set(writer.job.payload.lines, lines)
        ctx.set(writer.job.payload.line, 0x5A5A)
        ctx.set(writer.job.payload.strb, (1 << 64) - 1)
        second = False
        for _ in range(40 * beats + 400):
            i = len(src.taken)
            ctx.set(writer.src.payload.strb, strobes[i] if i < beats else 0)
            if ctx.get(bus.bvalid) and ctx.get(bus.bready):
                responses.append(clock.t)
            start_line = False
            if ctx.get(writer.idle) and clock.t > 0 and not second:
                idle.append(clock.t)
                start_line = second = True
            await clock.tick()
            ctx.set(writer.job.valid, 0)
            if start_line:
                ctx.set(writer.job.valid, 1)
                ctx.set(writer.job.payload.from_stream, 0)
                ctx.set(writer.job.payload.addr, line_addr)
            if second and ctx.get(writer.quiet):
                break

    simulate(top, bench)
    model = model_writer.Writer(cfg)
    model.log = []
    model.run(0, addr, lines, np.asarray(available, np.int64))
    assert idle == [model.idle_at]
    model.line(model.idle_at + 1, line_addr)              # the bench starts it the cycle after
    assert responses == model.log
    for line in range(max(0, first - 4), first + lines + 4):
        got = memory.read(64 * line, 64)
        if first <= line < first + lines:
            k, j = line // n - first // n, line % n
            assert got == payload[k, 64 * j:64 * (j + 1)].tobytes(), f"line {line}"
        else:
            assert got == bytes(64), f"line {line} outside the run was written"
    assert memory.read(line_addr, 8) == (0x5A5A).to_bytes(8, "little")
