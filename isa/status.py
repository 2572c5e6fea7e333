"""Completion status codes: the spec's (section 4, normative, 0..4) and the project's own,
from 0x80 up (docs/read-compute-project.md, "Status codes"), which the spec leaves room
for in the 8-bit `STATUS` field and the u32 completion status."""
import enum


class Status(enum.IntEnum):
    OK = 0
    BAD_OP = 1       # reserved type or op, or an op/flag the device does not implement
    BAD_DTYPE = 2    # a dtype the op does not support
    BOUNDS = 3       # device operand outside [DATA_BASE, DATA_LIMIT), or dev_addr unaligned
    BAD_SHAPE = 4    # sizes disagree with dims, zero dims, in_cols != K, too large for buffers/slot

    # the project's range
    DRAM_ERROR = 0x80  # the device's DRAM answered SLVERR or DECERR to one of the descriptor's reads or writes
    BAD_PAGE = 0x81    # a paged ATTENTION's list holds an entry not on a beat, or a page outside
    #                    [DATA_BASE, DATA_LIMIT)

