"""The systems' step costs (serving.systems) against references built here: PLoRA-NoCXL's
kernel launches counted by hand, S-LoRA's KV all in HBM, Pure CXL converging to the GPU's
own roofline as the link grows (and never slowing with more bandwidth or less latency),
the forced strategies' site mix from which weights are square, the link bytes Pure CXL
moves, the adapters' and KV's bytes from the model's shapes, and config validation."""
import collections
import dataclasses

import pytest

from isa import load_config as load_device_config
from isa.system import load_gpu, load_model
from serving.config import (STRATEGY_NAMES, ServingConfig, SystemConfig, load_serving_config,
                            load_system_config, system_names)
from serving.engine import device_timing, simulate
from serving.systems import Live, build_system
from serving.workload import Request, Workload

RUN = load_serving_config("default")
TIMING = device_timing(RUN.device)
GPU = load_gpu(RUN.gpu)
RANKS = (8, 16, 32, 64, 128)
OVERLAPS = ("wave", "step")        # the run's accounting of device work within a layer


def batch(n=8, base=300, adapters=len(RANKS), new=True):
    """n running requests over `adapters` adapters, contexts base + 7 i."""
    return [Live(i, i % adapters, base + 7 * i, 1000, 0.0, generated=1, new=new) for i in range(n)]


def build(system, run=RUN, ranks=RANKS):
    cfg = system if isinstance(system, SystemConfig) else load_system_config(system)
    return build_system(run, cfg, ranks, TIMING)


def recording(system):
    """The scheduler's plans of every decode step `system` takes (the step unchanged)."""
    plans = []
    step = system.scheduler.step

    def record(requests):
        plan = step(requests)
        plans.append(plan)
        return plan
    system.scheduler.step = record
    return plans


def roofline(flops, nbytes):
    return max(flops / GPU.fp16_flops, nbytes / GPU.hbm_bytes_per_s)


def dims(m):
    q, kv = m.q_heads * m.head_dim, m.kv_heads * m.head_dim
    return {"q": (m.hidden, q), "k": (m.hidden, kv), "v": (m.hidden, kv), "o": (q, m.hidden),
            "gate": (m.hidden, m.ffn), "up": (m.hidden, m.ffn), "down": (m.ffn, m.hidden)}


def base_step(m, b):
    """The base model's weight GEMMs and LM head at b sequences (dense), by hand."""
    q, kv = m.q_heads * m.head_dim, m.kv_heads * m.head_dim
    gemms = ((m.hidden, q + 2 * kv), (q, m.hidden), (m.hidden, 2 * m.ffn), (m.ffn, m.hidden))
    layer = sum(roofline(2.0 * b * i * o, 2.0 * (i * o + b * (i + o))) for i, o in gemms)
    head = roofline(2.0 * b * m.hidden * m.vocab, 2.0 * (m.hidden * m.vocab + b * (m.hidden + m.vocab)))
    return m.layers * layer + head


def kv_token_bytes(m, scale=1.0):
    return 2 * m.layers * m.kv_heads * m.head_dim * 2 * scale


# ---- every system -----------------------------------------------------------------------

@pytest.mark.parametrize("overlap", OVERLAPS)
@pytest.mark.parametrize("name", system_names())
def test_no_system_beats_reading_the_weights(name, overlap):
    m = load_model(RUN.model)
    system = build(name, RUN.with_(overlap=overlap))
    for running in (batch(1), batch(8), batch(8, new=False)):
        cost = system.decode(running)
        assert cost.seconds >= base_step(m, len(running)) * (1 - 1e-12)
        assert cost.kv_bytes == pytest.approx(sum(r.context for r in running) * kv_token_bytes(m), rel=1e-12)
        assert 0 <= cost.kv_gpu_bytes <= cost.kv_bytes
        for field in ("gemm_s", "lora_s", "attention_s", "launch_s", "link_to_device", "link_to_gpu"):
            assert getattr(cost, field) >= 0, field
    cost = system.prefill(batch(3)) if system.system.kind == "pool" else system.prefill(batch(3), [])
    assert cost.seconds > 0 and cost.kv_bytes == pytest.approx(sum(r.prompt for r in batch(3)) * kv_token_bytes(m))


def test_adapter_bytes_and_pool_capacity_from_the_shapes():
    m = load_model(RUN.model)
    want = [m.layers * sum(r * (i + o) * 2 for i, o in dims(m).values()) for r in RANKS]
    system = build("plora")
    assert system.adapter_bytes == pytest.approx(want, rel=1e-15)
    dram = load_device_config(RUN.device).dram_bytes
    assert system.kv_capacity_bytes() == pytest.approx(RUN.num_devices * dram - sum(want), rel=1e-15)


