"""The cocotb environment around `ndp_device`: clock, reset, DRAM, and the driver's
RTL transport. Only this module and the transport touch signals."""
import logging
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiBus, AxiRam

import isa
from driver import NdpDevice
from driver.rtl_transport import CocotbAxiTransport

DRAM_BYTES = 1 << 26          # the AxiRam behind the dram port
QUEUE_SPAN = 1 << 24          # queue q owns [q * QUEUE_SPAN, (q + 1) * QUEUE_SPAN) of it:
SQ_OFFSET, CQ_OFFSET, DATA_OFFSET = 0, 1 << 22, 1 << 23   # rings of up to 4 MiB, then data


class DeviceEnv:
    def __init__(self, dut):
        self.dut = dut
        self.cfg = isa.load_config(os.environ.get("NDP_CONFIG", "default"))
        self.dram = AxiRam(AxiBus.from_prefix(dut, "dram_"), dut.clk, dut.rst, size=DRAM_BYTES)
        self.dram.write_if.log.setLevel(logging.WARNING)
        self.dram.read_if.log.setLevel(logging.WARNING)
        self.transport = None

    async def start(self):
        """Clock, reset, then open the device through the driver."""
        cocotb.start_soon(Clock(self.dut.clk, 10, unit="ns").start())
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)
        self.transport = CocotbAxiTransport(self.dut)
        for bfm in (self.transport.mem.write_if, self.transport.mem.read_if,
                    self.transport.io.write_if, self.transport.io.read_if):
            bfm.log.setLevel(logging.WARNING)
        self.dev = await NdpDevice.open(self.transport)
        return self.dev

    async def setup_queue(self, q, pasid=0, log2_depth=2, log2_slot=16, irq=False):
        """Configure queue q in its own span of DRAM, as the host (PASID 0) does."""
        base = q * QUEUE_SPAN
        return await self.dev.configure_queue(
            q, sq_base=base + SQ_OFFSET, cq_base=base + CQ_OFFSET, data_base=base + DATA_OFFSET,
            data_limit=base + QUEUE_SPAN, log2_depth=log2_depth, log2_slot=log2_slot, pasid=pasid, irq=irq)

    def add_backpressure(self, seed=1):
        """Random stalls on every channel of the DRAM and of the host's CXL.mem master."""
        rng = random.Random(seed)

        def stalls(p):
            while True:
                yield int(rng.random() < p)
        ram, host = self.dram, self.transport.mem
        for channel in (ram.write_if.aw_channel, ram.write_if.w_channel, ram.write_if.b_channel,
                        ram.read_if.ar_channel, ram.read_if.r_channel,
                        host.write_if.b_channel, host.read_if.r_channel):
            channel.set_pause_generator(stalls(0.3))

    async def cycles(self, n):
        await ClockCycles(self.dut.clk, n)


class DramReadMonitor:
    """Records every read burst the device issues on its dram port: (address, bytes)."""

    def __init__(self, dut):
        self.dut = dut
        self.bursts = []
        cocotb.start_soon(self._watch())

    async def _watch(self):
        from cocotb.triggers import RisingEdge
        dut = self.dut
        while True:
            await RisingEdge(dut.clk)
            if int(dut.dram__arvalid.value) and int(dut.dram__arready.value):
                length = (int(dut.dram__arlen.value) + 1) << int(dut.dram__arsize.value)
                self.bursts.append((int(dut.dram__araddr.value), length))

    def touched(self, start, end):
        """Whether any recorded burst read a byte of [start, end)."""
        return any(addr < end and start < addr + length for addr, length in self.bursts)
