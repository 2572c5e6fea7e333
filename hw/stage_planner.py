"""The stage planner: the plan of one stage (a weight matrix through the PE array), taken
in the control unit's PLAN state and held while the stage's chunks and its readout use it.

From the stage's K, N and transposition (hw/stage_plan.py stage_operand) it works out
`isa/pe_array.py`'s plan: the packing, the accumulator words per row and their sets, the
sets each PE row receives (a one-row stage splits its k-groups over two PE rows), and how
the weights stream as runs of the unpacker: `full_groups` groups of 2^run_log2 rows of
`cols_dim` elements, then `rest_rows` rows (K mod pack) as a run of its own. A
transposed stage's tree (level, several chunks a row, adds after the last) comes with it.

The compute unit's mode (plain, or a transposed tree's) must hold while a chunk is in its
pipeline: a stage in another mode is refused (`ready` low) until the chunk dispatch says
the pipeline holds no chunk's control (`pipe_busy` low). `load` with `ready` registers
the plan; `has_full` (combinational, from the inputs) says whether the stage has a run of
whole packs, so the control unit knows which run starts first.
"""
from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from isa.pe_array import ACC_INTERLEAVE, SPLIT_ROWS
from .stage_plan import packing, stage_runs, trans_packing, weight_elems
from .unpacker import DIM_BITS

ELEMS_BITS = 44             # a stage's weight elements (K x N at the dims' limits)


def plan_ports(lanes):
    """The registered plan's members (the chunk dispatch and the readout take them)."""
    lane_bits = (lanes - 1).bit_length()
    return {
        "pack_log2": range(lane_bits + 1),      # the fold unit's packing (0 transposed)
        "n_words": DIM_BITS,                    # accumulator words per output row
        "sets": range(ACC_INTERLEAVE + 1),      # partial sums per word
        "run_log2": range(lane_bits + 1),       # rows of the weights' stream per chunk
        "cols_dim": DIM_BITS,                   # elements of one such row
        "full_groups": DIM_BITS,                # groups of whole packs
        "rest_rows": range(lanes),              # rows of the last group
        "main_elems": ELEMS_BITS,               # elements of the whole packs' run
        "trans": 1,                             # the compute unit's mode: transposed
        "t_level": range(lane_bits + 1),        # ... its tree level of a row's value
        "t_scalar": 1,                          # ... a row takes several chunks
        "t_fold_adds": range(3),                # ... adds of its sets after its last chunk
    }


class StagePlanner(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        ports = {
            # the stage: its K, N and transposition, and whether it splits over two PE rows
            "k": In(DIM_BITS), "n": In(DIM_BITS), "trans_in": In(1), "split": In(1),
            "load": In(1), "pipe_busy": In(1),
            "ready": Out(1), "has_full": Out(1),
            "sets_used": Out(range(ACC_INTERLEAVE + 1)).array(SPLIT_ROWS),
        }
        ports.update({name: Out(shape) for name, shape in plan_ports(cfg.lanes).items()})
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        lanes = self._cfg.lanes
        lane_bits = (lanes - 1).bit_length()
        k, n, trans = self.k, self.n, self.trans_in
        rows_dim, cols_dim, run_log2 = stage_runs(m, k, n, trans, lanes, "plan")
        _, level, scalar, fold_adds = trans_packing(m, k, lanes, "plan_tree")
        pack_log2 = packing(m, n, lanes, "plan_pack_log2")
        n_words, sets = Signal.like(self.n_words), Signal.like(self.sets)
        m.d.comb += [n_words.eq((n + lanes - 1) >> lane_bits), sets.eq(ACC_INTERLEAVE)]
        for s in reversed(range(1, ACC_INTERLEAVE)):
            with m.If(n_words * s >= ACC_INTERLEAVE):
                m.d.comb += sets.eq(s)
        groups = Signal(DIM_BITS)
        m.d.comb += groups.eq((k + (1 << pack_log2) - 1) >> pack_log2)
        # the k-groups each PE row receives: all on row 0, or with the split g mod 2 = q
        row_groups = [Signal(DIM_BITS, name=f"row_groups{q}") for q in range(SPLIT_ROWS)]
        m.d.comb += [row_groups[0].eq(Mux(self.split, (groups + 1) >> 1, groups)),
                     row_groups[1].eq(Mux(self.split, groups >> 1, 0))]

        # the next stage keeps the pipeline's mode, or waits for it to empty
        mode_changes = Signal()
        m.d.comb += [mode_changes.eq((trans != self.trans) | (trans & ((level != self.t_level) |
                                                                       (scalar != self.t_scalar) |
                                                                       (fold_adds != self.t_fold_adds)))),
                     self.ready.eq(~(self.pipe_busy & mode_changes)),
                     self.has_full.eq((rows_dim >> run_log2) != 0)]
        with m.If(self.load & self.ready):
            m.d.sync += [self.pack_log2.eq(Mux(trans, 0, pack_log2)), self.n_words.eq(n_words),
                         self.sets.eq(sets), self.run_log2.eq(run_log2), self.cols_dim.eq(cols_dim),
                         self.full_groups.eq(rows_dim >> run_log2),
                         self.rest_rows.eq(rows_dim & ((1 << run_log2) - 1)),
                         self.main_elems.eq(weight_elems(rows_dim, cols_dim, run_log2)[0]),
                         self.t_level.eq(level), self.t_scalar.eq(scalar), self.t_fold_adds.eq(fold_adds),
                         self.trans.eq(trans)]
            for q in range(SPLIT_ROWS):
                used = Mux(row_groups[q] < sets, row_groups[q], sets)
                m.d.sync += self.sets_used[q].eq(Mux(trans, int(q == 0), used))
        return m