@pytest.mark.parametrize("precision,scale", [("fp16", 1.0), ("int8", 0.5), ("int4", 0.25)])
def test_kv_precision_scales_the_kv_bytes(precision, scale):
    m = load_model(RUN.model)
    running = batch(6)
    for name in ("plora", "s-lora"):
        cost = build(name, RUN.with_(kv_precision=precision)).decode(running)
        assert cost.kv_bytes == pytest.approx(sum(r.context for r in running) * kv_token_bytes(m, scale), rel=1e-12)


@pytest.mark.parametrize("name", [n for n in system_names() if load_system_config(n).kind == "pool"])
def test_overlapping_the_whole_step_never_costs_more_than_two_waves(name):
    """max(a, b) + max(c, d) >= max(a + c, b + d): a layer priced as one overlapped step is
    never longer than the same decisions priced as two waves, and never shorter than its
    GPU side alone."""
    m = load_model(RUN.model)
    wave, step = build(name, RUN.with_(overlap="wave")), build(name, RUN.with_(overlap="step"))
    for running in (batch(8), batch(8, base=301, new=False), batch(2, base=3000)):
        a, b = wave.decode(running), step.decode(running)
        assert a.mix == b.mix and a.kv_gpu_bytes == b.kv_gpu_bytes
        assert base_step(m, len(running)) * (1 - 1e-12) <= b.seconds <= a.seconds * (1 + 1e-12)
        assert (b.link_to_device, b.link_to_gpu) == (a.link_to_device, a.link_to_gpu)


# ---- PLoRA-NoCXL ------------------------------------------------------------------------

@pytest.mark.parametrize("overlap", OVERLAPS)
def test_nocxl_pays_a_kernel_launch_per_adapter_site_and_layer(overlap):
    """Same hardware, same policy, same decisions; NoCXL launches a kernel per adapter
    product on the GPU's stream: its step exceeds PLoRA's by at least the launches of the
    rounds where that stream is already the longer side (elsewhere the pool's side may hide
    some), and by no more than every launch plus one per device for the attention partials."""
    from scheduler.rounds import ROUND_OF
    m = load_model(RUN.model)
    run = RUN.with_(overlap=overlap)
    plora, nocxl = build("plora", run), build("plora-nocxl", run)
    plans = recording(plora)
    for running in (batch(8), batch(8, base=301, new=False), batch(3, base=2000, adapters=3)):
        a, b = plora.decode(running), nocxl.decode(running)
        assert a.mix == b.mix
        adapters = len({r.adapter for r in running})
        sites = adapters * len(m.projections)          # dense model: one copy per site
        assert sum(a.mix.values()) == sites
        rounds = plans[-1].rounds
        gpu_bound = {n for n, r in rounds.items() if r.gemm_s + r.gpu_s >= r.pool_s(plora.link)}
        lower = m.layers * sum(ROUND_OF[s.projection] in gpu_bound for s in plans[-1].decisions) * GPU.kernel_launch_s
        upper = m.layers * (sites + RUN.num_devices) * GPU.kernel_launch_s
        if overlap == "wave":
            assert lower * (1 - 1e-9) <= b.seconds - a.seconds
        assert 0 < b.seconds - a.seconds <= upper * (1 + 1e-9)
        assert a.launch_s == 0 and 0 < b.launch_s <= upper * (1 + 1e-9)


# ---- S-LoRA -----------------------------------------------------------------------------

def test_s_lora_keeps_all_kv_in_hbm():
    requests = tuple(Request(i, 0.0, i % 4, 50 + 13 * i, 3 + i) for i in range(10))
    workload = Workload("hand", RANKS, requests, "hand-built")
    result = simulate(RUN.with_(max_batch=4), load_system_config("s-lora"), workload, TIMING, progress=False)
    kinds = result.log.columns["kind"]
    assert "decode" in kinds and "prefill" in kinds
    assert result.log.columns["kv_gpu_bytes"] == result.log.columns["kv_bytes"]
    assert result.summary()["kv_dup_frac"] == 1.0


def test_s_lora_stages_each_adapter_once_while_it_stays_resident():
    m = load_model(RUN.model)
    system = build("s-lora")
    first = system.prefill(batch(4, adapters=2), [])
    adapter = [m.layers * sum(r * (i + o) * 2 for i, o in dims(m).values()) for r in RANKS]
    assert first.link_to_gpu == pytest.approx(adapter[0] + adapter[1], rel=1e-12)
    again = system.prefill(batch(2, adapters=2), batch(4, adapters=2))
    assert again.link_to_gpu == 0


