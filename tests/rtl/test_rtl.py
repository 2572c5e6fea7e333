"""pytest entry points of the Verilator benches: one pytest test per cocotb module."""
import pytest

from runner import run

MODULES = ["cocotb_registers", "cocotb_compute", "cocotb_protocol"]


@pytest.mark.parametrize("module", MODULES)
def test_rtl(module):
    run(module)
