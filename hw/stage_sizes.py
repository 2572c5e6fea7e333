"""A stage's sizes, worked out once per descriptor while the decoder decodes it
(hw/decoder.py instantiates one per stage): `isa/pe_array.py`'s plan arithmetic, which the
stage planner (hw/stage_planner.py) registers at PLAN and the front end's fetcher
(hw/front_end.py) streams the runs by, so that neither computes it in the cycle it is
needed.

Three steps, the inputs (K, N, transposed, and a paged list's log2 page size) held for all
three, `sizes` valid in the third:
    1  the packings (the largest pack with pack * N <= LANES, or a transposed stage's
       tree), the rows and columns the weights stream as, their masks, the words per row
    2  the whole packs' rows and elements (a 20 x 20-bit multiply), the last group's, the
       groups of K, the sets; the pages the whole packs span and the rows of the last
    3  (combinational) the elements of the last page and of the rows before the last group
       in its page: multiplies of the second step's registers
Each step is one multiply deep at most, within the cycle of the FP cells (hw/depth.py).
The arithmetic's reference is sim/stage_planner.py (tests/unit/test_stage_sizes.py).
"""
from amaranth import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from isa.descriptor import PAGE_SHIFT_BITS
from isa.pe_array import ACC_INTERLEAVE
from .stage_plan import packing, trans_packing
from isa.descriptor import DIM_BITS

ELEMS_BITS = 44             # a stage's weight elements (K x N at the dims' limits)


def stage_sizes_layout(lanes):
    lane_bits = (lanes - 1).bit_length()
    log2 = range(lane_bits + 1)
    return data.StructLayout({
        "k": DIM_BITS, "n": DIM_BITS, "trans": 1,
        "pack_log2": log2,              # the plain packing: rows of N a chunk packs
        "run_log2": log2,               # rows of the weights' stream per chunk (plain or transposed)
        "rows_dim": DIM_BITS,           # the weights' stream: rows of `cols_dim` elements
        "cols_dim": DIM_BITS,
        "n_words": DIM_BITS,            # accumulator words per output row
        "t_level": log2,                # a transposed stage's tree level of a row's value
        "t_scalar": 1,                  # ... a row takes several chunks
        "t_fold_adds": range(3),        # ... adds of its sets after its last chunk
        "full_groups": DIM_BITS,        # groups of whole packs
        "main_rows": DIM_BITS,          # ... their rows
        "main_elems": ELEMS_BITS,       # ... their elements: the first run's
        "rest_rows": range(lanes),      # rows of the last group (K mod pack)
        "rest_elems": ELEMS_BITS,       # ... its elements: the second run's
        "groups": DIM_BITS,             # k-groups at the plain packing
        "sets": range(ACC_INTERLEAVE + 1),   # partial sums per word
        "main_pages": DIM_BITS,         # a paged stage: pages the whole packs span
        "rest_page": DIM_BITS,          # ... the page of the last group's first row
        "last_elems": ELEMS_BITS,       # ... elements of the last of them
        "tail_elems": ELEMS_BITS,       # ... elements before the last group in its page
    })


class StageSizes(wiring.Component):
    def __init__(self, cfg):
        self._lanes = cfg.lanes
        super().__init__({
            "k": In(DIM_BITS), "n": In(DIM_BITS), "trans": In(1), "page_shift": In(PAGE_SHIFT_BITS),
            "sizes": Out(stage_sizes_layout(cfg.lanes)),
        })

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        lane_bits = (lanes - 1).bit_length()
        k, n, trans, shift = self.k, self.n, self.trans, self.page_shift
        # steps 1 and 2 registered here; step 3 added on the way out
        out = Signal(stage_sizes_layout(lanes))

        # step 1
        pack_log2 = packing(m, n, lanes, "pack")
        trans_log2, level, scalar, fold_adds = trans_packing(m, k, lanes, "tree")
        run_log2 = Mux(trans, trans_log2, pack_log2)
        run_mask, pack_mask = Signal(lanes), Signal(lanes)
        m.d.sync += [out.k.eq(k), out.n.eq(n), out.trans.eq(trans),
                     out.pack_log2.eq(pack_log2), out.run_log2.eq(run_log2),
                     out.rows_dim.eq(Mux(trans, n, k)), out.cols_dim.eq(Mux(trans, k, n)),
                     out.n_words.eq((n + lanes - 1) >> lane_bits),
                     out.t_level.eq(level), out.t_scalar.eq(scalar), out.t_fold_adds.eq(fold_adds),
                     run_mask.eq((1 << run_log2) - 1), pack_mask.eq((1 << pack_log2) - 1)]

        # step 2, from step 1's registers
        main_rows = Signal(DIM_BITS)
        rest_rows = Signal(range(lanes))
        m.d.comb += [main_rows.eq(out.rows_dim & ~run_mask), rest_rows.eq(out.rows_dim & run_mask)]
        m.d.sync += [out.full_groups.eq(out.rows_dim >> out.run_log2), out.main_rows.eq(main_rows),
                     out.main_elems.eq(main_rows * out.cols_dim), out.rest_rows.eq(rest_rows),
                     out.rest_elems.eq(rest_rows * out.cols_dim),
                     out.groups.eq((out.k + pack_mask) >> out.pack_log2)]
        m.d.sync += out.sets.eq(ACC_INTERLEAVE)
        for s in reversed(range(1, ACC_INTERLEAVE)):
            with m.If(out.n_words * s >= ACC_INTERLEAVE):
                m.d.sync += out.sets.eq(s)
        # a paged stage: 2^shift rows a page (a multiple of the pack); the last page's rows
        # are the rows past the last whole page, or a whole page
        page_mask = (1 << shift) - 1
        tail_rows, last_rows = Signal(DIM_BITS), Signal(DIM_BITS)
        m.d.sync += [out.main_pages.eq((main_rows + page_mask) >> shift), out.rest_page.eq(main_rows >> shift),
                     tail_rows.eq(main_rows & page_mask),
                     last_rows.eq(Mux((main_rows & page_mask) == 0, 1 << shift, main_rows & page_mask))]

        # step 3, combinational from step 2's registers
        m.d.comb += [self.sizes.eq(out), self.sizes.last_elems.eq(last_rows * out.cols_dim),
                     self.sizes.tail_elems.eq(tail_rows * out.cols_dim)]
        return m
