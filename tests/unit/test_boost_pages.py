"""boost/pages.py: PAM's MPP, superpages and LPP, and BAPP-R / weighted / proportional."""
import math

import numpy as np
import pytest

from boost.pages import Pam, Placement, bapp_r, lpp, mpp, superpage_bytes

P = 2 << 20


def test_mpp_is_k_hbm_pages_then_one():
    t = mpp(36, 12)
    assert list(np.flatnonzero(t)) == [11, 23, 35]
    assert t.sum() / len(t) == pytest.approx(1 / 12)


@pytest.mark.parametrize("n, m", [(33, 12), (66, 12), (7, 11), (100, 28)])
def test_any_window_of_mpp_holds_floor_or_ceil_of_its_share(n, m):
    t = mpp(10 * m + n, m)
    counts = {int(t[i:i + n].sum()) for i in range(10 * m)}
    assert counts <= {n // m, -(-n // m)}


def test_lpp_puts_the_last_share_on_the_second_tier():
    t = lpp(24, 1 / 12)
    assert list(t) == [0] * 22 + [1] * 2
    assert lpp(5, 0).sum() == 0


def test_bapp_r_is_binomial():
    rng = np.random.default_rng(3)
    draws = np.array([bapp_r(66, 0.1, rng).mean() for _ in range(4000)])
    assert draws.mean() == pytest.approx(0.1, abs=0.003)
    assert draws.std() == pytest.approx(math.sqrt(0.1 * 0.9 / 66), rel=0.05)


def test_superpages_are_the_lcm():
    MiB = 1 << 20
    assert superpage_bytes(3584 * 1024, P) == 14 * MiB      # section 4.4's Llama down-projection
    assert superpage_bytes(1 * MiB, P) == P
    assert superpage_bytes(4 * MiB, P) == 4 * MiB
    with pytest.raises(ValueError, match="footprint_bytes must be an integer >= 1"):
        superpage_bytes(0, P)


def test_boost_superpages_keep_every_footprint_on_one_tier():
    fp = 3584 * 1024
    pl = Pam("boost", 12, P).place(64 * fp, fp)
    starts = np.arange(64) * fp
    second = pl.second_bytes_in(starts, starts + fp)
    assert set(second.tolist()) <= {0, fp}
    assert second.sum() == fp * 4       # 16 superpages of 4 footprints, one on the second tier
    plain = Pam("mpp-pages", 12, P).place(64 * fp, fp)
    s2 = plain.second_bytes_in(starts, starts + fp)
    assert ((s2 > 0) & (s2 < fp)).any()   # pages alone split footprints


def test_second_bytes_in_matches_a_byte_by_byte_reference():
    rng = np.random.default_rng(0)
    page = 64
    tiers = rng.integers(0, 2, 20).astype(np.int8)
    pl = Placement(20 * page - 10, page, tiers)
    per_byte = np.repeat(tiers, page)[: pl.nbytes].astype(np.int64)
    s = rng.integers(0, pl.nbytes - 1, 200)
    e = np.minimum(pl.nbytes, s + rng.integers(1, 300, 200))
    ref = np.array([per_byte[a:b].sum() for a, b in zip(s, e)])
    assert np.array_equal(pl.second_bytes_in(s, e), ref)


def test_weighted_continues_across_tensors_and_boost_restarts():
    w = Pam("weighted", 12, P)
    a, b = w.place(7 * P), w.place(7 * P)
    assert a.tiers.sum() == 0 and b.tiers[4] == 1     # page 11 of the stripe
    m = Pam("boost", 12, P)
    assert m.place(7 * P).tiers.sum() == 0 and m.place(7 * P).tiers.sum() == 0
    assert Pam("proportional", 12, P).place(24 * P).tiers[-2:].tolist() == [1, 1]
    assert Pam("hbm", 12, P).place(24 * P).tiers.sum() == 0


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="modulus must be an integer >= 2"):
        mpp(10, 1)
    with pytest.raises(ValueError, match="n_pages must be an integer >= 0"):
        mpp(-1, 12)
    with pytest.raises(ValueError, match="share must be in"):
        lpp(10, 1.5)
    with pytest.raises(ValueError, match="policy must be one of"):
        Pam("random", 12, P)
    with pytest.raises(ValueError, match="tensor bytes must be an integer >= 1"):
        Pam("boost", 12, P).place(0)
    with pytest.raises(ValueError, match="alpha must be in"):
        bapp_r(10, 0, np.random.default_rng())
