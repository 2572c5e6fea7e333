"""The DRAM writer: writes either a run of lines taken from a stream of beats with byte
strobes (result runs, copies) or one line held in a register with byte strobes
(anchors, completions). A run is a number of lines from a line's address, cut into
bursts as the reader's (hw/axi.py burst_length); a beat of the stream holds a line of
every channel, at the slots of their addresses, with strobes only on the run's bytes.

Writes are posted, across jobs too: a burst's address goes out as soon as the arbiter
grants it, ahead of its data and while the previous burst's data is still going, with
up to WRITES_IN_FLIGHT bursts awaiting their response; the data beats follow one per
cycle while the source has them. The writer is `idle` (ready for its next job) once a
job's last beat is out. `quiet` says every write issued so far has been answered: what
a completion waits for. A job started with `report` marks its last burst; `reported`
pulses when that burst's response comes back (the completion line's answer, after which
HEAD may move). `write_error` pulses for an error response (SLVERR or DECERR) to any other
burst, `reported_error` for one to the marked burst.
"""
from amaranth import Cat, Module, Signal, Mux
from amaranth.hdl import Assert
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from isa.microarch import WRITES_IN_FLIGHT
from isa.axi import BURST_INCR

from . import fifo
from .axi import device_bus, burst_length, RUN_LINES_BITS
from .stream import line_stream


def job_layout(cfg):
    """A job: `lines` lines from `src` to `addr` (`from_stream`), or the one line `line`
    with strobes `strb`; `report`: its last burst is marked."""
    return data.StructLayout({"addr": 64, "from_stream": 1, "lines": RUN_LINES_BITS, "line": cfg.data_bits,
                              "strb": cfg.port_bytes, "report": 1})


class DramWriter(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({
            "bus": Out(device_bus(cfg)),
            # a job, taken while `idle`
            "job": In(stream.Signature(job_layout(cfg), always_ready=True)),
            "idle": Out(1), "quiet": Out(1), "reported": Out(1),
            "write_error": Out(1), "reported_error": Out(1),
            "src": In(line_stream(cfg.beat_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        job = self.job.payload
        cfg, bus = self._cfg, self.bus
        channels = cfg.dram_channels
        line_log2 = (cfg.port_bytes - 1).bit_length()
        addr, left = Signal(64, name="addr"), Signal(RUN_LINES_BITS, name="left")
        from_stream, line, strb, report = Signal(), Signal(cfg.data_bits), Signal(cfg.port_bytes), Signal()
        burst, beats = burst_length(m, addr, left, cfg)
        in_burst = Signal(range(cfg.max_burst_beats + 1))

        # one line: in every slot of the beat, its strobes only in the slot of its address
        slot = Signal(max(1, (channels - 1).bit_length()))
        line_strb = Cat(*(Mux(slot == j, strb, 0) if channels > 1 else strb for j in range(channels)))
        m.d.comb += [bus.awsize.eq(line_log2), bus.awburst.eq(BURST_INCR), bus.awcache.eq(0b0011),
                     bus.awaddr.eq(addr), bus.awlen.eq(beats - 1),
                     bus.wdata.eq(Mux(from_stream, self.src.payload.data, line.replicate(channels))),
                     bus.wstrb.eq(Mux(from_stream, self.src.payload.strb, line_strb))]
        if channels > 1:
            m.d.comb += bus.awlines.eq(burst)

        # per burst issued and not yet answered: whether it ends a reporting job; per
        # burst issued and not yet written: its beats
        m.submodules.tags = tags = fifo.SyncFIFO(width=1, depth=WRITES_IN_FLIGHT)
        m.submodules.counts = counts = fifo.SyncFIFO(width=len(beats), depth=WRITES_IN_FLIGHT)
        issued = bus.awvalid & bus.awready
        answered = bus.bvalid & bus.bready
        m.d.comb += [bus.bready.eq(tags.r_rdy), tags.r_en.eq(answered),
                     self.reported.eq(answered & tags.r_data),
                     self.write_error.eq(answered & bus.bresp[1] & ~tags.r_data),
                     self.reported_error.eq(answered & bus.bresp[1] & tags.r_data),
                     tags.w_en.eq(issued), tags.w_data.eq(report & (left == burst)),
                     counts.w_en.eq(issued), counts.w_data.eq(beats)]

        # the address side: the job's bursts, each as soon as it may go
        with m.If(issued):
            m.d.sync += [addr.eq(addr + (burst << line_log2)), left.eq(left - burst)]
        # the data side: the beats of the bursts issued, in order, back to back; a burst's
        # count comes from the FIFO with its first beat
        sending = Signal()
        beats_left = Signal.like(in_burst)
        m.d.comb += beats_left.eq(Mux(sending, in_burst, counts.r_data))
        valid = Mux(from_stream, self.src.valid, 1)
        present = sending | counts.r_rdy
        beat = present & valid & bus.wready
        m.d.comb += [bus.wvalid.eq(present & valid), bus.wlast.eq(beats_left == 1),
                     self.src.ready.eq(present & from_stream & bus.wready),
                     counts.r_en.eq(~sending & beat)]
        with m.If(beat):
            m.d.sync += [in_burst.eq(beats_left - 1), sending.eq(beats_left != 1)]
        # this beat is the job's last: every burst issued, none left to send after it
        last_beat = Signal()
        m.d.comb += last_beat.eq((left == 0) & beat & (beats_left == 1)
                                 & Mux(sending, ~counts.r_rdy, counts.level == 1))
        # `job` is never held back: the control unit starts one only while the writer is idle
        m.d.sync += Assert(~self.job.valid | self.idle, "writer: a job while busy")
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += [self.idle.eq(1), self.quiet.eq(~tags.r_rdy)]
                with m.If(self.job.valid):
                    m.d.sync += [addr.eq(job.addr), from_stream.eq(job.from_stream),
                                 left.eq(Mux(job.from_stream, job.lines, 1)),
                                 line.eq(job.line), strb.eq(job.strb), report.eq(job.report)]
                    if channels > 1:
                        m.d.sync += slot.eq(job.addr[line_log2:line_log2 + len(slot)])
                    with m.If(~job.from_stream | (job.lines != 0)):
                        m.next = "BUSY"
            with m.State("BUSY"):
                m.d.comb += bus.awvalid.eq((left != 0) & tags.w_rdy & counts.w_rdy)
                # done once every burst is issued and its beats are out
                with m.If(last_beat):
                    m.next = "IDLE"
        return m
