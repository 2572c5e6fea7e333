"""The two backends a scenario runs on, with one interface: the RTL (a cocotb bench of
the Verilator build) and the cycle model (sim/, plain asyncio).

Scenarios (scenarios.py) only use this interface and the driver, so every one of them
runs on both. What differs is below the driver: the transport, and the test's backdoor
into device DRAM and view of the device's own DRAM reads.
"""
import isa
from isa.axi import RESP_SLVERR
from driver import NdpDevice
from driver.model_transport import ModelTransport

QUEUE_SPAN = 1 << 24          # queue q owns [q * QUEUE_SPAN, (q + 1) * QUEUE_SPAN) of DRAM:
SQ_OFFSET, CQ_OFFSET, DATA_OFFSET = 0, 1 << 22, 1 << 23   # rings of up to 4 MiB, then data
DRAM_BYTES = 1 << 26


async def setup_queue(dev, q, pasid=0, log2_depth=2, log2_slot=16, irq=False):
    """Configure queue q in its own span of DRAM, as the host (PASID 0) does."""
    base = q * QUEUE_SPAN
    return await dev.configure_queue(
        q, sq_base=base + SQ_OFFSET, cq_base=base + CQ_OFFSET, data_base=base + DATA_OFFSET,
        data_limit=base + QUEUE_SPAN, log2_depth=log2_depth, log2_slot=log2_slot, pasid=pasid, irq=irq)


class Backend:
    name = None
    cfg = None
    dev = None
    # scenarios this backend cannot run, and why
    unsupported = {}

    @property
    def transport(self):
        return self.dev.transport

    async def setup_queue(self, q, pasid=0, log2_depth=2, log2_slot=16, irq=False):
        return await setup_queue(self.dev, q, pasid, log2_depth, log2_slot, irq)

    async def cycles(self, n):
        await self.transport.wait_cycles(n)

    def backdoor_read(self, addr, length):
        raise NotImplementedError

    def backdoor_write(self, addr, data):
        raise NotImplementedError

    # whether device_reads() sees the device's DRAM reads (a monitor on the bus, the model's log)
    monitors_reads = True

    def device_reads(self):
        """(address, bytes) of every DRAM read since the last call."""
        raise NotImplementedError

    async def add_dram_fault(self, lo, hi, read=RESP_SLVERR, write=RESP_SLVERR):
        """From now on the DRAM answers `read` to the device's reads and `write` to its
        writes of the lines overlapping [lo, hi) (sim/memory.py DramFaults: zeros read,
        writes dropped); host accesses through CXL.mem get the same answers."""
        raise NotImplementedError

    async def clear_dram_faults(self):
        raise NotImplementedError

    async def reset(self, cycles=4):
        """Assert `rst` for `cycles` clock edges (RTL backends)."""
        raise NotImplementedError

    def irq_pulses(self):
        """Interrupt pulses seen so far, per queue."""
        raise NotImplementedError

    async def add_backpressure(self, seed=1):
        """Random stalls on every channel of the DRAM ports (and the host's), from `seed`."""
        raise NotImplementedError

    async def remove_backpressure(self):
        raise NotImplementedError

    def stall_counts(self):
        """Stalls inserted so far by add_backpressure, per channel kind."""
        raise NotImplementedError

    def device_read(self, start, end, besides=()):
        """Whether any DRAM read since the last device_reads() touched [start, end), other
        than reads inside one of the `besides` ranges (start, end)."""
        def expected(addr, length):
            return any(lo <= addr and addr + length <= hi for lo, hi in besides)
        return any(addr < end and start < addr + length and not expected(addr, length)
                   for addr, length in self.device_reads())


class ModelBackend(Backend):
    name = "model"
    unsupported = {"gemm_under_backpressure": "the model has no bus stalls to inject"}

    @classmethod
    async def start(cls, config="default"):
        self = cls()
        self.cfg = isa.load_config(config)
        self.model_transport = ModelTransport(self.cfg)
        self.model = self.model_transport.model
        self.dev = await NdpDevice.open(self.model_transport)
        return self

    def backdoor_read(self, addr, length):
        return self.model.memory.read(addr, length)

    def backdoor_write(self, addr, data):
        self.model.memory.write(addr, data)

    def device_reads(self):
        reads, self.model.control.reads = self.model.control.reads, []
        return reads

    async def add_dram_fault(self, lo, hi, read=RESP_SLVERR, write=RESP_SLVERR):
        self.model.memory.faults.add(lo, hi, read, write)

    async def clear_dram_faults(self):
        self.model.memory.faults.clear()
