"""pytest entry points of the Verilator bench on ndp_device (cocotbext-axi): one item per
scenario of scenarios.py (those the backend supports) and config, each running only that
cocotb test, so `-k <scenario>` selects one. New scenarios are picked up from scenarios.ALL.

The default config runs every scenario; a second, smaller config (2 rows, 2 queues, smaller
buffers) runs them too, so that nothing hard-codes the default. The small config is a second
ndp_device build (about 3 minutes on two cores): tests/conftest.py keeps it out of `make
test` unless NDP_RTL_CONFIGS names it, and `make test-rtl-configs` runs it; its fast-path
runs (test_fast.py) stay in `make test`.
"""
import pytest

from rtlbench import scenarios
from rtlbench.env import DeviceEnv

SCENARIOS = [name for name in scenarios.ALL if name not in DeviceEnv.unsupported]


def launch_of(config, scenario):
    """How an item runs (tests/rtl/conftest.py: the items of one launch)."""
    return False, "cocotb_scenarios", scenario, config, None


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("config", ["default", "small"])
def test_scenarios_on_rtl(config, scenario, launches):
    launches.run(*launch_of(config, scenario))
