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
import math

import numba
import numpy as np

from . import unpacker

ISSUE_DELAY = 2          # start -> first address handshake
GRANT_DELAY = 2          # a handshake, or the cycle an obstacle clears -> the next handshake
BUFFER_LATENCY = 2       # beat on the R channel -> visible at the buffer's output


def bursts(addr, lines, cfg):
    """The bursts of a run of `lines` 64-byte lines from the line at `addr`, as the RTL
    cuts it (hw/axi.py burst_length): at every burst boundary (4 KiB, or a stripe with
    several channels), and between boundaries into pieces of at most `max_burst_beats`
    beats counted from the beat holding the piece's first line. Returns (first line of
    each burst, its lines, its beats of the data path); the last two are shared, read-only."""
    if lines <= 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    # the cut depends on the first line only through its place in the boundary and the
    # channel stripe (both periodic in `period` lines), so a run's bursts relative to
    # its first line are cut once per (place, lines) and config
    page = cfg.burst_boundary // cfg.port_bytes
    period = math.lcm(page, cfg.dram_channels)
    first = addr // cfg.port_bytes
    key = (id(cfg), first % period, lines)
    cut = _CUTS.get(key)
    if cut is None or cut[0] is not cfg:
        if len(_CUTS) >= MAX_CUTS:
            _CUTS.clear()
        firsts, sizes, beats = _cut(first % period * cfg.port_bytes, lines, cfg)
        firsts -= first % period
        for array in (firsts, sizes, beats):
            array.flags.writeable = False
        cut = _CUTS[key] = (cfg, firsts, sizes, beats)
    return cut[1] + first, cut[2], cut[3]


_CUTS = {}              # (config, first line's place, lines) -> the bursts relative to the first line
MAX_CUTS = 1 << 14


