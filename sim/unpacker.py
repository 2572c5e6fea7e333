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
import numba
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


def strided_rows(offset, stride, rows, cols, lanes):
    """A strided job's rows (hw/unpacker.py `strided`: each row a run of its own, on beats of
    its own): (each row's offset in its first beat, each row's beats)."""
    offsets = (offset + np.arange(rows, dtype=np.int64) * stride) % lanes
    return offsets, -(-(offsets + cols) // lanes)


def strided_slot_ends(offset, stride, rows, cols, lanes):
    """A strided job's (retire ends, slot ends) in stream position (elements from its first
    beat): a slot's chunk ends at its end; a row's last chunk retires through the end of the
    row's last beat (the next row begins on a beat of its own)."""
    offsets, beats = strided_rows(offset, stride, rows, cols, lanes)
    first = (np.cumsum(beats) - beats) * lanes + offsets          # each row's first element
    per_row = -(-cols // lanes)
    within = np.minimum(np.arange(1, per_row + 1, dtype=np.int64) * lanes, cols)
    ends = first[:, None] + within[None, :]
    retire = ends.copy()
    retire[:, -1] = np.cumsum(beats) * lanes
    return retire.reshape(-1), ends.reshape(-1)


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


_SLOTS = {}             # (offset, rows, cols, lanes, pair, stride) -> (slot_ends, last_beats), read-only
MAX_SLOTS = 1 << 14


def slots(offset, rows, cols, lanes, pair=False, stride=None):
    """(slot_ends, last_beats) of a run, computed once per shape (a stream of small
    descriptors has few shapes); the arrays are shared, read-only. With `stride` (not
    None), a strided job's (its retire ends, as the window uses them)."""
    key = (offset, rows, cols, lanes, pair, stride)
    hit = _SLOTS.get(key)
    if hit is None:
        if len(_SLOTS) >= MAX_SLOTS:
            _SLOTS.clear()
        if stride is None:
            ends = slot_ends(offset, rows, cols, lanes, pair)
            beats = last_beats(ends, lanes)
        else:
            ends, true_ends = strided_slot_ends(offset, stride, rows, cols, lanes)
            beats = last_beats(true_ends, lanes)
        ends.flags.writeable = beats.flags.writeable = False
        hit = _SLOTS[key] = (ends, beats)
    return hit


class Consumer:
    """The unpacker as a reader run's consumer (sim/dram_reader.run): the slots ending at
    `ends` (slot_ends) of a run whose beats wait in the buffer until cycle `floor`, when
    the unpacker becomes active. Called with the cycles the beats show, it returns the
    cycles they are pulled and keeps each slot's cycle in `times`. dram_reader.run runs
    its fixed point compiled with `consume`, which computes the same."""

    def __init__(self, ends, last_beat, lanes, floor):
        self.ends, self.last_beat, self.lanes, self.floor = ends, last_beat, lanes, floor
        self.times = None

    def __call__(self, shown):
        available = np.maximum(shown, self.floor)
        self.times = slot_times(available, self.last_beat)
        return pull_times(available, self.times, self.ends, self.lanes)


@numba.njit(cache=True)
def consume(shown, floor, ends, last_beat, lanes):
    """Consumer's call, compiled: (each slot's cycle, each beat's pull) as slot_times and
    pull_times compute them (the same max-plus scans, as loops). Compiled into
    sim/dram_reader.py's fixed point, whose numba cache does not see edits here:
    tests/unit/test_model_speed.py compares the two paths."""
    beats, count = len(shown), len(last_beat)
    if count and last_beat[count - 1] >= beats:
        raise IndexError("a slot past the run's beats")
    available = np.empty(beats, np.int64)
    pulled = np.empty(beats, np.int64)
    best = -(1 << 62)
    for i in range(beats):
        available[i] = max(shown[i], floor)
        best = max(best, available[i] - i)
        pulled[i] = i + best
    times = np.empty(count, np.int64)
    best = -(1 << 62)
    for s in range(count):
        best = max(best, pulled[last_beat[s]] + 1 - s)
        times[s] = s + best
    pulls = np.empty(beats, np.int64)
    best = -(1 << 62)
    retiring = 0
    for q in range(beats):
        gate = 0
        if q >= WINDOW_BEATS:
            # the first slot that reaches the end of beat q - WINDOW_BEATS retires it
            end = (q - WINDOW_BEATS + 1) * lanes
            while retiring < count and ends[retiring] < end:
                retiring += 1
            if retiring == count:
                raise IndexError("a beat no slot retires")
            gate = times[retiring]
        best = max(best, max(available[q], gate) - q)
        pulls[q] = q + best
    return times, pulls
