"""The CXL.mem front end: the GPU's loads and stores into HDM.

Accesses pass through to the DRAM arbiter, one read and one write at a time. An access
that touches the SQ or CQ ring of an enabled queue from a PASID other than that queue's
is answered here with SLVERR (reads return zeros) and never reaches DRAM.

The check takes two cycles after the address is taken, for 1 GHz: CHECK registers the
access's byte range (its start, a WRAP burst's aligned down, and end), FILTER compares it
with every ring's range (each ring's end registered from the queue's registers, which
the driver writes long before an access that could touch the ring) and decides.
"""
from amaranth import Module, Signal, Mux, Const
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from isa.axi import BURST_WRAP, RESP_SLVERR

from .axi import AXI4Signature, port_bus
from .regfile import QueueRegs
from .queue_geometry import ring_end


def mem_signature(cfg):
    return AXI4Signature(addr_width=cfg.addr_bits, data_width=cfg.data_bits,
                         id_width=cfg.id_bits, user_width=cfg.user_bits)


class MemFrontend(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({
            "mem": In(mem_signature(cfg)),
            "down": Out(port_bus(cfg)),
            "queues": In(QueueRegs).array(cfg.num_queues),
        })

    def _refused(self, m, ring_ends, addr, length, size, burst, pasid, name):
        """Whether an access of this shape from `pasid` touches another PASID's rings: its
        range registered (in CHECK), the verdict from the registered range (in FILTER)."""
        total = Signal(65)
        m.d.comb += total.eq((length + 1) << size)
        start, end = Signal(65, name=f"{name}_start"), Signal(66, name=f"{name}_end")
        # a WRAP burst stays inside the window of its total size aligned down
        first = Mux(burst == BURST_WRAP, addr & ~(total - 1)[:64], addr)
        m.d.sync += [start.eq(first), end.eq(first + total)]
        hits = []
        for regs, ends in zip(self.queues, ring_ends, strict=True):
            for base, base_end in zip((regs.sq_base, regs.cq_base), ends, strict=True):
                hits.append(regs.enable & (pasid != regs.pasid) & (start < base_end) & (base < end))
        refused = Signal(name=f"{name}_refused")
        m.d.comb += refused.eq(Const(0) if not hits else _any(hits))
        return refused

    def elaborate(self, platform):
        m = Module()
        mem, down = self.mem, self.down
        cfg = self._cfg

        # each ring's end, registered
        ring_ends = []
        for q, regs in enumerate(self.queues):
            ends = (Signal(65, name=f"sq_end{q}"), Signal(65, name=f"cq_end{q}"))
            m.d.sync += [ends[0].eq(ring_end(regs.sq_base, regs)), ends[1].eq(ring_end(regs.cq_base, regs))]
            ring_ends.append(ends)

        # ---- read path
        ar = {name: Signal.like(getattr(mem, name), name=f"hold_{name}") for name in AXI4Signature.AR}
        ar_user = Signal(cfg.user_bits)
        r_left = Signal(8)
        refused_r = self._refused(m, ring_ends, ar["araddr"], ar["arlen"], ar["arsize"], ar["arburst"], ar_user,
                                  "read")
        with m.FSM(name="read"):
            with m.State("IDLE"):
                m.d.comb += mem.arready.eq(1)
                with m.If(mem.arvalid):
                    m.d.sync += [sig.eq(getattr(mem, name)) for name, sig in ar.items()]
                    m.d.sync += ar_user.eq(mem.aruser)
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += r_left.eq(ar["arlen"])
                m.next = "FILTER"
            with m.State("FILTER"):
                with m.If(refused_r):
                    m.next = "REFUSE"
                with m.Else():
                    m.next = "FORWARD"
            with m.State("FORWARD"):
                m.d.comb += [getattr(down, name).eq(sig) for name, sig in ar.items()]
                m.d.comb += down.arvalid.eq(1)
                with m.If(down.arready):
                    m.next = "RETURN"
            with m.State("RETURN"):
                m.d.comb += [mem.rid.eq(down.rid), mem.rdata.eq(down.rdata), mem.rresp.eq(down.rresp),
                             mem.rlast.eq(down.rlast), mem.rvalid.eq(down.rvalid),
                             down.rready.eq(mem.rready)]
                with m.If(down.rvalid & mem.rready & down.rlast):
                    m.next = "IDLE"
            with m.State("REFUSE"):
                m.d.comb += [mem.rid.eq(ar["arid"]), mem.rdata.eq(0), mem.rresp.eq(RESP_SLVERR),
                             mem.rlast.eq(r_left == 0), mem.rvalid.eq(1)]
                with m.If(mem.rready):
                    m.d.sync += r_left.eq(r_left - 1)
                    with m.If(r_left == 0):
                        m.next = "IDLE"

        # ---- write path
        aw = {name: Signal.like(getattr(mem, name), name=f"hold_{name}") for name in AXI4Signature.AW}
        aw_user = Signal(cfg.user_bits)
        refused_w = self._refused(m, ring_ends, aw["awaddr"], aw["awlen"], aw["awsize"], aw["awburst"], aw_user,
                                  "write")
        with m.FSM(name="write"):
            with m.State("IDLE"):
                m.d.comb += mem.awready.eq(1)
                with m.If(mem.awvalid):
                    m.d.sync += [sig.eq(getattr(mem, name)) for name, sig in aw.items()]
                    m.d.sync += aw_user.eq(mem.awuser)
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.next = "FILTER"
            with m.State("FILTER"):
                with m.If(refused_w):
                    m.next = "DISCARD"
                with m.Else():
                    m.next = "FORWARD"
            with m.State("FORWARD"):
                m.d.comb += [getattr(down, name).eq(sig) for name, sig in aw.items()]
                m.d.comb += down.awvalid.eq(1)
                with m.If(down.awready):
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += [down.wdata.eq(mem.wdata), down.wstrb.eq(mem.wstrb), down.wlast.eq(mem.wlast),
                             down.wvalid.eq(mem.wvalid), mem.wready.eq(down.wready)]
                with m.If(mem.wvalid & down.wready & mem.wlast):
                    m.next = "RESPONSE"
            with m.State("RESPONSE"):
                m.d.comb += [mem.bid.eq(down.bid), mem.bresp.eq(down.bresp), mem.bvalid.eq(down.bvalid),
                             down.bready.eq(mem.bready)]
                with m.If(down.bvalid & mem.bready):
                    m.next = "IDLE"
            with m.State("DISCARD"):
                # take the data beats and drop them
                m.d.comb += mem.wready.eq(1)
                with m.If(mem.wvalid & mem.wlast):
                    m.next = "REFUSE"
            with m.State("REFUSE"):
                m.d.comb += [mem.bid.eq(aw["awid"]), mem.bresp.eq(RESP_SLVERR), mem.bvalid.eq(1)]
                with m.If(mem.bready):
                    m.next = "IDLE"
        return m


def _any(bits):
    out = bits[0]
    for b in bits[1:]:
        out = out | b
    return out