def _cut(addr, lines, cfg):
    """`bursts`, computed."""
    if lines <= 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    channels = cfg.dram_channels
    page = cfg.burst_boundary // cfg.port_bytes
    most = cfg.max_burst_beats * channels               # lines of max_burst_beats whole beats
    first = addr // cfg.port_bytes
    cuts = np.arange((first // page + 1) * page, first + lines, page, dtype=np.int64)
    edges = np.concatenate([[first], cuts, [first + lines]])
    pieces, starts = np.diff(edges), edges[:-1]
    # a piece's first burst ends with the beats it may take from its first line's beat
    head = np.minimum(pieces, most - starts % channels)
    full, part = np.divmod(pieces - head, most)
    counts = 1 + full + (part > 0)
    sizes = np.full(int(counts.sum()), most, np.int64)
    begin = np.cumsum(counts) - counts
    sizes[begin] = head
    sizes[begin + counts - 1] = np.where(part > 0, part, sizes[begin + counts - 1])
    firsts = first + np.cumsum(sizes) - sizes
    beats = (firsts % channels + sizes + channels - 1) // channels
    return firsts, sizes, beats


def burst_lengths(addr, lines, cfg):
    """The beats of each burst of a run of `lines` lines from `addr` (see `bursts`)."""
    return bursts(addr, lines, cfg)[2]


def burst_schedule(start, addr, lines, cfg, steals=(), pulls=None, before=None, floor=0):
    """(address handshake of each burst, its beats, the cycle each beat is on the R
    channel) of a run of `lines` lines from `addr`.

    `steals` are (request, handshake, beat, control_first, channel) of single-line reads by
    another engine (the command engine): the arbiter does not pick a burst in the cycle it
    picked that read, nor in the cycle of the read's handshake, and the memory answers in
    order, so the bursts after the read have their beats after its beat (and, with several
    channels, its line takes its turn on its channel). `pulls` are the cycles the consumer
    takes each beat from the buffer; by default, one per cycle as soon as each shows, from
    cycle `floor` on. `before` is the earlier runs on the same reader (a `Reader`), or None."""
    return _schedule(start, addr, lines, cfg, steals, pulls, before, floor)[:3]


def _schedule(start, addr, lines, cfg, steals, pulls, before, floor):
    """burst_schedule, and each channel's last line after the run."""
    firsts, sizes, lengths = bursts(addr, lines, cfg)
    count = len(lengths)
    ahead, bursts_ahead, earlier_pulls, last, channel_last, stolen = _earlier(before, cfg)
    channel_last = channel_last.copy()
    if not count:
        return np.empty(0, np.int64), lengths, np.empty(0, np.int64), channel_last, stolen
    handshakes, arrivals, stolen = _handshakes(start, lengths, firsts, sizes, ahead, bursts_ahead, earlier_pulls,
                                               last, np.zeros(0, np.int64) if pulls is None else pulls.astype(np.int64),
                                               pulls is not None, steal_array(steals), stolen, cfg.dram_read_latency,
                                               cfg.dram_buf_beats, cfg.dram_max_reads, floor, cfg.dram_channels,
                                               channel_last, _NO_CYCLES)
    return handshakes, lengths, arrivals, channel_last, stolen


def steal_array(steals):
    """The command-engine reads as _handshakes takes them: rows (request, handshake, beat,
    control_first, channel), by handshake (an array of them is returned as it is)."""
    if isinstance(steals, np.ndarray):
        return steals
    return np.array([tuple(s) + (0,) * (5 - len(s)) for s in sorted(steals, key=lambda s: s[1])],
                    np.int64).reshape(-1, 5)


NEVER = -(1 << 40)
_NO_CYCLES = np.zeros(0, np.int64)


def _earlier(before, cfg):
    """The earlier runs: their beats and bursts, the pulls of their last beats and the last
    beats of their last bursts (the only ones the room and the in-flight count look at),
    each channel's last line (not to be changed in place), and the last steal counted."""
    if before is None:
        return 0, 0, _NO_CYCLES, _NO_CYCLES, np.full(cfg.dram_channels, NEVER, np.int64), NEVER
    return (before.beats, before.bursts, before.pulls, before.last_beats, before.channel_last,
            before.stolen_through)


def load_kernels(cfg):
    """Compile (or load from numba's cache) the compiled loops, before the first run."""
    burst_schedule(0, 0, 1, cfg, steals=[(0, 0, 0, 0, 0)], pulls=np.zeros(1, np.int64))
    run(0, 0, 1, cfg, unpacker.Consumer(*unpacker.slots(0, 1, 1, cfg.lanes), cfg.lanes, 0),
        steals=[(0, 0, 0, 0, 0)], before=Reader(cfg))


@numba.njit(cache=True)
def _handshakes(start, lens, firsts, sizes, ahead, bursts_ahead, earlier_pulls, earlier_last, pulls, has_pulls,
                steals, stolen, latency, room, max_reads, floor, channels, channel_last, run_starts):
    """burst_schedule's loop over the bursts (compiled: one burst depends on the last):
    each burst's handshake, the cycle each beat is on the R channel, and the handshake of
    the last steal now counted. `channel_last` (each channel's last line) is updated in
    place; a steal whose handshake is at or before `stolen` is in it already. `run_starts`
    (empty for one run) marks the bursts that begin a run of a gathered job: the fetcher
    starts that run once the previous one has issued its last burst (`gather_run`)."""
    count = len(lens)
    pulls_base, last_base = ahead - len(earlier_pulls), bursts_ahead - len(earlier_last)
    last = np.empty(len(earlier_last) + count, np.int64)     # cycle of each burst's last beat
    last[:len(earlier_last)] = earlier_last
    handshakes = np.empty(count, np.int64)
    arrivals = np.empty(lens.sum(), np.int64)
    first_pull = np.empty(count, np.int64)                   # cycle a burst's first beat is pulled
    requested = ahead                                        # beats asked for, with the earlier runs'
    j = 0                                                    # the burst holding the freeing beat
    first_beat_j = ahead
    applied = steals[:, 1] <= stolen                          # steals before the bursts so far
    beat_at = 0
    line_times = np.empty(4 * channels, np.int64)
    for i in range(count):
        requested += lens[i]
        if i == 0:
            h = start + ISSUE_DELAY
        elif len(run_starts) and run_starts[i]:
            h = handshakes[i - 1] + 1 + ISSUE_DELAY
        else:
            h = handshakes[i - 1] + GRANT_DELAY
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
        previous = last[n_last - 1] if n_last > 0 else -(1 << 40)     # the R channel's last beat
        for k in range(len(steals)):
            if not applied[k] and steals[k, 1] < h:
                applied[k] = True
                stolen = max(stolen, steals[k, 1])
                if channels == 1:
                    previous = max(previous, steals[k, 2])
                else:
                    # the read's line on its channel, then its beat, in order
                    c = steals[k, 4]
                    channel_last[c] = max(steals[k, 1] + 1 + latency, channel_last[c] + 1)
                    previous = max(previous, channel_last[c] + 1)
        if channels == 1:
            arrive = max(h + latency, previous + 1)
            for b in range(lens[i]):
                arrivals[beat_at + b] = arrive + b
        else:
            # each channel's part goes out the cycle after the handshake, its lines one per
            # cycle after the channel's earlier ones; a beat goes up the cycle after its last
            # line is in, after the beat before it
            base_beat = firsts[i] // channels
            for b in range(lens[i]):
                line_times[b] = -(1 << 40)
            for line in range(firsts[i], firsts[i] + sizes[i]):
                c = (line >> 2) % channels
                t = max(h + 1 + latency, channel_last[c] + 1)
                channel_last[c] = t
                b = line // channels - base_beat
                line_times[b] = max(line_times[b], t)
            for b in range(lens[i]):
                previous = max(line_times[b] + 1, previous + 1)
                arrivals[beat_at + b] = previous
            arrive = arrivals[beat_at]
        last[n_last] = arrivals[beat_at + lens[i] - 1]
        beat_at += lens[i]
        pull = max(arrive + BUFFER_LATENCY, floor)
        first_pull[i] = pull if i == 0 else max(pull, first_pull[i - 1] + lens[i - 1])
    return handshakes, arrivals, stolen


MAX_ROUNDS = 8


class Reader:
    """The reader through one descriptor's runs: what a run needs of the runs before it."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.beats = self.bursts = 0  # beats and bursts of the earlier runs
        self.pulls = _NO_CYCLES       # the cycle the last dram_buf_beats of them were taken
        self.last_beats = _NO_CYCLES  # the cycle of the last beat of the last dram_max_reads bursts
        self.issued_all = None        # first cycle the last run's bursts were all issued
        self.channel_last = np.full(cfg.dram_channels, NEVER, np.int64)   # each channel's last line
        self.stolen_through = NEVER   # the handshake of the last command-engine read counted in it

    def copy(self):
        # `add` and `run` replace the arrays, never change them in place, so a copy may
        # share them
        new = Reader.__new__(Reader)
        new.__dict__.update(self.__dict__)
        return new

    def add(self, handshakes, lengths, beat_times, pulls, windows=None):
        """Add a run; `windows`: the new `pulls` and `last_beats`, when the compiled run
        (_unpacked_run) made them already."""
        room, reads = self.cfg.dram_buf_beats, self.cfg.dram_max_reads
        self.beats, self.bursts = self.beats + len(pulls), self.bursts + len(lengths)
        if windows is None:
            windows = (np.concatenate((self.pulls, pulls[-room:]))[-room:],
                       np.concatenate((self.last_beats, beat_times[np.cumsum(lengths)[-reads:] - 1]))[-reads:])
        self.pulls, self.last_beats = windows
        self.issued_all = int(handshakes[-1]) + 1


def run(start, addr, lines, cfg, consumer, steals=(), before=None, floor=0):
    """A run read for `consumer`, a function from the cycles each beat shows at the
    buffer's output to the cycles it takes them (from cycle `floor` on), after the earlier
    runs of `before` (a Reader, which the run is added to). Returns (handshakes, lengths,
    arrivals, pulls): the schedule, and when each beat arrives and is taken.

    The fixed point: the first round assumes each beat taken as it shows, one per cycle,
    from `floor` on (a max-plus scan); each later one the pulls of the round before, until
    the consumer takes the beats as assumed (or MAX_ROUNDS). For the unpacker
    (sim/unpacker.Consumer) it runs compiled (`_unpacked_run`), round for round the same."""
    firsts, sizes, lengths = bursts(addr, lines, cfg)
    windows = None
    if isinstance(consumer, unpacker.Consumer) and len(lengths):
        ahead, bursts_ahead, earlier_pulls, last, channel_last, stolen = _earlier(before, cfg)
        handshakes, beat_times, pulls, consumer.times, channel_last, stolen, *windows = _unpacked_run(
            start, lengths, firsts, sizes, ahead, bursts_ahead, earlier_pulls, last, steal_array(steals), stolen,
            cfg.dram_read_latency, cfg.dram_buf_beats, cfg.dram_max_reads, floor, cfg.dram_channels, channel_last,
            MAX_ROUNDS, consumer.ends, consumer.last_beat, consumer.lanes, consumer.floor, _NO_CYCLES)
    else:
        pulls = None
        for _ in range(MAX_ROUNDS):
            handshakes, lengths, beat_times, channel_last, stolen = _schedule(start, addr, lines, cfg, steals, pulls,
                                                                              before, floor)
            shown = beat_times + BUFFER_LATENCY
            taken = consumer(shown)
            if pulls is None:
                index = np.arange(len(shown), dtype=np.int64)
                pulls = index + np.maximum.accumulate(np.maximum(shown, floor) - index)
            converged = np.array_equal(taken, pulls)
            pulls = taken
            if converged:
                break
    if before is not None:
        before.add(handshakes, lengths, beat_times, pulls, windows)
        before.channel_last, before.stolen_through = channel_last, stolen
    return handshakes, lengths, beat_times, pulls


def gather_run(start, runs, cfg, consumer, steals=(), before=None, floor=0):
    """`run` for one unpacker job whose beats come from several runs, `runs` [(addr,
    lines)] in order (a paged ATTENTION's pages, each whole beats): the fetcher starts each
    run in the cycle after the previous one issued its last burst, and the unpacker takes
    the beats as one job's. Returns what `run` does."""
    parts = [bursts(addr, lines, cfg) for addr, lines in runs if lines > 0]
    firsts, sizes, lengths = (np.concatenate([p[i] for p in parts]) for i in range(3))
    run_starts = np.zeros(len(lengths), np.int64)
    run_starts[np.cumsum([len(p[2]) for p in parts])[:-1]] = 1
    ahead, bursts_ahead, earlier_pulls, last, channel_last, stolen = _earlier(before, cfg)
    handshakes, beat_times, pulls, consumer.times, channel_last, stolen, *windows = _unpacked_run(
        start, lengths, firsts, sizes, ahead, bursts_ahead, earlier_pulls, last, steal_array(steals), stolen,
        cfg.dram_read_latency, cfg.dram_buf_beats, cfg.dram_max_reads, floor, cfg.dram_channels, channel_last,
        MAX_ROUNDS, consumer.ends, consumer.last_beat, consumer.lanes, consumer.floor, run_starts)
    if before is not None:
        before.add(handshakes, lengths, beat_times, pulls, windows)
        before.channel_last, before.stolen_through = channel_last, stolen
    return handshakes, lengths, beat_times, pulls


def side_run(start, addr, lines, cfg, steals=(), before=None):
    """`run` for a run whose beats leave the reader as they arrive, never entering the
    DRAM buffer (a paged ATTENTION's list, for the front end): each beat frees its room in
    the cycle it arrives, as a beat taken at once would. Earlier beats may still wait in
    the buffer then, so the reader's window of pulls is put back in time order, the order
    the buffer's room comes back in (the room a later burst waits for is the n-th freed)."""
    out = run(start, addr, lines, cfg, lambda shown: shown - BUFFER_LATENCY, steals, before, 0)
    if before is not None:
        before.pulls = np.sort(before.pulls)
    return out


@numba.njit(cache=True)
def _unpacked_run(start, lens, firsts, sizes, ahead, bursts_ahead, earlier_pulls, earlier_last, steals, stolen,
                  latency, room, max_reads, floor, channels, channel_last, max_rounds, ends, last_beat, lanes,
                  unpack_floor, run_starts):
    """run's fixed point with the unpacker's consumer (sim/unpacker.consume), compiled:
    (handshakes, arrivals, pulls, slot times, each channel's last line, the last steal
    counted, and the reader's windows after the run as Reader.add makes them: the last
    `room` pulls and the last beats of the last `max_reads` bursts)."""
    pulls = np.zeros(0, np.int64)
    for round_ in range(max_rounds):
        channels_now = channel_last.copy()
        handshakes, arrivals, stolen_now = _handshakes(start, lens, firsts, sizes, ahead, bursts_ahead,
                                                       earlier_pulls, earlier_last, pulls, round_ > 0, steals,
                                                       stolen, latency, room, max_reads, floor, channels,
                                                       channels_now, run_starts)
        shown = arrivals + BUFFER_LATENCY
        times, taken = unpacker.consume(shown, unpack_floor, ends, last_beat, lanes)
        if round_ == 0:
            assumed = np.empty(len(shown), np.int64)
            best = -(1 << 62)
            for i in range(len(shown)):
                best = max(best, max(shown[i], floor) - i)
                assumed[i] = i + best
        else:
            assumed = pulls
        converged = True
        for i in range(len(taken)):
            if taken[i] != assumed[i]:
                converged = False
                break
        pulls = taken
        if converged:
            break
    lasts = np.empty(len(lens), np.int64)
    end = 0
    for i in range(len(lens)):
        end += lens[i]
        lasts[i] = arrivals[end - 1]
    return (handshakes, arrivals, pulls, times, channels_now, stolen_now, _window(earlier_pulls, pulls, room),
            _window(earlier_last, lasts, max_reads))


@numba.njit(cache=True)
def _window(earlier, new, keep):
    """The last `keep` (>= 1) of earlier then new."""
    total = len(earlier) + len(new)
    keep = min(keep, total)
    out = np.empty(keep, np.int64)
    for j in range(keep):
        i = total - keep + j
        out[j] = earlier[i] if i < len(earlier) else new[i - len(earlier)]
    return out


def beat_arrivals(start, addr, lines, cfg, steals=()):
    """Cycle each beat of the run is on the R channel."""
    return burst_schedule(start, addr, lines, cfg, steals)[2]


def beat_available(start, addr, beats, cfg, steals=()):
    """Cycle each beat of the run can be taken from the DRAM buffer."""
    return beat_arrivals(start, addr, beats, cfg, steals) + BUFFER_LATENCY
