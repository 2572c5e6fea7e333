"""The decode rules: which status a descriptor earns (spec section 4).

This is the reference the RTL decoder (`hw/decoder.py`) is tested against. The checks
run in this order and the first that fails gives the status:
BAD_OP, then BAD_DTYPE, then BOUNDS, then BAD_SHAPE.
"""
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, cast

from .descriptor import (
    PAGE_ALIGN,
    PAGE_ENTRY_BYTES,
    PAGE_SHIFT_MASK,
    DescType,
    Dtype,
    Flag,
    Op,
    dtype_bytes,
    page_shift_of,
)
from .microarch import PAGE_LIST_MAX
from .slots import HEADER_BYTES, LINE_BYTES
from .status import Status

if TYPE_CHECKING:
    from .config import DeviceConfig
    from .descriptor import Descriptor

PAGE_LIST_BYTES = PAGE_LIST_MAX * PAGE_ENTRY_BYTES   # a paged ATTENTION's list starts at a multiple of it


class BufferLimits(Protocol):
    """What the decode rules read of a device besides a queue: its buffers' K and N limits
    (an isa.DeviceConfig, or the capabilities the driver reads from the registers)."""
    @property
    def k_max(self) -> int: ...
    @property
    def n_max(self) -> int: ...


@dataclasses.dataclass(frozen=True)
class QueueView:
    """What of a queue's registers the decode rules read."""
    log2_slot: int
    data_base: int
    data_limit: int

    @property
    def slot_bytes(self) -> int:
        return 1 << self.log2_slot


