"""hw/unpacker.py on Amaranth's simulator: every chunk is the right row segment, whatever
the matrix's offset in the first beat and however irregularly the beats arrive; with
`pair`, the slots pair the chunks as isa/pe_array.py says. And the model (sim/unpacker.py)
against it, cycle for cycle, through the harness of ties.py."""
import numpy as np
import pytest
from amaranth.sim import Simulator

import isa
from hw.unpacker import Unpacker
from isa.pe_array import plan
from sim import dram_reader as model_reader
from sim import unpacker as model_unpacker

from ties import Clock, SMALL, Source, simulate

CFG = isa.load_config("default")
LANES = CFG.lanes


def beats_of(matrix, offset):
    """The matrix packed row-major after `offset` junk elements, cut into beats."""
    flat = np.concatenate([np.arange(offset, dtype=np.uint16) + 0xF000, matrix.reshape(-1)])
    flat = np.concatenate([flat, np.full(-len(flat) % LANES, 0xEEEE, np.uint16)])
    return [int.from_bytes(flat[i:i + LANES].tobytes(), "little") for i in range(0, len(flat), LANES)]


def unpack(matrix, offset, gaps, seed=0, pair=False, held=0.0):
    """The slots the consumer takes, with beats offered with `gaps` and the consumer not
    ready in a fraction `held` of the cycles (a slot shown waits then)."""
    rows, cols = matrix.shape
    beats = beats_of(matrix, offset)
    dut = Unpacker(CFG)
    chunks, taken, cycles = [], [], [0]
    rng, hold_rng = np.random.default_rng(seed), np.random.default_rng(seed + 1)

    async def bench(ctx):
        ctx.set(dut.job.valid, 1)
        ctx.set(dut.job.payload.offset, offset)
        ctx.set(dut.job.payload.rows, rows)
        ctx.set(dut.job.payload.cols, cols)
        ctx.set(dut.job.payload.beats, len(beats))
        ctx.set(dut.job.payload.pair, pair)
        await ctx.tick()
        ctx.set(dut.job.valid, 0)
        for _ in range(20 * (len(beats) + rows * (cols // LANES + 1)) + 50):
            offer = len(taken) < len(beats) + 2 and not (gaps and rng.random() < 0.4)
            ctx.set(dut.src.valid, offer)
            ctx.set(dut.src.payload.data, beats[len(taken)] if len(taken) < len(beats) else 0xBAD)
            ready = not (held and hold_rng.random() < held)
            ctx.set(dut.slot.ready, ready)
            if ctx.get(dut.slot.valid) and ready:
                count = ctx.get(dut.slot.payload.count)
                data = ctx.get(dut.slot.payload.data).to_bytes(2 * LANES, "little")
                # the row-end flags (the chunk dispatch's k-group ends) from the slot's span
                assert ctx.get(dut.slot.payload.row_end) == (ctx.get(dut.slot.payload.col) + count == cols)
                slot = [(ctx.get(dut.slot.payload.row), ctx.get(dut.slot.payload.col), count,
                         np.frombuffer(data, np.uint16)[:count].copy())]
                if ctx.get(dut.slot.payload.pair.valid):
                    count = ctx.get(dut.slot.payload.pair.count)
                    assert ctx.get(dut.slot.payload.pair.row_end) == (count == cols)
                    data = ctx.get(dut.slot.payload.pair.data).to_bytes(2 * LANES, "little")
                    slot.append((ctx.get(dut.slot.payload.row) + 1, 0, count,
                                 np.frombuffer(data, np.uint16)[:count].copy()))
                chunks.append((slot, ctx.get(dut.slot.payload.last)))
            if offer and ctx.get(dut.src.ready):
                taken.append(len(taken))
            await ctx.tick()
            cycles[0] += 1
            if not ctx.get(dut.busy):
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return chunks, len(taken), len(beats), cycles[0]


@pytest.mark.parametrize("rows,cols,offset", [(1, 1, 0), (1, 32, 0), (3, 5, 7), (4, 33, 31), (2, 64, 16),
                                              (5, 100, 3), (40, 16, 0), (7, 31, 30), (1, 97, 12)])
@pytest.mark.parametrize("gaps,held", [(False, 0.0), (True, 0.0), (True, 0.4)])
def test_chunks_are_row_segments(rows, cols, offset, gaps, held):
    """Each slot a row's next LANES elements (or its last ones), whatever gaps the beats
    come with and however long the consumer holds a slot shown."""
    rng = np.random.default_rng(rows * 1000 + cols)
    matrix = rng.integers(0, 0xEFFF, (rows, cols)).astype(np.uint16)
    slots, taken, beats, _ = unpack(matrix, offset, gaps, held=held)
    expected = [[(r, c)] for r in range(rows) for c in range(0, cols, LANES)]
    check_slots(matrix, slots, expected)
    assert taken == beats, "must take exactly the run's beats, no more"


def check_slots(matrix, slots, expected):
    """Slots as `expected` ([(row, col), ...] per slot), each chunk the right segment."""
    cols = matrix.shape[1]
    assert [[(r, c) for r, c, *_ in chunks] for chunks, _ in slots] == expected
    for i, (chunks, last) in enumerate(slots):
        for r, c, count, data in chunks:
            assert count == min(LANES, cols - c)
            assert np.array_equal(data, matrix[r, c:c + count]), (r, c)
        assert last == (i == len(expected) - 1)


@pytest.mark.parametrize("rows,cols,offset", [(1, 24, 0), (2, 24, 5), (7, 24, 31), (6, 17, 9), (5, 100, 3),
                                              (4, 64, 16), (3, 32, 0), (5, 12, 30), (4, 33, 31)])
@pytest.mark.parametrize("gaps,held", [(False, 0.0), (True, 0.0), (True, 0.4)])
def test_pairs(rows, cols, offset, gaps, held):
    """With `pair`: the last chunk of row r and row r + 1's first in one slot, where
    `Plan.pairs_with_next` says (run rows are k-groups, N = cols on one input row)."""
    rng = np.random.default_rng(rows * 1000 + cols + 7)
    matrix = rng.integers(0, 0xEFFF, (rows, cols)).astype(np.uint16)
    slots, taken, beats, _ = unpack(matrix, offset, gaps, pair=True, held=held)
    p = plan(cols, LANES, 1)            # pairing depends on the words per run row only
    expected, pending = [], []
    for r in range(rows):
        for c in range(0, cols, LANES):
            pending.append((r, c))
            if c + LANES < cols or not (p.pairs_with_next(r) and r + 1 < rows):
                expected.append(pending)
                pending = []
    check_slots(matrix, slots, expected)
    assert taken == beats


def test_pairs_keep_up_with_the_port():
    """N = 24 on one input row, no gaps: 48 elements per cycle > one beat, so the run takes
    about one cycle per beat."""
    matrix = np.arange(64 * 24, dtype=np.uint16).reshape(64, 24)
    slots, _, beats, cycles = unpack(matrix, 0, gaps=False, pair=True)
    assert len(slots) == 32 and cycles <= beats + 3, (cycles, beats)


def test_full_rate_when_rows_are_whole_beats():
    """With aligned rows of LANES elements and no gaps, one chunk per cycle."""
    matrix = np.arange(8 * LANES, dtype=np.uint16).reshape(8, LANES)
    chunks, _, _, cycles = unpack(matrix, 0, gaps=False)
    assert len(chunks) == 8
    assert cycles <= 8 + 2, f"{cycles} cycles for 8 chunks"     # 2: filling the window


# ---- the model against the RTL ----------------------------------------------------------

def availability(kind, beats, rng):
    """Cycles at which a run's beats become available (non-decreasing, from cycle 1: the
    unpacker pulls from the cycle after `start`)."""
    if kind == "every":
        return [1 + i for i in range(beats)]
    if kind == "backlog":                         # the whole run waiting: the window binds
        return [1] * beats
    if kind == "gaps":                            # bunches and holes
        return (1 + np.cumsum(rng.choice([0, 0, 1, 1, 1, 2, 6], beats))).tolist()
    if kind == "dram":                            # as the DRAM reader delivers a run from 0xF80
        return model_reader.beat_available(0, 0xF80, beats, SMALL).tolist()
    raise ValueError(kind)


def unpacker_slot_cycles(offset, rows, cols, available, pair):
    """Cycles at which hw/unpacker.py emits its slots (valid high), started at cycle 0,
    and the cycles it pulls its beats."""
    dut = Unpacker(CFG)
    beats = model_unpacker.run_beats(offset, rows, cols, LANES)
    src = Source(dut.src, available)
    emitted = []

    async def bench(ctx):
        clock = Clock(ctx, src)
        ctx.set(dut.slot.ready, 1)
        ctx.set(dut.job.valid, 1)
        for name, value in (("offset", offset), ("rows", rows), ("cols", cols), ("beats", beats),
                            ("pair", pair)):
            ctx.set(dut.job.payload[name], value)
        for _ in range(max(available) + 4 * rows * (cols // LANES + 2) + 20):
            if ctx.get(dut.slot.valid):
                emitted.append(clock.t)
                if ctx.get(dut.slot.payload.last):
                    break
            await clock.tick()
            ctx.set(dut.job.valid, 0)

    simulate(dut, bench)
    assert len(src.taken) == beats
    return emitted, src.taken


@pytest.mark.parametrize("rows,cols,offset,pair", [
    (1, 1, 0, False), (3, 5, 7, False), (6, 20, 30, False),     # rows shorter than LANES, straddling beats
    (1, 32, 0, False), (8, 32, 0, False), (4, 64, 16, False),   # whole beats, aligned and not
    (4, 33, 31, False), (5, 100, 3, False), (7, 31, 30, False), (2, 97, 12, False), (3, 200, 1, False),
    # pairs (one input row): one-chunk rows pair once, longer rows at every boundary
    (9, 24, 0, True), (6, 17, 30, True), (5, 100, 3, True), (4, 64, 16, True), (7, 32, 31, True),
    (1, 24, 5, True), (5, 33, 31, True)])
@pytest.mark.parametrize("kind", ["every", "backlog", "gaps", "dram"])
def test_unpacker_slot_times(rows, cols, offset, pair, kind):
    """Offset 0: a beat available at cycle t is pulled at t at the earliest (src.ready is
    combinational once the unpacker is active, the cycle after `start`), and the slot
    that needs it is valid from t + 1; the model's `available` is exactly that cycle.
    The pulls, which the window holds back, are the model's too."""
    rng = np.random.default_rng(rows * 1000 + cols * 10 + offset)
    beats = model_unpacker.run_beats(offset, rows, cols, LANES)
    available = np.asarray(availability(kind, beats, rng), np.int64)
    got, pulls = unpacker_slot_cycles(offset, rows, cols, available.tolist(), pair)
    ends = model_unpacker.slot_ends(offset, rows, cols, LANES, pair)
    expected = model_unpacker.slot_times(available, model_unpacker.last_beats(ends, LANES))
    assert got == expected.tolist()
    assert pulls == model_unpacker.pull_times(available, expected, ends, LANES).tolist()


# ---- strided jobs: a column tile's rows, each a run of its own --------------------------

def strided_beats(matrix, offset, stride):
    """Each row after its offset's junk elements in beats of its own (as its DRAM run
    brings it), the rows' beats one after another."""
    rows, cols = matrix.shape
    offsets, _ = model_unpacker.strided_rows(offset, stride, rows, cols, LANES)
    out = []
    for r, off in enumerate(offsets.tolist()):
        flat = np.concatenate([np.arange(off, dtype=np.uint16) + 0xF000, matrix[r]])
        flat = np.concatenate([flat, np.full(-len(flat) % LANES, 0xEEEE, np.uint16)])
        out += [int.from_bytes(flat[i:i + LANES].tobytes(), "little") for i in range(0, len(flat), LANES)]
    return out


def unpack_strided(matrix, offset, stride, available):
    """Run a strided job on the RTL with the beats shown at `available` (cycles from the
    start): (slots [(row, col, count, data, last)], each slot's cycle, each beat's pull)."""
    rows, cols = matrix.shape
    beats = strided_beats(matrix, offset, stride)
    beats.append(0xBAD)                 # (a beat of what follows)
    assert len(beats) == len(available)
    dut = Unpacker(CFG)
    src = Source(dut.src, available, beats)
    slots, emitted = [], []

    async def bench(ctx):
        clock = Clock(ctx, src)
        ctx.set(dut.slot.ready, 1)
        ctx.set(dut.job.valid, 1)
        for name, value in (("offset", offset), ("rows", rows), ("cols", cols), ("beats", 0),
                            ("strided", 1), ("stride", stride), ("pair", 1)):
            ctx.set(dut.job.payload[name], value)
        for _ in range(max(available) + 4 * rows * (cols // LANES + 2) + 20):
            if ctx.get(dut.slot.valid):
                assert not ctx.get(dut.slot.payload.pair.valid), "a strided job pairs no chunks"
                slot = ctx.get(dut.slot.payload)
                count = slot.count
                assert slot.row_end == (slot.col + count == cols)
                data = np.frombuffer(slot.data.to_bytes(2 * LANES, "little"), np.uint16)[:count].copy()
                slots.append((slot.row, slot.col, count, data, slot.last))
                emitted.append(clock.t)
                if ctx.get(dut.slot.payload.last):
                    break
            await clock.tick()
            ctx.set(dut.job.valid, 0)
        for _ in range(4):          # no beat of what follows is taken after the last row's
            await clock.tick()

    simulate(dut, bench)
    return slots, emitted, src.taken


@pytest.mark.parametrize("rows,cols,offset,stride", [(1, 3 * LANES, 0, 0), (4, 3 * LANES, 5, 0),
                                                     (5, 70, 31, 7), (6, 97, 2, 30), (3, 160, 17, 16),
                                                     (7, 65, 1, 31)])
@pytest.mark.parametrize("kind", ["every", "backlog", "gaps", "dram"])
def test_strided_rows(rows, cols, offset, stride, kind):
    """Each row of a column tile starts on a beat of its own, `stride` elements further
    into it than the row before: every chunk is its row's segment, exactly the job's beats
    are taken, and the model's slot and pull cycles are the RTL's."""
    rng = np.random.default_rng(rows * 1000 + cols * 10 + offset)
    matrix = rng.integers(0, 0xEFFF, (rows, cols)).astype(np.uint16)
    _, per_row = model_unpacker.strided_rows(offset, stride, rows, cols, LANES)
    total = int(per_row.sum())
    available = np.asarray(availability(kind, total, rng), np.int64)
    # a beat of what follows is offered at once after the job's: it must not be taken
    slots, got, pulls = unpack_strided(matrix, offset, stride, available.tolist() + [0])
    expected = [(r, c) for r in range(rows) for c in range(0, cols, LANES)]
    assert [(r, c) for r, c, *_ in slots] == expected
    for i, (r, c, count, data, last) in enumerate(slots):
        assert count == min(LANES, cols - c) and np.array_equal(data, matrix[r, c:c + count]), (r, c)
        assert last == (i == len(expected) - 1)
    assert len(pulls) == total, "must take exactly the rows' beats, no more"
    ends, beats = model_unpacker.slots(offset, rows, cols, LANES, stride=stride)
    times = model_unpacker.slot_times(available, beats)
    assert got == times.tolist()
    assert pulls == model_unpacker.pull_times(available, times, ends, LANES).tolist()
    # the compiled path (sim/dram_reader.py's fixed point) computes the same
    fast_times, fast_pulls = model_unpacker.consume(available, 0, ends, beats, LANES)
    assert fast_times.tolist() == got and fast_pulls.tolist() == pulls
