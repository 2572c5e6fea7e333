"""The harness that ties each block of the cycle model (sim/) to its RTL block (hw/), on
Amaranth's simulator; the test_<block>.py files use it.

rtlbench/validate.py ties the whole model to the whole RTL; these tie each model block to
the RTL block it mirrors, so that a change to one hw block that is not carried into sim/
fails a test that names the block.

Cycle convention: cycle 0 is the cycle the block's `start` (or the first request) is
asserted; the testbench sets the inputs of cycle t and samples its outputs (combinational
ones settled) before the clock edge that ends it. "Available at t" for a beat stream
means the source shows the beat (valid high) from cycle t on, as the DRAM buffer's output
does.

The arbiter's grant. The model's address-handshake delays (sim/dram_reader.py
ISSUE_DELAY and NEXT_BURST_DELAY, sim/dram_writer.py ISSUE_DELAY, sim/command_engine.py
ADDR_DELAY) include the cycle hw/dram_arbiter.py takes to grant a request: its read or
write FSM leaves IDLE on the request and routes the handshake from ADDR, the next cycle.
So the bus blocks are tied behind a real DramArbiter on the port hw/device.py gives them
(the other ports idle), the DRAM responder on its `dram` port; the model's cycles then
hold exactly, with no offset. A bare block on an always-ready responder is GRANT cycle
faster per granted address handshake (the reader's every burst, the writer's first of a
run), which is not one common offset (it adds up burst after burst, and vanishes where a
slow source binds); the `_bare` tests check that this is the only difference, where it
is well defined, to tell a change in the block from one in the arbiter.
"""
import collections
import dataclasses

import isa
from amaranth import Elaboratable, Module
from amaranth.lib.wiring import connect
from amaranth.sim import Simulator

from isa.axi import RESP_OKAY
from hw.dram_arbiter import DramArbiter

CFG = isa.load_config("default")
SMALL = isa.load_config("small")             # max_burst_beats 32: bursts cut short of 4 KiB
SLOW = dataclasses.replace(CFG, name="slow", dram_read_latency=5, dram_write_latency=4)
# two-beat bursts answered 80 cycles after their last beat: posted writes reach the
# writer's limit of bursts in flight
POSTED = dataclasses.replace(SMALL, name="posted", dram_buf_bytes=256, dram_write_latency=80)
LANES = CFG.lanes
FRONT_PORT, ENGINE_PORT, CONTROL_PORT = 0, 1, 2   # the arbiter ports of hw/device.py
GRANT = 1                                         # DramArbiter: request -> handshake, at the earliest
QUEUE_FIELDS = ("sq_base", "cq_base", "data_base", "data_limit", "log2_depth", "log2_slot",
                "pasid", "enable", "irq_en", "tail")


# ---- harness ----------------------------------------------------------------------------

def simulate(top, bench):
    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


class BehindArbiter(Elaboratable):
    """`block`'s bus on port `port` of a three-port DramArbiter, as in hw/device.py."""
    def __init__(self, cfg, block, port):
        self.block, self.port = block, port
        self.arbiter = DramArbiter(cfg, 3)
        self.dram = self.arbiter.dram

    def elaborate(self, platform):
        m = Module()
        m.submodules.block, m.submodules.arbiter = self.block, self.arbiter
        connect(m, self.block.bus, self.arbiter.ports[self.port])
        return m


def placed(cfg, block, port, via_arbiter):
    """(top module, the bus the DRAM responder serves)."""
    if via_arbiter:
        top = BehindArbiter(cfg, block, port)
        return top, top.dram
    return block, block.bus


class Clock:
    """The testbench's cycle count and the agents it steps. An agent drives its outputs for
    cycle t at the start of the cycle, from what it saw before (so the bench samples settled
    values), and samples the handshakes at the end of the cycle, before the clock edge."""
    def __init__(self, ctx, *agents):
        self.ctx, self.agents, self.t = ctx, agents, 0
        for agent in agents:
            agent.drive(ctx, 0)

    async def tick(self):
        for agent in self.agents:
            agent.sample(self.ctx, self.t)
        await self.ctx.tick()
        self.t += 1
        for agent in self.agents:
            agent.drive(self.ctx, self.t)


class Dram:
    """The DRAM the model assumes, on an AXI4 manager's bus: AR, AW and W taken at once;
    R beats one per cycle from `dram_read_latency` cycles after the AR handshake; each
    burst's B `dram_write_latency` cycles after its last W beat, in order, one per cycle
    at most. Logs the cycle of every handshake."""
    def __init__(self, cfg, bus, memory=None, beat_bytes=None):
        self.cfg, self.bus, self.memory = cfg, bus, memory
        self.beat_bytes = beat_bytes or cfg.beat_bytes      # a channel port's: cfg.port_bytes
        self.ar, self.r, self.aw, self.w, self.b = [], [], [], [], []     # (cycle, ...)
        self._beats = collections.deque()         # (due, data, last)
        self._b_due = collections.deque()       # when each written burst's B may go
        self._beat = None

    def drive(self, ctx, t):
        bus = self.bus
        for ready in (bus.arready, bus.awready, bus.wready):
            ctx.set(ready, 1)
        self._beat = self._beats[0] if self._beats and self._beats[0][0] <= t else None
        ctx.set(bus.rvalid, self._beat is not None)
        ctx.set(bus.rdata, self._beat[1] if self._beat else 0)
        ctx.set(bus.rlast, bool(self._beat and self._beat[2]))
        ctx.set(bus.rresp, RESP_OKAY)
        ctx.set(bus.bvalid, bool(self._b_due) and self._b_due[0] <= t)
        ctx.set(bus.bresp, RESP_OKAY)

    def sample(self, ctx, t):
        bus, cfg = self.bus, self.cfg
        if self._beat and ctx.get(bus.rready):
            self.r.append(t)
            self._beats.popleft()
        if ctx.get(bus.arvalid):
            addr, n = ctx.get(bus.araddr), ctx.get(bus.arlen) + 1
            self.ar.append((t, addr, n))
            for i in range(n):
                data = self.memory.read(addr + i * self.beat_bytes, self.beat_bytes) if self.memory else bytes(8)
                self._beats.append((t + cfg.dram_read_latency + i, int.from_bytes(data, "little"), i == n - 1))
        if ctx.get(bus.awvalid):
            self.aw.append((t, ctx.get(bus.awaddr), ctx.get(bus.awlen) + 1))
        if ctx.get(bus.wvalid):
            self.w.append(t)
            if ctx.get(bus.wlast):
                self._b_due.append(t + cfg.dram_write_latency)
        if ctx.get(bus.bvalid) and ctx.get(bus.bready):
            self.b.append(t)
            self._b_due.popleft()


class Source:
    """A beat stream whose beat i is valid from cycle `available[i]` (once beat i - 1 has
    been taken), as the DRAM buffer's output shows its beats. Logs when each is taken."""
    def __init__(self, stream, available, data=None):
        self.stream, self.available = stream, list(available)
        self.data = data or list(range(len(self.available)))
        self.taken = []
        self._valid = False

    def drive(self, ctx, t):
        i = len(self.taken)
        self._valid = i < len(self.available) and self.available[i] <= t
        ctx.set(self.stream.valid, self._valid)
        ctx.set(self.stream.payload.data, self.data[i] if i < len(self.data) else 0)

    def sample(self, ctx, t):
        if self._valid and ctx.get(self.stream.ready):
            self.taken.append(t)
