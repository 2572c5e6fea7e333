"""The CXL.io register file (spec section 3): an AXI4-Lite subordinate with PASID rules.

Holds each queue's configuration and doorbell tail, and the HEAD/STATUS the control
unit reports. A write of CTRL that turns `enable` on pulses `reset` so the command
engine restarts that queue's sequence numbers at 1.
"""
from amaranth import Module, Signal, Cat, Const
from amaranth.lib import wiring, data, stream
from amaranth.lib.wiring import In, Out

from isa import regs as R
from isa.axi import RESP_OKAY, RESP_SLVERR

from .axi import AXI4LiteSignature
from .completion import report_layout

QueueRegs = data.StructLayout({
    "sq_base": 64, "cq_base": 64, "data_base": 64, "data_limit": 64,
    "log2_depth": 4, "log2_slot": 8, "pasid": 20,
    "enable": 1, "irq_en": 1,
    "tail": 32,          # the newest sequence number rung on the doorbell (mod 2^32)
})


def io_signature(cfg):
    return AXI4LiteSignature(addr_width=cfg.io_addr_bits, data_width=cfg.io_data_bits,
                             user_width=cfg.user_bits)


class RegisterFile(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        n = cfg.num_queues
        super().__init__({
            "io": In(io_signature(cfg)),
            "queues": Out(QueueRegs).array(n),
            "reset": Out(1).array(n),             # one-cycle pulse: queue counts restart
            # completion report from the control unit (its `store` unused here)
            "done": In(stream.Signature(report_layout(cfg), always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, io = self._cfg, self.io
        nq = cfg.num_queues
        head = [Signal(32, name=f"head{q}") for q in range(nq)]
        status = [Signal(32, name=f"status{q}") for q in range(nq)]

        for q in range(nq):
            m.d.sync += self.reset[q].eq(0)
        done = self.done.payload
        with m.If(self.done.valid):
            with m.Switch(done.queue):
                for q in range(nq):
                    with m.Case(q):
                        m.d.sync += head[q].eq(done.seq)
                        with m.If(done.status != 0):
                            m.d.sync += status[q].eq(Cat(done.status, Const(0, 23), 1))

        # --- writes: hold AW and W until both have come, then answer B
        aw_addr, aw_user, aw_full = Signal(cfg.io_addr_bits), Signal(cfg.user_bits), Signal()
        w_data, w_strb, w_full = Signal(32), Signal(4), Signal()
        b_valid, b_resp = Signal(), Signal(2)
        m.d.comb += [io.awready.eq(~aw_full), io.wready.eq(~w_full),
                     io.bvalid.eq(b_valid), io.bresp.eq(b_resp)]
        with m.If(io.awvalid & io.awready):
            m.d.sync += [aw_addr.eq(io.awaddr), aw_user.eq(io.awuser), aw_full.eq(1)]
        with m.If(io.wvalid & io.wready):
            m.d.sync += [w_data.eq(io.wdata), w_strb.eq(io.wstrb), w_full.eq(1)]
        with m.If(b_valid & io.bready):
            m.d.sync += b_valid.eq(0)

        mask = Signal(32)
        m.d.comb += mask.eq(Cat(*[w_strb[i].replicate(8) for i in range(4)]))

        def merged(old):
            return (old & ~mask) | (w_data & mask)

        host = aw_user == R.HOST_PASID
        with m.If(aw_full & w_full & ~b_valid):
            m.d.sync += [aw_full.eq(0), w_full.eq(0), b_valid.eq(1),
                         b_resp.eq(RESP_OKAY)]
            refuse = Signal()
            m.d.comb += refuse.eq(~host)      # only the host writes anything but doorbells
            with m.Switch(aw_addr[2:]):
                for q in range(nq):
                    regs_q = self.queues[q]
                    base = R.queue_reg(q, 0)

                    def case(off):
                        return m.Case((base + off) >> 2)

                    def field64(name, lo_off):
                        lo, hi = getattr(regs_q, name)[:32], getattr(regs_q, name)[32:]
                        with case(lo_off):
                            with m.If(host):
                                m.d.sync += lo.eq(merged(lo))
                        with case(lo_off + 4):
                            with m.If(host):
                                m.d.sync += hi.eq(merged(hi))

                    field64("sq_base", R.SQ_BASE_LO)
                    field64("cq_base", R.CQ_BASE_LO)
                    field64("data_base", R.DATA_BASE_LO)
                    field64("data_limit", R.DATA_LIMIT_LO)
                    with case(R.CFG):
                        with m.If(host):
                            new = merged(Cat(regs_q.log2_depth, regs_q.log2_slot, regs_q.pasid))
                            m.d.sync += Cat(regs_q.log2_depth, regs_q.log2_slot, regs_q.pasid).eq(new)
                    with case(R.CTRL):
                        with m.If(host):
                            new = merged(Cat(regs_q.enable, regs_q.irq_en))
                            m.d.sync += [regs_q.enable.eq(new[0]), regs_q.irq_en.eq(new[1])]
                            with m.If(new[0] & ~regs_q.enable):
                                m.d.sync += [regs_q.tail.eq(0), head[q].eq(0), self.reset[q].eq(1)]
                    with case(R.DOORBELL):
                        # a doorbell is taken only from the queue's own PASID
                        m.d.comb += refuse.eq(aw_user != regs_q.pasid)
                        with m.If(aw_user == regs_q.pasid):
                            m.d.sync += regs_q.tail.eq(merged(regs_q.tail))
                    with case(R.STATUS):
                        with m.If(host & w_data[31] & w_strb[3]):
                            m.d.sync += status[q][31].eq(0)      # write 1 clears the sticky bit
            with m.If(refuse):
                m.d.sync += b_resp.eq(RESP_SLVERR)

        # --- reads: any PASID may read; unmapped addresses read 0
        r_valid, r_data = Signal(), Signal(32)
        m.d.comb += [io.arready.eq(~r_valid), io.rvalid.eq(r_valid), io.rdata.eq(r_data),
                     io.rresp.eq(RESP_OKAY)]
        with m.If(r_valid & io.rready):
            m.d.sync += r_valid.eq(0)
        with m.If(io.arvalid & io.arready):
            m.d.sync += [r_valid.eq(1), r_data.eq(0)]
            globals_ = {R.ID: R.ID_VALUE, R.VERSION: R.VERSION_VALUE, R.NUM_QUEUES: nq,
                        R.LANES: cfg.lanes, R.ROWS: cfg.rows, R.IN_BUF_BYTES: cfg.in_buf_bytes,
                        R.OUT_BUF_BYTES: cfg.out_buf_bytes, R.DRAM_BUF_BYTES: cfg.dram_buf_bytes,
                        R.DRAM_CHANNELS: cfg.dram_channels, R.SOFTMAX_LANES: cfg.softmax_lanes}
            with m.Switch(io.araddr[2:]):
                for off, value in globals_.items():
                    with m.Case(off >> 2):
                        m.d.sync += r_data.eq(value)
                for q in range(nq):
                    regs_q = self.queues[q]
                    readable = {
                        R.SQ_BASE_LO: regs_q.sq_base[:32], R.SQ_BASE_HI: regs_q.sq_base[32:],
                        R.CQ_BASE_LO: regs_q.cq_base[:32], R.CQ_BASE_HI: regs_q.cq_base[32:],
                        R.DATA_BASE_LO: regs_q.data_base[:32], R.DATA_BASE_HI: regs_q.data_base[32:],
                        R.DATA_LIMIT_LO: regs_q.data_limit[:32], R.DATA_LIMIT_HI: regs_q.data_limit[32:],
                        R.CFG: Cat(regs_q.log2_depth, regs_q.log2_slot, regs_q.pasid),
                        R.CTRL: Cat(regs_q.enable, regs_q.irq_en),
                        R.HEAD: head[q], R.STATUS: status[q],
                    }
                    for off, value in readable.items():
                        with m.Case(R.queue_reg(q, off) >> 2):
                            m.d.sync += r_data.eq(value)
        return m
