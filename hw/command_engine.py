"""The command engine: doorbell -> valid word -> instruction buffer.

For each enabled queue whose rung tail is ahead of its next expected sequence number,
it reads the expected slot's first line (descriptor word + valid word, one 64-byte
beat, so both come from one read). It takes the descriptor only when the valid word
equals the expected sequence number; otherwise the queue backs off for BACKOFF cycles
and the word is read again later. Stale slot content is never taken. Queues are
served round-robin, one fetch at a time.
"""
from amaranth import Module, Signal
from amaranth.lib import wiring, data, stream
from amaranth.lib.wiring import In, Out

from isa.microarch import VALID_WORD_BACKOFF as BACKOFF
from isa.slots import SQ_VALID
from isa.axi import BURST_INCR

from .axi import device_bus
from .decoder import DescriptorLayout
from .queue_geometry import config_ok, slot_addr, slot_index
from .regfile import QueueRegs


def ibuf_entry(cfg):
    return data.StructLayout({
        "desc": DescriptorLayout, "queue": range(cfg.num_queues), "seq": 64,
        "taken": 64,        # cycle the descriptor was taken: start of its `cycles`
    })


class CommandEngine(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({
            "bus": Out(device_bus(cfg)),
            "queues": In(QueueRegs).array(cfg.num_queues),
            "reset": In(1).array(cfg.num_queues),
            "cycle": In(64),
            "push": Out(stream.Signature(ibuf_entry(cfg))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, bus, nq = self._cfg, self.bus, self._cfg.num_queues
        next_seq = [Signal(64, init=1, name=f"next_seq{q}") for q in range(nq)]
        backoff = [Signal(range(BACKOFF + 1), name=f"backoff{q}") for q in range(nq)]
        eligible = Signal(nq)
        for q, regs in enumerate(self.queues):
            ahead = Signal(32, name=f"ahead{q}")       # rung tail minus the last taken (mod 2^32)
            m.d.comb += ahead.eq(regs.tail - (next_seq[q][:32] - 1))
            m.d.comb += eligible[q].eq(regs.enable & config_ok(regs) & (ahead != 0) & ~ahead[31]
                                       & (backoff[q] == 0))
            with m.If(backoff[q] != 0):
                m.d.sync += backoff[q].eq(backoff[q] - 1)

        sel, last = Signal(range(nq)), Signal(range(nq))
        sel_seq = Signal(64)
        # the slot's index in its ring and its queue's ring base and slot size, registered
        # with sel_seq (for 1 GHz: the address, a shift and an add from them, goes on
        # through the arbiter into the channels' queues)
        sel_index, sel_base, sel_log2_slot = Signal(16), Signal(64), Signal(6)
        dropped = Signal()            # the selected queue was reset while its slot was read
        # the slot's first line, in the slot of the beat its address names
        slot_bits = (cfg.dram_channels - 1).bit_length()
        line_log2 = (cfg.port_bytes - 1).bit_length()
        line = bus.rdata.word_select(bus.araddr[line_log2:line_log2 + slot_bits], cfg.data_bits) if slot_bits \
            else bus.rdata
        line_valid = line[SQ_VALID * 8:SQ_VALID * 8 + 64]

        m.d.comb += [bus.arlen.eq(0), bus.arsize.eq(line_log2),
                     bus.arburst.eq(BURST_INCR), bus.arcache.eq(0b0011)]
        if slot_bits:
            m.d.comb += bus.arlines.eq(1)
        m.d.comb += bus.araddr.eq(slot_addr(sel_base, sel_index, sel_log2_slot))
        with m.Switch(sel):
            for q in range(nq):
                with m.Case(q):
                    with m.If(self.reset[q]):
                        m.d.sync += dropped.eq(1)
        for q in range(nq):
            with m.If(self.reset[q]):
                m.d.sync += [next_seq[q].eq(1), backoff[q].eq(0)]

        with m.FSM():
            with m.State("IDLE"):
                # round-robin pick among eligible queues, starting after the last served
                with m.If(eligible.any()):
                    for k in reversed(range(1, nq + 1)):
                        q = Signal(range(nq), name=f"cand{k}")
                        m.d.comb += q.eq((last + k) % nq if nq > 1 else 0)
                        with m.If(eligible.bit_select(q, 1)):
                            m.d.sync += [sel.eq(q), last.eq(q)]
                    m.d.sync += dropped.eq(0)
                    m.next = "LATCH"
            with m.State("LATCH"):
                with m.Switch(sel):
                    for q in range(nq):
                        with m.Case(q):
                            regs = self.queues[q]
                            m.d.sync += [sel_seq.eq(next_seq[q]), sel_index.eq(slot_index(next_seq[q], regs)),
                                         sel_base.eq(regs.sq_base), sel_log2_slot.eq(regs.log2_slot[:6])]
                m.next = "ADDR"
            with m.State("ADDR"):
                m.d.comb += bus.arvalid.eq(1)
                with m.If(bus.arready):
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += bus.rready.eq(1)
                with m.If(bus.rvalid):
                    hit = (line_valid == sel_seq) & (bus.rresp == 0) & ~dropped
                    with m.If(hit):
                        entry = self.push.payload
                        m.d.sync += [entry.desc.eq(line[:len(entry.desc.as_value())]),
                                     entry.queue.eq(sel), entry.seq.eq(sel_seq),
                                     entry.taken.eq(self.cycle)]
                        m.next = "PUSH"
                    with m.Else():
                        with m.Switch(sel):
                            for q in range(nq):
                                with m.Case(q):
                                    m.d.sync += backoff[q].eq(BACKOFF)
                        m.next = "IDLE"
            with m.State("PUSH"):
                m.d.comb += self.push.valid.eq(~dropped)
                with m.If(dropped):
                    m.next = "IDLE"
                with m.Elif(self.push.ready):
                    with m.Switch(sel):
                        for q in range(nq):
                            with m.Case(q):
                                with m.If(~dropped & ~self.reset[q]):
                                    m.d.sync += next_seq[q].eq(next_seq[q] + 1)
                    m.next = "IDLE"
        return m
