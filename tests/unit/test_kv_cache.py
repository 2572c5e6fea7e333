"""driver.kv_cache.PagedKvCache on a pool of device models: token i on device i mod N, each
page's bytes in device memory, and split attention over the pages against float64; with the
paged layout (pages of 4 KiB of keys), the page lists and one paged ATTENTION per device and
request-head share, against the golden model and float64."""
import asyncio

import numpy as np
import pytest
from hypothesis import given, strategies as st

import isa
from driver import (DevicePool, OutOfDeviceMemory, PagedKvCache, attention_reference, kv_operand_bytes,
                    merge_attention)
from driver.kv_cache import share_chunks
from isa.encoders import KvBlock, PagedKvShare, page_list_bytes, paged_attention_descriptor
from isa.errors import ArgumentError, ShapeError
from driver.attention import partial_attention_reference, scale_query
from driver.clock import run
from driver.model_transport import ModelTransport
from isa import QueueView, Status, check_descriptor
from isa.validate import check_pages, page_count, page_extents
from sim import golden

CFG = isa.load_config("default")
GEOMETRY = dict(log2_depth=2, log2_slot=16)
TOLERANCE = 2e-3            # as tests/unit/test_attention_device.py
D, PAGE = 64, 4


def kv(rng, *shape):
    return rng.standard_normal(shape).astype(np.float16)


async def check_layout(pool, cache, rid, k, v):
    """Every page holds tokens of one device (i mod N), together exactly the request's, and
    its bytes in device memory are the ATTENTION operand of exactly those tokens."""
    n = len(pool)
    layers, heads, total, _ = k.shape
    assert cache.tokens(rid) == total
    for layer in range(layers):
        for head in range(heads):
            held = []
            for device, block, indices in cache.pages(rid, layer, head):
                indices = list(indices)
                assert 1 <= len(indices) <= PAGE and block.t == len(indices) and block.d == D
                assert all(i % n == device for i in indices)
                data = await pool.mem_read(device, block.addr, block.size_lines * 64)
                assert data == kv_operand_bytes(k[layer, head, indices], v[layer, head, indices])
                held += indices
            assert sorted(held) == list(range(total))


async def check_attention(pool, cache, rid, k, v, rng):
    for layer in range(k.shape[0]):
        for head in range(k.shape[1]):
            q = kv(rng, 2, D)
            partials = [await (pool.devices[device].attention_paged if isinstance(block, PagedKvShare)
                               else pool.devices[device].attention_partial)(q, block)
                        for device, block, _ in cache.pages(rid, layer, head)]
            error = np.max(np.abs(merge_attention(partials) - attention_reference(q, k[layer, head], v[layer, head])))
            assert error <= TOLERANCE


def test_prefill_and_decode_place_token_i_on_device_i_mod_n():
    async def body():
        pool = await DevicePool.model(CFG, 3, **GEOMETRY)
        cache = PagedKvCache(pool, head_dim=D, page_tokens=PAGE)
        rng = np.random.default_rng(0)
        k, v = kv(rng, 2, 2, 11, D), kv(rng, 2, 2, 11, D)
        await cache.add_request("a", k, v)
        await check_layout(pool, cache, "a", k, v)
        short_k, short_v = kv(rng, 1, 1, 2, D), kv(rng, 1, 1, 2, D)      # device 2 holds nothing yet
        await cache.add_request("b", short_k, short_v)
        assert {device for device, _, _ in cache.pages("b", 0, 0)} == {0, 1}
        for _ in range(9):          # across page boundaries on every device
            k_tok, v_tok = kv(rng, 2, 2, D), kv(rng, 2, 2, D)
            await cache.append("a", k_tok, v_tok)
            k = np.concatenate([k, k_tok[:, :, None]], axis=2)
            v = np.concatenate([v, v_tok[:, :, None]], axis=2)
            newest = k.shape[2] - 1
            [device] = [d for d, _, indices in cache.pages("a", 1, 1) if newest in indices]
            assert device == newest % 3
            await check_layout(pool, cache, "a", k, v)
        await cache.append("b", kv(rng, 1, 1, D), kv(rng, 1, 1, D))
        assert [d for d, _, indices in cache.pages("b", 0, 0) if 2 in indices] == [2]
        await check_attention(pool, cache, "a", k, v, rng)
        await cache.free_request("a")
        await cache.free_request("b")
        assert [a.used_bytes for a in pool.allocators] == [0, 0, 0]
        assert "a" not in cache
    run(body())


