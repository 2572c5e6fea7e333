"""Submission and completion slot layouts in HDM (spec section 2, normative)."""

HEADER_BYTES = 64        # both slot kinds: a 64-byte header, then the payload
LINE_BYTES = 64          # the unit of dev_size / in_size and of address alignment

# Submission slot
SQ_DESC = 0              # 32-byte descriptor word
SQ_VALID = 32            # u64 sequence number: the ordering point
SQ_PAYLOAD = 64          # the GPU-supplied input, row-major in dtype

# Completion slot
CQ_SEQ = 0               # u64 completion word: sequence number it completes
CQ_STATUS = 8            # u32 status
CQ_CYCLES = 16           # u64 device cycles from taking the descriptor to the completion word
CQ_PAYLOAD = 64          # the result, row-major

MIN_LOG2_SLOT = 6        # a slot must at least hold its 64-byte header
MAX_LOG2_RING = 48       # log2_depth + log2_slot above this: the device does not serve the queue


def slot_index(seq: int, log2_depth: int) -> int:
    """Sequence number s (from 1) lives in slot (s - 1) mod depth."""
    return (seq - 1) & ((1 << log2_depth) - 1)


def slot_addr(base: int, seq: int, log2_depth: int, log2_slot: int) -> int:
    return base + (slot_index(seq, log2_depth) << log2_slot)
