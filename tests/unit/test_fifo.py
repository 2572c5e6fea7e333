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


# the single-ported FIFO is SyncFIFOBuffered's double
REFERENCE = {"SyncFIFO": "SyncFIFO", "SyncFIFOBuffered": "SyncFIFOBuffered",
             "SyncFIFOSinglePort": "SyncFIFOBuffered"}
# how the enables are drawn: bursts of mostly-writes then mostly-reads (the FIFO runs full and
# empty); both every cycle with pauses (the single port's alternation at full rate); writes
# at full rate against reads that stall (the memory fills, then drains at one a cycle)
PATTERNS = {
    "bursts": lambda cycle, rng, depth: (rng.random() < (b := 0.8 if (cycle // max(60, 3 * depth)) % 2 == 0 else 0.2),
                                         rng.random() > b),
    "full_rate": lambda cycle, rng, depth: (cycle % 97 < 90, cycle % 89 < 80 or rng.random() < 0.5),
    "stalls": lambda cycle, rng, depth: (rng.random() < 0.95, (cycle // max(40, 2 * depth)) % 3 != 0),
}


# below 4 the single-ported FIFO is Amaranth's own (hw/fifo.py): nothing to compare
CASES = [(kind, depth) for kind in REFERENCE for depth in (1, 2, 3, 4, 5, 8, 13, 64)
         if kind != "SyncFIFOSinglePort" or depth >= 4]


@pytest.mark.parametrize("pattern", list(PATTERNS))
@pytest.mark.parametrize(("kind", "depth"), CASES)
def test_fifo_matches_amaranths_every_cycle(kind, depth, pattern):
    m = Module()
    ours = m.submodules.ours = getattr(fifo, kind)(width=8, depth=depth)
    theirs = m.submodules.theirs = getattr(reference, REFERENCE[kind])(width=8, depth=depth)
    rng = random.Random(depth * 31 + len(kind) + 7 * len(pattern))
    seen = {"cycles": 0, "full": 0, "writes": 0, "reads": 0}

    async def bench(ctx):
        for cycle in range(1500):
            w_en, r_en = PATTERNS[pattern](cycle, rng, depth)
            data = rng.getrandbits(8)
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
    assert seen["cycles"] == 1500 and seen["writes"] > 100 and seen["reads"] > 100
    assert seen["full"] > 0 or pattern == "full_rate"
