"""The monitor: watches what crosses between the host and the device, from outside both.

The driver's transport is routed through a `HostPort` (the bench's interface, handed to the
driver and the monitor through ConfigDB): a `WatchedTransport` passes every call on
unchanged and records each access with its PASID and the answer, as a bus monitor records
beats. The monitor reads those records in order and rebuilds, from them alone, what the
host told the device and what the device answered (`HostSideView`):

- each queue's configuration, from the accepted register writes (ring bases, depth, slot
  size, PASID, enable);
- each submission, from the descriptor and valid words written into the SQ slots;
- each completion, from the completion header and result the host read back out of the CQ
  slots (a `CompletionSeen`);
- each register write to a queue and each refused CXL.mem access, with whether the PASID
  rules say it must be refused, and each doorbell classified by the state of the slots it
  announces and of the ring (a `BusEvent`).

It keeps no reference to the driver's queues or items; it publishes BusEvents and
CompletionSeens on its analysis port, to the scoreboard and the coverage (env.py).
"""
from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

from cocotb.queue import Queue
from pyuvm import ConfigDB, uvm_analysis_port, uvm_component

from driver.errors import MemAccessError, RegisterAccessError
from driver.transport import Transport
from isa import DESC_WORD_BYTES, Descriptor, Status, result_bytes, slots
from isa import regs as R

U64 = struct.Struct("<Q")
U32 = struct.Struct("<I")


@dataclasses.dataclass(frozen=True)
class Access:
    """One transport call as it crossed: `op` is reg_write, reg_read, mem_write or mem_read;
    `data` what was written or what the read returned (bytes on CXL.mem, an int on CXL.io;
    None for a refused read); `response` the error answer, None when accepted."""
    op: str
    addr: int
    pasid: int
    data: bytes | int | None
    length: int = 0
    response: Any = None

    @property
    def refused(self) -> bool:
        return self.response is not None


@dataclasses.dataclass
class BusEvent:
    kind: str               # "doorbell", "config_write", "mem_access"
    queue: int              # -1: no queue's registers or rings
    pasid: int
    refused: bool           # what the device answered
    must_refuse: bool       # what the PASID rules say it must answer
    detail: dict


@dataclasses.dataclass(frozen=True)
class CompletionSeen:
    """A completion as the host read it: the header's status and cycles, the result bytes
    read after it (empty when none was read), the descriptor the host had written into the
    slot of that sequence number."""
    queue: int
    seq: int
    descriptor: Descriptor
    status: Status | int
    cycles: int
    result: bytes


class WatchedTransport(Transport):
    """`inner` with every access handed to `sink` (an Access) after its answer; the inner
    transport's other methods (fault injection, stalls) pass through untouched."""

    def __init__(self, inner: Transport, sink: Callable[[Access], None]):
        self.inner, self.sink = inner, sink

    @property
    def supports_irq(self) -> bool:      # type: ignore[override]
        return self.inner.supports_irq

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def mem_write(self, addr, data, pasid):
        try:
            await self.inner.mem_write(addr, data, pasid)
        except MemAccessError as error:
            self.sink(Access("mem_write", addr, pasid, bytes(data), len(data), error.response))
            raise
        self.sink(Access("mem_write", addr, pasid, bytes(data), len(data)))

    async def mem_read(self, addr, length, pasid):
        try:
            data = await self.inner.mem_read(addr, length, pasid)
        except MemAccessError as error:
            self.sink(Access("mem_read", addr, pasid, None, length, error.response))
            raise
        self.sink(Access("mem_read", addr, pasid, bytes(data), length))
        return data

    async def reg_write(self, offset, value, pasid):
        try:
            await self.inner.reg_write(offset, value, pasid)
        except RegisterAccessError as error:
            self.sink(Access("reg_write", offset, pasid, value, 4, error.response))
            raise
        self.sink(Access("reg_write", offset, pasid, value, 4))

    async def reg_read(self, offset, pasid=R.HOST_PASID):
        try:
            value = await self.inner.reg_read(offset, pasid)
        except RegisterAccessError as error:
            self.sink(Access("reg_read", offset, pasid, None, 4, error.response))
            raise
        self.sink(Access("reg_read", offset, pasid, value, 4))
        return value

    async def wait_cycles(self, n):
        await self.inner.wait_cycles(n)

    async def wait_irq(self, queue, timeout_cycles):
        return await self.inner.wait_irq(queue, timeout_cycles)


class HostPort:
    """The host side of the device, as the bench's interface: `attach` routes a transport
    through it, `get` gives the monitor each access in order."""

    def __init__(self) -> None:
        self.accesses: Queue[Access] = Queue()

    def attach(self, transport: Transport) -> WatchedTransport:
        return WatchedTransport(transport, self.accesses.put_nowait)

    async def get(self) -> Access:
        return await self.accesses.get()

    def drain(self) -> list[Access]:
        """The accesses not yet taken (the run phase may end before the monitor took the last)."""
        out = []
        while not self.accesses.empty():
            out.append(self.accesses.get_nowait())
        return out


