"""The cocotb environment around `ndp_device`: clock, reset, DRAM, and the driver's
RTL transport; the RTL backend of the scenarios. Only this module and the transport
touch signals."""
import logging
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiBus, AxiRam

import isa
from isa.axi import RESP_OKAY, RESP_SLVERR
from driver import NdpDevice
from driver.rtl_transport import CocotbAxiTransport
from rtlbench.backend import Backend, DRAM_BYTES
from rtlbench.axi_checker import device_checkers
from sim.memory import DramFaults


CLOCK_NS = 10


def backend_class():
    """The RTL backend of the top this simulation was built with: the cocotbext-axi bench
    on `ndp_device`, FastBackend (cocotb_fast.py) on `ndp_fast_top`."""
    if os.environ.get("COCOTB_TOPLEVEL") == "ndp_fast_top":
        from rtlbench.cocotb_fast import FastBackend
        return FastBackend
    return DeviceEnv


class DeviceEnv(Backend):
    name = "rtl"

    def __init__(self, dut):
        self.dut = dut
        self.cfg = isa.load_config(os.environ.get("NDP_CONFIG", "default"))
        # one RAM model per DRAM channel port, all on the same bytes (each port carries the
        # full HDM address, spec section 6)
        self.drams = []
        for prefix in dram_prefixes(self.cfg):
            ram = AxiRam(AxiBus.from_prefix(dut, prefix), dut.clk, dut.rst, size=DRAM_BYTES,
                         mem=self.drams[0].mem if self.drams else None)
            ram.write_if.log.setLevel(logging.ERROR)     # a fault injected logs a warning per beat
            ram.read_if.log.setLevel(logging.ERROR)
            self.drams.append(ram)
        self.faults = DramFaults()
        for ram in self.drams:
            answer_faults(ram, self.faults)
        self.dram = self.drams[0]
        self._reads = None

    @classmethod
    async def open(cls, dut):
        """A started environment: the RTL backend of the scenarios."""
        env = cls(dut)
        await env.start()
        return env

    async def start(self):
        """Clock, reset, then open the device through the driver. From reset on, an AXI
        protocol checker watches every bus port (axi_checker.py; NDP_AXI_CHECK=0 leaves
        them out): its first violation fails the running test."""
        cocotb.start_soon(Clock(self.dut.clk, CLOCK_NS, unit="ns").start())
        self.dut.rst.value = 1
        checked = os.environ.get("NDP_AXI_CHECK", "1") != "0"
        self.axi_checkers = device_checkers(self.dut, self.cfg) if checked else []
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)
        transport = CocotbAxiTransport(self.dut)
        for bfm in (transport.mem.write_if, transport.mem.read_if, transport.io.write_if, transport.io.read_if):
            bfm.log.setLevel(logging.WARNING)
        self.dev = await NdpDevice.open(transport)
        self._reads = DramReadMonitor(self.dut, self.cfg)
        return self.dev

    @property
    def cycle(self):
        """Clock cycles simulated so far."""
        return get_sim_time("ns") // CLOCK_NS

    def backdoor_read(self, addr, length):
        return self.dram.read(addr, length)

    def backdoor_write(self, addr, data):
        self.dram.write(addr, data)

    def device_reads(self):
        reads, self._reads.bursts = self._reads.bursts, []
        return reads

    async def add_dram_fault(self, lo, hi, read=RESP_SLVERR, write=RESP_SLVERR):
        self.faults.add(lo, hi, read, write)

    async def clear_dram_faults(self):
        self.faults.clear()

    async def add_backpressure(self, seed=1):
        """Random stalls on every channel of the DRAM and of the host's CXL.mem master
        (cocotbext-axi's pause generators), counted per kind (stall_counts)."""
        rng = random.Random(seed)

        def stalls(kind, p):
            while True:
                stall = rng.random() < p
                self._stalls[kind] += stall
                yield int(stall)
        host = self.transport.mem
        channels = [("host_b", host.write_if.b_channel), ("host_r", host.read_if.r_channel)]
        for ram in self.drams:
            channels += [("aw", ram.write_if.aw_channel), ("w", ram.write_if.w_channel),
                         ("b", ram.write_if.b_channel), ("ar", ram.read_if.ar_channel), ("r", ram.read_if.r_channel)]
        self._stalls = {kind: 0 for kind, _ in channels}
        self._paused = [channel for _, channel in channels]
        for kind, channel in channels:
            channel.set_pause_generator(stalls(kind, 0.3))

    async def remove_backpressure(self):
        for channel in getattr(self, "_paused", []):
            channel.clear_pause_generator()
            channel.pause = False           # the generator's last value would stay

    async def reset(self, cycles=4):
        """Hold `rst` for `cycles` clock edges: the device, the RAM models and the host's
        masters (cocotbext-axi drops what they have in flight)."""
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, cycles)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 1)

    def stall_counts(self):
        """Stalls inserted so far per channel kind (every DRAM port together)."""
        return dict(getattr(self, "_stalls", {}))

    def irq_pulses(self):
        """Interrupt pulses seen so far per queue."""
        return list(self.transport.irq_total)



