"""The fold unit: reads a stage's results out of the output buffer, one word (LANES
outputs of one row) per request, in `isa/pe_array.py`'s order: the word's sets in order
(with the split, PE row 0's, then PE row 1's), then the packed rows pairwise
(lane j += lane j + h * N), one LANES-wide FP32 add per step.

The words stream. The output buffer has one read port a memory (a macro of one read
port, as the PE row's accumulator read and write take a 1R1W macro), so the unit reads at
most one word a cycle: a request taken reads the word's first set (`a`) and, when the word
has adds, holds it a cycle (`first`, LOADING) while the add reads its operand (`b`). The
adder array is pipelined (ADD_STAGES logic stages) and its operands are registered, so one
word's next add can start ADD_STAGES cycles after its last; meanwhile the adder takes other
words' adds. A word leaving the adder with steps to go re-enters it at once, so the words
come out in request order, one every max(1, steps + 1) cycles at best:

    cycle c                 request taken: the word's first set read (held: LOADING)
    c + 1                   its first operand read; both registered as the adder's
                            operands (step 0)
    c + 1 + ADD_STAGES - 1  the sum: re-entered with the next operand (step 1), or
                            written into the output FIFO
    c + STEP_CYCLES * steps + 2   the word at the FIFO's head (`out.valid`)

A request is taken only in a cycle in which no add enters the adder and none will in the
next (the held word's), so `a` and `b` never read in one cycle. A word without adds
(steps = 0: one set, no split, no packing) goes into the FIFO as it is read: `out.valid`
the cycle after the request, a request every cycle. The FIFO holds FIFO_DEPTH words; a
request is taken only when the words taken and not yet read out are fewer, so a consumer
that stalls (the DRAM writer between bursts) stops the requests, never loses a sum.
"""
from amaranth import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from isa.microarch import FOLD_FIFO_DEPTH as FIFO_DEPTH
from isa.pe_array import ACC_INTERLEAVE
from isa.descriptor import DIM_BITS
from .fp import ADD_STAGES
from .fp_cells import add_cell
from .shift import shift_right

STEP_CYCLES = ADD_STAGES          # a word's add -> its next add (operands registered, then the adder)
assert ADD_STAGES >= 2, "a take looks a stage ahead for the add that re-enters next"
assert FIFO_DEPTH & (FIFO_DEPTH - 1) == 0, "the FIFO's pointers wrap around"


def request_layout(rows, acc_depth):
    """The fold unit's request: one word of one row."""
    return data.StructLayout({"row": range(rows), "word": range(acc_depth)})


def fold_request_layout(cfg, acc_depth):
    """The compute unit's fold request (from the readout): the fold unit's request, with the
    plan of the stage read out (constant through its readout: N, words per set, the sets
    that received a k-group in the row and (split) in PE row 1, log2 of the packing) and
    the accumulator bank read out."""
    return data.StructLayout({
        "row": range(cfg.rows), "word": range(acc_depth), "n_cols": DIM_BITS, "n_words": range(acc_depth + 1),
        "sets": range(ACC_INTERLEAVE + 1), "sets1": range(ACC_INTERLEAVE + 1),
        "pack_log2": range((cfg.lanes - 1).bit_length() + 1), "bank": 1,
    })


def sum_layout(lanes):
    """A word's sums: FP32, and rounded to FP16."""
    return data.StructLayout({"fp32": 32 * lanes, "fp16": 16 * lanes})


