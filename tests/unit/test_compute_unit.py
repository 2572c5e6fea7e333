"""The compute unit on its own (Amaranth's simulator, FP units unshared): input rows into
the input buffer, the k-groups of a weight matrix as the control unit sends them (one
slot per cycle, `isa/pe_array.py`'s sets, packing and, for one input row, k-groups over
two PE rows with paired chunks; written here from the plan, not from the control unit),
then the words streamed through the fold unit to a consumer that stalls at random; the sums
must be the golden model's, bit for bit, in FP16 and in FP32."""
import dataclasses

import numpy as np
import pytest
from amaranth.sim import Simulator

import isa
from hw.compute_unit import ComputeUnit, PIPE_DEPTH
from isa.pe_array import plan, trans_plan
from sim import golden

# a small unit keeps the simulation quick: 32 lanes (the port's width), 2 rows
CFG = dataclasses.replace(isa.load_config("small"), name="unit")
SLOW = pytest.mark.slow


def slots(m, k, n, lanes):
    """The chunks of each cycle: lists of (PE row, first, acc_addr, k_base, active,
    weight-element indices, last). A wide N streams in column tiles (isa/pe_array.py), a
    chunk a cycle; a narrower one row by row, paired with the split."""
    p = plan(n, lanes, m)
    out, pending = [], []
    groups = -(-k // p.pack)
    last_from = p.last_from(k)
    for w0, width in p.tiles():
        for g in range(groups):
            rows = min(p.pack, k - g * p.pack)
            q, s = g % p.split, (g // p.split) % p.sets
            for w in range(w0, w0 + width):
                if p.pack > 1:
                    elems = [(g * p.pack + r, c) for r in range(rows) for c in range(n)]
                else:
                    elems = [(g, c) for c in range(w * lanes, min(n, (w + 1) * lanes))]
                pending.append((q, g // p.split < p.sets, s * p.n_words + w, g * p.pack, len(elems), elems,
                                g // p.split >= last_from[q]))
                if w + 1 < w0 + width or not p.slotted or not (p.pairs_with_next(g) and g + 1 < groups):
                    out.append(pending)
                    pending = []
    return out


def pack16(values):
    return sum(int(v) << (16 * j) for j, v in enumerate(values))


async def write_input(ctx, dut, r, x):
    """Input row r of the unit: x (FP16) a word of LANES elements a cycle."""
    lanes, bits = CFG.lanes, x.view(np.uint16)
    for word in range(-(-len(x) // lanes)):
        ctx.set(dut.in_we, 1)
        ctx.set(dut.in_row, r)
        ctx.set(dut.in_word, word)
        ctx.set(dut.in_data, pack16(bits[word * lanes:(word + 1) * lanes]))
        await ctx.tick()
    ctx.set(dut.in_we, 0)


def trans_chunks(s_rows, lanes):
    """A transposed stage's chunks (S stored N x K, TRANS_W), as hw/chunk_dispatch.py sends
    them on PE row 0, one a cycle: (k_base, active, weights' bits, t_chunk's fields). K a
    power of two up to LANES packs LANES / K rows of S a chunk; a longer K takes a row in
    chunks of LANES, its sets chunk mod 3 (isa/pe_array.py trans_plan)."""
    n, k = s_rows.shape
    tp = trans_plan(k, lanes)
    bits = s_rows.view(np.uint16)
    out = []
    if tp.chunks == 1:
        for row0 in range(0, n, tp.pack):
            rows = min(tp.pack, n - row0)
            weights = [bits[row0 + j // k, j % k] if j < rows * k else 0 for j in range(lanes)]
            out.append((0, rows * k, pack16(weights), {"out": row0, "set": 0, "first": 1, "row_end": 1}))
        return out
    for row in range(n):
        for c in range(tp.chunks):
            count = min(lanes, k - c * lanes)
            weights = list(bits[row, c * lanes:c * lanes + count])
            t_chunk = {"out": row, "set": c % tp.sets, "first": int(c < tp.sets), "row_end": int(c == tp.chunks - 1)}
            out.append((c * lanes, count, pack16(weights), t_chunk))
    return out


def run_unit(x, wt, stall=0.0):
    lanes = CFG.lanes
    m, k = x.shape
    n = wt.shape[1]
    p = plan(n, lanes, m)
    dut = ComputeUnit(CFG, shared_cells=False)
    got16, got32 = {}, {}
    activity = {"writes": 0, "reads": 0, "slot_reads": 0, "slot_writes": 0}
    stall_rng = np.random.default_rng(5)

    bank = (m + k + n) % 2                 # both accumulator banks see use across the cases

    async def bench(ctx):
        ctx.set(dut.n_cols, n)
        ctx.set(dut.fold.payload.n_cols, n)
        for pe_bank in dut.bank:
            ctx.set(pe_bank, bank)
        ctx.set(dut.fold.payload.bank, bank)
        ctx.set(dut.split, p.split > 1)
        for r in range(m):
            await write_input(ctx, dut, r, x[r])
        # the lanes' packed rows follow n_cols a few cycles later: a stage starts once they do
        while not ctx.get(dut.lanes_ready):
            await ctx.tick()
        bits = wt.view(np.uint16)

        async def tick():
            # the PE array's accumulator-line writes into the output buffer, input-line reads
            activity["writes"] += sum(ctx.get(s) for s in dut.pe_acc_writes)
            activity["reads"] += sum(ctx.get(s) for s in dut.pe_in_reads)
            activity["slot_reads"] += sum(ctx.get(s) for s in dut.pe_slot_reads)
            activity["slot_writes"] += sum(ctx.get(s) for s in dut.pe_slot_writes)
            await ctx.tick()
        for slot in slots(m, k, n, lanes):
            for pe in dut.pe:
                ctx.set(pe.valid, 0)
            for q, first, addr, k_base, active, elems, last in slot:
                # (the chunk dispatch sends a chunk for every PE row on both streams)
                for pe in [dut.pe[q]] if p.split > 1 else dut.pe:
                    ctx.set(pe.valid, 1)
                    ctx.set(pe.payload, {"first": first, "acc_addr": addr, "k_base": k_base, "active": active,
                                         "w_data": pack16([bits[kk, c] for kk, c in elems]), "last": last})
            await tick()
        for pe in dut.pe:
            ctx.set(pe.valid, 0)
        for _ in range(PIPE_DEPTH):
            await tick()
        sets_used = p.sets_used(k) + [0]
        await read_out(ctx, dut, range(m), n, p.n_words, sets_used[:2], p.pack.bit_length() - 1, stall, stall_rng,
                       got16, got32)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    as16 = np.array([[got16[(r, c)] for c in range(n)] for r in range(m)], np.uint16)
    as32 = np.array([[got32[(r, c)] for c in range(n)] for r in range(m)], np.uint32)
    return as16, as32, activity


async def read_out(ctx, dut, rows, n, n_words, sets, pack_log2, stall, stall_rng, got16, got32):
    """The words of `rows` (each N outputs) streamed through the fold unit, the plan of the
    stage read out given (words per row, the sets of PE rows 0 and 1, log2 of the packing),
    to a consumer that stalls at random; each output's FP16 and FP32 bits into got16, got32
    keyed (row, output)."""
    lanes = CFG.lanes
    ctx.set(dut.fold.payload.n_cols, n)
    ctx.set(dut.fold.payload.n_words, n_words)
    ctx.set(dut.fold.payload.sets, sets[0])
    ctx.set(dut.fold.payload.sets1, sets[1])
    ctx.set(dut.fold.payload.pack_log2, pack_log2)
    words = [(r, w) for r in rows for w in range(n_words)]
    asked, out = 0, []
    for _ in range(64 * len(words)):
        if len(out) == len(words):
            break
        if asked < len(words):
            ctx.set(dut.fold.valid, 1)
            ctx.set(dut.fold.payload.row, words[asked][0])
            ctx.set(dut.fold.payload.word, words[asked][1])
        else:
            ctx.set(dut.fold.valid, 0)
        ctx.set(dut.sum.ready, int(stall_rng.random() >= stall))
        took = asked < len(words) and ctx.get(dut.fold.ready)
        if ctx.get(dut.sum.valid) and ctx.get(dut.sum.ready):
            out.append((ctx.get(dut.sum.payload.fp16), ctx.get(dut.sum.payload.fp32)))
        await ctx.tick()
        asked += took
    ctx.set(dut.fold.valid, 0)
    assert len(out) == len(words), "the fold unit lost or held back words"
    for (r, w), (s16, s32) in zip(words, out):
        for j in range(min(lanes, n - w * lanes)):
            got16[(r, w * lanes + j)] = (s16 >> (16 * j)) & 0xFFFF
            got32[(r, w * lanes + j)] = (s32 >> (32 * j)) & 0xFFFFFFFF


# packed rows (N = 16, 5: pack 2 and 4, three sets, a last k-group shorter), one word and
# three sets (N = 24), two words and two sets (N = 40), and a K below the sets; one input
# row: pairs of one-chunk groups (N = 24, 5), pairs at every boundary (N = 40, 100), K = 1.
# Each case is a simulation of its own (about 6 s on two cores): `make test` runs one of
# each kind (packed rows, one word and three sets, a K below the sets, one input row with
# pairs at every boundary), `make test-full` (slow) the others as well.
def test_lanes_ready_follows_n_when_the_model_says():
    # the cycle model lets a stage's PLAN proceed LANES_READY_AFTER cycles after the lanes'
    # N changes (sim/control_unit.py); the RTL's lanes_ready must rise exactly then, and
    # stay low in between
    from sim.control_unit import LANES_READY_AFTER
    dut = ComputeUnit(CFG, shared_cells=False)
    seen = []

    async def bench(ctx):
        for n in (16, 5, 5, CFG.lanes + 3, 1):
            ctx.set(dut.n_cols, n)
            waited = 0
            while not ctx.get(dut.lanes_ready):
                await ctx.tick()
                waited += 1
                assert waited < 16, f"lanes_ready never rose for N={n}"
            seen.append(waited)
            await ctx.tick().repeat(2)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    # the first N is set at reset (n_cols 0 before): a change each time but the repeated 5
    assert seen == [LANES_READY_AFTER, LANES_READY_AFTER, 0, LANES_READY_AFTER, LANES_READY_AFTER]


@pytest.mark.parametrize("m,k,n", [(2, 7, 16), pytest.param(1, 9, 5, marks=SLOW), (2, 6, 24),
                                   pytest.param(1, 5, 40, marks=SLOW), (2, 2, 3),
                                   pytest.param(1, 11, 24, marks=SLOW), (1, 8, 100),
                                   pytest.param(1, 1, 24, marks=SLOW), pytest.param(1, 3, 17, marks=SLOW),
                                   pytest.param(1, 14, 12, marks=SLOW), (2, 4, 300),
                                   pytest.param(1, 5, 270, marks=SLOW), (2, 40, 290),
                                   pytest.param(1, 70, 9, marks=SLOW)])
def test_compute_unit_matches_golden(m, k, n):
    # N = 300, 290 and 270 are over ACC_SLOTS words at 32 lanes: they stream in column tiles
    # (7 + 3 and 6 + 3 words); K = 40 and 70 take more than one input line
    from area.power import acc_lines, in_lines, slot_lines
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    x = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-6, 6, (m, k)))).astype(np.float16)
    wt = (rng.standard_normal((k, n)) * np.exp2(rng.integers(-6, 6, (k, n)))).astype(np.float16)
    x.reshape(-1)[::5] = -0.0
    got16, got32, activity = run_unit(x, wt, stall=0.4)
    sums = golden.gemm_fp32(x.astype(np.float32), wt.astype(np.float32), CFG.lanes)
    assert np.array_equal(got16, golden.to_fp16(sums).view(np.uint16))
    assert np.array_equal(got32, sums.view(np.uint32))
    # the buffers' traffic is what the power estimate counts: each set of each word written
    # once (the PE array reads no accumulator line), an input line read when it changes
    p = plan(n, CFG.lanes, m)
    assert activity["writes"] == acc_lines(p, m, k) == m * p.n_words * sum(p.sets_used(k))
    assert activity["reads"] == in_lines(p, m, k, CFG.lanes)
    # the slot registers: every chunk writes its PE row's slot, all but each set's first read it
    chunks = m * -(-k // p.pack) * p.n_words
    assert (activity["slot_reads"], activity["slot_writes"]) == slot_lines(p, m, k) == (chunks - activity["writes"],
                                                                                        chunks)


def run_two_modes(x0, s_rows, x1, wt, stall=0.0):
    """PE row 0 transposed (x0 s_rows^T, a q K^T) and PE row 1 plain (x1 wt, an S V, all its
    k-groups on the one row) at once: each row in its own mode and on its own chunks, from
    the same cycles on; then each row's words read out with its own plan. Returns the two
    rows' FP32 bits."""
    lanes = CFG.lanes
    (k0,), (k1,), n1 = x0.shape, x1.shape, wt.shape[1]
    n0 = s_rows.shape[0]
    tp, p1 = trans_plan(k0, lanes), plan(n1, lanes, 2)        # row 1's stage: one PE row (split 1)
    dut = ComputeUnit(CFG, shared_cells=False)
    got16, got32 = {}, {}
    stall_rng = np.random.default_rng(7)
    plain = [chunk for slot in slots(2, k1, n1, lanes) for chunk in slot]
    wbits = wt.view(np.uint16)

    async def bench(ctx):
        ctx.set(dut.bank[0], 1)               # the rows in different banks
        ctx.set(dut.bank[1], 0)
        ctx.set(dut.fold.payload.bank, 1)
        await write_input(ctx, dut, 0, x0)
        await write_input(ctx, dut, 1, x1)
        ctx.set(dut.mode[0], {"trans": 1, "t_level": tp.level, "t_scalar": int(tp.chunks > 1),
                              "t_fold_adds": tp.fold_adds()})
        ctx.set(dut.mode[1], {"trans": 0, "t_level": 0, "t_scalar": 0, "t_fold_adds": 0})
        ctx.set(dut.n_cols, n1)                   # the plain row's N (the transposed one takes none)
        while not ctx.get(dut.lanes_ready):
            await ctx.tick()
        chunks0 = trans_chunks(s_rows, lanes)
        for cycle in range(max(len(chunks0), len(plain))):
            ctx.set(dut.pe[0].valid, cycle < len(chunks0))
            if cycle < len(chunks0):
                k_base, active, w_data, t_chunk = chunks0[cycle]
                ctx.set(dut.pe[0].payload, {"first": 0, "acc_addr": 0, "k_base": k_base, "active": active,
                                            "w_data": w_data, "last": 0})
                ctx.set(dut.t_chunk, t_chunk)
            ctx.set(dut.pe[1].valid, cycle < len(plain))
            if cycle < len(plain):
                q, first, addr, k_base, active, elems, last = plain[cycle]
                assert q == 0
                ctx.set(dut.pe[1].payload, {"first": first, "acc_addr": addr, "k_base": k_base, "active": active,
                                            "w_data": pack16([wbits[kk, c] for kk, c in elems]), "last": last})
            await ctx.tick()
        for pe in dut.pe:
            ctx.set(pe.valid, 0)
        await ctx.tick().repeat(tp.write_cycle(lanes) + 1)
        await read_out(ctx, dut, [0], n0, -(-n0 // lanes), (1, 0), 0, stall, stall_rng, got16, got32)
        ctx.set(dut.fold.payload.bank, 0)
        await read_out(ctx, dut, [1], n1, p1.n_words, (p1.sets_used(k1)[0], 0), p1.pack.bit_length() - 1, stall,
                       stall_rng, got16, got32)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return (np.array([got32[(0, c)] for c in range(n0)], np.uint32),
            np.array([got32[(1, c)] for c in range(n1)], np.uint32))


# q K^T of 10 keys of K = 8 (4 packed a chunk, the last chunk short) beside S V of 7 x 16
# (packed 2); of 4 keys of K = 70 (3 chunks a key, two fold adds) beside 40 x 40 (two words)
@pytest.mark.parametrize("k0,n0,k1,n1", [(8, 10, 7, 16), (70, 4, 40, 40)])
def test_two_rows_in_different_modes(k0, n0, k1, n1):
    rng = np.random.default_rng(k0 * 1000 + n1)
    x0 = rng.standard_normal(k0).astype(np.float16)
    s_rows = rng.standard_normal((n0, k0)).astype(np.float16)
    x1 = rng.standard_normal(k1).astype(np.float16)
    wt = rng.standard_normal((k1, n1)).astype(np.float16)
    got0, got1 = run_two_modes(x0, s_rows, x1, wt, stall=0.3)
    want0 = golden.gemm_trans_fp32(x0[None].astype(np.float32), s_rows.astype(np.float32), CFG.lanes)[0]
    # (two input rows: the golden order of a stage on one PE row, no split)
    want1 = golden.gemm_fp32(np.stack([x1, x1]).astype(np.float32), wt.astype(np.float32), CFG.lanes)[0]
    assert np.array_equal(got0, want0.view(np.uint32))
    assert np.array_equal(got1, want1.view(np.uint32))


def test_row1_transposed_in_another_mode_is_asserted():
    # the tree's control follows row 0's chunks and mode: PE row 1 transposed in another
    # tree (or row 0 plain) has no control of its own, and the simulation says so
    dut = ComputeUnit(CFG, shared_cells=False)
    allowed = []

    async def bench(ctx):
        ctx.set(dut.mode[0], {"trans": 1, "t_level": 3, "t_scalar": 0, "t_fold_adds": 0})
        ctx.set(dut.mode[1], {"trans": 1, "t_level": 3, "t_scalar": 0, "t_fold_adds": 0})
        await ctx.tick()                          # the same mode: allowed
        await ctx.tick()
        allowed.append(True)
        ctx.set(dut.mode[1], {"trans": 1, "t_level": 4, "t_scalar": 0, "t_fold_adds": 0})
        await ctx.tick()
        await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    with pytest.raises(AssertionError, match="PE row 1 transposed"):
        sim.run()
    assert allowed == [True]
