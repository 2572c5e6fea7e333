"""The readout: a stage's words out of the compute unit, to where the stage sends them.

A job reads `rows` rows of N values from row `row` on (a stage on PE row 1 alone has its
one row's results there), a word of LANES values at a time, in order:
- from the output buffer through the fold unit (hw/fold_unit.py; the stage's plan, its
  accumulator bank), or from the input buffer (SOFTMAX's rows, one word every second
  cycle: its address one cycle, its data the next);
- into the line packer, as FP16 or FP32 results (the job's write run starts, `run` to
  the writer and the packer, as the job begins), or into the compute unit's buffers: the
  input buffer (a chain's next input, FP16) or the output buffer (attention's FP32
  scores, in the bank read).

A stage's job is taken as the stage's last chunk enters the PE array and begins `delay`
cycles later, in the cycle its last sums are written (`waiting` meanwhile: the writer
takes no other job then, and a completion line waits for a waiting job's results).

It holds its own copy of the plan, so the control unit can plan and run the next stage
in the other accumulator bank while results are read out: the readout of one group's
results overlaps the next group's (or the next descriptor's) input and weights. Where the
next stage needs the words (a chain, SOFTMAX's rows in the input buffer) the control unit
waits for `done`, which pulses with the job's last word.
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from isa.pe_array import ACC_INTERLEAVE, trans_line_cycles
from isa.descriptor import DIM_BITS
from .fold_unit import fold_request_layout, sum_layout
from .line_packer import word_layout

class Dest(enum.Enum, shape=2):
    """Where a job's words go."""
    RESULT16 = 0        # FP16 results, through the line packer
    RESULT32 = 1        # FP32 results (attention's O)
    INPUT = 2           # the input buffer, FP16 (a chain's next input)
    SCORES = 3          # the output buffer, FP32 (attention's scores)


class Source(enum.Enum, shape=1):
    """Where they come from."""
    FOLD = 0            # the output buffer, through the fold unit
    INPUT = 1           # the input buffer (SOFTMAX's rows)


def job_layout(cfg, acc_depth):
    """A job: begun `delay` cycles after it is taken (0: at once); `rows` rows of `n`
    values from row `row` on, from `source` to `dest`; the stage's plan as the fold unit reads it out (words
    per set, the sets of PE rows 0 and 1, log2 of the packing, the accumulator bank); and
    with `results`, its write run: `lines` lines from the one holding byte `first`."""
    lanes = cfg.lanes
    lane_bits = (lanes - 1).bit_length()
    return data.StructLayout({
        "delay": range(trans_line_cycles(lanes) + 1), "source": Source, "dest": Dest,
        "row": range(cfg.rows), "rows": range(cfg.rows + 1), "n": DIM_BITS, "n_words": range(acc_depth + 1),
        "sets": range(ACC_INTERLEAVE + 1), "sets1": range(ACC_INTERLEAVE + 1), "pack_log2": range(lane_bits + 1),
        "bank": 1, "results": 1, "first": 64, "lines": 32,
    })


def run_layout(cfg):
    """A job's write run: its first line's address, its lines, and its first byte's offset
    in that line's beat (the writer's job and the line packer's)."""
    return data.StructLayout({"addr": 64, "lines": 32, "offset": range(cfg.beat_bytes)})


