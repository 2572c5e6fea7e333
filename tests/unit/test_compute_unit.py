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
from isa.pe_array import plan
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


def run_unit(x, wt, stall=0.0):
    lanes = CFG.lanes
    m, k = x.shape
    n = wt.shape[1]
    p = plan(n, lanes, m)
    dut = ComputeUnit(CFG, shared_cells=False)
    got16, got32 = {}, {}
    activity = {"writes": 0, "reads": 0, "slot_reads": 0, "slot_writes": 0}
    stall_rng = np.random.default_rng(5)

    def pack16(values):
        return sum(int(v) << (16 * j) for j, v in enumerate(values))

    bank = (m + k + n) % 2                 # both accumulator banks see use across the cases

    async def bench(ctx):
        ctx.set(dut.n_cols, n)
        ctx.set(dut.fold.payload.n_cols, n)
        ctx.set(dut.bank, bank)
        ctx.set(dut.fold.payload.bank, bank)
        ctx.set(dut.split, p.split > 1)
        for r in range(m):
            row = x[r].view(np.uint16)
            for word in range(-(-k // lanes)):
                ctx.set(dut.in_we, 1)
                ctx.set(dut.in_row, r)
                ctx.set(dut.in_word, word)
                ctx.set(dut.in_data, pack16(row[word * lanes:(word + 1) * lanes]))
                await ctx.tick()
        ctx.set(dut.in_we, 0)
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
                ctx.set(dut.pe[q].valid, 1)
                ctx.set(dut.pe[q].payload, {"first": first, "acc_addr": addr, "k_base": k_base, "active": active,
                                            "w_data": pack16([bits[kk, c] for kk, c in elems]), "last": last})
            await tick()
        for pe in dut.pe:
            ctx.set(pe.valid, 0)
        for _ in range(PIPE_DEPTH):
            await tick()
        sets_used = p.sets_used(k) + [0]
        ctx.set(dut.fold.payload.n_words, p.n_words)
        ctx.set(dut.fold.payload.sets, sets_used[0])
        ctx.set(dut.fold.payload.sets1, sets_used[1])
        ctx.set(dut.fold.payload.pack_log2, p.pack.bit_length() - 1)
        # the words stream through the fold unit; the consumer stalls at random
        words = [(r, w) for r in range(m) for w in range(p.n_words)]
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
        assert len(out) == len(words), "the fold unit lost or held back words"
        for (r, w), (s16, s32) in zip(words, out):
            count = min(lanes, n - w * lanes)
            for j in range(count):
                got16[(r, w * lanes + j)] = (s16 >> (16 * j)) & 0xFFFF
                got32[(r, w * lanes + j)] = (s32 >> (32 * j)) & 0xFFFFFFFF

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    as16 = np.array([[got16[(r, c)] for c in range(n)] for r in range(m)], np.uint16)
    as32 = np.array([[got32[(r, c)] for c in range(n)] for r in range(m)], np.uint32)
    return as16, as32, activity


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
