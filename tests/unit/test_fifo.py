"""hw/fifo.py against amaranth.lib.fifo, cycle for cycle: both FIFOs side by side on
Amaranth's simulator, the same random writes (data and enable) and reads, every output
port compared every cycle, at depths that are and are not powers of two."""
import random

import pytest
from amaranth import Module
from amaranth.lib import fifo as reference
from amaranth.sim import Simulator

from hw import fifo

PORTS = ("w_rdy", "r_rdy", "r_data", "level", "w_level", "r_level")


@pytest.mark.parametrize("kind", ["SyncFIFO", "SyncFIFOBuffered"])
@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5, 8, 13])
def test_fifo_matches_amaranths_every_cycle(kind, depth):
    m = Module()
    ours = m.submodules.ours = getattr(fifo, kind)(width=8, depth=depth)
    theirs = m.submodules.theirs = getattr(reference, kind)(width=8, depth=depth)
    rng = random.Random(depth * 31 + len(kind))
    seen = {"cycles": 0, "full": 0, "writes": 0, "reads": 0}

    async def bench(ctx):
        # bursts of mostly-writes then mostly-reads, so the FIFO runs full and empty
        for cycle in range(1500):
            bias = 0.8 if (cycle // 60) % 2 == 0 else 0.2
            w_en, r_en, data = rng.random() < bias, rng.random() > bias, rng.getrandbits(8)
            for f in (ours, theirs):
                ctx.set(f.w_en, w_en)
                ctx.set(f.r_en, r_en)
                ctx.set(f.w_data, data)
            for port in PORTS:
                got, want = ctx.get(getattr(ours, port)), ctx.get(getattr(theirs, port))
                # r_data counts only where it is valid
                if port != "r_data" or ctx.get(theirs.r_rdy):
                    assert got == want, (kind, depth, cycle, port, got, want)
            seen["full"] += ctx.get(theirs.level) == depth
            seen["writes"] += w_en and ctx.get(theirs.w_rdy)
            seen["reads"] += r_en and ctx.get(theirs.r_rdy)
            seen["cycles"] += 1
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen["cycles"] == 1500 and seen["full"] > 0 and seen["writes"] > 100 and seen["reads"] > 100
