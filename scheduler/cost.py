"""PLoRA's cost model (seed 000, section VI-B; Tables IV and V, derived in docs/scheduler.md).

Three sources of time, and no other:
- the GPU: a roofline of its config (peak FP16 FLOPS, HBM bandwidth; kernel launches are
  charged per step, not per adapter, since one SGMV-style kernel serves every adapter);
- the link: its two numbers, W_link and L_link (round trip), from the link config;
- the devices: the cycle-approximate model of sim/, through `scheduler.device_timing`.

`lora_cost` gives one injected weight's cost under one strategy (Table IV); `attention_cost`
one layer's attention for a batch (Table V), and `AttentionScan` the same for one batch under
many KV shares at once, to the bit, with cheap intervals sure to hold each (the scheduler's
scan for the best share). Everything is per layer and per injected
weight; `site_cost` multiplies up to a whole adapter's use of one projection.
"""
import collections
import dataclasses
import enum
import functools

import numpy as np

from driver.device import KvBlock, attention_descriptor
from driver.errors import ShapeError
from isa import result_bytes
from isa.system import FP16_BYTES

INF = float("inf")


class Strategy(enum.Enum):
    """Where y = x A B runs (section V-A, Fig. 6(b)); `gpu_parts` is what GPU memory must hold."""
    E1 = "A B"      # P1: the GPU computes from cached A and B
    E2 = ""         # P2: the GPU computes, reading A and B from the device over the link
    E3 = "-"        # P2: the device computes y = x A B; x in, y out
    E4 = "B"        # P3: the device computes m = x A; x in, m out; the GPU computes m B

    @property
    def gpu_parts(self):
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
    device_s: float             # device time from the cycle model
    total_s: float              # the isolated time of this product (Fig. 3a's y axis)
    infeasible: str = None      # why the device cannot run it, if it cannot

    @property
    def link_bytes(self):
        return self.link_to_device + self.link_to_gpu

    @property
    def feasible(self):
        return self.infeasible is None


def amortized_load_s(link, nbytes, steps):
    """The scheduler's rule for caching factors on the GPU: their one-time load over the
    link (one round trip, then the bytes) spread over the `steps` the batch is expected to
    last. A strategy needing factors the GPU lacks is charged this on top of its step time."""
    if not nbytes:
        return 0.0
    return (link.round_trip_s + link.transfer_s(nbytes)) / steps


def factor_bytes(d_in, d_out, r):
    """(A bytes, B bytes) of one injected weight's adapter: A d_in x r, B r x d_out, FP16."""
    return d_in * r * FP16_BYTES, r * d_out * FP16_BYTES


