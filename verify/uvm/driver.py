"""The driver: opens the backend of the top this simulation was built with, routes its
transport through the bench's HostPort (so the monitor sees every access), and turns each
item into host actions through the project's driver (driver/), dispatched on the item's
type (`drive`). It records on the item what it meant and what it read back, and publishes
it: the scoreboard holds the intent against what the monitor saw, the coverage counts the
injected faults and stalls."""
import functools
import struct
import zlib

import cocotb
from pyuvm import ConfigDB, uvm_analysis_port, uvm_driver

import isa
from driver.device import NdpDevice
from driver.errors import MemAccessError, RegisterAccessError
from isa import DescType, Status, slots
from isa import regs as R
from isa.validate import check_pages, page_count, paged, result_bytes
from rtlbench import stream
from rtlbench.env import backend_class
from verify import fuzz

from .items import (
    DescriptorItem,
    EarlyDoorbellItem,
    FillQueueItem,
    ForeignConfigItem,
    ForeignDoorbellItem,
    ForeignMemItem,
    NdpItem,
    RepeatedDoorbellItem,
    StallsItem,
)

U64 = struct.Struct("<Q")
QUIET_CYCLES = 300            # how long a refused or premature doorbell must leave the queue idle


def layout(cfg):
    """The queues as every part of the environment configures them: verify/fuzz.py's
    window, each queue bound to its own PASID."""
    return [dict(sq_base=q * fuzz.SPAN + fuzz.SQ, cq_base=q * fuzz.SPAN + fuzz.CQ,
                 data_base=q * fuzz.SPAN + fuzz.DATA, data_limit=q * fuzz.SPAN + fuzz.DATA_END,
                 log2_depth=fuzz.LOG2_DEPTH, log2_slot=fuzz.LOG2_SLOT, pasid=stream.pasid_of(q))
            for q in range(fuzz.n_queues(cfg))]


async def configure(dev, cfg):
    return [await dev.configure_queue(q, **kw) for q, kw in enumerate(layout(cfg))]


