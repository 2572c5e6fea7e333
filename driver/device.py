"""The NDP device as the host sees it: capabilities, queue set-up, and numpy entry points."""
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from isa import DeviceConfig, Dtype, Op, QueueView, Status, check_descriptor, payload_bytes, regs, result_bytes, slots
from isa.descriptor import PAGE_ALIGN, Descriptor
from isa.encoders import (
    FP16,
    DeviceTensor,
    KvBlock,
    LoraAdapter,
    PagedKvShare,
    attention_descriptor,
    attention_result,
    load_descriptor,
    lora_xab_descriptor,
    matmul_descriptor,
    page_list_bytes,
    paged_attention_descriptor,
    result_anchors,
    softmax_descriptor,
    store_descriptor,
)
from isa.errors import ArgumentError, NdpError, ShapeError
from isa.regs import REG_BITS
from isa.validate import PAGE_LIST_BYTES, check_pages, lines, stats_offset

from .alloc import RangeAllocator
from .attention import F16, Partial, kv_operand_bytes, query_groups, scale_query
from .errors import DeviceNotFound
from .queue import Completion, Queue
from .transport import Transport

ADDR_LIMIT = 1 << (2 * REG_BITS)  # addresses are programmed as 64-bit LO/HI register pairs
QueueRef = Queue | int | None       # a Queue, a queue's index, or None: the lowest configured one


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """The read-only global registers."""
    version: int
    num_queues: int
    lanes: int
    rows: int
    in_buf_bytes: int
    out_buf_bytes: int
    dram_buf_bytes: int
    dram_channels: int
    softmax_lanes: int       # the project's register (docs/read-compute-project.md): its sums' order

    # The very properties of isa.DeviceConfig: they read only in_buf_bytes, out_buf_bytes
    # and rows, so K and N limits are defined once, in isa.
    if TYPE_CHECKING:       # as a type checker sees them: two ints
        @property
        def k_max(self) -> int: ...
        @property
        def n_max(self) -> int: ...
    else:
        k_max = DeviceConfig.k_max
        n_max = DeviceConfig.n_max


def _fp16_array(array: Any, name: str, ndim: int) -> F16:
    if not isinstance(array, np.ndarray):
        raise ArgumentError(f"{name} must be a numpy array, got {type(array).__name__!r}")
    if array.dtype != np.float16:
        raise ArgumentError(f"{name} must be float16, got dtype {str(array.dtype)!r}")
    if array.ndim != ndim:
        raise ShapeError(f"{name} must have {ndim} dimension(s), got shape {array.shape!r}")
    if 0 in array.shape:
        raise ShapeError(f"{name} has an empty dimension: shape {array.shape!r}")
    return array


def _padded_bytes(array: F16, nbytes: int) -> bytes:
    """The array row-major in little-endian FP16, zero-padded to `nbytes` (whole lines)."""
    data = np.ascontiguousarray(array, dtype=FP16).tobytes()
    return data + bytes(nbytes - len(data))


def _overlaps(a_start: int, a_end: int, b_start: int, b_end: int) -> bool:
    return a_start < b_end and b_start < a_end


def _kv_ranges(kv: KvBlock | PagedKvShare) -> list[tuple[int, int]]:
    """The byte ranges an ATTENTION over `kv` (a KvBlock or PagedKvShare) reads."""
    if isinstance(kv, PagedKvShare):
        return kv.ranges()
    return [(kv.addr, kv.addr + kv.size_lines * slots.LINE_BYTES)]


def _holds(queue: Queue, ranges: Sequence[tuple[int, int]]) -> bool:
    return all(queue.data_base <= start and end <= queue.data_limit for start, end in ranges)


