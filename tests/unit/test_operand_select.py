"""hw/operand_select.py on Amaranth's simulator: every lane's x is element
(first + lane_row) mod LANES of the line, for lane rows as the compute unit makes them
(packed row j // N for any N, transposed j mod K); and isa/pe_array.py's lane_sources
holds every lane row that rule can give."""
import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.operand_select import OperandSelect, select_muxes
from isa.pe_array import lane_sources


def lane_row(j, lanes, n=None, k_log2=None):
    """The compute unit's lane row (hw/compute_unit.py _lane_rows), written from its rule:
    transposed j mod 2^k_log2; else j // N, 0 when N is 0 or exceeds LANES."""
    if k_log2 is not None:
        return j % (1 << k_log2)
    return 0 if n == 0 or n > lanes else j // n


@pytest.mark.parametrize("lanes", [32, 64, 128, 512])
def test_lane_sources_hold_every_lane_row(lanes):
    lane_bits = (lanes - 1).bit_length()
    for j in range(lanes):
        sources = set(lane_sources(j, lanes))
        rows = {lane_row(j, lanes, n=n) for n in range(0, 2 * lanes + 2)}
        rows |= {lane_row(j, lanes, k_log2=t) for t in range(lane_bits + 1)}
        assert rows <= sources, j
        assert 0 in sources and max(sources) <= j


def test_lane_sources_are_few_and_checked():
    assert lane_sources(0, 32) == (0,)
    assert lane_sources(5, 32) == (0, 1, 2, 5)                 # 5 // N and 5 mod 2^t
    assert sum(len(lane_sources(j, 512)) for j in range(512)) == 15817  # against 512 x 512 sources
    with pytest.raises(ValueError, match="lane 32 is outside"):
        lane_sources(32, 32)


def test_select_muxes_counts_rotator_and_lanes():
    # 32 lanes: the rotator's stages over 64 units, amount 5 bits (digits of 1 and 4 bits):
    # 47 units x 1 mux, then 32 units x 15; the lanes' choices: sum of (sources - 1)
    lanes_part = sum(len(lane_sources(j, 32)) - 1 for j in range(32))
    assert select_muxes(32) == 47 * 1 + 32 * 15 + lanes_part
    assert select_muxes(512) < 512 * 511 / 8                      # the old crossbar's per bit


def run(lanes, cases):
    dut = OperandSelect(lanes)
    got = []

    async def bench(ctx):
        for line, first, rows in cases:
            ctx.set(dut.line, line)
            ctx.set(dut.first, first)
            for j, r in enumerate(rows):
                ctx.set(dut.lane_row[j], r)
            await ctx.tick()
            got.append([ctx.get(dut.x[j]) for j in range(lanes)])

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got


@pytest.mark.parametrize("lanes", [32, 64])
def test_every_lane_takes_its_element(lanes):
    rng = np.random.default_rng(lanes)
    lane_bits = (lanes - 1).bit_length()
    cases = []
    for n in list(range(0, lanes + 2)) + [None] * (lane_bits + 1):
        elems = rng.integers(0, 1 << 16, lanes, dtype=np.uint64)
        line = sum(int(e) << (16 * i) for i, e in enumerate(elems))
        first = int(rng.integers(0, lanes))
        if n is None:
            rows = [lane_row(j, lanes, k_log2=int(rng.integers(0, lane_bits + 1))) for j in range(lanes)]
        else:
            rows = [lane_row(j, lanes, n=n) for j in range(lanes)]
        cases.append((line, first, rows, elems))
    got = run(lanes, [c[:3] for c in cases])
    for (line, first, rows, elems), x in zip(cases, got):
        assert x == [int(elems[(first + r) % lanes]) for r in rows]
