"""The monitor: watches the host's side of the device's ports at the transport (every
register access with its PASID and answer, every refused CXL.mem access) and publishes
what the protocol rules care about as BusEvents, independently of what the driver meant
to do: a doorbell is classified by the state of the slots it announces (valid words
written or not, read through the DRAM backdoor) and of the ring (outstanding, wrapped)."""
import dataclasses
import struct

from pyuvm import ConfigDB, uvm_analysis_port, uvm_component

from driver.errors import MemAccessError, RegisterAccessError
from isa import slots
from isa import regs as R

U64 = struct.Struct("<Q")


@dataclasses.dataclass
class BusEvent:
    kind: str               # "doorbell", "config_write", "mem_access"
    queue: int
    pasid: int
    refused: bool
    detail: dict


class TransportMonitor(uvm_component):
    def build_phase(self):
        self.ap = uvm_analysis_port("ap", self)

    def start_of_simulation_phase(self):
        self.env = ConfigDB().get(self, "", "BACKEND")
        self.cfg = self.env.cfg
        self.last_tail = {}
        t = self.env.transport
        reg_write, mem_read, mem_write = t.reg_write, t.mem_read, t.mem_write
        monitor = self

        async def watched_reg_write(offset, value, pasid):
            event = monitor._register_event(offset, value, pasid)
            try:
                await reg_write(offset, value, pasid)
            except RegisterAccessError:
                if event:
                    event.refused = True
                raise
            finally:
                if event:
                    monitor.ap.write(event)

        def watched_mem(access, write):
            async def watched(addr, *args):
                pasid = args[-1]
                try:
                    return await access(addr, *args)
                except MemAccessError as error:
                    monitor.ap.write(BusEvent("mem_access", monitor._queue_of(addr), pasid, True,
                                              {"write": write, "response": error.response}))
                    raise
            return watched
        t.reg_write, t.mem_read, t.mem_write = watched_reg_write, watched_mem(mem_read, False), watched_mem(mem_write, True)

    def _queue_of(self, addr):
        for q, queue in self.env.dev.queues.items():
            if queue.sq_base <= addr < queue.cq_base + (queue.depth << queue.log2_slot):
                return q
        return -1

    def _register_event(self, offset, value, pasid):
        if offset < R.QUEUE_BASE or offset >= R.queue_reg(self.cfg.num_queues, 0):
            return None
        q, reg = divmod(offset - R.QUEUE_BASE, R.QUEUE_STRIDE)
        if reg != R.DOORBELL:
            if reg == R.CTRL and pasid == R.HOST_PASID:
                self.last_tail[q] = 0           # (re)enabling restarts the sequence numbers
            return BusEvent("config_write", q, pasid, False, {"reg": reg})
        queue = self.env.dev.queues.get(q)
        last = self.last_tail.get(q, 0)
        detail = {"tail": value, "last_tail": last, "wrapped": False, "full": False, "before_valid": False}
        if queue is not None:
            announced = range(last + 1, value + 1)
            detail["before_valid"] = any(U64.unpack(self.env.backdoor_read(queue.sq_slot(s) + slots.SQ_VALID, 8))[0] != s
                                         for s in announced)
            detail["wrapped"] = value > queue.depth
            detail["full"] = len(queue.outstanding) == queue.depth
        detail["repeated"] = value == last
        detail["stale"] = value < last
        if pasid == (queue.pasid if queue else None):
            self.last_tail[q] = max(last, value)
        return BusEvent("doorbell", q, pasid, False, detail)
