"""A pool of NDP devices behind one host (PLoRA sections V-B and VI): submit work to any
device, collect the completions in the order they arrive, place tensors per device.

    async def main():
        pool = await DevicePool.model(cfg, 2, log2_depth=2, log2_slot=16)
        w = [await pool.upload(d, weights[d]) for d in range(2)]
        tickets = [await pool.submit(d, matmul_descriptor(Op.GEMV, w[d], 1), x.tobytes())
                   for d in range(2)]
        async for ticket, completion in pool.as_completed(tickets):
            ...
    driver.clock.run(main())

The pool only awaits transport methods one after the other (no asyncio tasks), so it
runs under cocotb's scheduler on the RTL as under asyncio on the model.
"""
import collections
import dataclasses
from collections.abc import AsyncIterator, Generator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from isa import Descriptor, payload_bytes
from isa.errors import ArgumentError, NdpError, index_arg

from .alloc import RangeAllocator
from .attention import F16
from .device import NdpDevice
from .errors import DeviceTimeout
from .queue import Completion, Queue
from .transport import Transport

if TYPE_CHECKING:
    from isa import DeviceConfig
    from isa.encoders import DeviceTensor, KvBlock, LoraAdapter, PagedKvShare

    from .clock import SimClock


@dataclasses.dataclass(frozen=True)
class Ticket:
    """One submitted descriptor. `await ticket` waits for its Completion (Queue.wait;
    status unchecked); DevicePool.as_completed collects many."""
    device: int
    queue: int
    seq: int
    descriptor: Descriptor
    owner: Queue = dataclasses.field(compare=False, repr=False)     # the Queue it went to

    def __await__(self) -> Generator[Any, None, Completion]:
        return self.owner.wait(self.seq).__await__()


