"""Model of hw/decoder.py: the status is isa/validate.py's, the reference the RTL decoder
is tested against (tests/unit/test_decoder.py)."""
from isa import DescType, check_descriptor
from isa.validate import QueueView


def decode(desc, regs, cfg):
    """(status, kind) of a descriptor on a queue; kind is 'load', 'store' or 'compute'."""
    view = QueueView(regs.log2_slot, regs.data_base, regs.data_limit)
    kind = {DescType.LOAD: "load", DescType.STORE: "store"}.get(desc.type, "compute")
    return check_descriptor(desc, view, cfg), kind
