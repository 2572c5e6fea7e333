"""driver.pool.DevicePool on the device model: the memory map, submission, completions in
the order they arrive, overlap of devices in simulated time, results bit-exact against
sim.golden."""
import asyncio

import numpy as np
import pytest

import isa
from isa import Op, regs
from driver import DevicePool, DeviceTimeout, OutOfDeviceMemory, QueueFull, SimClock, Ticket
from isa.encoders import DeviceTensor, matmul_descriptor
from isa.errors import ArgumentError, NdpError
from driver.clock import run
from driver.model_transport import ModelTransport
from sim import golden

CFG = isa.load_config("default")
GEOMETRY = dict(log2_depth=2, log2_slot=16)         # rings of 256 KiB: 2 MiB for 4 queues
RING = 1 << 18


def fp16(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float16)


def assert_bits_equal(got, want):
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def result(completion):
    d = completion.descriptor
    return np.frombuffer(completion.result, np.float16).reshape(d.in_rows, d.dev_cols)


def cycles(pool):
    return pool.clock.cycle(CFG.clock_hz)


async def gemm_job(pool, device, rng, k, n, m=2):
    """Upload a k x n weight on `device`: returns (descriptor, payload, expected result)."""
    w, x = fp16(rng, k, n), fp16(rng, m, k)
    tensor = await pool.upload(device, w)
    return matmul_descriptor(Op.GEMM, tensor, m), x.tobytes(), golden.gemm(x, w, CFG.lanes)


# ---- opening ---------------------------------------------------------------------------------

def test_every_device_gets_rings_at_the_bottom_and_one_shared_data_range():
    async def body():
        pool = await DevicePool.model(CFG, 3, pasid=5, **GEOMETRY)
        data_base = 2 * CFG.num_queues * RING
        assert len(pool) == 3
        for d, dev in enumerate(pool.devices):
            model_queues = dev.transport.model.regfile.queues
            assert sorted(dev.queues) == list(range(CFG.num_queues))
            for q in range(CFG.num_queues):
                r = model_queues[q]
                assert (r.sq_base, r.cq_base) == (2 * q * RING, (2 * q + 1) * RING)
                assert (r.data_base, r.data_limit) == (data_base, CFG.dram_bytes)
                assert (r.pasid, r.enable, r.irq_en) == (5, True, False)
                assert dev.queues[q].allocator is pool.allocators[d]
            assert (pool.allocators[d].base, pool.allocators[d].limit) == (data_base, CFG.dram_bytes)
        assert len({id(a) for a in pool.allocators}) == 3
    run(body())


def test_open_some_queues_with_an_explicit_limit():
    async def body():
        transports = [ModelTransport(CFG) for _ in range(2)]
        pool = await DevicePool.open(transports, queues=[1, 3], data_limit=1 << 24, **GEOMETRY)
        for dev in pool.devices:
            assert sorted(dev.queues) == [1, 3]
            assert (dev.queues[3].sq_base, dev.queues[3].data_base) == (2 * RING, 4 * RING)
            assert dev.queues[1].data_limit == 1 << 24
        assert pool.clock is None
    asyncio.run(body())


def test_open_refuses_what_cannot_work():
    async def body():
        with pytest.raises(ArgumentError, match="rings of 4 queues"):
            await DevicePool.open([ModelTransport(CFG)])          # 16 slots of 1 MiB: 128 MiB > 64 MiB
        with pytest.raises(ArgumentError, match="does not run on the pool's clock"):
            await DevicePool.open([ModelTransport(CFG)], clock=SimClock(), **GEOMETRY)
        with pytest.raises(ArgumentError, match="at least one"):
            await DevicePool.open([], **GEOMETRY)
    run(body())
    with pytest.raises(NdpError, match="driver.clock.run"):
        asyncio.run(DevicePool.model(CFG, 2, **GEOMETRY))


# ---- overlap in simulated time ---------------------------------------------------------------

async def elapsed(pool, jobs):
    """Cycles from submitting `jobs` [(device, desc, payload, expected)], one after the other,
    to the last completion; checks every result."""
    start = cycles(pool)
    tickets = [await pool.submit(device, desc, payload) for device, desc, payload, _ in jobs]
    expected = {ticket: want for ticket, (*_, want) in zip(tickets, jobs)}
    async for ticket, completion in pool.as_completed(tickets):
        assert completion.ok
        assert_bits_equal(result(completion), expected.pop(ticket))
    assert not expected
    return cycles(pool) - start


def test_two_devices_overlap_submit_and_as_completed():
    async def body():
        pool = await DevicePool.model(CFG, 2, **GEOMETRY)
        rng = np.random.default_rng(1)
        job0 = (0, *await gemm_job(pool, 0, rng, 1024, 1024))
        job1 = (1, *await gemm_job(pool, 1, rng, 512, 1024))
        alone = [await elapsed(pool, [job0]), await elapsed(pool, [job1])]
        both = await elapsed(pool, [job0, job1])
        return alone, both
    (t0, t1), both = run(body())
    print(f"alone {t0} and {t1} cycles, together {both}")
    assert t0 > 1.5 * t1 > 10_000                 # two different lengths, long beside the host's
    # the sweeps every POLL_CYCLES see a completion up to one sweep late, alone or not
    assert max(t0, t1) - 2 * DevicePool.POLL_CYCLES <= both <= max(t0, t1) + 200
    assert both < 0.8 * (t0 + t1)


