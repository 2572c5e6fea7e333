"""The DRAM arbiter: several AXI4 managers share the device's one internal memory bus.

Reads and writes are arbitrated independently, round-robin, one burst per grant; the
responses find their way back through a FIFO of the granted port per burst, which works
because the memory behind the bus returns every burst's responses in the order of the
address handshakes (one ID: the DRAM, or the channel interleaver, answers in order).
So no port waits for another's bursts to drain before it is granted.

Reads: a grant is decided in one cycle and the granted port's AR is presented from the
next (one AR per two cycles at most). R beats go to the port at the FIFO's head, which
is popped with the burst's last beat.

Writes: AW as reads' AR (one per two cycles at most); the W channel carries the bursts'
data in the order of their AWs (a FIFO of the granted port per burst), so a port may send
its next AW while its current burst's data is still going. B responses go to the port at
the head of the write FIFO.
"""
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from . import fifo
from .axi import AXI4Signature, device_bus


class DramArbiter(wiring.Component):
    def __init__(self, cfg, n):
        self._n, self._cfg = n, cfg
        super().__init__({
            "ports": In(device_bus(cfg)).array(n),
            "dram": Out(device_bus(cfg)),
        })

    def _pick(self, m, requests, last, name):
        """Round-robin: the first requester after the last one granted."""
        n = self._n
        pick, any_ = Signal(range(n), name=f"{name}_pick"), Signal(name=f"{name}_any")
        with m.Switch(last):
            for prev in range(n):
                with m.Case(prev):
                    order = [(prev + k) % n for k in range(1, n + 1)]
                    # the last in the list wins, so list from lowest priority up
                    for i in reversed(order):
                        with m.If(requests[i]):
                            m.d.comb += [pick.eq(i), any_.eq(1)]
        return pick, any_

    def elaborate(self, platform):
        m = Module()
        ports, dram, n, cfg = self.ports, self.dram, self._n, self._cfg
        tag_bits = max(1, (n - 1).bit_length())

        # ---- reads
        m.submodules.read_tags = read_tags = fifo.SyncFIFO(width=tag_bits, depth=cfg.bus_reads_in_flight)
        owner, addr_phase = Signal(range(n)), Signal()
        pick, any_ = self._pick(m, [p.arvalid for p in ports], owner, "ar")
        with m.If(~addr_phase):
            with m.If(any_ & read_tags.w_rdy):
                m.d.sync += [owner.eq(pick), addr_phase.eq(1)]
        with m.Else():
            self._route_request(m, owner, dram.signature.ar_names, "arvalid", "arready")
            with m.If(dram.arready):
                m.d.sync += addr_phase.eq(0)
        m.d.comb += [read_tags.w_data.eq(owner), read_tags.w_en.eq(dram.arvalid & dram.arready),
                     read_tags.r_en.eq(dram.rvalid & dram.rready & dram.rlast)]
        self._route_response(m, read_tags.r_data, AXI4Signature.R, "rvalid", "rready")

        # ---- writes: AW as the reads' AR; the W channel follows the AW order
        m.submodules.write_tags = write_tags = fifo.SyncFIFO(width=tag_bits, depth=cfg.bus_writes_in_flight)
        m.submodules.write_order = write_order = fifo.SyncFIFO(width=tag_bits, depth=cfg.bus_writes_in_flight)
        aw_owner, aw_phase = Signal(range(n)), Signal()
        pick, any_ = self._pick(m, [p.awvalid for p in ports], aw_owner, "aw")
        with m.If(~aw_phase):
            with m.If(any_ & write_tags.w_rdy & write_order.w_rdy):
                m.d.sync += [aw_owner.eq(pick), aw_phase.eq(1)]
        with m.Else():
            self._route_request(m, aw_owner, dram.signature.aw_names, "awvalid", "awready")
            with m.If(dram.awready):
                m.d.sync += aw_phase.eq(0)
        issued = dram.awvalid & dram.awready
        m.d.comb += [write_tags.w_data.eq(aw_owner), write_tags.w_en.eq(issued),
                     write_order.w_data.eq(aw_owner), write_order.w_en.eq(issued),
                     write_tags.r_en.eq(dram.bvalid & dram.bready),
                     write_order.r_en.eq(dram.wvalid & dram.wready & dram.wlast)]
        with m.If(write_order.r_rdy):
            self._route_request(m, write_order.r_data, AXI4Signature.W, "wvalid", "wready")
        self._route_response(m, write_tags.r_data, AXI4Signature.B, "bvalid", "bready")
        return m

    def _route_request(self, m, grant, names, valid, ready):
        dram = self.dram
        with m.Switch(grant):
            for i, port in enumerate(self.ports):
                with m.Case(i):
                    m.d.comb += [getattr(dram, s).eq(getattr(port, s)) for s in names]
                    m.d.comb += [getattr(dram, valid).eq(getattr(port, valid)),
                                 getattr(port, ready).eq(getattr(dram, ready))]

    def _route_response(self, m, grant, names, valid, ready):
        dram = self.dram
        for port in self.ports:
            m.d.comb += [getattr(port, s).eq(getattr(dram, s)) for s in names]
        with m.Switch(grant):
            for i, port in enumerate(self.ports):
                with m.Case(i):
                    m.d.comb += [getattr(port, valid).eq(getattr(dram, valid)),
                                 getattr(dram, ready).eq(getattr(port, ready))]
