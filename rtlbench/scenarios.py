"""The device scenarios, written once against the backend interface (backend.py) and the
driver, run on the RTL (cocotb_scenarios.py) and on the cycle model
(tests/unit/test_model_scenarios.py). Results are checked bit for bit against
sim/golden.py; protocol behaviour against the spec's rules."""
import struct

import numpy as np

import isa
from isa import Descriptor, DescType, Dtype, Op, Status, regs, slots
from isa import regs as R
from isa.axi import RESP_DECERR, RESP_OKAY, RESP_SLVERR
from isa.descriptor import PAGE_SHIFT_LSB
from isa.pe_array import ACC_SLOTS
from isa.validate import QueueView, lines
from driver.errors import CompletionError, DeviceTimeout, MemAccessError, RegisterAccessError
from rtlbench.paged import paged_descriptor, place_pages
from sim import golden

U64 = struct.Struct("<Q")
COMPUTE_SEED, PROTOCOL_SEED = 20261129, 7

ALL = {}                                    # name -> scenario, in definition order
EXPECT_FAIL = {"scoreboard_catches_a_corrupted_weight"}   # proof the checks can fail


def scenario(fn):
    ALL[fn.__name__] = fn
    return fn


async def refused(access, error, what):
    """Await `access`, which must fail with `error` (an SLVERR answer)."""
    try:
        await access
    except error:
        return
    raise AssertionError(f"{what}: accepted, expected {error.__name__}")

@scenario
async def capability_registers(env):
    dev = env.dev
    cfg, t = env.cfg, env.transport
    expected = {R.ID: R.ID_VALUE, R.VERSION: R.VERSION_VALUE, R.NUM_QUEUES: cfg.num_queues,
                R.LANES: cfg.lanes, R.ROWS: cfg.rows, R.IN_BUF_BYTES: cfg.in_buf_bytes,
                R.OUT_BUF_BYTES: cfg.out_buf_bytes, R.DRAM_BUF_BYTES: cfg.dram_buf_bytes,
                R.DRAM_CHANNELS: cfg.dram_channels, R.SOFTMAX_LANES: cfg.softmax_lanes}
    for off, value in expected.items():
        assert await t.reg_read(off) == value, hex(off)
    # unmapped reads are zero
    for off in (0x028, 0x0FC, R.queue_reg(cfg.num_queues, 0), 0xFFFC):
        assert await t.reg_read(off) == 0, hex(off)
    # a global register is read-only: a host write is ignored
    await t.reg_write(R.ID, 0x1234, 0)
    assert await t.reg_read(R.ID) == R.ID_VALUE
    assert (dev.caps.lanes, dev.caps.dram_channels, dev.caps.softmax_lanes) == (cfg.lanes, cfg.dram_channels,
                                                                               cfg.softmax_lanes)


@scenario
async def queue_registers_and_pasid_rules(env):
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
        await refused(t.reg_write(R.queue_reg(q, R.SQ_BASE_LO), 0xDEAD00, pasid), RegisterAccessError,
                      f"SQ_BASE write from PASID {pasid:#x}")
        assert await t.reg_read(R.queue_reg(q, R.SQ_BASE_LO)) == 0x1000
    # nor write an unmapped address
    await refused(t.reg_write(0x0F0, 1, 7), RegisterAccessError, "unmapped write from PASID 7")
    # a doorbell only from the queue's own PASID
    for pasid in (0, 1, 0x5A5A4):
        await refused(t.reg_write(R.queue_reg(q, R.DOORBELL), 5, pasid), RegisterAccessError,
                      f"doorbell from PASID {pasid:#x}")
    await t.reg_write(R.queue_reg(q, R.DOORBELL), 5, 0x5A5A5)
    assert await t.reg_read(R.queue_reg(q, R.DOORBELL)) == 0     # write-only
    assert await t.reg_read(R.queue_reg(q, R.HEAD)) == 0
    assert await t.reg_read(R.queue_reg(q, R.STATUS)) == 0


def random_fp16(rng, shape, special=False):
    """Normal values of mixed scale; with `special`, also subnormals, zeros, infinities, NaN."""
    values = (rng.standard_normal(shape) * np.exp2(rng.integers(-6, 4, shape))).astype(np.float16)
    if special:
        pick = rng.random(shape)
        values[pick < 0.05] = np.float16(0.0)
        values[(pick >= 0.05) & (pick < 0.08)] = np.float16(-0.0)
        sub = (pick >= 0.08) & (pick < 0.12)
        values[sub] = (rng.integers(1, 1024, int(sub.sum())).astype(np.uint16)).view(np.float16)
        values[(pick >= 0.12) & (pick < 0.125)] = np.float16(np.inf)
        values[(pick >= 0.125) & (pick < 0.13)] = np.float16(np.nan)
    return values


def assert_bits_equal(got, expected, what):
    got_bits, exp_bits = got.view(np.uint16), expected.view(np.uint16)
    bad = np.argwhere(got_bits != exp_bits)
    assert bad.size == 0, (f"{what}: {len(bad)} of {got.size} results differ; first at {tuple(bad[0])}: "
                           f"got {got_bits[tuple(bad[0])]:#06x}, expected {exp_bits[tuple(bad[0])]:#06x}")


async def check_gemm(dev, rng, m, k, n, special=False, gemv=False):
    w = random_fp16(rng, (k, n), special)
    x = random_fp16(rng, (m, k), special)
    tensor = await dev.upload(w)
    if gemv:
        got = await dev.gemv(x[0], tensor)
        assert_bits_equal(got, golden.gemv(x[0], w, dev.caps.lanes), f"gemv {k}x{n}")
    else:
        got = await dev.gemm(x, tensor)
        assert_bits_equal(got, golden.gemm(x, w, dev.caps.lanes), f"gemm {m}x{k}x{n}")
    dev.queue().free_all()


@scenario
async def gemv_random_shapes(env):
    dev = env.dev
    await env.setup_queue(0)
    rng = np.random.default_rng(COMPUTE_SEED)
    shapes = [(1, 1), (1, 32), (32, 1), (7, 5), (33, 17), (64, 64), (100, 33), (31, 97), (65, 200)]
    shapes += [tuple(int(v) for v in rng.integers(1, 160, 2)) for _ in range(6)]
    for k, n in shapes:
        await check_gemm(dev, rng, 1, k, n, gemv=True)


