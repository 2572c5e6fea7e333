"""boost/churn.py: DSR's realized host fraction under Poisson churn (Fig. 19), small."""
import pytest

from boost.churn import simulate
from boost.config import load_machine, load_model


def test_dsr_holds_one_twelfth_within_one_point_under_churn():
    r = simulate(load_machine("gh200"), load_model("qwen3-30b-a3b"), requests=300, warmup_s=30.0, window=200)
    assert len(r.fraction) > 1000 and r.finished == 300
    assert r.median == pytest.approx(1 / 12, abs=0.005)
    assert r.within(1 / 12, 0.01) > 0.95
    assert r.window_medians.min() > 1 / 12 - 0.01 and r.window_medians.max() < 1 / 12 + 0.01
