"""Model of hw/mem_frontend.py: which CXL.mem accesses the PASID filter refuses."""


def refused(queues, addr, length, pasid):
    """Whether an access to [addr, addr + length) from `pasid` touches the SQ or CQ ring of
    an enabled queue bound to another PASID (INCR bursts, as the host's accesses are)."""
    end = addr + length
    for regs in queues:
        if not regs.enable or regs.pasid == pasid:
            continue
        for base in (regs.sq_base, regs.cq_base):
            if addr < regs.ring_end(base) and base < end:
                return True
    return False