def host_decode_reference(m, running, cpu=None, link=None):
    """S-LoRA's decode by hand (cpu None): weights, SGMV from resident factors, attention
    over HBM KV; CPU-LoRA-Offload's: the four dependent rounds of a layer on the host, each
    an exchange, a round trip, x out, the CPU's roofline, y back."""
    per_adapter = collections.Counter(r.adapter for r in running)
    d = dims(m)
    b_all = len(running)
    tokens = sum(r.context for r in running)
    attention = roofline(4.0 * m.q_heads * m.head_dim * tokens, tokens * kv_token_bytes(m) / m.layers)
    if cpu is None:
        lora = sum(roofline(2.0 * b * RANKS[a] * sum(d[p]), 2.0 * RANKS[a] * sum(d[p]) + 2.0 * b * sum(d[p]))
                   for a, b in per_adapter.items() for p in d)
        return base_step(m, b_all) + m.layers * (lora + attention), 0.0, 0.0
    rounds = to_host = back = 0.0
    for names in (("q", "k", "v"), ("o",), ("gate", "up"), ("down",)):
        x = 2.0 * b_all * d[names[0]][0]
        y = 2.0 * b_all * sum(d[n][1] for n in names)
        flops = sum(2.0 * b * RANKS[a] * sum(d[n]) for a, b in per_adapter.items() for n in names)
        nbytes = sum(2.0 * RANKS[a] * sum(d[n]) for a in per_adapter for n in names)
        rounds += (cpu.exchange_s + 2 * link.latency_s + x / link.bytes_per_s
                   + max(flops / cpu.flops, nbytes / cpu.mem_bytes_per_s) + y / link.bytes_per_s)
        to_host, back = to_host + x, back + y
    return base_step(m, b_all) + m.layers * (rounds + attention), m.layers * to_host, m.layers * back


@pytest.mark.parametrize("name", ["s-lora", "cpu-lora-offload"])
def test_host_systems_decode_by_hand(name):
    from isa.system import load_cpu, load_link
    m = load_model(RUN.model)
    cfg = load_system_config(name)
    system = build(cfg)
    cpu = load_cpu(cfg.cpu) if cfg.lora == "cpu" else None
    for running in (batch(1), batch(8), batch(5, base=3000, adapters=2)):
        want, to_host, back = host_decode_reference(m, running, cpu, load_link(cfg.link))
        cost = system.decode(running)
        assert cost.seconds == pytest.approx(want, rel=1e-12)
        assert (cost.link_to_device, cost.link_to_gpu) == (pytest.approx(to_host, rel=1e-12), pytest.approx(back, rel=1e-12))


@pytest.mark.parametrize("name", [n for n in system_names() if load_system_config(n).kind == "pool"])
def test_pool_prefill_writes_every_prompt_token_to_the_pool(name):
    m = load_model(RUN.model)
    system = build(name)
    for new in (batch(1), batch(6, base=900)):
        cost = system.prefill(new)
        kv = sum(r.prompt for r in new) * kv_token_bytes(m)
        assert cost.kv_bytes == pytest.approx(kv, rel=1e-12) and cost.link_to_device == pytest.approx(kv, rel=1e-12)
        assert cost.kv_gpu_bytes == 0 and set(cost.mix) <= {"E1", "E2"}


# ---- Pure CXL: the link ------------------------------------------------------------------

def pure_cxl_gpu_only(m, running):
    """Pure CXL's step with a free link: the weights, every adapter's product from x in HBM
    (factors streamed over the link), attention's FLOPs over every KV token."""
    per_adapter = collections.Counter(r.adapter for r in running)
    lora = sum(roofline(2.0 * b * RANKS[a] * (i + o), 2.0 * b * (i + o))
               for a, b in per_adapter.items() for i, o in dims(m).values())
    tokens = sum(r.context for r in running)
    attention = 4.0 * m.q_heads * m.head_dim * tokens / GPU.fp16_flops
    return base_step(m, len(running)) + m.layers * (lora + attention)


