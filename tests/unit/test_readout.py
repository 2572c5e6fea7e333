"""The readout (hw/readout.py): a job's words, in order, to where it sends them, with each
word's value, size and the run's last; against its model (sim/readout.py) for the cycles
of SOFTMAX's rows out of the input buffer. The fold unit here is a stand-in answering each
request in order after a few cycles (the fold unit itself: tests/unit/test_fold_unit.py),
so the values tie each output word to the request it answers."""
import numpy as np
import pytest

import isa
from ties import simulate
from hw.readout import Dest, Source
from sim import readout as model

CFG = isa.load_config("default")
LANES = CFG.lanes
FOLD_LATENCY = 3


def word_value(row, word, bits):
    """The value a stand-in source gives word (row, word): distinct per word and lane."""
    return sum(((row * 1000 + word * 40 + j + 1) & ((1 << min(bits, 16)) - 1)) << (bits * j) for j in range(LANES))


def run(source, dest, rows, n, seed, stall, row=0):
    from hw.readout import Readout
    acc_depth = CFG.n_max // LANES
    dut = Readout(CFG, acc_depth, CFG.k_max // LANES)
    rng = np.random.default_rng(seed)
    seen = {"words": [], "done": [], "asked": []}

    async def bench(ctx):
        for name, value in (("source", source), ("dest", dest), ("row", row), ("rows", rows), ("n", n),
                            ("n_words", -(-n // LANES)), ("sets", 1), ("sets1", 0), ("pack_log2", 0), ("bank", 0)):
            ctx.set(dut.job.payload[name], value)
        ctx.set(dut.job.valid, 1)
        await ctx.tick()
        ctx.set(dut.job.valid, 0)
        answers, read = [], None            # the stand-in fold's sums in flight; the buffer's read
        for cycle in range(1, 3000):
            if seen["done"] and cycle > seen["done"][0] + 5:
                break
            w_ready = int(rng.random() >= stall)
            fold_ready = int(rng.random() >= stall)
            ctx.set(dut.w.ready, w_ready)
            ctx.set(dut.fold.ready, fold_ready)
            # the fold stand-in: a request's sum shows FOLD_LATENCY cycles after it, in order
            head = answers[0] if answers and answers[0][0] <= cycle else None
            ctx.set(dut.sum.valid, int(head is not None))
            if head is not None:
                ctx.set(dut.sum.payload.fp32, word_value(*head[1], 32))
                ctx.set(dut.sum.payload.fp16, word_value(*head[1], 16))
            # the input buffer: a synchronous read (data of the address of the cycle before)
            ctx.set(dut.rd_in_data, word_value(*read, 16) if read else 0)
            if ctx.get(dut.fold.valid) and fold_ready:
                request = (ctx.get(dut.fold.payload.row), ctx.get(dut.fold.payload.word))
                seen["asked"].append(request)
                answers.append((cycle + FOLD_LATENCY, request))
            if head is not None and ctx.get(dut.sum.ready):
                answers.pop(0)
            if ctx.get(dut.w.valid) and w_ready:
                seen["words"].append(("result", cycle, ctx.get(dut.w.payload.data), ctx.get(dut.w.payload.bytes),
                                      ctx.get(dut.w.payload.last)))
            for we, data in ((dut.in_we, dut.buf_data16), (dut.acc_we, dut.buf_data32)):
                if ctx.get(we):
                    seen["words"].append(("buffer", cycle, ctx.get(dut.buf_row), ctx.get(dut.buf_word),
                                          ctx.get(data)))
            if ctx.get(dut.done):
                seen["done"].append(cycle)
            read = (ctx.get(dut.rd_row), ctx.get(dut.rd_addr)) if ctx.get(dut.rd_en) else None
            await ctx.tick()
        assert not ctx.get(dut.busy)

    simulate(dut, bench)
    return seen


def expected_words(rows, n, row=0):
    return [(r, w) for r in range(row, row + rows) for w in range(-(-n // LANES))]


@pytest.mark.parametrize("dest", [Dest.RESULT16, Dest.RESULT32, Dest.INPUT, Dest.SCORES])
@pytest.mark.parametrize("stall", [0.0, 0.4])
@pytest.mark.parametrize("row,rows", [(0, 3), (1, 1), (1, 3)])
def test_fold_words_reach_their_destination_in_order(dest, stall, row, rows):
    # (from row 1: a stage on PE row 1 alone, its one row's results there)
    n = 70
    seen = run(Source.FOLD, dest, rows, n, seed=dest.value * 7 + int(stall * 10), stall=stall, row=row)
    words = expected_words(rows, n, row)
    assert seen["asked"] == words                 # every word asked once, in order
    got = seen["words"]
    assert len(got) == len(words) and len(seen["done"]) == 1 and seen["done"][0] == got[-1][1]
    esize = 4 if dest in (Dest.RESULT32, Dest.SCORES) else 2
    for i, ((row, word), out) in enumerate(zip(words, got)):
        value = word_value(row, word, 8 * esize)
        if dest in (Dest.RESULT16, Dest.RESULT32):
            assert out[0] == "result" and out[2] == value
            assert out[3] == min(LANES, n - word * LANES) * esize and out[4] == (i == len(words) - 1)
        else:
            assert out[0] == "buffer" and out[2:] == (row, word, value)


@pytest.mark.parametrize("stall", [0.0, 0.5])
def test_input_rows_cycles_equal_the_model(stall):
    rows, n = 4, 100
    seen = run(Source.INPUT, Dest.RESULT16, rows, n, seed=5, stall=stall)
    words = expected_words(rows, n)
    got = seen["words"]
    assert [out[2] for out in got] == [word_value(r, w, 16) for r, w in words]
    # the model's cycles behind the same consumer: the bench drew w_ready, then fold_ready,
    # each cycle from 1 on
    rng = np.random.default_rng(5)
    w_ready = [None]
    for _ in range(2999):
        w_ready.append(rng.random() >= stall)
        rng.random()

    def take_word(i, at):
        while not w_ready[at]:
            at += 1
        return at
    assert [out[1] for out in got] == model.run(1, len(words), None, take_word)


@pytest.mark.parametrize("delay", [0, 1, 6])
def test_a_job_begins_after_its_delay_with_its_write_run(delay):
    """Taken at cycle 0, the job waits `delay` cycles (waiting, with its results), then begins:
    its write run starts at the line holding byte `first` (the offset within the beat, the
    lines), and the fold is asked for the first word from the next cycle."""
    from hw.readout import Readout
    dut = Readout(CFG, CFG.n_max // LANES, CFG.k_max // LANES)
    first, lines = 0x2000_0000 + 64 * 3 + 40, 7
    seen = []

    async def bench(ctx):
        for name, value in (("source", Source.FOLD), ("dest", Dest.RESULT16), ("rows", 2), ("n", 40), ("n_words", 2),
                            ("sets", 1), ("pack_log2", 0), ("results", 1), ("first", first), ("lines", lines),
                            ("delay", delay)):
            ctx.set(dut.job.payload[name], value)
        ctx.set(dut.job.valid, 1)
        for cycle in range(12):
            run = ctx.get(dut.run.payload)
            seen.append({name: ctx.get(getattr(dut, name)) for name in ("waiting", "waiting_results", "busy")}
                        | {"run_start": ctx.get(dut.run.valid), "run_addr": run.addr, "run_lines": run.lines,
                           "run_offset": run.offset, "fold_valid": ctx.get(dut.fold.valid)})
            await ctx.tick()
            ctx.set(dut.job.valid, 0)
            # the inputs change once taken: a waiting job keeps its own copy
            ctx.set(dut.job.payload.first, 0)
            ctx.set(dut.job.payload.lines, 0)

    simulate(dut, bench)
    begins = [c for c, s in enumerate(seen) if s["run_start"]]
    assert begins == [delay]
    s = seen[delay]
    assert (s["run_addr"], s["run_lines"], s["run_offset"]) == (first - first % 64, lines, first % CFG.beat_bytes)
    assert all(seen[c]["waiting"] and seen[c]["waiting_results"] for c in range(1, delay))
    assert not any(seen[c]["waiting"] for c in range(delay + 1, 12))
    assert [c for c, s in enumerate(seen) if s["fold_valid"]][0] == delay + 1
