"""boost/reproduce.py: the add-kernel study behind the claims, and the verdicts."""
import math

import pytest

from boost.config import load_machine
from boost.reproduce import add_kernel_study
from serving.claims import Claim


def test_add_kernel_study_small():
    m = load_machine("gh200")
    s = add_kernel_study(m, instances=40)
    assert s.bappr_waves == 40 * 7
    assert s.bappr_wave_mean == pytest.approx(m.alpha, abs=0.006)
    assert s.bappr_wave_std == pytest.approx(math.sqrt(m.alpha * (1 - m.alpha) / 66), rel=0.15)
    assert s.ideal_gain == pytest.approx(m.alpha, rel=1e-9)
    assert s.cap_gains[round(1 / 12, 6)] == pytest.approx(0.077, abs=0.002)
    assert s.mpp_gain > s.weighted_gain > s.bappr_gain
    # MPP's full waves hold 2 or 3 of every 33 pages of each input on the second tier
    assert set(s.mpp_full_wave_ratios.round(6)) <= {round(2 / 33, 6), round(3 / 33, 6)}


def test_claim_verdicts():
    assert Claim("x", 7.4, 7.7).within and not Claim("x", 4.2, 7.46).within
    assert math.isnan(Claim("x", 0, 1).ratio) and not Claim("x", 0, 1).within