class FoldUnit(wiring.Component):
    def __init__(self, cfg, acc_depth, shared_cells=True):
        self._cfg, self._shared, self.acc_depth = cfg, shared_cells, acc_depth
        lanes, rows = cfg.lanes, cfg.rows
        super().__init__({
            # the stage's plan, constant through its readout: N, words per set, the sets
            # that received a k-group in the row and (split) in PE row 1, log2 of the packing
            "n_cols": In(DIM_BITS), "n_words": In(range(acc_depth + 1)),
            "sets": In(range(ACC_INTERLEAVE + 1)), "sets1": In(range(ACC_INTERLEAVE + 1)),
            "pack_log2": In(range((lanes - 1).bit_length() + 1)),
            # requests: one word of one row
            "req": In(stream.Signature(request_layout(rows, acc_depth))),
            # two combinational reads of the output buffer, never in the same cycle: a word's
            # first set (`a_en`: a request taken), an add's operand (`b_en`)
            "a_en": Out(1), "a_row": Out(range(rows)), "a_addr": Out(range(acc_depth)), "a_data": In(32 * lanes),
            "b_en": Out(1), "b_row": Out(range(rows)), "b_addr": Out(range(acc_depth)), "b_data": In(32 * lanes),
            # the sums, in request order
            "out": Out(stream.Signature(sum_layout(lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        lanes = self._cfg.lanes
        row_bits, word_bits = len(self.req.payload.row), len(self.req.payload.word)
        steps, own_adds = Signal(8), Signal(range(ACC_INTERLEAVE))
        # adds per word: the row's sets after its first, PE row 1's sets, the lane tree
        m.d.comb += [own_adds.eq(Mux(self.sets != 0, self.sets - 1, 0)),
                     steps.eq(own_adds + self.sets1 + self.pack_log2)]

        # the adder's operands (registered) with the add's word and step (`entered`: valid,
        # row, word, step), and that tag delayed to the cycle its sum leaves the adder
        total, operand = Signal(32 * lanes), Signal(32 * lanes)
        sums = []
        for j in range(lanes):
            s = Signal(32, name=f"fold_sum_{j}")
            add_cell(m, f"fold_add_{j}", "ndp_fp32_add_pipe", self._shared,
                     a=total.word_select(j, 32), b=operand.word_select(j, 32), s=s)
            sums.append(s)
        # (the add's last step, worked out as it enters: its sum's `again` is then a register)
        tag_layout = data.StructLayout({"valid": 1, "row": row_bits, "word": word_bits, "step": 8, "last": 1})
        entered = Signal(tag_layout)
        tags = [entered]
        for i in range(ADD_STAGES - 1):
            later = Signal.like(entered, name=f"fold_tag_s{i + 1}")
            m.d.sync += later.eq(tags[-1])
            tags.append(later)
        done = tags[-1]
        done_valid, done_row, done_word, done_step = done.valid, done.row, done.word, done.step
        again = done_valid & ~done.last
        # an add that re-enters in the next cycle (the tag a stage before its sum)
        again_next = tags[-2].valid & ~tags[-2].last

        # a word taken with adds: its first set held a cycle, then into the adder
        loading, first = Signal(), Signal(32 * lanes)
        load_row, load_word = Signal(row_bits), Signal(word_bits)

        # credits: words taken and not yet read out of the FIFO
        held = Signal(range(FIFO_DEPTH + 1))
        take = Signal()
        m.d.comb += [self.req.ready.eq(~again & ~again_next & ~loading & (held < FIFO_DEPTH)),
                     take.eq(self.req.valid & self.req.ready),
                     self.a_en.eq(take), self.a_row.eq(self.req.payload.row), self.a_addr.eq(self.req.payload.word)]
        m.d.sync += loading.eq(take & (steps != 0))
        with m.If(take):
            m.d.sync += [first.eq(self.a_data), load_row.eq(self.req.payload.row), load_word.eq(self.req.payload.word)]

        # the add entering the adder: the sum going round again, or the held word
        row, word, step = Signal(row_bits), Signal(word_bits), Signal(8)
        source = Signal(32 * lanes)
        m.d.comb += [row.eq(Mux(again, done_row, load_row)), word.eq(Mux(again, done_word, load_word)),
                     step.eq(Mux(again, done_step + 1, 0)), source.eq(Mux(again, Cat(*sums), first))]
        # its operand: a set of the row, a set of PE row 1, or the running total's packed
        # rows h * N lanes up (h = pack / 2, pack / 4, .., 1)
        own, from_buffer = step < own_adds, step < own_adds + self.sets1
        set_ = Signal(2)
        m.d.comb += set_.eq(Mux(own, step + 1, step - own_adds))
        m.d.comb += [self.b_en.eq((again | loading) & from_buffer), self.b_row.eq(Mux(own, row, 1)),
                     self.b_addr.eq(word + Mux(set_ == 0, 0, Mux(set_ == 1, self.n_words, self.n_words << 1)))]
        tree_lanes = Signal(range(2 * lanes))
        tree_step = Signal(8)
        m.d.comb += [tree_step.eq(step - own_adds - self.sets1),
                     tree_lanes.eq(((self.n_cols << self.pack_log2) >> (tree_step + 1))[:len(tree_lanes)])]
        tree_operand = shift_right(m, source, tree_lanes, 32, name="tree_operand")   # source >> 32 * tree_lanes
        m.d.sync += [total.eq(source), operand.eq(Mux(from_buffer, self.b_data, tree_operand)),
                     entered.valid.eq(again | loading), entered.row.eq(row), entered.word.eq(word),
                     entered.step.eq(step), entered.last.eq(step + 1 >= steps)]

        # the FIFO: a finished sum, or a word without adds as it was read
        fifo = Memory(shape=unsigned(32 * lanes), depth=FIFO_DEPTH, init=[])
        m.submodules.fifo = fifo
        write, read = fifo.write_port(), fifo.read_port(domain="comb")
        head, tail = Signal(range(FIFO_DEPTH)), Signal(range(FIFO_DEPTH))
        level = Signal(range(FIFO_DEPTH + 1))
        push, pop = Signal(), Signal()
        m.d.comb += [push.eq((done_valid & ~again) | (take & (steps == 0))),
                     write.en.eq(push), write.addr.eq(tail),
                     write.data.eq(Mux(done_valid, Cat(*sums), self.a_data)),
                     read.addr.eq(head),
                     self.out.valid.eq(level != 0), pop.eq(self.out.valid & self.out.ready),
                     self.out.payload.fp32.eq(read.data)]
        m.d.sync += [tail.eq(tail + push), head.eq(head + pop), level.eq(level + push - pop),
                     held.eq(held + take - pop)]
        for j in range(lanes):
            half = Signal(16, name=f"half_{j}")
            add_cell(m, f"cvt_{j}", "ndp_fp32_to_fp16", self._shared, a=read.data.word_select(j, 32), h=half)
            m.d.comb += self.out.payload.fp16.word_select(j, 16).eq(half)
        return m
