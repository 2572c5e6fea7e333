"""Every scenario of scenarios.py as a cocotb test on the RTL: on `ndp_device` with the
cocotbext-axi bench, or on `ndp_fast_top` (the fast path) when this simulation was built
with it; each scenario that backend supports (a backend names the others, and why).
NDP_BACKPRESSURE=1 runs each with random stalls on every channel (the backend's
add_backpressure, seeded by the scenario's name), as cocotbext-axi's own tests cross their
idle and back-pressure inserters."""
import os
import zlib

import cocotb

from rtlbench import scenarios
from rtlbench.env import backend_class

Backend = backend_class()


def _rtl_test(name, scenario):
    async def test(dut):
        env = await Backend.open(dut)
        if os.environ.get("NDP_BACKPRESSURE") == "1":
            await env.add_backpressure(seed=zlib.crc32(name.encode()))
        await scenario(env)
    test.__name__ = test.__qualname__ = name
    test.__doc__ = scenario.__doc__
    return cocotb.test(expect_fail=name in scenarios.EXPECT_FAIL)(test)


for _name, _scenario in scenarios.ALL.items():
    if _name not in Backend.unsupported:
        globals()[_name] = _rtl_test(_name, _scenario)