class Readout(wiring.Component):
    def __init__(self, cfg, acc_depth, k_words):
        self._cfg, self._job_layout = cfg, job_layout(cfg, acc_depth)
        lanes, rows = cfg.lanes, cfg.rows
        super().__init__({
            # the job, taken as it is shown (the control unit gives one only while `waiting`
            # and `busy` are low)
            "job": In(stream.Signature(self._job_layout, always_ready=True)),
            # a job taken and not begun (and whether it has results), one begun and not done
            "waiting": Out(1), "waiting_results": Out(1), "busy": Out(1), "done": Out(1),
            # the write run, started as the job begins (the writer and the line packer)
            "run": Out(stream.Signature(run_layout(cfg), always_ready=True)),
            # the fold unit and its sums (hw/compute_unit.py)
            "fold": Out(stream.Signature(fold_request_layout(cfg, acc_depth))),
            "sum": In(stream.Signature(sum_layout(lanes))),
            # the input buffer's synchronous read (Source.INPUT)
            "rd_en": Out(1), "rd_row": Out(range(rows)), "rd_addr": Out(range(max(k_words, acc_depth))),
            "rd_in_data": In(16 * lanes),
            # the line packer's word input (results)
            "w": Out(stream.Signature(word_layout(cfg))),
            # a word into the input buffer (Dest.INPUT) or the output buffer (Dest.SCORES)
            "in_we": Out(1), "acc_we": Out(1), "buf_row": Out(range(rows)), "buf_word": Out(DIM_BITS),
            "buf_data32": Out(32 * lanes), "buf_data16": Out(16 * lanes),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        lanes, lane_bits = cfg.lanes, (cfg.lanes - 1).bit_length()
        line_log2 = (cfg.port_bytes - 1).bit_length()

        # ---- the job: begun at once, or kept until its delay has passed (a stage's readout
        # waits for its last sums to be written while the control unit goes on)
        layout, shown = self._job_layout, self.job.payload
        later = Signal(layout, name="later")
        waiting, wait = self.waiting, Signal.like(shown.delay)
        job = data.View(layout, Mux(waiting, later.as_value(), shown.as_value()))
        begin = Signal()
        with m.If(waiting):
            with m.If(wait == 1):
                m.d.comb += begin.eq(1)
                m.d.sync += waiting.eq(0)
            with m.Else():
                m.d.sync += wait.eq(wait - 1)
        with m.If(self.job.valid):
            with m.If(shown.delay == 0):
                m.d.comb += begin.eq(1)
            with m.Else():
                m.d.sync += [waiting.eq(1), wait.eq(shown.delay), later.eq(shown)]
        m.d.comb += self.waiting_results.eq(waiting & later.results)
        # the group's rows are bytes first .. first + rows * row bytes - 1 of the completion
        # slot's data: the write run from the line holding the first
        with m.If(begin & job.results):
            run = self.run.payload
            m.d.comb += [self.run.valid.eq(1), run.addr.eq(Cat(Const(0, line_log2), job.first[line_log2:])),
                         run.lines.eq(job.lines), run.offset.eq(job.first[:(cfg.beat_bytes - 1).bit_length()])]

        # (`rows`: the row after the job's last)
        source, dest, rows, n = Signal(Source), Signal(Dest), Signal(range(cfg.rows + 1)), Signal(DIM_BITS)
        busy = Signal()
        m.d.comb += self.busy.eq(busy)
        fold = self.fold.payload            # the fold request: the job's plan registered as it begins
        # the word's values and whether it is its row's last, registered with the values its
        # row has left from it (for 1 GHz: the word's bytes reach the line packer's ready,
        # and through it the unpacker's, without an add and a compare on the way)
        left, count, last_word = Signal(DIM_BITS), Signal(range(lanes + 1)), Signal()

        def row_from(values):
            """`left`, `count`, `last_word` for a word with `values` left in its row."""
            return [left.eq(values), count.eq(Mux(values < lanes, values, lanes)), last_word.eq(values <= lanes)]
        with m.If(begin):
            m.d.sync += row_from(job.n)
            m.d.sync += [source.eq(job.source), dest.eq(job.dest), rows.eq(job.row + job.rows), n.eq(job.n),
                         busy.eq(1), fold.n_words.eq(job.n_words), fold.sets.eq(job.sets),
                         fold.sets1.eq(job.sets1), fold.pack_log2.eq(job.pack_log2), fold.bank.eq(job.bank)]
        m.d.comb += fold.n_cols.eq(n)

        # the words asked of the fold unit, and the words taken out (row, word)
        ask_row, ask_word, asked_all = Signal.like(fold.row), Signal(DIM_BITS), Signal()
        row, word = Signal.like(fold.row), Signal(DIM_BITS)
        with m.If(begin):
            m.d.sync += [ask_row.eq(job.row), ask_word.eq(0), asked_all.eq(0), row.eq(job.row), word.eq(0)]
        m.d.comb += [fold.row.eq(ask_row), fold.word.eq(ask_word),
                     self.fold.valid.eq(busy & (source == Source.FOLD) & ~asked_all)]
        with m.If(self.fold.valid & self.fold.ready):
            with m.If(((ask_word + 1) << lane_bits) < n):
                m.d.sync += ask_word.eq(ask_word + 1)
            with m.Elif(ask_row + 1 < rows):
                m.d.sync += [ask_word.eq(0), ask_row.eq(ask_row + 1)]
            with m.Else():
                m.d.sync += asked_all.eq(1)

        # the word (row, word) out: a sum, or the input buffer's word read the cycle before
        bank_valid = Signal()
        with m.If(begin):
            m.d.sync += bank_valid.eq(0)
        m.d.comb += [self.rd_row.eq(row), self.rd_addr.eq(word), self.rd_en.eq(busy & (source == Source.INPUT))]
        valid = Mux(source == Source.FOLD, self.sum.valid, bank_valid) & busy
        last_row = row + 1 == rows
        to_result = (dest == Dest.RESULT16) | (dest == Dest.RESULT32)
        fp32 = Mux(source == Source.FOLD, self.sum.payload.fp32, 0)
        fp16 = Mux(source == Source.FOLD, self.sum.payload.fp16, self.rd_in_data)
        m.d.comb += [self.w.valid.eq(valid & to_result), self.w.payload.data.eq(Mux(dest == Dest.RESULT32, fp32, fp16)),
                     self.w.payload.bytes.eq(count << Mux(dest == Dest.RESULT32, 2, 1)),
                     self.w.payload.last.eq(last_word & last_row),
                     self.in_we.eq(valid & (dest == Dest.INPUT)), self.acc_we.eq(valid & (dest == Dest.SCORES)),
                     self.buf_row.eq(row), self.buf_word.eq(word),
                     self.buf_data32.eq(self.sum.payload.fp32), self.buf_data16.eq(self.sum.payload.fp16)]
        taken = valid & Mux(to_result, self.w.ready, 1)
        m.d.comb += self.sum.ready.eq((source == Source.FOLD) & Mux(to_result, self.w.ready, 1))
        with m.If(source == Source.INPUT):
            # the next word's address goes out once this one is taken
            m.d.sync += bank_valid.eq(busy & ~taken)
        with m.If(taken):
            with m.If(~last_word):
                m.d.sync += [word.eq(word + 1), *row_from(left - lanes)]
            with m.Elif(~last_row):
                m.d.sync += [word.eq(0), row.eq(row + 1), *row_from(n)]
            with m.Else():
                m.d.sync += busy.eq(0)
                m.d.comb += self.done.eq(1)
        return m