def test_pages_are_allocated_for_a_full_page():
    async def body():
        pool = await DevicePool.model(CFG, 2, **GEOMETRY)
        cache = PagedKvCache(pool, head_dim=D, page_tokens=PAGE)
        rng = np.random.default_rng(1)
        await cache.add_request(7, kv(rng, 1, 1, 3, D), kv(rng, 1, 1, 3, D))
        full_page = 2 * D * PAGE * 2                # K^T and V of PAGE tokens, whole lines
        return [a.used_bytes for a in pool.allocators], full_page
    used, full_page = run(body())
    assert used == [full_page, full_page]           # tokens 0, 2 on device 0; token 1 on device 1


def test_attention_with_one_device_and_single_token_pages():
    async def body():
        pool = await DevicePool.model(CFG, 1, **GEOMETRY)
        cache = PagedKvCache(pool, head_dim=D, page_tokens=1)
        rng = np.random.default_rng(2)
        k, v = kv(rng, 1, 1, 5, D), kv(rng, 1, 1, 5, D)
        await cache.add_request("r", k, v)
        assert len(cache.pages("r", 0, 0)) == 5
        await check_layout(pool, cache, "r", k, v)
        await check_attention(pool, cache, "r", k, v, rng)
    run(body())


def test_a_request_that_does_not_fit_leaves_nothing_behind():
    async def body():
        pool = await DevicePool.open([ModelTransport(CFG) for _ in range(2)], data_limit=(1 << 21) + 5 * 1024,
                                     **GEOMETRY)
        cache = PagedKvCache(pool, head_dim=D, page_tokens=PAGE)     # 1 KiB pages, 5 per device
        rng = np.random.default_rng(3)
        with pytest.raises(OutOfDeviceMemory, match="device"):
            await cache.add_request("big", kv(rng, 3, 2, 8, D), kv(rng, 3, 2, 8, D))     # 6 pages each
        assert "big" not in cache and [a.used_bytes for a in pool.allocators] == [0, 0]
        await cache.add_request("ok", kv(rng, 2, 2, 8, D), kv(rng, 2, 2, 8, D))          # 4 pages each
        return [a.used_bytes for a in pool.allocators]
    assert asyncio.run(body()) == [4 * 1024, 4 * 1024]


def test_sizes_the_device_cannot_take_are_refused_up_front():
    async def body():
        pool = await DevicePool.model(CFG, 2, **GEOMETRY)
        limit = min(CFG.k_max, CFG.n_max)
        with pytest.raises(ShapeError, match="page_tokens"):
            PagedKvCache(pool, head_dim=D, page_tokens=limit + 1)
        with pytest.raises(ShapeError, match="head_dim"):
            PagedKvCache(pool, head_dim=limit + 1, page_tokens=PAGE)
        cache = PagedKvCache(pool, head_dim=D, page_tokens=PAGE)
        rng = np.random.default_rng(4)
        with pytest.raises(ShapeError, match="head_dim 32"):
            await cache.add_request("x", kv(rng, 1, 1, 3, 32), kv(rng, 1, 1, 3, 32))
        with pytest.raises(ShapeError, match="same shape"):
            await cache.add_request("x", kv(rng, 1, 1, 3, D), kv(rng, 1, 1, 4, D))
        await cache.add_request("x", kv(rng, 1, 2, 3, D), kv(rng, 1, 2, 3, D))
        with pytest.raises(ArgumentError, match="already"):
            await cache.add_request("x", kv(rng, 1, 2, 3, D), kv(rng, 1, 2, 3, D))
        with pytest.raises(ShapeError, match=r"\(1, 2\)"):
            await cache.append("x", kv(rng, 2, 2, D), kv(rng, 2, 2, D))
        with pytest.raises(ArgumentError, match="'y' is not in the KV cache"):
            cache.tokens("y")
        with pytest.raises(ArgumentError, match="head 2"):
            cache.pages("x", 0, 2)
        assert cache.tokens("x") == 3
    run(body())


