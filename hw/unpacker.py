"""The unpacker: turns a stream of 64-byte beats holding a packed row-major FP16 matrix
into chunks of one row: up to LANES consecutive elements starting at a column that is a
multiple of LANES, realigned so that column `col + j` is lane j.

The matrix starts `offset` elements into the first beat; rows need not be aligned to
beats. It takes exactly `beats` beats from the stream, so the stream is empty after the
last chunk. It holds a window of WINDOW_BEATS beats and emits one *slot* per cycle while
the beats keep up and the consumer takes it (`slot`, a stream: a slot shown waits while its
consumer is not ready). A slot is one chunk, or, with the job's `pair` set
(a stage of one input row, isa/pe_array.py), two: the last chunk of row r with the first
chunk of row r + 1, at every row boundary when a row is several chunks long, else when r
is even (`Plan.pairs_with_next`). The pair's second chunk is the slot's `pair`.

With `strided` (a column tile of a wide plain stage, isa/pe_array.py `tiles`), each row is
a DRAM run of its own: it starts on a beat of its own, `offset` elements into it for row
0 and `stride` more (mod LANES) for each row after, and takes whole beats; the beats come
as `rows` such runs (`beats` is not used). No pairs then, and a row spans at least
three beats (a tile is at least three words), which leaves the row trackers a cycle to
register the next row's offset and beats.
"""
from amaranth import Module, Signal, Cat, Mux
from amaranth.hdl import Assert
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from isa.microarch import UNPACKER_WINDOW_BEATS as WINDOW_BEATS
from .axi import RUN_LINES_BITS as RUN_BEATS_BITS
from .shift import shift_right
from .stream import beat_stream

from isa.descriptor import DIM_BITS
COLS_BITS = 32               # a row's elements: a dim, or a copy's 32 elements per line


def job_layout(lanes):
    """A run: the elements before it in its first beat, its rows and their elements, its
    beats, whether it pairs rows (`pair`), and whether each row is a DRAM run of its own
    `stride` elements (mod LANES) on from the one before (`strided`)."""
    return data.StructLayout({"offset": range(lanes), "rows": DIM_BITS, "cols": COLS_BITS,
                              "beats": RUN_BEATS_BITS, "pair": 1, "strided": 1, "stride": range(lanes)})


def job_stream(lanes):
    """The unpacker's runs: taken the cycle they are shown (it is idle then)."""
    return stream.Signature(job_layout(lanes), always_ready=True)


def slot_layout(lanes):
    """A slot: its first chunk (LANES elements from column `col` of row `row`, `count` of
    them in use), whether it ends its row and (`last`) the run, and its second chunk
    (`pair`: row + 1 from column 0, when `pair.valid`) and whether that ends row + 1."""
    return data.StructLayout({
        "data": 16 * lanes, "row": DIM_BITS, "col": COLS_BITS, "count": range(lanes + 1), "last": 1, "row_end": 1,
        "pair": data.StructLayout({"valid": 1, "data": 16 * lanes, "count": range(lanes + 1), "row_end": 1}),
    })


