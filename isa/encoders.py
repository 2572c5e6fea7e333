"""The descriptor encoders: the operands a host places in HDM (a matrix, a LoRA adapter, one
KV head's keys and values, whole or in pages) and the read-compute, LOAD and STORE
descriptors over them (spec sections 1 and 5; the project's ops and the paged ATTENTION's
page list in docs/read-compute-project.md); and the decoding of a result's anchors (the
partial SOFTMAX's and ATTENTION's m, l) and of an ATTENTION's whole result.

The driver (driver/device.py) places the operands and runs the descriptors; the scheduler,
its emission, the benches and the area model build the same descriptors from here without
a device. Bad arguments raise isa.errors.ArgumentError or ShapeError, a descriptor field
that does not fit ValueError (isa.descriptor.Descriptor).
"""
import dataclasses
from collections.abc import Sequence
from typing import cast

import numpy as np
import numpy.typing as npt

from . import slots
from .descriptor import (
    PAGE_ALIGN,
    PAGE_ENTRY_BYTES,
    PAGE_SHIFT_BITS,
    Descriptor,
    DescType,
    Dtype,
    Flag,
    Op,
    dtype_bytes,
    page_flags,
)
from .errors import ArgumentError, ShapeError, count_arg
from .microarch import PAGE_LIST_MAX
from .validate import PAGE_LIST_BYTES, lines, stats_offset

FP16 = np.dtype("<f2")          # the device's FP16: IEEE binary16, little-endian


@dataclasses.dataclass(frozen=True)
class DeviceTensor:
    """A row-major matrix in HDM, placed by NdpDevice.upload."""
    addr: int
    rows: int
    cols: int
    dtype: Dtype = Dtype.FP16

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * cast(int, dtype_bytes(self.dtype))

    @property
    def size_lines(self) -> int:
        """dev_size: the size in 64-byte units, rounded up."""
        return lines(self.nbytes)


def matmul_descriptor(op: int, tensor: DeviceTensor, m: int, transposed: bool = False) -> Descriptor:
    """GEMV/GEMM of an m x K input with `tensor`: K x N, or with `transposed` stored N x K
    and used transposed (TRANS_W; a row per output, e.g. a weight kept as PyTorch's
    nn.Linear keeps it)."""
    k = tensor.cols if transposed else tensor.rows
    return Descriptor(type=DescType.READ_COMPUTE, op=op, dtype=tensor.dtype,
                      flags=Flag.TRANS_W if transposed else 0,
                      dev_addr=tensor.addr, dev_size=tensor.size_lines,
                      dev_rows=tensor.rows, dev_cols=tensor.cols,
                      in_size=lines(m * k * cast(int, dtype_bytes(tensor.dtype))), in_rows=m, in_cols=k)


@dataclasses.dataclass(frozen=True)
class LoraAdapter:
    """A LoRA adapter in HDM, placed by NdpDevice.upload_lora: A (D x R), then B (R x D)
    from the next 64-byte line (the LORA_XAB operand; A alone is a plain GEMM operand)."""
    addr: int
    d: int
    r: int

    @property
    def a(self) -> DeviceTensor:
        return DeviceTensor(self.addr, self.d, self.r)

    @property
    def b(self) -> DeviceTensor:
        return DeviceTensor(self.addr + lines(self.d * self.r * 2) * slots.LINE_BYTES, self.r, self.d)

    @property
    def size_lines(self) -> int:
        return 2 * lines(self.d * self.r * 2)


@dataclasses.dataclass(frozen=True)
class KvBlock:
    """One KV head's keys and values for a device's share of T tokens, placed by
    NdpDevice.upload_kv: K, then V (T x d) from the next 64-byte line (driver.attention.
    kv_operand_bytes; the ATTENTION operand). K is stored token-major (T x d, a token per
    row, the descriptor's TRANS_W) or, with token_major False, transposed (K^T, d x T)."""
    addr: int
    d: int
    t: int
    token_major: bool = True

    @property
    def size_lines(self) -> int:
        return 2 * lines(self.d * self.t * 2)