# ---- the paged layout: one paged ATTENTION per device and request-head share ---------------

PAGED = 32                  # tokens a page: 32 x D x 2 bytes = 4 KiB of keys, 4 KiB of values


def view_of(pool, device):
    queue = pool.devices[device].queue()
    return QueueView(queue.log2_slot, queue.data_base, queue.data_limit)


async def check_paged_layout(pool, cache, rid, k, v):
    """Per (layer, head), the shares cover the request's tokens, token i on device i mod N;
    each share's list is at a 512-byte boundary and holds its pages' addresses, the
    descriptor passes isa.validate (decode rules and page entries), and the key and value
    rows are where isa.validate.page_extents says: K at the page, V page_half_bytes on."""
    n = len(pool)
    layers, heads, total, _ = k.shape
    for layer in range(layers):
        for head in range(heads):
            held = []
            for device, share, indices in cache.shares(rid, layer, head):
                indices = list(indices)
                assert share.tokens == len(indices) and all(i % n == device for i in indices)
                assert share.list_addr % 512 == 0 and share.d == D and share.page_shift == 5
                desc = paged_attention_descriptor(share.list_addr, share.tokens, D, share.page_shift, 2)
                listed = await pool.mem_read(device, share.list_addr, desc.dev_size * 64)
                assert listed == page_list_bytes(share.pages)
                entries = [int(e) for e in np.frombuffer(listed, "<u8")[:page_count(desc)]]
                assert check_descriptor(desc, view_of(pool, device), CFG) == Status.OK
                assert check_pages(desc, entries, view_of(pool, device), CFG) == Status.OK
                start, half = 0, cache.page_half_bytes
                for addr, t in page_extents(desc, entries):
                    rows = indices[start:start + t]
                    assert addr % 4096 == 0 and half == PAGED * D * 2
                    assert await pool.mem_read(device, addr, t * D * 2) == k[layer, head, rows].tobytes()
                    assert await pool.mem_read(device, addr + half, t * D * 2) == v[layer, head, rows].tobytes()
                    start += t
                assert start == share.tokens
                held += indices
            assert sorted(held) == list(range(total))


async def check_decode_step(pool, cache, rid, layer, k, v, rng, group=2):
    """One decode step of one layer: per device, attention_decode with one share per KV
    head (GQA: `group` query heads each), so one paged descriptor per device and
    request-head; each partial equals the golden model's over the device's tokens, and
    the partials merged over devices match float64 attention."""
    heads = k.shape[1]
    q = kv(rng, heads * group, D)
    by_device = {}
    for head in range(heads):
        for device, share, indices in cache.shares(rid, layer, head):
            by_device.setdefault(device, []).append((head, share, list(indices)))
    partials = {head: [] for head in range(heads)}
    for device, items in by_device.items():
        assert [head for head, _, _ in items] == list(range(heads))      # one share per head
        queues = pool.devices[device].queues.values()
        before = sum(queue.next_seq for queue in queues)
        [out] = await pool.devices[device].attention_decode([(q, [share for _, share, _ in items])])
        assert sum(queue.next_seq for queue in queues) - before == heads    # one descriptor per request-head
        for (head, _, indices), partial in zip(items, out):
            rows = q[head * group:(head + 1) * group]
            ref = golden.attention_partial_trans(scale_query(rows), k[layer, head, indices], v[layer, head, indices],
                                                 CFG.lanes, CFG.softmax_lanes)
            assert all(np.array_equal(a, b) for a, b in zip(partial, ref))
            partials[head].append(partial)
    for head in range(heads):
        rows = q[head * group:(head + 1) * group]
        error = np.max(np.abs(merge_attention(partials[head]) - attention_reference(rows, k[layer, head], v[layer, head])))
        assert error <= TOLERANCE


