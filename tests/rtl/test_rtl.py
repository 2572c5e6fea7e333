"""pytest entry points of the Verilator benches, one per cocotb module and config.

The default config runs every scenario; a second, smaller config (2 rows, 2 queues,
smaller buffers) runs them too, so that nothing hard-codes the default.
"""
import pytest

from runner import run


@pytest.mark.parametrize("config", ["default", "small"])
def test_scenarios_on_rtl(config):
    run("cocotb_scenarios", config=config)
