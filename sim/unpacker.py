"""Model of hw/unpacker.py: when each chunk of a row-major matrix is emitted.

Chunk c of the run needs beats up to `last_beat[c]`; it is emitted one cycle after that
beat was pulled into the window, and one cycle after the previous chunk at the earliest.
Beats are pulled at most one per cycle, as soon as the DRAM buffer shows them and the
two-beat window has room: beat q waits for the chunk that retires beat q - 2 (it may be
pulled in that chunk's cycle). The window's limit never delays a chunk: the pull it
holds back is for a beat the next chunk cannot need yet, so chunk times follow from the
unlimited pulls. The recurrences are max-plus scans, computed with cumulative maxima
instead of a loop.
"""
import numpy as np


def chunk_last_beats(offset, rows, cols, lanes):
    """For each chunk, in emission order, the index of the last beat it touches."""
    per_row = -(-cols // lanes)
    starts = np.arange(per_row, dtype=np.int64) * lanes
    ends = np.minimum(starts + lanes, cols)                      # exclusive, within the row
    row_base = offset + np.arange(rows, dtype=np.int64)[:, None] * cols
    return ((row_base + ends[None, :] - 1) // lanes).reshape(-1)


def run_beats(offset, rows, cols, lanes):
    return -(-(offset + rows * cols) // lanes)


def chunk_end_elements(offset, rows, cols, lanes):
    """For each chunk, the stream position (elements from the run's first beat) just past it."""
    per_row = -(-cols // lanes)
    ends = np.minimum(np.arange(1, per_row + 1, dtype=np.int64) * lanes, cols)
    return (offset + np.arange(rows, dtype=np.int64)[:, None] * cols + ends[None, :]).reshape(-1)


def pull_times(available, times, offset, rows, cols, lanes):
    """Cycle each beat is pulled from the DRAM buffer, given when the buffer shows it and
    the chunk times: a chunk retires its window's first beat when it reaches that beat's end."""
    beats = len(available)
    ends = chunk_end_elements(offset, rows, cols, lanes)
    gate = np.zeros(beats, np.int64)
    if beats > 2:
        retiring = np.searchsorted(ends, (np.arange(beats - 2, dtype=np.int64) + 1) * lanes)
        gate[2:] = times[retiring]
    index = np.arange(beats, dtype=np.int64)
    return index + np.maximum.accumulate(np.maximum(available, gate) - index)


def chunk_times(available, last_beats):
    """Emission cycle of each chunk, given when each beat can be pulled."""
    index = np.arange(len(available), dtype=np.int64)
    pulled = index + np.maximum.accumulate(available - index)    # one pull per cycle
    ready = pulled[last_beats] + 1
    order = np.arange(len(last_beats), dtype=np.int64)
    return order + np.maximum.accumulate(ready - order)          # one chunk per cycle
