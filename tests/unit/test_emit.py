"""scheduler.emit.attention_round against the driver's KV cache on model devices: on a paged
cache, one paged ATTENTION per request, KV head and device over the pages the GPU does not
hold (their addresses the cache's own placement, read back from the list the descriptor
points at), each run through the driver to the golden model's partial over exactly those
tokens, and merged with the GPU's share (the held pages) to float64 attention; on an
unpaged cache, one ATTENTION per page."""
import collections

import numpy as np
import pytest

import isa
from driver import DevicePool, KvBlock, PagedKvCache
from driver.attention import (attention_reference, merge_attention, partial_attention_reference, query_groups,
                              scale_query)
from driver.clock import run
from driver.device import attention_result
from isa.validate import page_count, paged
from scheduler.emit import attention_round
from sim import golden

CFG = isa.load_config("default")
D = 64
TOLERANCE = 2e-3            # as tests/unit/test_kv_cache.py
GROUPS = query_groups(4, 2)                 # two KV heads, two query heads each
LAYER = 1                                   # of two: a wrong layer reads other values


def kv(rng, *shape):
    return rng.standard_normal(shape).astype(np.float16)


def placed_pages(cache, rid, layer, head):
    """{device: [(page address, its global token indices)]}: the cache's own placement."""
    out = collections.defaultdict(list)
    for device, operand, tokens in cache.pages(rid, layer, head):
        addr = operand.addr if isinstance(operand, KvBlock) else operand.pages[0]
        out[device].append((addr, list(tokens)))
    return out


async def emit_and_run(cache, pool, contexts, held, rng, on_devices=True):
    """Place the requests, emit one layer's round, run its device ops on the pool; returns
    (round, {id(op): (O, m, l)}, k, v, q by request)."""
    k = {rid: kv(rng, 2, 2, t, D) for rid, t in contexts.items()}
    v = {rid: kv(rng, 2, 2, t, D) for rid, t in contexts.items()}
    for rid in contexts:
        await cache.add_request(rid, k[rid], v[rid])
        if cache.paged and on_devices:
            await cache.write_skip_lists(rid, held[rid])
    rnd = attention_round(cache, LAYER, list(contexts), held, GROUPS, on_devices)
    q = {rid: kv(rng, 4, D) for rid in contexts}
    items = [(op.device, op.descriptor, scale_query(q[op.key[0]][list(op.rows)]).tobytes()) for op in rnd.device_ops]
    results = {}
    if items:
        tickets = await pool.submit_many(items)
        which = {id(t): op for t, op in zip(tickets, rnd.device_ops)}
        async for ticket, completion in pool.as_completed(tickets):
            op = which[id(ticket)]
            results[id(op)] = attention_result(completion.check().result, op.descriptor)
    return rnd, results, k, v, q


def check_merged(rnd, results, contexts, k, v, q):
    """The GPU's share (its op's tokens) merged with the devices' partials is float64
    attention over every token, per request and KV head; the two cover every token once."""
    partials = collections.defaultdict(list)
    covered = collections.defaultdict(list)
    for op in rnd.device_ops:
        partials[op.key[:2]].append(results[id(op)])
    for op in rnd.gpu_ops:
        rid, head, tokens = op.key
        rows = q[rid][list(op.rows)]
        mine = partial_attention_reference(scale_query(rows), k[rid][LAYER, head, list(tokens)],
                                           v[rid][LAYER, head, list(tokens)])
        merged = merge_attention([mine] + partials[(rid, head)])
        error = np.max(np.abs(merged - attention_reference(rows, k[rid][LAYER, head], v[rid][LAYER, head])))
        assert error <= TOLERANCE, (rid, head, error)
        covered[(rid, head)] += list(tokens)
    return covered


