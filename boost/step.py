"""A decode step of a dense model under each policy, kernel by kernel (Table 4 of seed 002).

Per layer the four weight GEMMs (QKV, O, the fused gate/up, down) and paged attention, then
the LM head; weights FP8 (one byte), KV FP8. Weights are allocated tensor after tensor in
that order, each placed by the policy (PAM restarts MPP per tensor and sizes superpages to
the GEMM's per-CTA footprint; weighted interleave continues its stripe; BAPP-R draws). The
KV: under BOOST a DSR pool (LPP, block types); under the static policies the per-layer KV
tensors of vLLM's layout ([blocks][K, V][tokens][heads][dim]) placed by the policy, with the
batch's blocks at random places in the pool (section 3.3: 'the churn makes the mapping from
virtual pages to the active wave near-random over time'). Compute is left out: at decode
batch sizes the GEMMs and attention are bound by memory (docs/boost.md).
"""
import dataclasses
from collections.abc import Callable, Hashable, Mapping

import numpy as np

from isa.system import ModelConfig

from .config import Machine
from .dsr import DsrPool, KvShape
from .kernels import Kernel, attention_kernel, gemm_kernel
from .pages import Pam, Placement
from .waves import KernelTime, WaveModel

Run = Callable[[Kernel, Mapping[str, Placement], Hashable | None], None]   # DecodeStep.time's tally

STATIC = ("hbm", "boost", "bapp-r", "weighted", "proportional")


@dataclasses.dataclass
class StepTime:
    policy: str
    seconds: float
    by_kernel: dict[str, float]     # name -> seconds (summed over layers)
    hbm_bytes: float
    second_bytes: float

    def kernel_s(self, name: str) -> float:
        return self.by_kernel[name]


def weight_gemms(model: ModelConfig) -> tuple[tuple[str, int, int], ...]:
    m = model
    q, kv = m.q_heads * m.head_dim, m.kv_heads * m.head_dim
    return (("qkv", m.hidden, q + 2 * kv), ("o", q, m.hidden), ("up", m.hidden, 2 * m.ffn), ("down", m.ffn, m.hidden))


class DecodeStep:
    """The kernels of one model's decode step at one batch and context, built once."""

    def __init__(self, machine: Machine, model: ModelConfig, batch: int, context: int, elem_bytes: int = 1,
                 block_tokens: int = 16, seed: int = 0) -> None:
        if batch < 1 or context < 1:
            raise ValueError(f"batch and context must be >= 1, got {batch!r}, {context!r}")
        self.machine, self.model, self.batch, self.context = machine, model, batch, context
        self.wave = WaveModel(machine)
        self.eb, self.block_tokens, self.seed = elem_bytes, block_tokens, seed
        self.gemms = {name: gemm_kernel(machine, name, d_in, d_out, elem_bytes)
                      for name, d_in, d_out in weight_gemms(model)}
        self.head = gemm_kernel(machine, "lm_head", model.hidden, model.vocab, elem_bytes)
        self.shape = KvShape(model.layers, model.kv_heads, model.head_dim, block_tokens, elem_bytes)
        self.blocks_per_request = -(-context // block_tokens)

    def weight_bytes(self) -> int:
        m = self.model
        return (m.layers * sum(d_in * d_out for _, d_in, d_out in weight_gemms(m)) + m.hidden * m.vocab) * self.eb

    def kv_bytes(self) -> int:
        return self.batch * self.blocks_per_request * self.shape.block_bytes

    def time(self, policy: str, rng: np.random.Generator | None = None) -> StepTime:
        if policy not in STATIC:
            raise ValueError(f"policy must be one of {STATIC}, got {policy!r}")
        m, mach = self.model, self.machine
        rng = rng if rng is not None else np.random.default_rng(self.seed)
        pam = Pam(policy, mach.placement_modulus, mach.page_bytes, rng, alpha=mach.alpha)
        by = dict.fromkeys([*self.gemms, "attention", "lm_head"], 0.0)
        hbm = second = 0.0
        memo: dict[Hashable, KernelTime] = {}

        def run(kernel: Kernel, placements: Mapping[str, Placement], key: Hashable | None) -> None:
            nonlocal hbm, second
            r = memo.get(key) if key is not None else None
            if r is None:
                r = self.wave.time(kernel, placements)
                if key is not None:
                    memo[key] = r
            by[kernel.name if kernel.name in by else "attention"] += r.seconds
            hbm += r.hbm_bytes
            second += r.second_bytes
        for _ in range(m.layers):
            for name, k in self.gemms.items():
                p = pam.place(k.bytes_of("w"), k.footprints["w"])
                run(k, {"w": p}, (name, p.tiers.tobytes()))
        p = pam.place(self.head.bytes_of("w"), self.head.footprints["w"])
        run(self.head, {"w": p}, None)
        self._attention(policy, pam, rng, run)
        return StepTime(policy, sum(by.values()), by, hbm, second)

    def _attention(self, policy: str, pam: Pam, rng: np.random.Generator, run: Run) -> KernelTime | None:
        m, s, n = self.model, self.shape, self.blocks_per_request
        if policy == "boost":
            pool = DsrPool(4 * self.batch * n, s, self.machine.placement_modulus, self.machine.page_bytes)
            for _ in range(n):              # the batch's blocks, fulfilled as the contexts grow
                for r in range(self.batch):
                    pool.allocate(r)
            tables = [pool.blocks[r] for r in range(self.batch)]
            placement = pool.placement()
            k = attention_kernel(self.machine, "attention", tables, m.kv_heads,
                                 lambda b, h: pool.segment(b, h), s.head_layer_bytes, self.block_tokens)
            t = self.wave.time(k, {"kv": placement})
            for _ in range(m.layers):       # every layer's chunk lies in its head's tier
                run(k, {"kv": placement}, ("attention", 0))
            return t
        # static policies: a per-layer tensor of vLLM's layout, the blocks at random places
        pool_blocks = 4 * self.batch * n
        layer_block = s.head_layer_bytes * m.kv_heads
        perm = rng.permutation(pool_blocks)[: self.batch * n]
        rows = [perm[r * n:(r + 1) * n] for r in range(self.batch)]
        k = attention_kernel(self.machine, "attention", rows, m.kv_heads,
                             lambda b, h: b * layer_block + h * (s.head_dim * self.eb), s.head_layer_bytes,
                             self.block_tokens)
        # a head's slice of a block is strided inside the block, which one page holds: its tier is the block's
        for _ in range(m.layers):
            p = pam.place(pool_blocks * layer_block)
            run(k, {"kv": p}, ("attention", p.tiers.tobytes()))
        return None

    def prefetch(self, hbm_step: StepTime, every: int | None = None) -> tuple[float, int]:
        """vLLM's prefetching: one of every `every` layers' weights (K = the modulus, section
        5.1: 'we use K=12') lives on the second tier and is copied into HBM before use."""
        every = every or self.machine.placement_modulus
        m = self.model
        offloaded = (m.layers // every) * sum(d_in * d_out for _, d_in, d_out in weight_gemms(m)) * self.eb
        return self.wave.prefetch_s(hbm_step.seconds, offloaded), offloaded

    def uvm(self, hbm_step: StepTime, capacity_bytes: float) -> float:
        return self.wave.uvm_s(hbm_step.seconds, self.weight_bytes() + self.kv_bytes(), capacity_bytes)
