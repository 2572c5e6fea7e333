"""Model of hw/line_packer.py: when it takes each word and hands out each line.

Bytes b_0 = offset, b_{i+1} = b_i + bytes of word i. Word i is taken once the packer's
BUFFER_LINES lines have room for it after the cycle's line leaves: in or after the
cycle its consumer takes line ceil(b_{i+1} / line) - BUFFER_LINES - 1. Line l goes out
from the cycle after the word holding its last byte was taken (the run's last line:
after the last word), and after line l - 1 was taken.
"""
import numpy as np

from isa.microarch import PACKER_BUFFER_LINES as BUFFER_LINES


class Run:
    """One run of words; `line_take(l, cycle)` is the cycle the consumer takes line l
    shown from `cycle` on."""

    def __init__(self, offset, word_bytes, line, line_take):
        self.ends = (offset + np.cumsum(word_bytes)).tolist()
        self.line, self.lines = line, -(-self.ends[-1] // line)
        self.line_take = line_take
        self.takes = []                                # the cycle each line was taken

    def take_word(self, i, cycle):
        """The cycle word i, offered from `cycle` on (and once the previous word was taken),
        is taken; hands its completed lines to the consumer."""
        room = -(-self.ends[i] // self.line) - BUFFER_LINES - 1
        if room >= 0:
            cycle = max(cycle, self.takes[room])
        full = self.lines if i == len(self.ends) - 1 else self.ends[i] // self.line
        for index in range(len(self.takes), full):
            shown = cycle + 1 if index == 0 else max(cycle + 1, self.takes[-1] + 1)
            self.takes.append(self.line_take(index, shown))
        return cycle
