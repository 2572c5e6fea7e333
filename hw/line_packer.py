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
from amaranth.lib import stream, wiring
from amaranth.lib.data import StructLayout
from amaranth.lib.wiring import In, Out

from isa.microarch import PACKER_BUFFER_LINES as BUFFER_LINES
from .shift import mask_below, shift_left, shift_left_muxes
from .stream import line_stream


def word_layout(cfg):
    """A word of results: LANES FP32 values, the bytes of it that count, and whether it is
    the run's last."""
    return StructLayout({"data": 32 * cfg.lanes, "bytes": range(4 * cfg.lanes + 1), "last": 1})


def packer_muxes(lanes):
    """Two-input multiplexers of the packer's shifters (a word's bytes and their strobes
    placed by the byte in the line), each stage's choices counted as hw/shift.py does:
    area/blocks.py's model of how the block grows with LANES (a stage's choice widens with
    the line's offset bits, so faster than LANES)."""
    line, word_bytes = 2 * lanes, 4 * lanes          # a beat: LANES FP16; a word: LANES FP32
    window, offset_bits = _window(line, word_bytes), (line - 1).bit_length()
    return (shift_left_muxes(8 * word_bytes, offset_bits, 8, 8 * window)
            + shift_left_muxes(word_bytes, offset_bits, 1, window))


def _window(line, word_bytes):
    """Bytes a word can reach from its byte in the line on."""
    return min(BUFFER_LINES * line, line - 1 + word_bytes)


class LinePacker(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        line = cfg.beat_bytes
        super().__init__({
            "start": In(1), "offset": In(range(line)),      # a new run: its first byte in the line
            "w": In(stream.Signature(word_layout(cfg))),
            "out": Out(line_stream(cfg.beat_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        line, bits = self._cfg.beat_bytes, self._cfg.beat_bits
        size = BUFFER_LINES * line
        data, strb = Signal(BUFFER_LINES * bits), Signal(size)
        fill = Signal(range(size + 1))                       # bytes up to the last one held
        closing = Signal()                                   # the last word is in

        # registered with `fill` (for 1 GHz: a word's bytes against the room is the only
        # compare between the word's source and w.ready, which reaches the unpacker's slot ready):
        # whether a whole line is held, the room left, and the room once a line leaves
        full_line = Signal()
        room, room_after_line = Signal.like(fill, init=size), Signal.like(fill, init=size)

        def set_fill(value):
            return [fill.eq(value), full_line.eq(value >= line), room.eq(size - value),
                    room_after_line.eq(size - Mux(value >= line, value - line, 0))]
        m.d.comb += [self.out.payload.data.eq(data[:bits]), self.out.payload.strb.eq(strb[:line]),
                     self.out.valid.eq(full_line | (closing & (fill != 0)))]
        taken = self.out.valid & self.out.ready
        after = Signal.like(fill)                            # bytes held once this cycle's line left
        m.d.comb += after.eq(Mux(taken, Mux(full_line, fill - line, 0), fill))
        # (both compares beside `taken`, which comes late: the DRAM writer's ready)
        fits, fits_after_line = Signal(), Signal()
        w = self.w.payload
        m.d.comb += [fits.eq(w.bytes <= room), fits_after_line.eq(w.bytes <= room_after_line),
                     self.w.ready.eq(~closing & Mux(taken, fits_after_line, fits))]
        take = self.w.valid & self.w.ready

        kept_data = Mux(taken, data[bits:], data)
        kept_strb = Mux(taken, strb[line:], strb)
        # the word's bytes placed at byte `after` of the buffer, and their strobes (bytes
        # after .. after + w.bytes - 1), by hw/shift.py (a plain shift of the 3-line buffer
        # is a netlist quadratic in its width). The byte offsets are always even (the
        # results are FP16 or FP32 and a run starts at an element); the shifter works on
        # bytes anyway, so any offset is right, at no cost: as many 16-way stages either way.
        # A word taken goes to `fill`, or a line lower when a line leaves (taken: the DRAM
        # writer's ready, late); the byte within the line is fill's either way, so the
        # shifters move the word by that and a choice of lines places it after `taken`
        word_bytes = 4 * self._cfg.lanes
        line_log2 = (line - 1).bit_length()
        assert line == 1 << line_log2, "a line a power of two bytes"
        word = w.data & mask_below(m, w.bytes, word_bytes, 8, name="word_mask")
        window = _window(line, word_bytes)
        in_line = shift_left(m, word, fill[:line_log2], 8, 8 * window, name="placed")
        in_line_strb = shift_left(m, mask_below(m, w.bytes, word_bytes, name="word_strb"),
                                  fill[:line_log2], 1, window, name="placed_strb")
        placed, placed_strb = Signal(BUFFER_LINES * bits), Signal(size)
        with m.Switch(Mux(taken, fill[line_log2:] - 1, fill[line_log2:])):
            for h in range(BUFFER_LINES):
                with m.Case(h):
                    m.d.comb += [placed.eq(in_line << (h * bits)), placed_strb.eq(in_line_strb << (h * line))]
        with m.If(self.start):
            m.d.sync += [data.eq(0), strb.eq(0), *set_fill(self.offset), closing.eq(0)]
        with m.Elif(take):
            m.d.sync += [data.eq(kept_data | placed), strb.eq(kept_strb | placed_strb),
                         *set_fill(after + w.bytes), closing.eq(w.last)]
        with m.Else():
            m.d.sync += [data.eq(kept_data), strb.eq(kept_strb), *set_fill(after)]
        return m
