"""The line packer on its own (Amaranth's simulator): result words of random sizes from a
producer with random gaps, lines taken by a consumer that stalls at random. The lines'
bytes and strobes must place exactly the run's bytes from its offset, touching no byte
around it; the cycles each word and line is taken must be sim/line_packer.py's."""
import numpy as np
import pytest
from amaranth.sim import Simulator

import isa
from hw.line_packer import LinePacker, packer_muxes
from sim import line_packer as model_packer

CFG = isa.load_config("small")


def word_sizes(rng, esize, rows, n):
    """Bytes of each word of `rows` rows of N values of `esize` bytes, LANES a word."""
    counts = np.minimum(n - np.arange(0, n, CFG.lanes), CFG.lanes)
    return np.tile(counts * esize, rows)


@pytest.mark.parametrize("esize,rows,n,offset,stall", [
    (2, 1, 96, 0, 0.0), (2, 3, 40, 10, 0.3), (2, 2, 5, 62, 0.5), (4, 1, 64, 0, 0.0),
    (4, 2, 37, 36, 0.3), (4, 4, 3, 60, 0.6), (2, 1, 1, 63, 0.0), (2, 4, 100, 2, 0.7)])
def test_line_packer(esize, rows, n, offset, stall):
    rng = np.random.default_rng(esize * 1000 + rows * 100 + n + offset)
    line = CFG.beat_bytes
    sizes = word_sizes(rng, esize, rows, n).tolist()
    payload = rng.integers(0, 256, sum(sizes), dtype=np.uint8)
    starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    gaps = rng.choice([0, 0, 0, 1, 3], len(sizes))
    ready = rng.random(40 * len(sizes) + 100) >= stall
    dut = LinePacker(CFG)
    seen = {"words": [], "lines": []}
    image = {}

    async def bench(ctx):
        ctx.set(dut.start, 1)
        ctx.set(dut.offset, offset)
        await ctx.tick()
        ctx.set(dut.start, 0)
        offered = 1 + int(gaps[0])
        for cycle in range(1, len(ready)):
            i = len(seen["words"])
            valid = i < len(sizes) and cycle >= offered
            ctx.set(dut.w.valid, valid)
            if i < len(sizes):
                word = payload[starts[i]:starts[i + 1]]
                # bytes past the word's are garbage the packer must not write
                garbage = rng.integers(0, 256, 4 * CFG.lanes - len(word), dtype=np.uint8)
                ctx.set(dut.w.payload.data, int.from_bytes(np.concatenate([word, garbage]).tobytes(), "little"))
                ctx.set(dut.w.payload.bytes, sizes[i])
                ctx.set(dut.w.payload.last, i == len(sizes) - 1)
            ctx.set(dut.out.ready, int(ready[cycle]))
            if ctx.get(dut.out.valid) and ready[cycle]:
                data = ctx.get(dut.out.payload.data).to_bytes(line, "little")
                strb = ctx.get(dut.out.payload.strb)
                index = len(seen["lines"])
                for b in range(line):
                    if strb >> b & 1:
                        assert index * line + b not in image, "a byte written twice"
                        image[index * line + b] = data[b]
                seen["lines"].append(cycle)
            if valid and ctx.get(dut.w.ready):
                seen["words"].append(cycle)
                if i + 1 < len(sizes):
                    offered = cycle + 1 + int(gaps[i + 1])
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert sorted(image) == list(range(offset, offset + len(payload)))
    assert bytes(image[offset + j] for j in range(len(payload))) == payload.tobytes()

    def line_take(index, shown):
        cycle = shown
        while not ready[cycle]:
            cycle += 1
        return cycle
    run = model_packer.Run(offset, sizes, line, line_take)
    words, offered = [], 1 + int(gaps[0])
    for i in range(len(sizes)):
        words.append(run.take_word(i, offered))
        if i + 1 < len(sizes):
            offered = words[-1] + 1 + int(gaps[i + 1])
    assert seen["words"] == words
    assert seen["lines"] == run.takes


def test_buffer_lines_tied():
    from hw import line_packer as rtl_packer
    assert model_packer.BUFFER_LINES == rtl_packer.BUFFER_LINES


def test_packer_muxes_counts_its_shifters():
    # 32 lanes: a 64-byte line (6 offset bits: digits of 4 and 2 bits), a 128-byte word,
    # 191 bytes reachable. The data shifter on bytes: 128 -> 143 bytes at 15 muxes a bit,
    # then -> 191 at 3; the strobes the same on one bit a byte
    assert packer_muxes(32) == 8 * (143 * 15 + 191 * 3) + (143 * 15 + 191 * 3)

