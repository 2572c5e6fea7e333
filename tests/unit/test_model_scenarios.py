"""Every scenario of rtlbench/scenarios.py on the cycle model: the driver runs unchanged
on the model as on the RTL (tests/rtl/test_rtl.py runs the same scenarios there)."""
import asyncio

import pytest

from rtlbench import scenarios
from rtlbench.backend import ModelBackend

MODEL_SCENARIOS = [name for name in scenarios.ALL if name not in ModelBackend.unsupported]


@pytest.mark.parametrize("config", ["default", "small", "quad"])
@pytest.mark.parametrize("name", MODEL_SCENARIOS)
def test_scenario_on_model(name, config):
    async def main():
        await scenarios.ALL[name](await ModelBackend.start(config))
    if name in scenarios.EXPECT_FAIL:
        with pytest.raises(AssertionError):
            asyncio.run(main())
    else:
        asyncio.run(main())
