"""Transport over the generated RTL in a cocotb simulation (spec section 5 ports).

The only module of the driver that imports cocotb. Construct it inside a running cocotb
test: it starts a background coroutine that counts interrupt pulses.
"""
from typing import Any

import cocotb
from cocotb.triggers import ClockCycles, Event, First, Lock, RisingEdge
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiMaster, AxiResp

from isa.regs import HOST_PASID

from .errors import MemAccessError, RegisterAccessError
from .transport import REG_BYTES, Transport


class CocotbAxiTransport(Transport):
    def __init__(self, dut: Any, clock_signal: Any = None) -> None:
        self.dut = dut
        self.clock = dut.clk if clock_signal is None else clock_signal
        self.mem = AxiMaster(AxiBus.from_prefix(dut, "mem_"), self.clock, dut.rst)
        self.io = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "io_"), self.clock, dut.rst)
        # AxiLiteMaster has no user signals, so the PASID is driven here, beside it. One
        # register access at a time: otherwise a coroutine could change awuser/aruser
        # while another's access is still on the bus, and send it with the wrong PASID.
        self._io_lock = Lock()
        self._awuser = dut.io__awuser
        self._aruser = dut.io__aruser
        self._awuser.value = HOST_PASID
        self._aruser.value = HOST_PASID

        self.supports_irq = hasattr(dut, "irq")
        self._irq_pending: list[int] = []
        self._irq_events: list[Event] = []
        if self.supports_irq:
            width = len(dut.irq)
            self._irq_pending = [0] * width
            self.irq_total = [0] * width        # every pulse seen, waited for or not
            self._irq_events = [Event() for _ in range(width)]
            self._irq_watcher = cocotb.start_soon(self._watch_irq())

    async def mem_write(self, addr: int, data: bytes, pasid: int) -> None:
        response = await self.mem.write(addr, bytes(data), user=pasid)
        if response.resp != AxiResp.OKAY:
            raise MemAccessError(addr, len(data), pasid, AxiResp(response.resp).name, write=True)

    async def mem_read(self, addr: int, length: int, pasid: int) -> bytes:
        response = await self.mem.read(addr, length, user=pasid)
        if response.resp != AxiResp.OKAY:
            raise MemAccessError(addr, length, pasid, AxiResp(response.resp).name, write=False)
        return bytes(response.data)

    async def reg_write(self, offset: int, value: int, pasid: int) -> None:
        async with self._io_lock:
            self._awuser.value = pasid
            response = await self.io.write(offset, int(value).to_bytes(REG_BYTES, "little"))
        if response.resp != AxiResp.OKAY:
            raise RegisterAccessError(offset, pasid, AxiResp(response.resp).name, write=True)

    async def reg_read(self, offset: int, pasid: int = HOST_PASID) -> int:
        async with self._io_lock:
            self._aruser.value = pasid
            response = await self.io.read(offset, REG_BYTES)
        if response.resp != AxiResp.OKAY:
            raise RegisterAccessError(offset, pasid, AxiResp(response.resp).name, write=False)
        return int.from_bytes(response.data, "little")

    async def wait_cycles(self, n: int) -> None:
        if n > 0:
            await ClockCycles(self.clock, n)

    async def wait_irq(self, queue: int, timeout_cycles: int) -> bool:
        if not self.supports_irq:
            return await super().wait_irq(queue, timeout_cycles)
        if self._irq_pending[queue] == 0:
            event = self._irq_events[queue]
            event.clear()   # no await since the check above, so no pulse can fall in between
            if timeout_cycles > 0:
                await First(event.wait(), ClockCycles(self.clock, timeout_cycles))
        if self._irq_pending[queue] > 0:
            self._irq_pending[queue] -= 1
            return True
        return False

    async def _watch_irq(self) -> None:
        # Sample irq once per clock edge: each pulse is one cycle long, so every pulse is
        # seen exactly once and counted, also when no one is waiting at that moment.
        while True:
            await RisingEdge(self.clock)
            try:
                bits = int(self.dut.irq.value)
            except ValueError:      # X/Z before reset
                continue
            queue = 0
            while bits:
                if bits & 1:
                    self._irq_pending[queue] += 1
                    self.irq_total[queue] += 1
                    self._irq_events[queue].set()
                bits >>= 1
                queue += 1
