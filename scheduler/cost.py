"""PLoRA's cost model (seed 000, section VI-B; Tables IV and V, derived in docs/scheduler.md).

Three sources of time, and no other:
- the GPU: a roofline of its config (peak FP16 FLOPS, HBM bandwidth; kernel launches are
  charged per step, not per adapter, since one SGMV-style kernel serves every adapter);
- the link: its two numbers, W_link and L_link (round trip), from the link config;
- the devices: the cycle-approximate model of sim/, through `scheduler.device_timing`:
  a descriptor's isolated latency, and its period and drain in a back-to-back stream.

`lora_cost` gives one injected weight's product under one strategy, alone (Table IV, Fig.
3a); `add_lora` puts it into its round's load, where it shares the devices' queues, the
link and the GPU's stream with the round's other work (scheduler.rounds). `attention_load`
is one layer's attention round for a batch under a KV share (Table V): the GPU over the
pages it holds, each device over the rest of its pages as a queue of ATTENTION descriptors,
the partials back over the link, the GPU's merge. Everything is per layer.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import math
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from driver.kv_cache import list_pages, paged_page_shift
from isa import payload_bytes, result_bytes
from isa.descriptor import PAGE_ENTRY_BYTES
from isa.encoders import KvBlock, attention_descriptor
from isa.errors import ShapeError
from isa.slots import HEADER_BYTES, LINE_BYTES
from isa.system import FP16_BYTES, GpuConfig, LinkConfig
from isa.validate import lines

from .kv_pages import KvPages
from .rounds import RoundLoad

if TYPE_CHECKING:
    from .device_timing import DeviceTiming

INF = float("inf")


class Strategy(enum.Enum):
    """Where y = x A B runs (section V-A, Fig. 6(b)); `gpu_parts` is what GPU memory must hold."""
    E1 = "A B"      # P1: the GPU computes from cached A and B
    E2 = ""         # P2: the GPU computes, reading A and B from the device over the link
    E3 = "-"        # P2: the device computes y = x A B; x in, y out
    E4 = "B"        # P3: the device computes m = x A; x in, m out; the GPU computes m B

    @property
    def gpu_parts(self) -> frozenset[str]:
        return frozenset(p for p in self.value.split() if p in "AB")


STRATEGIES = tuple(Strategy)


@dataclasses.dataclass(frozen=True)
class LoraCost:
    """One injected weight's LoRA product under one strategy, one layer."""
    strategy: Strategy
    link_to_device: float       # bytes GPU -> device
    link_to_gpu: float          # bytes device -> GPU
    gpu_bytes: float            # GPU memory the strategy holds (the cached factors)
    gpu_s: float                # GPU roofline time, launch excluded
    device_s: float             # device time from the cycle model, alone
    total_s: float              # the isolated time of this product (Fig. 3a's y axis)
    infeasible: str | None = None  # why the device cannot run it, if it cannot
    period_s: float = 0.0       # the device's period for it in a back-to-back stream
    drain_s: float = 0.0        # and its drain when it is the stream's last

    @property
    def link_bytes(self) -> float:
        return self.link_to_device + self.link_to_gpu

    @property
    def feasible(self) -> bool:
        return self.infeasible is None


def amortized_load_s(link: LinkConfig, nbytes: float, steps: float) -> float:
    """The scheduler's rule for caching factors on the GPU: their one-time load over the
    link (one round trip, then the bytes) spread over the `steps` the batch is expected to
    last. A strategy needing factors the GPU lacks is charged this on top of its step time."""
    if not nbytes:
        return 0.0
    return (link.round_trip_s + link.transfer_s(nbytes)) / steps


def factor_bytes(d_in: int, d_out: int, r: int) -> tuple[int, int]:
    """(A bytes, B bytes) of one injected weight's adapter: A d_in x r, B r x d_out, FP16."""
    return d_in * r * FP16_BYTES, r * d_out * FP16_BYTES