class NdpDevice:
    def __init__(self, transport: Transport, caps: Capabilities) -> None:
        self.transport = transport
        self.caps = caps
        self.queues: dict[int, Queue] = {}               # index -> Queue, as configured by this driver

    @classmethod
    async def open(cls, transport: Transport) -> "NdpDevice":
        """Read the global registers; raises DeviceNotFound unless ID reads isa.regs.ID_VALUE."""
        ident = await transport.reg_read(regs.ID, regs.HOST_PASID)
        if ident != regs.ID_VALUE:
            raise DeviceNotFound(f"ID register reads {ident:#010x}, expected {regs.ID_VALUE:#010x}")
        values = {}
        for name in ("VERSION", "NUM_QUEUES", "LANES", "ROWS", "IN_BUF_BYTES",
                     "OUT_BUF_BYTES", "DRAM_BUF_BYTES", "DRAM_CHANNELS", "SOFTMAX_LANES"):
            values[name.lower()] = await transport.reg_read(getattr(regs, name), regs.HOST_PASID)
        # a device without the project's register reads 0 there: its softmax is a line wide
        values["softmax_lanes"] = values["softmax_lanes"] or values["lanes"]
        caps = Capabilities(**values)
        if caps.num_queues < 1 or caps.rows < 1:
            raise DeviceNotFound(f"device reports NUM_QUEUES={caps.num_queues!r}, ROWS={caps.rows!r}")
        return cls(transport, caps)

    # ---- queues ------------------------------------------------------------------------

    async def configure_queue(self, q: int, sq_base: int, cq_base: int, data_base: int, data_limit: int,
                              log2_depth: int, log2_slot: int, pasid: int = regs.HOST_PASID, irq: bool = False,
                              allocator: RangeAllocator | None = None) -> Queue:
        """Program queue `q` and enable it; returns its Queue (next seq 1).

        `allocator`: a driver.alloc.RangeAllocator inside the data range, to share one
        data range among queues (DevicePool does); by default the queue gets its own."""
        self._check_queue_args(q, sq_base, cq_base, data_base, data_limit,
                               log2_depth, log2_slot, pasid)
        if allocator is not None and not (data_base <= allocator.base and allocator.limit <= data_limit):
            raise ArgumentError(f"queue {q!r}: {allocator!r} reaches outside the data range "
                                f"[{data_base:#x}, {data_limit:#x})")
        # Disable first: enabling again resets the queue's counts (a 0 -> 1 edge), and a
        # disabled queue's slots accept the host's writes below.
        await self._write_reg(regs.queue_reg(q, regs.CTRL), 0)
        self.queues.pop(q, None)

        # Zero every slot header of both rings before enabling. Sequence numbers restart
        # at 1, and the device takes a submission slot when its valid word equals the
        # seq it expects, the driver a completion when its completion word equals the
        # seq it waits for. A header left in this memory by an earlier use (an earlier
        # configuration, another program) may hold exactly such a number: the device
        # would run a stale descriptor, the driver accept a stale completion. Zero is
        # never a sequence number.
        zero_header = bytes(slots.HEADER_BYTES)
        for i in range(1 << log2_depth):
            await self.transport.mem_write(sq_base + (i << log2_slot), zero_header, regs.HOST_PASID)
            await self.transport.mem_write(cq_base + (i << log2_slot), zero_header, regs.HOST_PASID)

        for lo, hi, value in ((regs.SQ_BASE_LO, regs.SQ_BASE_HI, sq_base),
                              (regs.CQ_BASE_LO, regs.CQ_BASE_HI, cq_base),
                              (regs.DATA_BASE_LO, regs.DATA_BASE_HI, data_base),
                              (regs.DATA_LIMIT_LO, regs.DATA_LIMIT_HI, data_limit)):
            await self._write_reg(regs.queue_reg(q, lo), value & ((1 << REG_BITS) - 1))
            await self._write_reg(regs.queue_reg(q, hi), value >> REG_BITS)
        await self._write_reg(regs.queue_reg(q, regs.CFG), regs.cfg_value(log2_depth, log2_slot, pasid))
        ctrl = regs.CTRL_ENABLE | (regs.CTRL_IRQ_ENABLE if irq else 0)
        await self._write_reg(regs.queue_reg(q, regs.CTRL), ctrl)

        queue = Queue(self.transport, q, sq_base, cq_base, data_base, data_limit,
                      log2_depth, log2_slot, pasid, irq, allocator)
        self.queues[q] = queue
        return queue

    async def disable_queue(self, q: int) -> None:
        await self._write_reg(regs.queue_reg(q, regs.CTRL), 0)
        self.queues.pop(q, None)

    def queue(self, queue: QueueRef = None) -> Queue:
        """The Queue for `queue` (a Queue, an index, or None: the lowest configured one)."""
        if isinstance(queue, Queue):
            return queue
        if queue is None:
            if not self.queues:
                raise NdpError("no queue is configured; call configure_queue first")
            return self.queues[min(self.queues)]
        if queue not in self.queues:
            raise NdpError(f"queue {queue!r} is not configured (configured: {sorted(self.queues)!r})")
        return self.queues[queue]

    def _check_queue_args(self, q: int, sq_base: int, cq_base: int, data_base: int, data_limit: int,
                          log2_depth: int, log2_slot: int, pasid: int) -> None:
        def need(cond: bool, what: str) -> None:
            if not cond:
                raise ArgumentError(f"queue {q!r}: {what}")
        need(isinstance(q, int) and 0 <= q < self.caps.num_queues,
             f"index must be in range(NUM_QUEUES={self.caps.num_queues!r})")
        for name, (_, width), value in (("log2_depth", regs.CFG_LOG2_DEPTH, log2_depth),
                                        ("log2_slot", regs.CFG_LOG2_SLOT, log2_slot),
                                        ("pasid", regs.CFG_PASID, pasid)):
            need(isinstance(value, int) and 0 <= value < (1 << width),
                 f"{name}={value!r} does not fit in {width} bits")
        need(log2_slot >= slots.MIN_LOG2_SLOT,
             f"log2_slot={log2_slot!r} is below MIN_LOG2_SLOT={slots.MIN_LOG2_SLOT!r}")
        need(log2_depth + log2_slot <= slots.MAX_LOG2_RING,
             f"log2_depth + log2_slot = {log2_depth + log2_slot!r} exceeds MAX_LOG2_RING="
             f"{slots.MAX_LOG2_RING!r}: the device does not serve such a queue")
        for name, value in (("sq_base", sq_base), ("cq_base", cq_base), ("data_base", data_base)):
            need(isinstance(value, int) and value >= 0 and value % slots.LINE_BYTES == 0,
                 f"{name}={value!r} must be a {slots.LINE_BYTES}-byte aligned address")
        need(isinstance(data_limit, int) and data_base <= data_limit < ADDR_LIMIT,
             f"data range [{data_base!r}, {data_limit!r}) must satisfy data_base <= data_limit < 2**64")
        ring_bytes = 1 << (log2_depth + log2_slot)
        sq, cq = (sq_base, sq_base + ring_bytes), (cq_base, cq_base + ring_bytes)
        need(sq[1] <= ADDR_LIMIT and cq[1] <= ADDR_LIMIT, "rings run past the 64-bit address space")
        need(not _overlaps(*sq, *cq),
             f"SQ ring [{sq[0]:#x}, {sq[1]:#x}) overlaps CQ ring [{cq[0]:#x}, {cq[1]:#x})")
        # Uploads are placed in the data range, so rings inside it would be overwritten.
        for name, ring in (("SQ", sq), ("CQ", cq)):
            need(not _overlaps(*ring, data_base, data_limit),
                 f"{name} ring [{ring[0]:#x}, {ring[1]:#x}) overlaps the data range "
                 f"[{data_base:#x}, {data_limit:#x})")
            for other in self.queues.values():
                if other.index == q:
                    continue
                other_bytes = other.depth * other.slot_bytes
                for other_name, base in (("SQ", other.sq_base), ("CQ", other.cq_base)):
                    need(not _overlaps(*ring, base, base + other_bytes),
                         f"{name} ring [{ring[0]:#x}, {ring[1]:#x}) overlaps queue "
                         f"{other.index!r}'s {other_name} ring at {base:#x}")

    async def _write_reg(self, offset: int, value: int) -> None:
        await self.transport.reg_write(offset, value, regs.HOST_PASID)

    # ---- numpy entry points ------------------------------------------------------------

    async def upload(self, array: F16, queue: QueueRef = None) -> DeviceTensor:
        """Place a 2-D float16 array in the queue's data range; returns its DeviceTensor."""
        queue = self.queue(queue)
        _fp16_array(array, "array", 2)
        rows, cols = array.shape
        try:    # the dims must fit the descriptor fields of later operations
            probe = load_descriptor(DeviceTensor(0, rows, cols))
        except ValueError as exc:
            raise ShapeError(f"array of shape {array.shape!r} does not fit a descriptor: {exc}") from None
        nbytes = probe.dev_size * slots.LINE_BYTES
        addr = queue.allocate(nbytes)
        await self.transport.mem_write(addr, _padded_bytes(array, nbytes), queue.pasid)
        return DeviceTensor(addr, rows, cols, Dtype.FP16)

    def free(self, placed: DeviceTensor | LoraAdapter | KvBlock | PagedKvShare) -> None:
        """Give back the range of a DeviceTensor, LoraAdapter or KvBlock that upload,
        upload_lora or upload_kv placed, to the allocator of the queue that placed it; a
        PagedKvShare's (upload_kv_paged) list and pages."""
        if isinstance(placed, PagedKvShare):
            for addr in (placed.list_addr, *placed.pages):
                self.free(DeviceTensor(addr, 1, 1))
            return
        if not isinstance(placed, (DeviceTensor, LoraAdapter, KvBlock)):
            raise ArgumentError(f"expected a DeviceTensor, LoraAdapter, KvBlock or PagedKvShare, got {placed!r}")
        allocators = {id(q.allocator): q.allocator for q in self.queues.values()}.values()
        owners = [a for a in allocators if a.size_of(placed.addr) is not None]
        if not owners:
            raise ArgumentError(f"{placed!r} was not placed by any configured queue "
                                f"(queues {sorted(self.queues)!r})")
        if len(owners) > 1:     # queues given overlapping data ranges, each its own allocator
            raise ArgumentError(f"{placed!r}: {len(owners)!r} queues' allocators hold an allocation "
                                f"at {placed.addr:#x}; free it through its Queue")
        [owner] = owners
        if cast(int, owner.size_of(placed.addr)) < placed.size_lines * slots.LINE_BYTES:
            raise ArgumentError(f"{placed!r} is larger than the {owner.size_of(placed.addr)!r} bytes "
                                f"allocated at {placed.addr:#x}")
        owner.free(placed.addr)

    async def gemv(self, x: F16, tensor: DeviceTensor, queue: QueueRef = None, timeout_cycles: int | None = None,
                   return_completion: bool = False, transposed: bool = False) -> F16 | tuple[F16, Completion]:
        """x (K,) float16 times tensor (K x N) -> (N,) float16, computed on the device; with
        `transposed`, times tensor^T (the tensor stored N x K, TRANS_W)."""
        _fp16_array(x, "x", 1)
        out = await self._matmul(Op.GEMV, x.reshape(1, -1), tensor, queue, timeout_cycles,
                                 return_completion, transposed)
        if return_completion:
            values, completion = cast(tuple[F16, Completion], out)
            return values.reshape(-1), completion
        return cast(F16, out).reshape(-1)

    async def gemm(self, x: F16, tensor: DeviceTensor, queue: QueueRef = None, timeout_cycles: int | None = None,
                   return_completion: bool = False, transposed: bool = False) -> F16 | tuple[F16, Completion]:
        """X (M x K) float16 times tensor (K x N) -> (M x N) float16, computed on the device;
        with `transposed`, times tensor^T (the tensor stored N x K, TRANS_W)."""
        _fp16_array(x, "X", 2)
        return await self._matmul(Op.GEMM, x, tensor, queue, timeout_cycles, return_completion,
                                  transposed)

    async def load(self, tensor: DeviceTensor, queue: QueueRef = None, timeout_cycles: int | None = None,
                   return_completion: bool = False) -> F16 | tuple[F16, Completion]:
        """Read `tensor` through the device (descriptor type LOAD); returns its array."""
        queue = self.queue(queue)
        self._check_tensor(tensor)
        desc = load_descriptor(tensor)
        completion = await self._run(queue, desc, b"", timeout_cycles)
        array = np.frombuffer(completion.result, FP16, tensor.rows * tensor.cols)
        array = array.astype(np.float16).reshape(tensor.rows, tensor.cols)
        return (array, completion) if return_completion else array

    async def store(self, tensor: DeviceTensor, array: F16, queue: QueueRef = None, timeout_cycles: int | None = None,
                    return_completion: bool = False) -> Completion | None:
        """Write `array` into `tensor` through the device (descriptor type STORE)."""
        queue = self.queue(queue)
        self._check_tensor(tensor)
        _fp16_array(array, "array", 2)
        if array.shape != (tensor.rows, tensor.cols):
            raise ShapeError(f"array of shape {array.shape!r} does not match the tensor's "
                             f"{(tensor.rows, tensor.cols)!r}")
        desc = store_descriptor(tensor)
        completion = await self._run(queue, desc, _padded_bytes(array, payload_bytes(desc)),
                                     timeout_cycles)
        return completion if return_completion else None

    # ---- the project's ops: softmax, LoRA E3/E4, integral attention ------------------------

    async def upload_lora(self, a: F16, b: F16, queue: QueueRef = None) -> LoraAdapter:
        """Place LoRA factors A (D x R) and B (R x D) for `lora_xa` / `lora_xab`."""
        queue = self.queue(queue)
        _fp16_array(a, "A", 2)
        _fp16_array(b, "B", 2)
        d, r = a.shape
        if b.shape != (r, d):
            raise ShapeError(f"B must be R x D = {(r, d)!r} for A of shape {a.shape!r}, got {b.shape!r}")
        adapter = LoraAdapter(0, d, r)
        half = lines(d * r * 2) * slots.LINE_BYTES
        addr = queue.allocate(adapter.size_lines * slots.LINE_BYTES)
        await self.transport.mem_write(addr, _padded_bytes(a, half) + _padded_bytes(b, half), queue.pasid)
        return LoraAdapter(addr, d, r)

    async def upload_kv(self, k: F16, v: F16, queue: QueueRef = None, token_major: bool = True) -> KvBlock:
        """Place one KV head's keys and values, each T x d float16 (a token per row), as the
        ATTENTION operand: K (as is, or transposed with token_major False), then V."""
        queue = self.queue(queue)
        _fp16_array(k, "K", 2)
        _fp16_array(v, "V", 2)
        data = kv_operand_bytes(k, v, token_major)
        addr = queue.allocate(len(data))
        await self.transport.mem_write(addr, data, queue.pasid)
        return KvBlock(addr, k.shape[1], k.shape[0], token_major)

    async def upload_kv_paged(self, k: F16, v: F16, page_shift: int, queue: QueueRef = None) -> PagedKvShare:
        """Place one KV head's keys and values, each T x d float16, as a paged ATTENTION's
        operand (PagedKvShare): pages of 2^page_shift tokens, each allocated whole at a
        PAGE_ALIGN boundary (its keys token-major, its values page_half_bytes after them),
        and their list at a PAGE_LIST_BYTES boundary."""
        queue = self.queue(queue)
        _fp16_array(k, "K", 2)
        _fp16_array(v, "V", 2)
        if k.shape != v.shape:
            raise ShapeError(f"K and V must have the same shape (T, d), got {k.shape!r} and {v.shape!r}")
        t, d = k.shape
        paged_attention_descriptor(0, t, d, page_shift, 1)          # the arguments' checks
        page_tokens = 1 << page_shift
        half = page_tokens * d * 2
        placed = []
        try:
            for first in range(0, t, page_tokens):
                addr = queue.allocate(2 * half, PAGE_ALIGN)
                placed.append(addr)
                await self.transport.mem_write(addr, _padded_bytes(k[first:first + page_tokens], half)
                                               + _padded_bytes(v[first:first + page_tokens], half), queue.pasid)
            list_addr = queue.allocate(PAGE_LIST_BYTES, PAGE_LIST_BYTES)
            placed.append(list_addr)
            await self.transport.mem_write(list_addr, page_list_bytes(placed[:-1]), queue.pasid)
        except BaseException:
            for addr in placed:
                queue.free(addr)
            raise
        return PagedKvShare(list_addr, t, d, page_shift, tuple(placed[:-1]))

    async def lora_xa(self, x: F16, adapter: LoraAdapter, queue: QueueRef = None, timeout_cycles: int | None = None,
                      return_completion: bool = False) -> F16 | tuple[F16, Completion]:
        """LoRA E4: m = X A (M x R) float16, one GEMM on the device."""
        self._check_adapter(adapter)
        return await self.gemm(x, adapter.a, queue, timeout_cycles, return_completion)

    async def lora_xab(self, x: F16, adapter: LoraAdapter, queue: QueueRef = None, timeout_cycles: int | None = None,
                       return_completion: bool = False) -> F16 | tuple[F16, Completion]:
        """LoRA E3: y = (X A) B (M x D) float16 in one descriptor; X A stays on the device."""
        queue = self.queue(queue)
        self._check_adapter(adapter)
        _fp16_array(x, "X", 2)
        m = x.shape[0]
        if x.shape[1] != adapter.d:
            raise ShapeError(f"X has {x.shape[1]!r} columns, the adapter's D is {adapter.d!r}")
        desc = lora_xab_descriptor(adapter, m)
        completion = await self._run(queue, desc, _padded_bytes(x, payload_bytes(desc)), timeout_cycles)
        out = np.frombuffer(completion.result, FP16, m * adapter.d).astype(np.float16).reshape(m, adapter.d)
        return (out, completion) if return_completion else out

    async def softmax(self, x: F16, partial: bool = False, queue: QueueRef = None, timeout_cycles: int | None = None,
                      return_completion: bool = False) -> Any:
        """Row softmax of X (M x N) float16 on the device -> (M x N) float16; with
        `partial`, (exp(X - m) float16, m float32 (M,), l float32 (M,))."""
        queue = self.queue(queue)
        _fp16_array(x, "X", 2)
        m, n = x.shape
        desc = softmax_descriptor(m, n, partial)
        completion = await self._run(queue, desc, _padded_bytes(x, payload_bytes(desc)), timeout_cycles)
        out: Any = np.frombuffer(completion.result, FP16, m * n).astype(np.float16).reshape(m, n)
        if partial:
            out = (out, *result_anchors(completion.result, stats_offset(desc), m))
        return (out, completion) if return_completion else out

    async def attention_partial(self, q: F16, kv: KvBlock, queue: QueueRef = None, scaled: bool = False,
                                timeout_cycles: int | None = None,
                                return_completion: bool = False) -> Partial | tuple[Partial, Completion]:
        """Integral attention of query rows q (M x d) float16 over one KV head's tokens on
        this device: (O float32 (M x d) = sum_t exp(P_t - m) V_t, m, l), P = q K^T / sqrt(d);
        merge devices' results with driver.attention.merge_attention. q is scaled by
        1/sqrt(d) here (float16, one rounding) unless `scaled`."""
        if not isinstance(kv, KvBlock):
            raise ArgumentError(f"expected a KvBlock, got {kv!r}")
        return await self._attention(q, kv, queue, scaled, timeout_cycles, return_completion)

    async def attention_paged(self, q: F16, share: PagedKvShare, queue: QueueRef = None, scaled: bool = False,
                              timeout_cycles: int | None = None,
                              return_completion: bool = False) -> Partial | tuple[Partial, Completion]:
        """attention_partial over a PagedKvShare: one paged ATTENTION descriptor reads the
        share's pages through its list and returns one (O, m, l) for all of its tokens."""
        if not isinstance(share, PagedKvShare):
            raise ArgumentError(f"expected a PagedKvShare, got {share!r}")
        return await self._attention(q, share, queue, scaled, timeout_cycles, return_completion)

    async def _attention(self, q: F16, kv: KvBlock | PagedKvShare, queue: QueueRef, scaled: bool,
                         timeout_cycles: int | None,
                         return_completion: bool) -> Partial | tuple[Partial, Completion]:
        queue = self.queue(queue)
        _fp16_array(q, "q", 2)
        m, d = q.shape
        if d != kv.d:
            raise ShapeError(f"q has d={d!r}, the KV operand's d is {kv.d!r}")
        desc = attention_descriptor(kv, m)
        self.check_fits(queue, desc)
        self._check_pages(queue, kv, desc)
        payload = _padded_bytes(q if scaled else scale_query(q), payload_bytes(desc))
        completion = await self._run(queue, desc, payload, timeout_cycles)
        out = attention_result(completion.result, desc)
        return (out, completion) if return_completion else out

    def _check_pages(self, queue: Queue, kv: KvBlock | PagedKvShare, desc: Descriptor, where: str = "") -> None:
        """A PagedKvShare's entries, as the device checks them (BAD_PAGE), and its count."""
        if not isinstance(kv, PagedKvShare):
            return
        if len(kv.pages) != -(-kv.tokens // kv.page_tokens):
            raise ArgumentError(f"{where}{kv!r} lists {len(kv.pages)!r} pages for {kv.tokens!r} tokens "
                                f"in pages of {kv.page_tokens!r}")
        view = QueueView(queue.log2_slot, queue.data_base, queue.data_limit)
        status = check_pages(desc, list(kv.pages), view, self.caps)
        if status != Status.OK:
            raise ArgumentError(f"{where}queue {queue.index!r} would answer {status.name} for the pages "
                                f"{[hex(a) for a in kv.pages]!r} of {desc!r}")

    async def attention_decode(self, requests: Sequence[tuple[F16, Sequence[KvBlock | PagedKvShare]]],
                               queues: Sequence[int] | None = None, scaled: bool = False,
                               timeout_cycles: int | None = None) -> list[list[Partial]]:
        """One decode step of attention for a batch as one burst.

        `requests`: a list of (q, kv_blocks): q (H_q x d) float16, the request's query
        heads; kv_blocks, this device's KvBlock or PagedKvShare per KV head (GQA: H_q /
        len(kv_blocks) consecutive query heads share one; MHA: one each). One ATTENTION
        descriptor (a paged one for a share) per request and KV head goes to the least
        loaded of the `queues` (indices; default all configured) whose data range holds its
        KV block, or a share's list and every page (upload_kv placed it there); every
        queue's slots are written before any doorbell rings, and the
        completions are read as they come, in any order across queues. Returns, per
        request, the list of (O, m, l) per KV head (merge devices' results with
        driver.attention.merge_attention). Each queue must have a free slot for each of its
        descriptors (QueueFull otherwise)."""
        queue_list = [self.queue(q) for q in (sorted(self.queues) if queues is None else queues)]
        if not queue_list:
            raise NdpError("no queue is configured; call configure_queue first")
        # queue -> [(request, head, desc, payload)]
        work: dict[int, list[tuple[int, int, Descriptor, bytes]]] = {q.index: [] for q in queue_list}
        for r, (q, blocks) in enumerate(requests):
            _fp16_array(q, f"q of request {r}", 2)
            groups = query_groups(q.shape[0], len(blocks))
            for h, (heads, block) in enumerate(zip(groups, blocks, strict=True)):
                if not isinstance(block, (KvBlock, PagedKvShare)):
                    raise ArgumentError(f"request {r} head {h}: expected a KvBlock or PagedKvShare, got {block!r}")
                if block.d != q.shape[1]:
                    raise ShapeError(f"request {r} head {h}: q has d={q.shape[1]!r}, the KV block {block.d!r}")
                # a queue whose data range holds the block (a share: its list and every
                # page), the least loaded first
                ranges = _kv_ranges(block)
                owners = [q for q in queue_list if _holds(q, ranges)]
                if not owners:
                    what = (f"the page list at {block.list_addr:#x} and its {len(block.pages)!r} pages"
                            if isinstance(block, PagedKvShare) else f"the KV block at {block.addr:#x}")
                    raise ArgumentError(f"request {r} head {h}: no queue of {[q.index for q in queue_list]!r} "
                                        f"has {what} in its data range")
                queue = min(owners, key=lambda q: len(work[q.index]))
                rows = q[heads] if scaled else scale_query(q[heads])
                desc = attention_descriptor(block, len(heads))
                self.check_fits(queue, desc)
                self._check_pages(queue, block, desc, f"request {r} head {h}: ")
                work[queue.index].append((r, h, desc, _padded_bytes(rows, payload_bytes(desc))))
        pending: list[tuple[Queue, int, int, int, Descriptor]] = []
        for queue in queue_list:
            items = work[queue.index]
            if items:
                seqs = await queue.submit_many([(desc, payload) for _, _, desc, payload in items], ring=False)
                pending += [(queue, seq, r, h, desc) for seq, (r, h, desc, _) in zip(seqs, items, strict=True)]
        for queue in queue_list:
            if work[queue.index]:
                await queue.ring()
        results: list[list[Any]] = [[None] * len(blocks) for _, blocks in requests]
        for queue, seq, r, h, desc in pending:
            completion = (await queue.wait(seq, timeout_cycles)).check()
            results[r][h] = attention_result(completion.result, desc)
        return results

    def _check_adapter(self, adapter: LoraAdapter) -> None:
        if not isinstance(adapter, LoraAdapter):
            raise ArgumentError(f"expected a LoraAdapter, got {adapter!r}")

    async def _matmul(self, op: int, x: F16, tensor: DeviceTensor, queue: QueueRef, timeout_cycles: int | None,
                      return_completion: bool, transposed: bool = False) -> F16 | tuple[F16, Completion]:
        queue = self.queue(queue)
        self._check_tensor(tensor)
        m, k = x.shape
        tensor_k, n = (tensor.cols, tensor.rows) if transposed else (tensor.rows, tensor.cols)
        if k != tensor_k:
            side = "columns (transposed)" if transposed else "rows"
            raise ShapeError(f"input has K={k!r} columns but the tensor has {tensor_k!r} {side} "
                             f"(shapes {x.shape!r} and {(tensor.rows, tensor.cols)!r})")
        if k > self.caps.k_max:
            raise ShapeError(f"K={k!r} exceeds the device's k_max={self.caps.k_max!r} "
                             f"(IN_BUF_BYTES={self.caps.in_buf_bytes!r}, ROWS={self.caps.rows!r})")
        if n > self.caps.n_max:
            raise ShapeError(f"N={n!r} exceeds the device's n_max={self.caps.n_max!r} "
                             f"(OUT_BUF_BYTES={self.caps.out_buf_bytes!r}, ROWS={self.caps.rows!r})")
        try:
            desc = matmul_descriptor(op, tensor, m, transposed)
        except ValueError as exc:
            raise ShapeError(f"input of shape {x.shape!r} does not fit a descriptor: {exc}") from None
        completion = await self._run(queue, desc, _padded_bytes(x, payload_bytes(desc)), timeout_cycles)
        out = np.frombuffer(completion.result, FP16, m * n).astype(np.float16).reshape(m, n)
        return (out, completion) if return_completion else out

    def _check_tensor(self, tensor: DeviceTensor) -> None:
        if not isinstance(tensor, DeviceTensor):
            raise ArgumentError(f"expected a DeviceTensor, got {tensor!r}")
        if tensor.dtype != Dtype.FP16:
            raise ArgumentError(f"only FP16 tensors are supported, got dtype {tensor.dtype!r}")

    async def _run(self, queue: Queue, desc: Descriptor, payload: bytes, timeout_cycles: int | None) -> Completion:
        self.check_fits(queue, desc)
        completion = await queue.run(desc, payload, timeout_cycles)
        return completion.check()

    def check_fits(self, queue: Queue, desc: Descriptor) -> None:
        """Refuse, before touching the device, what the device would refuse."""
        room = queue.payload_room
        if payload_bytes(desc) > room:
            raise ShapeError(f"input of {payload_bytes(desc)!r} bytes does not fit the "
                             f"{room!r}-byte payload of queue {queue.index!r}'s "
                             f"{queue.slot_bytes!r}-byte slots")
        if result_bytes(desc) > room:
            raise ShapeError(f"result of {result_bytes(desc)!r} bytes does not fit the "
                             f"{room!r}-byte payload of queue {queue.index!r}'s "
                             f"{queue.slot_bytes!r}-byte slots")
        view = QueueView(queue.log2_slot, queue.data_base, queue.data_limit)
        status = check_descriptor(desc, view, self.caps)
        if status != Status.OK:
            raise ArgumentError(f"queue {queue.index!r} would answer {status.name} for {desc!r}")
