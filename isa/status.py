"""Completion status codes (spec section 4, normative)."""
import enum


class Status(enum.IntEnum):
    OK = 0
    BAD_OP = 1       # reserved type or op, or an op/flag the device does not implement
    BAD_DTYPE = 2    # a dtype the op does not support
    BOUNDS = 3       # device operand outside [DATA_BASE, DATA_LIMIT), or dev_addr unaligned
    BAD_SHAPE = 4    # sizes disagree with dims, zero dims, in_cols != K, too large for buffers/slot
