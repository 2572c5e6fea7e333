"""The DRAM channel interleaver (spec section 6): the device's internal bus onto C AXI4
channel ports of 512 bits, HDM interleaved in 256-byte granules (byte a on channel
(a >> 8) mod C). Present only with several channels; with one, the internal bus is the
`dram` port.

A beat of the internal bus holds one line of every channel's port: slot j of the beat at
line address L (a multiple of C lines) holds line L + j. A burst never crosses a stripe
(C granules, one per channel; hw/axi.py burst_length), so it holds at most one granule
of each channel: the interleaver turns it into one burst per channel it touches (at most
four lines, never crossing a granule), all queued in the cycle it takes the burst.

Line buffers. Line l of a stripe lives in bank l mod 4C = 4 * channel + (l mod 4), a small
FIFO per bank. A channel's R beats go into the banks of their lines; beat k of a burst
whose first line is in the stripe's row q0 = (l0 mod 4C) div C takes slot j from bank
C * ((q0 + k) mod 4) + j, so each slot chooses among four banks, and a beat goes up as
soon as every line it holds has arrived (the channels answer independently, each in
order). Writes go the other way: the W beat's lines into their banks, each channel's
burst sending its lines from its banks once its address has gone (W never ahead of AW).
A burst's write response is the worst of its channels' responses, once all are in; a
read beat's response the worst of its lines'.
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.data import StructLayout
from amaranth.lib.wiring import In, Out

from isa.axi import BURST_INCR

from . import fifo
from .axi import device_bus, port_bus
from .stream import line_layout

BANK_DEPTH = 4          # lines per bank: a channel may run this many bursts ahead of the others
GRANULE_LINES = 4       # 256-byte granule / 64-byte line


def _worst(m, resps, name):
    """AXI responses combined: the largest code (OKAY < EXOKAY < SLVERR < DECERR), one
    signal per step (an expression used twice a step would grow exponentially)."""
    out = resps[0]
    for i, r in enumerate(resps[1:]):
        step = Signal(2, name=f"{name}_worst{i}")
        m.d.comb += step.eq(Mux(r > out, r, out))
        out = step
    return out


class DramInterleaver(wiring.Component):
    def __init__(self, cfg):
        if cfg.dram_channels < 2:
            raise ValueError("the interleaver serves two or more channels")
        self._cfg = cfg
        super().__init__({
            "bus": In(device_bus(cfg)),
            "channels": Out(port_bus(cfg)).array(cfg.dram_channels),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, bus, n = self._cfg, self.bus, self._cfg.dram_channels
        line_log2 = (cfg.port_bytes - 1).bit_length()
        chan_log2 = (n - 1).bit_length()
        stripe_lines = GRANULE_LINES * n
        stripe_log2 = (stripe_lines - 1).bit_length()
        line_bits = cfg.data_bits
        lines_w = len(bus.arlines)

        def bursts_of(addr, lines, prefix):
            """Per channel: (touched, first line's address, lines - 1, first line's slot in
            its granule) of a burst of `lines` lines from the line at `addr`."""
            first = addr[line_log2:]                        # line index
            s0 = Signal(stripe_log2, name=f"{prefix}_s0")   # its line within the stripe
            m.d.comb += s0.eq(first[:stripe_log2])
            end = Signal(stripe_log2 + 1, name=f"{prefix}_end")    # one past its last line in the stripe
            m.d.comb += end.eq(s0 + lines)
            out = []
            for c in range(n):
                lo, hi = GRANULE_LINES * c, GRANULE_LINES * (c + 1)
                touched = Signal(name=f"{prefix}_touch{c}")
                start = Signal(stripe_log2, name=f"{prefix}_start{c}")
                stop = Signal(stripe_log2 + 1, name=f"{prefix}_stop{c}")
                m.d.comb += [touched.eq((s0 < hi) & (end > lo) & (lines != 0)),
                             start.eq(Mux(s0 > lo, s0, lo)), stop.eq(Mux(end < hi, end, hi))]
                line_addr = Cat(Const(0, line_log2), start, first[stripe_log2:])
                out.append((touched, line_addr, (stop - start - 1)[:2], start[:2]))
            return out, s0

        # ================================================================ reads
        rq_depth = cfg.bus_reads_in_flight
        # a burst in order (its first line's row of granule and slot, its lines, beats - 1,
        # ID); a channel's part (its first line's address, beats - 1; its first line's row)
        order_layout = StructLayout({"q0": 2, "first_slot": chan_log2, "lines": lines_w, "beats_m1": 8,
                                          "id": len(bus.arid)})
        part_layout = StructLayout({"addr": 64, "len": 2})
        info_layout = StructLayout({"pos": 2, "len": 2})
        order = fifo.SyncFIFO(width=order_layout.size, depth=rq_depth)
        m.submodules.read_order = order
        order_in, order_out = fifo.entries(order, order_layout)
        subs, s0 = bursts_of(bus.araddr, bus.arlines, "ar")
        ar_q = [fifo.SyncFIFO(width=part_layout.size, depth=rq_depth) for _ in range(n)]
        r_info = [fifo.SyncFIFO(width=info_layout.size, depth=rq_depth) for _ in range(n)]
        for c in range(n):
            m.submodules[f"ar_q{c}"], m.submodules[f"r_info{c}"] = ar_q[c], r_info[c]
        # room in every channel's queues, touched by the burst or not: the same in the device,
        # where the arbiter holds a tag for each burst in flight (bus_reads_in_flight, these
        # queues' depth) and grants none without a free one, so none of them is ever full
        # when a burst comes; and a ready that waits on no decode of the burst's address
        room = Signal()
        m.d.comb += room.eq(order.w_rdy & _all([q.w_rdy & i.w_rdy for q, i in zip(ar_q, r_info)]))
        m.d.comb += bus.arready.eq(room)
        take = bus.arvalid & room
        m.d.comb += [order.w_en.eq(take), order_in.q0.eq(s0[chan_log2:]), order_in.first_slot.eq(s0[:chan_log2]),
                     order_in.lines.eq(bus.arlines), order_in.beats_m1.eq(bus.arlen), order_in.id.eq(bus.arid)]
        for c, (touched, addr, length, pos) in enumerate(subs):
            part, info = fifo.entries(ar_q[c], part_layout)[0], fifo.entries(r_info[c], info_layout)[0]
            m.d.comb += [ar_q[c].w_en.eq(take & touched), part.addr.eq(addr), part.len.eq(length),
                         r_info[c].w_en.eq(take & touched), info.pos.eq(pos), info.len.eq(length)]

        # channel ports: AR from the queue; R beats into the banks of their lines
        line_resp = StructLayout({"data": line_bits, "resp": 2})
        banks = [fifo.SyncFIFO(width=line_resp.size, depth=BANK_DEPTH) for _ in range(4 * n)]
        for b, bank in enumerate(banks):
            m.submodules[f"r_bank{b}"] = bank
        for c, port in enumerate(self.channels):
            part = fifo.entries(ar_q[c], part_layout)[1]
            m.d.comb += [port.araddr.eq(part.addr), port.arlen.eq(part.len),
                         port.arsize.eq(line_log2), port.arburst.eq(BURST_INCR), port.arcache.eq(0b0011),
                         port.arvalid.eq(ar_q[c].r_rdy), ar_q[c].r_en.eq(port.arready)]
            beat = Signal(2, name=f"r_beat{c}")
            pos = Signal(2, name=f"r_pos{c}")
            m.d.comb += pos.eq(fifo.entries(r_info[c], info_layout)[1].pos + beat)
            free = Signal(name=f"r_free{c}")
            with m.Switch(pos):
                for p in range(4):
                    with m.Case(p):
                        m.d.comb += free.eq(banks[4 * c + p].w_rdy)
            m.d.comb += port.rready.eq(r_info[c].r_rdy & free)
            got = port.rvalid & port.rready
            for p in range(4):
                line_in = fifo.entries(banks[4 * c + p], line_resp)[0]
                m.d.comb += [banks[4 * c + p].w_en.eq(got & (pos == p)), line_in.data.eq(port.rdata),
                             line_in.resp.eq(port.rresp)]
            with m.If(got):
                m.d.sync += beat.eq(beat + 1)
                with m.If(port.rlast):
                    m.d.sync += beat.eq(0)
            m.d.comb += r_info[c].r_en.eq(got & port.rlast)

        # reassembly: beat k of the oldest burst, once every line it holds is in
        q0, first_slot, lines = order_out.q0, order_out.first_slot, order_out.lines
        beats_m1, rid = order_out.beats_m1, order_out.id
        k = Signal(8, name="r_k")
        row = Signal(2)
        m.d.comb += row.eq(q0 + k[:2])
        ready, datas, resps, takes = [], [], [], []
        for j in range(n):
            index = Signal(lines_w + 9, name=f"r_slot_index{j}")    # the slot's line in the burst, plus first_slot
            m.d.comb += index.eq((k << chan_log2) + j)
            valid = (index >= first_slot) & (index < first_slot + lines)
            candidates = [banks[n * r + j] for r in range(4)]
            have, data, resp = Signal(name=f"r_have{j}"), Signal(line_bits, name=f"r_data{j}"), Signal(2)
            with m.Switch(row):
                for r, bank in enumerate(candidates):
                    with m.Case(r):
                        line_out = fifo.entries(bank, line_resp)[1]
                        m.d.comb += [have.eq(bank.r_rdy), data.eq(line_out.data), resp.eq(line_out.resp)]
            ready.append(~valid | have)
            datas.append(Mux(valid, data, 0))
            resps.append(Mux(valid, resp, 0))
            takes.append((valid, candidates))
        m.d.comb += [bus.rvalid.eq(order.r_rdy & _all(ready)), bus.rdata.eq(Cat(*datas)),
                     bus.rresp.eq(_worst(m, resps, "r")), bus.rlast.eq(k == beats_m1), bus.rid.eq(rid)]
        up = bus.rvalid & bus.rready
        for valid, candidates in takes:
            for r, bank in enumerate(candidates):
                m.d.comb += bank.r_en.eq(up & valid & (row == r))
        with m.If(up):
            m.d.sync += k.eq(Mux(bus.rlast, 0, k + 1))
        m.d.comb += order.r_en.eq(up & bus.rlast)

        # ================================================================ writes
        wq_depth = cfg.bus_writes_in_flight
        # as the reads', with no ID in order; the ID waits with the channels it touched (`joins`)
        w_order_layout = StructLayout({"q0": 2, "first_slot": chan_log2, "lines": lines_w, "beats_m1": 8})
        join_layout = StructLayout({"mask": n, "id": len(bus.awid)})
        w_part_layout = StructLayout({"addr": 64, "len": 2, "pos": 2})
        w_order = fifo.SyncFIFO(width=w_order_layout.size, depth=wq_depth)
        joins = fifo.SyncFIFO(width=join_layout.size, depth=wq_depth)
        m.submodules.w_order, m.submodules.joins = w_order, joins
        (w_order_in, w_order_out), (join_in, join_out) = (fifo.entries(w_order, w_order_layout),
                                                          fifo.entries(joins, join_layout))
        subs, s0 = bursts_of(bus.awaddr, bus.awlines, "aw")
        aw_q = [fifo.SyncFIFO(width=w_part_layout.size, depth=wq_depth) for _ in range(n)]
        w_info = [fifo.SyncFIFO(width=info_layout.size, depth=wq_depth) for _ in range(n)]
        b_q = [fifo.SyncFIFO(width=2, depth=wq_depth) for _ in range(n)]
        for c in range(n):
            m.submodules[f"aw_q{c}"], m.submodules[f"w_info{c}"], m.submodules[f"b_q{c}"] = aw_q[c], w_info[c], b_q[c]
        # room in every channel's queue, as the reads' (bus_writes_in_flight tags)
        room = Signal()
        m.d.comb += room.eq(w_order.w_rdy & joins.w_rdy & _all([q.w_rdy for q in aw_q]))
        m.d.comb += bus.awready.eq(room)
        take = bus.awvalid & room
        m.d.comb += [w_order.w_en.eq(take), w_order_in.q0.eq(s0[chan_log2:]),
                     w_order_in.first_slot.eq(s0[:chan_log2]), w_order_in.lines.eq(bus.awlines),
                     w_order_in.beats_m1.eq(bus.awlen),
                     joins.w_en.eq(take), join_in.mask.eq(Cat(*(t for t, _, _, _ in subs))), join_in.id.eq(bus.awid)]
        for c, (touched, addr, length, pos) in enumerate(subs):
            part = fifo.entries(aw_q[c], w_part_layout)[0]
            m.d.comb += [aw_q[c].w_en.eq(take & touched), part.addr.eq(addr), part.len.eq(length), part.pos.eq(pos)]

        # the W beats' lines into their banks
        wline = line_layout(line_bits)
        wbanks = [fifo.SyncFIFO(width=wline.size, depth=BANK_DEPTH) for _ in range(4 * n)]
        for b, bank in enumerate(wbanks):
            m.submodules[f"w_bank{b}"] = bank
        q0, first_slot = w_order_out.q0, w_order_out.first_slot
        lines, beats_m1 = w_order_out.lines, w_order_out.beats_m1
        wk = Signal(8, name="w_k")
        row = Signal(2)
        m.d.comb += row.eq(q0 + wk[:2])
        room_all, puts = [], []
        for j in range(n):
            index = Signal(lines_w + 9, name=f"w_slot_index{j}")
            m.d.comb += index.eq((wk << chan_log2) + j)
            valid = (index >= first_slot) & (index < first_slot + lines)
            space = Signal(name=f"w_space{j}")
            with m.Switch(row):
                for r in range(4):
                    with m.Case(r):
                        m.d.comb += space.eq(wbanks[n * r + j].w_rdy)
            room_all.append(~valid | space)
            puts.append(valid)
        m.d.comb += bus.wready.eq(w_order.r_rdy & _all(room_all))
        got = bus.wvalid & bus.wready
        for j, valid in enumerate(puts):
            for r in range(4):
                bank = wbanks[n * r + j]
                line_in = fifo.entries(bank, wline)[0]
                m.d.comb += [bank.w_en.eq(got & valid & (row == r)),
                             line_in.data.eq(bus.wdata.word_select(j, line_bits)),
                             line_in.strb.eq(bus.wstrb.word_select(j, line_bits // 8))]
        last_w = wk == beats_m1
        with m.If(got):
            m.d.sync += wk.eq(Mux(last_w, 0, wk + 1))
        m.d.comb += w_order.r_en.eq(got & last_w)

        # channel ports: AW from the queue; W from the banks once the AW has gone; B queued
        for c, port in enumerate(self.channels):
            entry = fifo.entries(aw_q[c], w_part_layout)[1]
            info_in, info_out = fifo.entries(w_info[c], info_layout)
            m.d.comb += [port.awaddr.eq(entry.addr), port.awlen.eq(entry.len),
                         port.awsize.eq(line_log2), port.awburst.eq(BURST_INCR), port.awcache.eq(0b0011),
                         port.awvalid.eq(aw_q[c].r_rdy & w_info[c].w_rdy), aw_q[c].r_en.eq(port.awvalid & port.awready),
                         w_info[c].w_en.eq(port.awvalid & port.awready),
                         info_in.pos.eq(entry.pos), info_in.len.eq(entry.len)]
            beat = Signal(2, name=f"w_beat{c}")
            pos = Signal(2, name=f"w_pos{c}")
            m.d.comb += pos.eq(info_out.pos + beat)
            have, data, strb = Signal(name=f"w_have{c}"), Signal(line_bits, name=f"w_data{c}"), Signal(line_bits // 8)
            with m.Switch(pos):
                for p in range(4):
                    with m.Case(p):
                        bank = wbanks[4 * c + p]
                        line_out = fifo.entries(bank, wline)[1]
                        m.d.comb += [have.eq(bank.r_rdy), data.eq(line_out.data), strb.eq(line_out.strb)]
            last = beat == info_out.len
            m.d.comb += [port.wvalid.eq(w_info[c].r_rdy & have), port.wdata.eq(data), port.wstrb.eq(strb),
                         port.wlast.eq(last)]
            sent = port.wvalid & port.wready
            for p in range(4):
                m.d.comb += wbanks[4 * c + p].r_en.eq(sent & (pos == p))
            with m.If(sent):
                m.d.sync += beat.eq(Mux(last, 0, beat + 1))
            m.d.comb += [w_info[c].r_en.eq(sent & last),
                         port.bready.eq(b_q[c].w_rdy), b_q[c].w_en.eq(port.bvalid), b_q[c].w_data.eq(port.bresp)]

        # the burst's response once every channel it touched has answered
        mask = join_out.mask
        m.d.comb += [bus.bvalid.eq(joins.r_rdy & _all([~mask[c] | b_q[c].r_rdy for c in range(n)])),
                     bus.bresp.eq(_worst(m, [Mux(mask[c], b_q[c].r_data, 0) for c in range(n)], "b")),
                     bus.bid.eq(join_out.id)]
        answered = bus.bvalid & bus.bready
        m.d.comb += joins.r_en.eq(answered)
        for c in range(n):
            m.d.comb += b_q[c].r_en.eq(answered & mask[c])
        return m


def _all(bits):
    out = bits[0]
    for b in bits[1:]:
        out = out & b
    return out
