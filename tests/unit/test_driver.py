"""The host driver against a small in-memory fake device (pure Python, asyncio).

The fake records every transport call (with a begin and an end, so that a write not
awaited to its response would show) and emulates just enough of the device: registers,
PASID checks, and a queue engine that runs when the host lets cycles pass.
"""
import asyncio
import collections
import dataclasses
import struct
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from isa import DescType, Descriptor, Dtype, Op, QueueView, Status, check_descriptor, load_config, regs, slots
from isa import validate
from isa.descriptor import Flag, page_flags
from driver import (CompletionError, DeviceNotFound, DeviceTimeout, MemAccessError, NdpDevice,
                    OutOfDeviceMemory, QueueFull, RegisterAccessError, Transport, merge_attention)
from isa.encoders import (DeviceTensor, KvBlock, LoraAdapter, PagedKvShare, attention_descriptor,
                          page_list_bytes, paged_attention_descriptor)
from isa.errors import ArgumentError, NdpError, ShapeError
from driver.attention import attention_reference, partial_attention_reference, scale_query
from sim import golden

U64 = struct.Struct("<Q")
Call = collections.namedtuple("Call", "kind phase addr data pasid")

SQ_BASE, CQ_BASE = 0x0000, 0x8000
DATA_BASE, DATA_LIMIT = 0x10000, 0x100000
LOG2_DEPTH, LOG2_SLOT = 2, 10          # 4 slots of 1 KiB: 960 bytes of payload each


class FakeDevice(Transport):
    """A test double of the device behind a transport."""

    def __init__(self, cfg=None, ident=regs.ID_VALUE, mem_bytes=DATA_LIMIT):
        self.cfg = cfg or load_config("default")
        self.ident = ident
        self.mem = bytearray(mem_bytes)
        self.log = []
        self.regs = collections.defaultdict(int)
        self.expected = collections.defaultdict(lambda: 1)   # queue -> next seq to take
        self.tail = collections.defaultdict(int)             # queue -> last doorbell value
        self.irq_pending = collections.defaultdict(int)
        self.supports_irq = True
        self.stalled = False          # the queue engine does nothing
        self.force_status = None      # complete everything with this status
        self.cycles = self.waits = 0  # host waits, to stop a driver that never gives up

    # ---- transport ----
    async def mem_write(self, addr, data, pasid):
        self._check_slot_access(addr, len(data), pasid, write=True)
        self.log.append(Call("mem_write", "begin", addr, bytes(data), pasid))
        await asyncio.sleep(0)        # a write someone forgets to await ends after later calls
        self.mem[addr:addr + len(data)] = data
        self.log.append(Call("mem_write", "end", addr, bytes(data), pasid))

    async def mem_read(self, addr, length, pasid):
        self._check_slot_access(addr, length, pasid, write=False)
        self.log.append(Call("mem_read", "end", addr, length, pasid))
        return bytes(self.mem[addr:addr + length])

    async def reg_write(self, offset, value, pasid):
        self.log.append(Call("reg_write", "begin", offset, value, pasid))
        q, reg = divmod(offset - regs.QUEUE_BASE, regs.QUEUE_STRIDE)
        if reg == regs.DOORBELL:
            if pasid != self._pasid(q):
                raise RegisterAccessError(offset, pasid, "SLVERR")
            self.tail[q] = value
        elif pasid != regs.HOST_PASID:
            raise RegisterAccessError(offset, pasid, "SLVERR")
        else:
            if reg == regs.CTRL and value & regs.CTRL_ENABLE and not self.regs[offset] & regs.CTRL_ENABLE:
                self.expected[q], self.tail[q] = 1, 0
            self.regs[offset] = value
        self.log.append(Call("reg_write", "end", offset, value, pasid))

    async def reg_read(self, offset, pasid=0):
        glob = {regs.ID: self.ident, regs.VERSION: regs.VERSION_VALUE,
                regs.NUM_QUEUES: self.cfg.num_queues, regs.LANES: self.cfg.lanes,
                regs.ROWS: self.cfg.rows, regs.IN_BUF_BYTES: self.cfg.in_buf_bytes,
                regs.OUT_BUF_BYTES: self.cfg.out_buf_bytes, regs.DRAM_BUF_BYTES: self.cfg.dram_buf_bytes}
        return glob[offset] if offset in glob else self.regs[offset]

    async def wait_cycles(self, n):
        self.log.append(Call("wait_cycles", "end", None, n, None))
        self._pass_time(n)

    async def wait_irq(self, queue, timeout_cycles):
        self.log.append(Call("wait_irq", "end", queue, timeout_cycles, None))
        self._pass_time(timeout_cycles)
        if self.irq_pending[queue]:
            self.irq_pending[queue] -= 1
            return True
        return False

    def _pass_time(self, n):
        self.cycles += n
        self.waits += 1
        if self.cycles > 10**7 or self.waits > 10**5:
            raise RuntimeError("the driver waits forever")
        self._run_queues()

    # ---- the device's view of a queue ----
    def _reg(self, q, offset):
        return self.regs[regs.queue_reg(q, offset)]

    def _reg64(self, q, lo, hi):
        return self._reg(q, lo) | self._reg(q, hi) << 32

    def _pasid(self, q):
        return self._reg(q, regs.CFG) >> regs.CFG_PASID[0]

    def _geometry(self, q):
        cfg = self._reg(q, regs.CFG)
        return cfg & 0xF, (cfg >> regs.CFG_LOG2_SLOT[0]) & 0xFF

    def _enabled(self):
        return [q for q in range(self.cfg.num_queues) if self._reg(q, regs.CTRL) & regs.CTRL_ENABLE]

    def _check_slot_access(self, addr, length, pasid, write):
        for q in self._enabled():
            log2_depth, log2_slot = self._geometry(q)
            for lo in (regs.SQ_BASE_LO, regs.CQ_BASE_LO):
                base = self._reg64(q, lo, lo + 4)
                if addr < base + (1 << (log2_depth + log2_slot)) and base < addr + length \
                        and pasid != self._pasid(q):
                    raise MemAccessError(addr, length, pasid, "SLVERR", write)

    def _run_queues(self):
        if self.stalled:
            return
        for q in self._enabled():
            log2_depth, log2_slot = self._geometry(q)
            sq = self._reg64(q, regs.SQ_BASE_LO, regs.SQ_BASE_HI)
            cq = self._reg64(q, regs.CQ_BASE_LO, regs.CQ_BASE_HI)
            view = QueueView(log2_slot, self._reg64(q, regs.DATA_BASE_LO, regs.DATA_BASE_HI),
                             self._reg64(q, regs.DATA_LIMIT_LO, regs.DATA_LIMIT_HI))
            while (self.expected[q] - 1) % (1 << 32) != self.tail[q]:
                seq = self.expected[q]
                s_slot = slots.slot_addr(sq, seq, log2_depth, log2_slot)
                if U64.unpack_from(self.mem, s_slot + slots.SQ_VALID)[0] != seq:
                    break     # not yet valid: look again later
                desc = Descriptor.unpack(bytes(self.mem[s_slot:s_slot + 32]))
                payload = bytes(self.mem[s_slot + slots.SQ_PAYLOAD:s_slot + (1 << log2_slot)])
                status = self.force_status or check_descriptor(desc, view, self.cfg)
                if status == Status.OK and validate.paged(desc):
                    status = validate.check_pages(desc, self._page_entries(desc), view, self.cfg)
                c_slot = slots.slot_addr(cq, seq, log2_depth, log2_slot)
                if status == Status.OK:
                    result = self._execute(desc, payload)
                    self.mem[c_slot + slots.CQ_PAYLOAD:c_slot + slots.CQ_PAYLOAD + len(result)] = result
                header = bytearray(slots.HEADER_BYTES)
                struct.pack_into("<QIIQ", header, 0, seq, status, 0, 100 + seq)
                self.mem[c_slot:c_slot + slots.HEADER_BYTES] = header
                if self._reg(q, regs.CTRL) & regs.CTRL_IRQ_ENABLE:
                    self.irq_pending[q] += 1
                self.expected[q] = seq + 1

    def _page_entries(self, desc):
        return [U64.unpack_from(self.mem, desc.dev_addr + 8 * p)[0] for p in range(validate.page_count(desc))]

    def _execute(self, desc, payload):
        if desc.type == DescType.READ_COMPUTE and desc.op == Op.ATTENTION and validate.paged(desc):
            return self._paged_attention(desc, payload)
        dev = self.mem[desc.dev_addr:desc.dev_addr + desc.dev_size * 64]
        if desc.type == DescType.LOAD:
            return bytes(dev)
        if desc.type == DescType.STORE:
            self.mem[desc.dev_addr:desc.dev_addr + desc.in_size * 64] = payload[:desc.in_size * 64]
            return b""
        m, k, n = desc.in_rows, desc.dev_rows, desc.dev_cols
        x = np.frombuffer(payload, "<f2", m * k).reshape(m, k).astype(np.float32)
        w = np.frombuffer(bytes(dev), "<f2", k * n).reshape(k, n).astype(np.float32)
        return (x @ w).astype("<f2").tobytes()

    def _paged_attention(self, desc, payload):
        """A paged ATTENTION as docs/read-compute-project.md defines it: the golden model over
        the listed pages' tokens (K at a page's address, V page_half_bytes after it)."""
        m, d, half = desc.in_rows, desc.dev_cols, validate.page_half_bytes(desc)
        q = np.frombuffer(payload, "<f2", m * d).reshape(m, d)
        ks, vs = [], []
        for addr, t in validate.page_extents(desc, self._page_entries(desc)):
            ks.append(np.frombuffer(bytes(self.mem[addr:addr + t * d * 2]), "<f2").reshape(t, d))
            vs.append(np.frombuffer(bytes(self.mem[addr + half:addr + half + t * d * 2]), "<f2").reshape(t, d))
        o, m_, l_ = golden.attention_partial_paged(q, ks, vs, self.cfg.lanes, self.cfg.softmax_lanes)
        result = bytearray(validate.result_bytes(desc))
        result[:m * d * 4] = np.asarray(o, "<f4").tobytes()
        for r in range(m):
            struct.pack_into("<ff", result, validate.stats_offset(desc) + 64 * r, m_[r], l_[r])
        return bytes(result)

    # ---- what the tests look at ----
    def calls(self, kind, phase=None):
        return [c for c in self.log if c.kind == kind and (phase is None or c.phase == phase)]

    def index(self, kind, phase, addr):
        return next(i for i, c in enumerate(self.log) if (c.kind, c.phase, c.addr) == (kind, phase, addr))


