"""Model of hw/dram_reader.py: when each line of a run becomes available to its consumer.

The RTL cuts a run into INCR bursts at 4 KiB boundaries and at `max_burst_beats`, and
keeps up to `dram_max_reads` of them in flight. Burst i's address handshake comes at the
earliest of:
- two cycles after `start` (one to register the run, one for the arbiter's grant), and
  two cycles after the previous burst's handshake (the arbiter grants one AR per two cycles);
- two cycles after the last beat of burst i - dram_max_reads (the in-flight count);
- two cycles after the consumer took the beat that makes room in the DRAM buffer for
  every beat asked for so far (the buffer never back-pressures the R channel);
- and not in the two cycles of a command-engine read the arbiter took instead (its pick
  and its handshake): then two cycles after that read's handshake.
The DRAM returns bursts in the order of their handshakes, a burst's beats one per cycle,
the first `dram_read_latency` cycles after its handshake and after the previous burst's
(or the command engine's read's) last beat. The DRAM buffer (a buffered FIFO) shows a
beat to its reader BUFFER_LATENCY cycles after it arrived.

The buffer's room depends on when the consumer (the unpacker, or the writer of a copy)
takes each beat, which depends on when the beats arrive: `run` finds the fixed point,
starting from a consumer that takes each beat as soon as it shows.

The runs follow each other through one `Reader`, across descriptors (the front end
fetches ahead): a run may start once the previous one has issued its last burst, its
bursts count against the previous runs' in flight and in the buffer, and its beats
arrive after theirs.
"""
import numba
import numpy as np

ISSUE_DELAY = 2          # start -> first address handshake
GRANT_DELAY = 2          # a handshake, or the cycle an obstacle clears -> the next handshake
BUFFER_LATENCY = 2       # beat on the R channel -> visible at the buffer's output


