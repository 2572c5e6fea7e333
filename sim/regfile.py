"""Model of hw/regfile.py: the CXL.io registers and their PASID rules."""
import copy
import dataclasses

from isa import regs as R
from isa.slots import MAX_LOG2_RING, MIN_LOG2_SLOT

MASK32 = (1 << 32) - 1


class RefusedAccess(Exception):
    """The access was answered SLVERR."""


@dataclasses.dataclass
class QueueRegs:
    sq_base: int = 0
    cq_base: int = 0
    data_base: int = 0
    data_limit: int = 0
    log2_depth: int = 0
    log2_slot: int = 0
    pasid: int = 0
    enable: bool = False
    irq_en: bool = False
    tail: int = 0
    head: int = 0
    status: int = 0

    def config_ok(self):
        return (self.log2_slot >= MIN_LOG2_SLOT and self.log2_slot + self.log2_depth <= MAX_LOG2_RING
                and self.sq_base % 64 == 0 and self.cq_base % 64 == 0)

    def slot_addr(self, base, seq):
        return (base + (((seq - 1) & ((1 << self.log2_depth) - 1)) << self.log2_slot)) % (1 << 64)

    def ring_end(self, base):
        return base + (1 << (self.log2_depth + self.log2_slot))

    def copy(self):
        return copy.copy(self)          # every field is an int or a bool


_PAIRS = {R.SQ_BASE_LO: "sq_base", R.CQ_BASE_LO: "cq_base", R.DATA_BASE_LO: "data_base",
          R.DATA_LIMIT_LO: "data_limit"}


class RegisterFile:
    def __init__(self, cfg):
        self.cfg = cfg
        self.queues = [QueueRegs() for _ in range(cfg.num_queues)]
        self.globals = {R.ID: R.ID_VALUE, R.VERSION: R.VERSION_VALUE, R.NUM_QUEUES: cfg.num_queues,
                        R.LANES: cfg.lanes, R.ROWS: cfg.rows, R.IN_BUF_BYTES: cfg.in_buf_bytes,
                        R.OUT_BUF_BYTES: cfg.out_buf_bytes, R.DRAM_BUF_BYTES: cfg.dram_buf_bytes,
                        R.DRAM_CHANNELS: cfg.dram_channels, R.SOFTMAX_LANES: cfg.softmax_lanes}

    def _decode(self, offset):
        q, reg = divmod(offset - R.QUEUE_BASE, R.QUEUE_STRIDE)
        if offset >= R.QUEUE_BASE and q < len(self.queues):
            return self.queues[q], reg
        return None, None

    def read(self, offset, pasid):
        offset &= ~3
        if offset in self.globals:
            return self.globals[offset]
        queue, reg = self._decode(offset)
        if queue is None:
            return 0
        for lo, name in _PAIRS.items():
            if reg in (lo, lo + 4):
                return (getattr(queue, name) >> (32 if reg == lo + 4 else 0)) & MASK32
        return {R.CFG: R.cfg_value(queue.log2_depth, queue.log2_slot, queue.pasid),
                R.CTRL: int(queue.enable) | int(queue.irq_en) << 1,
                R.HEAD: queue.head, R.STATUS: queue.status}.get(reg, 0)

    def write(self, offset, value, pasid):
        """Apply a write; returns the queue index whose counts restart, if any."""
        offset &= ~3
        value &= MASK32
        queue, reg = self._decode(offset)
        if queue is not None and reg == R.DOORBELL:
            if pasid != queue.pasid:
                raise RefusedAccess(f"doorbell of queue {self.queues.index(queue)} from PASID {pasid:#x}")
            queue.tail = value
            return None
        if pasid != R.HOST_PASID:
            raise RefusedAccess(f"register write at {offset:#x} from PASID {pasid:#x}")
        if queue is None:
            return None
        for lo, name in _PAIRS.items():
            if reg in (lo, lo + 4):
                shift = 32 if reg == lo + 4 else 0
                old = getattr(queue, name)
                setattr(queue, name, (old & ~(MASK32 << shift)) | value << shift)
        if reg == R.CFG:
            queue.log2_depth = value & 0xF
            queue.log2_slot = (value >> 4) & 0xFF
            queue.pasid = value >> 12
        elif reg == R.CTRL:
            was = queue.enable
            queue.enable, queue.irq_en = bool(value & R.CTRL_ENABLE), bool(value & R.CTRL_IRQ_ENABLE)
            if queue.enable and not was:
                queue.tail = queue.head = 0
                return self.queues.index(queue)
        elif reg == R.STATUS and value & R.STATUS_STICKY:
            queue.status &= ~R.STATUS_STICKY
        return None

    def complete(self, q, seq, status):
        queue = self.queues[q]
        queue.head = seq & MASK32
        if status:
            queue.status = R.STATUS_STICKY | status
