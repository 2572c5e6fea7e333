"""Transport over the cycle-approximate model (sim/): the same driver, no simulator.

Host accesses take model time as the RTL bench's bus functional models take bus cycles
(measured on the cocotbext-axi bench), so a descriptor stream sees about the same
overlap of host and device work on both backends. The access itself is instant. With
`backdoor_memory`, memory accesses take no time, as on the fast co-simulation path
(driver/fast_rtl_transport.py), whose register accesses take the same cycles as here.
"""
import asyncio
import contextlib
from typing import Any

from isa import DeviceConfig
from isa.axi import RESP_NAMES
from isa.slots import LINE_BYTES
from sim import mem_frontend
from sim.device import NdpModel
from sim.regfile import RefusedAccess

from .clock import SimClock
from .errors import MemAccessError, RegisterAccessError
from .transport import Transport

# host access costs in device cycles, as the cocotbext-axi masters take them
MEM_WRITE_CYCLES = 7        # plus one per line
MEM_READ_CYCLES = 4         # plus one per line
REG_WRITE_CYCLES = 4
REG_WRITE_TAKES_EFFECT = 2  # cycles into the write when the register changes
REG_READ_CYCLES = 3


def _lines(addr: int, length: int) -> int:
    return (addr + length - 1) // LINE_BYTES - addr // LINE_BYTES + 1 if length else 0


class ModelTransport(Transport):
    """The model behind the transport methods.

    Without a `clock`, the transport counts its own cycles (`now`) and time passes only
    when the host lets it. With a driver.clock.SimClock, `now` is the clock's time in this
    device's cycles, every passage of time is a sleep on the clock, and host accesses take
    the device's one CXL port in turn: devices sharing the clock run in parallel in
    simulated time (use it inside driver.clock.run).

    With `compute_results` false the model made here is timing-only (sim/device.py
    NdpModel): the same cycles, no result computed or written (completion lines are).
    """
    supports_irq = True

    def __init__(self, cfg: DeviceConfig, model: NdpModel | None = None, clock: SimClock | None = None,
                 backdoor_memory: bool = False, compute_results: bool = True) -> None:
        self.cfg = cfg
        self._mem_cycles = (0, 0, 0) if backdoor_memory else (MEM_WRITE_CYCLES, MEM_READ_CYCLES, 1)
        if model is not None and not compute_results:
            raise ValueError("compute_results is for the model the transport makes: give it to NdpModel")
        self.model = model or NdpModel(cfg, compute_results=compute_results)
        self.clock = clock
        self._own_now = 0
        self._irq_taken = [0] * cfg.num_queues
        # one host access at a time, as on the one port; nothing to order without a clock,
        # where an access never suspends
        self._port: contextlib.AbstractAsyncContextManager[Any] = (asyncio.Lock() if clock
                                                                   else contextlib.nullcontext())
        self._sleepers: set[asyncio.Future[None]] = set()     # futures of wait_irq calls sleeping on the clock

    @property
    def now(self) -> int:
        if self.clock is None:
            return self._own_now
        return self.clock.cycle(self.cfg.clock_hz)

    async def _run_to(self, cycle: int, wakeable: bool = False) -> None:
        """Let time pass up to `cycle` (never back), then run the model's events up to now.

        `wakeable`: return early once a host access has changed the model (see _wake)."""
        if self.clock is None:
            self._own_now = max(self._own_now, cycle)
        else:
            interrupt: asyncio.Future[None] | None = None
            if wakeable:
                interrupt = asyncio.get_running_loop().create_future()
                self._sleepers.add(interrupt)
            try:
                await self.clock.sleep_until(cycle / self.cfg.clock_hz, interrupt)
            finally:
                self._sleepers.discard(interrupt)
        self.model.advance(self.now)

    async def _catch_up(self) -> None:
        """Run the model's events up to now before a host access. Waiting until now on the
        clock would not move time (the access's own cycles follow, as a sleep), so the
        model is advanced without a pass through the event loop, which costs more than
        a short descriptor's schedule; when the clock stands between two of this device's
        cycles, time moves to the cycle as before."""
        if self.clock is None:
            self.model.advance(self._own_now)
            return
        seconds = self.clock.now
        cycle = round(seconds * self.cfg.clock_hz)          # self.now, read once
        if cycle / self.cfg.clock_hz > seconds:
            await self._run_to(cycle)
        else:
            self.model.advance(cycle)

    def _wake(self) -> None:
        """A host access changed the model, so its next event may be sooner than a sleeping
        wait_irq computed."""
        for future in self._sleepers:
            if not future.done():
                future.set_result(None)

    async def mem_write(self, addr: int, data: bytes, pasid: int) -> None:
        async with self._port:
            await self._catch_up()
            if mem_frontend.refused(self.model.regfile.queues, addr, len(data), pasid):
                raise MemAccessError(addr, len(data), pasid, "SLVERR", write=True)
            memory = self.model.memory
            if memory.faults.write_resp(addr, len(data)):   # the DRAM's answer, passed through
                memory.device_write(addr, data)
                raise MemAccessError(addr, len(data), pasid, RESP_NAMES[memory.faults.write_resp(addr, len(data))],
                                     write=True)
            memory.write(addr, data)
            self._wake()
            write, _, per_line = self._mem_cycles
            if write or per_line:           # a backdoor access takes no time: no pass through the loop
                await self._run_to(self.now + write + per_line * _lines(addr, len(data)))

    async def mem_read(self, addr: int, length: int, pasid: int) -> bytes:
        async with self._port:
            await self._catch_up()
            if mem_frontend.refused(self.model.regfile.queues, addr, length, pasid):
                raise MemAccessError(addr, length, pasid, "SLVERR", write=False)
            resp = self.model.memory.faults.read_resp(addr, length)
            if resp:
                raise MemAccessError(addr, length, pasid, RESP_NAMES[resp], write=False)
            data = self.model.memory.read(addr, length)
            _, read, per_line = self._mem_cycles
            if read or per_line:
                await self._run_to(self.now + read + per_line * _lines(addr, length))
            return data

    async def reg_write(self, offset: int, value: int, pasid: int) -> None:
        async with self._port:
            start = self.now
            await self._run_to(start + REG_WRITE_TAKES_EFFECT)
            try:
                self.model.reg_write(offset, value, pasid)
            except RefusedAccess:
                raise RegisterAccessError(offset, pasid, "SLVERR", write=True) from None
            finally:
                self._wake()
                await self._run_to(start + REG_WRITE_CYCLES)

    async def reg_read(self, offset: int, pasid: int = 0) -> int:
        async with self._port:
            await self._catch_up()
            value = self.model.reg_read(offset, pasid)
            await self._run_to(self.now + REG_READ_CYCLES)
            return value

    async def wait_cycles(self, n: int) -> None:
        await self._run_to(self.now + max(0, n))

    async def wait_irq(self, queue: int, timeout_cycles: int) -> bool:
        deadline = self.now + max(0, timeout_cycles)
        while True:
            if self.model.irq_count[queue] > self._irq_taken[queue]:
                self._irq_taken[queue] += 1
                return True
            if self.now >= deadline:
                return False
            # no interrupt before the queue's next completion as scheduled: sleep to it (the
            # events on the way run when time gets there); a host access wakes the sleep
            wake = self.model.next_completion_cycle(queue)
            if wake is None:
                wake = self.model.next_event_cycle()
            await self._run_to(min(wake, deadline), wakeable=True)
