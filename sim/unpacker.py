"""Model of hw/unpacker.py: when each slot (one chunk, or a pair of chunks) of a row-major
matrix is emitted.

Slot s needs beats up to `last_beat[s]`; it is emitted one cycle after that beat was
pulled into the window, and one cycle after the previous slot at the earliest. Beats are
pulled at most one per cycle, as soon as the DRAM buffer shows them and the window of
WINDOW_BEATS beats has room: beat q waits for the slot that retires beat q - WINDOW_BEATS
(it may be pulled in that slot's cycle). The window's limit never delays a slot: a slot
spans at most WINDOW_BEATS beats, so the pull it holds back is for a beat the next slot
cannot need yet, and slot times follow from the unlimited pulls. The recurrences are
max-plus scans, computed with cumulative maxima instead of a loop.
"""
import numpy as np

from isa.microarch import UNPACKER_WINDOW_BEATS as WINDOW_BEATS



def run_beats(offset, rows, cols, lanes):
    return -(-(offset + rows * cols) // lanes)


def slot_ends(offset, rows, cols, lanes, pair=False):
    """For each slot, in emission order, the stream position (elements from the run's
    first beat) just past it. With `pair`, row r's last chunk shares a slot with row
    r + 1's first when a row is several chunks long, or else when r is even."""
    per_row = -(-cols // lanes)
    ends = np.minimum(np.arange(1, per_row + 1, dtype=np.int64) * lanes, cols)
    ends = offset + np.arange(rows, dtype=np.int64)[:, None] * cols + ends[None, :]
    if not pair or rows < 2:
        return ends.reshape(-1)
    merged = np.zeros((rows, per_row), bool)         # a row's last chunk ends no slot
    merged[:-1, -1] = True if per_row > 1 else (np.arange(rows - 1) % 2 == 0)
    return ends[~merged]


def last_beats(ends, lanes):
    """The index of the last beat each slot touches."""
    return (ends - 1) // lanes


def pull_times(available, times, ends, lanes):
    """Cycle each beat is pulled from the DRAM buffer, given when the buffer shows it and
    the slot times: a slot retires the window's first beat when it reaches that beat's end."""
    beats = len(available)
    gate = np.zeros(beats, np.int64)
    if beats > WINDOW_BEATS:
        retiring = np.searchsorted(ends, (np.arange(beats - WINDOW_BEATS, dtype=np.int64) + 1) * lanes)
        gate[WINDOW_BEATS:] = times[retiring]
    index = np.arange(beats, dtype=np.int64)
    return index + np.maximum.accumulate(np.maximum(available, gate) - index)


def slot_times(available, last_beat):
    """Emission cycle of each slot, given when each beat can be pulled."""
    index = np.arange(len(available), dtype=np.int64)
    pulled = index + np.maximum.accumulate(available - index)    # one pull per cycle
    ready = pulled[last_beat] + 1
    order = np.arange(len(last_beat), dtype=np.int64)
    return order + np.maximum.accumulate(ready - order)          # one slot per cycle
