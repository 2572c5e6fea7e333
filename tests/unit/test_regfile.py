"""The register file: the model (sim/regfile.py) against the RTL (hw/regfile.py), cycle for
cycle, through the harness of ties.py (its docstring gives the cycle convention)."""
import collections

import numpy as np
import pytest

from isa import regs as R
from isa.axi import RESP_OKAY, RESP_SLVERR
from hw.regfile import RegisterFile
from sim import regfile as model_regfile

from ties import CFG, Clock, QUEUE_FIELDS, simulate


class ResetWatch:
    """Logs the queues whose `reset` pulse is high, cycle by cycle."""
    def __init__(self, dut):
        self.dut, self.pulses = dut, []

    def drive(self, ctx, t):
        pass

    def sample(self, ctx, t):
        self.pulses += [q for q, pulse in enumerate(self.dut.reset) if ctx.get(pulse)]


async def lite_write(clock, io, addr, value, pasid, w_lag):
    """One AXI4-Lite write, full strobes; W comes `w_lag` cycles after AW (before, if
    negative). Returns BRESP."""
    ctx = clock.ctx
    ctx.set(io.awaddr, addr)
    ctx.set(io.awuser, pasid)
    ctx.set(io.wdata, value)
    ctx.set(io.wstrb, 0xF)
    aw_left = w_left = True
    k = 0
    while aw_left or w_left:
        ctx.set(io.awvalid, aw_left and k >= -w_lag)
        ctx.set(io.wvalid, w_left and k >= w_lag)
        aw_fire = ctx.get(io.awvalid) and ctx.get(io.awready)
        w_fire = ctx.get(io.wvalid) and ctx.get(io.wready)
        await clock.tick()
        aw_left, w_left, k = aw_left and not aw_fire, w_left and not w_fire, k + 1
    ctx.set(io.awvalid, 0)
    ctx.set(io.wvalid, 0)
    resp, _ = await lite_response(clock, io.bvalid, io.bready, io.bresp)
    return resp


async def lite_read(clock, io, addr, pasid):
    """One AXI4-Lite read. Returns (RRESP, RDATA)."""
    ctx = clock.ctx
    ctx.set(io.araddr, addr)
    ctx.set(io.aruser, pasid)
    ctx.set(io.arvalid, 1)
    while not ctx.get(io.arready):
        await clock.tick()
    await clock.tick()
    ctx.set(io.arvalid, 0)
    return await lite_response(clock, io.rvalid, io.rready, io.rresp, io.rdata)


async def lite_response(clock, valid, ready, resp, data=None):
    """Take a B or R response: (resp, data)."""
    ctx = clock.ctx
    ctx.set(ready, 1)
    while not ctx.get(valid):
        await clock.tick()
    out = ctx.get(resp), (ctx.get(data) if data is not None else None)
    await clock.tick()
    ctx.set(ready, 0)
    return out


