"""Synchronous FIFOs for enables that come late: `amaranth.lib.fifo`'s SyncFIFO and
SyncFIFOBuffered, cycle for cycle and port for port, with their fill counts kept beside
their neighbours (the count plus one and minus one, registered) so that a write or a read
enable picks the next count with a multiplexer instead of running through an adder.

Why: a FIFO's enables are the ends of handshakes (a DRAM channel's ready through the
arbiter and the interleaver, the unpacker's take through the line packer's room); in
Amaranth's FIFOs they select the operand of the count's adder (synthesis shares the +1
and the -1), 9 to 15 gate levels after the latest signal of a path that is long already.
SyncFIFOSinglePort is SyncFIFOBuffered again, over a memory of one read-write port.
tests/unit/test_fifo.py checks these against Amaranth's on random enables.
"""
from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib.memory import Memory
from amaranth.lib import data, fifo


def entries(buffer, layout):
    """Views of a FIFO's written and read entries as `layout` (its width the layout's size),
    so an entry's fields are named where it is written and where it is read."""
    if buffer.width != layout.size:
        raise ValueError(f"a FIFO {buffer.width} bits wide holds no {layout.size}-bit entry")
    return data.View(layout, buffer.w_data), data.View(layout, buffer.r_data)


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


# the register queues beside a single-ported FIFO's memory (SyncFIFOSinglePort), in lines:
# the head's room for three pairs, so that a pair asked for while two lines wait arrives
# before they are read even when the port went to a write first; the tail's for a pair
# waiting its turn at the port and the line arriving meanwhile
HEAD_LINES = 6
TAIL_LINES = 4
# the attribute by which a memory of one read port and one write port, never enabled in
# the same cycle and on one address, declares itself one read-write port (area/sram.py)
SINGLE_PORT_ATTR = "ndp_single_port"


