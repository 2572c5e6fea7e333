"""driver.alloc.RangeAllocator against a unit-by-unit reference, and freeing through the
driver (Queue.free, NdpDevice.free)."""
import asyncio

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import isa
from driver import NdpDevice, OutOfDeviceMemory, RangeAllocator
from isa.errors import ArgumentError
from driver.model_transport import ModelTransport


class Reference:
    """Which `align`-byte units of [base, limit) are taken; first fit by scanning units."""

    def __init__(self, base, limit, align):
        self.base, self.align = base, align
        self.taken = [False] * ((limit - base) // align)    # a partial last unit is never usable
        self.sizes = {}

    def first_fit(self, nbytes):
        units = -(-nbytes // self.align)
        run = 0
        for i, taken in enumerate(self.taken):
            run = 0 if taken else run + 1
            if run == units:
                return self.base + (i - units + 1) * self.align
        return None

    def take(self, addr, nbytes):
        first, units = (addr - self.base) // self.align, -(-nbytes // self.align)
        assert not any(self.taken[first:first + units]), f"{addr:#x} overlaps a live allocation"
        self.taken[first:first + units] = [True] * units
        self.sizes[addr] = units

    def give(self, addr):
        first, units = (addr - self.base) // self.align, self.sizes.pop(addr)
        self.taken[first:first + units] = [False] * units

    def largest(self):
        best = run = 0
        for taken in self.taken:
            run = 0 if taken else run + 1
            best = max(best, run)
        return best * self.align


@settings(max_examples=60, deadline=None)
@given(base_units=st.integers(0, 4), span=st.integers(0, 3000), align=st.sampled_from([1, 16, 64]),
       ops=st.lists(st.tuples(st.booleans(), st.integers(1, 700), st.integers(0, 10**6)), max_size=80))
def test_churn_matches_a_first_fit_reference(base_units, span, align, ops):
    base = base_units * 64
    alloc = RangeAllocator(base, base + span, align=align)
    ref = Reference(base, base + span, align)
    live = []
    for is_alloc, nbytes, pick in ops:
        if is_alloc or not live:
            expected = ref.first_fit(nbytes)
            if expected is None:
                with pytest.raises(OutOfDeviceMemory):
                    alloc.allocate(nbytes)
                continue
            addr = alloc.allocate(nbytes)
            assert addr == expected and addr % align == 0
            assert base <= addr and addr + nbytes <= base + span
            ref.take(addr, nbytes)
            live.append(addr)
        else:
            addr = live.pop(pick % len(live))
            alloc.free(addr)
            ref.give(addr)
        assert alloc.used_bytes == sum(ref.sizes.values()) * align
        assert alloc.free_bytes == span - alloc.used_bytes
        assert alloc.largest_free == ref.largest()
    alloc.free_all()
    assert alloc.used_bytes == 0 and alloc.largest_free == span // align * align


def test_freed_neighbours_merge_into_one_range():
    alloc = RangeAllocator(0x1000, 0x1000 + 4 * 256)
    a, b, c, d = (alloc.allocate(256) for _ in range(4))
    assert [a, b, c, d] == [0x1000, 0x1100, 0x1200, 0x1300]
    for addr in (c, a, b):      # the middle last: it merges with both sides
        alloc.free(addr)
    assert alloc.largest_free == 3 * 256
    assert alloc.allocate(3 * 256) == a
    alloc.free(d)
    alloc.free(a)
    assert alloc.allocate(4 * 256) == a


def test_out_of_memory_says_what_is_left():
    alloc = RangeAllocator(0x400, 0x400 + 1024, name="device 3")
    first, second, _ = alloc.allocate(256), alloc.allocate(256), alloc.allocate(256)
    alloc.free(first)
    with pytest.raises(OutOfDeviceMemory) as info:
        alloc.allocate(300)
    message = str(info.value)
    for part in ("device 3", "300 bytes", "512 bytes are free", "largest free extent is 256 bytes",
                 "[0x400, 0x800)"):
        assert part in message
    assert second == 0x500


def test_free_of_an_address_not_allocated_names_it():
    alloc = RangeAllocator(0, 4096)
    addr = alloc.allocate(100)
    with pytest.raises(ArgumentError, match="0x40 is not allocated"):
        alloc.free(addr + 64)
    alloc.free(addr)
    with pytest.raises(ArgumentError, match="0x0 is not allocated"):
        alloc.free(addr)


@pytest.mark.parametrize("args, match", [((64, 32), "below base"), ((8, 128), "aligned"),
                                         ((0, 64, 48), "power of two"), ((-64, 64), ">= 0")])
def test_bad_ranges_are_refused(args, match):
    with pytest.raises(ArgumentError, match=match):
        RangeAllocator(*args)


def test_zero_bytes_are_refused():
    with pytest.raises(ArgumentError, match="nbytes"):
        RangeAllocator(0, 64).allocate(0)


# ---- through the driver ------------------------------------------------------------------------

CFG = isa.load_config("small")


async def open_device():
    dev = await NdpDevice.open(ModelTransport(CFG))
    await dev.configure_queue(0, 0, 1 << 12, 1 << 16, 1 << 18, 1, 10)
    await dev.configure_queue(1, 1 << 13, 3 << 12, 1 << 18, 1 << 20, 1, 10)
    return dev


def test_device_free_gives_back_to_the_queue_that_placed_it():
    async def body():
        dev = await open_device()
        rng = np.random.default_rng(0)
        w = rng.uniform(-1, 1, (32, 32)).astype(np.float16)
        tensor = await dev.upload(w)
        adapter = await dev.upload_lora(w[:, :8].copy(), w[:8].copy(), queue=1)
        block = await dev.upload_kv(w[:4].copy(), w[4:8].copy())
        assert tensor.addr == 1 << 16 and adapter.addr == 1 << 18
        used = [q.allocator.used_bytes for q in (dev.queue(0), dev.queue(1))]
        dev.free(tensor)
        dev.free(adapter)
        assert dev.queue(0).allocator.used_bytes == used[0] - 32 * 32 * 2
        assert dev.queue(1).allocator.used_bytes == 0
        assert (await dev.upload(w)).addr == 1 << 16          # reused whole
        with pytest.raises(ArgumentError, match="not placed"):
            dev.free(adapter)
        with pytest.raises(ArgumentError, match="KvBlock"):
            dev.free(block.addr)
        dev.free(block)
        dev.queue(0).free_all()
        assert dev.queue(0).allocator.used_bytes == 0
    asyncio.run(body())


def test_queue_free_and_full_queue_message():
    async def body():
        dev = await open_device()
        queue = dev.queue(0)
        addr = queue.allocate((1 << 18) - (1 << 16))           # the whole data range
        with pytest.raises(OutOfDeviceMemory, match="queue 0: 1 bytes do not fit"):
            queue.allocate(1)
        queue.free(addr)
        assert queue.allocate(1) == addr
    asyncio.run(body())


def test_a_larger_alignment_leaves_the_bytes_below_free():
    """allocate(n, align): the lowest free multiple of align; the bytes it skips stay free
    (a later small allocation takes them), and freeing merges everything back whole."""
    alloc = RangeAllocator(0x1040, 0x9000)
    page = alloc.allocate(0x2000, 0x1000)
    assert page == 0x2000 and alloc.used_bytes == 0x2000
    listed = alloc.allocate(512, 512)
    assert listed == 0x1200                               # below the page, at 512 bytes
    assert alloc.allocate(64) == 0x1040                   # the skipped bytes
    assert alloc.allocate(0x3000, 0x4000) == 0x4000
    with pytest.raises(OutOfDeviceMemory, match="at a multiple of 16384"):
        alloc.allocate(0x1001, 0x4000)              # 0x8000 is free, but only 0x1000 bytes on
    with pytest.raises(ArgumentError, match="power of two"):
        alloc.allocate(64, 48)
    for addr in (0x1040, listed, page, 0x4000):
        alloc.free(addr)
    assert alloc.used_bytes == 0 and alloc.largest_free == 0x9000 - 0x1040