def test_paged_layout_lists_and_one_descriptor_per_share():
    """Prefill, then decode tokens across page boundaries: the layout and the lists after
    each, and decode steps against the golden model and float64."""
    async def body():
        pool = await DevicePool.model(CFG, 2, **GEOMETRY)
        cache = PagedKvCache(pool, head_dim=D, page_tokens=PAGED)
        assert cache.paged and cache.page_shift == 5 and cache.lists_pages == 64
        rng = np.random.default_rng(10)
        k, v = kv(rng, 2, 2, 127, D), kv(rng, 2, 2, 127, D)       # 64 and 63 tokens: 2 pages each
        await cache.add_request("a", k, v)
        await check_paged_layout(pool, cache, "a", k, v)
        await check_decode_step(pool, cache, "a", 1, k, v, rng)
        for _ in range(3):          # 127 fills device 1's second page; 128 and 129 start each device's third
            k_tok, v_tok = kv(rng, 2, 2, D), kv(rng, 2, 2, D)
            await cache.append("a", k_tok, v_tok)
            k = np.concatenate([k, k_tok[:, :, None]], axis=2)
            v = np.concatenate([v, v_tok[:, :, None]], axis=2)
        assert [len(s.pages) for _, s, _ in cache.shares("a", 0, 0)] == [3, 3]
        await check_paged_layout(pool, cache, "a", k, v)
        await check_decode_step(pool, cache, "a", 0, k, v, rng)
        await cache.free_request("a")
        assert [a.used_bytes for a in pool.allocators] == [0, 0]
    run(body())


def test_paged_append_writes_the_rows_in_place():
    """An append writes the token's key row and value row where they stay (nothing read
    back, nothing moved); a new page: the page, then its list entry's line and the tail list."""
    async def body():
        pool = await DevicePool.model(CFG, 1, **GEOMETRY)
        cache = PagedKvCache(pool, head_dim=D, page_tokens=PAGED)
        rng = np.random.default_rng(11)
        await cache.add_request("r", kv(rng, 1, 1, PAGED - 1, D), kv(rng, 1, 1, PAGED - 1, D))
        writes, reads = [], []
        write, read = pool.mem_write, pool.mem_read

        async def recording_write(device, addr, data):
            writes.append((addr, len(data)))
            await write(device, addr, data)

        async def recording_read(device, addr, length):
            reads.append((addr, length))
            return await read(device, addr, length)
        pool.mem_write, pool.mem_read = recording_write, recording_read
        await cache.append("r", kv(rng, 1, 1, D), kv(rng, 1, 1, D))     # the last row of page 0
        [(_, share, _)] = cache.shares("r", 0, 0)
        page, half, row = share.pages[0], cache.page_half_bytes, D * 2
        assert writes == [(page + (PAGED - 1) * row, row), (page + half + (PAGED - 1) * row, row)]
        writes.clear()
        await cache.append("r", kv(rng, 1, 1, D), kv(rng, 1, 1, D))     # page 1's first token
        [(_, share, _)] = cache.shares("r", 0, 0)
        [(_, _, _), (_, tail, _)] = cache.pages("r", 0, 0)
        assert isinstance(tail, PagedKvShare) and tail.pages == (share.pages[1],) and tail.tokens == 1
        assert writes == [(share.pages[1], 2 * half), (share.list_addr, 64), (tail.list_addr, 64)]
        assert reads == []
        assert await read(0, share.list_addr, 64) == page_list_bytes(share.pages)
        assert await read(0, tail.list_addr, 64) == page_list_bytes(tail.pages)
    run(body())