def lines(nbytes: int) -> int:
    """Size in 64-byte units, rounded up."""
    return -(-nbytes // LINE_BYTES)


def implemented(desc: "Descriptor") -> bool:
    """Whether the device implements this (type, op, flags) combination."""
    if desc.type in (DescType.LOAD, DescType.STORE):
        return desc.op == 0 and desc.flags == 0
    if desc.type == DescType.READ_COMPUTE:
        if desc.op == Op.SOFTMAX:
            return (int(desc.flags) & ~int(Flag.PARTIAL)) == 0
        if desc.op == Op.ATTENTION and desc.flags & Flag.PAGED:
            paged_bits = int(Flag.TRANS_W | Flag.PAGED) | PAGE_SHIFT_MASK
            return bool(desc.flags & Flag.TRANS_W) and (int(desc.flags) & ~paged_bits) == 0
        if desc.op in (Op.GEMV, Op.GEMM, Op.ATTENTION):
            return (int(desc.flags) & ~int(Flag.TRANS_W)) == 0
        return desc.op == Op.LORA_XAB and desc.flags == 0
    return False


def dtype_ok(desc: "Descriptor") -> bool:
    if desc.type == DescType.READ_COMPUTE:
        return desc.dtype == Dtype.FP16
    return dtype_bytes(desc.dtype) is not None


def in_bounds(desc: "Descriptor", queue: QueueView) -> bool:
    if desc.dev_addr % (PAGE_LIST_BYTES if paged(desc) else LINE_BYTES):
        return False
    if desc.dev_size == 0:
        return True         # an empty operand has no byte outside the range
    return queue.data_base <= desc.dev_addr and desc.dev_addr + desc.dev_size * LINE_BYTES <= queue.data_limit


def transposed(desc: "Descriptor") -> bool:
    """Whether the first product's device matrix is stored N x K and used transposed."""
    return bool(desc.flags & Flag.TRANS_W)


def stages(desc: "Descriptor") -> list[tuple[int, int, bool]]:
    """The products of a read-compute descriptor as (K, N, transposed), in order: GEMV and
    GEMM one (K x N, or with TRANS_W stored N x K: dev_rows = N, dev_cols = K); the chains
    two, the second on the operand after the first: LORA_XAB (D x R), (R x D); ATTENTION
    (d x T), (T x d), its keys stored d x T (dev_rows = d, dev_cols = T) or, with TRANS_W,
    token-major T x d (dev_rows = T, dev_cols = d)."""
    rows, cols = desc.dev_rows, desc.dev_cols
    trans = transposed(desc)
    first = (cols, rows) if trans else (rows, cols)
    if desc.op in (Op.ATTENTION, Op.LORA_XAB):
        return [(*first, trans), (first[1], first[0], False)]
    if desc.op == Op.SOFTMAX:
        return []
    return [(*first, trans)]


def decode_attention(desc: "Descriptor") -> bool:
    """Whether the descriptor is one request-head of a decode step: an ATTENTION of one query
    row with its keys token-major (TRANS_W; paged or not). Its q K^T runs on PE row 0 and its
    S V on PE row 1 (isa/pe_array.py Route.of_stage), the probabilities in input row 1."""
    return (desc.type == DescType.READ_COMPUTE and desc.op == Op.ATTENTION and transposed(desc)
            and desc.in_rows == 1)


def result_cols(desc: "Descriptor") -> int:
    """Values per result row: the last product's N (SOFTMAX: its rows' length)."""
    if desc.op == Op.SOFTMAX:
        return desc.in_cols
    return stages(desc)[-1][1]


def paged(desc: "Descriptor") -> bool:
    """Whether the descriptor is a paged ATTENTION (its operand a page list)."""
    return desc.type == DescType.READ_COMPUTE and desc.op == Op.ATTENTION and bool(desc.flags & Flag.PAGED)


def page_tokens(desc: "Descriptor") -> int:
    """Tokens a page of a paged ATTENTION holds (the last page may hold fewer)."""
    return 1 << page_shift_of(desc.flags)


def page_count(desc: "Descriptor") -> int:
    """Entries of a paged ATTENTION's list: its T tokens in pages."""
    return -(-desc.dev_rows // page_tokens(desc))


def page_half_bytes(desc: "Descriptor") -> int:
    """Bytes of a page's keys (page_tokens x d FP16, token-major); its values follow them."""
    return page_tokens(desc) * desc.dev_cols * 2


def page_extents(desc: "Descriptor", entries: Sequence[int]) -> list[tuple[int, int]]:
    """(address, tokens) of each page the descriptor reads, in token order: K at the
    address, V `page_half_bytes` after it."""
    tokens = page_tokens(desc)
    return [(entries[p], min(tokens, desc.dev_rows - p * tokens)) for p in range(page_count(desc))]


def check_pages(desc: "Descriptor", entries: Sequence[int], queue: QueueView, cfg: BufferLimits) -> Status:
    """The status a paged ATTENTION earns from its list's entries (after the decode rules
    passed): BAD_PAGE when an entry is not a multiple of PAGE_ALIGN or its page
    (keys and values, whole) has a byte outside [DATA_BASE, DATA_LIMIT)."""
    span = 2 * page_half_bytes(desc)
    for addr in entries[:page_count(desc)]:
        if addr % PAGE_ALIGN or not (queue.data_base <= addr and addr + span <= queue.data_limit):
            return Status.BAD_PAGE
    return Status.OK


def operand_read_lines(desc: "Descriptor") -> int:
    """64-byte lines of device operand a read-compute descriptor reads per group of ROWS
    input rows (a paged ATTENTION: each page's keys and values; its list is read once, not
    per group)."""
    if not paged(desc):
        return desc.dev_size
    per_page = [2 * lines(t * desc.dev_cols * 2) for _, t in page_extents(desc, [0] * page_count(desc))]
    return sum(per_page)


def operand_lines(desc: "Descriptor") -> int:
    """64-byte lines of the device operand its dims imply: attention's K^T (d x T) and V
    (T x d), and E3's A (D x R) and B (R x D), each from a line boundary; a paged
    ATTENTION's list (an 8-byte entry a page)."""
    if paged(desc):
        return lines(page_count(desc) * PAGE_ENTRY_BYTES)
    el = cast(int, dtype_bytes(desc.dtype))
    one = lines(desc.dev_rows * desc.dev_cols * el)
    if desc.type == DescType.READ_COMPUTE and desc.op in (Op.ATTENTION, Op.LORA_XAB):
        return 2 * one
    return one


def shape_ok(desc: "Descriptor", queue: QueueView, cfg: BufferLimits) -> bool:
    el = cast(int, dtype_bytes(desc.dtype))     # dtype_ok passed: a defined dtype
    payload_room = queue.slot_bytes - HEADER_BYTES
    if desc.in_size != lines(desc.in_rows * desc.in_cols * el):
        return False
    m = desc.in_rows
    if desc.type == DescType.READ_COMPUTE and desc.op == Op.SOFTMAX:
        return (desc.dev_addr == 0 and desc.dev_size == 0 and desc.dev_rows == 0 and desc.dev_cols == 0
                and m != 0 and desc.in_cols != 0 and desc.in_cols <= cfg.k_max
                and desc.in_size * LINE_BYTES <= payload_room
                and result_bytes(desc) <= payload_room)
    if desc.dev_size != operand_lines(desc):
        return False
    if desc.dev_rows == 0 or desc.dev_cols == 0:
        return False        # every other implemented type uses the device operand
    if desc.type == DescType.LOAD:
        return desc.dev_size * LINE_BYTES <= payload_room
    if desc.type == DescType.STORE:
        return (desc.in_rows != 0 and desc.in_cols != 0 and desc.in_size == desc.dev_size
                and desc.in_size * LINE_BYTES <= payload_room)
    products = stages(desc)
    # every product's K in the input buffer (the second's: S, or x A), its N in the output buffer
    fits = all(k <= cfg.k_max and n <= cfg.n_max for k, n, _ in products)
    if paged(desc):
        # the front end holds the list; a page's keys are whole 4 KiB (so whole beats, and
        # whole pairs of chunks), so the pages stream as one operand's beats
        fits = fits and page_count(desc) <= PAGE_LIST_MAX and page_half_bytes(desc) % PAGE_ALIGN == 0
    return (m != 0 and desc.in_cols == products[0][0] and (desc.op != Op.GEMV or m == 1) and fits
            and desc.in_size * LINE_BYTES <= payload_room
            and result_bytes(desc) <= payload_room)


def check_descriptor(desc: "Descriptor", queue: QueueView, cfg: BufferLimits) -> Status:
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


def payload_bytes(desc: "Descriptor") -> int:
    """Bytes of GPU-supplied input the descriptor's slot carries."""
    return desc.in_size * LINE_BYTES


def result_bytes(desc: "Descriptor") -> int:
    """Bytes of result the device writes into the completion slot on success (the span
    from the payload's start to the end of its last byte)."""
    if desc.type == DescType.LOAD:
        return desc.dev_size * LINE_BYTES
    if desc.type != DescType.READ_COMPUTE:
        return 0
    if desc.op == Op.SOFTMAX:
        values = desc.in_rows * desc.in_cols * 2
        return stats_offset(desc) + desc.in_rows * LINE_BYTES if desc.flags & Flag.PARTIAL else values
    if desc.op == Op.ATTENTION:
        return stats_offset(desc) + desc.in_rows * LINE_BYTES
    return desc.in_rows * result_cols(desc) * 2


def written_ranges(desc: "Descriptor") -> list[tuple[int, int]]:
    """The byte ranges of the result payload (within result_bytes) the device writes: all of
    it, but for the results with anchor lines (SOFTMAX with PARTIAL, ATTENTION), whose
    values' last line is written only up to the values' end: [values end, stats_offset)
    keeps what the slot held."""
    end = result_bytes(desc)
    anchored = desc.type == DescType.READ_COMPUTE and (
        desc.op == Op.ATTENTION or (desc.op == Op.SOFTMAX and desc.flags & Flag.PARTIAL))
    if not anchored:
        return [(0, end)]
    values = desc.in_rows * result_cols(desc) * (4 if desc.op == Op.ATTENTION else 2)
    return [(0, values), (stats_offset(desc), end)]


def stats_offset(desc: "Descriptor") -> int:
    """Where the per-row anchors start in the result payload (SOFTMAX with PARTIAL, and
    ATTENTION): the line after the values. Row r's line holds m (FP32) at byte 0 and l
    (FP32) at byte 4, zeros after."""
    if desc.op == Op.ATTENTION:
        return lines(desc.in_rows * result_cols(desc) * 4) * LINE_BYTES
    return lines(desc.in_rows * desc.in_cols * 2) * LINE_BYTES


def dram_traffic(cfg: "DeviceConfig", desc: "Descriptor") -> tuple[int, int]:
    """(read, written) bytes of DRAM a read-compute descriptor moves: its device operand once
    per group of ROWS input rows, the payload and the slot's header line; the result and the
    completion line."""
    groups = -(-desc.in_rows // cfg.rows)
    list_lines = desc.dev_size if paged(desc) else 0          # a paged ATTENTION reads its list once
    reads = ((groups * operand_read_lines(desc) + list_lines) * LINE_BYTES + payload_bytes(desc)
             + LINE_BYTES)
    return reads, result_bytes(desc) + LINE_BYTES
