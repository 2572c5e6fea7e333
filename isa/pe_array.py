"""How the PE array lays a weight matrix onto its lanes, and in which order it adds.

This is part of the arithmetic contract: the RTL (`hw/compute_unit.py`), the golden model
(`sim/golden.py`) and the cycle model all follow it.

The weights W (K x N, row-major, FP16) stream from DRAM one LANES-element chunk per cycle.

- **Row packing.** A chunk holds `pack` whole rows of W when N <= LANES / 2: `pack` is the
  largest power of two with pack * N <= LANES, and packed row r (k = g * pack + r) sits in
  lanes r * N .. r * N + N - 1. Otherwise (`pack` = 1) a row takes `n_words` =
  ceil(N / LANES) chunks, word w holding columns w * LANES .. w * LANES + LANES - 1. A chunk
  is one k-group g: `pack` consecutive rows (the last group may hold fewer).
- **Interleaved partial sums.** The FP32 adder is pipelined, ACC_INTERLEAVE cycles from
  reading an accumulator to writing it back, so a word may not be updated again sooner.
  Each lane keeps `sets` partial sums per word, `sets` = ceil(ACC_INTERLEAVE / n_words):
  k-group g adds into set g mod sets. Every partial sum starts from +0 and adds its
  products one RNE add at a time, in order of g.
- **Fold at readout.** Per output: the sets are added in order, ((s0 + s1) + s2); then, with
  packed rows, a pairwise lane tree: for h = pack/2, pack/4, .., 1, lane r*N + n adds lane
  (r + h) * N + n for r < h. The result is rounded once to FP16 (RNE).

- **One input row: k-groups over two PE rows.** A stage with a single input row (GEMV,
  and every stage of a one-row ATTENTION or LORA_XAB) leaves the other PE rows idle, and
  one chunk per cycle cannot keep up with the DRAM port when a chunk leaves lanes empty
  (N = 24 fills 24 of 32 lanes). Such a stage gives k-group g to PE row g mod SPLIT_ROWS
  (both rows hold the input row), so that two chunks of consecutive k-groups can go in
  one cycle (`pairs_with_next`): the last chunk of group g with the first chunk of group
  g + 1. Each PE row keeps its own sets, group g in set (g div SPLIT_ROWS) mod sets; the
  fold adds PE row 0's sets in order, then PE row 1's, then the lane tree. Which groups
  share a cycle never changes the sums, only the time.

- **Transposed (TRANS_W): a dot product per stored row.** The device matrix S is stored
  N x K (out[m, n] = sum_k X[m, k] S[n, k]) and streams as its rows: a chunk holds `pack`
  whole rows of S when K is a power of two <= LANES (pack = LANES / K), else one chunk of
  a row (`chunks` = ceil(K / LANES) per row, lanes past the row +0). Lane j multiplies
  its element by X[m, k] (k = j mod K, or the chunk's first column + j), and each PE row
  reduces the products with a pairwise tree in lane order: level l adds the values of
  level l - 1 two by two, (v[2i] + v[2i + 1]), RNE; with packing a row's value is its K
  lanes' tree (level log2 K), else the whole chunk's (level log2 LANES). A row of several
  chunks adds its chunks' values into `sets` = ACC_INTERLEAVE interleaved partial sums,
  chunk c into set c mod 3 (its first from +0), then ((s0 + s1) + s2) over the sets that
  received one. No packing by a K that is not a power of two: such rows take a chunk
  each.

A partial sum that started from +0 is never -0, so a set, a PE row or a packed row that
received no product (+0) adds exactly: the order above is the whole definition, whatever
K is. With N >= LANES * ACC_INTERLEAVE and more than one input row this is plain
accumulation in order of k.

Where the partial sums live, and the order the chunks stream in, are not part of the
arithmetic above (each partial sum adds its products in the same order either way), only
of the energy and the time: the PE array never reads the output buffer. Each PE row keeps
the partial sums it is adding into in ACC_SLOTS slot registers, slot = the word's
accumulator address mod ACC_SLOTS, and writes a partial sum into the output buffer once,
from the chunk of the last k-group its PE row adds into its set (`Plan.last_from`).

- **Narrow stages** (`Plan.slotted`: sets x n_words <= ACC_SLOTS, N <= ACC_SLOTS x LANES)
  stream W row by row, as above: all their partial sums are in the slots at once.
- **Wide stages** (n_words > ACC_SLOTS, one set) stream W in *column tiles*
  (`tiles`): a tile is `width` consecutive words (at most ACC_SLOTS, at least
  ACC_INTERLEAVE), and streams k-group by k-group, the tile's words of k-group g, then of
  g + 1: a word's chunks are `width` chunks apart (2 x `width` on a PE row with the split),
  never closer than the adder's ACC_INTERLEAVE cycles. Tiles are ACC_SLOTS words from the
  left; the last takes what is left when that is ACC_INTERLEAVE or more, else the last two
  share the last ACC_SLOTS + r words as ACC_SLOTS + r - 3 and 3 (`tile_width`). A tile's
  row of W is its own DRAM run (hw/unpacker.py `strided`), the row after N elements on.

Which PE rows a stage's chunks enter (`Route`, hw/chunk_dispatch.py) is not part of the
arithmetic either but for the split: each PE row multiplies its own input row, so a stage
on PE row 1 alone (`Route.ROW1`) computes input row 1's outputs in the order of a stage of
several input rows.
"""
import dataclasses
import enum