class CostModel:
    def __init__(self, gpu: GpuConfig, link: LinkConfig, timing: DeviceTiming, num_devices: int,
                 distributed_attention: bool = True, kv_scale: float = 1.0, page_tokens: int | None = None,
                 share_descriptors: bool = True) -> None:
        """`distributed_attention`: the devices may compute attention partials over the KV the
        GPU does not hold (D); without it the GPU reads that KV over the link. `kv_scale`: KV bytes
        per element over FP16's (0.5 INT8, 0.25 INT4): every KV byte count scales with it, and a
        device's page time scales in the bytes it reads, not in its fixed cost (`_page`).
        `page_tokens`: tokens of a KV page on one device (one ATTENTION operand); needed for
        attention only (a LoRA-only user, the crossover table, may leave it out).
        `share_descriptors`: where the pages can be a paged ATTENTION's (driver.kv_cache
        paged_page_shift), a device runs one descriptor per request, KV head and list of its
        pages (scheduler.emit), else one per page."""
        if num_devices < 1:
            raise ValueError(f"num_devices must be >= 1, got {num_devices!r}")
        if not 0 < kv_scale <= 1:
            raise ValueError(f"kv_scale must be in (0, 1], got {kv_scale!r}")
        self.gpu, self.link, self.timing, self.num_devices = gpu, link, timing, num_devices
        self.distributed_attention, self.kv_scale = distributed_attention, kv_scale
        self.pages = KvPages(num_devices, page_tokens) if page_tokens else None
        self.share_descriptors = share_descriptors
        # pages one paged ATTENTION covers (its list), as the driver's KV cache cuts them
        self.list_pages = list_pages(page_tokens, min(timing.cfg.k_max, timing.cfg.n_max)) if page_tokens else 0
        self.lora_cost = functools.lru_cache(maxsize=1 << 16)(self.lora_cost)  # type: ignore[method-assign]
        # (op, rows, head_dim) -> [periods by tokens 0..P (a share's: 0..list_pages x P), drains]
        self._page_tables: dict[tuple[str, int, int], list[npt.NDArray[np.float64]]] = {}

    # ---- Table IV: LoRA ---------------------------------------------------------------

    def lora_cost(self, strategy: Strategy, b: int, d_in: int, d_out: int, r: int) -> LoraCost:
        """Cost of y (b x d_out) = x (b x d_in) A B for one adapter under `strategy`, alone.

        Each exchange with a device pays L_link once (the GPU's stores of x and the
        descriptor, then its poll of the completion and load of the result, pipelined)."""
        if b < 1 or d_in < 1 or d_out < 1 or r < 1:
            raise ValueError(f"batch, dims and rank must be >= 1, got b={b!r} d_in={d_in!r} d_out={d_out!r} r={r!r}")
        a_bytes, b_bytes = factor_bytes(d_in, d_out, r)
        x_bytes, y_bytes, m_bytes = b * d_in * FP16_BYTES, b * d_out * FP16_BYTES, b * r * FP16_BYTES
        flops_xa, flops_mb = 2 * b * d_in * r, 2 * b * r * d_out
        W, L = self.link.transfer_s, self.link.round_trip_s
        gpu = self.gpu.roofline_s
        if strategy is Strategy.E1:
            gpu_s = gpu(flops_xa + flops_mb, a_bytes + b_bytes + x_bytes + y_bytes)
            return LoraCost(strategy, 0, 0, a_bytes + b_bytes, gpu_s, 0.0, gpu_s)
        if strategy is Strategy.E2:
            # the SMs stream A and B over the link while they compute: the slower of the two
            gpu_s = gpu(flops_xa + flops_mb, x_bytes + y_bytes)
            return LoraCost(strategy, 0, a_bytes + b_bytes, 0, gpu_s, 0.0,
                            L + max(W(a_bytes + b_bytes), gpu_s))
        if strategy is Strategy.E3:
            (device_s, period, drain), why = self._device("lora_xab", b, d_in, r, same=(d_in, d_out))
            total = L + W(x_bytes) + device_s + W(y_bytes)
            return LoraCost(strategy, x_bytes, y_bytes, 0, 0.0, device_s, total, why, period, drain)
        if strategy is Strategy.E4:
            (device_s, period, drain), why = self._device("lora_xa", b, d_in, r)
            gpu_s = gpu(flops_mb, b_bytes + m_bytes + y_bytes)
            total = L + W(x_bytes) + device_s + W(m_bytes) + gpu_s
            return LoraCost(strategy, x_bytes, m_bytes, b_bytes, gpu_s, device_s, total, why, period, drain)
        raise ValueError(f"unknown strategy {strategy!r}")

    def _device(self, op: str, *shape: int, same: tuple[int, int] | None = None
                ) -> tuple[tuple[float, float, float], str | None]:
        """((latency, period, drain), None) from the timing tables, or ((inf, inf, inf), why)
        for a shape the device refuses."""
        if same is not None and same[0] != same[1]:
            return (INF, INF, INF), (f"LORA_XAB computes a square adapter (A D x R, B R x D); "
                                     f"this weight is {same[0]} x {same[1]}")
        try:
            return (self.timing.seconds(op, *shape), *self.timing.stream(op, *shape)), None
        except ShapeError as exc:
            return (INF, INF, INF), str(exc)

    def add_lora(self, load: RoundLoad, cost: LoraCost, device: int, copies: int = 1) -> None:
        """Put `copies` of one product (a LoraCost) into its round's `load`: the GPU's
        share on its stream (E4's m B after the pool's results), the device's share at the
        end of `device`'s queue with its descriptor and completion lines on the link, E2's
        factors over the link."""
        s = cost.strategy
        if s is Strategy.E1:
            load.gpu_s += copies * cost.gpu_s
        elif s is Strategy.E2:
            load.gpu_s += copies * cost.gpu_s
            load.add_reads(copies * cost.link_to_gpu)
        else:
            load.add_descriptors(device, copies, cost.period_s, cost.drain_s,
                                 HEADER_BYTES + cost.link_to_device, HEADER_BYTES + cost.link_to_gpu)
            load.gpu_after_s += copies * cost.gpu_s

    # ---- Table V: attention -----------------------------------------------------------

    def attention_load(self, contexts: npt.ArrayLike, rids: npt.ArrayLike, units: npt.ArrayLike, q_heads: int,
                       kv_heads: int, head_dim: int, on_devices: bool | None = None) -> tuple[RoundLoad, float]:
        """One layer's attention round for a batch whose request i (id rids[i], contexts[i]
        tokens) holds its first units[i] KV units on the GPU (scheduler.kv_pages): see
        AttentionTable. Returns (RoundLoad, the GPU's KV bytes read per layer)."""
        return AttentionTable(self, contexts, rids, q_heads, kv_heads, head_dim).load(units, on_devices)

    def paged(self, head_dim: int) -> bool:
        """Whether a device runs shares (one paged ATTENTION a list of pages) at head_dim."""
        assert self.pages is not None, "this cost model was made without page_tokens"
        return (self.share_descriptors and self.list_pages > 0
                and paged_page_shift(self.pages.page, head_dim) is not None)

    def _page(self, rows: int, head_dim: int, sizes: npt.ArrayLike, share: bool = False
              ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(period, drain) arrays by a descriptor's token count (0 at 0 tokens): a page's,
        0..P, or with `share` a paged ATTENTION's over up to a list of pages, 0..list_pages
        x P; the sizes asked for and a full page filled in from the stream table. At a KV
        precision below FP16 s tokens read the bytes of ceil(s x kv_scale) FP16 tokens: the
        period is a one-row descriptor of that many tokens (port-bound: the bytes) plus what
        the group's other rows add at s tokens (their MAC passes, which precision does not
        shrink); its drain, the pipeline's tail, does not change."""
        assert self.pages is not None, "this cost model was made without page_tokens"
        page = self.pages.page
        op, dims = ("attention_share", (head_dim, page)) if share else ("attention", (head_dim,))
        top = self.list_pages * page if share else page
        key = (op, rows, head_dim)
        entry = self._page_tables.get(key)
        if entry is None:
            entry = self._page_tables[key] = [np.full(top + 1, np.nan), np.full(top + 1, np.nan)]
            entry[0][0] = entry[1][0] = 0.0
        period, drain = entry
        for s in [page, *np.asarray(sizes).tolist()]:
            if s and math.isnan(period[s]):
                p, d = self.timing.stream(op, rows, *dims, s)
                if self.kv_scale != 1.0:
                    scaled = max(1, math.ceil(s * self.kv_scale))
                    p = self.timing.stream(op, 1, *dims, scaled)[0] + p - self.timing.stream(op, 1, *dims, s)[0]
                period[s], drain[s] = p, d
        return period, drain


