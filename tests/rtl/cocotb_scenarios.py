"""Every scenario of scenarios.py as a cocotb test on the RTL: on `ndp_device` with the
cocotbext-axi bench, or on `ndp_fast_top` (the fast path) when this simulation was built
with it; each scenario that backend supports (a backend names the others, and why)."""
import cocotb

import scenarios
from env import backend_class

Backend = backend_class()


def _rtl_test(name, scenario):
    async def test(dut):
        await scenario(await Backend.open(dut))
    test.__name__ = test.__qualname__ = name
    test.__doc__ = scenario.__doc__
    return cocotb.test(expect_fail=name in scenarios.EXPECT_FAIL)(test)


for _name, _scenario in scenarios.ALL.items():
    if _name not in Backend.unsupported:
        globals()[_name] = _rtl_test(_name, _scenario)
