"""The stage planner: the plan of one stage (a weight matrix through the PE array), taken
in the control unit's PLAN state and held while the stage's chunks and its readout use it.

The stage's sizes come worked out once per descriptor (hw/stage_sizes.py, in the
decoder: `isa/pe_array.py`'s plan); the planner registers the ones the stage uses: the
packing, the accumulator words per row and their sets, the sets each PE row receives
(by the stage's `route`: a one-row stage splits its k-groups over two PE rows,
isa/pe_array.py Route), and how the weights stream as runs
of the unpacker: `full_groups` groups of 2^run_log2 rows of `cols_dim` elements, then
`rest_rows` rows (K mod pack) as a run of its own. A transposed stage's tree (level,
several chunks a row, adds after the last) comes with it.

The compute unit's mode (plain, or a transposed tree's) must hold while a chunk is in its
pipeline: a stage in another mode is refused (`stage.ready` low) until the chunk dispatch
says the pipeline holds no chunk's control (`pipe_busy` low). A plain stage of more words
than ACC_SLOTS is `tiled`: its weights stream in column tiles (isa/pe_array.py). A stage
taken (`stage.valid` with `stage.ready`) registers the plan (`plan`); `has_full`
(combinational, from the sizes) says whether the stage has a run of whole packs, so the
control unit knows which run starts first.
"""
from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from isa.pe_array import ACC_INTERLEAVE, ACC_SLOTS, SPLIT_ROWS, Route
from isa.descriptor import DIM_BITS
from .stage_sizes import ELEMS_BITS, stage_sizes_layout


def mode_layout(lanes):
    """The compute unit's mode, which a chunk's pipeline must hold: plain or transposed,
    and a transposed stage's tree."""
    lane_bits = (lanes - 1).bit_length()
    return data.StructLayout({
        "trans": 1,                             # transposed
        "t_level": range(lane_bits + 1),        # its tree level of a row's value
        "t_scalar": 1,                          # a row takes several chunks
        "t_fold_adds": range(3),                # adds of its sets after its last chunk
    })


def plan_layout(lanes):
    """The registered plan (the chunk dispatch, the compute unit and the readout take it)."""
    lane_bits = (lanes - 1).bit_length()
    return data.StructLayout({
        "pack_log2": range(lane_bits + 1),      # the fold unit's packing (0 transposed)
        "n_words": DIM_BITS,                    # accumulator words per output row
        "sets": range(ACC_INTERLEAVE + 1),      # partial sums per word
        "run_log2": range(lane_bits + 1),       # rows of the weights' stream per chunk
        "cols_dim": DIM_BITS,                   # elements of one such row
        "full_groups": DIM_BITS,                # groups of whole packs
        "rest_rows": range(lanes),              # rows of the last group
        "main_elems": ELEMS_BITS,               # elements of the whole packs' run
        "mode": mode_layout(lanes),
        # W in column tiles (isa/pe_array.py: more words than ACC_SLOTS), and per PE row
        # its first k-group that is the last of its set (Plan.last_from)
        "tiled": 1,
        **{f"last_from{q}": DIM_BITS for q in range(SPLIT_ROWS)},
    })


class StagePlanner(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({
            # the stage's sizes, taken into the plan when the planner is ready (a stage in
            # another mode waits for the pipeline to empty); the PE rows its chunks enter
            "stage": In(stream.Signature(stage_sizes_layout(cfg.lanes))), "route": In(Route), "pipe_busy": In(1),
            "has_full": Out(1),
            "plan": Out(plan_layout(cfg.lanes)),
            # the sets the fold adds for an output: those of its PE row that received a
            # k-group, and with the split PE row 1's
            "sets_used": Out(range(ACC_INTERLEAVE + 1)).array(SPLIT_ROWS),
        })

    def elaborate(self, platform):
        m = Module()
        size, plan, mode = self.stage.payload, self.plan, self.plan.mode
        trans, level, scalar, fold_adds = size.trans, size.t_level, size.t_scalar, size.t_fold_adds
        # the k-groups each PE row receives (isa/pe_array.py Route.row_groups): with the split
        # g mod 2 = q, else all or none
        groups, route = size.groups, self.route
        split = route == Route.SPLIT
        row_groups = [Signal(DIM_BITS, name=f"row_groups{q}") for q in range(SPLIT_ROWS)]
        m.d.comb += [row_groups[0].eq(Mux(split, (groups + 1) >> 1, Mux(route == Route.ROW1, 0, groups))),
                     row_groups[1].eq(Mux(split, groups >> 1, Mux(route == Route.ROW0, 0, groups)))]
        # the fold's own sets are those of the stage's row (row 1's alone on ROW1)
        own_groups = Mux(route == Route.ROW1, row_groups[1], row_groups[0])

        # the next stage keeps the pipeline's mode, or waits for it to empty
        mode_changes = Signal()
        m.d.comb += [mode_changes.eq((trans != mode.trans) | (trans & ((level != mode.t_level) |
                                                                       (scalar != mode.t_scalar) |
                                                                       (fold_adds != mode.t_fold_adds)))),
                     self.stage.ready.eq(~(self.pipe_busy & mode_changes)),
                     self.has_full.eq(size.full_groups != 0)]
        with m.If(self.stage.valid & self.stage.ready):
            m.d.sync += [plan.pack_log2.eq(Mux(trans, 0, size.pack_log2)), plan.n_words.eq(size.n_words),
                         plan.sets.eq(size.sets), plan.run_log2.eq(size.run_log2), plan.cols_dim.eq(size.cols_dim),
                         plan.full_groups.eq(size.full_groups), plan.rest_rows.eq(size.rest_rows),
                         plan.main_elems.eq(size.main_elems),
                         mode.t_level.eq(level), mode.t_scalar.eq(scalar), mode.t_fold_adds.eq(fold_adds),
                         mode.trans.eq(trans)]
            # (sets x n_words > ACC_SLOTS is n_words > ACC_SLOTS: one word takes 3 sets, two
            # take 2, more take 1, and ACC_SLOTS >= 6)
            m.d.sync += plan.tiled.eq(~trans & (size.n_words > ACC_SLOTS))
            own_used = Mux(own_groups < size.sets, own_groups, size.sets)
            row1_used = Mux(row_groups[1] < size.sets, row_groups[1], size.sets)
            m.d.sync += [self.sets_used[0].eq(Mux(trans, 1, own_used)),
                         self.sets_used[1].eq(Mux(trans | ~split, 0, row1_used))]
            for q in range(SPLIT_ROWS):
                m.d.sync += plan[f"last_from{q}"].eq(Mux(row_groups[q] > size.sets, row_groups[q] - size.sets, 0))
        return m