def test_paged_per_page_path_full_pages_as_blocks_and_the_tail_as_a_one_page_share():
    """pages() on the paged layout: a full page is a KvBlock (its values at page_half_bytes
    are where a KvBlock of page_tokens has them), a partial last page a one-page share;
    one ATTENTION per page, merged, matches float64."""
    async def body():
        pool = await DevicePool.model(CFG, 2, **GEOMETRY)
        cache = PagedKvCache(pool, head_dim=D, page_tokens=PAGED)
        rng = np.random.default_rng(12)
        k, v = kv(rng, 1, 2, 2 * PAGED + 10, D), kv(rng, 1, 2, 2 * PAGED + 10, D)
        await cache.add_request("p", k, v)
        kinds = [(device, type(op).__name__, op.t) for device, op, _ in cache.pages("p", 0, 1)]
        assert kinds == [(0, "KvBlock", PAGED), (0, "PagedKvShare", 5), (1, "KvBlock", PAGED), (1, "PagedKvShare", 5)]
        await check_attention(pool, cache, "p", k, v, rng)
    run(body())


def test_paged_lists_split_at_the_descriptor_limits():
    """A share longer than one descriptor takes (here min(k_max, n_max) = 4096 tokens, 4
    pages of 1024) is one list per 4 pages; reserve_request writes nothing, write_lists the
    lists; its pages() are KvBlocks of their tokens (timing runs)."""
    async def body():
        pool = await DevicePool.model(CFG, 1, **GEOMETRY)
        cache = PagedKvCache(pool, head_dim=D, page_tokens=1024)
        assert cache.paged and cache.lists_pages == 4
        cache.reserve_request("long", 5 * 1024 - 24, 1, 1)
        await cache.write_lists("long")
        shares = cache.shares("long", 0, 0)
        assert [(s.tokens, len(s.pages)) for _, s, _ in shares] == [(4096, 4), (1000, 1)]
        assert [(ix.start, ix.stop) for _, _, ix in shares] == [(0, 4096), (4096, 5096)]
        for _, s, _ in shares:
            desc = paged_attention_descriptor(s.list_addr, s.tokens, D, s.page_shift, 1)
            assert check_descriptor(desc, view_of(pool, 0), CFG) == Status.OK
            assert await pool.mem_read(0, s.list_addr, 64) == page_list_bytes(s.pages)
        assert [(type(op), op.t) for _, op, _ in cache.pages("long", 0, 0)] == [(KvBlock, 1024)] * 4 + [(KvBlock, 1000)]
        with pytest.raises(ArgumentError, match="cannot grow"):
            await cache.append("long", kv(np.random.default_rng(0), 1, 1, D), kv(np.random.default_rng(0), 1, 1, D))
        await cache.free_request("long")
        assert pool.allocators[0].used_bytes == 0
    run(body())


def test_paged_allocation_and_a_request_that_does_not_fit():
    """A page is allocated whole (8 KiB) at a 4 KiB boundary; each share adds its list, its
    tail list and its suffix list (512 bytes each); a request that does not fit leaves
    nothing behind."""
    async def body():
        pool = await DevicePool.open([ModelTransport(CFG)], data_limit=(1 << 21) + 5 * 8192, **GEOMETRY)
        base = pool.allocators[0].base
        cache = PagedKvCache(pool, head_dim=D, page_tokens=PAGED)
        rng = np.random.default_rng(13)
        with pytest.raises(OutOfDeviceMemory):
            await cache.add_request("big", kv(rng, 2, 2, 40, D), kv(rng, 2, 2, 40, D))   # 8 pages
        assert "big" not in cache and pool.allocators[0].used_bytes == 0
        await cache.add_request("ok", kv(rng, 1, 2, 40, D), kv(rng, 1, 2, 40, D))        # 4 pages, 2 shares
        assert pool.allocators[0].used_bytes == 4 * 8192 + 2 * 3 * 512
        for head in range(2):
            [(_, share, _)] = cache.shares("ok", 0, head)
            assert all(addr % 4096 == 0 and base <= addr for addr in share.pages)
    run(body())


