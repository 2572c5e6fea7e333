"""The DRAM arbiter: several AXI4 managers share the one `dram` port.

Reads and writes are arbitrated independently, round-robin, one transaction per
direction at a time, so responses route back by the grant alone (IDs pass through).
"""
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi import AXI4Signature, device_bus


class DramArbiter(wiring.Component):
    def __init__(self, cfg, n):
        self._n = n
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
        r_grant, r_last = Signal(range(n)), Signal(range(n))
        pick, any_ = self._pick(m, [p.arvalid for p in ports], r_last, "ar")
        with m.FSM(name="read"):
            with m.State("IDLE"):
                with m.If(any_):
                    m.d.sync += [r_grant.eq(pick), r_last.eq(pick)]
                    m.next = "ADDR"
            with m.State("ADDR"):
                self._route_request(m, r_grant, AXI4Signature.AR, "arvalid", "arready")
                with m.If(dram.arready):
                    m.next = "DATA"
            with m.State("DATA"):
                self._route_response(m, r_grant, AXI4Signature.R, "rvalid", "rready")
                with m.If(dram.rvalid & dram.rlast & dram.rready):
                    m.next = "IDLE"

        # ---- writes
        w_grant, w_last = Signal(range(n)), Signal(range(n))
        pick, any_ = self._pick(m, [p.awvalid for p in ports], w_last, "aw")
        with m.FSM(name="write"):
            with m.State("IDLE"):
                with m.If(any_):
                    m.d.sync += [w_grant.eq(pick), w_last.eq(pick)]
                    m.next = "ADDR"
            with m.State("ADDR"):
                self._route_request(m, w_grant, AXI4Signature.AW, "awvalid", "awready")
                with m.If(dram.awready):
                    m.next = "DATA"
            with m.State("DATA"):
                self._route_request(m, w_grant, AXI4Signature.W, "wvalid", "wready")
                with m.If(dram.wvalid & dram.wready & dram.wlast):
                    m.next = "RESPONSE"
            with m.State("RESPONSE"):
                self._route_response(m, w_grant, AXI4Signature.B, "bvalid", "bready")
                with m.If(dram.bvalid & dram.bready):
                    m.next = "IDLE"
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
