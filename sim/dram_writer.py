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
import numpy as np

from isa.microarch import WRITES_IN_FLIGHT
from .dram_interleaver import WriteChannels
from .dram_reader import bursts

ISSUE_DELAY = 2          # start -> the job's first address handshake, at the earliest
DATA_DELAY = 1           # address handshake -> first data beat


class Writer:
    """The writer's state across jobs: when it is idle, and every burst's response."""

    def __init__(self, cfg):
        self.latency = cfg.dram_write_latency
        self.cfg = cfg
        self.idle_at = 0                 # first cycle it can take a job
        self.responses = []              # the response cycle of the last WRITES_IN_FLIGHT bursts, in order
        self.log = None                  # a list to record every burst's response cycle in (tests)
        self.channels = WriteChannels(cfg) if cfg.dram_channels > 1 else None
        self.jobs = []                   # (address, bytes) of the jobs since the owner cleared it
        self._job = None

    def copy(self):
        # what the writer changes in place is copied; the config is shared (a deepcopy
        # would copy it too, at more cost than a schedule)
        new = Writer.__new__(Writer)
        new.__dict__.update(self.__dict__)
        for name in ("responses", "jobs", "log", "_bursts", "_beats"):
            value = getattr(self, name, None)
            if value is not None:
                setattr(new, name, list(value))
        if self.channels is not None:
            new.channels = self.channels.copy()
        return new

    def quiet_at(self):
        """First cycle every write issued so far has been answered and the writer is idle."""
        return max(self.idle_at, self.responses[-1] + 1 if self.responses else 0)

    def _handshake(self, ask):
        """The address handshake of the next burst, asking from cycle `ask` on."""
        sent = len(self.responses)
        if sent >= WRITES_IN_FLIGHT:
            ask = max(ask, self.responses[sent - WRITES_IN_FLIGHT] + 1)
        return ask + 1

    def _written(self, handshake, first_line, lines, beat_times):
        """A burst's beats are all written: its response."""
        if self.channels is None:
            response = beat_times[-1] + self.latency
        else:
            response = self.channels.burst(handshake, first_line, lines, beat_times) + 1
        if self.responses:
            response = max(response, self.responses[-1] + 1)
        self.responses.append(response)
        if self.log is not None:
            self.log.append(response)
        # only these matter (_handshake, quiet_at); a longer list would make every State
        # copy, one a descriptor, grow with the run
        del self.responses[:-WRITES_IN_FLIGHT]

    def line(self, start, addr):
        """A one-line job at `addr` started at `start`; returns (the cycle its beat is
        written, the cycle of its response)."""
        assert start >= self.idle_at, (start, self.idle_at)
        self.jobs.append((addr, self.cfg.port_bytes))
        handshake = self._handshake(start + 1)
        beat = handshake + DATA_DELAY
        self._written(handshake, addr // self.cfg.port_bytes, 1, [beat])
        self.idle_at = beat + 1
        return beat, self.responses[-1]

    def stream(self, start, addr, lines):
        """Start a job of `lines` lines from a stream at `start`; then `take` each beat."""
        assert start >= self.idle_at, (start, self.idle_at)
        self.jobs.append((addr, lines * self.cfg.port_bytes))
        firsts, sizes, beats = bursts(addr, lines, self.cfg)
        self._bursts = list(zip(firsts.tolist(), sizes.tolist(), beats.tolist()))[::-1]
        self._start, self._handshake_at, self._next_beat = start, None, start + 1
        self._burst, self._beats = None, []

    def take(self, shown):
        """The cycle the job's next beat, shown from `shown` on, is taken."""
        if self._burst is None:
            ask = self._start + 1 if self._handshake_at is None else self._handshake_at + 1
            self._handshake_at = self._handshake(ask)
            self._burst = self._bursts.pop()
            self._next_beat = max(self._next_beat, self._handshake_at + DATA_DELAY)
        cycle = max(shown, self._next_beat)
        self._beats.append(cycle)
        self._next_beat = cycle + 1
        first_line, lines, beats = self._burst
        if len(self._beats) == beats:
            self._written(self._handshake_at, first_line, lines, self._beats)
            self._burst, self._beats = None, []
            if not self._bursts:
                self.idle_at = cycle + 1
        return cycle

    def run(self, start, addr, lines, available):
        """A stream job of `lines` lines whose beats are available at `available`: the
        cycle each beat is taken."""
        self.stream(start, addr, lines)
        return np.array([self.take(int(shown)) for shown in available], np.int64)
