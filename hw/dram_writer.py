"""The DRAM writer: writes either a run of lines taken from a stream of lines with byte
strobes (load/store copies, result runs) or one line held in a register with byte
strobes (anchors, completions).

Writes are posted, across jobs too: the next burst's address goes out right after the
current burst's last beat, with up to WRITES_IN_FLIGHT bursts awaiting their response,
and the writer is `idle` (ready for its next job) as soon as a job's last beat is out.
`quiet` says every write issued so far has been answered: what a completion waits for.
A job started with `report` marks its last burst; `reported` pulses when that burst's
response comes back (the completion line's answer, after which HEAD may move).
"""
from amaranth import Module, Signal, Mux
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from isa.microarch import WRITES_IN_FLIGHT
from .axi import device_bus, burst_length, BURST_INCR
from .dram_reader import RUN_BEATS_BITS
from .stream import LineStream


class DramWriter(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({
            "bus": Out(device_bus(cfg)),
            "start": In(1), "addr": In(64),
            "from_stream": In(1),                      # 1: `beats` lines from `src`
            "beats": In(RUN_BEATS_BITS),
            "line": In(cfg.data_bits), "strb": In(cfg.beat_bytes),   # 0: this one line
            "report": In(1),
            "idle": Out(1), "quiet": Out(1), "reported": Out(1),
            "src": In(LineStream(cfg.data_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, bus = self._cfg, self.bus
        beat_log2 = (cfg.beat_bytes - 1).bit_length()
        addr, left = Signal(64, name="addr"), Signal(RUN_BEATS_BITS, name="left")
        from_stream, line, strb, report = Signal(), Signal(cfg.data_bits), Signal(cfg.beat_bytes), Signal()
        burst = burst_length(m, addr, left, cfg)
        in_burst = Signal(range(cfg.max_burst_beats + 1))

        m.d.comb += [bus.awsize.eq(beat_log2), bus.awburst.eq(BURST_INCR), bus.awcache.eq(0b0011),
                     bus.awaddr.eq(addr), bus.awlen.eq(burst - 1),
                     bus.wdata.eq(Mux(from_stream, self.src.data, line)),
                     bus.wstrb.eq(Mux(from_stream, self.src.strb, strb)),
                     bus.wlast.eq(in_burst == 1)]

        # per burst issued and not yet answered: whether it ends a reporting job
        m.submodules.tags = tags = fifo.SyncFIFO(width=1, depth=WRITES_IN_FLIGHT)
        issued = bus.awvalid & bus.awready
        answered = bus.bvalid & bus.bready
        m.d.comb += [bus.bready.eq(tags.r_rdy), tags.r_en.eq(answered),
                     self.reported.eq(answered & tags.r_data),
                     tags.w_en.eq(issued), tags.w_data.eq(report & (left == burst))]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += [self.idle.eq(1), self.quiet.eq(~tags.r_rdy)]
                with m.If(self.start):
                    m.d.sync += [addr.eq(self.addr), from_stream.eq(self.from_stream),
                                 left.eq(Mux(self.from_stream, self.beats, 1)),
                                 line.eq(self.line), strb.eq(self.strb), report.eq(self.report)]
                    with m.If(~self.from_stream | (self.beats != 0)):
                        m.next = "ISSUE"
            with m.State("ISSUE"):
                with m.If(tags.w_rdy):
                    m.d.comb += bus.awvalid.eq(1)
                    with m.If(bus.awready):
                        m.d.sync += [in_burst.eq(burst), addr.eq(addr + (burst << beat_log2)),
                                     left.eq(left - burst)]
                        m.next = "DATA"
            with m.State("DATA"):
                valid = Mux(from_stream, self.src.valid, 1)
                m.d.comb += [bus.wvalid.eq(valid), self.src.ready.eq(from_stream & bus.wready)]
                with m.If(valid & bus.wready):
                    m.d.sync += in_burst.eq(in_burst - 1)
                    with m.If(in_burst == 1):
                        with m.If(left == 0):
                            m.next = "IDLE"
                        with m.Else():
                            m.next = "ISSUE"
        return m
