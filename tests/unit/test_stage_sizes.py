"""hw/stage_sizes.py against the plan arithmetic: the planner's model (sim/stage_planner.py
plan_stage, itself tied to isa/pe_array.py) for the packing and the runs, and a paged
stage's pages written out here (rows of 2^shift a page, the whole packs' rows over them)."""
from hypothesis import given, settings, strategies as st

import isa
from ties import simulate
from hw.stage_sizes import StageSizes
from sim.stage_planner import plan_stage
from test_stage_planner import CASES

CFG = isa.load_config("default")
LANES = CFG.lanes
STEPS = 3                   # the sizes are valid in the third cycle of held inputs


def run_sizes(cases):
    """Each (K, N, transposed, page shift) held for the three steps; the sizes read in the third."""
    dut = StageSizes(CFG)
    seen = []

    async def bench(ctx):
        for k, n, trans, shift in cases:
            ctx.set(dut.k, k)
            ctx.set(dut.n, n)
            ctx.set(dut.trans, trans)
            ctx.set(dut.page_shift, shift)
            await ctx.tick().repeat(STEPS - 1)
            seen.append({name: ctx.get(getattr(dut.sizes, name)) for name in dut.sizes.shape().members})

    simulate(dut, bench)
    return seen


def expected(k, n, trans, shift):
    plan = plan_stage(k, n, trans, 2, LANES)
    rows_dim, cols_dim = (n, k) if trans else (k, n)
    pack = 1
    while 2 * pack * n <= LANES:
        pack *= 2
    main_rows = plan.full_groups * plan.pack
    page = 1 << shift
    pages = -(-main_rows // page)
    return {
        "k": k, "n": n, "trans": int(trans), "pack_log2": pack.bit_length() - 1, "run_log2": plan.run_log2,
        "rows_dim": rows_dim, "cols_dim": cols_dim, "n_words": plan.n_words, "t_level": plan.t_level,
        "t_scalar": int(plan.t_scalar), "t_fold_adds": plan.t_fold_adds, "full_groups": plan.full_groups,
        "main_rows": main_rows, "main_elems": plan.main_elems, "rest_rows": plan.rest_rows,
        "rest_elems": plan.rest_rows * cols_dim, "groups": -(-k // pack), "sets": plan.sets,
        "main_pages": pages, "rest_page": main_rows // page,
        # the last page's rows: what the pages before it leave (none without whole packs)
        "last_elems": (main_rows - (pages - 1) * page) * cols_dim if pages else page * cols_dim,
        "tail_elems": (main_rows % page) * cols_dim,
    }


def test_sizes_equal_the_plan():
    cases = [(k, n, trans, shift) for (k, n, trans, _), shift in zip(CASES, [4, 5, 6, 0, 3] * 4)]
    for case, got in zip(cases, run_sizes(cases)):
        assert got == expected(*case), case


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3000), st.integers(1, 300), st.booleans(), st.integers(0, 12)),
                min_size=1, max_size=8))
def test_random_sizes_equal_the_plan(cases):
    for case, got in zip(cases, run_sizes(cases)):
        assert got == expected(*case), case
