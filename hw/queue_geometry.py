"""Queue geometry shared by the blocks that address HDM queues: slot addresses, ring
extents and whether a queue's configuration is servable."""
from amaranth import Mux

from isa.slots import MAX_LOG2_RING, MIN_LOG2_SLOT


def config_ok(regs):
    """A queue is served only with 64-byte aligned rings that fit (the driver checks the same)."""
    return ((regs.log2_slot >= MIN_LOG2_SLOT)
            & (regs.log2_slot + regs.log2_depth <= MAX_LOG2_RING)
            & (regs.sq_base[:6] == 0) & (regs.cq_base[:6] == 0))


def slot_index(seq, regs):
    """Index in its ring of the slot of sequence number `seq`."""
    return (seq - 1)[:16] & ((1 << regs.log2_depth) - 1)


def slot_addr(base, index, log2_slot):
    """Address of the slot at `index` (`slot_index`) in the ring at `base`, of 2^log2_slot bytes."""
    return (base + (index << log2_slot[:6]))[:64]


def ring_end(base, regs):
    """First address past a ring, 65 bits wide. A ring of 2^64 bytes or more (a queue the
    device will not serve, but whose slots the CXL.mem filter still guards) ends past
    every address."""
    log2_ring = regs.log2_depth + regs.log2_slot
    return Mux(log2_ring >= 64, 1 << 64, base + (1 << log2_ring[:6]))
