"""AXI4 and AXI4-Lite bus signatures, seen from the manager.

Member names are the AXI signal names, so Amaranth's `prefix__member` port names are
what `cocotbext.axi.AxiBus.from_prefix(dut, "prefix_")` looks for.
"""
from amaranth import Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

RESP_OKAY = 0
RESP_SLVERR = 2
BURST_FIXED, BURST_INCR, BURST_WRAP = 0, 1, 2


class AXI4Signature(wiring.Signature):
    def __init__(self, *, addr_width, data_width, id_width, user_width=0):
        if data_width % 8 or data_width < 8:
            raise ValueError(f"data_width must be a multiple of 8, got {data_width!r}")
        self.addr_width, self.data_width = addr_width, data_width
        self.id_width, self.user_width = id_width, user_width
        members = {
            "awid": Out(id_width), "awaddr": Out(addr_width), "awlen": Out(8), "awsize": Out(3),
            "awburst": Out(2), "awlock": Out(1), "awcache": Out(4), "awprot": Out(3),
            "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
            "wvalid": Out(1), "wready": In(1),
            "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "arid": Out(id_width), "araddr": Out(addr_width), "arlen": Out(8), "arsize": Out(3),
            "arburst": Out(2), "arlock": Out(1), "arcache": Out(4), "arprot": Out(3),
            "arvalid": Out(1), "arready": In(1),
            "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
            "rvalid": In(1), "rready": Out(1),
        }
        if user_width:
            members["awuser"] = Out(user_width)
            members["aruser"] = Out(user_width)
        super().__init__(members)

    AW = ("awid", "awaddr", "awlen", "awsize", "awburst", "awlock", "awcache", "awprot")
    AR = ("arid", "araddr", "arlen", "arsize", "arburst", "arlock", "arcache", "arprot")
    W = ("wdata", "wstrb", "wlast")
    B = ("bid", "bresp")
    R = ("rid", "rdata", "rresp", "rlast")


class AXI4LiteSignature(wiring.Signature):
    def __init__(self, *, addr_width, data_width=32, user_width=0):
        members = {
            "awaddr": Out(addr_width), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1), "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
            "rdata": In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        }
        if user_width:
            members["awuser"] = Out(user_width)
            members["aruser"] = Out(user_width)
        super().__init__(members)


def device_bus(cfg):
    """The AXI4 manager signature of the device's own DRAM traffic and of the dram port."""
    return AXI4Signature(addr_width=cfg.addr_bits, data_width=cfg.data_bits, id_width=cfg.id_bits)


def burst_length(m, addr, left, cfg):
    """The next INCR burst of a run at `addr` with `left` beats to go: up to the next 4 KiB
    boundary and at most `cfg.max_burst_beats` (sim/dram_reader.py's burst_lengths)."""
    beat_log2 = (cfg.beat_bytes - 1).bit_length()
    page_beats = 4096 // cfg.beat_bytes
    to_boundary = Signal(range(page_beats + 1), name="to_boundary")
    limit = Signal(range(cfg.max_burst_beats + 1), name="limit")
    burst = Signal(range(cfg.max_burst_beats + 1), name="burst")
    m.d.comb += [to_boundary.eq(page_beats - addr[beat_log2:12]),
                 limit.eq(Mux(to_boundary < cfg.max_burst_beats, to_boundary, cfg.max_burst_beats)),
                 burst.eq(Mux(left < limit, left, limit))]
    return burst
