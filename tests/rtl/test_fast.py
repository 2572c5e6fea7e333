"""pytest entry of the fast co-simulation path (ndp_fast_top + FastRtlTransport): its own
correctness bench and every scenario it supports, on both configs. The speed bench is
separate: tests/rtl/bench_fast.py and `make bench`."""
import pytest

from runner import run_fast


@pytest.mark.parametrize("config", ["default", "small"])
@pytest.mark.parametrize("module,testcase", [("cocotb_fast", "correctness"), ("cocotb_scenarios", None)])
def test_fast(module, testcase, config):
    run_fast(module, testcase=testcase, config=config)