def test_two_devices_overlap_under_gather():
    async def body():
        pool = await DevicePool.model(CFG, 2, **GEOMETRY)
        rng = np.random.default_rng(2)
        shapes = [(1024, 1024), (1024, 512)]
        ws = [fp16(rng, k, n) for k, n in shapes]
        x = fp16(rng, 2, 1024)
        tensors = [await pool.upload(d, w) for d, w in enumerate(ws)]

        async def gemm(d):
            start = cycles(pool)
            y = await pool.devices[d].gemm(x, tensors[d])
            assert_bits_equal(y, golden.gemm(x, ws[d], CFG.lanes))
            return cycles(pool) - start
        alone = [await gemm(0), await gemm(1)]
        start = cycles(pool)
        together = await asyncio.gather(gemm(0), gemm(1))
        return alone, together, cycles(pool) - start
    (t0, t1), together, both = run(body())
    print(f"alone {t0} and {t1} cycles, together {together} ({both})")
    assert t0 > 1.5 * t1
    assert both == max(together)
    # each call polls every Queue.POLL_CYCLES, so it may end up to one poll late
    assert max(t0, t1) <= both <= max(t0, t1) + 2 * 64 + 100
    assert both < 0.8 * (t0 + t1)


# ---- completions -------------------------------------------------------------------------------

def test_a_short_job_on_device_1_arrives_before_a_long_one_on_device_0():
    async def body():
        pool = await DevicePool.model(CFG, 2, **GEOMETRY)
        rng = np.random.default_rng(3)
        long_job = await gemm_job(pool, 0, rng, 1024, 1024)
        short_job = await gemm_job(pool, 1, rng, 64, 64)
        long_ticket = await pool.submit(0, *long_job[:2])
        short_ticket = await pool.submit(1, *short_job[:2])
        order = []
        async for ticket, completion in pool.as_completed([long_ticket, short_ticket]):
            assert asyncio.all_tasks() == {asyncio.current_task()}     # no helper tasks
            order.append((ticket, cycles(pool)))
            assert_bits_equal(result(completion), (long_job if ticket is long_ticket else short_job)[2])
        return long_ticket, short_ticket, order
    long_ticket, short_ticket, [(first, at_first), (second, at_second)] = run(body())
    assert (first, second) == (short_ticket, long_ticket)
    assert at_second - at_first > 10_000


def test_one_queue_completes_in_seq_order_and_queues_interleave():
    async def body():
        pool = await DevicePool.model(CFG, 1, **GEOMETRY)
        rng = np.random.default_rng(4)
        jobs = {size: await gemm_job(pool, 0, rng, size, size) for size in (512, 64, 32, 256)}
        # queue 0: long, short, short; queue 1: a medium one
        tickets = await pool.submit_many([(0, *jobs[512][:2], 0), (0, *jobs[64][:2], 0),
                                          (0, *jobs[32][:2], 0), (0, *jobs[256][:2], 1)])
        assert [(t.queue, t.seq) for t in tickets] == [(0, 1), (0, 2), (0, 3), (1, 1)]
        got = []
        async for ticket, completion in pool.as_completed(reversed(tickets)):
            got.append(ticket)
            size = completion.descriptor.dev_rows
            assert_bits_equal(result(completion), jobs[size][2])
        return tickets, got
    tickets, got = run(body())
    on_queue_0 = [t.seq for t in got if t.queue == 0]
    assert on_queue_0 == [1, 2, 3]
    assert sorted(got, key=lambda t: (t.queue, t.seq)) == sorted(tickets, key=lambda t: (t.queue, t.seq))


def test_least_loaded_queue_and_await_ticket():
    async def body():
        pool = await DevicePool.model(CFG, 1, **GEOMETRY)
        rng = np.random.default_rng(5)
        desc, payload, want = await gemm_job(pool, 0, rng, 64, 64)
        tickets = await pool.submit_many([(0, desc, payload)] * 6)
        assert [t.queue for t in tickets] == [0, 1, 2, 3, 0, 1]
        for ticket in tickets:
            assert_bits_equal(result(await ticket), want)
    run(body())


