"""The pyuvm environment (verify/uvm) as a cocotb test, on the top this simulation was built
with: the backend is opened (clock, reset, driver) first and handed to the components."""
import cocotb
from pyuvm import uvm_root

from rtlbench.env import backend_class
from verify.uvm.env import NdpTest, ScoreboardCatchesCorruptionTest, register


@cocotb.test()
async def uvm(dut):
    """verify/uvm's NdpTest: sequences, driver, monitor, scoreboard, coverage and its goals."""
    register(await backend_class().open(dut))
    await uvm_root().run_test(NdpTest)


@cocotb.test()
async def uvm_scoreboard_catches_corruption(dut):
    """The proof the scoreboard can fail: a driver that corrupts results and statuses."""
    register(await backend_class().open(dut))
    try:
        await uvm_root().run_test(ScoreboardCatchesCorruptionTest)
    except AssertionError as error:
        assert "scoreboard errors" in str(error), error
        return
    raise AssertionError("the scoreboard accepted corrupted completions")
