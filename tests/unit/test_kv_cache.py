"""driver.kv_cache.PagedKvCache on a pool of device models: token i on device i mod N, each
page's bytes in device memory, and split attention over the pages against float64."""
import asyncio

import numpy as np
import pytest

import isa
from driver import (ArgumentError, DevicePool, OutOfDeviceMemory, PagedKvCache, ShapeError,
                    attention_reference, kv_operand_bytes, merge_attention)
from driver.clock import run
from driver.model_transport import ModelTransport

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
            partials = [await pool.devices[device].attention_partial(q, block)
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
