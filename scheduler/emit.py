"""Descriptor emission: one step's work as the exact descriptor stream per device and the
GPU-side work list, from the scheduler's decisions (seed 000, sections V-A and V-B).

Per layer the work comes in rounds, each depending on the previous one's results:
- a LoRA round for a set of projections (q, k, v; then o; then gate, up; then down): per
  adapter and projection, one descriptor with all of the adapter's rows: E3 a LORA_XAB
  chain, E4 a GEMM on A (m = x A, then m B on the GPU); E1 and E2 are GPU work;
- the attention round: per request, KV head and device, one paged ATTENTION descriptor
  over the device's pages the GPU does not duplicate (a share; one per list where they
  span several: driver.kv_cache shares_after), or, where the cache's pages cannot be a
  paged ATTENTION's, one ATTENTION per page; the head's group of query heads as its rows.
  The GPU computes its own share (the pages it duplicates, scheduler.kv_pages, and the
  step's new token) and merges.
The descriptors are the driver's builders over the placed tensors; nothing here touches
a device.
"""
import collections
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from driver.kv_cache import PagedKvCache
from isa import Op
from isa.descriptor import Descriptor
from isa.encoders import attention_descriptor, lora_xab_descriptor, matmul_descriptor

from .cost import Strategy


@dataclasses.dataclass(frozen=True)
class DeviceOp:
    device: int
    descriptor: Descriptor
    kind: str                   # "lora_xab" (E3), "lora_xa" (E4), "attention"
    key: tuple[Any, ...]        # (adapter, projection) or (request, kv head, first token)
    rows: tuple[int, ...]       # requests whose rows form the input (LoRA), or the query heads
    # a share's suffix list: bytes to write at the descriptor's dev_addr before it is submitted
    page_list: bytes | None = None
    tokens: range = range(0)    # an attention's global token indices


@dataclasses.dataclass(frozen=True)
class GpuOp:
    kind: str                   # "lora_e1", "lora_e2", "lora_mb" (E4's second half), "attention_share"
    key: tuple[Any, ...]
    rows: tuple[int, ...]


@dataclasses.dataclass
class Round:
    name: str
    device_ops: list[DeviceOp]
    gpu_ops: list[GpuOp]

    def per_device(self) -> dict[int, list[DeviceOp]]:
        out: dict[int, list[DeviceOp]] = {}
        for op in self.device_ops:
            out.setdefault(op.device, []).append(op)
        return out


def lora_round(name: str, projections: Iterable[str], rows_by_adapter: Mapping[int, Iterable[int]],
               strategy_of: Callable[[int, str], Strategy], handles: Mapping[tuple[int, str], Any],
               device_of: Callable[[int], int], copies: Mapping[str, int] | None = None) -> Round:
    """Rounds of LoRA products. `rows_by_adapter`: adapter -> the requests (rows of x) it
    serves; `strategy_of(adapter, projection)` -> Strategy; `handles[(adapter, projection)]`
    -> the placed operand (a LoraAdapter for a square weight, else a DeviceTensor of A), or
    a list of them when `copies[projection]` > 1 (a mixture of experts: the FFN's adapter on
    each active expert, each its own product with the adapter's rows)."""
    device_ops: list[DeviceOp] = []
    gpu_ops: list[GpuOp] = []
    for adapter, adapter_rows in sorted(rows_by_adapter.items()):
        rows = tuple(adapter_rows)
        for projection in projections:
            key, s = (adapter, projection), strategy_of(adapter, projection)
            placed: Any = handles.get(key)
            operands: list[Any] = placed if isinstance(placed, list) else [placed] * (copies or {}).get(projection, 1)
            for operand in operands:
                if s is Strategy.E3:
                    desc = lora_xab_descriptor(operand, len(rows))
                    device_ops.append(DeviceOp(device_of(adapter), desc, "lora_xab", key, rows))
                elif s is Strategy.E4:
                    a = getattr(operand, "a", operand)
                    desc = matmul_descriptor(Op.GEMM, a, len(rows))
                    device_ops.append(DeviceOp(device_of(adapter), desc, "lora_xa", key, rows))
                    gpu_ops.append(GpuOp("lora_mb", key, rows))
                else:
                    gpu_ops.append(GpuOp("lora_e1" if s is Strategy.E1 else "lora_e2", key, rows))
    return Round(name, device_ops, gpu_ops)


def attention_round(kv_cache: PagedKvCache, layer: int, requests: Iterable[int],
                    held: Mapping[int, Sequence[int]], groups: Sequence[Sequence[int]],
                    on_devices: bool = True) -> Round:
    """Per request, KV head and device, the paged ATTENTIONs over the device's pages the GPU
    does not hold (one, or one per list), or with an unpaged cache one ATTENTION per such
    page; `held[rid]` is, per device, how many of the request's first pages there the GPU
    holds (KvPages.held_pages); `groups[h]` the query heads of KV head h. The GPU's op for a
    request and head lists the tokens of its pages, or, if not `on_devices`, every token
    (the GPU reads the pages it does not hold over the link)."""
    device_ops: list[DeviceOp] = []
    gpu_ops: list[GpuOp] = []
    head_ops = _shares if kv_cache.paged else _pages
    for rid in requests:
        for head, q_heads in enumerate(groups):
            rows = tuple(q_heads)
            ops = head_ops(kv_cache, rid, layer, head, held[rid], rows) if on_devices else []
            device_ops += ops
            total = kv_cache.tokens(rid)
            gpu_tokens: tuple[int, ...] = ()
            if sum(len(op.tokens) for op in ops) < total:
                gpu_tokens = tuple(sorted(set(range(total)).difference(*(op.tokens for op in ops))))
            gpu_ops.append(GpuOp("attention_share", (rid, head, gpu_tokens), rows))
    return Round("attention", device_ops, gpu_ops)


def _shares(kv_cache: PagedKvCache, rid: int, layer: int, head: int, held: Sequence[int],
            rows: tuple[int, ...]) -> list[DeviceOp]:
    """A request-head's paged ATTENTIONs over the pages the GPU does not hold."""
    return [DeviceOp(device, attention_descriptor(share, len(rows)), "attention", (rid, head, tokens[0]), rows,
                     page_list, tokens)
            for device, share, tokens, page_list in kv_cache.shares_after(rid, layer, head, held)]


def _pages(kv_cache: PagedKvCache, rid: int, layer: int, head: int, held: Sequence[int],
           rows: tuple[int, ...]) -> list[DeviceOp]:
    """A request-head's ATTENTIONs, one per page the GPU does not hold (an unpaged cache)."""
    ops: list[DeviceOp] = []
    seen: collections.Counter[int] = collections.Counter()     # pages passed so far, per device
    for device, block, tokens in kv_cache.pages(rid, layer, head):
        index, seen[device] = seen[device], seen[device] + 1
        if index >= held[device]:
            ops.append(DeviceOp(device, attention_descriptor(block, len(rows)), "attention", (rid, head, tokens[0]),
                                rows, None, tokens))
    return ops
