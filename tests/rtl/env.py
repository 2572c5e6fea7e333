"""The cocotb environment around `ndp_device`: clock, reset, DRAM, and the driver's
RTL transport. Only this module and the transport touch signals."""
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiBus, AxiRam

import isa
from driver import NdpDevice
from driver.rtl_transport import CocotbAxiTransport

DRAM_BYTES = 1 << 24          # the AxiRam behind the dram port


class DeviceEnv:
    def __init__(self, dut):
        self.dut = dut
        self.cfg = isa.load_config(os.environ.get("NDP_CONFIG", "default"))
        self.dram = AxiRam(AxiBus.from_prefix(dut, "dram_"), dut.clk, dut.rst, size=DRAM_BYTES)
        self.transport = None

    async def start(self):
        """Clock, reset, then open the device through the driver."""
        cocotb.start_soon(Clock(self.dut.clk, 10, unit="ns").start())
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)
        self.transport = CocotbAxiTransport(self.dut)
        return await NdpDevice.open(self.transport)

    async def cycles(self, n):
        await ClockCycles(self.dut.clk, n)
