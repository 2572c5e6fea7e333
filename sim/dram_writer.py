"""Model of hw/dram_writer.py: when its writes go out and when they are answered.

The writer takes one job at a time (a run of lines from a stream, or one line) and posts
its bursts, across jobs too:
- a burst asks for the bus from the cycle after the job's start (the first) or after the
  previous burst's address handshake, once fewer than WRITES_IN_FLIGHT bursts await
  their response (from the cycle after the response that frees one); its handshake is
  the cycle after it asks (the arbiter's grant);
- the data beats go one per cycle when the source has them, a burst's first the cycle
  after its handshake at the earliest, back to back across bursts; a burst's response
  comes `dram_write_latency` cycles after its last beat, after the previous burst's;
- the writer is idle (takes its next job) the cycle after a job's last beat, and quiet
  (every write answered: what a completion waits for) from the cycle after the last
  response.
"""
import copy

import numpy as np

from isa.microarch import WRITES_IN_FLIGHT
from .dram_reader import burst_lengths

ISSUE_DELAY = 2          # start -> the job's first address handshake, at the earliest
DATA_DELAY = 1           # address handshake -> first data beat


class Writer:
    """The writer's state across jobs: when it is idle, and every burst's response."""

    def __init__(self, cfg):
        self.latency = cfg.dram_write_latency
        self.cfg = cfg
        self.idle_at = 0                 # first cycle it can take a job
        self.responses = []              # the response cycle of each burst, in order
        self._job = None                 # (burst lengths left, lines left in the burst, next beat)

    def copy(self):
        return copy.deepcopy(self)

    def quiet_at(self):
        """First cycle every write issued so far has been answered and the writer is idle."""
        return max(self.idle_at, self.responses[-1] + 1 if self.responses else 0)

    def _handshake(self, ask):
        """The address handshake of the next burst, asking from cycle `ask` on."""
        sent = len(self.responses)
        if sent >= WRITES_IN_FLIGHT:
            ask = max(ask, self.responses[sent - WRITES_IN_FLIGHT] + 1)
        return ask + 1

    def _written(self, last_beat):
        response = last_beat + self.latency
        if self.responses:
            response = max(response, self.responses[-1] + 1)
        self.responses.append(response)

    def line(self, start):
        """A one-line job started at `start`; returns (the cycle its beat is written, the
        cycle of its response)."""
        assert start >= self.idle_at, (start, self.idle_at)
        beat = self._handshake(start + 1) + DATA_DELAY
        self._written(beat)
        self.idle_at = beat + 1
        return beat, self.responses[-1]

    def stream(self, start, addr, lines):
        """Start a job of `lines` lines from a stream at `start`; then `take` each beat."""
        assert start >= self.idle_at, (start, self.idle_at)
        lengths = burst_lengths(addr, lines, self.cfg).tolist()[::-1]
        # bursts left, beats left in the burst, the previous address handshake, the next beat
        self._job = [lengths, 0, None, start + 1]
        self._start = start

    def take(self, shown):
        """The cycle the job's next beat, shown from `shown` on, is taken."""
        job = self._job
        lengths, left, handshake, next_beat = job
        if left == 0:
            handshake = self._handshake(self._start + 1 if handshake is None else handshake + 1)
            left, next_beat = lengths.pop(), max(next_beat, handshake + DATA_DELAY)
        cycle = max(shown, next_beat)
        left -= 1
        if left == 0:
            self._written(cycle)
            if not lengths:
                self.idle_at, self._job = cycle + 1, None
                return cycle
        job[1], job[2], job[3] = left, handshake, cycle + 1
        return cycle

    def run(self, start, addr, available):
        """A stream job whose lines are available at `available`: the cycle each is taken."""
        self.stream(start, addr, len(available))
        return np.array([self.take(int(shown)) for shown in available], np.int64)