class AttentionTable:
    """One layer's attention round for a batch (Table V), under any KV share: the GPU
    computes over the pages it holds; each device, with D, over the rest of its pages, per
    request and KV head one paged ATTENTION per list of them (driver.kv_cache share_chunks: one
    where they fit a list; the first, where the GPU holds part of a list, reads a suffix
    list the host writes, its bytes out with the descriptor), or, with pages that cannot be
    a paged ATTENTION's, one ATTENTION per page; the head's group of query heads as its
    rows, a queue back to back (scheduler.rounds); the partials (O, m, l) come back per
    descriptor over the link and the GPU merges them. Or (without D, or where that is
    faster) the GPU computes over every token, reading the pages it does not hold over the
    link, the two streams in parallel.

    What a request leaves the GPU and each device depends only on how many units it holds,
    so it is tabled for every count at once (arrays indexed [units, request, device]), and
    `load(units)` of a share is a gather and a sum: the scheduler prices many shares a step."""

    def __init__(self, cost: CostModel, contexts: npt.ArrayLike, rids: npt.ArrayLike, q_heads: int, kv_heads: int,
                 head_dim: int) -> None:
        pages = cost.pages
        if pages is None:
            raise ValueError("this cost model was made without page_tokens: it prices no attention")
        self.cost, self.kv_heads, self.head_dim = cost, kv_heads, head_dim
        self.layout = layout = pages.layout(contexts, rids)
        self.requests = np.arange(layout.requests)
        counts = np.minimum(np.arange(int(layout.units.max(initial=0)) + 1)[:, None], layout.units)
        held = pages.held(layout, counts)
        self.gpu_tokens = pages.gpu_tokens(layout, held)                        # [units, request]
        self.kv_token = 2 * kv_heads * head_dim * FP16_BYTES * cost.kv_scale
        self.flops_per_token = 4 * q_heads * head_dim
        self.total_tokens = int(layout.tokens.sum())
        group = q_heads // kv_heads
        desc = attention_descriptor(KvBlock(0, head_dim, 1), group)
        # a descriptor's line and payload out, its completion line and result back
        self.out_bytes, self.in_bytes = HEADER_BYTES + payload_bytes(desc), HEADER_BYTES + result_bytes(desc)
        self.partial_bytes = result_bytes(desc)
        self.list_bytes = np.zeros(held.shape)         # a head's suffix list, written before its first share
        if cost.paged(head_dim):
            self._shares(held, group)
        else:
            full, tail = pages.device_pages(layout, held)
            period, drain = cost._page(group, head_dim, np.unique(layout.tail[layout.tail > 0]))
            page = pages.page
            self.busy = kv_heads * (full * period[page] + np.where(tail, period[layout.tail], 0.0))
            self.count = kv_heads * (full + tail)
            # the drain of the request's last descriptor on a device: its tail page if computed
            self.drain = np.where(tail, drain[layout.tail], drain[page])
            run = period + drain
            self.run = np.where(tail, run[layout.tail], run[page])

    def _shares(self, held: npt.NDArray[np.int64], group: int) -> None:
        """busy, count, drain, run and list_bytes ([units, request, device]) with shares:
        pages held..pages-1 of a device cut at multiples of L = list_pages (share_chunks):
        a first chunk to the next multiple, whole lists, and a last one with the tail."""
        cost, layout, page, per = self.cost, self.layout, self.cost.pages.page, self.cost.list_pages  # type: ignore[union-attr]
        p = np.broadcast_to(layout.pages, held.shape)
        tail = np.broadcast_to(layout.tail, held.shape)
        h = np.minimum(held, p)
        chunks = np.where(h < p, -(-p // per) - h // per, 0)

        def tokens(a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
            """Tokens of pages a..b-1: whole pages but the share's last, which holds `tail`."""
            short = np.where((b == p) & (tail > 0), page - tail, 0)
            return np.where(b > a, (b - a) * page - short, 0)
        first_end = np.minimum((h // per + 1) * per, p)
        first = tokens(h, first_end)
        last = np.where(chunks >= 2, tokens((p - 1) // per * per, p), 0)
        whole = per * page
        sizes = np.unique(np.concatenate([first.ravel(), last.ravel(), [whole]]))
        period, drain = cost._page(group, self.head_dim, sizes, share=True)
        middle = np.maximum(chunks - 2, 0)
        self.busy = self.kv_heads * (period[first] + middle * period[whole] + period[last])
        self.count = self.kv_heads * chunks
        ending = np.where(chunks >= 2, last, first)         # the share's last descriptor
        self.drain = drain[ending]
        self.run = period[ending] + drain[ending]
        suffix = (h < p) & (h % per != 0)
        entries = first_end - h
        self.list_bytes = np.where(suffix, lines(entries * PAGE_ENTRY_BYTES) * LINE_BYTES, 0).astype(np.float64)

    def load(self, units: npt.ArrayLike, on_devices: bool | None = None) -> tuple[RoundLoad, float]:
        """(RoundLoad, the GPU's KV bytes read per layer) when request i holds units[i]; the
        devices compute the rest if `on_devices` (default: the cost model's D), else the GPU
        reads it over the link."""
        cost = self.cost
        units = np.asarray(units, dtype=np.int64)
        caps = self.layout.units
        if units.shape != caps.shape or (units < 0).any() or (units > caps).any():
            bad = np.flatnonzero((units < 0) | (units > caps))[:1].tolist() if units.shape == caps.shape else None
            raise ValueError(f"units held must be one per request within its pages: request {bad} holds "
                             f"{units[bad].tolist() if bad else units.shape}, "
                             f"it has {caps[bad].tolist() if bad else caps.shape}")
        load = RoundLoad("attention", cost.num_devices)
        on_gpu = int(self.gpu_tokens[units, self.requests].sum())
        gpu_bytes = on_gpu * self.kv_token
        if on_devices is None:
            on_devices = cost.distributed_attention
        if on_devices and not cost.distributed_attention:
            raise ValueError("this cost model has no distributed attention (D): the devices compute no partials")
        if not on_devices:
            load.gpu_s = cost.gpu.roofline_s(self.flops_per_token * self.total_tokens, gpu_bytes)
            load.add_reads((self.total_tokens - on_gpu) * self.kv_token)
            return load, gpu_bytes
        load.gpu_s = cost.gpu.roofline_s(self.flops_per_token * on_gpu, gpu_bytes)
        count = self.count[units, self.requests]                                  # [request, device]
        if not count.any():
            return load, gpu_bytes
        busy = self.busy[units, self.requests].sum(axis=0)
        working = count > 0
        # each device's last descriptor: its last request with a page left there
        last = working.shape[0] - 1 - np.argmax(working[::-1], axis=0)
        drains = self.drain[units[last], last, np.arange(cost.num_devices)]
        out_bytes, in_bytes = self.out_bytes, self.in_bytes
        lists = self.list_bytes[units, self.requests]                              # [request, device]
        first = np.argmax(working, axis=0)          # each device's first request with a page left there
        for j in np.flatnonzero(working.any(axis=0)).tolist():
            load.busy[j], load.drain[j] = float(busy[j]), float(drains[j])
            load.first_out[j], load.last_in[j] = out_bytes + float(lists[first[j], j]), in_bytes
        load.descriptors = int(count.sum())
        load.to_device = load.descriptors * out_bytes + self.kv_heads * float(lists.sum())
        load.to_gpu = load.descriptors * in_bytes
        load.run_s = float(self.run[units, self.requests][working].min())
        # the merge: the GPU reads every partial once
        load.gpu_after_s = cost.gpu.roofline_s(0, load.descriptors * self.partial_bytes)
        return load, gpu_bytes


def attention_result_bytes(rows: int, head_dim: int) -> int:
    """Bytes an ATTENTION descriptor returns (O in FP32, then an anchor line per row)."""
    return result_bytes(attention_descriptor(KvBlock(0, head_dim, 1), rows))