class NdpDriver(uvm_driver):
    def build_phase(self):
        self.ap = uvm_analysis_port("ap", self)

    def start_of_simulation_phase(self):
        self.settings = ConfigDB().get(self, "", "SETTINGS")
        self.port = ConfigDB().get(self, "", "HOST_PORT")
        self.backpressure = False

    async def open(self):
        """The backend started (clock, reset, the device opened), its transport through the
        HostPort: self.env, self.dev (the project's driver on the watched transport)."""
        self.env = await backend_class().open(cocotb.top)
        self.cfg = self.env.cfg
        if (self.env.name, self.cfg.name) != (self.settings.backend, self.settings.device_config().name):
            raise RuntimeError(f"the settings say {self.settings.backend} on {self.settings.config}, "
                               f"the simulation is {self.env.name} on {self.cfg.name}")
        self.dev = NdpDevice(self.port.attach(self.transport(self.env.transport)), self.env.dev.caps)

    def transport(self, transport):
        """The device's transport as the host and the monitor see it (a test may put a
        faulty device in its place: env.py CorruptingDriver)."""
        return transport

    async def run_phase(self):
        await self.open()
        self.queues = await configure(self.dev, self.cfg)
        while True:
            item = await self.seq_item_port.get_next_item()
            before = self.env.stall_counts()
            item.backpressure = self.backpressure
            await self.drive(item)
            after = self.env.stall_counts()
            item.stalls = {k: after[k] - before.get(k, 0) for k in after}
            for queue in self.queues:
                queue.free_all()
            self.publish(item)
            self.seq_item_port.item_done()

    def publish(self, item):
        """What the device answered, to the scoreboard and the coverage."""
        self.ap.write(item)

    # ---- helpers ------------------------------------------------------------------------

    async def _prepare(self, item):
        """The item's descriptor and payload, its data uploaded; and the decode rules' status."""
        queue = self.queues[item.queue]
        if isinstance(item.recipe, fuzz.Case):
            desc, payload = item.recipe.desc, item.recipe.payload
        else:
            desc, payload = await stream.prepare(self.dev, queue, item.recipe, item.recipe.arrays())
        view = fuzz.queue_view(self.cfg, item.queue)
        item.desc, item.payload = desc, payload
        item.expected = isa.check_descriptor(desc, view, self.cfg)
        if item.expected == Status.OK and paged(desc):
            # a paged ATTENTION's list decides the rest (isa/validate.py check_pages)
            raw = await self.dev.transport.mem_read(desc.dev_addr, 8 * page_count(desc), queue.pasid)
            entries = [int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8)]
            item.expected = check_pages(desc, entries, view, self.cfg)
        return queue, desc, payload

    async def _quiet(self, queue, head, what, item):
        await self.env.cycles(QUIET_CYCLES)
        item.checks.append((what, await queue.read_head() == head))

    # ---- actions, one per item type ---------------------------------------------------------

    @functools.singledispatchmethod
    async def drive(self, item):
        raise TypeError(f"{type(item).__name__}: no action of the driver takes it")

    @drive.register
    async def descriptor(self, item: DescriptorItem):
        await self.run_descriptor(item)

    async def run_descriptor(self, item: NdpItem):
        """Submit the item's descriptor (its fault injected where it reaches the line), wait
        for its completion; a non-OK status must be in STATUS, sticky, then cleared."""
        queue, desc, payload = await self._prepare(item)
        fault = self._fault_range(item, queue, desc)
        if fault is not None:
            await self.env.add_dram_fault(*fault)
            item.expected = Status.DRAM_ERROR
        try:
            completion = await queue.run(desc, payload, timeout_cycles=fuzz.TIMEOUT_CYCLES)
        finally:
            if item.fault is not None:
                await self.env.clear_dram_faults()
        item.completions.append(completion)
        if completion.status != Status.OK:
            status = await queue.read_status()
            item.checks.append(("STATUS holds the error, sticky", status == (completion.status, True)))
            await queue.clear_error()

    def _fault_range(self, item, queue, desc):
        """(lo, hi, read, write) of the item's fault, if the descriptor reaches the line:
        reads it (a read fault) or writes it (a write fault)."""
        if item.fault is None or item.expected != Status.OK:
            return None
        which, read, write = item.fault
        seq, store = queue.next_seq, desc.type == DescType.STORE
        lo, reads, writes = {
            "operand": (desc.dev_addr, desc.dev_size and not store, desc.dev_size and store),
            "input": (queue.sq_slot(seq) + slots.SQ_PAYLOAD, desc.in_size, False),
            "result": (queue.cq_slot(seq) + slots.CQ_PAYLOAD, False, result_bytes(desc))}[which]
        reached = ("read", read) if read and reads else ("write", write) if write and writes else None
        item.fault_reached = reached          # (what the device does to the line, the answer)
        return None if reached is None else (lo, lo + slots.LINE_BYTES, read, write)

    @drive.register
    async def early_doorbell(self, item: EarlyDoorbellItem):
        """The doorbell overtakes the valid word: nothing may run until it is written."""
        queue, desc, payload = await self._prepare(item)
        [(seq, _, _)] = queue.take([(desc, payload)])
        slot, t = queue.sq_slot(seq), self.dev.transport
        if payload:
            await t.mem_write(slot + slots.SQ_PAYLOAD, payload, queue.pasid)
        await t.mem_write(slot + slots.SQ_DESC, desc.pack(), queue.pasid)
        await t.reg_write(R.queue_reg(queue.index, R.DOORBELL), seq, queue.pasid)
        await self._quiet(queue, seq - 1, "no completion before the valid word", item)
        await t.mem_write(slot + slots.SQ_VALID, U64.pack(seq), queue.pasid)
        item.completions.append(await queue.wait(seq, fuzz.TIMEOUT_CYCLES))

    @drive.register
    async def repeated_doorbell(self, item: RepeatedDoorbellItem):
        """The same tail rung again, then an older one: no descriptor runs twice."""
        queue, desc, payload = await self._prepare(item)
        seq = await queue.submit(desc, payload)
        item.completions.append(await queue.wait(seq, fuzz.TIMEOUT_CYCLES))
        await queue.ring()                                      # the same tail
        doorbell = R.queue_reg(queue.index, R.DOORBELL)
        await self.dev.transport.reg_write(doorbell, seq - 1, queue.pasid)      # a stale one
        await self._quiet(queue, seq, "no completion for a repeated or stale doorbell", item)

    @drive.register
    async def fill_queue(self, item: FillQueueItem):
        """Every slot of the ring submitted at once, rung once; the completions in order."""
        queue = self.queues[item.queue]
        recipes = [stream.Item(item.queue, "gemv", m=1, k=item.recipe.k, n=item.recipe.n, seed=item.recipe.seed + i)
                   for i in range(queue.depth)]
        prepared = [await stream.prepare(self.dev, queue, r, r.arrays()) for r in recipes]
        item.desc, item.payload = prepared[0]
        view = fuzz.queue_view(self.cfg, item.queue)
        item.expected = isa.check_descriptor(item.desc, view, self.cfg)
        item.fill = list(zip(recipes, prepared))
        seqs = await queue.submit_many(prepared)
        for seq in seqs:
            item.completions.append(await queue.wait(seq, fuzz.TIMEOUT_CYCLES))

    @drive.register
    async def foreign_doorbell(self, item: ForeignDoorbellItem):
        queue, desc, payload = await self._prepare(item)
        [taken] = queue.take([(desc, payload)])
        await queue.write([taken])
        foreign = queue.pasid + 0x1000
        try:
            await self.dev.transport.reg_write(R.queue_reg(queue.index, R.DOORBELL), taken[0], foreign)
            item.checks.append(("foreign doorbell refused", False))
        except RegisterAccessError:
            item.checks.append(("foreign doorbell refused", True))
        await self._quiet(queue, taken[0] - 1, "no completion for a refused doorbell", item)
        await queue.ring()                                      # the bound PASID's: it runs
        item.completions.append(await queue.wait(taken[0], fuzz.TIMEOUT_CYCLES))

    @drive.register
    async def foreign_config(self, item: ForeignConfigItem):
        queue, t = self.queues[item.queue], self.dev.transport
        reg = R.queue_reg(queue.index, R.DATA_LIMIT_LO)
        value = await t.reg_read(reg)
        try:
            await t.reg_write(reg, 0xFFFFFFC0, queue.pasid)       # only the host may configure
            item.checks.append(("foreign configuration write refused", False))
        except RegisterAccessError:
            item.checks.append(("foreign configuration write refused", True))
        item.checks.append(("configuration unchanged", await t.reg_read(reg) == value))
        await self.run_descriptor(item)                             # and the queue still runs

    @drive.register
    async def foreign_mem(self, item: ForeignMemItem):
        """CXL.mem: another queue's SQ slot read and written with this queue's PASID."""
        queue, t = self.queues[item.queue], self.dev.transport
        other = self.queues[(item.queue + 1) % len(self.queues)]
        slot = other.sq_slot(other.next_seq)
        for access in (t.mem_read(slot, 64, queue.pasid), t.mem_write(slot, bytes(64), queue.pasid)):
            try:
                await access
                item.checks.append(("foreign CXL.mem access refused", False))
            except MemAccessError:
                item.checks.append(("foreign CXL.mem access refused", True))
        await self.run_descriptor(item)

    @drive.register
    async def stalls(self, item: StallsItem):
        if item.on:
            await self.env.add_backpressure(seed=zlib.crc32(item.get_name().encode()))
        else:
            await self.env.remove_backpressure()
        self.backpressure = item.on
