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

A partial sum that started from +0 is never -0, so a set or a packed row that received no
product (+0) adds exactly: the order above is the whole definition, whatever K is.
With N >= LANES * ACC_INTERLEAVE this is plain accumulation in order of k.
"""
import dataclasses

ACC_INTERLEAVE = 3          # cycles from an accumulator's read to its write-back (FP32 adder stages)


@dataclasses.dataclass(frozen=True)
class Plan:
    pack: int               # rows of W per chunk
    n_words: int            # chunks per row group (accumulator words per output row)
    sets: int               # interleaved partial sums per word

    @property
    def fold_steps(self):
        """Adds per output at readout: the sets, then the lane tree."""
        return self.sets - 1 + (self.pack.bit_length() - 1)


def plan(n, lanes):
    """The plan for N output columns on `lanes` lanes (N >= 1)."""
    if n < 1:
        raise ValueError(f"N must be >= 1, got {n!r}")
    pack = 1
    while 2 * pack * n <= lanes:
        pack *= 2
    n_words = -(-n // lanes)
    return Plan(pack, n_words, -(-ACC_INTERLEAVE // n_words))


def acc_words(n, lanes):
    """Accumulator words one output row needs: every set of every word."""
    p = plan(n, lanes)
    return p.sets * p.n_words
