"""The 204-bit read-compute descriptor (spec section 1, normative).

`FIELDS` is the single bit layout: the RTL decoder slices the descriptor word with it,
and `Descriptor.pack`/`unpack` encode and decode it here.
"""
import dataclasses
import enum

DESC_BITS = 204          # bits used by the descriptor
DESC_WORD_BYTES = 32     # stored in the low 204 bits of a 256-bit word

# (name, lsb, width), contiguous from bit 0 in this order.
FIELDS = (
    ("type", 0, 2),
    ("op", 2, 4),
    ("dtype", 6, 4),
    ("flags", 10, 10),
    ("dev_addr", 20, 64),
    ("dev_size", 84, 20),
    ("dev_rows", 104, 20),
    ("dev_cols", 124, 20),
    ("in_size", 144, 20),
    ("in_rows", 164, 20),
    ("in_cols", 184, 20),
)

_next = 0
for _name, _lsb, _width in FIELDS:
    assert _lsb == _next, f"descriptor field {_name!r} is not contiguous"
    _next = _lsb + _width
assert _next == DESC_BITS
del _next, _name, _lsb, _width

FIELD = {name: (lsb, width) for name, lsb, width in FIELDS}

DIM_BITS = FIELD["dev_rows"][1]     # a dimension's width (dev_rows, dev_cols, in_rows, in_cols): 20
assert all(FIELD[name][1] == DIM_BITS for name in ("dev_rows", "dev_cols", "in_rows", "in_cols"))


class DescType(enum.IntEnum):
    LOAD = 0
    STORE = 1
    READ_COMPUTE = 2
    RESERVED = 3


class Op(enum.IntEnum):
    GEMV = 0
    GEMM = 1
    SOFTMAX = 2
    # the project's own (docs/read-compute-project.md)
    ATTENTION = 3           # integral attention for one KV head: P = q K^T, partial softmax, O = S V
    LORA_XAB = 4            # LoRA E3: y = (x A) B, x A kept on the device


class Dtype(enum.IntEnum):
    FP16 = 0
    BF16 = 1
    INT8 = 2


def dtype_bytes(dtype: int) -> int | None:
    """Element size in bytes of a defined dtype, None for a reserved one."""
    sizes: dict[int, int] = {Dtype.FP16: 2, Dtype.BF16: 2, Dtype.INT8: 1}
    return sizes.get(dtype)


# (name, lsb, width) of the `flags` field's own bits, contiguous from flags bit 0 (word
# bit 10), in this order: the one layout of the flags, which Flag and PAGE_SHIFT_* below and
# the RTL decoder's descriptor layout (hw/decoder.py DescriptorLayout) are built from.
FLAG_FIELDS = (
    ("trans_w", 0, 1),
    ("partial", 1, 1),
    ("paged", 2, 1),
    ("page_shift", 3, 4),
    ("reserved", 7, 3),
)

_next = 0
for _name, _lsb, _width in FLAG_FIELDS:
    assert _lsb == _next, f"flags field {_name!r} is not contiguous"
    _next = _lsb + _width
assert _next == FIELD["flags"][1]
del _next, _name, _lsb, _width

FLAG_FIELD = {name: (lsb, width) for name, lsb, width in FLAG_FIELDS}


class Flag(enum.IntFlag):
    """The one-bit fields of `flags` (FLAG_FIELDS), numbered as flags bits (bit 10 of the
    204-bit word is flags bit 0).

    TRANS_W (the spec's, bit 10): the device matrix is stored N x K and used transposed;
    GEMV, GEMM, and ATTENTION, whose keys are then stored token-major (T x d, like V).
    Bits 11..19 are the project's own: PARTIAL (bit 11) asks SOFTMAX for FlashAttention's
    partial form. PAGED (bit 12) asks ATTENTION, with TRANS_W, to take its keys and values
    from a page list (dev_addr points at the list); PAGE_SHIFT (bits 13..16, a 4-bit
    field, only with PAGED) is log2 of a page's tokens. Any other bit, TRANS_W on another
    op, PARTIAL on another op than SOFTMAX, PAGED without ATTENTION and TRANS_W, or a
    PAGE_SHIFT without PAGED completes with BAD_OP (docs/read-compute-project.md).
    """
    TRANS_W = 1 << FLAG_FIELD["trans_w"][0]
    PARTIAL = 1 << FLAG_FIELD["partial"][0]
    PAGED = 1 << FLAG_FIELD["paged"][0]


assert all(FLAG_FIELD[flag.name.lower()][1] == 1 for flag in Flag)  # type: ignore[union-attr]

PAGE_SHIFT_LSB, PAGE_SHIFT_BITS = FLAG_FIELD["page_shift"]    # log2 of a page's tokens
PAGE_SHIFT_MASK = ((1 << PAGE_SHIFT_BITS) - 1) << PAGE_SHIFT_LSB
PAGE_ENTRY_BYTES = 8        # a page list entry: the page's byte address, u64 little-endian
PAGE_ALIGN = 4096           # a page's address and its keys' bytes are multiples of it (NVMe's page)


def page_flags(page_shift: int) -> int:
    """The flags of a paged ATTENTION whose pages hold 2^page_shift tokens."""
    if not 0 <= page_shift < (1 << PAGE_SHIFT_BITS):
        raise ValueError(f"page_shift={page_shift} does not fit in {PAGE_SHIFT_BITS} bits")
    return int(Flag.TRANS_W | Flag.PAGED) | (page_shift << PAGE_SHIFT_LSB)


def page_shift_of(flags: int) -> int:
    """log2 of a page's tokens, from a descriptor's flags."""
    return (int(flags) & PAGE_SHIFT_MASK) >> PAGE_SHIFT_LSB


@dataclasses.dataclass(frozen=True)
class Descriptor:
    type: int = DescType.READ_COMPUTE
    op: int = Op.GEMV
    dtype: int = Dtype.FP16
    flags: int = 0
    dev_addr: int = 0
    dev_size: int = 0
    dev_rows: int = 0
    dev_cols: int = 0
    in_size: int = 0
    in_rows: int = 0
    in_cols: int = 0

    def __post_init__(self) -> None:
        for name, _, width in FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value < (1 << width):
                raise ValueError(f"descriptor field {name}={value!r} does not fit in {width} bits")

    def to_int(self) -> int:
        word = 0
        for name, lsb, _ in FIELDS:
            word |= int(getattr(self, name)) << lsb
        return word

    def pack(self) -> bytes:
        """The 32-byte little-endian descriptor word."""
        return self.to_int().to_bytes(DESC_WORD_BYTES, "little")

    @classmethod
    def from_int(cls, word: int) -> "Descriptor":
        return cls(**{name: (word >> lsb) & ((1 << width) - 1) for name, lsb, width in FIELDS})

    @classmethod
    def unpack(cls, data: bytes) -> "Descriptor":
        if len(data) != DESC_WORD_BYTES:
            raise ValueError(f"a descriptor word is {DESC_WORD_BYTES} bytes, got {len(data)}")
        return cls.from_int(int.from_bytes(data, "little"))
