"""boost/step.py: a decode step per policy."""
import pytest

from boost.config import load_machine, load_model
from boost.step import DecodeStep, weight_gemms

M = load_machine("gh200")


@pytest.fixture(scope="module")
def llama():
    return DecodeStep(M, load_model("llama3.3-70b"), batch=10, context=2560)


def test_hbm_only_reads_every_byte_at_hbm_bandwidth_without_the_budget():
    m = load_model("llama3.3-70b")
    d = DecodeStep(M.with_(hbm_sm_fraction=0, second_sm_fraction=0), m, batch=4, context=512)
    t = d.time("hbm")
    assert t.second_bytes == 0
    assert t.hbm_bytes == pytest.approx(d.weight_bytes() + d.kv_bytes())
    assert t.seconds == pytest.approx((d.weight_bytes() + d.kv_bytes()) / M.hbm_bytes_per_s, rel=1e-9)


def test_policies_order_as_table_4(llama):
    t = {p: llama.time(p) for p in ("hbm", "boost", "weighted", "proportional")}
    base = t["hbm"].seconds
    assert base / t["boost"].seconds > 1.03                      # BOOST gains
    assert abs(base / t["weighted"].seconds - 1) < 0.03           # weighted interleave barely moves
    assert base / t["proportional"].seconds < 0.8                 # linear placement serializes the tail
    assert t["boost"].second_bytes / (t["boost"].hbm_bytes + t["boost"].second_bytes) < 1 / 12
    pf, off = llama.prefetch(t["hbm"])
    assert off == 6 * sum(a * b for _, a, b in weight_gemms(llama.model))   # 80 // 12 layers
    assert base / pf < 1


def test_bad_policy_and_shape():
    with pytest.raises(ValueError, match="policy must be one of"):
        DecodeStep(M, load_model("tiny"), 1, 16).time("random")
    with pytest.raises(ValueError, match="batch and context must be >= 1"):
        DecodeStep(M, load_model("tiny"), 0, 16)