@dataclasses.dataclass
class _Ring:
    """A queue as the accepted register writes configured it, and its slots as written."""
    regs: dict = dataclasses.field(default_factory=dict)     # register offset -> value
    enabled: bool = False
    last_tail: int = 0
    descs: dict = dataclasses.field(default_factory=dict)    # SQ slot address -> descriptor bytes
    valid: dict = dataclasses.field(default_factory=dict)    # SQ slot address -> valid word
    submitted: dict = dataclasses.field(default_factory=dict)  # seq -> Descriptor, not completed yet
    awaiting_result: dict = dataclasses.field(default_factory=dict)  # CQ payload address -> (seq, desc, status, cycles)

    def value(self, lo: int) -> int:
        return self.regs.get(lo, 0) | (self.regs.get(lo + 4, 0) << R.REG_BITS)

    @property
    def sq_base(self) -> int:
        return self.value(R.SQ_BASE_LO)

    @property
    def cq_base(self) -> int:
        return self.value(R.CQ_BASE_LO)

    def field(self, lsb_width: tuple[int, int]) -> int:
        lsb, width = lsb_width
        return (self.regs.get(R.CFG, 0) >> lsb) & ((1 << width) - 1)

    @property
    def pasid(self) -> int:
        return self.field(R.CFG_PASID)

    @property
    def depth(self) -> int:
        return 1 << self.field(R.CFG_LOG2_DEPTH)

    @property
    def slot_bytes(self) -> int:
        return 1 << self.field(R.CFG_LOG2_SLOT)

    def slot(self, base: int, seq: int) -> int:
        return base + ((seq - 1) % self.depth) * self.slot_bytes

    def in_ring(self, base: int, addr: int, length: int) -> bool:
        return addr < base + self.depth * self.slot_bytes and base < addr + max(length, 1)