@scenario
async def gemm_random_shapes(env):
    dev = env.dev
    await env.setup_queue(0)
    rng = np.random.default_rng(COMPUTE_SEED + 1)
    cfg = env.cfg
    shapes = [(2, 3, 5), (cfg.rows, 32, 32), (cfg.rows + 1, 17, 40), (3 * cfg.rows, 40, 9), (9, 31, 100),
              (13, 1, 70), (5, 70, 1)]
    shapes += [tuple(int(v) for v in rng.integers(1, 80, 3)) for _ in range(5)]
    for m, k, n in shapes:
        await check_gemm(dev, rng, m, k, n)


@scenario
async def column_tiles(env):
    """N of more than ACC_SLOTS words: the weights stream in column tiles of a DRAM run per
    row (isa/pe_array.py tiles): 6 + 3 words on one input row, 8 + 3 over a group and a
    row more, 8 + 6 + 3 with a K of two input lines and a last word part-filled."""
    dev = env.dev
    await env.setup_queue(0)
    rng = np.random.default_rng(COMPUTE_SEED + 5)
    lanes, rows = dev.caps.lanes, env.cfg.rows
    for m, k, n in [(1, 5, ACC_SLOTS * lanes + 1), (rows + 1, 3, (ACC_SLOTS + 3) * lanes),
                    (2, 2 * lanes + 7, (2 * ACC_SLOTS + 1) * lanes - 5)]:
        await check_gemm(dev, rng, m, k, n, gemv=m == 1)


