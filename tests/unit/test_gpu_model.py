"""The base model's roofline (serving.gpu_model) against references written out here in
float64: each weight GEMM's FLOPs and bytes from the model's published shapes, the HBM floor
against the released parameter counts, the expected experts a step touches against its
closed form and a Monte Carlo of uniform top-k routing, and prefill attention's t^2."""
import math

import numpy as np
import pytest

from isa.system import load_gpu, load_model
from scheduler.gpu_model import GpuModel, experts_touched

GPU = load_gpu("h100")
MODELS = ("tiny", "llama2-7b", "llama2-13b", "llama3-8b", "qwen3-30b-a3b")


def roofline(flops, nbytes):
    return max(flops / GPU.fp16_flops, nbytes / GPU.hbm_bytes_per_s)


def shapes(m):
    """(d_in, d_out, per-expert?) of one layer's weight GEMMs, from the model's shapes."""
    q, kv = m.q_heads * m.head_dim, m.kv_heads * m.head_dim
    return ((m.hidden, q + 2 * kv, False), (q, m.hidden, False),
            (m.hidden, 2 * m.ffn, True), (m.ffn, m.hidden, True))


def touched(m, tokens):
    if m.experts == 1:
        return 1.0
    return m.experts * (1 - (1 - m.active_experts / m.experts) ** tokens)


def layer_reference(m, tokens):
    """One layer's weight GEMMs by hand: each max(FLOPs / peak, bytes / HBM bandwidth)."""
    total = 0.0
    for d_in, d_out, per_expert in shapes(m):
        k = m.active_experts if per_expert else 1
        copies = touched(m, tokens) if per_expert else 1.0
        flops = 2.0 * tokens * d_in * d_out * k
        nbytes = 2.0 * (copies * d_in * d_out + tokens * k * (d_in + d_out))
        total += roofline(flops, nbytes)
    return total


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("tokens", [1, 7, 32, 300, 4096])
def test_layer_is_the_sum_of_four_gemm_rooflines(name, tokens):
    m = load_model(name)
    assert GpuModel(GPU, m).layer_s(tokens) == pytest.approx(layer_reference(m, tokens), rel=1e-12)


@pytest.mark.parametrize("name", ["tiny", "llama2-7b", "llama3-8b"])
def test_lm_head_is_one_gemm_per_sequence(name):
    m = load_model(name)
    for seqs in (1, 32, 1000):
        want = roofline(2.0 * seqs * m.hidden * m.vocab, 2.0 * (m.hidden * m.vocab + seqs * (m.hidden + m.vocab)))
        assert GpuModel(GPU, m).head_s(seqs) == pytest.approx(want, rel=1e-12)


def test_large_batches_turn_compute_bound():
    """Past the ridge point (peak / bandwidth ~ 295 FLOP/byte) every dense GEMM is bound by
    its FLOPs: the layer then costs exactly 2 t (sum of d_in d_out) / peak."""
    m = load_model("llama2-7b")
    tokens = 8192
    flops = sum(2.0 * tokens * d_in * d_out for d_in, d_out, _ in shapes(m))
    assert GpuModel(GPU, m).layer_s(tokens) == pytest.approx(flops / GPU.fp16_flops, rel=1e-12)


@pytest.mark.parametrize("name", ["llama2-7b", "llama2-13b", "llama3-8b"])
def test_decode_at_batch_one_is_the_hbm_floor(name):
    m = load_model(name)
    g = GpuModel(GPU, m)
    for d_in, d_out, _ in shapes(m):
        cost = g.gemm(1, d_in, d_out)
        assert cost.flops / GPU.fp16_flops < cost.hbm_bytes / GPU.hbm_bytes_per_s   # memory bound
    per_layer = sum(d_in * d_out for d_in, d_out, _ in shapes(m))
    floor = (m.layers * per_layer + m.hidden * m.vocab) * 2 / GPU.hbm_bytes_per_s
    assert g.weights_floor_s() == pytest.approx(floor, rel=1e-12)
    # one step at batch 1 reads the weights once, plus a few activations
    step = m.layers * g.layer_s(1) + g.head_s(1)
    assert floor <= step <= floor * 1.001


@pytest.mark.parametrize("name", ["llama2-7b", "llama2-13b", "llama3-8b", "qwen3-30b-a3b"])
def test_weights_floor_reads_the_published_parameters(name):
    """Everything but the embedding table (a lookup reads rows) and the norms is read once:
    the floor's bytes are the released parameter count less vocab x hidden, within 0.5 %."""
    m = load_model(name)
    floor_bytes = GpuModel(GPU, m).weights_floor_s() * GPU.hbm_bytes_per_s
    assert floor_bytes / 2 == pytest.approx(m.params - m.vocab * m.hidden, rel=5e-3)


