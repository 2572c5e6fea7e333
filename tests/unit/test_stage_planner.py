"""The stage planner: the RTL (hw/stage_planner.py) against its model (sim/stage_planner.py),
field for field, and the model against isa/pe_array.py's plan arithmetic written out here
(the packing, the words, the sets, the runs)."""
import dataclasses

import pytest

import isa
from amaranth import Elaboratable, Module
from ties import simulate
from isa.pe_array import Route
from sim.stage_planner import plan_stage

CFG = isa.load_config("default")
LANES = CFG.lanes
SIZE_STEPS = 3              # hw/stage_sizes.py: its sizes valid in the third cycle of held inputs
# (K, N, transposed, input rows): packed (N <= LANES / 2), one word, several words and sets,
# the split (one input row), K not a multiple of the packing, K < pack, transposed packed
# (K a power of two) and not (K not a power of two, one and several chunks a row)
CASES = [(64, 8, False, 4), (64, 8, False, 1), (37, 5, False, 1), (3, 8, False, 2), (100, 32, False, 3),
         (100, 33, False, 1), (7, 100, False, 1), (256, 96, False, 4), (1, 1, False, 1), (1000, 17, False, 2),
         (8, 40, True, 1), (32, 40, True, 4), (1, 9, True, 2), (24, 7, True, 1), (70, 33, True, 3),
         (200, 5, True, 1), (16, 100, True, 2)]


class SizedPlanner(Elaboratable):
    """The planner fed by the stage's sizes as the decoder works them out (hw/stage_sizes.py)."""
    def __init__(self):
        from hw.stage_planner import StagePlanner
        from hw.stage_sizes import StageSizes
        self.sizes, self.planner = StageSizes(CFG), StagePlanner(CFG)

    def elaborate(self, platform):
        m = Module()
        m.submodules.sizes, m.submodules.planner = self.sizes, self.planner
        m.d.comb += self.planner.stage.payload.eq(self.sizes.sizes)
        return m


def run_planner(stages, pipe_busy=0):
    """Load each (K, N, transposed, input rows[, route]) (the route: the control unit's
    when left out), its sizes worked out first (the sizes' steps, SIZE_STEPS cycles), and
    read the planner's registers after it; also `ready` before each load. `pipe_busy` from
    the second load on."""
    top = SizedPlanner()
    sizes, dut = top.sizes, top.planner
    fields = [f.name for f in dataclasses.fields(plan_stage(1, 1, False, 1, LANES)) if f.name != "sets_used"]
    seen = []

    async def bench(ctx):
        for i, (k, n, trans, rows, *route) in enumerate(stages):
            route = route[0] if route else Route.of_stage(rows, trans)
            ctx.set(sizes.k, k)
            ctx.set(sizes.n, n)
            ctx.set(sizes.trans, trans)
            await ctx.tick().repeat(SIZE_STEPS - 1)
            ctx.set(dut.route, route)
            ctx.set(dut.pipe_busy, pipe_busy if i else 0)
            ctx.set(dut.stage.valid, 1)
            ready, has_full = ctx.get(dut.stage.ready), ctx.get(dut.has_full)
            await ctx.tick()
            ctx.set(dut.stage.valid, 0)
            plan = ctx.get(dut.plan)
            regs = {name: getattr(plan.mode if name in ("trans", "t_level", "t_scalar", "t_fold_adds") else plan, name)
                    for name in fields}
            regs["sets_used"] = tuple(ctx.get(dut.sets_used[q]) for q in range(2))
            seen.append((ready, has_full, regs))

    simulate(top, bench)
    return seen


