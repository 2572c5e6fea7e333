"""Model of hw/dram_writer.py: how long its writes take.

A burst's address handshake comes two cycles after `start` (or after the previous
burst's response), its data beats from the next cycle on, one per cycle when the
source has them; the response comes `dram_write_latency` cycles after the last beat,
and `busy` falls the cycle after the last response.
"""
import numpy as np

from .dram_reader import burst_lengths

ISSUE_DELAY = 2          # start, or the previous response -> address handshake
DATA_DELAY = 1           # address handshake -> first data beat
IDLE_DELAY = 1           # last response -> busy low


def line_write_done(start, cfg):
    """First cycle `busy` is low after a single-line write started at `start`."""
    return start + ISSUE_DELAY + DATA_DELAY + cfg.dram_write_latency + IDLE_DELAY


def run_write(start, addr, available, cfg):
    """(the cycle each beat is taken from the source, the first cycle `busy` is low after
    writing a run whose beats are available at `available`)."""
    t = start
    first = 0
    taken = np.empty(len(available), np.int64)
    for length in burst_lengths(addr, len(available), cfg).tolist():
        data_from = t + ISSUE_DELAY + DATA_DELAY
        part = available[first:first + length]
        index = np.arange(length, dtype=np.int64)
        beats = index + np.maximum.accumulate(np.maximum(part, data_from) - index)
        taken[first:first + length] = beats
        t = int(beats[-1]) + cfg.dram_write_latency        # the response
        first += length
    return taken, t + IDLE_DELAY


def run_write_done(start, addr, available, cfg):
    """First cycle `busy` is low after writing a run whose beats are available at `available`."""
    return run_write(start, addr, available, cfg)[1]


class StreamRun:
    """A run of `lines` lines from a source that shows them one at a time, the writer
    started at `start`: `take(l, shown)` is the cycle line l, shown from `shown` on, is
    taken; `done()` the first cycle `busy` is low after the last line."""

    def __init__(self, start, addr, lines, cfg):
        self.latency = cfg.dram_write_latency
        self.bursts = burst_lengths(addr, lines, cfg).tolist()[::-1]
        self.left = self.bursts.pop()
        self.data_from = start + ISSUE_DELAY + DATA_DELAY
        self.response = None

    def take(self, index, shown):
        cycle = max(shown, self.data_from)
        self.data_from = cycle + 1
        self.left -= 1
        if self.left == 0:
            self.response = cycle + self.latency
            if self.bursts:
                self.left = self.bursts.pop()
                self.data_from = self.response + ISSUE_DELAY + DATA_DELAY
        return cycle

    def done(self):
        return self.response + IDLE_DELAY
