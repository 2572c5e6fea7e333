"""Model of hw/chunk_dispatch.py: where each chunk of a stage goes, and the pipeline's
counters.

`chunks` lists, in stream order, each chunk the dispatch sends into the PE array, from
isa/pe_array.py's rules directly: chunk w of k-group g (plain: `pack` rows of W, word w of
n_words) goes to PE row g mod 2 with the split (one input row), else to the route's PE
rows (every row: a chunk for each, row 0's first); it adds into that row's set
(g div split) mod sets, accumulator word set * n_words + w, from +0 while
(g div split) < sets, and is its set's `last` from the row's group `last_from` on (its
sums go into the output buffer). A tiled stage streams its column tiles one after the
other, each as the whole row above over its words (word w0 + w). Transposed (rows of S),
chunk c of a row adds into set c mod 3, first while c < 3, and carries the row's first
output; the compute unit writes no accumulator
word from it (its row value goes to the output buffer), so its word and `first` are
left out (None).

`drain_cycles` and `busy_cycles` are the two counters each chunk sets: the cycles after it
until its sums are written, less one (the readout's fold starts in the cycle they are
written), and until no control of it is left in the compute unit (a stage in another mode
waits for them).
"""
import dataclasses

from isa.microarch import PIPE_DEPTH
from isa.pe_array import ACC_INTERLEAVE, SPLIT_ROWS, Route, trans_line_cycles, trans_plan


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One chunk into the PE array. A field a chunk's mode does not use is None: a plain
    chunk's t_* (the compute unit reads them only transposed), a transposed one's
    accumulator word and `first` (its row value goes to the output buffer, no word)."""
    pe_row: int             # the PE row it enters
    k_base: int             # plain: the first k of its group; transposed: its first column
    active: int             # its lanes holding weights
    acc_addr: int = None    # plain: the accumulator word it adds into
    first: bool = None      # plain: its partial sum starts from +0
    last: bool = None       # plain: its group is the last its PE row adds into its set
    t_out: int = None       # transposed: the output (row of S) of its first lanes
    t_set: int = None       # transposed: its set in the row
    t_first: bool = None    # transposed: its set's first chunk
    t_row_end: bool = None  # transposed: the row's last chunk


def chunks(plan, k, lanes, route):
    """Every chunk of a stage planned as `plan` (sim/stage_planner.py) with K = k, in stream
    order (plain: the k-groups of whole packs, then the last group; transposed: the rows of
    S, `pack` to a chunk), on `route`'s PE rows (isa/pe_array.py Route)."""
    route = Route(route)
    rows = [q for q in range(SPLIT_ROWS) if route in (Route.ALL, Route.SPLIT) or q == route - Route.ROW0]
    out = []
    if plan.trans:
        rows_of_s = plan.full_groups * plan.pack + plan.rest_rows
        for first_out in range(0, rows_of_s, plan.pack):
            # a chunk holds `pack` whole rows of S (the last group: the rows left), or a part of one
            elems = min(plan.pack, rows_of_s - first_out) * plan.cols_dim
            row_chunks = -(-elems // lanes)
            for c in range(row_chunks):
                out += [Chunk(q, c * lanes, min(lanes, elems - c * lanes), t_out=first_out, t_set=c % ACC_INTERLEAVE,
                              t_first=c < ACC_INTERLEAVE, t_row_end=c == row_chunks - 1) for q in rows]
        return out
    split_rows = SPLIT_ROWS if route is Route.SPLIT else 1
    last_from = (plan.last_from0, plan.last_from1)
    # (a stage that is not tiled is one tile of the whole row)
    for w0, cols in plan.tiles(lanes):
        for g in range(-(-k // plan.pack)):
            elems = min(plan.pack, k - g * plan.pack) * cols if plan.pack > 1 else cols
            seen = g // split_rows
            for w in range(-(-elems // lanes)):
                out += [Chunk(q, g * plan.pack, min(lanes, elems - w * lanes),
                              acc_addr=(seen % plan.sets) * plan.n_words + w0 + w, first=seen < plan.sets,
                              last=seen >= last_from[q]) for q in ([g % SPLIT_ROWS] if split_rows > 1 else rows)]
    return out


def drain_cycles(plan, lanes):
    """Cycles after a chunk until its sums are written, less one (hw: `drain` set to it)."""
    if plan.trans:
        return trans_plan(plan.cols_dim, lanes).write_cycle(lanes)
    return PIPE_DEPTH - 1


def busy_cycles(plan, lanes):
    """Cycles after a chunk until no control of it is left in the compute unit."""
    return trans_line_cycles(lanes) if plan.trans else PIPE_DEPTH - 1
