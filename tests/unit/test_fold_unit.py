"""The fold unit: the model (sim/fold_unit.py) against the RTL (hw/fold_unit.py), cycle for
cycle, through the harness of ties.py (its docstring gives the cycle convention)."""
import numpy as np
import pytest
from amaranth.sim import Simulator

import isa


# (sets, sets1, pack_log2, N): 0 adds; 1 (a second set; PE row 1's set); 2 (set + tree);
# 4 (three sets, PE row 1, tree); 5 (three sets, three of PE row 1). Each shape with the
# consumer never stalling and stalling half the time: `make test` runs each shape once,
# the stalls alternating, `make test-full` (slow) the other half too.
SHAPES = [(1, 0, 0, 100), (2, 0, 0, 40), (1, 1, 0, 100), (1, 1, 1, 8), (3, 1, 1, 8), (3, 3, 0, 40)]


@pytest.mark.parametrize("sets,sets1,pack_log2,n,stall", [
    pytest.param(*shape, stall, marks=[pytest.mark.slow] if (i + j) % 2 else [])
    for j, stall in enumerate([0.0, 0.5]) for i, shape in enumerate(SHAPES)])
def test_fold_unit_cycles(sets, sets1, pack_log2, n, stall):
    """hw/fold_unit.py's request takes and sums out, against sim/fold_unit.py, with a
    consumer that stalls at random (the sums' values: tests/unit/test_compute_unit.py)."""
    from hw.fold_unit import FoldUnit
    from sim import fold_unit as model_fold
    cfg = isa.load_config("small")
    dut = FoldUnit(cfg, cfg.n_max // cfg.lanes, shared_cells=False)
    steps = sets - 1 + sets1 + pack_log2
    words = 30
    ready = np.random.default_rng(steps * 10 + int(stall * 10)).random(40 * words) >= stall
    seen = {"taken": [], "popped": []}

    async def bench(ctx):
        for name, value in (("sets", sets), ("sets1", sets1), ("pack_log2", pack_log2), ("n_cols", n),
                            ("n_words", -(-n // cfg.lanes))):
            ctx.set(getattr(dut, name), value)
        ctx.set(dut.req.payload.row, 0)
        for cycle in range(len(ready)):
            asked = len(seen["taken"])
            ctx.set(dut.req.valid, asked < words)
            ctx.set(dut.req.payload.word, asked % 2)
            ctx.set(dut.out.ready, int(ready[cycle]))
            if asked < words and ctx.get(dut.req.ready):
                seen["taken"].append(cycle)
            if ctx.get(dut.out.valid) and ready[cycle]:
                seen["popped"].append(cycle)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    taken, popped = [], []
    for i in range(words):
        taken.append(model_fold.next_take(0, taken, popped, steps))
        cycle = max(taken[-1] + model_fold.out_delay(steps), popped[-1] + 1 if popped else 0)
        while not ready[cycle]:
            cycle += 1
        popped.append(cycle)
    assert seen["taken"] == taken
    assert seen["popped"] == popped
