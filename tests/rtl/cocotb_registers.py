"""Register file: identity and capabilities, queue registers, PASID rules (spec section 3)."""
import cocotb

from isa import regs as R
from driver.errors import RegisterAccessError
from env import DeviceEnv


@cocotb.test()
async def capability_registers(dut):
    env = DeviceEnv(dut)
    dev = await env.start()
    cfg, t = env.cfg, env.transport
    expected = {R.ID: R.ID_VALUE, R.VERSION: R.VERSION_VALUE, R.NUM_QUEUES: cfg.num_queues,
                R.LANES: cfg.lanes, R.ROWS: cfg.rows, R.IN_BUF_BYTES: cfg.in_buf_bytes,
                R.OUT_BUF_BYTES: cfg.out_buf_bytes, R.DRAM_BUF_BYTES: cfg.dram_buf_bytes}
    for off, value in expected.items():
        assert await t.reg_read(off) == value, hex(off)
    # unmapped reads are zero
    for off in (0x020, 0x0FC, R.queue_reg(cfg.num_queues, 0), 0xFFFC):
        assert await t.reg_read(off) == 0, hex(off)
    # a global register is read-only: a host write is ignored
    await t.reg_write(R.ID, 0x1234, 0)
    assert await t.reg_read(R.ID) == R.ID_VALUE
    assert dev.caps.lanes == cfg.lanes


@cocotb.test()
async def queue_registers_and_pasid_rules(dut):
    env = DeviceEnv(dut)
    await env.start()
    t, q = env.transport, 1
    values = {R.SQ_BASE_LO: 0x1000, R.SQ_BASE_HI: 0x2, R.CQ_BASE_LO: 0x3000, R.CQ_BASE_HI: 0x4,
              R.DATA_BASE_LO: 0x5040, R.DATA_BASE_HI: 0x6, R.DATA_LIMIT_LO: 0x7080, R.DATA_LIMIT_HI: 0x8,
              R.CFG: R.cfg_value(3, 12, 0x5A5A5), R.CTRL: 0}
    for off, value in values.items():
        await t.reg_write(R.queue_reg(q, off), value, 0)
    for off, value in values.items():
        assert await t.reg_read(R.queue_reg(q, off)) == value, hex(off)
    # another queue's block is untouched
    assert await t.reg_read(R.queue_reg(0, R.SQ_BASE_LO)) == 0
    # a non-host PASID may not write configuration: SLVERR, nothing changes
    for pasid in (1, 0x5A5A5):
        try:
            await t.reg_write(R.queue_reg(q, R.SQ_BASE_LO), 0xDEAD00, pasid)
        except RegisterAccessError:
            pass
        else:
            raise AssertionError(f"PASID {pasid:#x} wrote SQ_BASE")
        assert await t.reg_read(R.queue_reg(q, R.SQ_BASE_LO)) == 0x1000
    # nor write an unmapped address
    try:
        await t.reg_write(0x0F0, 1, 7)
    except RegisterAccessError:
        pass
    else:
        raise AssertionError("PASID 7 wrote an unmapped address without SLVERR")
    # a doorbell only from the queue's own PASID
    for pasid in (0, 1, 0x5A5A4):
        try:
            await t.reg_write(R.queue_reg(q, R.DOORBELL), 5, pasid)
        except RegisterAccessError:
            pass
        else:
            raise AssertionError(f"doorbell accepted from PASID {pasid:#x}")
    await t.reg_write(R.queue_reg(q, R.DOORBELL), 5, 0x5A5A5)
    assert await t.reg_read(R.queue_reg(q, R.DOORBELL)) == 0     # write-only
    assert await t.reg_read(R.queue_reg(q, R.HEAD)) == 0
    assert await t.reg_read(R.queue_reg(q, R.STATUS)) == 0