@scenario
async def transposed_weights(env):
    """GEMV and GEMM with the weight stored N x K (TRANS_W, the driver's transposed=True):
    K a power of two below LANES (rows packed into a PE row), other K below it, K over
    LANES (a row in several chunks), bit for bit against the transposed golden order."""
    dev = env.dev
    await env.setup_queue(0)
    rng = np.random.default_rng(COMPUTE_SEED + 7)
    lanes = dev.caps.lanes
    for m, k, n in [(1, 16, 40), (1, lanes // 2, 9), (1, 5, 33), (1, lanes, 3), (1, lanes + 7, 20),
                    (3, 24, 17), (env.cfg.rows + 1, 2 * lanes + 1, 12), (2, 1, 8)]:
        w = random_fp16(rng, (k, n))
        x = random_fp16(rng, (m, k))
        tensor = await dev.upload(np.ascontiguousarray(w.T))        # stored N x K
        if m == 1:
            got = (await dev.gemv(x[0], tensor, transposed=True))[None, :]
        else:
            got = await dev.gemm(x, tensor, transposed=True)
        assert_bits_equal(got, golden.gemm_trans(x, w.T, lanes), f"gemm^T {m}x{k}x{n}")
        dev.queue().free_all()


@scenario
async def gemm_under_backpressure(env):
    """Random stalls on every DRAM channel and on the host's read data and write responses."""
    dev = env.dev
    await env.add_backpressure()
    await env.setup_queue(0)
    rng = np.random.default_rng(COMPUTE_SEED + 4)
    for m, k, n in [(1, 300, 70), (6, 65, 33), (2, 8, 200)]:
        await check_gemm(dev, rng, m, k, n)


@scenario
async def special_values(env):
    """Zeros of both signs, subnormals, infinities and NaN in both operands."""
    dev = env.dev
    await env.setup_queue(0)
    rng = np.random.default_rng(COMPUTE_SEED + 2)
    for m, k, n in [(1, 64, 48), (5, 33, 70), (3, 200, 20)]:
        await check_gemm(dev, rng, m, k, n, special=True)
    # overflow to infinity, and cancellation to exact zero
    w = np.full((4, 8), 60000, np.float16)
    x = np.array([[2, 2, -2, -2]], np.float16)
    tensor = await dev.upload(w)
    assert_bits_equal(await dev.gemm(x, tensor), golden.gemm(x, w, dev.caps.lanes), "cancellation")
    x = np.array([[1, 1, 1, 1]], np.float16)
    assert_bits_equal(await dev.gemm(x, tensor), golden.gemm(x, w, dev.caps.lanes), "overflow")


@scenario
async def scoreboard_catches_a_corrupted_weight(env):
    """Flip one bit of a weight in DRAM behind the driver's back: the comparison must fail."""
    dev = env.dev
    await env.setup_queue(0)
    rng = np.random.default_rng(COMPUTE_SEED + 3)
    w = random_fp16(rng, (16, 8))
    x = random_fp16(rng, (1, 16))
    tensor = await dev.upload(w)
    hi_byte = tensor.addr + 2 * 37 + 1           # exponent bits of weight (2, 5)
    env.backdoor_write(hi_byte, bytes([env.backdoor_read(hi_byte, 1)[0] ^ 0x40]))
    assert_bits_equal(await dev.gemm(x, tensor), golden.gemm(x, w, dev.caps.lanes), "corrupted weight")




def gemm_desc(tensor, m, op=Op.GEMM):
    k, n = tensor.rows, tensor.cols
    return Descriptor(type=DescType.READ_COMPUTE, op=op, dtype=Dtype.FP16, dev_addr=tensor.addr,
                      dev_size=lines(k * n * 2), dev_rows=k, dev_cols=n,
                      in_size=lines(m * k * 2), in_rows=m, in_cols=k)


def with_fields(desc, **fields):
    return Descriptor(**{**desc.__dict__, **fields})


@scenario
async def every_status_code(env):
    """Each status with a descriptor that earns it; a failed descriptor reads no operand,
    writes no result, sets the sticky error, and the queue goes on."""
    dev = env.dev
    queue = await env.setup_queue(0, log2_depth=3, log2_slot=14)
    rng = np.random.default_rng(PROTOCOL_SEED)
    w = random_fp16(rng, (40, 24))
    tensor = await dev.upload(w)
    await dev.upload(random_fp16(rng, (40, 24)))         # room for the operand pairs below
    good = gemm_desc(tensor, 3)
    # the project's ops, well formed, as bases for their bad cases: a 40 x 24 operand
    # read as K^T (d = 40, T = 24) then V, or as A (D = 40, R = 24) then B
    pair = dict(dev_addr=tensor.addr, dev_size=2 * lines(40 * 24 * 2), dev_rows=40, dev_cols=24,
                in_size=lines(3 * 40 * 2), in_rows=3, in_cols=40)
    attention = Descriptor(type=DescType.READ_COMPUTE, op=Op.ATTENTION, dtype=Dtype.FP16, **pair)
    xab = Descriptor(type=DescType.READ_COMPUTE, op=Op.LORA_XAB, dtype=Dtype.FP16, **pair)
    softmax = Descriptor(type=DescType.READ_COMPUTE, op=Op.SOFTMAX, dtype=Dtype.FP16,
                         in_size=lines(3 * 40 * 2), in_rows=3, in_cols=40)
    k_max, n_max = env.cfg.k_max, env.cfg.n_max
    cases = [
        (Status.BAD_OP, Descriptor(type=DescType.RESERVED)),
        (Status.BAD_OP, with_fields(good, op=9)),
        (Status.BAD_OP, with_fields(good, flags=isa.Flag.TRANS_W | isa.Flag.PARTIAL)),
        (Status.BAD_SHAPE, with_fields(good, flags=isa.Flag.TRANS_W)),     # stored N x K: in_cols != dev_cols
        (Status.BAD_OP, with_fields(good, flags=isa.Flag.PARTIAL)),                     # PARTIAL on GEMM
        (Status.BAD_OP, with_fields(softmax, flags=isa.Flag.PARTIAL | isa.Flag.PAGED)),   # PAGED on SOFTMAX
        (Status.BAD_OP, with_fields(attention, flags=isa.Flag.PARTIAL)),
        (Status.BAD_OP, with_fields(xab, flags=isa.Flag.TRANS_W)),
        (Status.BAD_OP, with_fields(good, type=DescType.LOAD, op=1)),
        (Status.BAD_DTYPE, with_fields(good, dtype=Dtype.BF16)),
        (Status.BAD_DTYPE, with_fields(good, type=DescType.LOAD, op=0, dtype=9)),
        (Status.BAD_DTYPE, with_fields(softmax, dtype=Dtype.BF16)),
        (Status.BAD_DTYPE, with_fields(attention, dtype=Dtype.INT8)),
        (Status.BOUNDS, with_fields(good, dev_addr=tensor.addr + 32)),                    # unaligned
        (Status.BOUNDS, with_fields(good, dev_addr=queue.data_base - 64)),               # below the range
        (Status.BOUNDS, with_fields(good, dev_addr=queue.data_limit - 64)),              # runs past it
        (Status.BOUNDS, with_fields(good, dev_addr=(1 << 64) - 64)),                     # wraps 2^64
        (Status.BOUNDS, with_fields(good, dev_addr=queue.sq_base)),                      # another range
        (Status.BOUNDS, with_fields(attention, dev_addr=queue.data_limit - attention.dev_size * 64 + 64)),  # V runs past
        (Status.BOUNDS, with_fields(xab, dev_addr=queue.data_base - 64)),
        (Status.BAD_SHAPE, with_fields(good, dev_size=good.dev_size + 1)),
        (Status.BAD_SHAPE, with_fields(good, in_size=good.in_size - 1)),
        (Status.BAD_SHAPE, with_fields(good, op=Op.GEMV)),                               # in_rows != 1
        (Status.BAD_SHAPE, with_fields(good, in_cols=39, in_size=lines(3 * 39 * 2))),    # in_cols != K
        (Status.BAD_SHAPE, with_fields(good, in_rows=0, in_size=0)),
        (Status.BAD_SHAPE, with_fields(good, dev_rows=k_max + 1, dev_size=lines((k_max + 1) * 24 * 2),
                                       in_cols=k_max + 1, in_size=lines(3 * (k_max + 1) * 2))),
        (Status.BAD_SHAPE, with_fields(good, dev_rows=1, dev_cols=n_max + 1, dev_size=lines((n_max + 1) * 2),
                                       in_cols=1, in_size=lines(3 * 2))),
        (Status.BAD_SHAPE, with_fields(good, in_rows=300, in_size=lines(300 * 40 * 2))),  # input > slot
        (Status.BAD_SHAPE, with_fields(good, dev_rows=1, dev_cols=100, dev_size=lines(200),
                                       in_rows=100, in_cols=1, in_size=lines(200))),       # result > slot
        (Status.BAD_SHAPE, with_fields(good, type=DescType.STORE, op=0, in_rows=0, in_cols=0, in_size=0)),
        (Status.BAD_SHAPE, with_fields(good, type=DescType.STORE, op=0, in_rows=40, in_cols=23,
                                       in_size=lines(40 * 23 * 2))),                       # in_size != dev_size
        (Status.BAD_SHAPE, with_fields(softmax, dev_rows=1)),                              # SOFTMAX has no operand
        (Status.BAD_SHAPE, with_fields(softmax, in_cols=k_max + 1, in_size=lines(3 * (k_max + 1) * 2))),
        (Status.BAD_SHAPE, with_fields(softmax, in_rows=0, in_size=0)),
        (Status.BAD_SHAPE, with_fields(softmax, flags=isa.Flag.PARTIAL, in_rows=60, in_cols=120,
                                       in_size=lines(60 * 120 * 2))),     # values fit, values + anchors do not
        (Status.BAD_SHAPE, with_fields(attention, dev_size=attention.dev_size // 2)),     # K^T without V
        (Status.BAD_SHAPE, with_fields(attention, in_cols=20, in_size=lines(3 * 20 * 2))),  # q's d != K's d
        (Status.BAD_SHAPE, with_fields(attention, dev_cols=n_max + 1, dev_size=2 * lines(40 * (n_max + 1) * 2))),
        (Status.BAD_SHAPE, with_fields(xab, in_cols=24, in_size=lines(3 * 24 * 2))),     # x's D != A's D
        (Status.OK, good),
    ]
    view = QueueView(queue.log2_slot, queue.data_base, queue.data_limit)
    x = random_fp16(rng, (3, 40))
    for expected, desc in cases:
        assert isa.check_descriptor(desc, view, env.cfg) == expected, (expected, desc)
        seq = queue.next_seq
        poison = bytes([0xA5]) * 256               # the result area must stay as it is
        await env.transport.mem_write(queue.cq_slot(seq) + slots.CQ_PAYLOAD, poison, 0)
        env.device_reads()
        payload = x.tobytes() if desc.in_size * 64 <= queue.payload_room else b""
        completion = await queue.run(desc, payload[:desc.in_size * 64])
        assert completion.status == expected, (completion, expected, desc)
        if expected != Status.OK:
            after = await env.transport.mem_read(queue.cq_slot(seq) + slots.CQ_PAYLOAD, 256, 0)
            assert after == poison, f"{expected.name}: result area written"
            if desc.dev_size:
                own_slot = (queue.sq_slot(seq), queue.sq_slot(seq) + queue.slot_bytes)    # its fetch
                assert not env.device_read(desc.dev_addr, desc.dev_addr + desc.dev_size * 64, [own_slot]), \
                    f"{expected.name}: device operand read"
            assert await queue.read_status() == (expected, True)
            await queue.clear_error()
            assert await queue.read_status() == (expected, False)
        else:
            out = np.frombuffer(completion.result, np.float16).reshape(3, 24)
            assert_bits_equal(out, golden.gemm(x, w, dev.caps.lanes), "after the errors")
        assert await queue.read_head() == seq


@scenario
async def doorbell_before_valid_word(env):
    """CXL.io may overtake CXL.mem: the doorbell arrives before the valid word. The device
    must wait for the valid word, and must not run the slot's stale content meanwhile."""
    dev = env.dev
    queue = await env.setup_queue(0, log2_depth=1, log2_slot=14)
    t = env.transport
    rng = np.random.default_rng(PROTOCOL_SEED + 1)
    w = random_fp16(rng, (32, 16))
    tensor = await dev.upload(w)
    x = random_fp16(rng, (1, 32))
    # stale content in slot 0: a valid-looking store descriptor that would overwrite the
    # weights, with a valid word that is not the expected sequence number 1
    stale = Descriptor(type=DescType.STORE, dtype=Dtype.FP16, dev_addr=tensor.addr,
                       dev_size=tensor.size_lines, dev_rows=32, dev_cols=16,
                       in_size=tensor.size_lines, in_rows=32, in_cols=16)
    slot = queue.sq_slot(1)
    await t.mem_write(slot + slots.SQ_PAYLOAD, bytes(tensor.size_lines * 64), 0)
    await t.mem_write(slot + slots.SQ_DESC, stale.pack(), 0)
    await t.mem_write(slot + slots.SQ_VALID, U64.pack(3), 0)      # an old sequence number
    # now the real submission, with the doorbell first
    desc = gemm_desc(tensor, 1, Op.GEMV)
    await t.mem_write(slot + slots.SQ_PAYLOAD, x.tobytes(), 0)
    await t.reg_write(regs.queue_reg(0, regs.DOORBELL), 1, 0)
    await env.cycles(2000)
    assert await queue.read_head() == 0, "completed before its valid word was written"
    header = await t.mem_read(queue.cq_slot(1), 64, 0)
    assert U64.unpack_from(header, 0)[0] == 0
    await t.mem_write(slot + slots.SQ_DESC, desc.pack(), 0)
    await env.cycles(500)
    assert await queue.read_head() == 0, "took the descriptor without its valid word"
    await t.mem_write(slot + slots.SQ_VALID, U64.pack(1), 0)
    # hand the slot to the driver's bookkeeping, as if it had submitted seq 1
    queue._in_use[1] = desc
    queue.next_seq = 2
    completion = await queue.wait(1)
    assert completion.status == Status.OK
    assert_bits_equal(np.frombuffer(completion.result, np.float16), golden.gemv(x[0], w, dev.caps.lanes), "gemv")
    weights = await t.mem_read(tensor.addr, 32 * 16 * 2, 0)
    assert weights == w.tobytes(), "the stale store ran"


@scenario
async def sequence_numbers_wrap(env):
    """Sequence numbers run over 3x the queue depth and more; several in flight."""
    dev = env.dev
    depth_log2 = 2
    queue = await env.setup_queue(0, log2_depth=depth_log2, log2_slot=12)
    rng = np.random.default_rng(PROTOCOL_SEED + 2)
    w = random_fp16(rng, (24, 20))
    tensor = await dev.upload(w)
    depth = 1 << depth_log2
    done = 0
    while done < 4 * depth + 1:
        batch = min(depth, 4 * depth + 1 - done)
        xs = [random_fp16(rng, (2, 24)) for _ in range(batch)]
        seqs = await queue.submit_many([(gemm_desc(tensor, 2), x.tobytes()) for x in xs])
        for seq, x in zip(reversed(seqs), reversed(xs)):       # consume out of order
            completion = (await queue.wait(seq)).check()
            assert_bits_equal(np.frombuffer(completion.result, np.float16).reshape(2, 20),
                              golden.gemm(x, w, dev.caps.lanes), f"seq {seq}")
        done += batch
    assert queue.next_seq == 4 * depth + 2
    assert await queue.read_head() == 4 * depth + 1


@scenario
async def pasid_bound_queues_interleaved(env):
    """Two queues bound to different PASIDs run interleaved; neither PASID may touch the
    other's rings over CXL.mem, nor ring the other's doorbell."""
    dev = env.dev
    t = env.transport
    qa = await env.setup_queue(0, pasid=0x11, log2_depth=2, log2_slot=13)
    qb = await env.setup_queue(1, pasid=0x22, log2_depth=2, log2_slot=13, irq=True)
    rng = np.random.default_rng(PROTOCOL_SEED + 3)
    wa, wb = random_fp16(rng, (48, 40)), random_fp16(rng, (20, 70))
    ta, tb = await dev.upload(wa, queue=0), await dev.upload(wb, queue=1)
    pending = []
    for i in range(6):
        xa, xb = random_fp16(rng, (1 + i % 3, 48)), random_fp16(rng, (1 + i % 2, 20))
        sa = await qa.submit(gemm_desc(ta, len(xa)), xa.tobytes())
        sb = await qb.submit(gemm_desc(tb, len(xb)), xb.tobytes())
        pending += [(qb, sb, xb, wb), (qa, sa, xa, wa)]
        if len(pending) >= 6:
            for queue, seq, x, w in pending:
                completion = (await queue.wait(seq)).check()
                got = np.frombuffer(completion.result, np.float16).reshape(len(x), w.shape[1])
                assert_bits_equal(got, golden.gemm(x, w, dev.caps.lanes), f"queue {queue.index} seq {seq}")
            pending = []
    # cross-PASID ring accesses answer SLVERR, read zeros, change nothing
    for pasid, ring in ((0x22, qa.sq_base), (0x11, qb.cq_base + 64), (0, qa.cq_base)):
        before = await t.mem_read(ring, 64, 0x11 if ring < qb.sq_base else 0x22)
        await refused(t.mem_write(ring, bytes(64), pasid), MemAccessError, f"ring write at {ring:#x} from PASID {pasid:#x}")
        await refused(t.mem_read(ring, 64, pasid), MemAccessError, f"ring read at {ring:#x} from PASID {pasid:#x}")
        after = await t.mem_read(ring, 64, 0x11 if ring < qb.sq_base else 0x22)
        assert after == before
    await refused(t.reg_write(regs.queue_reg(0, regs.DOORBELL), 1, 0x22), RegisterAccessError,
                  "queue 0 doorbell from PASID 0x22")
    # ordinary HDM outside every ring is open to any PASID
    await t.mem_write(qa.data_limit - 128, b"\x5a" * 100, 0x33)
    assert await t.mem_read(qa.data_limit - 128, 100, 0x44) == b"\x5a" * 100


@scenario
async def load_and_store(env):
    """type STORE writes the slot's input into the device operand; type LOAD reads it back."""
    dev = env.dev
    await env.setup_queue(0, log2_depth=1, log2_slot=16)
    rng = np.random.default_rng(PROTOCOL_SEED + 4)
    for rows, cols in [(1, 1), (3, 37), (64, 200), (130, 97)]:
        array = random_fp16(rng, (rows, cols), special=True)
        tensor = await dev.upload(np.zeros((rows, cols), np.float16))
        await dev.store(tensor, array)
        stored = await env.transport.mem_read(tensor.addr, rows * cols * 2, 0)
        assert stored == array.tobytes(), f"store {rows}x{cols}"
        loaded = await dev.load(tensor)
        assert loaded.tobytes() == array.tobytes(), f"load {rows}x{cols}"
        dev.queue().free_all()


@scenario
async def queue_reset_restarts_sequence(env):
    """Turning a queue off and on restarts its sequence numbers at 1."""
    dev = env.dev
    rng = np.random.default_rng(PROTOCOL_SEED + 5)
    w = random_fp16(rng, (8, 8))
    for round_ in range(2):
        q = env.cfg.num_queues - 1
        queue = await env.setup_queue(q, log2_depth=1, log2_slot=12)
        tensor = await dev.upload(w, queue=q)
        for _ in range(3):
            x = random_fp16(rng, (1, 8))
            assert_bits_equal(await dev.gemv(x[0], tensor, queue=q), golden.gemv(x[0], w, dev.caps.lanes), f"round {round_}")
        # HEAD follows the completion word once its write is answered: a host that reads
        # the completion straight from memory may be a few cycles ahead of it
        for _ in range(8):
            if await queue.read_head() == 3:
                break
            await env.transport.wait_cycles(8)
        assert await queue.read_head() == 3



@scenario
async def operand_rewritten_between_descriptors(env):
    """The same device operand, rewritten by a STORE and then by the host between GEMVs:
    each GEMV sees the operand as it is then (the model keeps operands between
    descriptors; this would catch a stale one)."""
    dev = env.dev
    await env.setup_queue(0, log2_slot=14)
    rng = np.random.default_rng(PROTOCOL_SEED + 6)
    x = random_fp16(rng, (1, 40))
    w = random_fp16(rng, (40, 24))
    tensor = await dev.upload(w)
    assert_bits_equal(await dev.gemv(x[0], tensor), golden.gemv(x[0], w, dev.caps.lanes), "first")
    w2 = random_fp16(rng, (40, 24))
    await dev.store(tensor, w2)
    assert_bits_equal(await dev.gemv(x[0], tensor), golden.gemv(x[0], w2, dev.caps.lanes), "after a STORE")
    w3 = random_fp16(rng, (40, 24))
    await env.transport.mem_write(tensor.addr, w3.tobytes(), 0)
    assert_bits_equal(await dev.gemv(x[0], tensor), golden.gemv(x[0], w3, dev.caps.lanes), "after a host write")


def assert_fp32_equal(got, expected, what):
    got, expected = np.asarray(got, np.float32), np.asarray(expected, np.float32)
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    bad = np.argwhere(got.view(np.uint32) != expected.view(np.uint32))
    assert bad.size == 0, (f"{what}: {len(bad)} of {got.size} FP32 values differ; first at {tuple(bad[0])}: "
                           f"got {got[tuple(bad[0])]!r}, expected {expected[tuple(bad[0])]!r}")


@scenario
async def softmax_rows(env):
    """SOFTMAX on the device, normalized and PARTIAL, bit-exact against the golden model
    (values, and the anchors m and l), and within 1e-3 of float64 on rows in [-16, 16]."""
    dev = env.dev
    await env.setup_queue(0, log2_slot=16)
    rng = np.random.default_rng(PROTOCOL_SEED + 7)
    lanes = dev.caps.lanes
    for m, n in [(1, 1), (3, lanes - 1), (5, lanes + 1), (2, 3 * lanes + 5), (1, min(600, dev.caps.k_max))]:
        x = rng.uniform(-16, 16, (m, n)).astype(np.float16)
        if n > 8:
            x[0, 3] = -np.inf                               # exp(-inf) = 0
        for partial in (False, True):
            expected = golden.softmax_rows(x.astype(np.float32), partial, dev.caps.softmax_lanes)
            got = await dev.softmax(x, partial=partial)
            if partial:
                assert_bits_equal(got[0], expected[0], f"softmax partial {m}x{n}")
                assert_fp32_equal(got[1], expected[1], f"m of {m}x{n}")
                assert_fp32_equal(got[2], expected[2], f"l of {m}x{n}")
            else:
                assert_bits_equal(got, expected[0], f"softmax {m}x{n}")
                x64 = x.astype(np.float64)
                ref = np.exp(x64 - x64.max(axis=1, keepdims=True))
                ref /= ref.sum(axis=1, keepdims=True)
                assert np.max(np.abs(got - ref)) <= 1e-3, f"softmax {m}x{n} off float64 by more than 1e-3"
    dev.queue().free_all()


@scenario
async def lora_e3_e4(env):
    """LoRA E4 (x A, one GEMM) and E3 ((x A) B in one descriptor, x A kept on the device),
    batches above and below ROWS, ranks packed and not; bit-exact against the golden model."""
    dev = env.dev
    await env.setup_queue(0, log2_slot=16)
    rng = np.random.default_rng(PROTOCOL_SEED + 8)
    lanes, rows = dev.caps.lanes, dev.caps.rows
    for d, r, batch in [(64, 8, 1), (96, 16, rows + 1), (2 * lanes + 3, lanes + 5, 2), (40, 1, 3)]:
        a = random_fp16(rng, (d, r))
        b = random_fp16(rng, (r, d))
        x = random_fp16(rng, (batch, d))
        adapter = await dev.upload_lora(a, b)
        assert_bits_equal(await dev.lora_xa(x, adapter), golden.gemm(x, a, lanes), f"E4 {batch}x{d}x{r}")
        assert_bits_equal(await dev.lora_xab(x, adapter), golden.lora_xab(x, a, b, lanes), f"E3 {batch}x{d}x{r}")
    dev.queue().free_all()


def golden_attention(q, k, v, caps, token_major):
    """What the device of capabilities `caps` returns for one KV head: k and v (T x d), the
    keys stored token-major (TRANS_W) or as K^T."""
    return golden.attention_partial_kv(q, k, v, caps.lanes, token_major, caps.softmax_lanes)


@scenario
async def attention_split_over_devices(env):
    """Integral attention for one KV head, its tokens split unevenly over shards (devices;
    here one device holds every shard): each shard's O, m and l bit-exact against the
    golden model, and the merged result within 2e-3 of float64 softmax(q K^T / sqrt(d)) V."""
    from driver.attention import attention_reference, merge_attention, scale_query
    dev = env.dev
    await env.setup_queue(0, log2_slot=16)
    rng = np.random.default_rng(PROTOCOL_SEED + 9)
    lanes = dev.caps.lanes
    for d, group, split in [(64, 1, [0, 1, 30, 9]), (128, 2, [17, 0, 1]), (64, 4, [5])]:
        total = sum(split)
        q = rng.standard_normal((group, d)).astype(np.float16)
        k = rng.standard_normal((total, d)).astype(np.float16)
        v = rng.standard_normal((total, d)).astype(np.float16)
        partials, start = [], 0
        for t in split:
            if t == 0:
                partials.append(None)
                continue
            ks, vs = k[start:start + t], v[start:start + t]
            start += t
            # both layouts of the keys: token-major (TRANS_W, the driver's) and K^T
            for token_major in (True, False):
                block = await dev.upload_kv(ks, vs, token_major=token_major)
                o, m, l = await dev.attention_partial(q, block)
                eo, em, el = golden_attention(scale_query(q), ks, vs, dev.caps, token_major)
                what = f"d={d} t={t} {'token-major' if token_major else 'K^T'}"
                assert_fp32_equal(o, eo, f"O, {what}")
                assert_fp32_equal(m, em, f"m, {what}")
                assert_fp32_equal(l, el, f"l, {what}")
            partials.append((o, m, l))
        merged = merge_attention(partials)
        error = np.max(np.abs(merged - attention_reference(q, k, v)))
        assert error <= 2e-3, f"merged attention d={d} split {split}: {error:.2e} from float64"
        dev.queue().free_all()


@scenario
async def decode_step_burst(env):
    """One decode step of attention for a batch of requests as one burst, GQA (4 query
    heads on 2 KV heads) and MHA: every queue gets at least 4 descriptors in flight (one per
    request and KV head), the doorbells ring after all are written, and completions are
    consumed in a shuffled order across queues."""
    from driver.attention import query_groups, scale_query
    from isa.encoders import attention_descriptor
    dev = env.dev
    nq = dev.caps.num_queues
    queues = [await env.setup_queue(q, log2_depth=3, log2_slot=12) for q in range(nq)]
    rng = np.random.default_rng(PROTOCOL_SEED + 10)
    lanes, d = dev.caps.lanes, 32
    for q_heads, kv_heads in [(4, 2), (2, 2)]:
        groups = query_groups(q_heads, kv_heads)
        expected, pending = {}, []
        for req in range(2 * nq):                         # 2 requests x 2 KV heads per queue
            queue = queues[req % nq]
            tokens = 3 + 5 * req
            q = rng.standard_normal((q_heads, d)).astype(np.float16)
            items = []
            for heads in groups:
                k = rng.standard_normal((tokens, d)).astype(np.float16)
                v = rng.standard_normal((tokens, d)).astype(np.float16)
                token_major = req % 2 == 0              # both layouts in one burst
                block = await dev.upload_kv(k, v, queue=queue.index, token_major=token_major)
                qs = scale_query(q[heads])
                items.append((attention_descriptor(block, len(heads)), qs.tobytes()))
                expected[(queue.index, queue.next_seq + len(items) - 1)] = golden_attention(
                    qs, k, v, dev.caps, token_major)
            seqs = await queue.submit_many(items, ring=False)
            pending += [(queue, seq) for seq in seqs]
        assert all(len(queue.outstanding) >= 4 for queue in queues)
        for queue in queues:
            await queue.ring()
        for i in rng.permutation(len(pending)):
            queue, seq = pending[i]
            completion = (await queue.wait(seq)).check()
            eo, em, el = expected[(queue.index, seq)]
            rows = len(em)
            o = np.frombuffer(completion.result, "<f4", rows * d).reshape(rows, d)
            offset = isa.validate.stats_offset(completion.descriptor)
            stats = np.frombuffer(completion.result[offset:], "<f4").reshape(rows, -1)
            what = f"{q_heads}/{kv_heads} heads, queue {queue.index} seq {seq}"
            assert_fp32_equal(o, eo, f"{what}: O")
            assert_fp32_equal(stats[:, 0], em, f"{what}: m")
            assert_fp32_equal(stats[:, 1], el, f"{what}: l")
        for queue in queues:
            queue.free_all()

    # the same through the driver's entry point: 2 requests x 2 KV heads, GQA 4 / 2
    requests, expected = [], []
    for req in range(2):
        q = rng.standard_normal((4, d)).astype(np.float16)
        blocks, want = [], []
        for h, heads in enumerate(query_groups(4, 2)):
            k = rng.standard_normal((7 + req, d)).astype(np.float16)
            v = rng.standard_normal((7 + req, d)).astype(np.float16)
            blocks.append(await dev.upload_kv(k, v, queue=queues[(2 * req + h) % nq].index))
            want.append(golden_attention(scale_query(q[heads]), k, v, dev.caps, True))
        requests.append((q, blocks))
        expected.append(want)
    got = await dev.attention_decode(requests)
    for req, (heads_got, heads_want) in enumerate(zip(got, expected)):
        for h, (g, e) in enumerate(zip(heads_got, heads_want)):
            for name, a, b in zip("Oml", g, e):
                assert_fp32_equal(a, b, f"attention_decode request {req} head {h} {name}")


@scenario
async def scheduler_step_replay(env):
    """A decode step as the scheduler emits it (scheduler.emit: E3 LORA_XAB, E4 GEMMs, one
    ATTENTION per request, KV head and page the GPU does not hold), for the tiny two-layer
    GQA model with every strategy on some site, replayed on this one device through the
    pool API: the step's output matches a dense float64 computation within the tolerance
    of tests/unit/test_replay.py (the device's FP16 roundings only)."""
    from rtlbench.backend import DRAM_BYTES
    from driver import DevicePool
    from isa.system import load_model
    from scheduler.replay import DenseBackend, PoolBackend, Step, forced_strategies
    model = load_model("tiny")
    ranks = {0: 8, 1: 16}
    requests = [(1, 0, 20), (2, 1, 37), (3, 0, 9)]
    step = Step(model, ranks, requests, np.random.default_rng(COMPUTE_SEED))
    pool = await DevicePool.open([env.transport], log2_depth=3, log2_slot=13, data_limit=DRAM_BYTES)
    backend = PoolBackend(pool, forced_strategies(model, ranks), {1: 2, 2: 2, 3: 0}, 8)
    await backend.place(step)
    out, _ = await step.forward(backend)
    ref, _ = await step.forward(DenseBackend())
    kinds = {op.kind for r in backend.rounds for op in r.device_ops}
    assert kinds == {"lora_xab", "lora_xa", "attention"}, kinds
    error = np.abs(out - ref).max() / np.abs(ref).max()
    assert error < 2e-3, f"replayed step differs from float64 by {error:.2e} of its largest value"


@scenario
async def paged_attention_shares(env):
    """A paged ATTENTION (one descriptor per request-head share, its KV from a page list):
    O, m and l bit-exact against the golden model over the pages' tokens, for pages of
    16 .. 128 tokens, a partial last page, one page, GQA rows. Bad lists: an entry off a
    4 KiB boundary, a page below the range, a page past its end (BAD_PAGE: only the list
    read, nothing written but the completion); the list off 512 bytes or past the range
    (BOUNDS), 65 pages (BAD_SHAPE); the list or a page answered SLVERR (DRAM_ERROR)."""
    dev = env.dev
    queue = await env.setup_queue(0, log2_depth=3, log2_slot=16)
    rng = np.random.default_rng(COMPUTE_SEED + 25)
    lanes = dev.caps.lanes

    def share(tokens, d):
        return (random_fp16(rng, (tokens, d)), random_fp16(rng, (tokens, d)),
                (rng.standard_normal((4, d)) / 8).astype(np.float16))

    for tokens, d, shift, m in [(300, 64, 6, 1), (256, 128, 7, 1), (37, 128, 4, 3), (1, 64, 5, 2),
                                (200, 32, 7, 4), (129, 128, 5, 1)]:
        k, v, q = share(tokens, d)
        list_addr, _ = await place_pages(dev, queue, k, v, shift)
        desc = paged_descriptor(list_addr, tokens, d, shift, m)
        completion = await queue.run(desc, q[:m].tobytes())
        assert completion.status == Status.OK, (tokens, d, shift, completion)
        from isa.encoders import attention_result
        o, mm, ll = attention_result(completion.result, desc)
        tok = 1 << shift
        eo, em, el = golden.attention_partial_paged(q[:m], [k[i:i + tok] for i in range(0, tokens, tok)],
                                                    [v[i:i + tok] for i in range(0, tokens, tok)], lanes,
                                                    dev.caps.softmax_lanes)
        what = f"paged T={tokens} d={d} page={tok} m={m}"
        assert_fp32_equal(o, eo, f"O, {what}")
        assert_fp32_equal(mm, em, f"m, {what}")
        assert_fp32_equal(ll, el, f"l, {what}")
        queue.free_all()

    k, v, q = share(300, 64)
    for spoil, why in [((1, None), "entry off 4 KiB"), ((2, queue.data_base - 4096), "page below the range"),
                       ((0, queue.data_limit - 4096), "page past the range")]:
        list_addr, entries = await place_pages(dev, queue, k, v, 6)
        if spoil[1] is None:
            spoil = (spoil[0], entries[spoil[0]] + 64)
        await dev.transport.mem_write(list_addr + 8 * spoil[0], U64.pack(spoil[1]), queue.pasid)
        if env.monitors_reads:
            env.device_reads()
        completion = await queue.run(paged_descriptor(list_addr, 300, 64, 6, 1), q[:1].tobytes())
        assert completion.status == Status.BAD_PAGE, (why, completion)
        if env.monitors_reads:      # (the fast top has no monitor: the model and the BFM check it)
            pages = [(a, a + 2 * 64 * 64 * 2) for a in entries]
            read = [r for r in env.device_reads() if any(a < r[0] + r[1] and r[0] < b for a, b in pages)]
            assert not read, f"{why}: a page was read: {read}"
        queue.free_all()

    list_addr, _ = await place_pages(dev, queue, k, v, 6)
    for desc, want, why in [
            (with_fields(paged_descriptor(list_addr, 300, 64, 6, 1), dev_addr=list_addr + 64), Status.BOUNDS,
             "list off 512 bytes"),
            (with_fields(paged_descriptor(list_addr, 300, 64, 6, 1), dev_addr=queue.data_limit), Status.BOUNDS,
             "list past the range"),
            (paged_descriptor(list_addr, 65 * 64, 64, 6, 1), Status.BAD_SHAPE, "65 pages"),
            (with_fields(paged_descriptor(list_addr, 300, 64, 6, 1), flags=isa.Flag.PAGED | (6 << PAGE_SHIFT_LSB)), Status.BAD_OP,
             "PAGED without TRANS_W")]:
        completion = await queue.run(desc, q[:1].tobytes())
        assert completion.status == want, (why, completion)

    # a DRAM error on the list, then on a page: DRAM_ERROR; the fault gone, the share runs
    list_addr, entries = await place_pages(dev, queue, k, v, 6)
    desc = paged_descriptor(list_addr, 300, 64, 6, 1)
    for lo, what in [(list_addr, "list"), (entries[3] + 64 * 64 * 2, "page 3's values")]:
        await env.add_dram_fault(lo, lo + 64, RESP_SLVERR, RESP_OKAY)
        completion = await queue.run(desc, q[:1].tobytes())
        assert completion.status == Status.DRAM_ERROR, (what, completion)
        await env.clear_dram_faults()
        await queue.clear_error()
    completion = await queue.run(desc, q[:1].tobytes())
    assert completion.status == Status.OK, completion
    queue.free_all()


@scenario
async def dram_errors_complete_with_dram_error(env):
    """The device's DRAM answers SLVERR or DECERR to one of a descriptor's reads (weights,
    input rows, a LOAD's source) or writes (results, a STORE's destination): the
    descriptor completes DRAM_ERROR with no result reported, the sticky bit is set, the
    other queue is served meanwhile and, the fault gone, the same descriptor runs exactly.
    A refused completion line: no completion, but HEAD moves and STATUS says DRAM_ERROR."""
    dev, line = env.dev, 64
    q0 = await env.setup_queue(0, log2_depth=3, log2_slot=14)
    q1 = await env.setup_queue(1, log2_depth=2, log2_slot=14)
    rng = np.random.default_rng(PROTOCOL_SEED + 9)
    w, w1 = random_fp16(rng, (40, 24)), random_fp16(rng, (24, 40))
    tensor, tensor1 = await dev.upload(w, queue=0), await dev.upload(w1, queue=1)
    target = await dev.upload(np.zeros((4, 32), np.float16), queue=0)
    x, x1 = random_fp16(rng, (3, 40)), random_fp16(rng, (2, 24))
    expected, expected1 = golden.gemm(x, w, dev.caps.lanes), golden.gemm(x1, w1, dev.caps.lanes)

    async def gemm_ok(queue, tensor_, x_, want, what):
        completion = await queue.run(gemm_desc(tensor_, len(x_)), x_.tobytes())
        assert completion.status == Status.OK, (what, completion)
        got = np.frombuffer(completion.result, np.float16).reshape(want.shape)
        assert_bits_equal(got, want, what)

    async def fails(what, lo, hi, read, write, run):
        await env.add_dram_fault(lo, hi, read, write)
        await run()
        assert await q0.read_status() == (Status.DRAM_ERROR, True), what
        await gemm_ok(q1, tensor1, x1, expected1, f"queue 1 during the {what} fault")
        await env.clear_dram_faults()
        await q0.clear_error()
        await gemm_ok(q0, tensor, x, expected, f"after the {what} fault")

    async def gemm_fails(what):
        completion = await q0.run(gemm_desc(tensor, 3), x.tobytes())
        assert completion.status == Status.DRAM_ERROR and completion.result == b"", (what, completion)

    async def raises_dram_error(access, what):
        try:
            await access
        except CompletionError as error:
            assert error.status == Status.DRAM_ERROR, (what, error)
            return
        raise AssertionError(f"{what}: completed OK over a DRAM error")

    next_sq = lambda: q0.sq_slot(q0.next_seq) + slots.SQ_PAYLOAD
    next_cq = lambda: q0.cq_slot(q0.next_seq) + slots.CQ_PAYLOAD
    cases = [
        ("weight read SLVERR", tensor.addr + line, tensor.addr + 2 * line, RESP_SLVERR, RESP_OKAY, gemm_fails),
        ("weight read DECERR", tensor.addr + (tensor.size_lines - 1) * line, tensor.addr + tensor.size_lines * line, RESP_DECERR, RESP_OKAY, gemm_fails),
        ("input read", next_sq, lambda: next_sq() + line, RESP_SLVERR, RESP_OKAY, gemm_fails),
        ("result write SLVERR", next_cq, lambda: next_cq() + line, RESP_OKAY, RESP_SLVERR, gemm_fails),
        ("result write DECERR", lambda: next_cq() + line, lambda: next_cq() + 2 * line, RESP_OKAY, RESP_DECERR, gemm_fails),
        ("LOAD read", tensor.addr, tensor.addr + line, RESP_SLVERR, RESP_OKAY,
         lambda what: raises_dram_error(dev.load(tensor), what)),
        ("STORE write", target.addr + line, target.addr + 2 * line, RESP_OKAY, RESP_DECERR,
         lambda what: raises_dram_error(dev.store(target, random_fp16(rng, (4, 32))), what)),
    ]
    for what, lo, hi, read, write, run in cases:
        lo, hi = (lo() if callable(lo) else lo), (hi() if callable(hi) else hi)
        await fails(what, lo, hi, read, write, lambda: run(what))

    # the completion line itself refused: the driver's wait times out, HEAD and STATUS tell
    seq = q0.next_seq
    await env.add_dram_fault(q0.cq_slot(seq), q0.cq_slot(seq) + line, RESP_OKAY, RESP_DECERR)
    try:
        await q0.run(gemm_desc(tensor, 3), x.tobytes(), timeout_cycles=4_000)
    except DeviceTimeout:
        pass
    else:
        raise AssertionError("a completion arrived through a refused completion line")
    assert await q0.read_head() == seq
    assert await q0.read_status() == (Status.DRAM_ERROR, True)
    await env.clear_dram_faults()
    await q0.clear_error()
    await gemm_ok(q0, tensor, x, expected, "after the refused completion line")
