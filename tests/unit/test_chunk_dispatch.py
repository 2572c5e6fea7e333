"""The chunk dispatch: the RTL (hw/chunk_dispatch.py) against its model (sim/chunk_dispatch.py),
chunk for chunk, over a stage's unpacker slots written out here from the unpacker's
contract (hw/unpacker.py: chunks of LANES elements of each row, a row's last paired with
the next row's first under isa/pe_array.py Plan.pairs_with_next), and the two pipeline
counters after the last chunk."""
import dataclasses

import pytest

import isa
from ties import simulate
from isa.pe_array import Route, plan as pe_plan
from isa.slots import LINE_BYTES
from sim import chunk_dispatch
from sim.stage_planner import plan_stage

CFG = isa.load_config("default")
LANES = CFG.lanes
# (K, N, transposed, input rows[, route]): packed, one word, several words (one, two, three
# sets), the split with one- and several-chunk groups, a last group of its own, transposed
# packed with a short last group, transposed with several chunks a row, column tiles; a
# stage on one PE row (row 1 plain, row 0 transposed: attention's two stages on a row each)
CASES = [(64, 8, False, 4), (37, 8, False, 1), (9, 5, False, 1), (20, 32, False, 2), (7, 64, False, 1),
         (6, 100, False, 3), (5, 100, False, 1), (1, 1, False, 1), (8, 20, True, 2), (16, 3, True, 1),
         (70, 4, True, 2), (100, 2, True, 1),
         # column tiles (more than ACC_SLOTS words): 7 + 3 words with a short last word, one
         # input row (the split, no pairs), 8 + 8 + 5, 8 + 6 + 3
         (4, 300, False, 2), (5, 270, False, 1), (3, 21 * LANES, False, 3), (2, 17 * LANES - 1, False, 1),
         (37, 8, False, 1, Route.ROW1), (20, 32, False, 1, Route.ROW1), (16, 3, True, 1, Route.ROW0),
         (70, 4, True, 1, Route.ROW0), (9, 5, False, 2, Route.ROW0)]
ADDR = 0x10_0000 + 3 * LINE_BYTES + 10       # a run need not start at a beat (hw/stage_plan.py run_span)


