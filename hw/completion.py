"""The completion: a descriptor's completion line, then its report (HEAD, STATUS, irq).

The control unit hands a finished descriptor over on `complete` (while `pending` is
low: one waits at a time). Its line goes to the writer once every write before it has
been answered (`quiet`) and no deferred result run of its own is still to start (`hold`):
sequence number, status, zero, cycles since the descriptor was taken, zeros
(isa/slots.py). Every write before the line is answered then, so the descriptor's DRAM
errors are known: an error response to one of its reads (`read_error`, which the control
unit collects from the beats it took) or to a write since the last line (`write_error`
pulses from the writer) turns an OK into DRAM_ERROR. The line's answer (`reported`) is the
report: a FIFO of REPORTS_IN_FLIGHT keeps what it needs (queue, sequence, status, whether
a STORE ran, which the front end's hazard rule waits for); a completion line the DRAM
refused (`reported_error`) reports DRAM_ERROR, so STATUS says so, and HEAD still moves.
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from isa import Status
from isa.microarch import REPORTS_IN_FLIGHT
from isa.slots import CQ_CYCLES, CQ_SEQ, CQ_STATUS

from . import fifo


def report_layout(cfg):
    """A descriptor's report: its queue, sequence number (mod 2^32), status, and whether a
    STORE ran (for the front end's hazard rule; the register file ignores it)."""
    return data.StructLayout({"queue": range(cfg.num_queues), "seq": 32, "status": 8, "store": 1})


def handover_layout(cfg):
    """A finished descriptor handed over: its queue, sequence number, the cycle it was
    taken, its status, the error of a beat it read, its completion slot, a STORE that ran."""
    return data.StructLayout({"queue": range(cfg.num_queues), "seq": 64, "taken": 64, "status": 8,
                              "read_error": 1, "slot": 64, "store": 1})


class Completion(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        nq = cfg.num_queues
        super().__init__({
            # a finished descriptor, handed over while `pending` is low
            "complete": In(stream.Signature(handover_layout(cfg), always_ready=True)),
            "pending": Out(1), "cycle": In(64), "hold": In(1),
            # the writer: its state, and the completion line's write (with `report`)
            "quiet": In(1), "write_error": In(1), "reported": In(1), "reported_error": In(1),
            "line_start": Out(1), "line_addr": Out(64), "line": Out(cfg.data_bits),
            # the report, and each queue's interrupt enable
            "irq_en": In(nq),
            "done": Out(stream.Signature(report_layout(cfg), always_ready=True)), "irq": Out(nq),
        })

    def elaborate(self, platform):
        m = Module()
        pending, held = self.pending, Signal(handover_layout(self._cfg))
        queue, seq, taken, status = held.queue, held.seq, held.taken, held.status
        read_error, slot, store = held.read_error, held.slot, held.store
        with m.If(self.complete.valid):
            m.d.sync += [pending.eq(1), held.eq(self.complete.payload)]
        # DRAM errors of the writes since the last completion line
        write_error = Signal()
        with m.If(self.write_error):
            m.d.sync += write_error.eq(1)

        layout = report_layout(self._cfg)
        m.submodules.reports = reports = fifo.SyncFIFO(width=layout.size, depth=REPORTS_IN_FLIGHT)
        written, report = Signal(layout), data.View(layout, reports.r_data)
        with m.If(pending & self.quiet & ~self.hold & reports.w_rdy):
            cycles = (self.cycle - taken)[:64]
            assert (CQ_SEQ, CQ_STATUS, CQ_CYCLES) == (0, 8, 16)
            status_word = Signal(32)
            m.d.comb += [status_word.eq(Mux((status == Status.OK) & (read_error | write_error), Status.DRAM_ERROR,
                                            status)),
                         self.line_start.eq(1), self.line_addr.eq(slot),
                         self.line.eq(Cat(seq, status_word, Const(0, 32), cycles)),
                         written.queue.eq(queue), written.seq.eq(seq), written.status.eq(status_word),
                         written.store.eq(store), reports.w_en.eq(1), reports.w_data.eq(written)]
            m.d.sync += [write_error.eq(0), pending.eq(0)]

        irq_en = Signal()
        m.d.comb += irq_en.eq(self.irq_en.bit_select(report.queue, 1))
        done = self.done.payload
        m.d.comb += [reports.r_en.eq(self.reported),
                     self.done.valid.eq(self.reported), done.queue.eq(report.queue), done.seq.eq(report.seq),
                     done.status.eq(Mux(self.reported_error, Status.DRAM_ERROR, report.status)),
                     done.store.eq(report.store),
                     self.irq.eq(Mux(self.reported & irq_en, 1 << report.queue, 0))]
        return m
