"""The base model on the GPU, operator by operator, by roofline (the hardware model's GPU half).

Per layer the weight GEMMs (Q/K/V, the output projection, the FFN's gate/up and down) each
take max(FLOPs / peak, bytes / HBM bandwidth); the weights are resident in HBM and read once
per step whatever the batch, which is what makes decode memory-bound (seed 000, section
VII-F: 'GPU compute takes 0.45 ms against 4.18 ms to read weights from HBM'). Activations
in and out of each GEMM are counted too. The LM head runs on one token per sequence.

For a mixture of experts, a step reads every expert that at least one token is routed to:
with uniform routing of `active_experts` of `experts` per token, the expected count is
E (1 - (1 - k/E)^tokens).

Attention over the KV cache is not here: where the KV lives decides it (serving.systems).
Prefill attention (the prompt attending to itself) is, since it never leaves the GPU.

With a `tiering` (serving/tiering.py) a share of every weight matrix lives in the device
pool and the GEMM reads it over the link while it reads the rest from HBM; its memory time
is the tiering's, and `second_bytes` counts what crossed the link.
"""
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Protocol

from isa.system import FP16_BYTES, GpuConfig, ModelConfig


class Tiering(Protocol):
    """What the GPU model and the serving simulator ask of a run's `tiering`
    (serving/tiering.py)."""
    @property
    def weight_share(self) -> float: ...
    @property
    def kv_share(self) -> float: ...
    def memory_s(self, hbm_bytes: float, pool_bytes: float) -> float: ...


@dataclasses.dataclass(frozen=True)
class GemmCost:
    seconds: float
    flops: float
    hbm_bytes: float
    second_bytes: float = 0.0       # weights read from the pool over the link (tiering)


def experts_touched(model: ModelConfig, tokens: float) -> float:
    """Expected distinct experts a step reads for `tokens` tokens (uniform routing)."""
    if model.experts == 1:
        return 1.0
    e, k = model.experts, model.active_experts
    return e * (1 - (1 - k / e) ** tokens)


class GpuModel:
    """Times of the base model's operators on one GPU config for one model config."""

    def __init__(self, gpu: GpuConfig, model: ModelConfig, tiering: Tiering | None = None) -> None:
        self.gpu, self.model, self.tiering = gpu, model, tiering
        m = model
        q, kv = m.q_heads * m.head_dim, m.kv_heads * m.head_dim
        # (name, d_in, d_out, per-expert?) of the weight GEMMs of one layer
        self.gemms = (("qkv", m.hidden, q + 2 * kv, False), ("o", q, m.hidden, False),
                      ("gate_up", m.hidden, 2 * m.ffn, True), ("down", m.ffn, m.hidden, True))
        self.layer_s: Callable[[int], float] = functools.lru_cache(maxsize=4096)(self._layer_s)

    def gemm(self, tokens: float, d_in: int, d_out: int, copies: float = 1.0, active: int = 1) -> GemmCost:
        """A weight GEMM over `tokens` rows; `copies` weight matrices read (experts touched),
        each token through `active` of them."""
        flops = 2 * tokens * d_in * d_out * active
        nbytes = (copies * d_in * d_out + tokens * active * (d_in + d_out)) * FP16_BYTES
        if self.tiering is None or not self.tiering.weight_share:
            return GemmCost(self.gpu.roofline_s(flops, nbytes), flops, nbytes)
        second = self.tiering.weight_share * copies * d_in * d_out * FP16_BYTES
        memory = self.tiering.memory_s(nbytes - second, second)
        return GemmCost(max(flops / self.gpu.fp16_flops, memory), flops, nbytes - second, second)

    def _layer_s(self, tokens: int) -> float:
        """One layer's weight GEMMs for `tokens` tokens (decode rows plus prefill tokens)."""
        return sum(c.seconds for c in self.layer_costs(tokens))

    def layer_costs(self, tokens: int) -> list[GemmCost]:
        m = self.model
        touched = experts_touched(m, tokens)
        return [self.gemm(tokens, d_in, d_out, touched, m.active_experts) if per_expert
                else self.gemm(tokens, d_in, d_out) for _, d_in, d_out, per_expert in self.gemms]

    def layer_second_bytes(self, tokens: int) -> float:
        """Bytes one layer's GEMMs read from the pool over the link (0 without a tiering)."""
        return sum(c.second_bytes for c in self.layer_costs(tokens)) if self.tiering else 0.0

    def head_s(self, sequences: int) -> float:
        """The LM head over one token per sequence (the embedding lookup reads only rows)."""
        return self.gemm(sequences, self.model.hidden, self.model.vocab).seconds

    def weights_floor_s(self) -> float:
        """The HBM floor of a dense model's decode step: every layer's weights and the LM head
        read once. For a mixture of experts it counts every expert, more than a small batch
        reads (layer_s counts the experts its tokens touch)."""
        m = self.model
        per_layer = sum(d_in * d_out * (m.experts if e else 1) for _, d_in, d_out, e in self.gemms)
        return (m.layers * per_layer + m.hidden * m.vocab) * FP16_BYTES / self.gpu.hbm_bytes_per_s

    def prefill_attention_s(self, prompts: Sequence[int]) -> float:
        """One layer's causal self-attention over each prompt (FLOPs: 4 d_head H t^2 / 2; the
        prompt's K and V written once)."""
        m = self.model
        flops = sum(4 * m.q_heads * m.head_dim * t * t / 2 for t in prompts)
        nbytes = sum(prompts) * 2 * m.kv_heads * m.head_dim * FP16_BYTES
        return self.gpu.roofline_s(flops, nbytes)

    def gpu_attention_s(self, tokens: float, kv_bytes_per_token_layer: float) -> float:
        """One layer's decode attention of one query per sequence over `tokens` KV tokens in
        HBM."""
        m = self.model
        return self.gpu.roofline_s(4 * m.q_heads * m.head_dim * tokens, tokens * kv_bytes_per_token_layer)
