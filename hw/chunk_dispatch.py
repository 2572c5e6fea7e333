"""The chunk dispatch: a stage's weight runs through the unpacker, and each slot the
unpacker shows into the PE array (isa/pe_array.py).

`start` (with `rest` low: the k-groups of whole packs, `full_groups` rows of 2^run_log2 x
`cols_dim` elements; with `rest`: the last group, `rest_rows` x `cols_dim` elements where
the whole packs end) gives the unpacker's run on `job`, for the control unit to start it.
While `dispatch` is high each slot goes to the PE rows (`pe`, a stream each) on the stage's
`route` (isa/pe_array.py Route): its chunk of k-group g to PE row g mod 2 with the split
(one input row), and a paired chunk (group g + 1) to the other row; else to every PE row,
or to one. A chunk adds into its PE row's current set of partial sums (`first` while the
row has seen fewer groups than there are sets: the set starts from +0); a group that ends
moves its row to the next set, round the stage's `sets`. A chunk carries `last` from the
row's k-group `last_from` on (the last group of each set: its sums go into the output
buffer, isa/pe_array.py).

A `tiled` stage (isa/pe_array.py: more words than ACC_SLOTS) streams its weights in column
tiles, a run of the unpacker each (strided: a row of the tile, `cols_dim` elements after
the row before, is a DRAM run of its own); `tile_next` (at a tile's last slot, when
`more_tiles`) moves to the next tile: its words' accumulator addresses from the tile's
first word, the k-groups and sets from the start again. Transposed, lane j multiplies
x[col + j] and the chunk carries (`t_chunk`) its output, its set in the row (chunk mod 3, from a
counter that restarts at each row's first chunk: a row's chunks come in order) and the
row's end.

Two counters follow the pipeline: `drain`, the cycles until the last chunk's sums are
written (they are written in the cycle it is 1: the readout starts its fold then), and
`pipe_busy`, high while a chunk's control is in the compute unit (a transposed one's runs
past its write: isa/pe_array.py trans_line_cycles), so the planner holds a stage in
another mode back.
"""
from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from isa.microarch import ADD_CYCLES, PIPE_DEPTH, PRODUCT_CYCLES
from isa.pe_array import ACC_INTERLEAVE, SPLIT_ROWS, Route, trans_line_cycles
from isa.descriptor import DIM_BITS
from .stage_planner import plan_layout
from .stage_plan import run_span, tile_span
from .unpacker import job_layout, slot_layout


def chunk_layout(lanes, acc_depth):
    """One chunk into a PE row (hw/compute_unit.py), its stream's `valid` the row's mac: the
    first element of its k-group, its set's accumulator word, its active lanes, its
    weights, whether its set starts from +0 (`first`), and `last`: its sums go into the
    output buffer."""
    return data.StructLayout({"k_base": DIM_BITS, "acc_addr": range(acc_depth), "active": range(lanes + 1),
                              "w_data": 16 * lanes, "first": 1, "last": 1})


def chunk_stream(lanes, acc_depth):
    """A PE row's chunks: one a cycle at most, never held back."""
    return stream.Signature(chunk_layout(lanes, acc_depth), always_ready=True)


def trans_chunk_layout():
    """What a transposed chunk (on PE row 0) carries beside it: its row's first output, its
    set in the row, whether it is its set's first, and whether it ends its row."""
    return data.StructLayout({"out": DIM_BITS, "set": range(ACC_INTERLEAVE), "first": 1, "row_end": 1})


