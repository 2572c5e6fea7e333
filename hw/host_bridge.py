"""The host bridge: CXL.mem bursts (512-bit beats, after the PASID filter) onto the
device's internal bus, whose beats hold a line of every channel. Present only with
several channels; with one, the mem front end talks to the arbiter directly.

A host burst becomes internal bursts ("segments") of consecutive lines: an INCR burst of
whole 64-byte beats one segment per burst boundary it crosses (hw/axi.py burst_length);
any other burst (narrow beats, FIXED, WRAP) one segment per beat, the line holding the
beat's address, as AXI's address rules give it. A read beat takes its line out of the
internal beat; a write beat's line goes into its slot of the internal beat, with its
strobes, and the internal beat goes when the segment has no more lines in it. The host's
one response joins the segments' (the worst of them), in order. One host burst at a time
per direction, as the front end forwards them.
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.data import StructLayout
from amaranth.lib.wiring import In, Out

from isa.axi import BURST_FIXED, BURST_INCR, BURST_WRAP

from . import fifo
from .axi import burst_length, device_bus, port_bus

SEGMENTS = 256          # a host burst's segments in flight at most (one per beat)


class HostBridge(wiring.Component):
    def __init__(self, cfg):
        if cfg.dram_channels < 2:
            raise ValueError("the host bridge serves two or more channels")
        self._cfg = cfg
        super().__init__({
            "host": In(port_bus(cfg)),
            "bus": Out(device_bus(cfg)),
        })

    def _beats(self, m, addr, size, burst, length, prefix):
        """The address generator of a burst (AXI4 A3.4.1): the address of the beat after
        `addr`, and whether the burst is one segment per whole line (INCR, 64-byte beats)."""
        step = Signal(8, name=f"{prefix}_step")
        m.d.comb += step.eq(1 << size)
        total = Signal(13, name=f"{prefix}_total")             # WRAP: the window's bytes
        m.d.comb += total.eq((length + 1) << size)
        base_mask = Signal(64, name=f"{prefix}_wrap_mask")
        m.d.comb += base_mask.eq(~(total - 1))
        nxt = Signal(64, name=f"{prefix}_next")
        aligned = addr & ~(step - 1)[:64]
        with m.Switch(burst):
            with m.Case(BURST_FIXED):
                m.d.comb += nxt.eq(addr)
            with m.Case(BURST_WRAP):
                window = addr & base_mask
                m.d.comb += nxt.eq(window | ((aligned + step - window) & (total - 1)))
            with m.Default():
                m.d.comb += nxt.eq(aligned + step)
        whole = (burst == BURST_INCR) & (size == (self._cfg.port_bytes - 1).bit_length())
        return nxt, whole

    def elaborate(self, platform):
        m = Module()
        cfg, host, bus, n = self._cfg, self.host, self.bus, self._cfg.dram_channels
        line_log2, chan_log2 = (cfg.port_bytes - 1).bit_length(), (n - 1).bit_length()
        line_bits = cfg.data_bits

        def segment(m, addr, left, whole, prefix):
            """The next segment: (its line's address, lines, beats of the internal bus)."""
            line_addr = Cat(Const(0, line_log2), addr[line_log2:])
            lines, beats = burst_length(m, line_addr, left, cfg)
            seg_lines = Signal.like(lines, name=f"{prefix}_seg_lines")
            seg_beats = Signal.like(beats, name=f"{prefix}_seg_beats")
            m.d.comb += [seg_lines.eq(Mux(whole, lines, 1)), seg_beats.eq(Mux(whole, beats, 1))]
            return line_addr, seg_lines, seg_beats

        # ================================================================ reads
        ar_addr, ar_len, ar_size, ar_burst, ar_id = Signal(64), Signal(8), Signal(3), Signal(2), Signal(len(host.arid))
        ar_left = Signal(9)                    # host beats not yet in a segment
        r_left = Signal(9)                     # host beats not yet answered
        nxt, whole = self._beats(m, ar_addr, ar_size, ar_burst, ar_len, "ar")
        line_addr, seg_lines, seg_beats = segment(m, ar_addr, ar_left, whole, "ar")
        # a segment: its first line's slot in the internal beat, its lines
        seg_layout = StructLayout({"first_slot": chan_log2, "lines": len(seg_lines)})
        r_segs = fifo.SyncFIFO(width=seg_layout.size, depth=SEGMENTS)
        m.submodules.r_segs = r_segs
        r_seg_in, r_seg_out = fifo.entries(r_segs, seg_layout)
        m.d.comb += [bus.araddr.eq(line_addr), bus.arlen.eq(seg_beats - 1), bus.arlines.eq(seg_lines),
                     bus.arsize.eq(line_log2), bus.arburst.eq(BURST_INCR), bus.arcache.eq(0b0011),
                     bus.arvalid.eq((ar_left != 0) & r_segs.w_rdy), host.arready.eq((ar_left == 0) & (r_left == 0)),
                     r_segs.w_en.eq(bus.arvalid & bus.arready),
                     r_seg_in.first_slot.eq(line_addr[line_log2:line_log2 + chan_log2]), r_seg_in.lines.eq(seg_lines)]
        with m.If(host.arvalid & host.arready):
            m.d.sync += [ar_addr.eq(host.araddr), ar_len.eq(host.arlen), ar_size.eq(host.arsize),
                         ar_burst.eq(host.arburst), ar_id.eq(host.arid),
                         ar_left.eq(host.arlen + 1), r_left.eq(host.arlen + 1)]
        with m.If(bus.arvalid & bus.arready):
            m.d.sync += [ar_left.eq(ar_left - seg_lines),
                         ar_addr.eq(Mux(whole, line_addr + (seg_lines << line_log2), nxt))]
        # R: the host beats out of the internal beats, a line each
        slot, done = Signal(chan_log2), Signal(len(seg_lines))     # within the segment: next slot, lines done
        first_slot, lines = r_seg_out.first_slot, r_seg_out.lines
        here = Signal(chan_log2)
        m.d.comb += here.eq(Mux(done == 0, first_slot, slot))
        seg_end = done + 1 == lines
        m.d.comb += [host.rvalid.eq(bus.rvalid & r_segs.r_rdy), host.rdata.eq(bus.rdata.word_select(here, line_bits)),
                     host.rresp.eq(bus.rresp), host.rid.eq(ar_id), host.rlast.eq(r_left == 1)]
        beat_out = host.rvalid & host.rready
        # the internal beat goes with its last line of the segment
        m.d.comb += [bus.rready.eq(beat_out & (seg_end | (here == n - 1))), r_segs.r_en.eq(beat_out & seg_end)]
        with m.If(beat_out):
            m.d.sync += [r_left.eq(r_left - 1), slot.eq(here + 1), done.eq(Mux(seg_end, 0, done + 1))]

        # ================================================================ writes
        aw_addr, aw_len, aw_size, aw_burst, aw_id = Signal(64), Signal(8), Signal(3), Signal(2), Signal(len(host.awid))
        aw_left = Signal(9)
        w_left = Signal(9)                     # host beats not yet taken
        segs_out, b_in = Signal(9), Signal(9)  # segments issued, responses back
        b_resp, b_pending = Signal(2), Signal()
        nxt, whole = self._beats(m, aw_addr, aw_size, aw_burst, aw_len, "aw")
        line_addr, seg_lines, seg_beats = segment(m, aw_addr, aw_left, whole, "aw")
        w_segs = fifo.SyncFIFO(width=seg_layout.size, depth=SEGMENTS)
        m.submodules.w_segs = w_segs
        w_seg_in, w_seg_out = fifo.entries(w_segs, seg_layout)
        idle_w = (aw_left == 0) & (w_left == 0) & ~b_pending
        m.d.comb += [bus.awaddr.eq(line_addr), bus.awlen.eq(seg_beats - 1), bus.awlines.eq(seg_lines),
                     bus.awsize.eq(line_log2), bus.awburst.eq(BURST_INCR), bus.awcache.eq(0b0011),
                     bus.awvalid.eq((aw_left != 0) & w_segs.w_rdy), host.awready.eq(idle_w),
                     w_segs.w_en.eq(bus.awvalid & bus.awready),
                     w_seg_in.first_slot.eq(line_addr[line_log2:line_log2 + chan_log2]), w_seg_in.lines.eq(seg_lines)]
        with m.If(host.awvalid & host.awready):
            m.d.sync += [aw_addr.eq(host.awaddr), aw_len.eq(host.awlen), aw_size.eq(host.awsize),
                         aw_burst.eq(host.awburst), aw_id.eq(host.awid), aw_left.eq(host.awlen + 1),
                         w_left.eq(host.awlen + 1), segs_out.eq(0), b_in.eq(0), b_resp.eq(0), b_pending.eq(1)]
        with m.If(bus.awvalid & bus.awready):
            m.d.sync += [aw_left.eq(aw_left - seg_lines), segs_out.eq(segs_out + 1),
                         aw_addr.eq(Mux(whole, line_addr + (seg_lines << line_log2), nxt))]
        # W: host beats into their slots; the internal beat goes with the segment's last
        # line in it
        w_slot, w_done = Signal(chan_log2), Signal(len(seg_lines))
        w_first, w_lines = w_seg_out.first_slot, w_seg_out.lines
        w_here = Signal(chan_log2)
        m.d.comb += w_here.eq(Mux(w_done == 0, w_first, w_slot))
        w_seg_end = w_done + 1 == w_lines
        closes = w_seg_end | (w_here == n - 1)
        data, strb = Signal(cfg.beat_bits), Signal(cfg.beat_bytes)
        lane_data = Cat(*(Mux(w_here == j, host.wdata, data.word_select(j, line_bits)) for j in range(n)))
        lane_strb = Cat(*(Mux(w_here == j, host.wstrb, strb.word_select(j, line_bits // 8)) for j in range(n)))
        # the beat that closes an internal beat goes out with it (the bus must take it)
        m.d.comb += [bus.wdata.eq(lane_data), bus.wstrb.eq(lane_strb), bus.wlast.eq(w_seg_end),
                     bus.wvalid.eq(host.wvalid & w_segs.r_rdy & closes),
                     host.wready.eq(w_segs.r_rdy & (~closes | bus.wready))]
        taken = host.wvalid & host.wready
        with m.If(taken):
            m.d.sync += [w_left.eq(w_left - 1), w_slot.eq(w_here + 1), w_done.eq(Mux(w_seg_end, 0, w_done + 1))]
            with m.If(closes):
                m.d.sync += [data.eq(0), strb.eq(0)]
            with m.Else():
                m.d.sync += [data.eq(lane_data), strb.eq(lane_strb)]
        m.d.comb += w_segs.r_en.eq(taken & w_seg_end)
        # B: every segment's response, the worst of them, once the host's beats are all in
        m.d.comb += bus.bready.eq(1)
        with m.If(bus.bvalid):
            m.d.sync += [b_in.eq(b_in + 1), b_resp.eq(Mux(bus.bresp > b_resp, bus.bresp, b_resp))]
        all_in = (aw_left == 0) & (w_left == 0) & (b_in == segs_out)
        m.d.comb += [host.bvalid.eq(b_pending & all_in), host.bresp.eq(b_resp), host.bid.eq(aw_id)]
        with m.If(host.bvalid & host.bready):
            m.d.sync += b_pending.eq(0)
        return m