def test_shares_need_the_paged_layout():
    async def body():
        pool = await DevicePool.model(CFG, 1, **GEOMETRY)
        for page_tokens, d in ((PAGE, D), (48, 128), (16, D)):     # 512 B of keys; not a power of two; 2 KiB
            cache = PagedKvCache(pool, head_dim=d, page_tokens=page_tokens)
            assert not cache.paged
            await cache.add_request("r", kv(np.random.default_rng(0), 1, 1, 3, d), kv(np.random.default_rng(1), 1, 1, 3, d))
            with pytest.raises(ShapeError, match="use pages"):
                cache.shares("r", 0, 0)
            await cache.free_request("r")
    run(body())


@given(first=st.integers(0, 40), more=st.integers(0, 40), per_list=st.integers(1, 9))
def test_share_chunks_cut_a_suffix_at_the_lists(first, more, per_list):
    """Written out: the chunks tile pages first..pages-1 in order, each inside one list,
    every chunk but the first starting a list, and no two in the same list."""
    pages = first + more
    chunks = share_chunks(first, pages, per_list)
    assert [p for a, b in chunks for p in range(a, b)] == list(range(first, pages))
    assert all(a < b and a // per_list == (b - 1) // per_list for a, b in chunks)
    assert all(a % per_list == 0 for a, _ in chunks[1:])
    assert len({a // per_list for a, _ in chunks}) == len(chunks)


def test_shares_after_a_held_prefix():
    """The GPU holds each device's first pages (held[j] of them): shares_after covers the
    rest, a descriptor per list-bounded chunk; a chunk starting inside a list reads the
    suffix list, whose bytes the caller writes; each partial equals the golden model's
    over its tokens, and with the GPU's own partial over the held pages the merge matches
    float64 attention. Lists of 3 pages (the cache's `lists_pages` set down) so that a
    share spans several."""
    async def body():
        pool = await DevicePool.model(CFG, 2, **GEOMETRY)
        cache = PagedKvCache(pool, head_dim=D, page_tokens=PAGED)
        cache.lists_pages = 3
        rng = np.random.default_rng(21)
        k, v = kv(rng, 1, 1, 450, D), kv(rng, 1, 1, 450, D)      # 225 tokens a device: 7 full pages, then 1
        await cache.add_request("r", k, v)
        q = kv(rng, 2, D)
        suffixes = 0
        for held in ([0, 0], [1, 4], [3, 8], [7, 2], [8, 8]):
            covered, partials, seen = [], [], set()
            for device, share, indices, list_bytes in cache.shares_after("r", 0, 0, held):
                indices = list(indices)
                if device not in seen:      # a device's first chunk starts at its first page not held
                    assert indices[0] == held[device] * PAGED * 2 + device
                seen.add(device)
                assert len(share.pages) <= 3
                if list_bytes is not None:
                    suffixes += 1
                    await pool.mem_write(device, share.list_addr, list_bytes)
                desc = paged_attention_descriptor(share.list_addr, share.tokens, D, share.page_shift, 2)
                assert await pool.mem_read(device, share.list_addr, desc.dev_size * 64) == page_list_bytes(share.pages)
                partial = await pool.devices[device].attention_paged(q, share)
                ref = golden.attention_partial_trans(scale_query(q), k[0, 0, indices], v[0, 0, indices],
                                                     CFG.lanes, CFG.softmax_lanes)
                assert all(np.array_equal(a, b) for a, b in zip(partial, ref))
                covered += indices
                partials.append(partial)
            on_gpu = [i for i in range(450) if i not in covered]
            assert sorted(on_gpu) == sorted(i for j in range(2) for i in range(j, 450, 2)
                                            if (i // 2) // PAGED < held[j])
            if on_gpu:
                partials.append(partial_attention_reference(scale_query(q), k[0, 0, on_gpu], v[0, 0, on_gpu]))
            error = np.max(np.abs(merge_attention(partials) - attention_reference(q, k[0, 0], v[0, 0])))
            assert error <= TOLERANCE
        assert suffixes >= 3
        with pytest.raises(ArgumentError, match="cannot hold 9"):
            cache.shares_after("r", 0, 0, [9, 0])
    run(body())
