"""hw/unpacker.py on Amaranth's simulator: every chunk is the right row segment, whatever
the matrix's offset in the first beat and however irregularly the beats arrive."""
import numpy as np
import pytest
from amaranth.sim import Simulator

import isa
from hw.unpacker import Unpacker

CFG = isa.load_config("default")
LANES = CFG.lanes


def beats_of(matrix, offset):
    """The matrix packed row-major after `offset` junk elements, cut into beats."""
    flat = np.concatenate([np.arange(offset, dtype=np.uint16) + 0xF000, matrix.reshape(-1)])
    flat = np.concatenate([flat, np.full(-len(flat) % LANES, 0xEEEE, np.uint16)])
    return [int.from_bytes(flat[i:i + LANES].tobytes(), "little") for i in range(0, len(flat), LANES)]


def unpack(matrix, offset, gaps, seed=0):
    rows, cols = matrix.shape
    beats = beats_of(matrix, offset)
    dut = Unpacker(CFG)
    chunks, taken, cycles = [], [], [0]
    rng = np.random.default_rng(seed)

    async def bench(ctx):
        ctx.set(dut.start, 1)
        ctx.set(dut.offset, offset)
        ctx.set(dut.rows, rows)
        ctx.set(dut.cols, cols)
        ctx.set(dut.beats, len(beats))
        await ctx.tick()
        ctx.set(dut.start, 0)
        for _ in range(20 * (len(beats) + rows * (cols // LANES + 1)) + 50):
            offer = len(taken) < len(beats) + 2 and not (gaps and rng.random() < 0.4)
            ctx.set(dut.src.valid, offer)
            ctx.set(dut.src.data, beats[len(taken)] if len(taken) < len(beats) else 0xBAD)
            if ctx.get(dut.valid):
                count = ctx.get(dut.count)
                data = ctx.get(dut.data).to_bytes(2 * LANES, "little")
                chunks.append((ctx.get(dut.row), ctx.get(dut.col), count,
                               np.frombuffer(data, np.uint16)[:count].copy(), ctx.get(dut.last)))
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
@pytest.mark.parametrize("gaps", [False, True])
def test_chunks_are_row_segments(rows, cols, offset, gaps):
    rng = np.random.default_rng(rows * 1000 + cols)
    matrix = rng.integers(0, 0xEFFF, (rows, cols)).astype(np.uint16)
    chunks, taken, beats, _ = unpack(matrix, offset, gaps)
    expected = [(r, c) for r in range(rows) for c in range(0, cols, LANES)]
    assert [(r, c) for r, c, *_ in chunks] == expected
    for r, c, count, data, last in chunks:
        assert count == min(LANES, cols - c)
        assert np.array_equal(data, matrix[r, c:c + count]), (r, c)
        assert last == ((r, c) == expected[-1])
    assert taken == beats, "must take exactly the run's beats, no more"


def test_full_rate_when_rows_are_whole_beats():
    """With aligned rows of LANES elements and no gaps, one chunk per cycle."""
    matrix = np.arange(8 * LANES, dtype=np.uint16).reshape(8, LANES)
    chunks, _, _, cycles = unpack(matrix, 0, gaps=False)
    assert len(chunks) == 8
    assert cycles <= 8 + 2, f"{cycles} cycles for 8 chunks"     # 2: filling the window
