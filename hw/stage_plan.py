"""A descriptor's stages and DRAM runs, as combinational logic: one definition for the
front end's fetcher (which starts the runs) and the control unit (which consumes them in
the same order). The arithmetic is `isa/pe_array.py`'s plan.

A read-compute descriptor runs per group of up to ROWS input rows: the group's input
rows (one run from the submission slot), then per stage its weights as two runs: the
k-groups of whole packs, then the last k-group (K mod pack rows of N) when K is not a
multiple of the packing.
"""
from amaranth import Cat, Const, Mux, Signal

from isa import Op
from isa.pe_array import ACC_INTERLEAVE, ACC_SLOTS
from isa.slots import LINE_BYTES


def stage_count(desc):
    """Weight stages of the op: 0 (SOFTMAX), 1 (GEMV, GEMM) or 2 (the chains)."""
    is_softmax = desc.op == Op.SOFTMAX
    chained = (desc.op == Op.ATTENTION) | (desc.op == Op.LORA_XAB)
    return Mux(is_softmax, 0, Mux(chained, 2, 1))


def stage_operand(desc, second_addr, stage):
    """Stage `stage`'s weights (isa/validate.py stages): (address, K, N, transposed). Stage
    0's are stored K x N, or with TRANS_W N x K; stage 1's start at `second_addr` (the
    decoder's: the 64-byte line after stage 0's), K and N swapped (x A, then . B; q K^T,
    then S V)."""
    trans = desc.flags.trans_w
    k0, n0 = Mux(trans, desc.dev_cols, desc.dev_rows), Mux(trans, desc.dev_rows, desc.dev_cols)
    return (Mux(stage, second_addr, desc.dev_addr), Mux(stage, n0, k0), Mux(stage, k0, n0), trans & ~stage)


def packing(m, n, lanes, name):
    """log2 of the plan's packing for N = n: the largest pack with pack * n <= LANES."""
    lane_bits = (lanes - 1).bit_length()
    log2 = Signal(range(lane_bits + 1), name=name)
    for p in range(lane_bits + 1):
        with m.If((n << p) <= lanes):
            m.d.comb += log2.eq(p)
    return log2


def trans_packing(m, k, lanes, name):
    """A transposed stage's plan for K = k (isa/pe_array.py trans_plan): (log2 of the rows
    of S per chunk, the tree level of a row's value, whether a row takes several chunks,
    the adds of its sets after its last chunk)."""
    lane_bits = (lanes - 1).bit_length()
    pack_log2 = Signal(range(lane_bits + 1), name=f"{name}_pack_log2")
    level = Signal(range(lane_bits + 1), name=f"{name}_level")
    scalar, fold_adds = Signal(name=f"{name}_scalar"), Signal(range(3), name=f"{name}_fold_adds")
    m.d.comb += [level.eq(lane_bits), scalar.eq(k > lanes),
                 fold_adds.eq(Mux(k > 2 * lanes, 2, Mux(k > lanes, 1, 0)))]
    for p in range(lane_bits + 1):
        with m.If(k == (1 << p)):
            m.d.comb += [pack_log2.eq(lane_bits - p), level.eq(p)]
    return pack_log2, level, scalar, fold_adds


def run_beats_of(offset, elems, lanes):
    """Beats of a run of `elems` elements starting `offset` elements into its first beat."""
    lane_bits = (lanes - 1).bit_length()
    return (offset + elems + lanes - 1) >> lane_bits


def run_span(m, base, elem, elems, cfg, name):
    """A run of `elems` FP16 elements from element `elem` of an array at `base` (a line's
    address): (the address of its first line, its lines, and, for the unpacker, the
    elements before it in its first beat and its beats). A beat holds a line of every
    channel, at the slots of their addresses, so a run need not start at a beat."""
    line_log2 = (LINE_BYTES - 1).bit_length()
    beat_log2 = (cfg.beat_bytes - 1).bit_length()
    first = Signal(64, name=f"{name}_first")               # the byte address of its first element
    m.d.comb += first.eq(base + (elem << 1))
    line_addr = Signal(64, name=f"{name}_line")
    lines, offset, beats = Signal(44, name=f"{name}_lines"), Signal(beat_log2, name=f"{name}_offset"), Signal(44)
    m.d.comb += [line_addr.eq(Cat(Const(0, line_log2), first[line_log2:])),
                 lines.eq((first[:line_log2] + (elems << 1) + LINE_BYTES - 1) >> line_log2),
                 offset.eq(first[1:beat_log2]),
                 beats.eq(run_beats_of(offset, elems, cfg.lanes))]
    return line_addr, lines, offset, beats


def tile_span(words_left, elems_left, lanes):
    """A wide stage's column tile (isa/pe_array.py tile_width) where `words_left` words and
    `elems_left` elements of each row are left: (its words, its elements a row, whether
    another tile follows)."""
    lane_bits = (lanes - 1).bit_length()
    width = Mux(words_left <= ACC_SLOTS, words_left,
                Mux(words_left < ACC_SLOTS + ACC_INTERLEAVE, words_left - ACC_INTERLEAVE, ACC_SLOTS))
    more = words_left > ACC_SLOTS
    return width, Mux(more, width << lane_bits, elems_left), more