@dataclasses.dataclass(frozen=True)
class PagedKvShare:
    """One KV head's keys and values for a device's share of T tokens, in pages of
    2^page_shift tokens: the operand of a paged ATTENTION (docs/read-compute-project.md).
    Page p holds tokens p * page_tokens on (the last page may hold fewer): its keys
    token-major at pages[p], its values `page_half_bytes` after them. The page list, one
    u64 little-endian address per page in token order, is at `list_addr` (a multiple of
    isa.validate.PAGE_LIST_BYTES)."""
    list_addr: int
    tokens: int
    d: int
    page_shift: int
    pages: tuple

    def __post_init__(self) -> None:
        object.__setattr__(self, "pages", tuple(self.pages))

    @property
    def t(self) -> int:
        return self.tokens

    @property
    def page_tokens(self) -> int:
        return 1 << self.page_shift

    @property
    def page_half_bytes(self) -> int:
        """Bytes of a page's keys (page_tokens x d FP16); its values start there."""
        return self.page_tokens * self.d * 2

    @property
    def size_lines(self) -> int:
        """dev_size: the list's 64-byte lines."""
        return lines(len(self.pages) * PAGE_ENTRY_BYTES)

    def extents(self) -> list[tuple[int, int]]:
        """(address, tokens) of each page, in token order (isa.validate.page_extents)."""
        return [(addr, min(self.page_tokens, self.tokens - p * self.page_tokens))
                for p, addr in enumerate(self.pages)]

    def ranges(self) -> list[tuple[int, int]]:
        """The byte ranges [start, end) the descriptor reads: the list, then every page whole."""
        return ([(self.list_addr, self.list_addr + self.size_lines * slots.LINE_BYTES)]
                + [(addr, addr + 2 * self.page_half_bytes) for addr in self.pages])


def page_list_bytes(pages: Sequence[int]) -> bytes:
    """A page list's bytes: each page's address as a u64 little-endian, zeros up to the
    next 64-byte line."""
    data = b"".join(count_arg(addr, "page address").to_bytes(PAGE_ENTRY_BYTES, "little") for addr in pages)
    return data + bytes(lines(len(data)) * slots.LINE_BYTES - len(data))


