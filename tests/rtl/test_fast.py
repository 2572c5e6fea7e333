"""pytest entry of the fast co-simulation path (ndp_fast_top + FastRtlTransport): its own
correctness bench and, one item each, every scenario it supports (scenarios.ALL less
FastBackend.unsupported), on both configs; `-k <scenario>` selects one. The speed bench is
separate: rtlbench/bench_fast.py and `make bench`."""
import pytest

from rtlbench import scenarios
from rtlbench.cocotb_fast import FastBackend

# every scenario idle and under random stalls on every channel (cocotb_scenarios.py)
CASES = [("cocotb_fast", "correctness", False)] + [
    ("cocotb_scenarios", name, stalled) for name in scenarios.ALL if name not in FastBackend.unsupported
    for stalled in (False, True)]


def launch_of(config, module, testcase, stalled):
    """How an item runs (tests/rtl/conftest.py: the items of one launch)."""
    return True, module, testcase, config, {"NDP_BACKPRESSURE": "1"} if stalled else None


@pytest.mark.parametrize("module,testcase,stalled", CASES,
                         ids=[testcase + ("-backpressure" if stalled else "") for _, testcase, stalled in CASES])
@pytest.mark.parametrize("config", ["default", "small"])
def test_fast(config, module, testcase, stalled, launches):
    launches.run(*launch_of(config, module, testcase, stalled))


def test_roofline_periods_match_the_model():
    """Back-to-back periods of the roofline's kinds on the RTL (fast path) against the model,
    on the default config: the overlap of descriptors (front end, two accumulator banks,
    posted writes) is modelled, not only each descriptor alone. Each run also checks every
    copy's status and the first result against the golden model."""
    import isa
    from rtlbench import roofline
    cfg = isa.load_config("default")
    works = [roofline.Workload("gemv", 1, 512, 16), roofline.Workload("gemv^T", 1, 512, 16),
             roofline.Workload("gemv", 1, 64, 1024), roofline.Workload("e4", 8, 512, 16),
             roofline.Workload("e3", 1, 256, 16), roofline.Workload("attention^T", 2, 64, 128),
             roofline.Workload("attention", 1, 64, 128)]
    model = roofline.model_results(cfg, works, copies=6)
    rtl = roofline.rtl_results("default", works, copies=6)
    for w, m, r in zip(works, model, rtl):
        assert abs(r["period"] - m["period"]) <= 0.02 * r["period"], (w.name, r["period"], m["period"])
