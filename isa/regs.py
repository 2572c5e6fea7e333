"""The CXL.io register map (spec section 3, normative)."""

REG_BITS = 32                # every register; 64-bit values are LO/HI pairs

ID_VALUE = 0x4E445031        # "NDP1"
VERSION_VALUE = 0x00010000

# Global block
ID = 0x000
VERSION = 0x004
NUM_QUEUES = 0x008
LANES = 0x00C
ROWS = 0x010
IN_BUF_BYTES = 0x014
OUT_BUF_BYTES = 0x018
DRAM_BUF_BYTES = 0x01C
DRAM_CHANNELS = 0x020        # spec section 6
SOFTMAX_LANES = 0x024        # the project's (docs/read-compute-project.md): the softmax unit's lanes

# Queue q block at QUEUE_BASE + QUEUE_STRIDE * q; offsets within the block:
QUEUE_BASE = 0x100
QUEUE_STRIDE = 0x40
SQ_BASE_LO, SQ_BASE_HI = 0x00, 0x04
CQ_BASE_LO, CQ_BASE_HI = 0x08, 0x0C
DATA_BASE_LO, DATA_BASE_HI = 0x10, 0x14
DATA_LIMIT_LO, DATA_LIMIT_HI = 0x18, 0x1C
CFG = 0x20
CTRL = 0x24
DOORBELL = 0x28
HEAD = 0x2C
STATUS = 0x30

# CFG fields: (lsb, width)
CFG_LOG2_DEPTH = (0, 4)
CFG_LOG2_SLOT = (4, 8)
CFG_PASID = (12, 20)

CTRL_ENABLE = 1 << 0         # a 0 -> 1 transition resets the queue's counts
CTRL_IRQ_ENABLE = 1 << 1

STATUS_LAST_ERROR = (0, 8)
STATUS_STICKY = 1 << 31      # write 1 to clear

HOST_PASID = 0               # the only requester that may write anything but doorbells
PASID_BITS = 20


def queue_reg(q: int, offset: int) -> int:
    return QUEUE_BASE + QUEUE_STRIDE * q + offset


def cfg_value(log2_depth: int, log2_slot: int, pasid: int) -> int:
    return log2_depth | (log2_slot << CFG_LOG2_SLOT[0]) | (pasid << CFG_PASID[0])
