"""Every scenario of scenarios.py as a cocotb test on the RTL."""
import cocotb

import scenarios
from env import DeviceEnv


def _rtl_test(name, scenario):
    async def test(dut):
        env = DeviceEnv(dut)
        await env.start()
        await scenario(env)
    test.__name__ = test.__qualname__ = name
    test.__doc__ = scenario.__doc__
    return cocotb.test(expect_fail=name in scenarios.EXPECT_FAIL)(test)


for _name, _scenario in scenarios.ALL.items():
    globals()[_name] = _rtl_test(_name, _scenario)
