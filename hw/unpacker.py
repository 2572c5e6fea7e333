"""The unpacker: turns a stream of 64-byte beats holding a packed row-major FP16 matrix
into chunks of one row: up to LANES consecutive elements starting at a column that is a
multiple of LANES, realigned so that column `col + j` is lane j.

The matrix starts `offset` elements into the first beat; rows need not be aligned to
beats. It takes exactly `beats` beats from the stream, so the stream is empty after the
last chunk. One chunk per cycle while the beats keep up; the consumer always accepts.
"""
from amaranth import Module, Signal, Cat, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .dram_reader import RUN_BEATS_BITS
from .stream import BeatStream

DIM_BITS = 20


class Unpacker(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        lanes = cfg.lanes
        super().__init__({
            "start": In(1), "offset": In(range(lanes)), "rows": In(DIM_BITS), "cols": In(DIM_BITS),
            "beats": In(RUN_BEATS_BITS),
            "busy": Out(1),
            "src": In(BeatStream(cfg.data_bits)),
            # the chunk
            "valid": Out(1), "data": Out(16 * lanes),
            "row": Out(DIM_BITS), "col": Out(DIM_BITS), "count": Out(range(lanes + 1)), "last": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, width = self._cfg.lanes, self._cfg.data_bits
        win0, win1 = Signal(width), Signal(width)
        held = Signal(range(3))                   # beats in the window
        pos = Signal(range(lanes))                # first unconsumed element of win0
        taken = Signal(RUN_BEATS_BITS)
        rows, cols, beats = Signal(DIM_BITS), Signal(DIM_BITS), Signal(RUN_BEATS_BITS)
        row, col = Signal(DIM_BITS), Signal(DIM_BITS)
        active = Signal()
        m.d.comb += [self.busy.eq(active), self.row.eq(row), self.col.eq(col)]

        with m.If(self.start):
            m.d.sync += [active.eq(1), pos.eq(self.offset), rows.eq(self.rows), cols.eq(self.cols),
                         beats.eq(self.beats), row.eq(0), col.eq(0), taken.eq(0), held.eq(0)]

        left_in_row = cols - col
        count = Signal(range(lanes + 1))
        m.d.comb += count.eq(Mux(left_in_row < lanes, left_in_row, lanes))
        need = pos + count                        # elements of the window this chunk spans
        m.d.comb += [self.count.eq(count),
                     self.data.eq(Cat(win0, win1).bit_select(pos * 16, 16 * lanes)),
                     self.valid.eq(active & (need <= held * lanes))]
        end_of_row = col + count == cols
        m.d.comb += self.last.eq(end_of_row & (row == rows - 1))

        retire = Signal()
        with m.If(self.valid):
            m.d.comb += retire.eq(need >= lanes)
            m.d.sync += pos.eq(need[:len(pos)])   # need - lanes when a beat retires
            with m.If(end_of_row):
                m.d.sync += [col.eq(0), row.eq(row + 1)]
            with m.Else():
                m.d.sync += col.eq(col + count)

        # refill: keep two beats in the window while the run has beats left
        kept = held - retire
        pull = Signal()
        m.d.comb += [pull.eq(active & (kept < 2) & (taken < beats) & self.src.valid),
                     self.src.ready.eq(pull)]
        with m.If(retire):
            m.d.sync += win0.eq(win1)
        with m.If(pull):
            m.d.sync += taken.eq(taken + 1)
            with m.If(kept == 0):
                m.d.sync += win0.eq(self.src.data)
            with m.Else():
                m.d.sync += win1.eq(self.src.data)
        m.d.sync += held.eq(kept + pull)

        with m.If(self.valid & self.last):
            m.d.sync += [active.eq(0), held.eq(0)]
        return m
