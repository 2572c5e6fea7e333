"""Model of hw/dram_writer.py: how long its writes take.

A run's first address handshake comes two cycles after `start`; each later burst's the
cycle after the previous burst's last beat (writes are posted), once fewer than
WRITES_IN_FLIGHT bursts await their response. A burst's data beats go from the cycle
after its handshake on, one per cycle when the source has them. The response comes
`dram_write_latency` cycles after the burst's last beat (one per cycle, in order), and
`busy` falls the cycle after the last response.
"""
import numpy as np

from .dram_reader import burst_lengths

ISSUE_DELAY = 2          # start -> the first address handshake
DATA_DELAY = 1           # address handshake -> first data beat
IDLE_DELAY = 1           # last response -> busy low
WRITES_IN_FLIGHT = 16    # bursts written and not yet answered (hw/dram_writer.py)


def line_write_done(start, cfg):
    """First cycle `busy` is low after a single-line write started at `start`."""
    return start + ISSUE_DELAY + DATA_DELAY + cfg.dram_write_latency + IDLE_DELAY


class _Bursts:
    """When each burst of a run may send data, and when its response comes."""

    def __init__(self, start, cfg):
        self.latency = cfg.dram_write_latency
        self.handshake = start + ISSUE_DELAY          # the next burst's, at the earliest
        self.responses = []

    def data_from(self):
        """The first cycle the next burst's first beat can go."""
        handshake, sent = self.handshake, len(self.responses)
        if sent >= WRITES_IN_FLIGHT:
            handshake = max(handshake, self.responses[sent - WRITES_IN_FLIGHT] + 1)
        return handshake + DATA_DELAY

    def written(self, last_beat):
        """The burst's last beat went at `last_beat`."""
        response = last_beat + self.latency
        if self.responses:
            response = max(response, self.responses[-1] + 1)
        self.responses.append(response)
        self.handshake = last_beat + 1

    def done(self):
        return self.responses[-1] + IDLE_DELAY


def run_write(start, addr, available, cfg):
    """(the cycle each beat is taken from the source, the first cycle `busy` is low after
    writing a run whose beats are available at `available`)."""
    bursts = _Bursts(start, cfg)
    first = 0
    taken = np.empty(len(available), np.int64)
    for length in burst_lengths(addr, len(available), cfg).tolist():
        part = available[first:first + length]
        index = np.arange(length, dtype=np.int64)
        beats = index + np.maximum.accumulate(np.maximum(part, bursts.data_from()) - index)
        taken[first:first + length] = beats
        bursts.written(int(beats[-1]))
        first += length
    return taken, bursts.done()


def run_write_done(start, addr, available, cfg):
    """First cycle `busy` is low after writing a run whose beats are available at `available`."""
    return run_write(start, addr, available, cfg)[1]


class StreamRun:
    """A run of `lines` lines from a source that shows them one at a time, the writer
    started at `start`: `take(l, shown)` is the cycle line l, shown from `shown` on, is
    taken; `done()` the first cycle `busy` is low after the last line."""

    def __init__(self, start, addr, lines, cfg):
        self.bursts = _Bursts(start, cfg)
        self.lengths = burst_lengths(addr, lines, cfg).tolist()[::-1]
        self.left = 0                                  # lines of the burst going out
        self.next_beat = None

    def take(self, index, shown):
        if self.left == 0:
            self.left, self.next_beat = self.lengths.pop(), self.bursts.data_from()
        cycle = max(shown, self.next_beat)
        self.next_beat = cycle + 1
        self.left -= 1
        if self.left == 0:
            self.bursts.written(cycle)
        return cycle

    def done(self):
        return self.bursts.done()