def regfile_ops(cfg, seed, count):
    """A random sequence of register accesses and completion reports."""
    rng = np.random.default_rng(seed)
    nq = cfg.num_queues
    pasids = [R.HOST_PASID] * 3 + [1, 2, 0x12345]

    def offset():
        roll = rng.random()
        if roll < 0.1:                                           # global block and beyond it
            return int(rng.integers(0, R.QUEUE_BASE // 4)) * 4 + int(rng.integers(0, 4)) * (rng.random() < 0.2)
        if roll < 0.15:                                          # anywhere in the 16-bit space
            return int(rng.integers(0, 1 << cfg.io_addr_bits))
        q = int(rng.integers(0, nq + 1))                         # q == nq: past the last queue
        reg = rng.choice([R.CTRL, R.DOORBELL, R.DOORBELL, R.CFG, R.HEAD, R.STATUS, R.STATUS,
                          R.SQ_BASE_LO, R.SQ_BASE_HI, R.CQ_BASE_LO, R.CQ_BASE_HI, R.DATA_BASE_LO,
                          R.DATA_BASE_HI, R.DATA_LIMIT_LO, R.DATA_LIMIT_HI, 0x34, 0x3C])
        return R.queue_reg(q, int(reg))

    def value(off):
        reg = (off - R.QUEUE_BASE) % R.QUEUE_STRIDE
        if reg == R.CTRL:
            return int(rng.integers(0, 4)) | (int(rng.integers(0, 1 << 32)) & ~3) * (rng.random() < 0.2)
        if reg == R.CFG and rng.random() < 0.8:
            return R.cfg_value(int(rng.integers(0, 16)), int(rng.integers(0, 256)), int(rng.choice(pasids)))
        if reg == R.STATUS:
            return int(rng.integers(0, 1 << 32)) | (R.STATUS_STICKY if rng.random() < 0.5 else 0)
        return int(rng.integers(0, 1 << 32))

    for _ in range(count):
        roll = rng.random()
        if roll < 0.5:
            off = offset()
            yield ("write", off, value(off), int(rng.choice(pasids)), int(rng.integers(-2, 3)))
        elif roll < 0.85:
            yield ("read", offset(), int(rng.choice(pasids)))
        else:
            yield ("done", int(rng.integers(0, nq)), int(rng.integers(0, 1 << 32)),
                   int(rng.choice([0, 0, 1, 3, 4, 0xFF])))


@pytest.mark.parametrize("seed", [1, 2])
def test_regfile_matches_model(seed):
    """Responses, read data, queue register outputs and reset pulses of hw/regfile.py
    equal sim/regfile.py's (RefusedAccess = SLVERR) over a random access sequence."""
    cfg = CFG
    dut = RegisterFile(cfg)
    model = model_regfile.RegisterFile(cfg)
    ops = list(regfile_ops(cfg, seed, 400))
    seen = collections.Counter()

    def check_queues(ctx, what):
        for q, regs in enumerate(model.queues):
            for field in QUEUE_FIELDS:
                assert ctx.get(getattr(dut.queues[q], field)) == int(getattr(regs, field)), (what, q, field)

    async def bench(ctx):
        watch = ResetWatch(dut)
        clock = Clock(ctx, watch)
        for op in ops:
            if op[0] == "write":
                _, off, val, pasid, lag = op
                watch.pulses.clear()
                resp = await lite_write(clock, dut.io, off, val, pasid, lag)
                try:
                    restarted = model.write(off, val, pasid)
                    expected = RESP_OKAY
                except model_regfile.RefusedAccess:
                    restarted, expected = None, RESP_SLVERR
                assert resp == expected, op
                assert watch.pulses == ([] if restarted is None else [restarted]), op
                seen["refused" if expected else "written"] += 1
                seen["restart"] += restarted is not None
                seen["doorbell"] += expected == RESP_OKAY and (off - R.QUEUE_BASE) % R.QUEUE_STRIDE == R.DOORBELL
                seen["sticky clear"] += (expected == RESP_OKAY and (off - R.QUEUE_BASE) % R.QUEUE_STRIDE == R.STATUS
                                         and bool(val & R.STATUS_STICKY))
            elif op[0] == "read":
                _, off, pasid = op
                resp, data = await lite_read(clock, dut.io, off, pasid)
                assert (resp, data) == (RESP_OKAY, model.read(off, pasid)), op
                seen["nonzero read"] += data != 0
            else:
                _, q, seq, status = op
                ctx.set(dut.done.valid, 1)
                ctx.set(dut.done.payload.queue, q)
                ctx.set(dut.done.payload.seq, seq)
                ctx.set(dut.done.payload.status, status)
                await clock.tick()
                ctx.set(dut.done.valid, 0)
                model.complete(q, seq, status)
                for reg in (R.HEAD, R.STATUS):
                    assert await lite_read(clock, dut.io, R.queue_reg(q, reg), R.HOST_PASID) == \
                        (RESP_OKAY, model.read(R.queue_reg(q, reg), R.HOST_PASID)), (op, reg)
            check_queues(ctx, op)

    simulate(dut, bench)
    # the sequence reached the rules it is meant to check
    assert min(seen[k] for k in ("refused", "written", "restart", "doorbell", "sticky clear", "nonzero read")) > 0, seen