class DramFault(Exception):
    """Raised by a faulty line's access inside the RAM model, which answers it with an error."""


def answer_faults(ram, faults):
    """Make cocotbext-axi's `ram` answer the lines of `faults` (sim/memory.py DramFaults) as
    the model does. AxiRam answers SLVERR when its memory access raises (zeros read, the
    beat's write dropped); the response sent is then rewritten to the fault's (DECERR, or
    the worst of a write burst's beats)."""
    read_if, write_if = ram.read_if, ram.write_if
    read, write = read_if._read, write_if._write
    worst = {"r": RESP_OKAY, "b": RESP_OKAY}

    async def faulty_read(address, length):
        resp = faults.read_resp(address, length)
        if resp:
            worst["r"] = resp
            raise DramFault(f"read at {address:#x}")
        return await read(address, length)

    async def faulty_write(address, data):
        resp = faults.write_resp(address, len(data))
        if resp:
            worst["b"] = max(worst["b"], resp)
            raise DramFault(f"write at {address:#x}")
        await write(address, data)

    def answer(channel, field, kind):
        send = channel.send

        async def send_with_fault(transaction):
            if int(getattr(transaction, field)) == RESP_SLVERR:   # the RAM's answer to a DramFault
                setattr(transaction, field, worst[kind])
            worst[kind] = RESP_OKAY
            await send(transaction)
        channel.send = send_with_fault

    read_if._read, write_if._write = faulty_read, faulty_write
    answer(read_if.r_channel, "rresp", "r")
    answer(write_if.b_channel, "bresp", "b")


def dram_prefixes(cfg):
    """The cocotbext-axi prefixes of the DRAM ports: `dram_`, or `dram0_` .. with several channels."""
    return ["dram_"] if cfg.dram_channels == 1 else [f"dram{c}_" for c in range(cfg.dram_channels)]


class DramReadMonitor:
    """Records every read burst the device issues on its DRAM ports: (address, bytes)."""

    def __init__(self, dut, cfg):
        self.dut = dut
        self.ports = [[getattr(dut, f"{prefix}_{name}") for name in ("arvalid", "arready", "arlen", "arsize", "araddr")]
                      for prefix in dram_prefixes(cfg)]
        self.bursts = []
        cocotb.start_soon(self._watch())

    async def _watch(self):
        from cocotb.triggers import RisingEdge
        while True:
            await RisingEdge(self.dut.clk)
            for valid, ready, arlen, arsize, araddr in self.ports:
                if int(valid.value) and int(ready.value):
                    self.bursts.append((int(araddr.value), (int(arlen.value) + 1) << int(arsize.value)))

