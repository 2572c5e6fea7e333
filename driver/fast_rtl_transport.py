"""Transport over `ndp_fast_top` (rtlbench/fast): the RTL with everything but the host inside
the Verilator build, for long runs.

Why: CocotbAxiTransport drives every bus beat and samples irq every clock from Python,
about 8,000 beats per second. Here the clock, the DRAM (ndp_axi_dram.sv) and an AXI4-Lite
sequencer are Verilog, so Python only sets a few variables and waits on one Timer or one
value change; the simulation runs at Verilator speed in between.

- mem_write / mem_read go through the DRAM BACKDOOR, not the CXL.mem port (which
  ndp_fast_top ties idle): they take no simulated time, and the CXL.mem PASID filter and
  its SLVERR answers are bypassed, so `pasid` is ignored. Use CocotbAxiTransport to test
  the CXL.mem path. The backdoor is a numpy view of the model's bytes (`self.dram`).
- reg_write / reg_read are real AXI4-Lite accesses on io, with `pasid` on awuser/aruser.
- wait_cycles(n) and wait_irq cost O(1) Python wake-ups, whatever n is.

Construct it inside a running cocotb test on ndp_fast_top. Only this module and
rtl_transport.py import cocotb.
"""
import ctypes
from typing import Any

import numpy as np
from cocotb.simtime import get_sim_time
from cocotb.triggers import First, Lock, Timer

from isa.axi import RESP_EXOKAY, RESP_NAMES, RESP_OKAY
from isa.regs import HOST_PASID

from .errors import MemAccessError, RegisterAccessError
from .transport import Transport

COUNT_BITS = 32                     # width of each queue's irq counter in ndp_fast_top


