"""Model of hw/stage_planner.py: the plan of one stage, as the planner registers it.

The arithmetic is isa/pe_array.py's (`plan`, `trans_plan`); this adds how the planner
holds it: the weights as runs of the unpacker (`full_groups` groups of 2^run_log2 rows of
`cols_dim` elements, then `rest_rows` rows), the fold's packing, the sets per PE row, and
the compute unit's mode. The RTL registers every field for every stage (a plain stage's
tree fields too), so the model does, and tests/unit/test_stage_planner.py ties them field
for field.
"""
import dataclasses
import functools

from isa.pe_array import SPLIT_ROWS, Route, plan as pe_plan, trans_plan


@dataclasses.dataclass(frozen=True)
class StagePlan:
    trans: bool             # the compute unit's mode: transposed
    pack_log2: int          # the fold unit's packing (0 transposed)
    n_words: int            # accumulator words per output row
    sets: int               # partial sums per word
    run_log2: int           # rows of the weights' stream per chunk
    cols_dim: int           # elements of one such row
    full_groups: int        # groups of whole packs: the first run's rows
    rest_rows: int          # rows of the last group: the second run's
    main_elems: int         # elements of the first run
    t_level: int            # a transposed stage's tree level of a row's value
    t_scalar: bool          # ... a row takes several chunks
    t_fold_adds: int        # ... adds of its sets after its last chunk
    sets_used: tuple        # per PE row, the sets that receive a k-group
    tiled: bool            # plain, more words than ACC_SLOTS: W in column tiles (isa/pe_array.py)
    last_from0: int         # per PE row, its first k-group that is the last of its set
    last_from1: int

    @property
    def mode(self):
        """What the compute unit's pipeline must hold while a chunk is in it."""
        return ("trans", self.t_level, self.t_scalar, self.t_fold_adds) if self.trans else ("normal",)

    @property
    def fold_steps(self):
        """Adds per output at readout (the readout's sets, sets1 and pack_log2): the sets
        that received a k-group, then the lane tree; 0 transposed."""
        return sum(self.sets_used) - 1 + self.pack_log2

    @property
    def pack(self):
        return 1 << self.run_log2

    def tiles(self, lanes):
        """A tiled stage's column tiles: (first word, its elements a row) of each
        (isa/pe_array.py tiles); one of the whole row otherwise."""
        from isa.pe_array import Plan
        words = Plan(self.pack, self.n_words, self.sets, 1).tiles()
        return [(w0, min(width * lanes, self.cols_dim - w0 * lanes)) for w0, width in words]


@functools.lru_cache(maxsize=4096)      # a pure function of a few ints, asked once a stage
def plan_stage(k, n, trans, in_rows, lanes, route=None):
    """The planner's registers for a stage of K = k, N = n (transposed: S stored N x K) with
    `in_rows` input rows on `lanes` lanes, its chunks on `route`'s PE rows (None: the
    control unit's, isa/pe_array.py Route.of_stage)."""
    if k < 1 or n < 1:
        raise ValueError(f"a stage needs K, N >= 1, got K={k!r}, N={n!r}")
    route = Route.of_stage(in_rows, trans) if route is None else Route(route)
    tree = trans_plan(k, lanes)
    # (the split's plan for a split stage, else one of several input rows: no split)
    normal = pe_plan(n, lanes, 1 if route is Route.SPLIT else SPLIT_ROWS)
    if trans:
        rows_dim, cols_dim, pack = n, k, tree.pack
        sets_used = (1, 0)
    else:
        rows_dim, cols_dim, pack = k, n, normal.pack
        used = normal.sets_used(k)
        sets_used = tuple(used + [0] * (SPLIT_ROWS - len(used)))
    # per PE row, from the plain packing's k-groups as the route spreads them (the planner
    # registers these for every stage)
    last_from = [max(g - normal.sets, 0) for g in route.row_groups(-(-k // normal.pack))]
    run_log2 = pack.bit_length() - 1
    full_groups, rest_rows = divmod(rows_dim, pack)
    return StagePlan(trans=bool(trans), pack_log2=0 if trans else normal.pack.bit_length() - 1,
                     n_words=normal.n_words, sets=normal.sets, run_log2=run_log2, cols_dim=cols_dim,
                     full_groups=full_groups, rest_rows=rest_rows, main_elems=full_groups * pack * cols_dim,
                     t_level=tree.level, t_scalar=tree.chunks > 1, t_fold_adds=tree.fold_adds(),
                     sets_used=sets_used, tiled=not trans and not normal.slotted,
                     last_from0=last_from[0], last_from1=last_from[1])