class HostSideView:
    """What the accesses say, rebuilt from them alone: `see` takes one Access and returns the
    BusEvents and CompletionSeens it makes. `num_queues` is the device config's; `host_port`
    whether CXL.mem accesses go through the device's PASID filter (not on the fast path,
    whose host data goes through the DRAM backdoor)."""

    def __init__(self, num_queues: int, host_port: bool):
        self.num_queues, self.host_port = num_queues, host_port
        self.rings = [_Ring() for _ in range(num_queues)]

    def see(self, access: Access) -> list[BusEvent | CompletionSeen]:
        if access.op == "reg_write":
            return self._reg_write(access)
        if access.op == "mem_write":
            return self._mem_write(access)
        if access.op == "mem_read":
            return self._mem_read(access)
        return []

    # ---- CXL.io ------------------------------------------------------------------------------

    def _reg_write(self, a: Access) -> list[BusEvent | CompletionSeen]:
        assert isinstance(a.data, int)
        if not R.QUEUE_BASE <= a.addr < R.queue_reg(self.num_queues, 0):
            if a.pasid != R.HOST_PASID or a.refused:
                return [BusEvent("config_write", -1, a.pasid, a.refused, a.pasid != R.HOST_PASID, {"reg": a.addr})]
            return []
        q, reg = divmod(a.addr - R.QUEUE_BASE, R.QUEUE_STRIDE)
        ring = self.rings[q]
        if reg != R.DOORBELL:
            event = BusEvent("config_write", q, a.pasid, a.refused, a.pasid != R.HOST_PASID, {"reg": reg})
            if not a.refused:
                if reg == R.CTRL:
                    enable = bool(a.data & R.CTRL_ENABLE)
                    if enable and not ring.enabled:       # (re)enabling restarts the sequence numbers
                        ring.last_tail = 0
                        ring.submitted.clear()
                        ring.awaiting_result.clear()
                    ring.enabled = enable
                ring.regs[reg] = a.data
            return [event]
        tail, last = a.data, ring.last_tail
        announced = range(last + 1, tail + 1)
        detail = {"tail": tail, "last_tail": last, "repeated": tail == last, "stale": tail < last,
                  "wrapped": tail > ring.depth, "full": len(ring.submitted) == ring.depth,
                  "before_valid": any(ring.valid.get(ring.slot(ring.sq_base, s)) != s for s in announced)}
        if not a.refused:
            ring.last_tail = max(last, tail)
        return [BusEvent("doorbell", q, a.pasid, a.refused, a.pasid != ring.pasid, detail)]

    # ---- CXL.mem -----------------------------------------------------------------------------

    def _foreign(self, a: Access) -> tuple[int, bool]:
        """(the queue whose rings the access touches or -1, whether the PASID filter must refuse it)."""
        for q, ring in enumerate(self.rings):
            if ring.enabled and (ring.in_ring(ring.sq_base, a.addr, a.length) or
                                 ring.in_ring(ring.cq_base, a.addr, a.length)):
                return q, self.host_port and a.pasid != ring.pasid
        return -1, False

    def _checked(self, a: Access, write: bool) -> BusEvent | None:
        q, must = self._foreign(a)
        if a.refused or must:
            return BusEvent("mem_access", q, a.pasid, a.refused, must,
                            {"write": write, "addr": a.addr, "response": a.response})
        return None

    def _mem_write(self, a: Access) -> list[BusEvent | CompletionSeen]:
        event = self._checked(a, True)
        if a.refused:
            return [event] if event else []
        assert isinstance(a.data, bytes)
        for ring in self.rings:
            if not ring.regs or not ring.in_ring(ring.sq_base, a.addr, a.length):
                continue
            first = (a.addr - ring.sq_base) // ring.slot_bytes
            for i in range(max(first, 0), ring.depth):
                slot = ring.sq_base + i * ring.slot_bytes
                if slot >= a.addr + a.length:
                    break
                desc = self._covered(a, slot + slots.SQ_DESC, DESC_WORD_BYTES)
                if desc is not None:
                    ring.descs[slot] = desc
                valid = self._covered(a, slot + slots.SQ_VALID, 8)
                if valid is not None:
                    seq = U64.unpack(valid)[0]
                    ring.valid[slot] = seq
                    if seq and ring.enabled and slot in ring.descs:
                        ring.submitted[seq] = Descriptor.unpack(ring.descs[slot])
        return [event] if event else []

    @staticmethod
    def _covered(a: Access, addr: int, length: int) -> bytes | None:
        """The bytes [addr, addr + length) if the write covered all of them."""
        assert isinstance(a.data, bytes)
        if a.addr <= addr and addr + length <= a.addr + a.length:
            return a.data[addr - a.addr:addr - a.addr + length]
        return None

    def _mem_read(self, a: Access) -> list[BusEvent | CompletionSeen]:
        event = self._checked(a, False)
        out: list[BusEvent | CompletionSeen] = [event] if event else []
        if a.refused:
            return out
        assert isinstance(a.data, bytes)
        for q, ring in enumerate(self.rings):
            pending = ring.awaiting_result.pop(a.addr, None)
            if pending is not None:
                seq, desc, status, cycles = pending
                out.append(CompletionSeen(q, seq, desc, status, cycles, a.data))
                continue
            if not ring.enabled or a.length < slots.HEADER_BYTES or not ring.in_ring(ring.cq_base, a.addr, 1):
                continue
            seq = U64.unpack_from(a.data, slots.CQ_SEQ)[0]
            if seq not in ring.submitted or ring.slot(ring.cq_base, seq) != a.addr:
                continue                       # not written yet: the slot still holds an older seq
            desc = ring.submitted.pop(seq)
            raw = U32.unpack_from(a.data, slots.CQ_STATUS)[0]
            status = Status(raw) if raw in Status._value2member_map_ else raw
            cycles = U64.unpack_from(a.data, slots.CQ_CYCLES)[0]
            if status == Status.OK and result_bytes(desc):
                ring.awaiting_result[a.addr + slots.CQ_PAYLOAD] = (seq, desc, status, cycles)
            else:
                out.append(CompletionSeen(q, seq, desc, status, cycles, b""))
        return out

    def unfinished(self) -> list[CompletionSeen]:
        """The completions whose header the host read but not (yet) their result: reported
        with no result bytes, so the scoreboard sees them."""
        out = []
        for q, ring in enumerate(self.rings):
            for seq, desc, status, cycles in ring.awaiting_result.values():
                out.append(CompletionSeen(q, seq, desc, status, cycles, b""))
            ring.awaiting_result.clear()
        return out


class TransportMonitor(uvm_component):
    def build_phase(self):
        self.ap = uvm_analysis_port("ap", self)

    def start_of_simulation_phase(self):
        settings = ConfigDB().get(self, "", "SETTINGS")
        self.port = ConfigDB().get(self, "", "HOST_PORT")
        self.view = HostSideView(settings.device_config().num_queues, settings.host_port)
        self.accesses = 0

    async def run_phase(self):
        while True:
            self._publish(await self.port.get())

    def extract_phase(self):
        for access in self.port.drain():
            self._publish(access)
        for seen in self.view.unfinished():
            self.ap.write(seen)

    def _publish(self, access):
        self.accesses += 1
        for observed in self.view.see(access):
            self.ap.write(observed)
