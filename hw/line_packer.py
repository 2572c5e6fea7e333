"""The line packer: turns a stage's result words into the lines the DRAM writer takes.

A group's results are one run of bytes (its rows one after the other, each row's words in
order), starting at any byte of a line. The packer takes the words in order, each a
number of bytes (up to two lines: LANES FP32 values), appends them to a buffer of
BUFFER_LINES lines and hands out each line when it is full, with the strobes of the
bytes it holds; the last line goes out once the word marked `last` is in. The first line
has no strobes below `offset`, so bytes around the run are left as they are.

A word is taken while the buffer has room for it after this cycle's line leaves, so
words of one line each (FP16) go through at one per cycle and FP32 words at one per two.
"""
from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from isa.microarch import PACKER_BUFFER_LINES as BUFFER_LINES
from .shift import mask_below, shift_left
from .stream import LineStream



class LinePacker(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        line = cfg.beat_bytes
        super().__init__({
            "start": In(1), "offset": In(range(line)),      # a new run: its first byte in the line
            "w_valid": In(1), "w_ready": Out(1), "w_data": In(32 * cfg.lanes),
            "w_bytes": In(range(4 * cfg.lanes + 1)), "w_last": In(1),
            "out": Out(LineStream(cfg.beat_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        line, bits = self._cfg.beat_bytes, self._cfg.beat_bits
        size = BUFFER_LINES * line
        data, strb = Signal(BUFFER_LINES * bits), Signal(size)
        fill = Signal(range(size + 1))                       # bytes up to the last one held
        closing = Signal()                                   # the last word is in

        # registered with `fill` (for 1 GHz: a word's bytes against the room is the only
        # compare between the word's source and w_ready, which reaches the unpacker's hold):
        # whether a whole line is held, the room left, and the room once a line leaves
        full_line = Signal()
        room, room_after_line = Signal.like(fill, init=size), Signal.like(fill, init=size)

        def set_fill(value):
            return [fill.eq(value), full_line.eq(value >= line), room.eq(size - value),
                    room_after_line.eq(size - Mux(value >= line, value - line, 0))]
        m.d.comb += [self.out.data.eq(data[:bits]), self.out.strb.eq(strb[:line]),
                     self.out.valid.eq(full_line | (closing & (fill != 0)))]
        taken = self.out.valid & self.out.ready
        after = Signal.like(fill)                            # bytes held once this cycle's line left
        m.d.comb += after.eq(Mux(taken, Mux(full_line, fill - line, 0), fill))
        m.d.comb += self.w_ready.eq(~closing & (self.w_bytes <= Mux(taken, room_after_line, room)))
        take = self.w_valid & self.w_ready

        kept_data = Mux(taken, data[bits:], data)
        kept_strb = Mux(taken, strb[line:], strb)
        # the word's bytes placed at byte `after` of the buffer, and their strobes (bytes
        # after .. after + w_bytes - 1), by hw/shift.py (a plain shift of the 3-line buffer
        # is a netlist quadratic in its width). The byte offsets are always even (the
        # results are FP16 or FP32 and a run starts at an element); the shifter works on
        # bytes anyway, so any offset is right, at no cost: as many 16-way stages either way
        word = self.w_data & mask_below(m, self.w_bytes, 4 * self._cfg.lanes, 8, name="word_mask")
        placed = shift_left(m, word, after, 8, BUFFER_LINES * bits, name="placed")
        placed_strb = (mask_below(m, after + self.w_bytes, size, name="strb_end") &
                       ~mask_below(m, after, size, name="strb_start"))
        with m.If(self.start):
            m.d.sync += [data.eq(0), strb.eq(0), *set_fill(self.offset), closing.eq(0)]
        with m.Elif(take):
            m.d.sync += [data.eq(kept_data | placed), strb.eq(kept_strb | placed_strb),
                         *set_fill(after + self.w_bytes), closing.eq(self.w_last)]
        with m.Else():
            m.d.sync += [data.eq(kept_data), strb.eq(kept_strb), *set_fill(after)]
        return m
