"""The DRAM reader: streams a run of 64-byte lines from DRAM into the DRAM buffer.

A run is a number of lines from a line's address; it is cut into bursts that never cross
the burst boundary (4 KiB on one channel, a stripe of every channel's granule on
several: hw/axi.py burst_length). Up to `dram_max_reads` bursts are in flight at once, so
the next burst's latency hides behind the current one's beats; a burst is issued only
when the buffer has room for it after every beat already asked for, so the R channel is
never back-pressured by a full buffer. A beat of the data path holds a line of every
channel; the first and last beats of a run that starts or ends inside a beat hold lines
of the run only where it has them (the unpacker's `offset` and its count of beats say
which).

The buffer is single-ported (`fifo.SyncFIFOSinglePort`: a memory of pairs of beats behind
a few beats of registers at each end, cycle for cycle the FIFO it replaced), a third of
the SRAM of one with a read and a write port at the paper's size (area/sram.py).

Each beat keeps its response beside it, in a FIFO of its own beside the buffer's (one bit a
beat, flip-flops, so the buffer's SRAM stays a power of two of bits wide) that moves with
it: `out.payload.err` says the beat at the
output was answered SLVERR or DECERR (on several channels, the worst of its lines': the
interleaver joins them), so the consumer of the beat, not the reader, decides whose
error it is.

A new run may start as soon as the current one has issued its last burst (`issued_all`):
its bursts follow the current run's in flight, and its beats queue behind theirs in the
buffer.

A *side* run (`run.side`: a paged ATTENTION's list, for the front end) may sit
among other runs (one side run at a time): its beats arrive after every beat asked for
before it started (`side_before` counts those down) and before any later run's. Its
beats leave on `side` as they arrive (a stream with no backpressure) and never enter
the buffer (they still count against its room while in flight).
"""
from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from isa.axi import BURST_INCR

from . import fifo
from .axi import device_bus, burst_length, RUN_LINES_BITS
from .stream import beat_layout, beat_stream


def run_layout():
    """A run: its first line's address, its lines, and whether it is a side run."""
    return data.StructLayout({"addr": 64, "lines": RUN_LINES_BITS, "side": 1})


class DramReader(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({
            "bus": Out(device_bus(cfg)),
            # a run: `lines` lines from `addr`, into the DRAM buffer or (`side`) out on `side`
            "run": In(stream.Signature(run_layout(), always_ready=True)),
            "busy": Out(1), "issued_all": Out(1),
            "out": Out(beat_stream(cfg.beat_bits)),
            # a side run's beats, as they arrive, and their error bit
            "side": Out(stream.Signature(beat_layout(cfg.beat_bits), always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, bus = self._cfg, self.bus
        start, run = self.run.valid, self.run.payload
        line_log2 = (cfg.port_bytes - 1).bit_length()
        # the beats, and their error bits (RRESP SLVERR or DECERR) in step with them
        m.submodules.buffer = buffer = fifo.SyncFIFOSinglePort(width=cfg.beat_bits, depth=cfg.dram_buf_beats)
        m.submodules.errors = errors = fifo.SyncFIFOBuffered(width=1, depth=cfg.dram_buf_beats)
        m.d.comb += [self.out.payload.data.eq(buffer.r_data), self.out.payload.err.eq(errors.r_data),
                     self.out.valid.eq(buffer.r_rdy), buffer.r_en.eq(self.out.ready), errors.r_en.eq(self.out.ready)]

        addr, left = Signal(64, name="addr"), Signal(RUN_LINES_BITS, name="left")
        # beats asked for and not yet arrived, and bursts in flight
        pending = Signal(range(cfg.dram_buf_beats + 1))
        in_flight = Signal(range(cfg.dram_max_reads + 1))
        # the next burst's lines and beats, registered with the address and lines left they
        # are of (for 1 GHz: the request is then a compare of registers)
        lines = Signal(range(cfg.max_burst_beats * cfg.dram_channels + 1))
        beats = Signal(range(cfg.max_burst_beats + 1))

        m.d.comb += [bus.arsize.eq(line_log2), bus.arburst.eq(BURST_INCR), bus.arcache.eq(0b0011),
                     bus.araddr.eq(addr), bus.arlen.eq(beats - 1), bus.rready.eq(1)]
        if cfg.dram_channels > 1:
            m.d.comb += bus.arlines.eq(lines)
        beat_in = bus.rvalid & bus.rready
        # the side run's beats asked for and not yet arrived, and the beats asked for before
        # it that have still to arrive (its beats come next)
        side_run, side_pending = Signal(), Signal(range(cfg.dram_buf_beats + 1))
        side_before = Signal(range(cfg.dram_buf_beats + 1))
        is_side = beat_in & (side_pending != 0) & (side_before == 0)
        m.d.comb += [buffer.w_data.eq(bus.rdata), buffer.w_en.eq(beat_in & ~is_side),
                     errors.w_data.eq(bus.rresp[1]), errors.w_en.eq(beat_in & ~is_side),
                     self.side.valid.eq(is_side), self.side.payload.data.eq(bus.rdata),
                     self.side.payload.err.eq(bus.rresp[1])]

        room = (cfg.dram_buf_beats - buffer.level - pending)
        m.d.comb += bus.arvalid.eq((left != 0) & (in_flight < cfg.dram_max_reads) & (room >= beats))
        issued = bus.arvalid & bus.arready
        next_addr, next_left = Signal(64), Signal(RUN_LINES_BITS)
        m.d.comb += [next_addr.eq(Mux(start, run.addr, addr + (lines << line_log2))),
                     next_left.eq(Mux(start, run.lines, left - lines))]
        next_lines, next_beats = burst_length(m, next_addr, next_left, cfg)
        with m.If(issued | start):
            m.d.sync += [addr.eq(next_addr), left.eq(next_left), lines.eq(next_lines), beats.eq(next_beats)]
        # (each count worked out with and without the burst issued, which comes late: the
        # channels' ready through the arbiter)
        arrived, returned = pending - beat_in, in_flight - (beat_in & bus.rlast)
        side_arrived = side_pending - is_side
        m.d.sync += [pending.eq(Mux(issued, arrived + beats, arrived)),
                     in_flight.eq(Mux(issued, returned + 1, returned)),
                     side_pending.eq(Mux(issued & side_run, side_arrived + beats, side_arrived))]
        with m.If(beat_in & (side_before != 0)):
            m.d.sync += side_before.eq(side_before - 1)
        with m.If(start):
            m.d.sync += side_run.eq(run.side)
            with m.If(run.side):
                # a run starts once the one before has issued every burst: what is asked
                # for is all in `pending`
                m.d.sync += side_before.eq(pending - beat_in)
        m.d.comb += [self.busy.eq(start | (left != 0) | (in_flight != 0)), self.issued_all.eq(left == 0)]
        return m