def test_paged_round_one_descriptor_per_share_without_the_held_pages():
    """Two devices, pages of 32 tokens (4 KiB of keys): request a (100 tokens a device: 4
    pages) with 1 page held on device 0 and 2 on device 1 (so both shares start inside their
    list, through skip lists), b (25 a device: 1 page) with device 1's page held (nothing to
    run there), c (70: 3 pages) with nothing held."""
    contexts = {"a": 200, "b": 50, "c": 140}
    held = {"a": [1, 2], "b": [0, 1], "c": [0, 0]}

    async def body():
        pool = await DevicePool.model(CFG, 2, log2_depth=4, log2_slot=14)
        cache = PagedKvCache(pool, head_dim=D, page_tokens=32)
        assert cache.paged
        rnd, results, k, v, q = await emit_and_run(cache, pool, contexts, held, np.random.default_rng(20))
        # one per (request, head, device) with a page the GPU does not hold
        keys = sorted((op.key[0], op.key[1], op.device) for op in rnd.device_ops)
        assert keys == sorted((rid, head, device) for rid, head, device in
                              [("a", h, 0) for h in (0, 1)] + [("a", h, 1) for h in (0, 1)] +
                              [("b", h, 0) for h in (0, 1)] + [("c", h, d) for h in (0, 1) for d in (0, 1)])
        device_tokens = collections.defaultdict(list)
        for op in rnd.device_ops:
            rid, head, first = op.key
            desc = op.descriptor
            assert paged(desc) and desc.in_rows == 2 and op.rows == tuple(GROUPS[head])
            # its list, read back from the device: the cache's own pages from the first not held
            mine = placed_pages(cache, rid, LAYER, head)[op.device][held[rid][op.device]:]
            listed = await pool.mem_read(op.device, desc.dev_addr, desc.dev_size * 64)
            entries = np.frombuffer(listed, "<u8")[:page_count(desc)].tolist()
            assert entries == [addr for addr, _ in mine]
            tokens = [i for _, indices in mine for i in indices]
            assert desc.dev_rows == len(tokens) and first == tokens[0]
            # the device's partial: the golden model's over exactly those tokens
            rows = scale_query(q[rid][list(op.rows)])
            ref = golden.attention_partial_trans(rows, k[rid][LAYER, head, tokens], v[rid][LAYER, head, tokens],
                                                 CFG.lanes)
            assert all(np.array_equal(a, b) for a, b in zip(results[id(op)], ref)), (rid, head, op.device)
            device_tokens[(rid, head)] += tokens
        assert {op.descriptor.dev_rows for op in rnd.device_ops if op.key[0] == "a"} == {100 - 32, 100 - 64}
        covered = check_merged(rnd, results, contexts, k, v, q)
        for (rid, head), gpu in covered.items():
            # the held prefix is the GPU's and no device's; together every token once
            assert not set(gpu) & set(device_tokens[(rid, head)])
            assert sorted(gpu + device_tokens[(rid, head)]) == list(range(contexts[rid]))
        assert sorted(covered[("a", 0)]) == sorted(list(range(0, 64, 2)) + list(range(1, 128, 2)))
    run(body())


def test_without_the_devices_the_gpu_takes_every_token():
    async def body():
        pool = await DevicePool.model(CFG, 2, log2_depth=4, log2_slot=14)
        cache = PagedKvCache(pool, head_dim=D, page_tokens=32)
        contexts = {"a": 200}
        rnd, results, k, v, q = await emit_and_run(cache, pool, contexts, {"a": [1, 2]}, np.random.default_rng(21),
                                                    on_devices=False)
        assert rnd.device_ops == []
        covered = check_merged(rnd, results, contexts, k, v, q)
        assert all(sorted(t) == list(range(200)) for t in covered.values())
    run(body())


def test_unpaged_cache_one_descriptor_per_page():
    """Pages of 4 tokens (512 bytes of keys: the unpaged layout): one ATTENTION per page the
    GPU does not hold, each to the golden model's partial over its tokens."""
    contexts = {"a": 19, "b": 6}
    held = {"a": [1, 0], "b": [2, 0]}

    async def body():
        pool = await DevicePool.model(CFG, 2, log2_depth=5, log2_slot=14)
        cache = PagedKvCache(pool, head_dim=D, page_tokens=4)
        assert not cache.paged
        rnd, results, k, v, q = await emit_and_run(cache, pool, contexts, held, np.random.default_rng(22))
        # a: 10 and 9 tokens (3 pages each), 1 held on device 0; b: 3 each (1 page), device 0's held
        per = collections.Counter((op.key[0], op.device) for op in rnd.device_ops)
        assert per == {("a", 0): 2 * 2, ("a", 1): 3 * 2, ("b", 1): 1 * 2}
        for op in rnd.device_ops:
            rid, head, first = op.key
            assert not paged(op.descriptor)
            [(addr, tokens)] = [(a, t) for a, t in placed_pages(cache, rid, LAYER, head)[op.device] if t[0] == first]
            assert op.descriptor.dev_addr == addr
            ref = golden.attention_partial_trans(scale_query(q[rid][list(op.rows)]), k[rid][LAYER, head, tokens],
                                                 v[rid][LAYER, head, tokens], CFG.lanes)
            assert all(np.array_equal(a, b) for a, b in zip(results[id(op)], ref))
        check_merged(rnd, results, contexts, k, v, q)
    run(body())


def test_a_share_skipping_pages_needs_its_list():
    """Emission refuses a share starting inside a list whose skip list was not written."""
    async def body():
        pool = await DevicePool.model(CFG, 2, log2_depth=4, log2_slot=14)
        cache = PagedKvCache(pool, head_dim=D, page_tokens=32)
        rng = np.random.default_rng(23)
        await cache.add_request("a", kv(rng, 2, 2, 200, D), kv(rng, 2, 2, 200, D))
        with pytest.raises(Exception, match="write_skip_lists"):
            attention_round(cache, LAYER, ["a"], {"a": [1, 0]}, GROUPS)
    run(body())
