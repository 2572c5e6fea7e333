"""boost/dsr.py: block types, free lists, fulfilment, boundary conditions and the layout."""
from fractions import Fraction

import numpy as np
import pytest

from boost.dsr import BlockTypes, DsrPool, KvShape, PoolExhausted

SHAPE4 = KvShape(layers=2, kv_heads=4, head_dim=8, block_tokens=16)


@pytest.mark.parametrize("H, M", [(4, 12), (8, 12), (1, 2), (8, 3), (32, 28), (12, 12), (24, 12), (5, 7)])
def test_types_give_exactly_one_mth_over_every_m_blocks(H, M):
    t = BlockTypes(H, M)
    assert t.lo == H // M and t.hi == -(-H // M)
    pattern = t.pattern(M * 5)
    host = sum(t.host_heads(b) for b in pattern)
    assert Fraction(host, H * M * 5) == Fraction(1, M)
    if H < M:                       # single-head-host : all-local = H : M - H
        assert (t.hi, t.lo, sum(pattern[:M])) == (1, 0, H)


def test_greedy_sticky_fulfilment_keeps_the_free_mix():
    pool = DsrPool(120, SHAPE4, 12)                  # 40 single-head-host, 80 all-local
    assert sum(pool.is_hi) == 40
    kinds = []
    for r in range(12):
        for _ in range(5):
            pool.allocate(r)
        kinds.append(pool.kind[r])
        assert len({pool.is_hi[b] for b in pool.blocks[r]}) == 1   # one type per request
    assert kinds[0] is False                          # free share equals H/M: not above it
    assert sum(kinds) == 4                            # a third of the requests host a head
    host = sum(pool.host_heads(b) for r in range(12) for b in pool.blocks[r])
    assert Fraction(host, 4 * 60) == Fraction(1, 12)


def test_boundary_conditions_switch_type_stickily_then_defer():
    pool = DsrPool(12, SHAPE4, 12, reserve=1)        # 4 high, 8 low
    for _ in range(8):
        pool.allocate("a")                            # low type, drains the low list
    assert pool.kind["a"] is False and not pool.free[False]
    pool.allocate("a")                                # low list empty: takes a high block ...
    assert pool.kind["a"] is True and "a" in pool.mixed
    pool.allocate("a")                                # ... and keeps that type
    assert pool.is_hi[pool.blocks["a"][-1]]
    pool.allocate("b")
    with pytest.raises(PoolExhausted, match="defer to the scheduler"):
        pool.allocate("b")                            # one block left = the reserve
    pool.release("a")
    assert pool.free_count() == 11 and "a" not in pool.kind


def test_high_list_empty_falls_back_to_all_local():
    pool = DsrPool(12, SHAPE4, 12)
    pool.free[True].clear()
    pool.kind["x"] = True
    pool.blocks["x"] = []
    b = pool.allocate("x")
    assert not pool.is_hi[b] and pool.kind["x"] is False


def test_heads_outermost_layout_is_contiguous_and_in_its_tier():
    shape = KvShape(layers=3, kv_heads=4, head_dim=16, block_tokens=16)
    pool = DsrPool(36, shape, 12, page_bytes=4096)
    pl = pool.placement()
    chunk = shape.chunk_bytes
    seen = set()
    for b in range(36):
        for h in range(4):
            off = pool.chunk_offset(b, h)
            assert off % chunk == 0 and off not in seen
            seen.add(off)
            host = pl.second_bytes_in(np.array([off]), np.array([off + chunk]))[0]
            assert host == (chunk if h < pool.host_heads(b) else 0)   # the whole chunk in one tier
    # every layer's slice of a head lies inside its chunk
    segs = pool.segment([0, 1], 0, layer=2)
    assert np.all(segs - np.array([pool.chunk_offset(0, 0), pool.chunk_offset(1, 0)]) == 2 * shape.head_layer_bytes)


def test_bad_h_or_m_is_refused():
    with pytest.raises(ValueError, match=r"kv_heads \(H\) must be an integer >= 1"):
        BlockTypes(0, 12)
    with pytest.raises(ValueError, match=r"modulus \(M\) must be an integer >= 2"):
        BlockTypes(4, 1)
    with pytest.raises(ValueError, match="n_blocks must be an integer >= 1"):
        DsrPool(0, SHAPE4, 12)