class CostModel:
    def __init__(self, gpu, link, timing, num_devices, distributed_attention=True, kv_scale=1.0):
        """`distributed_attention`: the devices compute attention partials over the KV the GPU
        does not hold (D); without it the GPU reads that KV over the link. `kv_scale`: KV bytes
        per element over FP16's (0.5 INT8, 0.25 INT4); the devices' attention, bound by their
        DRAM, is taken to scale with it (the RTL itself reads FP16 K and V)."""
        if num_devices < 1:
            raise ValueError(f"num_devices must be >= 1, got {num_devices!r}")
        if not 0 < kv_scale <= 1:
            raise ValueError(f"kv_scale must be in (0, 1], got {kv_scale!r}")
        self.gpu, self.link, self.timing, self.num_devices = gpu, link, timing, num_devices
        self.distributed_attention, self.kv_scale = distributed_attention, kv_scale
        self.scannable = distributed_attention and kv_scale == 1.0    # AttentionScan's mode
        # the scheduler asks for the same few shapes every step
        self._attention_s = functools.lru_cache(maxsize=1 << 14)(timing.attention)
        self.lora_cost = functools.lru_cache(maxsize=1 << 16)(self.lora_cost)
        self._attention_tables = {}     # (rows, head_dim, page_tokens) -> [seconds by tokens, complete]

    # ---- Table IV: LoRA ---------------------------------------------------------------

    def lora_cost(self, strategy, b, d_in, d_out, r):
        """Cost of y (b x d_out) = x (b x d_in) A B for one adapter under `strategy`.

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
            device_s, why = self._device(self.timing.lora_xab, b, d_in, r, same=(d_in, d_out))
            total = L + W(x_bytes) + device_s + W(y_bytes)
            return LoraCost(strategy, x_bytes, y_bytes, 0, 0.0, device_s, total, why)
        if strategy is Strategy.E4:
            device_s, why = self._device(self.timing.lora_xa, b, d_in, r)
            gpu_s = gpu(flops_mb, b_bytes + m_bytes + y_bytes)
            total = L + W(x_bytes) + device_s + W(m_bytes) + gpu_s
            return LoraCost(strategy, x_bytes, m_bytes, b_bytes, gpu_s, device_s, total, why)
        raise ValueError(f"unknown strategy {strategy!r}")

    @staticmethod
    def _device(op, *shape, same=None):
        """(seconds, None) from the timing table, or (inf, why) for a shape the device refuses."""
        if same is not None and same[0] != same[1]:
            return INF, (f"LORA_XAB computes a square adapter (A D x R, B R x D); "
                         f"this weight is {same[0]} x {same[1]}")
        try:
            return op(*shape), None
        except ShapeError as exc:
            return INF, str(exc)

    # ---- Table V: attention -----------------------------------------------------------

    def attention_cost(self, contexts, gpu_tokens, q_heads, kv_heads, head_dim, page_tokens):
        """One layer's attention for a batch: request r has contexts[r] tokens, of which the
        first gpu_tokens[r] are duplicated on the GPU (P_KV = sum gpu_tokens / sum contexts).

        The GPU computes over its share; the devices over the rest, token i on device
        i mod N (section V-B), each device's share in pages of `page_tokens`, one ATTENTION
        descriptor per request, KV head and page; the GPU merges the partials (O, m, l).
        T_ATT = max(T_ATT_GPU, T_ATT_dev) + the merge. `gpu_tokens[r]` must be a multiple of
        N x page_tokens so that every device skips whole pages."""
        if not self.distributed_attention:
            return self._gpu_attention_cost(contexts, gpu_tokens, q_heads, kv_heads, head_dim)
        group = q_heads // kv_heads
        n = self.num_devices
        per_device = [0.0] * n
        partial_bytes = q_bytes = 0.0
        result = attention_result_bytes(group, head_dim)
        for (t, on_gpu), count in collections.Counter(zip(contexts, gpu_tokens, strict=True)).items():
            if not 0 <= on_gpu <= t or on_gpu % (n * page_tokens):
                raise ValueError(f"GPU share {on_gpu!r} of a {t!r}-token context must be whole pages on "
                                 f"every device (a multiple of {n} x {page_tokens}) in [0, {t}]")
            for j, pages in enumerate(device_pages(t - on_gpu, n, page_tokens)):
                for tokens in pages:
                    per_device[j] += count * kv_heads * self._attention_s(group, head_dim, tokens) * self.kv_scale
                partial_bytes += count * len(pages) * kv_heads * result
                q_bytes += count * q_heads * head_dim * FP16_BYTES if pages else 0
        gpu_total = sum(gpu_tokens)
        kv_token_bytes = 2 * kv_heads * head_dim * FP16_BYTES * self.kv_scale
        gpu_s = self.gpu.roofline_s(4 * q_heads * head_dim * gpu_total, gpu_total * kv_token_bytes)
        dev_s = max(per_device)
        link = self.link
        device_side = (link.round_trip_s + link.transfer_s(q_bytes) + dev_s + link.transfer_s(partial_bytes)
                       if dev_s else 0.0)
        merge_s = self.gpu.roofline_s(0, partial_bytes)
        return AttentionCost(gpu_s, device_side, max(gpu_s, device_side) + merge_s, q_bytes, partial_bytes,
                             gpu_total * kv_token_bytes, tuple(per_device))

    def _gpu_attention_cost(self, contexts, gpu_tokens, q_heads, kv_heads, head_dim):
        """Attention without the devices (no D): the GPU computes over every token, reading
        its share from HBM and the rest over the link (one round trip, then the bytes), the
        two streams in parallel."""
        total, on_gpu = sum(contexts), sum(gpu_tokens)
        if any(not 0 <= g <= t for t, g in zip(contexts, gpu_tokens, strict=True)):
            raise ValueError(f"GPU shares {list(gpu_tokens)!r} must be in [0, context] of {list(contexts)!r}")
        kv_token_bytes = 2 * kv_heads * head_dim * FP16_BYTES * self.kv_scale
        gpu_s = self.gpu.roofline_s(4 * q_heads * head_dim * total, on_gpu * kv_token_bytes)
        remote = (total - on_gpu) * kv_token_bytes
        link_s = self.link.round_trip_s + self.link.transfer_s(remote) if remote else 0.0
        return AttentionCost(gpu_s, link_s, max(gpu_s, link_s), 0.0, remote, on_gpu * kv_token_bytes, ())

    def attention_totals(self, contexts, gpu_tokens, q_heads, kv_heads, head_dim, page_tokens):
        """`attention_cost(contexts, row, ...).total_s` for each row of `gpu_tokens` (a 2-D
        array of integers, one row per KV share, one column per request), to the bit, in a
        few array operations over all rows at once (AttentionScan)."""
        t = np.asarray(contexts, dtype=np.int64)
        shares = np.asarray(gpu_tokens, dtype=np.int64).reshape(-1, t.size)
        unit = self.num_devices * page_tokens
        bad = (shares < 0) | (shares > t) | (shares % unit != 0)
        if bad.any():
            k, i = np.argwhere(bad)[0]
            on_gpu, ctx = int(shares[k, i]), int(t[i])
            raise ValueError(f"GPU share {on_gpu!r} of a {ctx!r}-token context must be whole pages on "
                             f"every device (a multiple of {self.num_devices} x {page_tokens}) in [0, {ctx}]")
        return AttentionScan(self, t, q_heads, kv_heads, head_dim, page_tokens).totals(shares // unit)

    def _attention_table(self, rows, head_dim, page, tail, need_page):
        """Device seconds of one ATTENTION descriptor by token count 1..page (NaN where not
        asked for yet; 0 at 0 tokens, no page), filled from the same cached timing lookups
        attention_cost makes."""
        key = (rows, head_dim, page)
        entry = self._attention_tables.get(key)
        if entry is None:
            entry = self._attention_tables[key] = [np.full(page + 1, np.nan), False]
            entry[0][0] = 0.0       # no tail page: no term
        table, complete = entry
        if not complete:
            wanted = np.flatnonzero(np.bincount(tail.ravel(), minlength=page + 1))
            wanted = wanted[wanted > 0]
            if need_page:
                wanted = np.append(wanted, page)
            for tokens in wanted[np.isnan(table[wanted])].tolist():
                table[tokens] = self._attention_s(rows, head_dim, tokens)
            entry[1] = not np.isnan(table[1:]).any()
        return table


class AttentionScan:
    """Table V for one batch under many KV shares, each given in units (a request's share
    is units x N x page_tokens tokens: whole pages on every device), as attention_cost
    computes it.

    With a share of u units, request i keeps t_i - u N P tokens on the devices: device j
    holds M_ij - u P of them (M_ij = t_i // N + (j < t_i mod N)), so its full pages are
    F0_ij - u (F0 = M // P) and its tail page, M_ij mod P, does not depend on the share.

    `totals(units)` is attention_cost's total_s to the bit: every float operation is done
    in the same order on the same operands. A device's time is the sequential sum of its
    terms, count x kv_heads x t_dev(page), group after group (the distinct (context, share)
    pairs in order of first occurrence) and page after page; here each device's terms are
    laid out in that order, one slot per (request, page), with zeros where a request has
    fewer pages or is not the first of its group, and summed by np.cumsum, which adds left
    to right (adding 0.0 to a sum of non-negative terms leaves it unchanged). Page counts,
    q and partial bytes are integers, exact in any order; the last step is
    GpuConfig.roofline_s and LinkConfig's round trip and transfer_s, elementwise.

    A sequential sum costs one dependent add per page, so `bounds(...)` gives an interval
    sure to hold each exact total without one: a device's terms sum to kv_heads t_dev(P) x
    (its full pages) + (its tail terms), up to a rounding of each term and of the sums. Any
    two ways of summing the same L non-negative terms differ by less than 2 L u of the sum
    (u = 2^-53: Higham's bound for recursive summation); the slack taken is at least 4 times
    that. The final formula is a chain of correctly rounded +, / and max, each monotone in
    its operands, so the same formula on a lower (upper) bound of the device time gives a
    lower (upper) bound of the rounded total. Whoever looks for the least total needs exact
    values only where the lower bound does not exceed the least upper bound."""

    def __init__(self, cost, contexts, q_heads, kv_heads, head_dim, page_tokens):
        t = np.asarray(contexts, dtype=np.int64)
        n, page = cost.num_devices, page_tokens
        self.t, self.n, self.unit, self.kv_heads = t, n, n * page, kv_heads
        per, extra = np.divmod(t, n)
        self.f0, tail = np.divmod(per + (np.arange(n)[:, None] < extra), page)      # device x request
        self.has_tail = tail > 0
        group = q_heads // kv_heads
        any_full = bool(self.f0.any())
        table = cost._attention_table(group, head_dim, page, tail, any_full)    # table[0] = 0: no tail
        self.t_page, self.t_tail = table[page], table[tail]
        self.page_term = kv_heads * self.t_page if any_full else 0.0           # one request's
        self.f0_sum, self.tails = self.f0.sum(axis=1), self.has_tail.sum(axis=1)     # per device
        self.tail_sum = (kv_heads * self.t_tail).sum(axis=1)                         # any order: bounds
        self.all_pages = sum(self.f0_sum.tolist()) + sum(self.tails.tolist())
        # devices holding tokens of a request that keeps all its units on the GPU (all n if fewer)
        self.caps = t // self.unit
        self.busy_at_cap = ((self.f0 > self.caps) | self.has_tail).sum(axis=0)
        self.q_request_bytes = q_heads * head_dim * FP16_BYTES
        self.partial_page_bytes = kv_heads * _result_bytes(group, head_dim)
        self.flops_per_token = 4 * q_heads * head_dim
        self.kv_token_bytes = 2 * kv_heads * head_dim * FP16_BYTES
        self.gpu, self.link = cost.gpu, cost.link
        self._distinct = None

    def q_counts(self, units):
        """Per row of `units`: the (request, device) pairs holding tokens on the device."""
        return np.where(units < self.caps, self.n, self.busy_at_cap).sum(axis=1)

    def totals(self, units):
        """The exact total_s for each row of `units` (row x request)."""
        units = np.asarray(units, dtype=np.int64).reshape(-1, self.t.size)
        rows = units.shape[0]
        if not rows:
            return []
        if self._distinct is None:
            order = np.sort(self.t)
            self._distinct = not (order[1:] == order[:-1]).any()
        full = self.f0[:, None, :] - units                  # device x row x request
        if self._distinct:
            has_tail = self.has_tail[:, None, :]
            full_term = self.page_term
            tail_term = (self.kv_heads * self.t_tail)[:, None, :, None]
        else:
            counts = _group_counts(self.t, units)           # at each group's first request, else 0
            live = counts > 0
            full = full * live
            has_tail = self.has_tail[:, None, :] & live
            weight = (counts * self.kv_heads).astype(np.float64)    # count x kv_heads, exact
            full_term = (weight * self.t_page)[..., None]
            tail_term = np.where(has_tail, weight * self.t_tail[:, None, :], 0.0)[..., None]
        slots = int((full + has_tail).max())
        if slots:
            slot = np.arange(slots)
            laid = np.where(slot < full[..., None], full_term, np.where(slot == full[..., None], tail_term, 0.0))
            per_device = np.cumsum(laid.reshape(self.n * rows, -1), axis=1)[:, -1]
            dev_s = per_device.reshape(self.n, rows).max(axis=0)
        else:
            dev_s = np.zeros(rows)
        return self._finish(dev_s, units.sum(axis=1), self.q_counts(units)).tolist()

    def bounds(self, spent, q_count):
        """(lower, upper): arrays holding the exact total of each share, given per share its
        units in all (`spent`) and its q_counts."""
        spent = np.asarray(spent, dtype=np.int64)
        full = self.f0_sum[:, None] - spent                 # device x share: full pages
        dev_s = (self.page_term * full + self.tail_sum[:, None]).max(axis=0)
        terms = int((full + self.tails[:, None]).max(initial=0))
        slack = max(1e-9, 8 * (terms + self.t.size + 8) * 2.0 ** -53)
        both = self._finish(np.concatenate((dev_s * (1 - slack), dev_s * (1 + slack))),
                            np.concatenate((spent, spent)), np.concatenate((q_count, q_count)))
        return both[:spent.size], both[spent.size:]

    def _finish(self, dev_s, spent, q_count):
        """attention_cost's last lines, elementwise over shares: the devices' time, the units
        in all, the (request, device) pairs holding tokens."""
        gpu, link, w = self.gpu, self.link, self.link.bytes_per_s
        gpu_total = spent * self.unit
        q_bytes = (q_count * self.q_request_bytes).astype(np.float64)
        partial_bytes = ((self.all_pages - self.n * spent) * self.partial_page_bytes).astype(np.float64)
        gpu_s = np.maximum((self.flops_per_token * gpu_total) / gpu.fp16_flops,
                           (gpu_total * self.kv_token_bytes) / gpu.hbm_bytes_per_s)
        device_side = np.where(dev_s != 0, link.round_trip_s + q_bytes / w + dev_s + partial_bytes / w, 0.0)
        merge_s = np.maximum(0 / gpu.fp16_flops, partial_bytes / gpu.hbm_bytes_per_s)
        return np.maximum(gpu_s, device_side) + merge_s


@functools.lru_cache(maxsize=None)
def _result_bytes(rows, head_dim):
    return attention_result_bytes(rows, head_dim)


def _group_counts(t, shares):
    """attention_cost's groups per row: the count of each distinct (context, share) pair at
    its first request, 0 at the others; None if every context is distinct (every group
    one request). Only requests whose context occurs more than once can share a group."""
    order = np.argsort(t, kind="stable")
    ts = t[order]
    same = ts[1:] == ts[:-1]
    if not same.any():
        return None
    rows, requests = shares.shape
    dup = np.zeros(requests, bool)
    dup[1:] |= same
    dup[:-1] |= same
    members = order[dup]                            # by (context, index)
    tm = ts[dup]
    new_class = np.concatenate(([True], tm[1:] != tm[:-1]))
    sub = shares[:, members]
    if (new_class[1:] | (sub[:, 1:] >= sub[:, :-1])).all():
        # shares non-decreasing along each class (the water-filling's are): a group is a run
        first = np.empty(sub.shape, bool)
        first[:, 0] = True
        first[:, 1:] = new_class[1:] | (sub[:, 1:] != sub[:, :-1])
        perm = None
    else:
        key = np.cumsum(new_class) * (int(sub.max()) + 1) + sub
        perm = np.argsort(key, axis=1, kind="stable")   # a group's first request leads it
        sorted_key = np.take_along_axis(key, perm, axis=1)
        first = np.empty(sub.shape, bool)
        first[:, 0] = True
        first[:, 1:] = sorted_key[:, 1:] != sorted_key[:, :-1]
    starts = np.flatnonzero(first.ravel())
    sizes = np.diff(np.append(starts, first.size))
    column = starts % members.size if perm is None else perm.ravel()[starts]
    counts = np.ones((rows, requests), np.int64)
    counts[:, members] = 0
    counts[starts // members.size, members[column]] = sizes
    return counts


def device_pages(tokens, n, page_tokens):
    """Per device, the token counts of its pages when `tokens` consecutive tokens are
    spread token i -> device i mod n (starting at a multiple of n), each device's share in
    pages of `page_tokens`."""
    out = []
    for j in range(n):
        mine = tokens // n + (1 if j < tokens % n else 0)
        full, tail = divmod(mine, page_tokens)
        out.append([page_tokens] * full + ([tail] if tail else []))
    return out


@dataclasses.dataclass(frozen=True)
class AttentionCost:
    gpu_s: float                # T_ATT_GPU
    device_s: float             # T_ATT_dev: the slowest device, with the q and partials over the link
    total_s: float              # T_ATT
    link_to_device: float       # q to every device holding tokens
    link_to_gpu: float          # the partials (O, m, l)
    gpu_kv_bytes: float         # the duplicated KV this layer reads on the GPU
    per_device_s: tuple


def attention_result_bytes(rows, head_dim):
    """Bytes an ATTENTION descriptor returns (O in FP32, then an anchor line per row)."""
    return result_bytes(attention_descriptor(KvBlock(0, head_dim, 1), rows))