def test_h100_7b_floor_is_the_papers_order():
    """Seed 000 VII-F: 'GPU compute takes 0.45 ms against 4.18 ms to read weights from HBM'
    at batch 32: the 7B floor is 2 bytes x ~6.6 G parameters / 3350 GB/s ~ 3.94 ms."""
    g = GpuModel(GPU, load_model("llama2-7b"))
    assert 3.9e-3 < g.weights_floor_s() < 4.0e-3
    flops = 2 * 32 * 6.6e9
    assert flops / GPU.fp16_flops == pytest.approx(0.43e-3, rel=0.05)


# ---- mixture of experts -----------------------------------------------------------------

def test_experts_touched_closed_form_and_limits():
    m = load_model("qwen3-30b-a3b")
    e, k = m.experts, m.active_experts
    assert experts_touched(m, 0) == 0.0
    assert experts_touched(m, 1) == pytest.approx(k, rel=1e-15)
    assert experts_touched(m, 2) == pytest.approx(2 * k - k * k / e, rel=1e-12)   # inclusion-exclusion
    assert experts_touched(m, 100_000) == pytest.approx(e, rel=1e-12)
    values = [experts_touched(m, t) for t in range(0, 200)]
    assert all(b > a for a, b in zip(values, values[1:])) and values[-1] < e
    assert experts_touched(load_model("llama2-7b"), 32) == 1.0


@pytest.mark.parametrize("tokens", [1, 3, 16, 40])
def test_experts_touched_matches_monte_carlo_routing(tokens):
    """Each token routed to k distinct experts of E uniformly at random; the mean count of
    distinct experts over many steps agrees with experts_touched within 5 standard errors."""
    m = load_model("qwen3-30b-a3b")
    e, k = m.experts, m.active_experts
    rng = np.random.default_rng(1234 + tokens)
    trials = 2000
    picks = np.argpartition(rng.random((trials, tokens, e)), k, axis=2)[:, :, :k]   # k distinct per token
    hit = np.zeros((trials, e), bool)
    np.put_along_axis(hit, picks.reshape(trials, -1), True, axis=1)
    counts = hit.sum(axis=1)
    se = counts.std(ddof=1) / math.sqrt(trials)
    assert abs(counts.mean() - experts_touched(m, tokens)) <= 5 * se + 1e-9


def test_moe_layer_reads_only_touched_experts():
    m = load_model("qwen3-30b-a3b")
    g = GpuModel(GPU, m)
    # one token: 8 experts' FFN weights read, not 128 (plus the activations, a few kB)
    d = m.hidden
    q, kv = m.q_heads * m.head_dim, m.kv_heads * m.head_dim
    bytes_1 = 2.0 * (d * (q + 2 * kv) + q * d + 8 * 3 * d * m.ffn)
    assert g.layer_s(1) == pytest.approx(bytes_1 / GPU.hbm_bytes_per_s, rel=3e-3)
    # a decode batch reads more experts than one token, never more than all of them
    per_layer_all = 2.0 * (d * (q + 2 * kv) + q * d + m.experts * 3 * d * m.ffn)
    assert g.layer_s(1) < g.layer_s(32) < per_layer_all / GPU.hbm_bytes_per_s * 1.01


# ---- attention --------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["tiny", "llama2-7b", "llama3-8b"])
def test_prefill_attention_by_hand(name):
    m = load_model(name)
    g = GpuModel(GPU, m)
    for prompts in ([1], [17, 300], [512] * 4, [4096, 100, 2000]):
        flops = sum(2.0 * m.q_heads * m.head_dim * t * t for t in prompts)
        nbytes = sum(prompts) * 2.0 * m.kv_heads * m.head_dim * 2
        assert g.prefill_attention_s(prompts) == pytest.approx(roofline(flops, nbytes), rel=1e-12)


def test_prefill_attention_is_quadratic_in_the_prompt():
    g = GpuModel(GPU, load_model("llama2-7b"))
    for t in (4096, 8192):          # compute bound here: doubling the prompt quadruples the time
        assert g.prefill_attention_s([2 * t]) / g.prefill_attention_s([t]) == pytest.approx(4.0, rel=1e-12)
    # two prompts of t cost half one prompt of 2t (causal attention within each prompt only)
    assert g.prefill_attention_s([4096, 4096]) == pytest.approx(g.prefill_attention_s([8192]) / 2, rel=1e-12)


@pytest.mark.parametrize("name", ["llama2-7b", "llama3-8b"])
def test_decode_attention_over_hbm_kv_is_memory_bound(name):
    m = load_model(name)
    g = GpuModel(GPU, m)
    per_token_layer = 2.0 * m.kv_heads * m.head_dim * 2
    for tokens in (1, 1000, 123_456):
        want = roofline(4.0 * m.q_heads * m.head_dim * tokens, tokens * per_token_layer)
        assert g.gpu_attention_s(tokens, per_token_layer) == pytest.approx(want, rel=1e-12)
        assert want == pytest.approx(tokens * per_token_layer / GPU.hbm_bytes_per_s, rel=1e-12)