class DevicePool:
    """N devices, each with its queues configured on one memory map: the rings of every
    queue at the bottom of its DRAM, then one data range up to its DRAM size, shared by
    all of its queues and placed by one RangeAllocator (`allocators[device]`).

    Made by `open` (any transports) or `model` (ModelTransports on one SimClock).
    """
    POLL_CYCLES = 16        # device cycles between two sweeps of as_completed that find nothing

    def __init__(self, devices: Iterable[NdpDevice], allocators: Iterable[RangeAllocator], pasid: int,
                 clock: "SimClock | None" = None) -> None:
        self.devices = list(devices)            # NdpDevice per device
        self.allocators = list(allocators)      # RangeAllocator per device
        self.pasid = pasid
        self.clock = clock
        if clock is not None:   # a sweep's pause is POLL_CYCLES of the fastest device
            # on a clock, every transport is a ModelTransport (open checks it), with a cfg
            self._fastest_hz = max(d.transport.cfg.clock_hz for d in self.devices)  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.devices)

    def __repr__(self) -> str:
        return f"DevicePool({len(self)!r} devices, pasid={self.pasid!r}, clock={self.clock!r})"

    # ---- opening ---------------------------------------------------------------------------

    @classmethod
    async def open(cls, transports: Iterable[Transport], *, log2_depth: int = 4, log2_slot: int = 20,
                   queues: Iterable[int] | None = None, pasid: int = 0, irq: bool = False,
                   clock: "SimClock | None" = None, data_limit: int | None = None) -> "DevicePool":
        """Open an NdpDevice per transport and configure its `queues` (indices; default
        all): queue i of the list gets SQ ring 2i and CQ ring 2i + 1 from address 0, and
        every queue the data range from there to `data_limit` (default: a model
        transport's cfg.dram_bytes). With a SimClock `clock`, every transport must run on it."""
        transports = list(transports)
        if not transports:
            raise ArgumentError("a pool needs at least one transport")
        if clock is not None:
            for i, transport in enumerate(transports):
                if getattr(transport, "clock", None) is not clock:
                    raise ArgumentError(f"device {i}: {transport!r} does not run on the pool's "
                                        f"clock {clock!r}: give it ModelTransport(cfg, clock=clock)")
        devices: list[NdpDevice] = []
        allocators: list[RangeAllocator] = []
        for i, transport in enumerate(transports):
            dev = await NdpDevice.open(transport)
            indices = list(range(dev.caps.num_queues)) if queues is None else list(queues)
            if not indices:
                raise ArgumentError(f"device {i}: no queue to configure (queues={queues!r})")
            ring = 1 << (log2_depth + log2_slot)
            data_base = 2 * len(indices) * ring
            limit = cls._data_limit(i, transport, data_limit)
            if data_base >= limit:
                raise ArgumentError(f"device {i}: the rings of {len(indices)!r} queues take "
                                    f"{data_base:#x} bytes, no less than its {limit:#x} bytes of "
                                    f"DRAM: use a smaller log2_depth or log2_slot, or fewer queues")
            allocator = RangeAllocator(data_base, limit, name=f"device {i}")
            for position, q in enumerate(indices):
                await dev.configure_queue(q, sq_base=2 * position * ring, cq_base=(2 * position + 1) * ring,
                                          data_base=data_base, data_limit=limit, log2_depth=log2_depth,
                                          log2_slot=log2_slot, pasid=pasid, irq=irq, allocator=allocator)
            devices.append(dev)
            allocators.append(allocator)
        return cls(devices, allocators, pasid, clock)

    @staticmethod
    def _data_limit(i: int, transport: Transport, data_limit: int | None) -> int:
        if data_limit is not None:
            return data_limit
        model = getattr(transport, "model", None)
        if model is None:
            raise ArgumentError(f"device {i}: the DRAM size of {transport!r} is not known; "
                                f"give data_limit")
        return model.cfg.dram_bytes

    @classmethod
    async def model(cls, cfg: "DeviceConfig", n: int, compute_results: bool = True, **kwargs: Any) -> "DevicePool":
        """A pool of `n` model devices of config `cfg` on one SimClock; call it inside
        driver.clock.run. `compute_results` false makes them timing-only (sim/device.py
        NdpModel). Other keyword arguments go to `open`."""
        from .clock import SimClock
        from .model_transport import ModelTransport  # `import driver` stays free of sim/
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ArgumentError(f"a pool needs an integer number of devices >= 1, got n={n!r}")
        clock = SimClock()
        clock.now           # noqa: B018 -- read for its check: refuses at once outside driver.clock.run
        return await cls.open([ModelTransport(cfg, clock=clock, compute_results=compute_results) for _ in range(n)],
                              clock=clock, **kwargs)

    # ---- submitting ------------------------------------------------------------------------

    def device(self, device: int) -> NdpDevice:
        """The NdpDevice of index `device`."""
        return self.devices[index_arg(device, "device", len(self.devices))]

    async def submit(self, device: int, desc: Descriptor, payload: bytes = b"", queue: int | None = None) -> Ticket:
        """Submit one descriptor to `device` (to `queue`, default its least loaded queue);
        returns its Ticket. See submit_many."""
        [ticket] = await self.submit_many([(device, desc, payload, queue)])
        return ticket

    async def submit_many(self, items: Iterable[Sequence[Any]]) -> list[Ticket]:
        """Submit items (device, desc[, payload[, queue]]); returns their Tickets in order.

        Everything is checked before any device is touched (the descriptor as
        NdpDevice.check_fits does, the payload against the descriptor's in_size, which it
        is zero-padded to, every queue's free slots), so either all are submitted or none.
        A queue of None is the device's least loaded queue, counting this call's items.
        Per device, every slot is written before any doorbell rings, and each queue's
        doorbell rings once; a device is rung before the next device's slots are written,
        so it starts while the host writes on.
        """
        items = list(items)
        # device -> {queue index: [(n, desc, payload)]}
        plan: dict[int, dict[int, list[tuple[int, Descriptor, bytes]]]] = collections.defaultdict(dict)
        for n, item in enumerate(items):
            device, desc, payload, queue = self._item(n, item)
            dev = self.devices[device]
            if not isinstance(desc, Descriptor):
                raise ArgumentError(f"item {n}: expected an isa.Descriptor, got {desc!r}")
            if queue is None:
                load = {q: len(dev.queues[q].outstanding) + len(plan[device].get(q, ()))
                        for q in dev.queues}
                queue = min(load, key=lambda q: (load[q], q))
            queue = dev.queue(queue)
            dev.check_fits(queue, desc)
            room = payload_bytes(desc)
            if len(payload) > room:
                raise ArgumentError(f"item {n}: payload of {len(payload)!r} bytes is longer than "
                                    f"the {room!r} bytes the descriptor's in_size reads")
            plan[device].setdefault(queue.index, []).append((n, desc, payload + bytes(room - len(payload))))
        for device, by_queue in plan.items():
            for q, group in by_queue.items():
                self.devices[device].queues[q].check_room(len(group))
        # Take every sequence number before the first await, so that no other coroutine
        # can fill a queue between the checks above and the writes below.
        tickets: list[Any] = [None] * len(items)
        per_device = []
        for device, by_queue in plan.items():
            work = []                              # (queue, what its take returned)
            for q, group in by_queue.items():
                queue = self.devices[device].queues[q]
                taken = queue.take([(desc, payload) for _, desc, payload in group])
                work.append((queue, taken))
                for (n, desc, _), (seq, _, _) in zip(group, taken, strict=True):
                    tickets[n] = Ticket(device, q, seq, desc, queue)
            per_device.append(work)
        for work in per_device:
            for queue, taken in work:
                await queue.write(taken)
            for queue, _ in work:
                await queue.ring()
        return tickets

    def _item(self, n: int, item: Sequence[Any]) -> tuple[int, Descriptor, bytes, Any]:
        item = tuple(item)
        if not 2 <= len(item) <= 4:
            raise ArgumentError(f"item {n}: expected (device, desc[, payload[, queue]]), got {item!r}")
        device, desc, payload, queue = item + (b"", None)[len(item) - 2:]
        return index_arg(device, f"item {n}: device", len(self.devices)), desc, bytes(payload), queue

    # ---- completions -----------------------------------------------------------------------

    async def as_completed(self, tickets: Iterable[Ticket],
                           timeout_cycles: int | None = None) -> AsyncIterator[tuple[Ticket, Completion]]:
        """Yield (ticket, Completion) as the completions arrive, across queues and devices
        (status unchecked). Raises DeviceTimeout, naming a ticket left (the first by device
        and queue), when nothing arrives within `timeout_cycles` (default
        Queue.DEFAULT_TIMEOUT_CYCLES).

        Polling sweeps: one queue completes in seq order, so a sweep reads the oldest
        pending ticket of each queue (then the next, while they are done). After a sweep
        that found nothing, POLL_CYCLES pass: on the pool's clock, else on each distinct
        transport in turn.
        """
        pending: dict[int, list[Ticket]] = {}      # id(queue) -> its pending tickets, oldest first
        for ticket in tickets:
            if not isinstance(ticket, Ticket):
                raise ArgumentError(f"expected a Ticket, got {ticket!r}")
            if ticket.seq not in ticket.owner.outstanding:
                raise NdpError(f"{ticket!r} is not outstanding: its completion was read already")
            held = pending.setdefault(id(ticket.owner), [])
            if ticket in held:
                raise ArgumentError(f"{ticket!r} is given twice")
            held.append(ticket)
        lines = {key: collections.deque(sorted(line, key=lambda t: t.seq)) for key, line in pending.items()}
        if timeout_cycles is None:
            timeout_cycles = Queue.DEFAULT_TIMEOUT_CYCLES
        waited = 0
        while lines:
            arrived = False
            for key, line in list(lines.items()):
                while line:
                    completion = await line[0].owner.poll(line[0].seq)
                    if completion is None:
                        break
                    arrived = True
                    yield line.popleft(), completion
                if not line:
                    del lines[key]
            if arrived or not lines:
                waited = 0
                continue
            if waited >= timeout_cycles:
                left = min((line[0] for line in lines.values()), key=lambda t: (t.device, t.queue))
                raise DeviceTimeout(left.queue, left.seq, timeout_cycles, device=left.device)
            await self._pause()
            waited += self.POLL_CYCLES

    async def _pause(self) -> None:
        if self.clock is not None:
            await self.clock.sleep(self.POLL_CYCLES / self._fastest_hz)
            return
        seen = set()
        for dev in self.devices:
            if id(dev.transport) not in seen:
                seen.add(id(dev.transport))
                await dev.transport.wait_cycles(self.POLL_CYCLES)

    # ---- device memory ---------------------------------------------------------------------

    def allocate(self, device: int, nbytes: int, align: int | None = None) -> int:
        """A 64-byte aligned range of `nbytes` in the device's data range (first fit; with
        `align`, at a multiple of it); OutOfDeviceMemory, naming the device, when none is free."""
        return self.allocators[index_arg(device, "device", len(self))].allocate(nbytes, align)

    def free(self, device: int, addr: int) -> None:
        self.allocators[index_arg(device, "device", len(self))].free(addr)

    async def upload(self, device: int, array: F16) -> "DeviceTensor":
        """Place a 2-D float16 array on `device`; returns its DeviceTensor."""
        return await self.device(device).upload(array)

    async def upload_lora(self, device: int, a: F16, b: F16) -> "LoraAdapter":
        return await self.device(device).upload_lora(a, b)

    async def upload_kv(self, device: int, k: F16, v: F16) -> "KvBlock":
        return await self.device(device).upload_kv(k, v)

    def free_tensor(self, device: int, placed: "DeviceTensor | LoraAdapter | KvBlock | PagedKvShare") -> None:
        """Give back a DeviceTensor, LoraAdapter or KvBlock placed on `device`. Which
        device holds what is the caller's to know: the objects do not say."""
        self.device(device).free(placed)

    async def mem_write(self, device: int, addr: int, data: bytes) -> None:
        """CXL.mem store on `device` with the pool's PASID."""
        await self.device(device).transport.mem_write(addr, data, self.pasid)

    async def mem_read(self, device: int, addr: int, length: int) -> bytes:
        return await self.device(device).transport.mem_read(addr, length, self.pasid)
