"""Synchronous FIFOs for enables that come late: `amaranth.lib.fifo`'s SyncFIFO and
SyncFIFOBuffered, cycle for cycle and port for port, with their fill counts kept beside
their neighbours (the count plus one and minus one, registered) so that a write or a read
enable picks the next count with a multiplexer instead of running through an adder.

Why: a FIFO's enables are the ends of handshakes (a DRAM channel's ready through the
arbiter and the interleaver, the unpacker's take through the line packer's room); in
Amaranth's FIFOs they select the operand of the count's adder (synthesis shares the +1
and the -1), 9 to 15 gate levels after the latest signal of a path that is long already.
tests/unit/test_fifo.py checks these against Amaranth's on random enables.
"""
from amaranth import Module, Mux, Signal
from amaranth.lib.memory import Memory
from amaranth.lib import fifo


def _incr(value, depth):
    """value + 1 modulo depth (a pointer into the storage)."""
    if depth & (depth - 1) == 0:
        return (value + 1)[:len(value)]
    return Mux(value == depth - 1, 0, value + 1)


def _count(m, level, inc, dec, name):
    """`level` counted up on `inc`, down on `dec` (never both), from registered neighbours."""
    up, down = Signal(len(level) + 1, name=f"{name}_up", init=1), Signal(len(level), name=f"{name}_down",
                                                                          init=(1 << len(level)) - 1)
    with m.If(inc):
        m.d.sync += [level.eq(up), up.eq(up + 1), down.eq(level)]
    with m.Elif(dec):
        m.d.sync += [level.eq(down), up.eq(level), down.eq(down - 1)]


class SyncFIFO(fifo.SyncFIFO):
    """amaranth.lib.fifo.SyncFIFO (read port combinational), its count for late enables."""

    def elaborate(self, platform):
        if self.depth == 0:
            return super().elaborate(platform)
        m = Module()
        m.d.comb += [self.w_rdy.eq(self.level != self.depth), self.r_rdy.eq(self.level != 0),
                     self.w_level.eq(self.level), self.r_level.eq(self.level)]
        do_read, do_write = self.r_rdy & self.r_en, self.w_rdy & self.w_en
        storage = m.submodules.storage = Memory(shape=self.width, depth=self.depth, init=[])
        w_port, r_port = storage.write_port(), storage.read_port(domain="comb")
        produce, consume = Signal(range(self.depth)), Signal(range(self.depth))
        m.d.comb += [w_port.addr.eq(produce), w_port.data.eq(self.w_data), w_port.en.eq(do_write),
                     r_port.addr.eq(consume), self.r_data.eq(r_port.data)]
        with m.If(do_write):
            m.d.sync += produce.eq(_incr(produce, self.depth))
        with m.If(do_read):
            m.d.sync += consume.eq(_incr(consume, self.depth))
        _count(m, self.level, do_write & ~do_read, do_read & ~do_write, "level")
        return m


class SyncFIFOBuffered(fifo.SyncFIFOBuffered):
    """amaranth.lib.fifo.SyncFIFOBuffered (its output registered), its count for late enables."""

    def elaborate(self, platform):
        if self.depth <= 1:
            return super().elaborate(platform)
        m = Module()
        do_write = self.w_rdy & self.w_en
        m.d.comb += [self.w_level.eq(self.level), self.r_level.eq(self.level)]
        inner_depth = self.depth - 1
        inner_level, inner_r_rdy = Signal(range(inner_depth + 1)), Signal()
        m.d.comb += [self.w_rdy.eq(inner_level != inner_depth), inner_r_rdy.eq(inner_level != 0)]
        do_inner_read = inner_r_rdy & (~self.r_rdy | self.r_en)
        storage = m.submodules.storage = Memory(shape=self.width, depth=inner_depth, init=[])
        w_port, r_port = storage.write_port(), storage.read_port(domain="sync")
        produce, consume = Signal(range(inner_depth)), Signal(range(inner_depth))
        m.d.comb += [w_port.addr.eq(produce), w_port.data.eq(self.w_data), w_port.en.eq(do_write),
                     r_port.addr.eq(consume), self.r_data.eq(r_port.data), r_port.en.eq(do_inner_read)]
        with m.If(do_write):
            m.d.sync += produce.eq(_incr(produce, inner_depth))
        with m.If(do_inner_read):
            m.d.sync += consume.eq(_incr(consume, inner_depth))
        _count(m, inner_level, do_write & ~do_inner_read, do_inner_read & ~do_write, "inner_level")
        with m.If(do_inner_read):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        m.d.comb += self.level.eq(inner_level + self.r_rdy)
        return m