class FastRtlTransport(Transport):
    supports_irq = True

    def __init__(self, dut: Any) -> None:
        self.dut = dut
        # period_ps (int) and dram (numpy uint8 array): None until the model is ready (_wait_ready)
        self.period_ps: Any = None         # read once the model's initializers have run
        self.num_queues = len(dut.irq_count) // COUNT_BITS
        self.dram: Any = None           # numpy uint8 view of the DRAM, once the model made it
        self._ready = False
        self._lock = Lock()             # one register access at a time on the sequencer
        self._req = int(dut.reg_req.value)
        # pulses already counted belong to an earlier user of the simulation (an earlier test)
        self._irq_taken = [self.irq_seen(q) for q in range(self.num_queues)]

    # ---- time ----------------------------------------------------------------------------

    @property
    def cycle(self) -> int:
        """Clock edges since the end of reset (ndp_fast_top.cycle)."""
        return int(self.dut.cycle.value)

    async def wait_cycles(self, n: int) -> None:
        await self._wait_ready()
        if n > 0:
            await Timer(n * self.period_ps, "ps")

    async def _wait_ready(self) -> None:
        # At time 0 the model's initializers and initial blocks (clock period, reset, DRAM
        # allocation) have not run yet: wait for the end of reset, once per transport.
        if self._ready:
            return
        while int(self.dut.clk_period_ps.value) == 0:
            await Timer(1, "ps")
        self.period_ps = int(self.dut.clk_period_ps.value)
        while int(self.dut.cycle.value) == 0:
            await Timer(self.period_ps, "ps")
        self._map_dram()
        self._ready = True

    # ---- DRAM backdoor --------------------------------------------------------------------

    @property
    def dram_latency(self) -> tuple[int, int]:
        """(read, write) latency of the DRAM model in cycles (see set_dram_latency)."""
        return int(self.dut.dram_read_latency.value), int(self.dut.dram_write_latency.value)

    def set_dram_latency(self, read: int | None = None, write: int | None = None) -> None:
        """Cycles from AR to the first R beat and from the last W beat to B (each >= 1) of
        the DRAM model; takes effect for the next burst. None keeps the current value."""
        for name, value in (("read_latency", read), ("write_latency", write)):
            if value is not None:
                if value < 1:
                    raise ValueError(f"{name} must be >= 1, got {value!r}")
                getattr(self.dut, f"dram_{name}").value = value

    def _map_dram(self) -> None:
        self._lib = lib = ctypes.CDLL(None)     # the simulator executable, linked with -rdynamic
        lib.ndp_fast_dram_base.restype = ctypes.c_void_p
        lib.ndp_fast_dram_bytes.restype = ctypes.c_ulonglong
        base, size = lib.ndp_fast_dram_base(), lib.ndp_fast_dram_bytes()
        if not base:
            raise RuntimeError("ndp_fast_top's DRAM is not allocated (ndp_dram_init did not run)")
        self.dram = np.ctypeslib.as_array(ctypes.cast(base, ctypes.POINTER(ctypes.c_uint8)), shape=(size,))

    async def reset(self, cycles: int = 4) -> None:
        """Hold `rst` high for `cycles` clock edges, the device and the DRAM models with it
        (their bursts in flight are dropped), then release it. Not during a register access
        of this transport: the register sequencer is reset too."""
        if cycles < 1:
            raise ValueError(f"cycles must be >= 1, got {cycles!r}")
        await self._wait_ready()
        if self._lock.locked():
            raise RuntimeError("reset during a register access")
        self.dut.rst_force.value = 1
        await Timer(cycles * self.period_ps, "ps")
        self.dut.rst_force.value = 0
        await Timer(self.period_ps, "ps")

    # ---- faults and stalls inside the DRAM model (ndp_axi_dram.sv) ---------------------

    async def add_dram_fault(self, lo: int, hi: int, read: int = 2, write: int = 2) -> None:
        """Lines overlapping [lo, hi) answer `read` (RRESP) to the device's reads and `write`
        (BRESP) to its writes: 0 OKAY, 2 SLVERR, 3 DECERR (sim/memory.py DramFaults)."""
        for name, resp in (("read", read), ("write", write)):
            if resp not in RESP_NAMES or resp == RESP_EXOKAY:
                raise ValueError(f"{name} response must be 0, 2 or 3, got {resp!r}")
        if not 0 <= lo < hi:
            raise ValueError(f"fault range [{lo!r}, {hi!r}) is empty or negative")
        await self._wait_ready()
        self._lib.ndp_fast_dram_add_fault(ctypes.c_ulonglong(lo), ctypes.c_ulonglong(hi), read, write)

    async def clear_dram_faults(self) -> None:
        await self._wait_ready()
        self._lib.ndp_fast_dram_clear_faults()

    async def set_dram_stalls(self, permille: int, seed: int = 1) -> None:
        """From the next edge on, every DRAM channel (AR, R, AW, W, B of each port) and the
        register port's handshakes stall with probability permille / 1000 per edge, from a
        generator seeded with `seed`; 0 turns the stalls off."""
        if not 0 <= permille <= 1000:
            raise ValueError(f"permille must be in [0, 1000], got {permille!r}")
        await self._wait_ready()
        self._lib.ndp_fast_dram_set_stalls(ctypes.c_ulonglong(seed), permille)

    def stall_counts(self) -> dict[str, int]:
        """Stalls inserted so far per channel kind, every port together: {"ar": n, ...}."""
        self._lib.ndp_fast_dram_stall_count.restype = ctypes.c_ulonglong
        return {kind: int(self._lib.ndp_fast_dram_stall_count(k)) for k, kind in enumerate(("ar", "r", "aw", "w", "b"))}

    def _range(self, addr: int, length: int, pasid: int, write: bool) -> slice:
        if addr < 0 or addr + length > len(self.dram):
            raise MemAccessError(addr, length, pasid, "DECERR", write=write)
        return slice(addr, addr + length)

    async def mem_write(self, addr: int, data: bytes, pasid: int) -> None:
        """Backdoor store: no simulated time, no PASID filter (see the module doc)."""
        await self._wait_ready()
        array = np.frombuffer(bytes(data), np.uint8)
        self.dram[self._range(addr, len(array), pasid, True)] = array

    async def mem_read(self, addr: int, length: int, pasid: int) -> bytes:
        """Backdoor load: no simulated time, no PASID filter (see the module doc)."""
        await self._wait_ready()
        return self.dram[self._range(addr, length, pasid, False)].tobytes()

    # ---- registers ------------------------------------------------------------------------

    async def _reg_access(self, write: bool, offset: int, value: int, pasid: int) -> tuple[int, int]:
        await self._wait_ready()
        async with self._lock:
            dut = self.dut
            dut.reg_we.value = int(write)
            dut.reg_addr.value = offset
            dut.reg_wdata.value = value
            dut.reg_pasid.value = pasid
            self._req ^= 1
            dut.reg_req.value = self._req
            while int(dut.reg_ack.value) != self._req:
                await dut.reg_ack.value_change
            return int(dut.reg_resp.value), int(dut.reg_rdata.value)

    async def reg_write(self, offset: int, value: int, pasid: int) -> None:
        resp, _ = await self._reg_access(True, offset, int(value) & 0xFFFF_FFFF, pasid)
        if resp != RESP_OKAY:
            raise RegisterAccessError(offset, pasid, RESP_NAMES[resp], write=True)

    async def reg_read(self, offset: int, pasid: int = HOST_PASID) -> int:
        resp, data = await self._reg_access(False, offset, 0, pasid)
        if resp != RESP_OKAY:
            raise RegisterAccessError(offset, pasid, RESP_NAMES[resp], write=False)
        return data

    # ---- interrupts -----------------------------------------------------------------------

    def irq_seen(self, queue: int) -> int:
        """The pulses of `queue` ndp_fast_top has counted (mod 2^32)."""
        return (int(self.dut.irq_count.value) >> (COUNT_BITS * queue)) & ((1 << COUNT_BITS) - 1)

    def _take_irq(self, queue: int) -> bool:
        """Consume one counted pulse of `queue` if the hardware counted more than we took."""
        if (self.irq_seen(queue) - self._irq_taken[queue]) % (1 << COUNT_BITS):
            self._irq_taken[queue] = (self._irq_taken[queue] + 1) % (1 << COUNT_BITS)
            return True
        return False

    async def wait_irq(self, queue: int, timeout_cycles: int) -> bool:
        # The counters in ndp_fast_top count every pulse, also while nobody waits, so a
        # pulse is never lost; Python wakes only when some counter changes or at the timeout.
        await self._wait_ready()
        deadline = int(get_sim_time("ps")) + timeout_cycles * self.period_ps
        while not self._take_irq(queue):
            left = deadline - int(get_sim_time("ps"))
            if left <= 0:
                return False
            await First(self.dut.irq_count.value_change, Timer(left, "ps"))
        return True
