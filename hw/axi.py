"""AXI4 and AXI4-Lite bus signatures, seen from the manager.

Member names are the AXI signal names, so Amaranth's `prefix__member` port names are
what `cocotbext.axi.AxiBus.from_prefix(dut, "prefix_")` looks for.
"""
from amaranth import Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out



class AXI4Signature(wiring.Signature):
    """AXI4, seen from the manager. With `lines_width`, the device's internal bus: a beat
    holds one line of every channel, and `arlines`/`awlines` count the lines a burst
    holds from the line its address names (its first and last beats may hold fewer)."""
    def __init__(self, *, addr_width, data_width, id_width, user_width=0, lines_width=0):
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
        if lines_width:
            members["arlines"] = Out(lines_width)
            members["awlines"] = Out(lines_width)
        self.lines_width = lines_width
        super().__init__(members)

    @property
    def ar_names(self):
        """The AR payload signals, the line count of the internal bus included."""
        return self.AR + (("arlines",) if self.lines_width else ())

    @property
    def aw_names(self):
        return self.AW + (("awlines",) if self.lines_width else ())

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


RUN_LINES_BITS = 32         # lines of one reader or writer run


def lines_width(cfg):
    """Width of the internal bus's line counts: 0 (none) with one channel."""
    return 0 if cfg.dram_channels == 1 else (cfg.max_burst_beats * cfg.dram_channels).bit_length()


def device_bus(cfg):
    """The device's internal memory bus, between its blocks, the arbiter and the channel
    interleaver (hw/dram_interleaver.py); with one channel, the dram port itself."""
    return AXI4Signature(addr_width=cfg.addr_bits, data_width=cfg.beat_bits, id_width=cfg.id_bits,
                         lines_width=lines_width(cfg))


def port_bus(cfg):
    """A port of the spec: the mem port's downstream side and each DRAM channel (AXI4, 512 bits)."""
    return AXI4Signature(addr_width=cfg.addr_bits, data_width=cfg.data_bits, id_width=cfg.id_bits)


def burst_length(m, addr, left, cfg):
    """The next burst of a run of `left` lines from the line at `addr`: (lines, beats).
    It ends at the next burst boundary (cfg.burst_boundary), after at most
    `cfg.max_burst_beats` beats of the data path, or with the run (sim/dram_reader.py's
    burst_lengths). A beat holds a line of every channel, so a burst that starts or ends
    inside a beat holds fewer lines than its beats could."""
    channels = cfg.dram_channels
    line_log2, chan_log2 = (cfg.port_bytes - 1).bit_length(), (channels - 1).bit_length()
    boundary_log2 = (cfg.burst_boundary - 1).bit_length()
    boundary_lines = cfg.burst_boundary // cfg.port_bytes
    most = cfg.max_burst_beats * channels
    pos = addr[line_log2:line_log2 + chan_log2] if channels > 1 else 0      # the line's slot in its beat
    to_boundary = Signal(range(boundary_lines + 1), name="to_boundary")
    limit = Signal(range(most + 1), name="limit")
    lines = Signal(range(most + 1), name="burst_lines")
    beats = Signal(range(cfg.max_burst_beats + 1), name="burst_beats")
    m.d.comb += [to_boundary.eq(boundary_lines - addr[line_log2:boundary_log2]),
                 limit.eq(Mux(to_boundary < most - pos, to_boundary, most - pos)),
                 lines.eq(Mux(left < limit, left, limit)),
                 beats.eq((pos + lines + channels - 1) >> chan_log2)]
    return lines, beats
