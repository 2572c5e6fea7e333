"""Model of hw/softmax_unit.py: its cycles from `start` to `done`, and its results (from
the golden model, sim/golden.py `softmax_rows`; no copy of the arithmetic).

Cycle 0 is the `start` cycle; W = ceil(length / LANES), lg = log2(LANES):
    MAX W, MDRAIN 1, MRED 1, EXP W, EDRAIN 4, COMB 2, TREE lg       then
    partial:    FIN                                   -> 2W + lg + 9
    normalized: RECIP 1 + 26, OUT W, ODRAIN 5, FIN    -> 3W + lg + 41
    length 0:   FIN at once                           -> 1
"""
import numpy as np

from isa.microarch import SOFTMAX_EXP_DRAIN as EXP_DRAIN, SOFTMAX_OUT_DRAIN as OUT_DRAIN

from . import golden

MAX_DRAIN = 1          # the last word folds into the lane maxima
MAX_REDUCE = 1         # m over the lanes
COMBINE = 2            # (p0 + p1) + p2 per lane
RECIP = 1 + 26         # the divider's start cycle, then hw/fp_sfu.py RECIP_CYCLES


def cycles(length, partial, cfg):
    """Cycles from the `start` cycle to the `done` cycle of one row."""
    if length == 0:
        return 1
    lanes = cfg.lanes
    words = -(-length // lanes)
    n = words + MAX_DRAIN + MAX_REDUCE + words + EXP_DRAIN + COMBINE + (lanes.bit_length() - 1)
    if not partial:
        n += RECIP + words + OUT_DRAIN
    return n + 1


class SoftmaxUnit:
    def __init__(self, cfg):
        self.cfg = cfg

    def cycles(self, length, partial):
        return cycles(length, partial, self.cfg)

    def run(self, x32, partial):
        """(out float16 [n], m float32, l float32, cycles) of one FP32 row."""
        x32 = np.asarray(x32, dtype=np.float32)
        out, m, l = golden.softmax_rows(x32[None, :], partial, self.cfg.lanes)
        return out[0], m[0], l[0], self.cycles(x32.shape[0], partial)
