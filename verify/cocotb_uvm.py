"""The pyuvm environment (verify/uvm) as cocotb tests, on the top this simulation was built
with. The test's top reads the run's settings (verify/settings.py) and puts them in
ConfigDB; the driver opens the backend (clock, reset, the device) at the start of its run
phase, as pyuvm's TinyALU driver starts its BFM."""
import cocotb
from pyuvm import uvm_root

from verify.uvm.env import NdpTest, ScoreboardCatchesCorruptionTest


@cocotb.test()
async def uvm(dut):
    """verify/uvm's NdpTest: sequences, driver, monitor, scoreboard, coverage and its goals."""
    await uvm_root().run_test(NdpTest)


@cocotb.test()
async def uvm_scoreboard_catches_corruption(dut):
    """The proof the scoreboard can fail: a device that answers wrong statuses and flips
    result bits (env.py CorruptingTransport) must give a status error and a result that
    differs from the model."""
    try:
        await uvm_root().run_test(ScoreboardCatchesCorruptionTest)
    except AssertionError as error:
        assert "scoreboard errors" in str(error), error
        errors = uvm_root().uvm_test_top.env.scoreboard.errors
        assert any("expected OK" in e for e in errors), errors[:10]
        assert any("differs from the model" in e for e in errors), errors[:10]
        return
    raise AssertionError("the scoreboard accepted corrupted completions")
