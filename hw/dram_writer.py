"""The DRAM writer: writes either a run of lines taken from a stream of lines with byte
strobes (load/store copies, result runs) or one line held in a register with byte
strobes (anchors, completions).

Writes are posted: the next burst's address goes out right after the current burst's
last beat, with up to WRITES_IN_FLIGHT bursts awaiting their response; `busy` falls the
cycle after the run's last response, so when it falls every write of the run has been
answered: what the completion ordering needs.
"""
from amaranth import Module, Signal, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi import device_bus, burst_length, BURST_INCR
from .dram_reader import RUN_BEATS_BITS
from .stream import LineStream

WRITES_IN_FLIGHT = 16        # bursts written and not yet answered


class DramWriter(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({
            "bus": Out(device_bus(cfg)),
            "start": In(1), "addr": In(64),
            "from_stream": In(1),                      # 1: `beats` lines from `src`
            "beats": In(RUN_BEATS_BITS),
            "line": In(cfg.data_bits), "strb": In(cfg.beat_bytes),   # 0: this one line
            "busy": Out(1),
            "src": In(LineStream(cfg.data_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, bus = self._cfg, self.bus
        beat_log2 = (cfg.beat_bytes - 1).bit_length()
        addr, left = Signal(64, name="addr"), Signal(RUN_BEATS_BITS, name="left")
        from_stream, line, strb = Signal(), Signal(cfg.data_bits), Signal(cfg.beat_bytes)
        burst = burst_length(m, addr, left, cfg)
        in_burst = Signal(range(cfg.max_burst_beats + 1))

        m.d.comb += [bus.awsize.eq(beat_log2), bus.awburst.eq(BURST_INCR), bus.awcache.eq(0b0011),
                     bus.awaddr.eq(addr), bus.awlen.eq(burst - 1),
                     bus.wdata.eq(Mux(from_stream, self.src.data, line)),
                     bus.wstrb.eq(Mux(from_stream, self.src.strb, strb)),
                     bus.wlast.eq(in_burst == 1)]

        # bursts whose address went out and whose response has not come back
        in_flight = Signal(range(WRITES_IN_FLIGHT + 1))
        answered = bus.bvalid & bus.bready
        m.d.comb += bus.bready.eq(in_flight != 0)
        m.d.sync += in_flight.eq(in_flight + (bus.awvalid & bus.awready) - answered)
        last_answered = (in_flight == 0) | ((in_flight == 1) & answered)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.comb += self.busy.eq(1)
                    m.d.sync += [addr.eq(self.addr), from_stream.eq(self.from_stream),
                                 left.eq(Mux(self.from_stream, self.beats, 1)),
                                 line.eq(self.line), strb.eq(self.strb)]
                    m.next = "ISSUE"
            with m.State("ISSUE"):
                m.d.comb += self.busy.eq(1)
                with m.If(left == 0):
                    # the run's bursts are all written: wait for their responses
                    with m.If(last_answered):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "ANSWERS"
                with m.Elif(in_flight < WRITES_IN_FLIGHT):
                    m.d.comb += bus.awvalid.eq(1)
                    with m.If(bus.awready):
                        m.d.sync += [in_burst.eq(burst), addr.eq(addr + (burst << beat_log2)),
                                     left.eq(left - burst)]
                        m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += self.busy.eq(1)
                valid = Mux(from_stream, self.src.valid, 1)
                m.d.comb += [bus.wvalid.eq(valid), self.src.ready.eq(from_stream & bus.wready)]
                with m.If(valid & bus.wready):
                    m.d.sync += in_burst.eq(in_burst - 1)
                    with m.If(in_burst == 1):
                        m.next = "ISSUE"
            with m.State("ANSWERS"):
                m.d.comb += self.busy.eq(1)
                with m.If(last_answered):
                    m.next = "IDLE"
        return m
