"""A PE row's operand select: each lane's input element out of the input buffer's line,
registered (cycle 0 of hw/compute_unit.py's pipeline).

Lane j multiplies by element (first + lane_row[j]) mod LANES of the line: `first` is the
chunk's first element within its line, `lane_row[j]` the lane's packed row j // N, or,
transposed, j mod K (hw/compute_unit.py keeps both). The line is rotated to `first` once,
by a barrel rotator (hw/shift.py), and each lane then picks among the few elements it can
ever take (isa/pe_array.py `lane_sources`: 30.9 a lane on average at 512 lanes) rather than
among all LANES, which was a LANES:1 multiplexer a lane, LANES^2 in all: 14.8 mm^2 of the
paper-size PE array (docs/area.md).
"""
from amaranth import Cat, Module, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from isa.pe_array import lane_sources
from .shift import shift_right, shift_right_muxes

ELEM_BITS = 16              # an input element (FP16)


def select_muxes(lanes):
    """Two-input multiplexers a bit of the block's selection amounts to, the rotator's and
    the lanes' (a choice among n sources is n - 1): area/blocks.py's model of how the block
    grows with LANES (about LANES^1.5, where the old crossbar grew as LANES^2)."""
    lane_bits = (lanes - 1).bit_length()
    rotator = shift_right_muxes(2 * lanes, lane_bits, 1, lanes)
    return rotator + sum(len(lane_sources(j, lanes)) - 1 for j in range(lanes))


class OperandSelect(wiring.Component):
    def __init__(self, lanes):
        self._lanes = lanes
        lane_bits = (lanes - 1).bit_length()
        super().__init__({
            "line": In(ELEM_BITS * lanes),                                  # the input buffer's read
            "first": In(range(lanes)),
            "lane_row": In(data.ArrayLayout(unsigned(lane_bits), lanes)),
            "x": Out(data.ArrayLayout(unsigned(ELEM_BITS), lanes)),         # registered
        })

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        rotated = shift_right(m, Cat(self.line, self.line), self.first, ELEM_BITS, ELEM_BITS * lanes,
                              name="rotated")
        for j in range(lanes):
            first, *others = lane_sources(j, lanes)
            with m.Switch(self.lane_row[j]):
                for source in others:
                    with m.Case(source):
                        m.d.sync += self.x[j].eq(rotated.word_select(source, ELEM_BITS))
                with m.Default():               # `first`: lane_row never leaves lane_sources
                    m.d.sync += self.x[j].eq(rotated.word_select(first, ELEM_BITS))
        return m