class Unpacker(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        lanes = cfg.lanes
        super().__init__({
            # a run, started when `job.valid` is high (and taken at once)
            "job": In(job_stream(lanes)),
            "busy": Out(1),
            "src": In(beat_stream(cfg.beat_bits)),
            "slot": Out(stream.Signature(slot_layout(lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, width = self._cfg.lanes, self._cfg.beat_bits
        win = [Signal(width, name=f"win{i}") for i in range(WINDOW_BEATS)]
        held = Signal(range(WINDOW_BEATS + 1))    # beats in the window
        pos = Signal(range(lanes))                # first unconsumed element of win[0]
        taken = Signal(RUN_BEATS_BITS)
        cols, beats, pair = Signal(COLS_BITS), Signal(RUN_BEATS_BITS), Signal()
        row, col = Signal(DIM_BITS), Signal(COLS_BITS)
        # down-counters beside them, so that a slot's size and the row's end are a compare
        # of a register, not an add and a compare: the row's elements left, the rows left;
        # and the run's constants: a pair's second chunk's elements, whether it ends its row,
        # the elements a row has left after it
        left, rows_left = Signal(COLS_BITS), Signal(DIM_BITS)
        pair_count, pair_ends_row, left_after_pair = Signal(range(lanes + 1)), Signal(), Signal(COLS_BITS)
        # the slot's elements and whether it ends its row, registered with `left` (for 1 GHz:
        # the slot's span is then an add of registers), and their values for a row's start
        # (all of `cols`) and for the rest of a row after a pair's second chunk
        count, end_of_row = Signal(range(lanes + 1)), Signal()
        row_count, row_ends = Signal(range(lanes + 1)), Signal()
        after_pair_count, after_pair_ends = Signal(range(lanes + 1)), Signal()

        # rows_left is 1, 2, or more than 1: registered with it
        one_row, two_rows_left, rows_after = Signal(), Signal(), Signal()

        def rows_flags(rows):
            return [one_row.eq(rows == 1), two_rows_left.eq(rows == 2), rows_after.eq(rows > 1)]

        def chunk_of(elems):
            """A slot's elements when `elems` are left in its row, and whether it ends the row."""
            return Mux(elems < lanes, elems, lanes), elems <= lanes
        active = Signal()
        slot = self.slot.payload
        # a slot shown is taken when the consumer is ready (it waits for it otherwise)
        take = Signal()
        m.d.comb += [self.busy.eq(active), slot.row.eq(row), slot.col.eq(col),
                     take.eq(self.slot.valid & self.slot.ready)]

        # the run's constants are worked out the cycle after `start`, from its registered
        # `cols` (`priming`): the job's fields come from the chunk dispatch's run spans, a
        # long path of their own. No slot is lost: the window is empty until then
        priming = Signal()
        job = self.job.payload
        m.d.sync += priming.eq(self.job.valid)
        lane_bits = (lanes - 1).bit_length()
        # strided: the next row's offset on the consuming side (`next_off`) and on the pulling
        # side (`p_next_off`, with that row's beats `p_next_beats`, a cycle behind it); the
        # rows whose beats are still to pull and the pulling row's beats left
        strided, stride = Signal(), Signal(range(lanes))
        next_off, p_next_off = Signal(range(lanes)), Signal(range(lanes))
        p_next_beats, p_left, p_rows = Signal(COLS_BITS), Signal(COLS_BITS), Signal(DIM_BITS)

        def row_beats(off):
            """Beats of a row of `cols` elements starting `off` elements into its first."""
            return ((off + cols[:lane_bits] + lanes - 1) >> lane_bits) + (cols >> lane_bits)
        m.d.sync += p_next_beats.eq(row_beats(p_next_off))
        with m.If(self.job.valid):
            m.d.sync += [active.eq(1), pos.eq(job.offset), cols.eq(job.cols),
                         beats.eq(job.beats), pair.eq(job.pair & ~job.strided), row.eq(0), col.eq(0), taken.eq(0),
                         held.eq(0), left.eq(job.cols), rows_left.eq(job.rows), *rows_flags(job.rows),
                         strided.eq(job.strided), stride.eq(job.stride),
                         # (row 0 takes at least three beats: its count is worked out next cycle)
                         p_rows.eq(job.rows), p_left.eq(3)]
        with m.If(priming):
            m.d.sync += [next_off.eq(pos + stride), p_next_off.eq(pos + stride)]
        with m.If(priming):
            first_pair, first_ends = chunk_of(cols)
            after = cols - first_pair
            m.d.sync += [pair_count.eq(first_pair), pair_ends_row.eq(first_ends),
                         left_after_pair.eq(after),
                         count.eq(first_pair), end_of_row.eq(first_ends),
                         row_count.eq(first_pair), row_ends.eq(first_ends),
                         after_pair_count.eq(chunk_of(after)[0]), after_pair_ends.eq(chunk_of(after)[1])]

        # the pair: the next row's first chunk, at the boundaries isa/pe_array.py pairs
        paired = Signal()
        m.d.comb += paired.eq(pair & end_of_row & rows_after & (~pair_ends_row | ~row[0]))
        need_first = pos + count                  # window elements the slot spans
        need = Signal(range(WINDOW_BEATS * lanes))
        m.d.comb += need.eq(need_first + Mux(paired, pair_count, 0))
        # the chunks: LANES elements from element pos (need_first) of the window, always
        # inside it (pos < LANES, need_first < 2 LANES), by barrel shifters on elements
        window = Cat(*win)
        first_data = shift_right(m, window, pos, 16, 16 * lanes, name="chunk")
        second_data = shift_right(m, window, need_first, 16, 16 * lanes, name="pair_chunk")
        m.d.comb += [slot.count.eq(count), slot.data.eq(first_data),
                     self.slot.valid.eq(active & ~priming & (need <= held * lanes)),
                     slot.pair.valid.eq(paired), slot.pair.count.eq(pair_count),
                     slot.row_end.eq(end_of_row), slot.pair.row_end.eq(pair_ends_row),
                     slot.pair.data.eq(second_data)]
        two_rows = paired & pair_ends_row         # the slot ends this row and the next
        m.d.comb += slot.last.eq(end_of_row & Mux(two_rows, two_rows_left, one_row))

        retire = Signal(range(WINDOW_BEATS))      # beats the slot finishes
        # strided, a row's last chunk finishes the row's last beat, whole
        row_done = strided & end_of_row
        # (strided jobs pair nothing: need is need_first, whose rounding up is an add beside
        # need's rather than after it)
        with m.If(take):
            m.d.comb += retire.eq(Mux(row_done, (need_first + lanes - 1) >> lane_bits, need >> lane_bits))
            m.d.sync += pos.eq(Mux(row_done, next_off, need[:lane_bits]))
            with m.If(row_done):
                m.d.sync += next_off.eq(next_off + stride)
            with m.If(end_of_row):
                into_next = paired & ~pair_ends_row       # the next row is under way
                rows_next = (rows_left - 1 - two_rows)[:DIM_BITS]
                m.d.sync += [row.eq(row + 1 + two_rows), rows_left.eq(rows_next), *rows_flags(rows_next),
                             col.eq(Mux(into_next, pair_count, 0)),
                             left.eq(Mux(into_next, left_after_pair, cols)),
                             count.eq(Mux(into_next, after_pair_count, row_count)),
                             end_of_row.eq(Mux(into_next, after_pair_ends, row_ends))]
            with m.Else():
                rest = left - count
                m.d.sync += [col.eq(col + count), left.eq(rest),
                             count.eq(chunk_of(rest)[0]), end_of_row.eq(chunk_of(rest)[1])]

        # refill: keep the window full while the run has beats left. Room after this cycle's
        # retire: a window not full, or a slot that finishes a beat (for 1 GHz the same test
        # as `held - retire < WINDOW_BEATS`, with the consumer's hold a gate or two from
        # src.ready, which reaches the DRAM reader)
        kept = held - retire
        pull, room = Signal(), Signal()
        more = Mux(strided, p_rows != 0, taken < beats)
        m.d.comb += [room.eq((held != WINDOW_BEATS) | (take & ((need >= lanes) | row_done))),
                     pull.eq(active & room & more & self.src.valid),
                     self.src.ready.eq(pull)]
        # strided: a row's beats pulled, then the next row's
        with m.If(priming):
            # (the pull selects between two counts worked out beside it: it comes late)
            m.d.sync += p_left.eq(Mux(pull, row_beats(pos) - 1, row_beats(pos)))
        with m.Elif(pull & (p_left == 1)):
            m.d.sync += [p_rows.eq(p_rows - 1), p_left.eq(p_next_beats), p_next_off.eq(p_next_off + stride)]
        with m.Elif(pull):
            m.d.sync += p_left.eq(p_left - 1)
        with m.Switch(retire):
            for r in range(1, WINDOW_BEATS):
                with m.Case(r):
                    m.d.sync += [win[i].eq(win[i + r]) for i in range(WINDOW_BEATS - r)]
        with m.If(pull):
            m.d.sync += taken.eq(taken + 1)
            with m.Switch(kept):
                for i in range(WINDOW_BEATS):
                    with m.Case(i):
                        m.d.sync += win[i].eq(self.src.payload.data)
        m.d.sync += held.eq(kept + pull)

        with m.If(take & slot.last):
            m.d.sync += [active.eq(0), held.eq(0)]
        # `job` is never held back: the control unit starts a run only while none is active
        # (one started in a run's last slot would be lost)
        m.d.sync += Assert(~(self.job.valid & active), "unpacker: a job while a run is active")
        return m