def burst_lengths(addr, beats, cfg):
    """The burst lengths of a run of `beats` lines from `addr`, as the RTL cuts it: at
    every 4 KiB boundary, and into `max_burst_beats` pieces between boundaries."""
    if beats <= 0:
        return np.zeros(0, np.int64)
    page = 4096 // cfg.beat_bytes
    first_line = addr // cfg.beat_bytes
    # the run cut at page boundaries, then each piece cut at max_burst_beats
    cuts = np.arange((first_line // page + 1) * page, first_line + beats, page, dtype=np.int64)
    edges = np.concatenate([[first_line], cuts, [first_line + beats]])
    pieces = np.diff(edges)
    full, rest = np.divmod(pieces, cfg.max_burst_beats)
    counts = full + (rest > 0)
    lengths = np.full(int(counts.sum()), cfg.max_burst_beats, np.int64)
    last = np.cumsum(counts) - 1
    lengths[last[rest > 0]] = rest[rest > 0]
    return lengths


def burst_schedule(start, addr, beats, cfg, steals=(), pulls=None, before=None, floor=0):
    """(address handshake of each burst, burst lengths, the cycle each beat is on the R
    channel) of a run.

    `steals` are (request, handshake, beat, control_first) of single-line reads by another
    engine (the command engine): the arbiter does not pick a burst in the cycle it picked
    that read, nor in the cycle of the read's handshake, and the DRAM answers in order, so
    the bursts after the read have their beats after its beat. `pulls` are the cycles the
    consumer takes each beat from the buffer; by default, one per cycle as soon as each
    shows, from cycle `floor` on. `before` is the earlier runs on the same reader (a
    `Reader`), or None."""
    lengths = burst_lengths(addr, beats, cfg)
    count = len(lengths)
    if not count:
        return np.empty(0, np.int64), lengths, np.empty(0, np.int64)
    steals = np.array(sorted(steals, key=lambda s: s[1]), np.int64).reshape(-1, 4)
    # the earlier runs: their beats and bursts, the pulls of their last beats and the last
    # beats of their last bursts (the only ones the room and the in-flight count look at)
    ahead, bursts_ahead = (before.beats, before.bursts) if before is not None else (0, 0)
    earlier_pulls = np.array(before.pulls if before is not None else [], np.int64)
    last = np.array(before.last_beats if before is not None else [], np.int64)
    handshakes, firsts = _handshakes(start, lengths, ahead, bursts_ahead, earlier_pulls, last,
                                     np.zeros(0, np.int64) if pulls is None else pulls.astype(np.int64),
                                     pulls is not None, steals, cfg.dram_read_latency, cfg.dram_buf_beats,
                                     cfg.dram_max_reads, floor)
    index = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return handshakes, lengths, np.repeat(firsts, lengths) + index


def load_kernels(cfg):
    """Compile (or load from numba's cache) the compiled loop, before the first run."""
    burst_schedule(0, 0, 1, cfg, steals=[(0, 0, 0, 0)], pulls=np.zeros(1, np.int64))


@numba.njit(cache=True)
def _handshakes(start, lens, ahead, bursts_ahead, earlier_pulls, earlier_last, pulls, has_pulls, steals,
                latency, room, max_reads, floor):
    """burst_schedule's loop over the bursts (compiled: one burst depends on the last):
    each burst's handshake and first beat."""
    count = len(lens)
    pulls_base, last_base = ahead - len(earlier_pulls), bursts_ahead - len(earlier_last)
    last = np.empty(len(earlier_last) + count, np.int64)     # cycle of each burst's last beat
    last[:len(earlier_last)] = earlier_last
    handshakes = np.empty(count, np.int64)
    firsts = np.empty(count, np.int64)
    first_pull = np.empty(count, np.int64)                   # cycle a burst's first beat is pulled
    requested = ahead                                        # beats asked for, with the earlier runs'
    j = 0                                                    # the burst holding the freeing beat
    first_beat_j = ahead
    for i in range(count):
        requested += lens[i]
        h = start + ISSUE_DELAY if i == 0 else handshakes[i - 1] + GRANT_DELAY
        if bursts_ahead + i >= max_reads:
            h = max(h, last[bursts_ahead + i - max_reads - last_base] + GRANT_DELAY)
        freeing = requested - room - 1                       # the pull that makes room for burst i
        if freeing >= ahead:
            if has_pulls:
                h = max(h, pulls[freeing - ahead] + GRANT_DELAY)
            else:
                while j + 1 < i and first_beat_j + lens[j] <= freeing:
                    first_beat_j += lens[j]
                    j += 1
                h = max(h, first_pull[j] + (freeing - first_beat_j) + GRANT_DELAY)
        elif freeing >= 0:
            h = max(h, earlier_pulls[freeing - pulls_base] + GRANT_DELAY)
        for k in range(len(steals)):
            # the arbiter picked the read in the cycle before its handshake
            if steals[k, 1] - 1 <= h - 1 <= steals[k, 1]:
                h = steals[k, 1] + GRANT_DELAY
        handshakes[i] = h
        n_last = len(earlier_last) + i
        arrive = h + latency if n_last == 0 else max(h + latency, last[n_last - 1] + 1)
        for k in range(len(steals)):
            if steals[k, 1] < h:
                arrive = max(arrive, steals[k, 2] + 1)
        firsts[i] = arrive
        last[n_last] = arrive + lens[i] - 1
        pull = max(arrive + BUFFER_LATENCY, floor)
        first_pull[i] = pull if i == 0 else max(pull, first_pull[i - 1] + lens[i - 1])
    return handshakes, firsts


MAX_ROUNDS = 8


class Reader:
    """The reader through one descriptor's runs: what a run needs of the runs before it."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.beats = self.bursts = 0  # beats and bursts of the earlier runs
        self.pulls = []               # the cycle the last dram_buf_beats of them were taken
        self.last_beats = []          # the cycle of the last beat of the last dram_max_reads bursts
        self.issued_all = None        # first cycle the last run's bursts were all issued

    def add(self, handshakes, lengths, beat_times, pulls):
        room, reads = self.cfg.dram_buf_beats, self.cfg.dram_max_reads
        self.beats, self.bursts = self.beats + len(pulls), self.bursts + len(lengths)
        self.pulls = (self.pulls + pulls[-room:].tolist())[-room:]
        self.last_beats = (self.last_beats + beat_times[np.cumsum(lengths)[-reads:] - 1].tolist())[-reads:]
        self.issued_all = int(handshakes[-1]) + 1


def run(start, addr, beats, cfg, consumer, steals=(), before=None, floor=0):
    """A run read for `consumer`, a function from the cycles each beat shows at the
    buffer's output to the cycles it takes them (from cycle `floor` on), after the earlier
    runs of `before` (a Reader, which the run is added to). Returns (handshakes, lengths,
    arrivals, pulls): the schedule, and when each beat arrives and is taken."""
    pulls = None
    for _ in range(MAX_ROUNDS):
        handshakes, lengths, beat_times = burst_schedule(start, addr, beats, cfg, steals, pulls, before, floor)
        shown = beat_times + BUFFER_LATENCY
        taken = consumer(shown)
        if pulls is None:
            # the first round assumed each beat taken as it shows, one per cycle, from
            # `floor` on (a max-plus scan); later ones the last pulls
            index = np.arange(len(shown), dtype=np.int64)
            pulls = index + np.maximum.accumulate(np.maximum(shown, floor) - index)
        converged = np.array_equal(taken, pulls)
        pulls = taken
        if converged:
            break
    if before is not None:
        before.add(handshakes, lengths, beat_times, pulls)
    return handshakes, lengths, beat_times, pulls


def beat_arrivals(start, addr, beats, cfg, steals=()):
    """Cycle each beat of the run is on the R channel."""
    return burst_schedule(start, addr, beats, cfg, steals)[2]


def beat_available(start, addr, beats, cfg, steals=()):
    """Cycle each beat of the run can be taken from the DRAM buffer."""
    return beat_arrivals(start, addr, beats, cfg, steals) + BUFFER_LATENCY