class ChunkDispatch(wiring.Component):
    def __init__(self, cfg, acc_depth):
        self._cfg = cfg
        lanes = cfg.lanes
        ports = {
            # the stage's weights (a line's address) and the PE rows its chunks enter
            "addr": In(64), "route": In(Route),
            # a new plan: every PE row back to set 0, k-group 0; the next column tile (the
            # same, from the tile's first word), and whether there is one
            "restart": In(1), "tile_next": In(1), "more_tiles": Out(1),
            # a run: its unpacker job, shown while `start` is high
            "start": In(1), "rest": In(1),
            "job": Out(job_layout(lanes)),
            # the unpacker's slots (hw/unpacker.py), each sent on as it is shown while
            # `dispatch` is high
            "dispatch": In(1),
            "slot": In(stream.Signature(slot_layout(lanes), always_ready=True)),
            # the run's last slot taken
            "run_done": Out(1),
            # the plan (hw/stage_planner.py)
            "plan": In(plan_layout(lanes)),
            # the two PE rows' chunks, and what a transposed chunk carries beside it
            "pe": Out(chunk_stream(lanes, acc_depth)).array(SPLIT_ROWS),
            "t_chunk": Out(trans_chunk_layout()),
            "drain": Out(range(trans_line_cycles(lanes) + 1)), "pipe_busy": Out(1),
        }
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        lanes, lane_bits = cfg.lanes, (cfg.lanes - 1).bit_length()
        plan, job = self.plan, self.job

        # ---- the runs: the whole packs from the weights' first element, then the last group
        main_cols = (plan.cols_dim << plan.run_log2)[:DIM_BITS]
        rest_cols = (plan.rest_rows * plan.cols_dim)[:DIM_BITS]
        _, _, main_offset, main_beats = run_span(m, self.addr, 0, plan.main_elems, cfg, "main_span")
        _, _, rest_offset, rest_beats = run_span(m, self.addr, plan.main_elems, rest_cols, cfg, "rest_span")
        # a tiled stage's column tile: its first word (`tile_base`), the words and elements
        # of each row left from it on (tile 0's from the plan: the planner registers it in
        # the cycle of `restart`)
        first_tile = Signal()
        tile_base, words_left, elems_left = Signal(DIM_BITS), Signal(DIM_BITS), Signal(DIM_BITS)
        left_now = Mux(first_tile, plan.n_words, words_left)
        elems_now = Mux(first_tile, plan.cols_dim, elems_left)
        tile_words, tile_cols, more = tile_span(left_now, elems_now, lanes)
        m.d.comb += self.more_tiles.eq(plan.tiled & more)
        with m.If(self.restart):
            m.d.sync += [first_tile.eq(1), tile_base.eq(0)]
        with m.If(self.tile_next):
            m.d.sync += [first_tile.eq(0), tile_base.eq(tile_base + tile_words),
                         words_left.eq(left_now - tile_words), elems_left.eq(elems_now - (tile_words << lane_bits))]
        # the output the run's rows start at (transposed)
        t_out_base = Signal(DIM_BITS)
        with m.If(self.start):
            # (a tile's rows all start at the main run's offset: its first word is whole LANES on)
            m.d.comb += [job.offset.eq(Mux(self.rest, rest_offset, main_offset)),
                         job.rows.eq(Mux(self.rest, 1, plan.full_groups)),
                         job.cols.eq(Mux(self.rest, rest_cols, Mux(plan.tiled, tile_cols, main_cols))),
                         job.beats.eq(Mux(self.rest, rest_beats, main_beats)),
                         job.pair.eq(~self.rest & (self.route == Route.SPLIT) & ~plan.tiled),
                         job.strided.eq(~self.rest & plan.tiled), job.stride.eq(plan.cols_dim[:lane_bits])]
            m.d.sync += t_out_base.eq(Mux(self.rest, plan.full_groups << plan.run_log2, 0))

        # ---- progress: the first element of the slot's k-group; per PE row, the k-groups
        # seen (up to the sets) and its set's first accumulator word
        k_base = Signal(DIM_BITS)
        groups_seen = [Signal(range(ACC_INTERLEAVE + 1), name=f"groups_seen{q}") for q in range(SPLIT_ROWS)]
        set_index = [Signal(range(ACC_INTERLEAVE), name=f"set_index{q}") for q in range(SPLIT_ROWS)]
        set_base = [Signal(DIM_BITS, name=f"set_base{q}") for q in range(SPLIT_ROWS)]
        # per PE row, its k-groups that ended (not bounded by the sets: for `last`)
        row_seen = [Signal(DIM_BITS, name=f"row_seen{q}") for q in range(SPLIT_ROWS)]
        # transposed: the set (chunk mod ACC_INTERLEAVE) of the slot's chunk in its row
        t_set = Signal(range(ACC_INTERLEAVE))
        with m.If(self.restart | self.start):
            m.d.sync += t_set.eq(0)

        # cycles until the last chunk's sums are written (set by each chunk, counting down
        # after the stage's last), and until no chunk's control is left in the compute unit
        drain = Signal.like(self.drain)
        pipe_busy = Signal.like(self.drain)
        with m.If(drain != 0):
            m.d.sync += drain.eq(drain - 1)
        with m.If(pipe_busy != 0):
            m.d.sync += pipe_busy.eq(pipe_busy - 1)
        m.d.comb += [self.drain.eq(drain), self.pipe_busy.eq(pipe_busy != 0)]

        with m.If(self.dispatch):
            self._dispatch(m, lanes, lane_bits, t_out_base, k_base, groups_seen, set_index, set_base,
                           row_seen, tile_base, drain, pipe_busy, t_set)
        # (after the dispatch's updates: a tile's last slot's are overridden by tile_next's)
        with m.If(self.restart | self.tile_next):
            m.d.sync += k_base.eq(0)
            m.d.sync += [s.eq(0) for s in groups_seen + set_index + row_seen]
            m.d.sync += [s.eq(Mux(self.restart, 0, tile_base + tile_words)) for s in set_base]
        return m

    def _dispatch(self, m, lanes, lane_bits, t_out_base, k_base, groups_seen, set_index, set_base,
                  row_seen, tile_base, drain, pipe_busy, t_set):
        """The slot to the PE rows: its first chunk (k-group g, on PE row `parity`, or on every
        row) and, paired, the first chunk of group g + 1 (the other row)."""
        plan, slot, valid = self.plan, self.slot.payload, self.slot.valid
        trans, pack_log2, sets = plan.mode.trans, plan.pack_log2, plan.sets
        pair_valid = valid & slot.pair.valid
        # the PE row of the slot's k-group g = k_base / pack: g mod 2 with the split, else
        # the route's (row 0 for every row)
        route = self.route
        parity = Mux(route == Route.SPLIT, (k_base >> pack_log2)[0], route == Route.ROW1)
        # a chunk that ends its k-group: the unpacker's registered row-end flags (comparing
        # col + count with the run's elements here was the block's longest path)
        first_ends = valid & slot.row_end
        pair_ends = pair_valid & slot.pair.row_end
        first_chunk = (valid, k_base, slot.col[lane_bits:], slot.count, slot.data, first_ends)
        pair_chunk = (pair_valid, k_base + (1 << pack_log2), 0, slot.pair.count, slot.pair.data, pair_ends)
        for q in range(SPLIT_ROWS):
            # PE row q takes the chunk of its parity (on every row: the first)
            takes_first = (parity == q) | (route == Route.ALL)
            valid_q, base_q, word_q, count_q, data_q, ends_q = (
                Mux(takes_first, a, b) for a, b in zip(first_chunk, pair_chunk))
            # transposed: lane j multiplies x[col + j] (col a multiple of LANES; 0 with packing)
            chunk_q = self.pe[q].payload
            m.d.comb += [self.pe[q].valid.eq(valid_q),
                         chunk_q.k_base.eq(Mux(trans, slot.col, base_q)),
                         chunk_q.acc_addr.eq(set_base[q] + word_q),
                         chunk_q.active.eq(count_q), chunk_q.w_data.eq(data_q),
                         chunk_q.first.eq(groups_seen[q] < sets),
                         chunk_q.last.eq(row_seen[q] >= plan[f"last_from{q}"])]
            # a group that ends moves its PE row to the next set
            with m.If(ends_q):
                m.d.sync += row_seen[q].eq(row_seen[q] + 1)
                with m.If(groups_seen[q] < sets):
                    m.d.sync += groups_seen[q].eq(groups_seen[q] + 1)
                with m.If(set_index[q] + 1 == sets):
                    m.d.sync += [set_index[q].eq(0), set_base[q].eq(tile_base)]
                with m.Else():
                    m.d.sync += [set_index[q].eq(set_index[q] + 1), set_base[q].eq(set_base[q] + plan.n_words)]
        # k-groups that end move k_base on (and so the PE row, with the split): one or two
        # packs added beside the slot's flags, which come late (the unpacker's valid, held by
        # the line packer's room); two as one more on one (two adds of k_base would be one
        # adder with the flags choosing its operand)
        one_pack = k_base + (1 << pack_log2)
        two_packs = one_pack + (1 << pack_log2)
        with m.If(first_ends & pair_ends):
            m.d.sync += k_base.eq(two_packs)
        with m.Elif(first_ends | pair_ends):
            m.d.sync += k_base.eq(one_pack)
        # transposed: the cycle a chunk's row value is written (isa/pe_array.py write_cycle)
        mode = plan.mode
        t_write = Mux(mode.t_scalar, PRODUCT_CYCLES + ADD_CYCLES * (lane_bits + 1 + mode.t_fold_adds),
                      PRODUCT_CYCLES + ADD_CYCLES * mode.t_level)
        m.d.sync += [drain.eq(Mux(trans, t_write, PIPE_DEPTH - 1)),
                     pipe_busy.eq(Mux(trans, trans_line_cycles(lanes), PIPE_DEPTH - 1))]
        # (a counter rather than the word index mod 3, which would synthesize as a divider)
        with m.If(valid):
            m.d.sync += t_set.eq(Mux(first_ends | (t_set == ACC_INTERLEAVE - 1), 0, t_set + 1))
        chunk = slot.col[lane_bits:]
        m.d.comb += [self.t_chunk.out.eq(t_out_base + (slot.row << plan.run_log2)), self.t_chunk.set.eq(t_set),
                     self.t_chunk.first.eq(chunk < ACC_INTERLEAVE), self.t_chunk.row_end.eq(first_ends),
                     self.run_done.eq(valid & slot.last)]
