"""The decode rules: which status a descriptor earns (spec section 4).

This is the reference the RTL decoder (`hw/decoder.py`) is tested against. The checks
run in this order and the first that fails gives the status:
BAD_OP, then BAD_DTYPE, then BOUNDS, then BAD_SHAPE.
"""
import dataclasses

from .descriptor import DescType, Op, Dtype, dtype_bytes
from .slots import HEADER_BYTES, LINE_BYTES
from .status import Status


@dataclasses.dataclass(frozen=True)
class QueueView:
    """What of a queue's registers the decode rules read."""
    log2_slot: int
    data_base: int
    data_limit: int

    @property
    def slot_bytes(self):
        return 1 << self.log2_slot


def lines(nbytes):
    """Size in 64-byte units, rounded up."""
    return -(-nbytes // LINE_BYTES)


def implemented(desc):
    """Whether the device implements this (type, op, flags) combination."""
    if desc.flags != 0:
        return False        # TRANS_W and the project flags are not implemented yet
    if desc.type in (DescType.LOAD, DescType.STORE):
        return desc.op == 0
    if desc.type == DescType.READ_COMPUTE:
        return desc.op in (Op.GEMV, Op.GEMM)
    return False


def dtype_ok(desc):
    if desc.type == DescType.READ_COMPUTE:
        return desc.dtype == Dtype.FP16
    return dtype_bytes(desc.dtype) is not None


def in_bounds(desc, queue):
    if desc.dev_addr % LINE_BYTES:
        return False
    if desc.dev_size == 0:
        return True         # an empty operand has no byte outside the range
    return queue.data_base <= desc.dev_addr and desc.dev_addr + desc.dev_size * LINE_BYTES <= queue.data_limit


def shape_ok(desc, queue, cfg):
    el = dtype_bytes(desc.dtype)
    payload_room = queue.slot_bytes - HEADER_BYTES
    if desc.in_size != lines(desc.in_rows * desc.in_cols * el):
        return False
    if desc.dev_size != lines(desc.dev_rows * desc.dev_cols * el):
        return False
    if desc.dev_rows == 0 or desc.dev_cols == 0:
        return False        # every implemented type uses the device operand
    if desc.type == DescType.LOAD:
        return desc.dev_size * LINE_BYTES <= payload_room
    if desc.type == DescType.STORE:
        return (desc.in_rows != 0 and desc.in_cols != 0 and desc.in_size == desc.dev_size
                and desc.in_size * LINE_BYTES <= payload_room)
    m, k, n = desc.in_rows, desc.dev_rows, desc.dev_cols
    return (m != 0 and desc.in_cols == k and (desc.op != Op.GEMV or m == 1)
            and k <= cfg.k_max and n <= cfg.n_max
            and desc.in_size * LINE_BYTES <= payload_room
            and m * n * 2 <= payload_room)


def check_descriptor(desc, queue, cfg):
    """The status the device gives `desc` on `queue` of a device configured by `cfg`."""
    if not implemented(desc):
        return Status.BAD_OP
    if not dtype_ok(desc):
        return Status.BAD_DTYPE
    if not in_bounds(desc, queue):
        return Status.BOUNDS
    if not shape_ok(desc, queue, cfg):
        return Status.BAD_SHAPE
    return Status.OK


def payload_bytes(desc):
    """Bytes of GPU-supplied input the descriptor's slot carries."""
    return desc.in_size * LINE_BYTES


def result_bytes(desc):
    """Bytes of result the device writes into the completion slot on success."""
    if desc.type == DescType.LOAD:
        return desc.dev_size * LINE_BYTES
    if desc.type == DescType.READ_COMPUTE:
        return desc.in_rows * desc.dev_cols * 2
    return 0
