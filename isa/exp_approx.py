"""The constants of the softmax unit's exp approximation (part of the arithmetic contract,
like isa/pe_array.py): the RTL (`hw/fp_sfu.py`) and the golden model (`sim/golden.py`
`exp_approx`, which documents the formula) both take them from here.

    T = (trunc(d * 2^24) * LOG2E_Q) >> 30,  y = TAB[idx] + ((TAB[idx+1] - TAB[idx]) * frac) >> 18
"""
import math

LOG2E_Q = round(math.log2(math.e) * 2**30)                  # log2(e) in Q2.30
EXP_TAB = [round(2 ** (k / 64) * 2**23) for k in range(65)]  # 2^(k/64) in Q1.23; TAB[64] = 2^24
EXP_MIN = -104.0                                            # d below this gives +0
