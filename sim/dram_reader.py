"""Model of hw/dram_reader.py: when each line of a run becomes available to its consumer.

The RTL cuts a run into INCR bursts at 4 KiB boundaries and at `max_burst_beats`, and
issues one burst at a time: the address handshake two cycles after `start` (one to
enter ISSUE, one for the arbiter's grant), the beats `dram_read_latency` cycles later,
one per cycle, the next burst's address handshake two cycles after the previous
burst's last beat. The DRAM buffer (a buffered FIFO) shows a beat to its reader
BUFFER_LATENCY cycles after it arrived.

The buffer's free-space check never delays a beat its consumer is waiting for (the
reader only waits when the buffer holds at least a burst), so it is not modelled.
"""
import numpy as np

ISSUE_DELAY = 2          # start -> first address handshake
NEXT_BURST_DELAY = 2     # last beat of a burst -> next address handshake
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


def burst_schedule(start, addr, beats, cfg, steals=()):
    """(address handshake of each burst, burst lengths) of a run.

    `steals` are (handshake, beat) cycles of single-line reads by another engine (the
    command engine) that the arbiter grants between bursts: a burst that would ask for
    the channel while such a read holds it is granted two cycles after its beat, and the
    bursts after it move with it."""
    lengths = burst_lengths(addr, beats, cfg)
    if not len(lengths):
        return lengths, lengths
    # the next burst's handshake comes NEXT_BURST_DELAY cycles after the last beat
    step = lengths + cfg.dram_read_latency + NEXT_BURST_DELAY - 1
    handshakes = start + ISSUE_DELAY + np.concatenate([[0], np.cumsum(step[:-1])])
    for handshake, beat in sorted(steals):
        j = int(np.searchsorted(handshakes, handshake - 1))
        if j < len(handshakes) and handshakes[j] <= beat + 1:
            handshakes[j:] += beat + NEXT_BURST_DELAY - handshakes[j]
    return handshakes, lengths


def arrivals(handshakes, lengths, cfg):
    """Cycle each beat of a burst schedule is on the R channel (numpy int64 array)."""
    offsets = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(handshakes + cfg.dram_read_latency, lengths) + offsets


def beat_arrivals(start, addr, beats, cfg, steals=()):
    """Cycle each beat of the run is on the R channel."""
    return arrivals(*burst_schedule(start, addr, beats, cfg, steals), cfg)


def beat_available(start, addr, beats, cfg, steals=()):
    """Cycle each beat of the run can be taken from the DRAM buffer."""
    return beat_arrivals(start, addr, beats, cfg, steals) + BUFFER_LATENCY
