"""One submission/completion queue pair in HDM (spec section 2) as the host sees it."""
import dataclasses
import struct
from collections.abc import Iterable

from isa import Descriptor, Status, regs, result_bytes, slots
from isa.errors import ArgumentError, NdpError
from isa.regs import REG_BITS

from .alloc import RangeAllocator
from .errors import CompletionError, DeviceTimeout, QueueFull
from .transport import Transport

U64 = struct.Struct("<Q")       # the valid word and the completion word
U32 = struct.Struct("<I")       # the completion status


@dataclasses.dataclass(frozen=True)
class Completion:
    seq: int
    status: Status
    cycles: int
    result: bytes               # empty unless status is OK
    queue: int | None = None
    descriptor: Descriptor | None = None

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def check(self) -> "Completion":
        """Return self if the status is OK, else raise CompletionError."""
        if not self.ok:
            raise CompletionError(self.status, self.queue, self.seq, self.descriptor)
        return self


class Queue:
    """A configured queue: its geometry, its PASID, its sequence numbers and its data range.

    Made by NdpDevice.configure_queue. Sequence numbers start at 1; seq s uses slot
    (s - 1) mod depth of both rings. A slot is in use from submit until wait (or poll)
    has read its completion: only then may seq s + depth overwrite it.
    """
    POLL_CYCLES = 64                # cycles between two polls of the completion word
    IRQ_POLL_CYCLES = 1024          # with interrupts, still re-read this often: a pulse
                                    # may have been taken by another waiter of this queue
    DEFAULT_TIMEOUT_CYCLES = 1_000_000

    def __init__(self, transport: Transport, index: int, sq_base: int, cq_base: int, data_base: int,
                 data_limit: int, log2_depth: int, log2_slot: int, pasid: int, irq: bool,
                 allocator: RangeAllocator | None = None) -> None:
        self.transport = transport
        self.index = index
        self.sq_base, self.cq_base = sq_base, cq_base
        self.data_base, self.data_limit = data_base, data_limit
        self.log2_depth, self.log2_slot = log2_depth, log2_slot
        self.pasid = pasid
        self.irq = irq
        self.next_seq = 1
        self._tail = 0                  # newest seq whose valid word is written
        self._in_use: dict[int, Descriptor] = {}    # seq -> descriptor, submitted and not yet waited for
        # placement in the data range; queues sharing one data range share one allocator
        if allocator is None:
            allocator = RangeAllocator(data_base, data_limit, name=f"queue {index}")
        self.allocator = allocator

    @property
    def depth(self) -> int:
        return 1 << self.log2_depth

    @property
    def slot_bytes(self) -> int:
        return 1 << self.log2_slot

    @property
    def payload_room(self) -> int:
        """Bytes of input (submission) or result (completion) one slot holds."""
        return self.slot_bytes - slots.HEADER_BYTES

    @property
    def outstanding(self) -> list[int]:
        """Sequence numbers submitted and not yet waited for."""
        return sorted(self._in_use)

    def sq_slot(self, seq: int) -> int:
        return slots.slot_addr(self.sq_base, seq, self.log2_depth, self.log2_slot)

    def cq_slot(self, seq: int) -> int:
        return slots.slot_addr(self.cq_base, seq, self.log2_depth, self.log2_slot)

    def __repr__(self) -> str:
        return (f"Queue({self.index!r}, sq_base={self.sq_base:#x}, cq_base={self.cq_base:#x}, "
                f"depth={self.depth!r}, slot_bytes={self.slot_bytes!r}, pasid={self.pasid!r}, "
                f"next_seq={self.next_seq!r})")

    # ---- submission --------------------------------------------------------------------

    async def submit(self, desc: Descriptor, payload: bytes = b"") -> int:
        """Write one descriptor and ring the doorbell; returns its sequence number.

        Accepts any descriptor, also one the device will refuse: the device decides
        its status. Only a payload that would spill out of the slot is refused here.
        If a write fails (MemAccessError), the sequence number stays taken but never
        becomes valid, and the device waits at it: configure the queue again.
        """
        [seq] = await self.submit_many([(desc, payload)])
        return seq

    async def submit_many(self, items: Iterable[tuple[Descriptor, bytes]], ring: bool = True) -> list[int]:
        """Write several (descriptor, payload) pairs in order and ring the doorbell once.

        With ring=False the doorbell is left for `ring()`: a host that fills several
        queues first and then rings them all lets the device start on all at once."""
        taken = self.take(items)
        await self.write(taken)
        if ring:
            await self.ring()
        return [seq for seq, _, _ in taken]

    def take(self, items: Iterable[tuple[Descriptor, bytes]]) -> list[tuple[int, Descriptor, bytes]]:
        """Check (descriptor, payload) pairs and take their sequence numbers, all or none;
        returns [(seq, descriptor, payload)] for `write`. It never awaits, so coroutines
        submitting to the same queue concurrently never get the same number, and a caller
        can take on several queues at once before writing to any."""
        items = [(desc, bytes(payload)) for desc, payload in items]
        for desc, payload in items:
            if not isinstance(desc, Descriptor):
                raise ArgumentError(f"expected an isa.Descriptor, got {desc!r}")
            if len(payload) > self.payload_room:
                raise ArgumentError(f"payload of {len(payload)!r} bytes does not fit the "
                                    f"{self.payload_room!r} bytes of a {self.slot_bytes!r}-byte slot")
        self.check_room(len(items))
        first = self.next_seq
        taken = [(first + i, desc, payload) for i, (desc, payload) in enumerate(items)]
        for seq, desc, _ in taken:
            self._in_use[seq] = desc
        self.next_seq = first + len(items)
        return taken

    async def write(self, taken: Iterable[tuple[int, Descriptor, bytes]]) -> None:
        """Write the slots of what `take` returned, in order; the doorbell is left for `ring`."""
        for seq, desc, payload in taken:
            await self._write_slot(seq, desc, payload)

    def check_room(self, count: int) -> None:
        """Raise QueueFull unless the next `count` sequence numbers all find their slot
        free: not held by an earlier seq still in use, nor by one of these (more than depth)."""
        for seq in range(self.next_seq, self.next_seq + count):
            blocking = seq - self.depth
            if blocking in self._in_use or blocking >= self.next_seq:
                raise QueueFull(self.index, seq, blocking)

    async def _write_slot(self, seq: int, desc: Descriptor, payload: bytes) -> None:
        slot = self.sq_slot(seq)
        # Payload and descriptor first, each awaited to its write response; only then
        # the valid word. The device takes the slot when the valid word equals seq, so
        # it can never see a half-written descriptor or payload (spec section 2, step 1).
        if payload:
            await self.transport.mem_write(slot + slots.SQ_PAYLOAD, payload, self.pasid)
        await self.transport.mem_write(slot + slots.SQ_DESC, desc.pack(), self.pasid)
        await self.transport.mem_write(slot + slots.SQ_VALID, U64.pack(seq), self.pasid)
        self._tail = max(self._tail, seq)

    async def ring(self) -> None:
        # The newest written seq, never a smaller one: a concurrent submitter may have
        # written a later slot already, and the tail the device sees should not go back.
        tail = self._tail % (1 << REG_BITS)
        await self.transport.reg_write(regs.queue_reg(self.index, regs.DOORBELL), tail, self.pasid)

    # ---- completion --------------------------------------------------------------------

    async def wait(self, seq: int, timeout_cycles: int | None = None) -> Completion:
        """Wait for the completion of `seq` and read its result; returns a Completion.

        A non-OK status is returned, not raised (see Completion.check). Raises
        DeviceTimeout after about `timeout_cycles` device cycles without it.
        """
        self._outstanding(seq)
        if timeout_cycles is None:
            timeout_cycles = self.DEFAULT_TIMEOUT_CYCLES
        waited = 0
        while True:
            completion = await self.poll(seq)
            if completion is not None:
                return completion
            if waited >= timeout_cycles:
                raise DeviceTimeout(self.index, seq, timeout_cycles)
            waited += await self._pause(timeout_cycles - waited)

    async def poll(self, seq: int) -> Completion | None:
        """One read of the completion header of `seq`: None if it is not written yet, else
        its Completion, with the result payload read (status unchecked)."""
        desc = self._outstanding(seq)
        slot = self.cq_slot(seq)
        header = await self.transport.mem_read(slot, slots.HEADER_BYTES, self.pasid)
        if U64.unpack_from(header, slots.CQ_SEQ)[0] != seq:
            return None
        status_value = U32.unpack_from(header, slots.CQ_STATUS)[0]
        try:
            status = Status(status_value)
        except ValueError:
            raise NdpError(f"queue {self.index!r} seq {seq!r}: completion has unknown "
                           f"status {status_value!r}") from None
        cycles = U64.unpack_from(header, slots.CQ_CYCLES)[0]
        result = b""
        size = result_bytes(desc)
        if status == Status.OK and size:
            result = await self.transport.mem_read(slot + slots.CQ_PAYLOAD, size, self.pasid)
        # Only now may seq + depth reuse this slot.
        self._in_use.pop(seq, None)
        return Completion(seq, status, cycles, result, self.index, desc)

    def _outstanding(self, seq: int) -> Descriptor:
        """The descriptor of `seq`, which must be submitted and not yet completed here."""
        if seq not in self._in_use:
            raise NdpError(f"queue {self.index!r}: seq {seq!r} is not outstanding "
                           f"(outstanding: {self.outstanding!r})")
        return self._in_use[seq]

    async def _pause(self, cycles_left: int) -> int:
        """Let time pass before the next poll; returns the cycles to count against the timeout."""
        if self.irq and self.transport.supports_irq:
            step = min(self.IRQ_POLL_CYCLES, cycles_left)
            if await self.transport.wait_irq(self.index, step):
                return 1    # woken early: count at least one cycle so the loop always ends
            return step
        step = min(self.POLL_CYCLES, cycles_left)
        await self.transport.wait_cycles(step)
        return step

    async def run(self, desc: Descriptor, payload: bytes = b"", timeout_cycles: int | None = None) -> Completion:
        """Submit one descriptor and wait for it; returns the Completion (status unchecked)."""
        seq = await self.submit(desc, payload)
        return await self.wait(seq, timeout_cycles)

    # ---- registers ---------------------------------------------------------------------

    async def read_head(self) -> int:
        """HEAD: the sequence number (mod 2^32) of the newest completion written."""
        return await self.transport.reg_read(regs.queue_reg(self.index, regs.HEAD), regs.HOST_PASID)

    async def read_status(self) -> tuple[int, bool]:
        """STATUS as (last error status, sticky error bit)."""
        value = await self.transport.reg_read(regs.queue_reg(self.index, regs.STATUS), regs.HOST_PASID)
        lsb, width = regs.STATUS_LAST_ERROR
        return (value >> lsb) & ((1 << width) - 1), bool(value & regs.STATUS_STICKY)

    async def clear_error(self) -> None:
        await self.transport.reg_write(regs.queue_reg(self.index, regs.STATUS),
                                       regs.STATUS_STICKY, regs.HOST_PASID)

    # ---- data range --------------------------------------------------------------------

    def allocate(self, nbytes: int, align: int | None = None) -> int:
        """A 64-byte aligned range of `nbytes` in the queue's data range (first fit); with
        `align`, at a multiple of it."""
        return self.allocator.allocate(nbytes, align)

    def free(self, addr: int) -> None:
        """Give back the range `allocate` returned at `addr`."""
        self.allocator.free(addr)

    def free_all(self) -> None:
        """Forget every allocation of the allocator (shared by every queue given it):
        later uploads reuse the data range from its start."""
        self.allocator.free_all()