def paged_attention_descriptor(list_addr: int, tokens: int, d: int, page_shift: int, m: int) -> Descriptor:
    """A paged ATTENTION of m query rows over `tokens` tokens of one KV head (head
    dimension d) in pages of 2^page_shift tokens listed at `list_addr`
    (docs/read-compute-project.md): one partial (O, m, l) for the whole share."""
    list_addr = count_arg(list_addr, "list_addr")
    tokens = count_arg(tokens, "tokens", 1)
    d = count_arg(d, "d", 1)
    page_shift = count_arg(page_shift, "page_shift")
    m = count_arg(m, "m", 1)
    if list_addr % PAGE_LIST_BYTES:
        raise ArgumentError(f"list_addr={list_addr:#x} is not a multiple of PAGE_LIST_BYTES={PAGE_LIST_BYTES!r}")
    if page_shift >= 1 << PAGE_SHIFT_BITS:
        raise ArgumentError(f"page_shift={page_shift!r} does not fit in {PAGE_SHIFT_BITS!r} bits")
    page_tokens = 1 << page_shift
    pages = -(-tokens // page_tokens)
    if pages > PAGE_LIST_MAX:
        raise ShapeError(f"tokens={tokens!r} in pages of 2^page_shift={page_tokens!r} tokens take "
                         f"{pages!r} pages, more than PAGE_LIST_MAX={PAGE_LIST_MAX!r}")
    if page_tokens * d * 2 % PAGE_ALIGN:
        raise ShapeError(f"a page's keys, 2^page_shift={page_tokens!r} tokens x d={d!r} x 2 bytes, are "
                         f"not a multiple of PAGE_ALIGN={PAGE_ALIGN!r} bytes")
    try:
        return Descriptor(type=DescType.READ_COMPUTE, op=Op.ATTENTION, dtype=Dtype.FP16,
                          flags=page_flags(page_shift), dev_addr=list_addr,
                          dev_size=lines(pages * PAGE_ENTRY_BYTES), dev_rows=tokens, dev_cols=d,
                          in_size=lines(m * d * 2), in_rows=m, in_cols=d)
    except ValueError as exc:
        raise ShapeError(f"a paged attention of {m!r} rows over {tokens!r} tokens of d={d!r} does not "
                         f"fit a descriptor: {exc}") from None


def softmax_descriptor(m: int, n: int, partial: bool = False) -> Descriptor:
    return Descriptor(type=DescType.READ_COMPUTE, op=Op.SOFTMAX, dtype=Dtype.FP16,
                      flags=Flag.PARTIAL if partial else 0,
                      in_size=lines(m * n * 2), in_rows=m, in_cols=n)


def attention_descriptor(kv: KvBlock | PagedKvShare, m: int) -> Descriptor:
    """Integral attention of m query rows (one KV head's group) over `kv`: a KvBlock's keys
    as stored, T x d with TRANS_W (dev_rows = T, dev_cols = d), or d x T; a PagedKvShare's
    pages through its list (paged_attention_descriptor)."""
    if isinstance(kv, PagedKvShare):
        return paged_attention_descriptor(kv.list_addr, kv.tokens, kv.d, kv.page_shift, m)
    rows, cols = (kv.t, kv.d) if kv.token_major else (kv.d, kv.t)
    return Descriptor(type=DescType.READ_COMPUTE, op=Op.ATTENTION, dtype=Dtype.FP16,
                      flags=Flag.TRANS_W if kv.token_major else 0,
                      dev_addr=kv.addr, dev_size=kv.size_lines, dev_rows=rows, dev_cols=cols,
                      in_size=lines(m * kv.d * 2), in_rows=m, in_cols=kv.d)


def lora_xab_descriptor(adapter: LoraAdapter, m: int) -> Descriptor:
    return Descriptor(type=DescType.READ_COMPUTE, op=Op.LORA_XAB, dtype=Dtype.FP16,
                      dev_addr=adapter.addr, dev_size=adapter.size_lines, dev_rows=adapter.d,
                      dev_cols=adapter.r, in_size=lines(m * adapter.d * 2), in_rows=m, in_cols=adapter.d)


def load_descriptor(tensor: DeviceTensor) -> Descriptor:
    return Descriptor(type=DescType.LOAD, op=0, dtype=tensor.dtype, dev_addr=tensor.addr,
                      dev_size=tensor.size_lines, dev_rows=tensor.rows, dev_cols=tensor.cols)


def store_descriptor(tensor: DeviceTensor) -> Descriptor:
    return Descriptor(type=DescType.STORE, op=0, dtype=tensor.dtype, dev_addr=tensor.addr,
                      dev_size=tensor.size_lines, dev_rows=tensor.rows, dev_cols=tensor.cols,
                      in_size=tensor.size_lines, in_rows=tensor.rows, in_cols=tensor.cols)


def result_anchors(result: bytes, offset: int, m: int) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """(m float32 (M,), l float32 (M,)) from the result's anchor lines."""
    lines_ = np.frombuffer(result[offset:offset + m * slots.LINE_BYTES], "<f4").reshape(m, -1)
    return lines_[:, 0].astype(np.float32), lines_[:, 1].astype(np.float32)


def attention_result(result: bytes, desc: Descriptor) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32],
                                                               npt.NDArray[np.float32]]:
    """(O float32 (M x d), m, l) from an ATTENTION descriptor's result payload."""
    m, d = desc.in_rows, desc.in_cols
    o = np.frombuffer(result, "<f4", m * d).astype(np.float32).reshape(m, d)
    return (o, *result_anchors(result, stats_offset(desc), m))
