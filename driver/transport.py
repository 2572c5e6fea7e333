"""The only thing the driver talks to.

A transport moves bytes over CXL.mem and 32-bit words over CXL.io, and lets device time
pass. `driver.rtl_transport.CocotbAxiTransport` drives the generated RTL in a cocotb
simulation; a model or a test double implements the same methods. The driver only ever
`await`s these methods, one after the other, so it runs unchanged under cocotb's
scheduler and under asyncio.
"""
import abc

from isa.regs import REG_BITS

REG_BYTES = REG_BITS // 8


class Transport(abc.ABC):
    # Whether wait_irq can report the device's completion interrupts. A transport that
    # cannot, leaves this False and the driver polls instead.
    supports_irq = False

    @abc.abstractmethod
    async def mem_write(self, addr: int, data: bytes, pasid: int) -> None:
        """CXL.mem store of `data` (bytes) at HDM address `addr` with requester `pasid`.

        Returns after the write response; raises MemAccessError on SLVERR/DECERR.
        """

    @abc.abstractmethod
    async def mem_read(self, addr: int, length: int, pasid: int) -> bytes:
        """CXL.mem load of `length` bytes; returns bytes. Raises MemAccessError on an error response."""

    @abc.abstractmethod
    async def reg_write(self, offset: int, value: int, pasid: int) -> None:
        """AXI4-Lite write of the 32-bit `value` at `offset`, carrying `pasid` on awuser.

        Raises RegisterAccessError on SLVERR.
        """

    @abc.abstractmethod
    async def reg_read(self, offset: int, pasid: int = 0) -> int:
        """AXI4-Lite read of the 32-bit register at `offset`, carrying `pasid` on aruser; returns an int."""

    @abc.abstractmethod
    async def wait_cycles(self, n: int) -> None:
        """Let `n` device clock cycles pass."""

    async def wait_irq(self, queue: int, timeout_cycles: int) -> bool:
        """Wait for an interrupt pulse of `queue`: True on a pulse, False after `timeout_cycles`.

        Pulses that arrive while nobody waits are counted and returned by later calls.
        The default, for transports without interrupts, only lets the time pass.
        """
        await self.wait_cycles(timeout_cycles)
        return False
