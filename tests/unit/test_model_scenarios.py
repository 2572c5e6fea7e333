"""Every scenario of tests/rtl/scenarios.py on the cycle model: the driver runs unchanged
on the model as on the RTL (tests/rtl/test_rtl.py runs the same scenarios there)."""
import asyncio
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "rtl"))
import scenarios  # noqa: E402
from backend import ModelBackend  # noqa: E402

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