def run(coro):
    return asyncio.run(coro)


async def open_with_queue(fake=None, q=0, pasid=0, irq=False, **geometry):
    fake = fake or FakeDevice()
    dev = await NdpDevice.open(fake)
    args = dict(sq_base=SQ_BASE, cq_base=CQ_BASE, data_base=DATA_BASE, data_limit=DATA_LIMIT,
                log2_depth=LOG2_DEPTH, log2_slot=LOG2_SLOT)
    args.update(geometry)
    queue = await dev.configure_queue(q, pasid=pasid, irq=irq, **args)
    return fake, dev, queue


def fp16(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float16)


def reference(x, w):
    return (x.astype(np.float32) @ w.astype(np.float32)).astype(np.float16)


def gemv_descriptor(addr, k, n):
    return Descriptor(type=DescType.READ_COMPUTE, op=Op.GEMV, dtype=Dtype.FP16, dev_addr=addr,
                      dev_size=-(-k * n * 2 // 64), dev_rows=k, dev_cols=n,
                      in_size=-(-k * 2 // 64), in_rows=1, in_cols=k)


# ---- opening ----------------------------------------------------------------------------

def test_open_reads_capabilities():
    fake, dev, _ = run(open_with_queue())
    cfg = fake.cfg
    assert dev.caps.num_queues == cfg.num_queues and dev.caps.rows == cfg.rows
    assert dev.caps.version == regs.VERSION_VALUE
    assert (dev.caps.k_max, dev.caps.n_max) == (cfg.k_max, cfg.n_max)


def test_open_refuses_wrong_id():
    with pytest.raises(DeviceNotFound, match="0x12345678"):
        run(NdpDevice.open(FakeDevice(ident=0x12345678)))


def test_driver_imports_without_cocotb():
    code = "import sys, driver; assert 'cocotb' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- configuring --------------------------------------------------------------------------

def test_configure_zeroes_ring_headers_before_enabling():
    fake = FakeDevice()
    fake.mem[:] = b"\xab" * len(fake.mem)
    for i in range(1 << LOG2_DEPTH):      # stale valid and completion words equal to new seqs
        U64.pack_into(fake.mem, SQ_BASE + (i << LOG2_SLOT) + slots.SQ_VALID, i + 1)
        U64.pack_into(fake.mem, CQ_BASE + (i << LOG2_SLOT) + slots.CQ_SEQ, i + 1)
    fake, dev, queue = run(open_with_queue(fake))
    ctrl = regs.queue_reg(0, regs.CTRL)
    ctrl_writes = [i for i, c in enumerate(fake.log) if c.kind == "reg_write" and c.addr == ctrl
                   and c.phase == "end"]
    assert [fake.log[i].data for i in ctrl_writes] == [0, regs.CTRL_ENABLE]
    for i in range(queue.depth):
        for base in (SQ_BASE, CQ_BASE):
            slot = base + (i << LOG2_SLOT)
            assert fake.mem[slot:slot + slots.HEADER_BYTES] == bytes(slots.HEADER_BYTES)
            zeroed_at = fake.index("mem_write", "end", slot)
            assert ctrl_writes[0] < zeroed_at < ctrl_writes[1]


def test_configure_writes_registers_as_host():
    fake, dev, queue = run(open_with_queue(q=2, pasid=7, irq=True))
    for lo, hi, value in ((regs.SQ_BASE_LO, regs.SQ_BASE_HI, SQ_BASE), (regs.CQ_BASE_LO, regs.CQ_BASE_HI, CQ_BASE),
                          (regs.DATA_BASE_LO, regs.DATA_BASE_HI, DATA_BASE),
                          (regs.DATA_LIMIT_LO, regs.DATA_LIMIT_HI, DATA_LIMIT)):
        assert fake._reg64(2, lo, hi) == value
    assert fake._reg(2, regs.CFG) == regs.cfg_value(LOG2_DEPTH, LOG2_SLOT, 7)
    assert fake._reg(2, regs.CTRL) == regs.CTRL_ENABLE | regs.CTRL_IRQ_ENABLE
    assert all(c.pasid == regs.HOST_PASID for c in fake.calls("reg_write"))
    assert all(c.pasid == regs.HOST_PASID for c in fake.calls("mem_write"))
    assert (queue.index, queue.pasid, queue.next_seq, queue.depth) == (2, 7, 1, 4)


def test_configure_high_addresses_split_lo_hi():
    big = 0x1234_5678_0000_0000
    fake = FakeDevice()

    async def discard(addr, data, pasid):       # the fake's memory does not reach that high
        pass

    async def body():
        dev = await NdpDevice.open(fake)
        fake.mem_write = discard
        await dev.configure_queue(1, big, big + 0x10000, big + 0x20000, big + 0x40000, 1, 6)
    run(body())
    assert fake._reg(1, regs.SQ_BASE_LO) == 0 and fake._reg(1, regs.SQ_BASE_HI) == 0x1234_5678
    assert fake._reg64(1, regs.DATA_LIMIT_LO, regs.DATA_LIMIT_HI) == big + 0x40000


def test_reconfigure_disables_first_and_never_takes_a_stale_completion():
    async def body():
        fake, dev, queue = await open_with_queue()
        rng = np.random.default_rng(1)
        w = await dev.upload(fp16(rng, 8, 8))
        await dev.gemv(fp16(rng, 8), w)            # CQ slot 0 now holds completion word 1
        queue = await dev.configure_queue(0, SQ_BASE, CQ_BASE, DATA_BASE, DATA_LIMIT, LOG2_DEPTH, LOG2_SLOT)
        assert queue.next_seq == 1
        fake.stalled = True
        seq = await queue.submit(gemv_descriptor(w.addr, 8, 8), bytes(64))
        assert seq == 1
        with pytest.raises(DeviceTimeout):
            await queue.wait(seq, timeout_cycles=500)
    run(body())


@pytest.mark.parametrize("change, match", [
    (dict(q=4), "range"),
    (dict(q=-1), "range"),
    (dict(sq_base=SQ_BASE + 8), "sq_base"),
    (dict(cq_base=CQ_BASE + 32), "cq_base"),
    (dict(data_base=DATA_BASE + 1), "data_base"),
    (dict(log2_slot=slots.MIN_LOG2_SLOT - 1), "MIN_LOG2_SLOT"),
    (dict(log2_depth=15, log2_slot=34), "MAX_LOG2_RING"),
    (dict(log2_depth=16), "log2_depth"),
    (dict(pasid=1 << regs.PASID_BITS), "pasid"),
    (dict(cq_base=SQ_BASE + (1 << LOG2_SLOT)), "overlaps CQ"),
    (dict(data_base=0x4000), "overlaps the data range"),
    (dict(data_limit=DATA_BASE - 64), "data_limit"),
])
def test_configure_validates_arguments(change, match):
    async def body():
        fake = FakeDevice()
        dev = await NdpDevice.open(fake)
        args = dict(q=0, sq_base=SQ_BASE, cq_base=CQ_BASE, data_base=DATA_BASE, data_limit=DATA_LIMIT,
                    log2_depth=LOG2_DEPTH, log2_slot=LOG2_SLOT)
        args.update(change)
        with pytest.raises(ArgumentError, match=match) as info:
            await dev.configure_queue(**args)
        assert isinstance(info.value, ValueError)
        assert fake.log == []
    run(body())


def test_configure_refuses_rings_over_another_queue():
    async def body():
        fake, dev, _ = await open_with_queue()
        with pytest.raises(ArgumentError, match="queue 0's SQ"):
            await dev.configure_queue(1, SQ_BASE + 0x100, 0x20000 - 0x1000, 0x200000, 0x300000, 1, 6)
    run(body())


# ---- submitting ---------------------------------------------------------------------------

def test_submit_places_descriptor_valid_word_and_payload():
    async def body():
        fake, dev, queue = await open_with_queue(pasid=5)
        fake.stalled = True
        desc = Descriptor(type=DescType.READ_COMPUTE, op=Op.GEMM, dtype=Dtype.FP16, flags=0,
                          dev_addr=0xABCDE40, dev_size=3, dev_rows=0x12345, dev_cols=0xFEDCB,
                          in_size=2, in_rows=0x54321, in_cols=0xBCDEF)
        payload = bytes(range(100))
        for expected_seq in (1, 2):
            seq = await queue.submit(desc, payload)
            assert seq == expected_seq
            slot = SQ_BASE + ((seq - 1) << LOG2_SLOT)
            assert bytes(fake.mem[slot:slot + 32]) == desc.pack()
            assert Descriptor.unpack(bytes(fake.mem[slot:slot + 32])) == desc
            assert U64.unpack_from(fake.mem, slot + slots.SQ_VALID)[0] == seq
            assert bytes(fake.mem[slot + 40:slot + 64]) == bytes(24)
            assert bytes(fake.mem[slot + 64:slot + 164]) == payload
    run(body())


def test_submit_orders_payload_descriptor_valid_word_doorbell():
    async def body():
        fake, dev, queue = await open_with_queue(q=1, pasid=9)
        fake.stalled = True
        start = len(fake.log)
        seq = await queue.submit(gemv_descriptor(DATA_BASE, 32, 8), bytes(64))
        return fake, start, seq
    fake, start, seq = run(body())
    log = fake.log[start:]
    fake.log = log
    slot = SQ_BASE
    payload_end = fake.index("mem_write", "end", slot + slots.SQ_PAYLOAD)
    desc_end = fake.index("mem_write", "end", slot + slots.SQ_DESC)
    valid_begin = fake.index("mem_write", "begin", slot + slots.SQ_VALID)
    valid_end = fake.index("mem_write", "end", slot + slots.SQ_VALID)
    doorbell = regs.queue_reg(1, regs.DOORBELL)
    bell_begin = fake.index("reg_write", "begin", doorbell)
    assert payload_end < valid_begin and desc_end < valid_begin
    assert valid_end < bell_begin
    bells = fake.calls("reg_write", "begin")
    assert [(c.addr, c.data, c.pasid) for c in bells] == [(doorbell, seq, 9)]
    assert all(c.pasid == 9 for c in fake.calls("mem_write"))


def test_submit_many_rings_once_with_newest_tail():
    async def body():
        fake, dev, queue = await open_with_queue(pasid=3)
        fake.stalled = True
        start = len(fake.log)
        seqs = await queue.submit_many([(gemv_descriptor(DATA_BASE, 32, 8), bytes(64))] * 3)
        return fake, fake.log[start:], seqs
    fake, log, seqs = run(body())
    assert seqs == [1, 2, 3]
    bells = [c for c in log if c.kind == "reg_write" and c.phase == "begin"]
    assert [(c.data, c.pasid) for c in bells] == [(3, 3)]
    bell_at = log.index(bells[0])
    for seq in seqs:
        slot = SQ_BASE + ((seq - 1) << LOG2_SLOT)
        valid = [i for i, c in enumerate(log) if c.kind == "mem_write" and c.addr == slot + slots.SQ_VALID]
        writes = [i for i, c in enumerate(log) if c.kind == "mem_write" and c.phase == "end"
                  and c.addr in (slot, slot + slots.SQ_PAYLOAD)]
        assert len(writes) == 2 and max(writes) < min(valid) and max(valid) < bell_at


def test_submit_accepts_any_descriptor_and_reports_the_status():
    async def body():
        fake, dev, queue = await open_with_queue()
        bad = [Descriptor(type=DescType.RESERVED),
               Descriptor(type=DescType.READ_COMPUTE, op=Op.GEMV, dtype=Dtype.BF16),
               gemv_descriptor(0x40, 8, 8),                 # outside the data range
               dataclasses.replace(gemv_descriptor(DATA_BASE, 8, 8), in_cols=9)]
        statuses = []
        for desc in bad:
            completion = await queue.run(desc)
            statuses.append(completion.status)
            assert completion.result == b""
            with pytest.raises(CompletionError, match=completion.status.name) as info:
                completion.check()
            assert (info.value.status, info.value.queue, info.value.seq, info.value.descriptor) == \
                (completion.status, 0, completion.seq, desc)
        assert statuses == [Status.BAD_OP, Status.BAD_DTYPE, Status.BOUNDS, Status.BAD_SHAPE]
        # a non-OK completion has no result payload, so none is read
        assert not [c for c in fake.calls("mem_read") if (c.addr - CQ_BASE) % (1 << LOG2_SLOT) == 64]
    run(body())


def test_submit_refuses_payload_larger_than_slot():
    async def body():
        fake, dev, queue = await open_with_queue()
        with pytest.raises(ArgumentError, match="960"):
            await queue.submit(Descriptor(), bytes(961))
        assert queue.next_seq == 1
    run(body())


def test_queue_full_until_the_slot_is_waited_for():
    async def body():
        fake, dev, queue = await open_with_queue()
        desc = gemv_descriptor(DATA_BASE, 32, 8)
        assert [await queue.submit(desc, bytes(64)) for _ in range(queue.depth)] == [1, 2, 3, 4]
        with pytest.raises(QueueFull, match="seq 5") as info:
            await queue.submit(desc, bytes(64))
        assert (info.value.queue, info.value.seq, info.value.blocking_seq) == (0, 5, 1)
        assert (await queue.wait(1)).ok
        before = len(fake.log)
        with pytest.raises(QueueFull, match="seq 6"):      # all or nothing: seq 5 would fit
            await queue.submit_many([(desc, bytes(64))] * 2)
        assert len(fake.log) == before and queue.next_seq == 5
        for seq in (4, 3):          # any order; the slot of seq 2 stays in use
            assert (await queue.wait(seq)).ok
        assert await queue.submit(desc, bytes(64)) == 5
        with pytest.raises(QueueFull, match="seq 6"):
            await queue.submit(desc, bytes(64))
        assert (await queue.wait(2)).ok
        assert await queue.submit(desc, bytes(64)) == 6
        assert queue.outstanding == [5, 6]
    run(body())


def test_a_batch_longer_than_the_ring_is_refused():
    async def body():
        fake, dev, queue = await open_with_queue()
        desc = gemv_descriptor(DATA_BASE, 32, 8)
        before = len(fake.log)
        with pytest.raises(QueueFull, match="seq 5") as info:     # it would overwrite seq 1's slot
            await queue.submit_many([(desc, bytes(64))] * (queue.depth + 1))
        assert info.value.blocking_seq == 1 and len(fake.log) == before and queue.next_seq == 1
    run(body())


def test_poll_reads_the_header_once_and_takes_the_completion_when_written():
    async def body():
        fake, dev, queue = await open_with_queue()
        rng = np.random.default_rng(8)
        w, x = fp16(rng, 32, 8), fp16(rng, 32)
        tensor = await dev.upload(w)
        fake.stalled = True
        seq = await queue.submit(gemv_descriptor(tensor.addr, 32, 8), x.tobytes())
        reads = len(fake.calls("mem_read"))
        assert await queue.poll(seq) is None
        assert len(fake.calls("mem_read")) == reads + 1 and queue.outstanding == [seq]
        fake.stalled = False
        await fake.wait_cycles(1)
        completion = await queue.poll(seq)
        assert completion.ok and queue.outstanding == []
        np.testing.assert_array_equal(np.frombuffer(completion.result, "<f2"), reference(x[None], w)[0])
        with pytest.raises(NdpError, match="not outstanding"):
            await queue.poll(seq)
    run(body())


def test_sequence_wraps_many_times_around_the_ring():
    async def body():
        fake, dev, queue = await open_with_queue(pasid=2)
        rng = np.random.default_rng(7)
        w = fp16(rng, 32, 16)
        tensor = await dev.upload(w)
        rounds = 3 * queue.depth + 3
        for i in range(rounds):
            x = fp16(rng, 32)
            y, completion = await dev.gemv(x, tensor, return_completion=True)
            np.testing.assert_array_equal(y, reference(x[None], w)[0])
            assert completion.cycles == 100 + i + 1
        valid_writes = [c for c in fake.calls("mem_write", "begin")
                        if c.addr >= SQ_BASE and c.addr < CQ_BASE and (c.addr - SQ_BASE) % (1 << LOG2_SLOT) == 32]
        seqs = [U64.unpack(c.data)[0] for c in valid_writes]
        assert seqs == list(range(1, rounds + 1))
        assert [(c.addr - SQ_BASE - 32) >> LOG2_SLOT for c in valid_writes] == [(s - 1) % 4 for s in seqs]
        bells = [c.data for c in fake.calls("reg_write", "begin") if c.addr == regs.queue_reg(0, regs.DOORBELL)]
        assert bells == list(range(1, rounds + 1))
        # pipelined: fill the ring, then drain it, several times over
        x = fp16(rng, 32)
        for _ in range(4):
            seqs = await queue.submit_many([(gemv_descriptor(tensor.addr, 32, 16), x.tobytes())] * queue.depth)
            for seq in seqs:
                result = np.frombuffer((await queue.wait(seq)).result, "<f2")
                np.testing.assert_array_equal(result, reference(x[None], w)[0])
        assert queue.next_seq == rounds + 16 + 1
    run(body())


# ---- waiting ------------------------------------------------------------------------------

def test_wait_times_out_naming_queue_and_seq():
    async def body():
        fake, dev, queue = await open_with_queue(q=3)
        fake.stalled = True
        seq = await queue.submit(gemv_descriptor(DATA_BASE, 32, 8), bytes(64))
        with pytest.raises(DeviceTimeout, match="queue 3 seq 1") as info:
            await queue.wait(seq, timeout_cycles=1000)
        assert (info.value.queue, info.value.seq) == (3, 1)
        waited = sum(c.data for c in fake.calls("wait_cycles"))
        assert 1000 <= waited < 1000 + queue.POLL_CYCLES
    run(body())


def test_wait_with_irq_uses_the_interrupt():
    async def body():
        fake, dev, queue = await open_with_queue(irq=True)
        rng = np.random.default_rng(3)
        w = fp16(rng, 16, 32)
        tensor = await dev.upload(w)
        x = fp16(rng, 16)
        np.testing.assert_array_equal(await dev.gemv(x, tensor), reference(x[None], w)[0])
        assert fake.calls("wait_irq") and not fake.calls("wait_cycles")
        fake.stalled = True
        seq = await queue.submit(gemv_descriptor(tensor.addr, 16, 32), bytes(64))
        with pytest.raises(DeviceTimeout):
            await queue.wait(seq, timeout_cycles=5000)
    run(body())


def test_completions_may_be_waited_for_in_any_order_across_queues():
    async def body():
        fake = FakeDevice()
        dev = await NdpDevice.open(fake)
        q0 = await dev.configure_queue(0, 0x0000, 0x1000, 0x10000, 0x40000, 2, 10, pasid=11)
        q1 = await dev.configure_queue(1, 0x2000, 0x3000, 0x40000, 0x80000, 2, 10, pasid=12)
        rng = np.random.default_rng(5)
        w0, w1 = fp16(rng, 32, 8), fp16(rng, 32, 8)
        t0, t1 = await dev.upload(w0, queue=0), await dev.upload(w1, queue=q1)
        x = fp16(rng, 32)
        a = await q0.submit(gemv_descriptor(t0.addr, 32, 8), x.tobytes())
        b = await q1.submit(gemv_descriptor(t1.addr, 32, 8), x.tobytes())
        c = await q0.submit(gemv_descriptor(t0.addr, 32, 8), x.tobytes())
        results = {}
        for queue, seq in ((q1, b), (q0, c), (q0, a)):
            results[(queue.index, seq)] = np.frombuffer((await queue.wait(seq)).result, "<f2")
        np.testing.assert_array_equal(results[(1, 1)], reference(x[None], w1)[0])
        np.testing.assert_array_equal(results[(0, 1)], reference(x[None], w0)[0])
        np.testing.assert_array_equal(results[(0, 2)], reference(x[None], w0)[0])
        bells = [(c.addr, c.pasid) for c in fake.calls("reg_write", "begin")
                 if (c.addr - regs.QUEUE_BASE) % regs.QUEUE_STRIDE == regs.DOORBELL]
        assert set(bells) == {(regs.queue_reg(0, regs.DOORBELL), 11), (regs.queue_reg(1, regs.DOORBELL), 12)}
        others = [c for c in fake.calls("reg_write") if (c.addr - regs.QUEUE_BASE) % regs.QUEUE_STRIDE != regs.DOORBELL]
        assert others and all(c.pasid == regs.HOST_PASID for c in others)
    run(body())


def test_slot_access_with_the_wrong_pasid_is_an_error():
    async def body():
        fake, dev, queue = await open_with_queue(pasid=4)
        queue.pasid = 5     # as if the driver used the wrong PASID
        with pytest.raises(MemAccessError, match="PASID 5"):
            await queue.submit(Descriptor())
    run(body())


# ---- numpy entry points -------------------------------------------------------------------

def test_completion_error_names_the_status():
    async def body():
        fake, dev, queue = await open_with_queue()
        rng = np.random.default_rng(2)
        tensor = await dev.upload(fp16(rng, 16, 16))
        fake.force_status = Status.BOUNDS
        with pytest.raises(CompletionError, match="BOUNDS") as info:
            await dev.gemv(fp16(rng, 16), tensor)
        assert info.value.status == Status.BOUNDS and info.value.queue == 0 and info.value.seq == 1
        assert info.value.descriptor.dev_addr == tensor.addr
    run(body())


def test_gemm_load_store_round_trip():
    async def body():
        fake, dev, queue = await open_with_queue()
        rng = np.random.default_rng(4)
        w = fp16(rng, 24, 20)
        tensor = await dev.upload(w)
        assert tensor.addr == DATA_BASE and (tensor.rows, tensor.cols) == (24, 20)
        x = fp16(rng, 3, 24)
        y, completion = await dev.gemm(x, tensor, return_completion=True)
        np.testing.assert_array_equal(y, reference(x, w))
        assert y.dtype == np.float16 and (completion.seq, completion.cycles) == (1, 101)
        np.testing.assert_array_equal(await dev.load(tensor), w)
        w2 = fp16(rng, 24, 20)
        await dev.store(tensor, w2)
        np.testing.assert_array_equal(await dev.load(tensor), w2)
        second = await dev.upload(fp16(rng, 2, 2))
        assert second.addr % 64 == 0 and second.addr >= tensor.addr + 24 * 20 * 2
    run(body())


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 4), k=st.integers(1, 64), n=st.integers(1, 64), seed=st.integers(0, 2**32 - 1))
def test_gemm_matches_reference(m, k, n, seed):
    async def body():
        fake, dev, queue = await open_with_queue()
        rng = np.random.default_rng(seed)
        w, x = fp16(rng, k, n), fp16(rng, m, k)
        y = await dev.gemm(x, await dev.upload(w))
        np.testing.assert_array_equal(y, reference(x, w))
    run(body())


def share(list_addr=DATA_BASE, tokens=40, pages=(DATA_BASE + 0x1000, DATA_BASE + 0x3000)):
    """A PagedKvShare of d = 64 in pages of 32 tokens (8 KiB each: 4 KiB of keys, 4 of values)."""
    if tokens > 64 * 32:
        pages = tuple(DATA_BASE + 0x1000 + 0x2000 * p for p in range(-(-tokens // 32)))
    return PagedKvShare(list_addr, tokens, 64, 5, pages)


def bad_call(name):
    """A numpy call with a bad argument, as (coroutine function of dev, expected error, match)."""
    ok_tensor = DeviceTensor(DATA_BASE, 32, 8)
    x = np.zeros(32, np.float16)
    return {
        "float32 x": (lambda dev: dev.gemv(x.astype(np.float32), ok_tensor), ArgumentError, "float16.*'float32'"),
        "list x": (lambda dev: dev.gemv([0.0] * 32, ok_tensor), ArgumentError, "numpy array"),
        "2-D x for gemv": (lambda dev: dev.gemv(x.reshape(4, 8), ok_tensor), ShapeError, r"\(4, 8\)"),
        "K mismatch": (lambda dev: dev.gemv(x[:31], ok_tensor), ShapeError, "K=31"),
        "gemm K mismatch": (lambda dev: dev.gemm(np.zeros((2, 33), np.float16), ok_tensor), ShapeError, "K=33"),
        "transposed K mismatch": (lambda dev: dev.gemv(x, ok_tensor, transposed=True), ShapeError,
                                  r"K=32 columns but the tensor has 8 columns \(transposed\)"),
        "transposed N > n_max": (lambda dev: dev.gemv(x, DeviceTensor(DATA_BASE, 5000, 32), transposed=True),
                                 ShapeError, "N=5000 exceeds"),
        "K > k_max": (lambda dev: dev.gemv(np.zeros(5000, np.float16), DeviceTensor(DATA_BASE, 5000, 8)),
                      ShapeError, "k_max=4096"),
        "N > n_max": (lambda dev: dev.gemv(x, DeviceTensor(DATA_BASE, 32, 5000)), ShapeError, "n_max=4096"),
        "input over slot": (lambda dev: dev.gemv(np.zeros(512, np.float16), DeviceTensor(DATA_BASE, 512, 8)),
                            ShapeError, "input of 1024 bytes"),
        "result over slot": (lambda dev: dev.gemm(np.zeros((4, 32), np.float16), DeviceTensor(DATA_BASE, 32, 128)),
                             ShapeError, "result of 1024 bytes"),
        "tensor outside range": (lambda dev: dev.gemv(x, DeviceTensor(0x40, 32, 8)), ArgumentError, "BOUNDS"),
        "bf16 tensor": (lambda dev: dev.gemv(x, DeviceTensor(DATA_BASE, 32, 8, Dtype.BF16)), ArgumentError, "FP16"),
        "store shape": (lambda dev: dev.store(ok_tensor, np.zeros((8, 32), np.float16)), ShapeError, r"\(8, 32\)"),
        "upload 1-D": (lambda dev: dev.upload(x), ShapeError, "2 dimension"),
        "upload empty": (lambda dev: dev.upload(np.zeros((0, 4), np.float16)), ShapeError, "empty"),
        "upload float64": (lambda dev: dev.upload(np.zeros((2, 2))), ArgumentError, "'float64'"),
        "upload too big": (lambda dev: dev.upload(np.zeros((1024, 512), np.float16)), OutOfDeviceMemory, "do not fit"),
        # the project's ops
        "lora B shape": (lambda dev: dev.upload_lora(np.zeros((32, 8), np.float16), np.zeros((32, 8), np.float16)),
                         ShapeError, r"R x D = \(8, 32\)"),
        "lora x cols": (lambda dev: dev.lora_xab(np.zeros((2, 31), np.float16), LoraAdapter(DATA_BASE, 32, 8)),
                        ShapeError, "D is 32"),
        "lora not an adapter": (lambda dev: dev.lora_xab(np.zeros((2, 32), np.float16), ok_tensor),
                                ArgumentError, "LoraAdapter"),
        "attention not a block": (lambda dev: dev.attention_partial(np.zeros((1, 32), np.float16), ok_tensor),
                                  ArgumentError, "KvBlock"),
        "attention d": (lambda dev: dev.attention_partial(np.zeros((1, 16), np.float16), KvBlock(DATA_BASE, 32, 8)),
                        ShapeError, "d=16"),
        "attention outside range": (lambda dev: dev.attention_partial(np.zeros((1, 32), np.float16),
                                                                      KvBlock(0x40, 32, 8)), ArgumentError, "BOUNDS"),
        "attention result over slot": (lambda dev: dev.attention_partial(np.zeros((4, 64), np.float16),
                                                                         KvBlock(DATA_BASE, 64, 8)),
                                       ShapeError, "result of 1280 bytes"),
        "decode block of no queue": (lambda dev: dev.attention_decode([(np.zeros((2, 32), np.float16),
                                                                        [KvBlock(0x40, 32, 8)])]),
                                     ArgumentError, "no queue"),
        # paged attention: d = 64, pages of 32 tokens (4 KiB of keys)
        "paged not a share": (lambda dev: dev.attention_paged(np.zeros((1, 64), np.float16), KvBlock(DATA_BASE, 64, 8)),
                              ArgumentError, "PagedKvShare"),
        "paged d": (lambda dev: dev.attention_paged(np.zeros((1, 32), np.float16), share()), ShapeError, "d=32"),
        "paged list outside range": (lambda dev: dev.attention_paged(np.zeros((1, 64), np.float16),
                                                                     share(list_addr=0x200)), ArgumentError, "BOUNDS"),
        "paged list unaligned": (lambda dev: dev.attention_paged(np.zeros((1, 64), np.float16),
                                                                 share(list_addr=DATA_BASE + 64)), ArgumentError,
                                 "list_addr=0x10040 is not a multiple of PAGE_LIST_BYTES=512"),
        "paged page outside range": (lambda dev: dev.attention_paged(np.zeros((1, 64), np.float16),
                                                                     share(pages=(DATA_BASE + 0x1000, DATA_LIMIT - 0x1000))),
                                     ArgumentError, "BAD_PAGE"),
        "paged page unaligned": (lambda dev: dev.attention_paged(np.zeros((1, 64), np.float16),
                                                                 share(pages=(DATA_BASE + 0x1000, DATA_BASE + 0x4040))),
                                 ArgumentError, "BAD_PAGE"),
        "paged page count": (lambda dev: dev.attention_paged(np.zeros((1, 64), np.float16),
                                                             share(pages=(DATA_BASE + 0x1000,))), ArgumentError,
                             "lists 1 pages for 40 tokens"),
        "paged pages over 64": (lambda dev: dev.attention_paged(np.zeros((1, 64), np.float16),
                                                                share(tokens=65 * 32)), ShapeError, "PAGE_LIST_MAX=64"),
        "paged keys not 4 KiB": (lambda dev: dev.attention_paged(np.zeros((1, 32), np.float16),
                                                                 dataclasses.replace(share(), d=32)),
                                 ShapeError, "not a multiple of PAGE_ALIGN=4096"),
        "decode share of no queue": (lambda dev: dev.attention_decode([(np.zeros((2, 64), np.float16),
                                                                        [share(pages=(0x1000, 0x3000))])]),
                                     ArgumentError, "no queue .* the page list at 0x10000 and its 2 pages"),
        "upload paged shift": (lambda dev: dev.upload_kv_paged(np.zeros((8, 64), np.float16),
                                                               np.zeros((8, 64), np.float16), 16),
                               ArgumentError, "page_shift=16"),
        "softmax K > k_max": (lambda dev: dev.softmax(np.zeros((1, 5000), np.float16)), ShapeError, "input of"),
        "softmax partial result": (lambda dev: dev.softmax(np.zeros((7, 64), np.float16), partial=True),
                                   ShapeError, "result of 1344 bytes"),
    }[name]


@pytest.mark.parametrize("name", ["float32 x", "list x", "2-D x for gemv", "K mismatch", "gemm K mismatch",
                                  "transposed K mismatch", "transposed N > n_max",
                                  "K > k_max", "N > n_max", "input over slot", "result over slot",
                                  "tensor outside range", "bf16 tensor", "store shape", "upload 1-D",
                                  "upload empty", "upload float64", "upload too big", "lora B shape",
                                  "lora x cols", "lora not an adapter", "attention not a block", "attention d",
                                  "attention outside range", "attention result over slot",
                                  "decode block of no queue", "softmax K > k_max", "softmax partial result",
                                  "paged not a share", "paged d", "paged list outside range", "paged list unaligned",
                                  "paged page outside range", "paged page unaligned", "paged page count",
                                  "paged pages over 64", "paged keys not 4 KiB", "decode share of no queue",
                                  "upload paged shift"])
def test_bad_arguments_raise_before_touching_the_device(name):
    call, error, match = bad_call(name)

    async def body():
        fake, dev, queue = await open_with_queue()
        before = len(fake.log)
        with pytest.raises(error, match=match):
            await call(dev)
        assert len(fake.log) == before and queue.next_seq == 1
    run(body())


# ---- paged attention: one descriptor per request-head share ------------------------------

def test_paged_attention_descriptor_fields_follow_isa_validate():
    view = QueueView(LOG2_SLOT, DATA_BASE, DATA_LIMIT)
    for tokens, d, shift, m in [(1, 64, 5, 1), (40, 64, 5, 2), (64 * 32, 64, 5, 1), (300, 128, 4, 3),
                                (2048, 128, 6, 1), (5, 2048, 0, 1)]:
        desc = paged_attention_descriptor(DATA_BASE + 512, tokens, d, shift, m)
        assert (desc.type, desc.op, desc.dtype) == (DescType.READ_COMPUTE, Op.ATTENTION, Dtype.FP16)
        assert desc.flags == page_flags(shift) and desc.flags & Flag.PAGED and desc.flags & Flag.TRANS_W
        assert (desc.dev_addr, desc.dev_rows, desc.dev_cols, desc.in_rows, desc.in_cols) == \
            (DATA_BASE + 512, tokens, d, m, d)
        assert validate.paged(desc) and validate.page_tokens(desc) == 1 << shift
        pages = -(-tokens // (1 << shift))
        assert validate.page_count(desc) == pages and validate.page_half_bytes(desc) == (1 << shift) * d * 2
        assert desc.dev_size == validate.operand_lines(desc) == -(-pages * 8 // 64)
        assert desc.in_size == -(-m * d * 2 // 64)
        big = QueueView(20, DATA_BASE, DATA_LIMIT)          # room for any result
        assert check_descriptor(desc, big if m * d * 4 + m * 64 > 960 else view, load_config("default")) == Status.OK
        share_ = PagedKvShare(DATA_BASE + 512, tokens, d, shift, [0] * pages)
        assert attention_descriptor(share_, m) == desc


@pytest.mark.parametrize("args, error, match", [
    ((DATA_BASE + 64, 40, 64, 5, 1), ArgumentError, "list_addr=0x10040 is not a multiple of PAGE_LIST_BYTES=512"),
    ((-512, 40, 64, 5, 1), ArgumentError, "list_addr must be >= 0"),
    ((DATA_BASE, 0, 64, 5, 1), ArgumentError, "tokens must be >= 1"),
    ((DATA_BASE, 65 * 32, 64, 5, 1), ShapeError, "tokens=2080 .* 65 pages, more than PAGE_LIST_MAX=64"),
    ((DATA_BASE, 40, 0, 5, 1), ArgumentError, "d must be >= 1"),
    ((DATA_BASE, 40, 64, 16, 1), ArgumentError, "page_shift=16 does not fit in 4 bits"),
    ((DATA_BASE, 40, 64, True, 1), ArgumentError, "page_shift must be an integer"),
    ((DATA_BASE, 40, 64, 4, 1), ShapeError, "2\\^page_shift=16 tokens x d=64 .* not a multiple of PAGE_ALIGN=4096"),
    ((DATA_BASE, 40, 64, 5, 0), ArgumentError, "m must be >= 1"),
    ((DATA_BASE, 40, 64, 5, 1 << 20), ShapeError, "does not fit a descriptor"),
])
def test_paged_attention_descriptor_refuses_bad_arguments(args, error, match):
    with pytest.raises(error, match=match):
        paged_attention_descriptor(*args)


def test_page_list_bytes_are_u64_little_endian_in_whole_lines():
    data = page_list_bytes([0x1000, 0x123456789000, 0x2000])
    assert len(data) == 64
    assert [U64.unpack_from(data, 8 * i)[0] for i in range(3)] == [0x1000, 0x123456789000, 0x2000]
    assert data[24:] == bytes(40)
    assert len(page_list_bytes(range(0x1000, 0x1000 * 10, 0x1000))) == 128


def test_upload_kv_paged_lays_out_pages_and_list_and_attends():
    """Pages whole at 4 KiB boundaries, keys token-major at the page, values page_half_bytes
    after them (where isa.validate.page_extents says), the list at a 512-byte boundary; one
    descriptor's result is the golden model's over the concatenated tokens, and merged with
    another share's it matches float64 attention."""
    async def body():
        fake, dev, queue = await open_with_queue()
        rng = np.random.default_rng(5)
        d, t, shift = 64, 70, 5
        k, v, q = fp16(rng, 2 * t, d), fp16(rng, 2 * t, d), fp16(rng, 2, d)
        first = await dev.upload_kv_paged(k[:t], v[:t], shift)
        second = await dev.upload_kv_paged(k[t:], v[t:], shift)
        desc = paged_attention_descriptor(first.list_addr, t, d, shift, 2)
        assert first.list_addr % 512 == 0 and len(first.pages) == 3
        assert fake.mem[first.list_addr:first.list_addr + 64] == page_list_bytes(first.pages)
        half = first.page_half_bytes
        start = 0
        for addr, tokens in validate.page_extents(desc, list(first.pages)):
            assert addr % 4096 == 0 and queue.allocator.size_of(addr) == 2 * half
            assert bytes(fake.mem[addr:addr + tokens * d * 2]) == k[start:start + tokens].tobytes()
            assert bytes(fake.mem[addr + half:addr + half + tokens * d * 2]) == v[start:start + tokens].tobytes()
            start += tokens
        assert start == t
        o, m, l = await dev.attention_paged(q, first)
        go, gm, gl = golden.attention_partial_trans(scale_query(q), k[:t], v[:t], fake.cfg.lanes,
                                                  fake.cfg.softmax_lanes)
        assert np.array_equal(o, go) and np.array_equal(m, gm) and np.array_equal(l, gl)
        ro, rm, rl = partial_attention_reference(scale_query(q), k[:t], v[:t])
        assert np.abs(o - ro).max() <= 2e-3 * np.abs(ro).max() and np.abs(m - rm).max() <= 1e-6
        [[a], [b]] = await dev.attention_decode([(q, [first]), (q, [second])])
        assert all(np.array_equal(x, y) for x, y in zip(a, (o, m, l)))
        merged = merge_attention([a, b])
        assert np.abs(merged - attention_reference(q, k, v)).max() <= 2e-3
        used = queue.allocator.used_bytes
        dev.free(first)
        assert queue.allocator.used_bytes == used - 3 * 2 * half - 512
    run(body())


def test_attention_decode_sends_one_descriptor_per_request_and_kv_head_share():
    """GQA: 4 query heads over 2 KV heads, each a share of pages; every descriptor is a paged
    ATTENTION of the head's 2 query rows."""
    async def body():
        fake, dev, queue = await open_with_queue(log2_depth=3)
        rng = np.random.default_rng(6)
        d = 64
        kv = [(fp16(rng, t, d), fp16(rng, t, d)) for t in (33, 9)]
        shares = [await dev.upload_kv_paged(k, v, 5) for k, v in kv]
        q = fp16(rng, 4, d)
        before = len(fake.calls("mem_write", "end"))
        [out] = await dev.attention_decode([(q, shares)])
        slots_written = [c for c in fake.calls("mem_write", "end")[before:] if len(c.data) == 32]
        descs = [Descriptor.unpack(c.data) for c in slots_written]
        assert [(x.dev_addr, x.in_rows, x.dev_rows) for x in descs] == [(s.list_addr, 2, s.tokens) for s in shares]
        for h, (k, v) in enumerate(kv):
            ref = golden.attention_partial_trans(scale_query(q[2 * h:2 * h + 2]), k, v, fake.cfg.lanes,
                                                     fake.cfg.softmax_lanes)
            assert all(np.array_equal(x, y) for x, y in zip(out[h], ref))
    run(body())