class SyncFIFOSinglePort(fifo.SyncFIFOBuffered):
    """SyncFIFOBuffered, cycle for cycle and port for port, over a memory of one read-write
    port (a 1RW SRAM macro, two to three times denser than one with a read and a write
    port: area/sram.py) whose words are pairs of lines.

    The lines in the FIFO, oldest first: the head (up to HEAD_LINES registers), the memory
    (pairs), the tail (up to TAIL_LINES registers); the output register after them as in
    SyncFIFOBuffered. A line written goes to the head while the memory and the tail are
    empty and the head has room, else to the tail; the tail's lines move to the head one a
    cycle while the memory is empty, and go to the memory as a pair once the head is full
    or the memory holds lines. The memory's one port reads a pair into the head whenever
    the head has room for it beside a pair in flight, or writes the tail's first pair;
    asked both, it alternates. Each moves two lines in one access, so one line in and one
    out every cycle keeps it busy half the time each way, and the head never runs dry
    while the memory holds the oldest lines (asserted)."""

    def elaborate(self, platform):
        if self.depth < 4:
            return super().elaborate(platform)
        m = Module()
        width = self.width
        do_write = self.w_rdy & self.w_en
        m.d.comb += [self.w_level.eq(self.level), self.r_level.eq(self.level)]
        # what the FIFO holds besides its output register, as SyncFIFOBuffered counts it
        inner_depth = self.depth - 1
        inner_level = Signal(range(inner_depth + 1))
        m.d.comb += self.w_rdy.eq(inner_level != inner_depth)
        do_inner_read = (inner_level != 0) & (~self.r_rdy | self.r_en)
        _count(m, inner_level, do_write & ~do_inner_read, do_inner_read & ~do_write, "inner_level")

        pairs = -(-inner_depth // 2)
        storage = m.submodules.storage = Memory(shape=2 * width, depth=pairs, init=[],
                                                attrs={SINGLE_PORT_ATTR: 1})
        # (a line's granularity: Amaranth's simulator builds a write enable as wide as the word
        # into one expression otherwise, too deep for Python to compile at 4,096 bits)
        w_port, r_port = storage.write_port(granularity=width), storage.read_port(domain="sync")
        head = [Signal(width, name=f"head{i}") for i in range(HEAD_LINES)]
        tail = [Signal(width, name=f"tail{i}") for i in range(TAIL_LINES)]
        h_first, h_count = Signal(range(HEAD_LINES)), Signal(range(HEAD_LINES + 1))
        t_first, t_count = Signal(range(TAIL_LINES)), Signal(range(TAIL_LINES + 1))
        s_read, s_write, s_count = Signal(range(pairs)), Signal(range(pairs)), Signal(range(pairs + 1))
        in_flight, last_read = Signal(), Signal()      # a pair read last cycle; the port's last turn

        def at(first, offset, size):
            """(first + offset) modulo size, offset a small constant or signal."""
            total = first + offset
            return Mux(total >= size, total - size, total)[:len(first)]

        mem_empty = (s_count == 0) & ~in_flight
        head_full = h_count == HEAD_LINES
        # the port: a pair into the head, or the tail's first pair into the memory
        want_read = (s_count != 0) & (h_count + Mux(in_flight, 2, 0) <= HEAD_LINES - 2)
        want_write = (t_count >= 2) & ((s_count != 0) | head_full)
        do_mem_read = want_read & (~want_write | ~last_read)
        do_mem_write = want_write & ~do_mem_read
        m.d.comb += [w_port.addr.eq(s_write), r_port.addr.eq(s_read), r_port.en.eq(do_mem_read),
                     w_port.en.eq(do_mem_write.replicate(2)),
                     w_port.data.eq(Cat(Array(tail)[t_first], Array(tail)[at(t_first, 1, TAIL_LINES)]))]
        m.d.sync += Assert(~(r_port.en & w_port.en), "single-ported FIFO: a read and a write in one cycle")
        with m.If(do_mem_read | do_mem_write):
            m.d.sync += last_read.eq(do_mem_read)
        m.d.sync += in_flight.eq(do_mem_read)
        with m.If(do_mem_read):
            m.d.sync += s_read.eq(_incr(s_read, pairs))
        with m.If(do_mem_write):
            m.d.sync += s_write.eq(_incr(s_write, pairs))
        m.d.sync += s_count.eq(s_count + do_mem_write - do_mem_read)

        # the head: the pair arriving, else a line from the tail, else the line written
        move = mem_empty & (t_count != 0) & ~head_full
        direct = do_write & mem_empty & (t_count == 0) & ~head_full
        one = Mux(move, Array(tail)[t_first], self.w_data)
        h_tail = at(h_first, h_count, HEAD_LINES)
        h_tail1 = at(h_first, h_count + 1, HEAD_LINES)
        for i, line in enumerate(head):
            with m.If(in_flight & (h_tail == i)):
                m.d.sync += line.eq(r_port.data[:width])
            with m.Elif(in_flight & (h_tail1 == i)):
                m.d.sync += line.eq(r_port.data[width:])
            with m.Elif((move | direct) & (h_tail == i)):
                m.d.sync += line.eq(one)
        h_pop = do_inner_read
        m.d.sync += Assert(~h_pop | (h_count != 0), "single-ported FIFO: the oldest line not in the head")
        with m.If(h_pop):
            m.d.sync += h_first.eq(_incr(h_first, HEAD_LINES))
        m.d.sync += h_count.eq(h_count + Mux(in_flight, 2, move | direct) - h_pop)

        # the tail: the line written when it does not go to the head
        to_tail = do_write & ~direct
        t_end = at(t_first, t_count, TAIL_LINES)
        for i, line in enumerate(tail):
            with m.If(to_tail & (t_end == i)):
                m.d.sync += line.eq(self.w_data)
        t_pop = Mux(do_mem_write, 2, move)
        m.d.sync += [t_first.eq(at(t_first, t_pop, TAIL_LINES)), t_count.eq(t_count + to_tail - t_pop)]
        m.d.sync += Assert(~to_tail | (t_count - t_pop < TAIL_LINES), "single-ported FIFO: its tail overflows")

        # the output register, as SyncFIFOBuffered's
        with m.If(do_inner_read):
            m.d.sync += [self.r_data.eq(Array(head)[h_first]), self.r_rdy.eq(1)]
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        m.d.comb += self.level.eq(inner_level + self.r_rdy)
        return m