def test_submit_many_writes_a_devices_slots_before_ringing_each_queue_once():
    log = []

    class Logged(ModelTransport):
        async def mem_write(self, addr, data, pasid):
            log.append((self, "write", addr))
            await super().mem_write(addr, data, pasid)

        async def reg_write(self, offset, value, pasid):
            log.append((self, "reg", offset))
            await super().reg_write(offset, value, pasid)

    async def body():
        transports = [Logged(CFG) for _ in range(2)]
        pool = await DevicePool.open(transports, **GEOMETRY)
        rng = np.random.default_rng(6)
        jobs = [await gemm_job(pool, d, rng, 64, 64) for d in (0, 1)]
        del log[:]
        items = [(d, *jobs[d][:2], q) for d in (0, 1) for q in (0, 0, 2)]
        tickets = await pool.submit_many(items)
        async for ticket, completion in pool.as_completed(tickets, timeout_cycles=100_000):
            assert_bits_equal(result(completion), jobs[ticket.device][2])
        return transports
    transports = asyncio.run(body())
    bells = {regs.queue_reg(q, regs.DOORBELL): q for q in range(CFG.num_queues)}
    events = [(transports.index(t), kind, bells.get(addr) if kind == "reg" else addr < 2 * CFG.num_queues * RING)
              for t, kind, addr in log]
    for d in (0, 1):
        mine = [e for e in events if e[0] == d]
        rung = [q for _, kind, q in mine if kind == "reg"]
        assert sorted(rung) == [0, 2]                             # each queue once
        last_slot = max(i for i, (_, kind, _) in enumerate(mine) if kind == "write")
        first_bell = min(i for i, (_, kind, _) in enumerate(mine) if kind == "reg")
        assert last_slot < first_bell
    # device 0 is rung before device 1's slots are written: it starts while the host writes on
    first_bell_0 = next(i for i, e in enumerate(events) if e[:2] == (0, "reg"))
    first_write_1 = next(i for i, e in enumerate(events) if e[:2] == (1, "write"))
    assert first_bell_0 < first_write_1


def test_as_completed_times_out_naming_the_device():
    async def body():
        pool = await DevicePool.model(CFG, 2, **GEOMETRY)
        rng = np.random.default_rng(7)
        desc, payload, _ = await gemm_job(pool, 1, rng, 64, 64)
        queue = pool.devices[1].queue(2)
        [seq] = await queue.submit_many([(desc, payload)], ring=False)     # never rung
        ticket = Ticket(1, 2, seq, desc, queue)
        start = cycles(pool)
        with pytest.raises(DeviceTimeout, match="device 1 queue 2 seq 1: no completion after 500"):
            async for _ in pool.as_completed([ticket], timeout_cycles=500):
                pass
        return cycles(pool) - start
    assert 500 <= run(body()) < 1000


def test_as_completed_without_a_clock_passes_time_on_each_transport():
    async def body():
        pool = await DevicePool.open([ModelTransport(CFG) for _ in range(2)], **GEOMETRY)
        rng = np.random.default_rng(8)
        jobs = [await gemm_job(pool, d, rng, 256, 128) for d in (0, 1)]
        tickets = [await pool.submit(d, *jobs[d][:2]) for d in (0, 1)]
        async for ticket, completion in pool.as_completed(tickets):
            assert_bits_equal(result(completion), jobs[ticket.device][2])
        return [dev.transport.now for dev in pool.devices]
    assert all(now > 1000 for now in asyncio.run(body()))


def test_submit_checks_before_touching_a_device():
    async def body():
        pool = await DevicePool.model(CFG, 2, **GEOMETRY)
        rng = np.random.default_rng(9)
        desc, payload, _ = await gemm_job(pool, 0, rng, 64, 64)
        queue = pool.devices[0].queue(0)
        with pytest.raises(ArgumentError, match="device 2 is not in range"):
            await pool.submit(2, desc, payload)
        with pytest.raises(ArgumentError, match="payload of 320 bytes"):
            await pool.submit(0, desc, payload + bytes(64))
        with pytest.raises(ArgumentError, match="BOUNDS"):
            await pool.submit(1, matmul_descriptor(Op.GEMM, DeviceTensor(64, 64, 64), 2), payload)
        # all or nothing: queue 0 has room for 4, the fifth item is refused before any write
        before = cycles(pool)
        with pytest.raises(QueueFull):
            await pool.submit_many([(1, desc, payload, 3)] + [(0, desc, payload, 0)] * 5)
        assert cycles(pool) == before and queue.next_seq == 1 and pool.devices[1].queue(3).next_seq == 1
    run(body())


def test_a_full_device_names_itself():
    async def body():
        pool = await DevicePool.model(CFG, 2, **GEOMETRY)
        left = pool.allocators[1].free_bytes
        with pytest.raises(OutOfDeviceMemory, match=f"device 1: {left + 1} bytes do not fit"):
            pool.allocate(1, left + 1)
        addr = pool.allocate(1, left)
        with pytest.raises(OutOfDeviceMemory, match="device 1"):
            await pool.upload(1, np.zeros((2, 2), np.float16))
        pool.free(1, addr)
        tensor = await pool.upload(1, np.zeros((2, 2), np.float16))
        pool.free_tensor(1, tensor)
        assert pool.allocators[1].used_bytes == 0
    run(body())
