"""The DRAM arbiter: several AXI4 managers share the one `dram` port.

Reads and writes are arbitrated independently, round-robin. Writes: the port that owns the
write channel may post bursts (the next address while earlier ones await their
response) while no other port asks; the channel changes hands only once every response
is back, so B responses route back by the grant. Reads: the port that owns the read
channel may keep up to `dram_max_reads` bursts in flight (the DRAM returns one ID's bursts
in order, and every port uses one ID); it keeps the channel while no other port asks,
otherwise its bursts drain and the next port in round-robin order gets it. R beats route
to the owner.
"""
from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi import AXI4Signature, device_bus
from .dram_writer import WRITES_IN_FLIGHT


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
        ports, dram, n = self.ports, self.dram, self._n

        # ---- reads
        owner, in_flight = Signal(range(n)), Signal(range(self._cfg.dram_max_reads + 1))
        addr_phase = Signal()               # the owner's AR is presented to the DRAM
        requests = [p.arvalid for p in ports]
        others = Signal()                   # a port other than the owner asks
        with m.Switch(owner):
            for i in range(n):
                with m.Case(i):
                    m.d.comb += others.eq(Cat(*(r for j, r in enumerate(requests) if j != i)).any())
        owner_request = Signal()
        with m.Switch(owner):
            for i in range(n):
                with m.Case(i):
                    m.d.comb += owner_request.eq(requests[i])
        pick, any_ = self._pick(m, requests, owner, "ar")
        beat_done = dram.rvalid & dram.rready & dram.rlast
        issued = dram.arvalid & dram.arready
        m.d.sync += in_flight.eq(in_flight + issued - beat_done)
        with m.If(~addr_phase):
            with m.If(in_flight == 0):
                # the channel is free: the next requester in round-robin order takes it
                with m.If(any_):
                    m.d.sync += [owner.eq(pick), addr_phase.eq(1)]
            with m.Elif(owner_request & ~others & (in_flight < self._cfg.dram_max_reads)):
                m.d.sync += addr_phase.eq(1)
        with m.Else():
            self._route_request(m, owner, AXI4Signature.AR, "arvalid", "arready")
            with m.If(dram.arready):
                m.d.sync += addr_phase.eq(0)
        self._route_response(m, owner, AXI4Signature.R, "rvalid", "rready")

        # ---- writes
        w_grant, w_last = Signal(range(n)), Signal(range(n))
        w_requests = [p.awvalid for p in ports]
        pick, any_ = self._pick(m, w_requests, w_last, "aw")
        w_in_flight = Signal(range(WRITES_IN_FLIGHT + 1))   # the owner's bursts awaiting their response
        answered = dram.bvalid & dram.bready
        m.d.sync += w_in_flight.eq(w_in_flight + (dram.awvalid & dram.awready) - answered)
        owner_aw, others_aw = Signal(), Signal()
        with m.Switch(w_grant):
            for i in range(n):
                with m.Case(i):
                    m.d.comb += [owner_aw.eq(w_requests[i]),
                                 others_aw.eq(Cat(*(r for j, r in enumerate(w_requests) if j != i)).any())]
        self._route_response(m, w_grant, AXI4Signature.B, "bvalid", "bready")
        granted = Signal()                          # the grant's first burst is still to go
        with m.FSM(name="write"):
            with m.State("IDLE"):
                with m.If(any_):
                    m.d.sync += [w_grant.eq(pick), w_last.eq(pick), granted.eq(1)]
                    m.next = "ADDR"
            with m.State("ADDR"):
                # the grant's first burst; then the owner's next ones while no other port
                # waits (else the owner's responses drain and the channel goes round)
                with m.If(owner_aw & (granted | ~others_aw)):
                    self._route_request(m, w_grant, AXI4Signature.AW, "awvalid", "awready")
                    with m.If(dram.awready):
                        m.d.sync += granted.eq(0)
                        m.next = "DATA"
                with m.Elif((w_in_flight == 0) | ((w_in_flight == 1) & answered)):
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
