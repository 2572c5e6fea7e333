"""Transport over the cycle-approximate model (sim/): the same driver, no simulator.

Host accesses take model time as the RTL bench's bus functional models take bus cycles
(measured on the cocotbext-axi bench), so a descriptor stream sees about the same
overlap of host and device work on both backends. The access itself is instant.
"""
from isa.slots import LINE_BYTES
from sim import mem_frontend
from sim.device import NdpModel
from sim.regfile import RefusedAccess

from .errors import MemAccessError, RegisterAccessError
from .transport import Transport

# host access costs in device cycles, as the cocotbext-axi masters take them
MEM_WRITE_CYCLES = 7        # plus one per line
MEM_READ_CYCLES = 4         # plus one per line
REG_WRITE_CYCLES = 4
REG_WRITE_TAKES_EFFECT = 2  # cycles into the write when the register changes
REG_READ_CYCLES = 3


def _lines(addr, length):
    return (addr + length - 1) // LINE_BYTES - addr // LINE_BYTES + 1 if length else 0


class ModelTransport(Transport):
    supports_irq = True

    def __init__(self, cfg, model=None):
        self.model = model or NdpModel(cfg)
        self.now = 0
        self._irq_taken = [0] * cfg.num_queues

    def _run_to(self, cycle):
        self.now = max(self.now, cycle)
        self.model.advance(self.now)

    async def mem_write(self, addr, data, pasid):
        self._run_to(self.now)
        if mem_frontend.refused(self.model.regfile.queues, addr, len(data), pasid):
            raise MemAccessError(addr, len(data), pasid, "SLVERR", write=True)
        self.model.memory.write(addr, data)
        self._run_to(self.now + MEM_WRITE_CYCLES + _lines(addr, len(data)))

    async def mem_read(self, addr, length, pasid):
        self._run_to(self.now)
        if mem_frontend.refused(self.model.regfile.queues, addr, length, pasid):
            raise MemAccessError(addr, length, pasid, "SLVERR", write=False)
        data = self.model.memory.read(addr, length)
        self._run_to(self.now + MEM_READ_CYCLES + _lines(addr, length))
        return data

    async def reg_write(self, offset, value, pasid):
        start = self.now
        self._run_to(start + REG_WRITE_TAKES_EFFECT)
        try:
            self.model.reg_write(offset, value, pasid)
        except RefusedAccess:
            raise RegisterAccessError(offset, pasid, "SLVERR", write=True) from None
        finally:
            self._run_to(start + REG_WRITE_CYCLES)

    async def reg_read(self, offset, pasid=0):
        self._run_to(self.now)
        value = self.model.reg_read(offset, pasid)
        self._run_to(self.now + REG_READ_CYCLES)
        return value

    async def wait_cycles(self, n):
        self._run_to(self.now + max(0, n))

    async def wait_irq(self, queue, timeout_cycles):
        deadline = self.now + max(0, timeout_cycles)
        while True:
            if self.model.irq_count[queue] > self._irq_taken[queue]:
                self._irq_taken[queue] += 1
                return True
            step = self.model.next_event_cycle()
            if step > deadline:
                self._run_to(deadline)
                return False
            self._run_to(step)
