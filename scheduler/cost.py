"""PLoRA's cost model (seed 000, section VI-B; Tables IV and V, derived in docs/scheduler.md).

Three sources of time, and no other:
- the GPU: a roofline of its config (peak FP16 FLOPS, HBM bandwidth; kernel launches are
  charged per step, not per adapter, since one SGMV-style kernel serves every adapter);
- the link: its two numbers, W_link and L_link (round trip), from the link config;
- the devices: the cycle-approximate model of sim/, through `scheduler.device_timing`.

`lora_cost` gives one injected weight's cost under one strategy (Table IV); `attention_cost`
one layer's attention for a batch (Table V). Everything is per layer and per injected
weight; `site_cost` multiplies up to a whole adapter's use of one projection.
"""
import collections
import dataclasses
import enum
import functools

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
    def __init__(self, gpu, link, timing, num_devices):
        if num_devices < 1:
            raise ValueError(f"num_devices must be >= 1, got {num_devices!r}")
        self.gpu, self.link, self.timing, self.num_devices = gpu, link, timing, num_devices
        # the scheduler asks for the same few shapes every step
        self._attention_s = functools.lru_cache(maxsize=1 << 14)(timing.attention)
        self.lora_cost = functools.lru_cache(maxsize=1 << 16)(self.lora_cost)

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
                    per_device[j] += count * kv_heads * self._attention_s(group, head_dim, tokens)
                partial_bytes += count * len(pages) * kv_heads * result
                q_bytes += count * q_heads * head_dim * FP16_BYTES if pages else 0
        gpu_total = sum(gpu_tokens)
        kv_token_bytes = 2 * kv_heads * head_dim * FP16_BYTES
        gpu_s = self.gpu.roofline_s(4 * q_heads * head_dim * gpu_total, gpu_total * kv_token_bytes)
        dev_s = max(per_device)
        link = self.link
        device_side = (link.round_trip_s + link.transfer_s(q_bytes) + dev_s + link.transfer_s(partial_bytes)
                       if dev_s else 0.0)
        merge_s = self.gpu.roofline_s(0, partial_bytes)
        return AttentionCost(gpu_s, device_side, max(gpu_s, device_side) + merge_s, q_bytes, partial_bytes,
                             gpu_total * kv_token_bytes, tuple(per_device))


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
