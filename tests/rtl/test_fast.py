"""pytest entry of the fast co-simulation path (ndp_fast_top + FastRtlTransport): the
correctness bench on both configs. The speed bench is separate: tests/rtl/bench_fast.py."""
import pytest

from runner import run_fast


@pytest.mark.parametrize("config", ["default", "small"])
def test_fast_correctness(config):
    run_fast("cocotb_fast", testcase="correctness", config=config)