def slots(rows, cols, pair_rule):
    """The unpacker's slots for `rows` rows of `cols` elements: (row, col, count, pair_count
    or None). With `pair_rule(r)`, row r's last chunk goes with row r + 1's first."""
    out, r, c = [], 0, 0
    n_chunks = -(-cols // LANES)
    while r < rows:
        count = min(LANES, cols - c)
        if c + count == cols and r + 1 < rows and pair_rule(r):
            out.append((r, c, count, min(LANES, cols)))
            r, c = r + 1, (LANES if n_chunks > 1 else cols)
            if c >= cols:
                r, c = r + 1, 0
            continue
        out.append((r, c, count, None))
        r, c = (r + 1, 0) if c + count == cols else (r, c + count)
    return out


def run_dispatch(plan, route, runs, run_cols):
    from hw.chunk_dispatch import ChunkDispatch
    dut = ChunkDispatch(CFG, CFG.n_max // LANES)
    seen = {"chunks": [], "jobs": [], "drain": [], "busy": [], "more": []}

    async def bench(ctx):
        mode_fields = ("trans", "t_level", "t_scalar", "t_fold_adds")
        fields = {name: int(getattr(plan, name)) for name in dut.plan.shape().members if name != "mode"}
        ctx.set(dut.plan, {**fields, "mode": {name: int(getattr(plan, name)) for name in mode_fields}})
        ctx.set(dut.addr, ADDR)
        ctx.set(dut.route, route)
        ctx.set(dut.restart, 1)
        await ctx.tick()
        ctx.set(dut.restart, 0)
        for (rest, run_slots), cols in zip(runs, run_cols, strict=True):
            ctx.set(dut.start, 1)
            ctx.set(dut.rest, rest)
            job = tuple(ctx.get(dut.job[f]) for f in ("offset", "rows", "cols", "beats", "pair", "strided", "stride"))
            # (a strided job's beats are its rows' own: the unpacker does not take `beats`)
            seen["jobs"].append(job[:3] + (None,) + job[4:] if job[5] else job)
            await ctx.tick()
            ctx.set(dut.start, 0)
            ctx.set(dut.dispatch, 1)
            for i, (row, col, count, pair_count) in enumerate(run_slots):
                ctx.set(dut.slot.valid, 1)
                ctx.set(dut.slot.payload, {"last": i == len(run_slots) - 1, "row": row, "col": col, "count": count,
                                           "row_end": col + count == cols,
                                           "pair": {"valid": pair_count is not None, "count": pair_count or 0,
                                                    "row_end": pair_count == cols}})
                assert ctx.get(dut.run_done) == (i == len(run_slots) - 1)
                if i == len(run_slots) - 1:
                    # the control unit moves to the next column tile when there is one
                    more = ctx.get(dut.more_tiles)
                    seen["more"].append(more)
                    ctx.set(dut.tile_next, more)
                cycle = []
                for q in range(2):
                    if ctx.get(dut.pe[q].valid):
                        chunk = ctx.get(dut.pe[q].payload)
                        fields = {"pe_row": q, "k_base": chunk.k_base, "active": chunk.active}
                        if plan.trans:
                            t_chunk = ctx.get(dut.t_chunk)
                            fields.update(t_out=t_chunk.out, t_set=t_chunk.set, t_first=bool(t_chunk.first),
                                          t_row_end=bool(t_chunk.row_end))
                        else:
                            fields.update(acc_addr=chunk.acc_addr, first=bool(chunk.first), last=bool(chunk.last))
                        cycle.append(chunk_dispatch.Chunk(**fields))
                # in one cycle, group g's chunk before group g + 1's
                seen["chunks"].extend(sorted(cycle, key=lambda chunk: chunk.k_base))
                await ctx.tick()
                ctx.set(dut.tile_next, 0)
            ctx.set(dut.slot.valid, 0)
            ctx.set(dut.dispatch, 0)
        for _ in range(40):
            seen["drain"].append(ctx.get(dut.drain))
            seen["busy"].append(ctx.get(dut.pipe_busy))
            await ctx.tick()

    simulate(dut, bench)
    return seen


def expected_job(plan, rest, route, cols=None):
    """The unpacker's job of a run, from the run's first element (hw/stage_plan.py run_span);
    a column tile's (`cols` a row) is strided, each row N elements after the one before."""
    elem, rows = (plan.main_elems, 1) if rest else (0, plan.full_groups)
    offset = ((ADDR + 2 * elem) % CFG.beat_bytes) // 2
    if plan.tiled:
        return offset, rows, cols, None, 0, 1, plan.cols_dim % LANES
    cols = plan.rest_rows * plan.cols_dim if rest else plan.pack * plan.cols_dim
    pair = route == Route.SPLIT and not rest
    return offset, rows, cols, -(-(offset + rows * cols) // LANES), int(pair), 0, plan.cols_dim % LANES


@pytest.mark.parametrize("k,n,trans,in_rows,route", [case + (None,) * (5 - len(case)) for case in CASES])
def test_chunks_equal_the_model(k, n, trans, in_rows, route):
    route = Route.of_stage(in_rows, trans) if route is None else route
    plan = plan_stage(k, n, trans, in_rows, LANES, route)
    split = route == Route.SPLIT
    pairs = pe_plan(n, LANES, in_rows)
    runs, run_cols = [], []
    if plan.tiled:
        for _, cols in plan.tiles(LANES):
            run_cols.append(cols)
            runs.append((0, slots(plan.full_groups, cols, lambda r: False)))
    elif plan.full_groups:
        rule = pairs.pairs_with_next if split else (lambda r: False)
        run_cols.append(plan.pack * plan.cols_dim)
        runs.append((0, slots(plan.full_groups, run_cols[-1], rule)))
    if plan.rest_rows:
        run_cols.append(plan.rest_rows * plan.cols_dim)
        runs.append((1, slots(1, run_cols[-1], lambda r: False)))
    seen = run_dispatch(plan, route, runs, run_cols)
    assert seen["chunks"] == chunk_dispatch.chunks(plan, k, LANES, route)
    assert seen["jobs"] == [expected_job(plan, rest, route, cols) for (rest, _), cols in zip(runs, run_cols)]
    # a tiled stage's runs but the last are followed by another tile
    assert seen["more"] == [1] * (len(runs) - 1) + [0] if plan.tiled else not any(seen["more"])
    # after the last chunk: its sums are written when drain is 1; no control of it is left
    # in the compute unit once pipe_busy is low
    drain = chunk_dispatch.drain_cycles(plan, LANES)
    assert seen["drain"][:drain + 1] == list(range(drain, -1, -1))
    busy = chunk_dispatch.busy_cycles(plan, LANES)
    assert seen["busy"][:busy + 1] == [1] * busy + [0]


def test_split_alternates_pe_rows_and_sets():
    # one input row, N = 8 (pack 4): k-groups 0, 1, 2, .. on PE rows 0, 1, 0, ..; each row's
    # groups go round its own 3 sets (isa/pe_array.py): group g in set (g div 2) mod 3
    plan = plan_stage(40, 8, False, 1, LANES)
    got = chunk_dispatch.chunks(plan, 40, LANES, Route.SPLIT)
    assert [c.pe_row for c in got] == [g % 2 for g in range(10)]
    assert [c.acc_addr for c in got] == [(g // 2) % 3 for g in range(10)]
    assert [c.first for c in got] == [g < 6 for g in range(10)]
    assert dataclasses.replace(got[0]).k_base == 0 and got[9].k_base == 36


def test_routes_name_the_pe_rows():
    # a stage of several input rows reaches every PE row (the same chunks, row 0's first);
    # a stage on one PE row reaches that row alone, its k-groups all in its own sets
    plan = plan_stage(40, 8, False, 2, LANES)
    every = chunk_dispatch.chunks(plan, 40, LANES, Route.ALL)
    assert [c.pe_row for c in every] == [0, 1] * 10
    assert every[0::2] == [dataclasses.replace(c, pe_row=0) for c in every[1::2]]
    alone = chunk_dispatch.chunks(plan_stage(40, 8, False, 1, LANES, Route.ROW1), 40, LANES, Route.ROW1)
    assert [c.pe_row for c in alone] == [1] * 10
    assert [c.acc_addr for c in alone] == [g % 3 for g in range(10)]
    assert [(c.first, c.last) for c in alone] == [(g < 3, g >= 7) for g in range(10)]
