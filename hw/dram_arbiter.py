"""The DRAM arbiter: several AXI4 managers share the device's one internal memory bus.

Reads and writes are arbitrated independently, round-robin, one burst per grant; the
responses find their way back through a FIFO of the granted port per burst, which works
because the memory behind the bus returns every burst's responses in the order of the
address handshakes (one ID: the DRAM, or the channel interleaver, answers in order).
So no port waits for another's bursts to drain before it is granted.

Reads: a grant is decided in one cycle and the granted port's AR is presented from the
next (one AR per two cycles at most). R beats go to the port at the FIFO's head, which
is popped with the burst's last beat.

Writes: a granted port sends its AW, then its burst's W beats (the W channel follows the
AW order); while no other port asks, the owner's next AW goes right after its last W
beat. B responses go to the port at the head of the write FIFO.
"""
from amaranth import Cat, Module, Signal
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

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
            self._route_request(m, owner, AXI4Signature.AR, "arvalid", "arready")
            with m.If(dram.arready):
                m.d.sync += addr_phase.eq(0)
        m.d.comb += [read_tags.w_data.eq(owner), read_tags.w_en.eq(dram.arvalid & dram.arready),
                     read_tags.r_en.eq(dram.rvalid & dram.rready & dram.rlast)]
        self._route_response(m, read_tags.r_data, AXI4Signature.R, "rvalid", "rready")

        # ---- writes
        m.submodules.write_tags = write_tags = fifo.SyncFIFO(width=tag_bits, depth=cfg.bus_writes_in_flight)
        w_grant = Signal(range(n))
        w_requests = [p.awvalid for p in ports]
        pick, any_ = self._pick(m, w_requests, w_grant, "aw")
        owner_aw, others_aw = Signal(), Signal()
        with m.Switch(w_grant):
            for i in range(n):
                with m.Case(i):
                    m.d.comb += [owner_aw.eq(w_requests[i]),
                                 others_aw.eq(Cat(*(r for j, r in enumerate(w_requests) if j != i)).any())]
        m.d.comb += [write_tags.w_data.eq(w_grant), write_tags.w_en.eq(dram.awvalid & dram.awready),
                     write_tags.r_en.eq(dram.bvalid & dram.bready)]
        self._route_response(m, write_tags.r_data, AXI4Signature.B, "bvalid", "bready")
        granted = Signal()                          # the grant's first burst is still to go
        with m.FSM(name="write"):
            with m.State("IDLE"):
                with m.If(any_ & write_tags.w_rdy):
                    m.d.sync += [w_grant.eq(pick), granted.eq(1)]
                    m.next = "ADDR"
            with m.State("ADDR"):
                # the grant's first burst; then the owner's next ones while no other port asks
                with m.If(owner_aw & (granted | (~others_aw & write_tags.w_rdy))):
                    self._route_request(m, w_grant, AXI4Signature.AW, "awvalid", "awready")
                    with m.If(dram.awready):
                        m.d.sync += granted.eq(0)
                        m.next = "DATA"
                with m.Elif(~owner_aw | others_aw):
                    m.next = "IDLE"
            with m.State("DATA"):
                self._route_request(m, w_grant, AXI4Signature.W, "wvalid", "wready")
                with m.If(dram.wvalid & dram.wready & dram.wlast):
                    m.next = "ADDR"
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