@pytest.mark.parametrize("overlap", OVERLAPS)
def test_pure_cxl_with_a_free_link_is_the_gpu_roofline(overlap):
    m = load_model(RUN.model)
    running = batch(8)
    ref = pure_cxl_gpu_only(m, running)
    run = RUN.with_(overlap=overlap)
    free = build("pure-cxl", run.with_(link_bytes_per_s=1e15, link_latency_s=0.0)).decode(running)
    assert ref * (1 - 1e-9) <= free.seconds <= ref * 1.001
    # at 128 GB/s with no GPU memory for KV pages, the KV crosses the link and the step is far from it
    system = build("pure-cxl", run)
    system.scheduler.budget = 0.0
    slow = system.decode(running)
    assert slow.kv_gpu_bytes == 0 and slow.seconds > 2 * ref


@pytest.mark.parametrize("overlap", OVERLAPS)
@pytest.mark.parametrize("name", ["pure-cxl", "plora", "ns", "grace-hopper"])
def test_more_bandwidth_never_slows_a_step(name, overlap):
    """The same decisions priced on a faster link are never slower, to the rounding. Each
    system's policy is held on one link (as PLoRA's stays on CXL 3.1, section VIII): a policy
    that re-ranks with the link is greedy (each site by what it adds given the sites before
    it), and a faster link may lead it to a mix a little slower than the slower link's."""
    running = batch(8)
    steps = [build(pinned(name), RUN.with_(link_bytes_per_s=gb * 1e9, overlap=overlap)).decode(running).seconds
             for gb in (8, 16, 32, 64, 128, 256, 450, 900, 1800, 1e6)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(steps, steps[1:])), steps
    assert steps[-1] < steps[0]


def pinned(name):
    """The system with its policy held on its own link (the run's link varies)."""
    system = load_system_config(name)
    return dataclasses.replace(system, policy_link=system.policy_link or system.link or RUN.link)


@pytest.mark.parametrize("overlap", OVERLAPS)
@pytest.mark.parametrize("name", ["pure-cxl", "plora"])
def test_more_latency_never_speeds_a_step(name, overlap):
    running = batch(8)
    steps = [build(pinned(name), RUN.with_(link_latency_s=ns * 1e-9, overlap=overlap)).decode(running).seconds
             for ns in (0, 50, 100, 200, 500, 1000, 2000)]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(steps, steps[1:])), steps
    if overlap == "wave":       # two round trips a layer on the critical path ("step" may hide them)
        assert steps[-1] > steps[0]


def test_pure_cxl_throughput_grows_with_the_link():
    requests = tuple(Request(i, 0.0, i % 5, 100 + 40 * i, 12) for i in range(8))
    workload = Workload("hand", RANKS, requests, "hand-built")
    tok_s = [simulate(RUN.with_(link_bytes_per_s=gb * 1e9), load_system_config("pure-cxl"), workload, TIMING,
                      progress=False).summary()["decode_tok_s"] for gb in (16, 128, 900)]
    assert tok_s[0] < tok_s[1] < tok_s[2]


@pytest.mark.parametrize("name", ["pure-cxl", "ns"])
def test_gpu_side_attention_moves_the_kv_it_does_not_hold(name):
    """Without distributed attention (and no NDP for Pure CXL) the link carries, per step,
    the KV the GPU does not hold plus the factors of each E2 site (factors once per layer)
    and the factors the step loads into GPU memory (for its E1 sites, or pre-cached)."""
    m = load_model(RUN.model)
    system = build(name, RUN.with_(link_bytes_per_s=32e9))
    plans = recording(system)
    for running in (batch(8), batch(8, base=301, new=False)):
        cost = system.decode(running)
        plan = plans[-1]
        assert cost.kv_gpu_bytes == pytest.approx(sum(plan.kv_tokens.values()) * kv_token_bytes(m), rel=1e-12)
        e2 = sum(RANKS[s.adapter] * sum(dims(m)[s.projection]) * 2
                 for s, d in plan.decisions.items() if d.chosen.strategy.name == "E2")
        loaded = sum(n for _, _, n in plan.loads)
        if name == "pure-cxl":
            assert set(cost.mix) <= {"E1", "E2"}
            assert cost.link_to_device == 0
            assert cost.link_to_gpu == pytest.approx(cost.kv_bytes - cost.kv_gpu_bytes + m.layers * e2 + loaded,
                                                     rel=1e-12)
        else:
            assert cost.link_to_gpu >= (cost.kv_bytes - cost.kv_gpu_bytes + m.layers * e2 + loaded) * (1 - 1e-12)


# ---- forced strategies ------------------------------------------------------------------

