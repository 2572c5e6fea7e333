"""pytest entry points of the Verilator benches: one pytest test per cocotb module and config.

The default config runs every bench; a second, smaller config (2 rows, 2 queues, smaller
buffers) runs the register and compute benches, so that nothing hard-codes the default.
"""
import pytest

from runner import run

RUNS = [("default", "cocotb_registers"), ("default", "cocotb_compute"), ("default", "cocotb_protocol"),
        ("small", "cocotb_registers"), ("small", "cocotb_compute")]


@pytest.mark.parametrize("config,module", RUNS)
def test_rtl(config, module):
    run(module, config=config)