ACC_INTERLEAVE = 3          # cycles from an accumulator's read to its write-back (FP32 adder stages)
SPLIT_ROWS = 2              # PE rows a one-row stage spreads its k-groups over
ACC_SLOTS = 8               # accumulator words a PE row keeps in registers (a power of two)
assert ACC_SLOTS >= 2 * ACC_INTERLEAVE and ACC_SLOTS & (ACC_SLOTS - 1) == 0, \
    "two words of two sets fit, a tile splits into two of ACC_INTERLEAVE words at least, " \
    "and a slot is the low bits of the accumulator address (a tile's words are consecutive)"


class Route(enum.IntEnum):
    """Which PE rows a stage's chunks enter (hw/chunk_dispatch.py `route`)."""
    ALL = 0                 # every PE row, the same chunk: each row multiplies its input row
    SPLIT = 1               # k-group g to PE row g mod SPLIT_ROWS: a plain stage of one input row
    ROW0 = 2                # PE row 0 alone
    ROW1 = 3                # PE row 1 alone

    @classmethod
    def of_stage(cls, in_rows: int, trans: bool, decode_stage: int | None = None) -> "Route":
        """A stage's route as the control unit gives it: a decode step's ATTENTION
        (isa/validate.py decode_attention; `decode_stage` its stage, 0 or 1) has q K^T on
        PE row 0 and S V on PE row 1, each over its own input row; else the split for a
        plain stage of one input row (`Plan.split`), else every PE row."""
        if decode_stage is not None:
            return cls.ROW1 if decode_stage else cls.ROW0
        return cls.SPLIT if in_rows == 1 and not trans else cls.ALL

    def row_groups(self, groups: int) -> tuple[int, ...]:
        """The k-groups each of the SPLIT_ROWS PE rows receives, of a stage's `groups`."""
        if self is Route.SPLIT:
            return tuple(-(-(groups - q) // SPLIT_ROWS) for q in range(SPLIT_ROWS))
        return tuple(groups if self is Route.ALL or q == self - Route.ROW0 else 0 for q in range(SPLIT_ROWS))


@dataclasses.dataclass(frozen=True)
class Plan:
    pack: int               # rows of W per chunk
    n_words: int            # chunks per row group (accumulator words per output row)
    sets: int               # interleaved partial sums per word (per PE row)
    split: int              # PE rows the k-groups go round: SPLIT_ROWS for one input row, else 1

    def sets_used(self, k: int) -> list[int]:
        """Per PE row of the split, the sets that receive a k-group for K = k."""
        return [min(self.sets, g) for g in self.row_groups(k)]

    def fold_steps(self, k: int) -> int:
        """Adds per output at readout for K = k: the sets that received a k-group, over
        the PE rows of the split, then the lane tree."""
        return sum(self.sets_used(k)) - 1 + (self.pack.bit_length() - 1)

    @property
    def slotted(self) -> bool:
        """Whether all the partial sums fit the slots at once (W streams row by row); else
        W streams in column tiles (`tiles`)."""
        return self.sets * self.n_words <= ACC_SLOTS

    def tiles(self) -> list[tuple[int, int]]:
        """(first word, words) of each column tile: one tile of every word when slotted."""
        if self.slotted:
            return [(0, self.n_words)]
        out, w0 = [], 0
        while w0 < self.n_words:
            width = tile_width(self.n_words - w0)
            out.append((w0, width))
            w0 += width
        return out

    def row_groups(self, k: int) -> list[int]:
        """Per PE row of the split, the k-groups it receives for K = k."""
        groups = -(-k // self.pack)
        return [-(-(groups - q) // self.split) for q in range(self.split)]

    def last_from(self, k: int) -> list[int]:
        """Per PE row of the split, its first k-group (counted in the row) that is the last
        of its set for K = k: a slotted stage writes that group's chunks' sums into the
        output buffer."""
        return [max(g - self.sets, 0) for g in self.row_groups(k)]

    def pairs_with_next(self, g: int) -> bool:
        """Whether k-group g's last chunk and k-group g + 1's first go in one cycle: with the
        split, at every group boundary, except that a one-chunk group pairs once (g even)."""
        return self.split > 1 and (self.n_words > 1 or g % 2 == 0)


def tile_width(words_left: int) -> int:
    """The words of a wide stage's next column tile when `words_left` words of each row are
    left (a tile after it keeps ACC_INTERLEAVE words at least)."""
    if words_left <= ACC_SLOTS:
        return words_left
    if words_left < ACC_SLOTS + ACC_INTERLEAVE:
        return words_left - ACC_INTERLEAVE
    return ACC_SLOTS


def plan(n: int, lanes: int, in_rows: int) -> Plan:
    """The plan for N output columns on `lanes` lanes (N >= 1) and `in_rows` input rows
    in the stage."""
    if n < 1:
        raise ValueError(f"N must be >= 1, got {n!r}")
    pack = 1
    while 2 * pack * n <= lanes:
        pack *= 2
    n_words = -(-n // lanes)
    return Plan(pack, n_words, -(-ACC_INTERLEAVE // n_words), SPLIT_ROWS if in_rows == 1 else 1)


@dataclasses.dataclass(frozen=True)
class TransPlan:
    """How a transposed stage (TRANS_W, stored N x K) lays S onto the lanes."""
    pack: int               # rows of S per chunk
    chunks: int             # chunks per row of S
    level: int              # the tree level that holds a row's value (for chunks = 1)
    sets: int               # partial sums of a row's chunks (chunks > 1)

    def fold_adds(self) -> int:
        """Adds of the sets after a row's last chunk: 0, 1 or 2."""
        return min(self.chunks, self.sets) - 1 if self.chunks > 1 else 0

    def write_cycle(self, lanes: int) -> int:
        """Cycles from a chunk entering the PE array to the write of its row's value into
        the output buffer (hw/compute_unit.py): its products, then the tree's levels (and,
        with several chunks a row, the set's add and the fold's), each an add."""
        from .microarch import ADD_CYCLES, PRODUCT_CYCLES
        if self.chunks == 1:
            return PRODUCT_CYCLES + ADD_CYCLES * self.level
        return PRODUCT_CYCLES + ADD_CYCLES * (self.level + 1 + self.fold_adds())


def lane_sources(j: int, lanes: int) -> tuple[int, ...]:
    """The input elements, counted from the chunk's first, that lane j can multiply by:
    packed row j // N for any N (0 once N > j, and without packing), or, transposed,
    j mod K for any power of two K <= LANES. Ascending, 0 first. There are few: the
    values of j // N are at most 2 sqrt(j) + 1, so the RTL picks a lane's operand among
    these out of the input line rotated to the chunk's first element (hw/compute_unit.py)
    rather than among all LANES elements (30.9 a lane on average at 512 lanes)."""
    if not 0 <= j < lanes:
        raise ValueError(f"lane {j!r} is outside 0 .. {lanes - 1}")
    packed = {j // n for n in range(1, j + 2)}
    transposed = {j & ((1 << t) - 1) for t in range((lanes - 1).bit_length() + 1)}
    return tuple(sorted(packed | transposed))


def trans_line_cycles(lanes: int) -> int:
    """Cycles a transposed chunk's control stays in the compute unit's delay line (its
    latest use: a row of several chunks, its tree, the set's add and two fold adds). A
    stage that changes the compute unit's mode waits this long after a transposed chunk,
    so no control of it meets the new mode's taps (hw/compute_unit.py)."""
    from .microarch import ADD_CYCLES, PRODUCT_CYCLES
    return PRODUCT_CYCLES + ADD_CYCLES * ((lanes - 1).bit_length() + 3)


def trans_plan(k: int, lanes: int) -> TransPlan:
    """The plan of a transposed stage with K = k columns per stored row."""
    if k < 1:
        raise ValueError(f"K must be >= 1, got {k!r}")
    lane_log2 = (lanes - 1).bit_length()
    if k <= lanes and k & (k - 1) == 0:
        return TransPlan(lanes // k, 1, (k - 1).bit_length(), ACC_INTERLEAVE)
    return TransPlan(1, -(-k // lanes), lane_log2, ACC_INTERLEAVE)
