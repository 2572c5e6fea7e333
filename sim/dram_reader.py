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
    """The burst lengths of a run of `beats` lines from `addr`, as the RTL cuts it."""
    lengths = []
    boundary_beats = 4096 // cfg.beat_bytes
    while beats > 0:
        to_boundary = boundary_beats - (addr // cfg.beat_bytes) % boundary_beats
        n = min(beats, to_boundary, cfg.max_burst_beats)
        lengths.append(n)
        addr += n * cfg.beat_bytes
        beats -= n
    return lengths


def beat_arrivals(start, addr, beats, cfg, grant=None):
    """Cycle each beat of the run is on the R channel (numpy int64 array).

    `grant(cycle)` gives the first cycle from `cycle` on that the arbiter can grant the
    first burst (another engine may hold the read channel); by default `cycle` itself."""
    lengths = burst_lengths(addr, beats, cfg)
    if not lengths:
        return np.zeros(0, np.int64)
    lengths = np.asarray(lengths, np.int64)
    handshake = start + ISSUE_DELAY
    if grant is not None:
        handshake = grant(handshake)
    # burst j's first beat: after all earlier beats and a fixed gap per earlier burst
    gap = NEXT_BURST_DELAY + cfg.dram_read_latency - 1
    first = (handshake + cfg.dram_read_latency
             + np.concatenate([[0], np.cumsum(lengths[:-1] + gap)]))
    offsets = np.arange(beats, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(first, lengths) + offsets


def beat_available(start, addr, beats, cfg):
    """Cycle each beat of the run can be taken from the DRAM buffer."""
    return beat_arrivals(start, addr, beats, cfg) + BUFFER_LATENCY