def test_registers_equal_the_model():
    # and on one PE row: attention's S V on row 1, its q K^T on row 0, a stage on row 0
    cases = CASES + [(64, 8, False, 1, Route.ROW1), (100, 33, False, 1, Route.ROW1), (8, 40, True, 1, Route.ROW0),
                     (37, 5, False, 2, Route.ROW0)]
    seen = run_planner(cases)
    for (k, n, trans, rows, *route), (ready, has_full, regs) in zip(cases, seen):
        plan = plan_stage(k, n, trans, rows, LANES, *route)
        want = dataclasses.asdict(plan)
        want = {name: int(v) if not isinstance(v, tuple) else v for name, v in want.items()}
        assert regs == want, (k, n, trans, rows)
        assert ready == 1
        assert has_full == (plan.full_groups != 0)


@pytest.mark.parametrize("k,n,trans,rows", CASES)
def test_model_follows_the_pe_array_rules(k, n, trans, rows):
    plan = plan_stage(k, n, trans, rows, LANES)
    rows_dim, cols_dim = (n, k) if trans else (k, n)
    if trans:
        # a row of S packs LANES / K rows a chunk when K is a power of two <= LANES
        pack = LANES // k if k <= LANES and k & (k - 1) == 0 else 1
        assert plan.sets_used == (1, 0) and plan.pack_log2 == 0 and plan.fold_steps == 0
        assert plan.t_scalar == (k > LANES)
        assert plan.t_fold_adds == min(-(-k // LANES), 3) - 1 if k > LANES else plan.t_fold_adds == 0
    else:
        pack = 1
        while 2 * pack * n <= LANES:
            pack *= 2
        groups = -(-k // pack)
        words = -(-n // LANES)
        sets = -(-3 // words)
        split = rows == 1
        per_row = [-(-groups // 2), groups // 2] if split else [groups, 0]
        assert plan.sets_used == tuple(min(sets, g) for g in per_row)
        assert (plan.n_words, plan.sets, plan.pack_log2) == (words, sets, pack.bit_length() - 1)
    assert plan.pack == pack and plan.cols_dim == cols_dim
    assert plan.full_groups * pack + plan.rest_rows == rows_dim and plan.rest_rows < pack
    assert plan.main_elems == plan.full_groups * pack * cols_dim


def test_a_stage_in_another_mode_waits_for_the_pipeline():
    # the first load sets a transposed mode; with the pipeline busy a plain stage (another
    # mode) and a transposed stage of another tree are refused, one of the same tree is not
    trans = (16, 40, True, 1)
    same_tree, other_tree, plain = (16, 9, True, 2), (8, 40, True, 1), (64, 8, False, 4)
    for second, ready in ((same_tree, 1), (other_tree, 0), (plain, 0)):
        seen = run_planner([trans, second], pipe_busy=1)
        assert seen[1][0] == ready, second
        # refused: the registers keep the first stage's plan
        kept = plan_stage(*(trans if not ready else second), LANES)
        assert seen[1][2]["trans"] == kept.trans and seen[1][2]["cols_dim"] == kept.cols_dim
    # a refused stage is taken once the pipeline is empty
    assert run_planner([trans, plain], pipe_busy=0)[1][0] == 1


def test_bad_dims_are_refused():
    with pytest.raises(ValueError, match="K, N >= 1"):
        plan_stage(0, 4, False, 1, LANES)


@pytest.mark.parametrize("groups", [0, 1, 2, 5, 6, 37])
def test_routes_spread_the_groups_as_the_plan_does(groups):
    # Route.row_groups (the planner's per-row k-groups) and Plan.row_groups (the golden
    # order's) say the same for the split and for a stage of several input rows
    from isa.pe_array import plan as pe_plan
    k = groups * 4                                           # N = 8 at 32 lanes packs 4 rows
    assert list(Route.SPLIT.row_groups(groups)) == pe_plan(8, 32, 1).row_groups(k)
    assert [Route.ALL.row_groups(groups)[0]] == pe_plan(8, 32, 2).row_groups(k)
    assert Route.ROW0.row_groups(groups) == (groups, 0) and Route.ROW1.row_groups(groups) == (0, groups)
