"""The readout: a stage's words out of the compute unit, to where the stage sends them.

A job reads `rows` rows of N values, a word of LANES values at a time, in order:
- from the output buffer through the fold unit (hw/fold_unit.py; the stage's plan, its
  accumulator bank), or from the input buffer (SOFTMAX's rows, one word every second
  cycle: its address one cycle, its data the next);
- into the line packer, as FP16 or FP32 results (the job's write run starts, `run_*` to
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
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from isa.pe_array import ACC_INTERLEAVE, trans_line_cycles
from isa.descriptor import DIM_BITS

# where a job's words go
TO_RESULT16, TO_RESULT32, TO_INPUT, TO_SCORES = range(4)
# where they come from
FROM_FOLD, FROM_INPUT = range(2)


class Readout(wiring.Component):
    def __init__(self, cfg, acc_depth, k_words):
        self._cfg = cfg
        lanes, rows = cfg.lanes, cfg.rows
        lane_bits = (lanes - 1).bit_length()
        super().__init__({
            # the job, taken with `start`, begun `delay` cycles later (0: at once); with
            # `results`, its write run: `lines` lines from the one holding byte `first`
            "start": In(1), "delay": In(range(trans_line_cycles(lanes) + 1)),
            "source": In(1), "dest": In(range(4)), "rows": In(range(rows + 1)), "n": In(DIM_BITS),
            "n_words": In(range(acc_depth + 1)), "sets": In(range(ACC_INTERLEAVE + 1)),
            "sets1": In(range(ACC_INTERLEAVE + 1)), "pack_log2": In(range(lane_bits + 1)), "bank": In(1),
            "results": In(1), "first": In(64), "lines": In(32),
            # a job taken and not begun (and whether it has results), one begun and not done
            "waiting": Out(1), "waiting_results": Out(1), "busy": Out(1), "done": Out(1),
            # the write run, started as the job begins (the writer and the line packer)
            "run_start": Out(1), "run_addr": Out(64), "run_lines": Out(32),
            "run_offset": Out(range(cfg.beat_bytes)),
            # the fold unit and its sums (hw/compute_unit.py)
            "fold_valid": Out(1), "fold_ready": In(1), "fold_row": Out(range(rows)), "fold_word": Out(range(acc_depth)),
            "fold_n_cols": Out(DIM_BITS), "fold_n_words": Out(range(acc_depth + 1)),
            "fold_sets": Out(range(ACC_INTERLEAVE + 1)), "fold_sets1": Out(range(ACC_INTERLEAVE + 1)),
            "fold_pack_log2": Out(range(lane_bits + 1)), "fold_bank": Out(1),
            "sum_valid": In(1), "sum_ready": Out(1), "sum_fp32": In(32 * lanes), "sum_fp16": In(16 * lanes),
            # the input buffer's synchronous read (FROM_INPUT)
            "rd_en": Out(1), "rd_row": Out(range(rows)), "rd_addr": Out(range(max(k_words, acc_depth))),
            "rd_in_data": In(16 * lanes),
            # the line packer's word input (results)
            "w_valid": Out(1), "w_ready": In(1), "w_data": Out(32 * lanes), "w_bytes": Out(range(4 * lanes + 1)),
            "w_last": Out(1),
            # a word into the input buffer (TO_INPUT) or the output buffer (TO_SCORES)
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
        fields = ("source", "dest", "rows", "n", "n_words", "sets", "sets1", "pack_log2", "bank", "results",
                  "first", "lines")
        later = {name: Signal.like(getattr(self, name), name=f"later_{name}") for name in fields}
        waiting, wait = self.waiting, Signal.like(self.delay)
        job = {name: Mux(waiting, later[name], getattr(self, name)) for name in fields}
        begin = Signal()
        with m.If(waiting):
            with m.If(wait == 1):
                m.d.comb += begin.eq(1)
                m.d.sync += waiting.eq(0)
            with m.Else():
                m.d.sync += wait.eq(wait - 1)
        with m.If(self.start):
            with m.If(self.delay == 0):
                m.d.comb += begin.eq(1)
            with m.Else():
                m.d.sync += [waiting.eq(1), wait.eq(self.delay)]
                m.d.sync += [later[name].eq(getattr(self, name)) for name in fields]
        m.d.comb += self.waiting_results.eq(waiting & later["results"])
        # the group's rows are bytes first .. first + rows * row bytes - 1 of the completion
        # slot's data: the write run from the line holding the first
        with m.If(begin & job["results"]):
            m.d.comb += [self.run_start.eq(1), self.run_addr.eq(Cat(Const(0, line_log2), job["first"][line_log2:])),
                         self.run_lines.eq(job["lines"]),
                         self.run_offset.eq(job["first"][:(cfg.beat_bytes - 1).bit_length()])]

        source, dest, rows, n = Signal(1), Signal(range(4)), Signal.like(self.rows), Signal(DIM_BITS)
        busy = Signal()
        m.d.comb += self.busy.eq(busy)
        # the word's values and whether it is its row's last, registered with the values its
        # row has left from it (for 1 GHz: the word's bytes reach the line packer's ready,
        # and through it the unpacker's, without an add and a compare on the way)
        left, count, last_word = Signal(DIM_BITS), Signal(range(lanes + 1)), Signal()

        def row_from(values):
            """`left`, `count`, `last_word` for a word with `values` left in its row."""
            return [left.eq(values), count.eq(Mux(values < lanes, values, lanes)), last_word.eq(values <= lanes)]
        with m.If(begin):
            m.d.sync += row_from(job["n"])
            m.d.sync += [source.eq(job["source"]), dest.eq(job["dest"]), rows.eq(job["rows"]), n.eq(job["n"]),
                         busy.eq(1), self.fold_n_words.eq(job["n_words"]), self.fold_sets.eq(job["sets"]),
                         self.fold_sets1.eq(job["sets1"]), self.fold_pack_log2.eq(job["pack_log2"]),
                         self.fold_bank.eq(job["bank"])]
        m.d.comb += self.fold_n_cols.eq(n)

        # the words asked of the fold unit, and the words taken out (row, word)
        ask_row, ask_word, asked_all = Signal.like(self.fold_row), Signal(DIM_BITS), Signal()
        row, word = Signal.like(self.fold_row), Signal(DIM_BITS)
        with m.If(begin):
            m.d.sync += [ask_row.eq(0), ask_word.eq(0), asked_all.eq(0), row.eq(0), word.eq(0)]
        m.d.comb += [self.fold_row.eq(ask_row), self.fold_word.eq(ask_word),
                     self.fold_valid.eq(busy & (source == FROM_FOLD) & ~asked_all)]
        with m.If(self.fold_valid & self.fold_ready):
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
        m.d.comb += [self.rd_row.eq(row), self.rd_addr.eq(word), self.rd_en.eq(busy & (source == FROM_INPUT))]
        valid = Mux(source == FROM_FOLD, self.sum_valid, bank_valid) & busy
        last_row = row + 1 == rows
        to_result = (dest == TO_RESULT16) | (dest == TO_RESULT32)
        fp32 = Mux(source == FROM_FOLD, self.sum_fp32, 0)
        fp16 = Mux(source == FROM_FOLD, self.sum_fp16, self.rd_in_data)
        m.d.comb += [self.w_valid.eq(valid & to_result), self.w_data.eq(Mux(dest == TO_RESULT32, fp32, fp16)),
                     self.w_bytes.eq(count << Mux(dest == TO_RESULT32, 2, 1)), self.w_last.eq(last_word & last_row),
                     self.in_we.eq(valid & (dest == TO_INPUT)), self.acc_we.eq(valid & (dest == TO_SCORES)),
                     self.buf_row.eq(row), self.buf_word.eq(word),
                     self.buf_data32.eq(self.sum_fp32), self.buf_data16.eq(self.sum_fp16)]
        taken = valid & Mux(to_result, self.w_ready, 1)
        m.d.comb += self.sum_ready.eq((source == FROM_FOLD) & Mux(to_result, self.w_ready, 1))
        with m.If(source == FROM_INPUT):
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
