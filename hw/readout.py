"""The readout: a stage's words out of the compute unit, to where the stage sends them.

A job reads `rows` rows of N values, a word of LANES values at a time, in order:
- from the output buffer through the fold unit (hw/fold_unit.py; the stage's plan, its
  accumulator bank), or from the input buffer (SOFTMAX's rows, one word every second
  cycle: its address one cycle, its data the next);
- into the line packer, as FP16 or FP32 results (the control unit started the group's
  write run with the job), or into the compute unit's buffers: the input buffer (a
  chain's next input, FP16) or the output buffer (attention's FP32 scores, in the bank
  read).

It holds its own copy of the plan, so the control unit can plan and run the next stage
in the other accumulator bank while results are read out: the readout of one group's
results overlaps the next group's (or the next descriptor's) input and weights. Where the
next stage needs the words (a chain, SOFTMAX's rows in the input buffer) the control unit
waits for `done`, which pulses with the job's last word.
"""
from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from isa.pe_array import ACC_INTERLEAVE
from .unpacker import DIM_BITS

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
            # the job, taken with `start`
            "start": In(1), "source": In(1), "dest": In(range(4)), "rows": In(range(rows + 1)), "n": In(DIM_BITS),
            "n_words": In(range(acc_depth + 1)), "sets": In(range(ACC_INTERLEAVE + 1)),
            "sets1": In(range(ACC_INTERLEAVE + 1)), "pack_log2": In(range(lane_bits + 1)), "bank": In(1),
            "busy": Out(1), "done": Out(1),
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
        source, dest, rows, n = Signal(1), Signal(range(4)), Signal.like(self.rows), Signal(DIM_BITS)
        busy = Signal()
        m.d.comb += self.busy.eq(busy)
        with m.If(self.start):
            m.d.sync += [source.eq(self.source), dest.eq(self.dest), rows.eq(self.rows), n.eq(self.n), busy.eq(1),
                         self.fold_n_words.eq(self.n_words), self.fold_sets.eq(self.sets),
                         self.fold_sets1.eq(self.sets1), self.fold_pack_log2.eq(self.pack_log2),
                         self.fold_bank.eq(self.bank)]
        m.d.comb += self.fold_n_cols.eq(n)

        # the words asked of the fold unit, and the words taken out (row, word)
        ask_row, ask_word, asked_all = Signal.like(self.fold_row), Signal(DIM_BITS), Signal()
        row, word = Signal.like(self.fold_row), Signal(DIM_BITS)
        with m.If(self.start):
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
        with m.If(self.start):
            m.d.sync += bank_valid.eq(0)
        m.d.comb += [self.rd_row.eq(row), self.rd_addr.eq(word), self.rd_en.eq(busy & (source == FROM_INPUT))]
        valid = Mux(source == FROM_FOLD, self.sum_valid, bank_valid) & busy
        last_word = ((word + 1) << lane_bits) >= n
        last_row = row + 1 == rows
        col = (word << lane_bits)[:DIM_BITS]
        count = Signal(range(lanes + 1))
        m.d.comb += count.eq(Mux(n - col < lanes, n - col, lanes))
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
                m.d.sync += word.eq(word + 1)
            with m.Elif(~last_row):
                m.d.sync += [word.eq(0), row.eq(row + 1)]
            with m.Else():
                m.d.sync += busy.eq(0)
                m.d.comb += self.done.eq(1)
        return m
