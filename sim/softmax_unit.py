"""Model of hw/softmax_unit.py: its cycles from `start` to `done`, and its results (from
the golden model, sim/golden.py `softmax_rows`; no copy of the arithmetic).

Cycle 0 is the `start` cycle; W = ceil(length / L), L the unit's lanes (cfg.softmax_lanes),
lg = log2(L), S the max tree's
stages (isa.microarch.softmax_max_stages), ADD the FP32 adder's cycles:
    MAX W, MWAIT S, EXP W, EDRAIN SOFTMAX_EXP_DRAIN, COMB1, COMB2 and TREE: `adds` x ADD,  then
    partial:    FIN
    normalized: RECIP 1 + 26, OUT W, ODRAIN SOFTMAX_OUT_DRAIN, FIN
    length 0:   FIN at once                           -> 1
Partial, the last probabilities are presented (`written`) SOFTMAX_E_AT + 1 cycles after the
last EXP read: 2W + S + SOFTMAX_E_AT + 1.
"""
import numpy as np

from isa.microarch import ADD_CYCLES, SOFTMAX_E_AT, softmax_max_stages
from isa.microarch import SOFTMAX_EXP_DRAIN as EXP_DRAIN
from isa.microarch import SOFTMAX_OUT_DRAIN as OUT_DRAIN

from . import golden

RECIP = 1 + 26         # the divider's start cycle, then hw/fp_sfu.py RECIP_CYCLES


def adds(length, lanes):
    """The lane adders' steps after the exp pass: p0 + p1 with a second word, + p2 with a
    third, and the tree's levels but those whose partner lanes all lie past a one-word
    row's end (each of those steps would add +0 to every partial sum)."""
    words = -(-length // lanes)
    lg = lanes.bit_length() - 1
    levels = lg if words > 1 else (length - 1).bit_length()
    return (words >= 2) + (words >= 3) + levels


def cycles(length, partial, cfg):
    """Cycles from the `start` cycle to the `done` cycle of one row."""
    if length == 0:
        return 1
    lanes = cfg.softmax_lanes
    words = -(-length // lanes)
    n = words + softmax_max_stages(lanes) + words + EXP_DRAIN + adds(length, lanes) * ADD_CYCLES
    if not partial:
        n += RECIP + words + OUT_DRAIN
    return n + 1


def written_cycles(length, cfg):
    """Partial: cycles from the `start` cycle to the `written` cycle (the last destination
    word presented); None for length 0 (nothing written, `done` at once)."""
    if length == 0:
        return None
    words = -(-length // cfg.softmax_lanes)
    return 2 * words + softmax_max_stages(cfg.softmax_lanes) + SOFTMAX_E_AT + 1


class SoftmaxUnit:
    def __init__(self, cfg):
        self.cfg = cfg

    def cycles(self, length, partial):
        return cycles(length, partial, self.cfg)

    def run(self, x32, partial):
        """(out float16 [n], m float32, l float32, cycles) of one FP32 row."""
        x32 = np.asarray(x32, dtype=np.float32)
        out, m, l = golden.softmax_rows(x32[None, :], partial, self.cfg.softmax_lanes)
        return out[0], m[0], l[0], self.cycles(x32.shape[0], partial)