@pytest.mark.parametrize("model", ["llama2-7b", "llama3-8b"])
@pytest.mark.parametrize("name,forced", [("nd-e3", "E3"), ("n-e3", "E3"), ("nd-e4", "E4"), ("n-e4", "E4")])
def test_forced_strategy_sites(model, name, forced):
    """E3 (LORA_XAB: A D x R, B R x D) on exactly the square weights, E4 everywhere else;
    E4 forced: E4 everywhere."""
    m = load_model(model)
    system = build(name, RUN.with_(model=model))
    plans = recording(system)
    running = batch(8)
    cost = system.decode(running)
    adapters = len({r.adapter for r in running})
    square = sum(1 for i, o in dims(m).values() if i == o)
    assert square == (4 if model == "llama2-7b" else 2)        # MHA: Q, K, V, O; GQA: Q, O
    want = {"E3": adapters * square, "E4": adapters * (7 - square)} if forced == "E3" else {"E4": adapters * 7}
    assert dict(cost.mix) == want
    for site, decision in plans[0].decisions.items():
        d_in, d_out = dims(m)[site.projection]
        assert decision.chosen.strategy.name == ("E3" if forced == "E3" and d_in == d_out else "E4")


def test_forced_strategy_summary_shares():
    requests = tuple(Request(i, 0.0, i % 5, 60 + 9 * i, 6) for i in range(8))
    workload = Workload("hand", RANKS, requests, "hand-built")
    for name, shares in (("nd-e3", {"E3": 4 / 7, "E4": 3 / 7}), ("nd-e4", {"E4": 1.0})):
        s = simulate(RUN, load_system_config(name), workload, TIMING, progress=False).summary()
        assert {k: s[f"share_{k}"] for k in STRATEGY_NAMES} == pytest.approx(
            {k: shares.get(k, 0.0) for k in STRATEGY_NAMES}, rel=1e-12)


def test_pure_cxl_and_grace_hopper_never_use_the_devices():
    for name in ("pure-cxl", "grace-hopper"):
        system = build(name)
        for running in (batch(8), batch(8, base=301, new=False)):
            assert set(system.decode(running).mix) <= {"E1", "E2"}


# ---- config validation ------------------------------------------------------------------

@pytest.mark.parametrize("changes,field", [
    (dict(kind="gpu"), "kind"), (dict(strategies=()), "strategies"), (dict(strategies=["E1", "E5"]), "strategies"),
    (dict(forced_strategy="E1"), "forced_strategy"), (dict(lora="npu"), "lora"), (dict(lora="cpu"), "cpu"),
    (dict(pool_bytes=0), "pool_bytes"), (dict(pool_bytes=-1.0), "pool_bytes")])
def test_bad_system_config_names_the_field(changes, field):
    with pytest.raises(ValueError, match=rf"system config 'x': .*\b{field}\b"):
        SystemConfig(name="x", **changes)


@pytest.mark.parametrize("changes,field", [
    (dict(num_devices=0), "num_devices"), (dict(num_devices=2.0), "num_devices"), (dict(max_batch=True), "max_batch"),
    (dict(max_batch=0), "max_batch"), (dict(max_prefill_tokens=-5), "max_prefill_tokens"),
    (dict(kv_precision="fp8"), "kv_precision"), (dict(link_bytes_per_s=0), "link_bytes_per_s"),
    (dict(link_latency_s=-1e-9), "link_latency_s"), (dict(requests=0), "requests"), (dict(requests=1.5), "requests")])
def test_bad_serving_config_names_the_field(changes, field):
    with pytest.raises(ValueError, match=rf"serving config 'default': {field} "):
        ServingConfig(**changes)
    with pytest.raises(ValueError, match=rf"{field} "):
        load_serving_config("default", **changes)


def test_unknown_fields_are_named():
    with pytest.raises(ValueError, match=r"unknown fields \['bogus'\]"):
        load_serving_config("default", bogus=1)
    with pytest.raises(ValueError, match=r"unknown fields \['colour'\]"):
        load_system_config("plora", colour="red")


def test_every_system_config_loads_with_its_described_switches():
    names = system_names()
    assert {"plora", "plora-nocxl", "pure-cxl", "grace-hopper", "s-lora", "cpu-lora-offload",
            "ns", "nd-e3", "nd-e4", "n-e3", "n-e4"} <= set(names)
    for name in names:
        cfg = load_system_config(name)
        assert cfg.name == name and cfg.description
    assert load_system_config("plora-nocxl").per_adapter_launch and not load_system_config("plora").per_adapter_launch
    assert load_system_config("s-lora").kind == "host" and load_system_config("cpu-lora-offload").lora == "cpu"
