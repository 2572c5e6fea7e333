"""The systems a serving run compares, as cost models of one iteration (prefill or decode).

Decode is layer-sequential, and each layer runs in the five dependent rounds of
scheduler.rounds (the run's `overlap` "wave"): the LoRA products of Q/K/V, attention, the
output projection's, gate/up's and down's, each round the longer of the GPU's stream (its
base GEMM, its share of the LoRA products and of attention) and the pool's side (the link
out, each device's queue back to back, the link back), then the GPU's work on the pool's
results (E4's m B, the attention merge). The scheduler decides the rounds' contents; the
system prices them with the run's link and adds what the system itself costs (PLoRA-NoCXL's
kernel launches, a tiering's weights over the link). A step is `layers` of its rounds plus
the LM head. With `overlap` "step", the paper's accounting ('the charge hides under the
base-model step', section VIII, Finding 4), a layer is the longer of the GPU's stream and
the pool's side summed over its rounds: what a pipeline of two sub-batches would approach.
The devices' time is the cycle model's, through the scheduler's timing tables (the periods
of a back-to-back stream); the GPU's the roofline of `scheduler.gpu_model`.

`PoolSystem` serves PLoRA, its ablations, Pure CXL, Grace-Hopper and PLoRA-NoCXL: the host
scheduler runs every decode step and decides each adapter's strategy and the KV duplicates;
the system prices what it decided with the run's link (which PLoRA's policy may not assume,
section VIII: 'its selection policy stays tuned for 128 GB/s'). `HostSystem` serves the
adapters-in-host-DRAM baselines (S-LoRA staging over PCIe, CPU-LoRA-Offload) with the KV
cache in HBM only.
"""
import collections
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from isa import load_config as load_device_config
from isa.system import FP16_BYTES, LinkConfig, load_cpu, load_gpu, load_link, load_model
from scheduler.config import load_scheduler_config
from scheduler.cost import CostModel, Strategy, factor_bytes
from scheduler.device_timing import DeviceTiming
from scheduler.gpu_model import GpuModel
from scheduler.rounds import LORA_ROUNDS, ROUND_OF, ROUNDS, RoundLoad
from scheduler.scheduler import Request as SchedRequest
from scheduler.scheduler import Scheduler, Site

from .config import KV_PRECISIONS, ServingConfig, SystemConfig
from .tiering import load_tiering

STRATEGY_COLUMNS = tuple(s.name for s in Strategy)


@dataclasses.dataclass
class StepCost:
    """One iteration's time and what it moved (times are the whole step, over all layers)."""
    seconds: float
    gemm_s: float = 0.0             # the base model's weight GEMMs and LM head
    lora_s: float = 0.0             # what the LoRA products add to their rounds
    attention_s: float = 0.0        # the attention rounds (prefill: the prompts' self-attention)
    launch_s: float = 0.0           # kernel launches and host exchanges on the GPU's stream
    pool_s: float = 0.0             # the pool's side of every round (link and devices), summed
    link_to_device: float = 0.0     # bytes GPU -> pool over the GPU's link
    link_to_gpu: float = 0.0        # bytes pool -> GPU
    kv_bytes: float = 0.0           # KV cache of the batch
    kv_gpu_bytes: float = 0.0       # of which duplicated on (or resident in) HBM
    mix: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    # a pool's decode: one layer's (RoundLoad, its seconds) in ROUNDS' order (serving.trace)
    rounds: tuple[tuple[RoundLoad, float], ...] = ()


@dataclasses.dataclass
class Live:
    """A request the engine is serving."""
    rid: int
    adapter: int
    prompt: int
    output: int
    arrival_s: float
    generated: int = 0
    first_token_s: float = None     # type: ignore[assignment]  # set by its prefill, read only after
    new: bool = True                # its first decode step is next (raises the adapter's temperature)

    @property
    def context(self) -> int:
        return self.prompt + self.generated

    @property
    def reserved_tokens(self) -> int:
        return self.prompt + self.output


class System:
    """What the engine needs of a system: admission and the cost of each iteration."""

    def __init__(self, run: ServingConfig, system: SystemConfig, ranks: Sequence[int]) -> None:
        self.run, self.system = run, system
        self.ranks = tuple(ranks)
        self.model = load_model(run.model)
        self.gpu = load_gpu(run.gpu)
        self.link = self._link(system.link or run.link)
        self.tiering = load_tiering(run.tiering, self.gpu, self.link, self.model)
        if self.tiering is not None and system.kind != "pool":
            raise ValueError(f"system {system.name!r}: a tiering needs a pool behind the link (kind 'pool')")
        self.gpu_model = GpuModel(self.gpu, self.model, self.tiering)
        self.kv_scale = KV_PRECISIONS[run.kv_precision]
        m = self.model
        self.kv_token_layer = 2 * m.kv_heads * m.head_dim * FP16_BYTES * self.kv_scale
        self.kv_token = self.kv_token_layer * m.layers
        # every layer's factors of an adapter, per projection: (A bytes, B bytes) x copies
        self.adapter_bytes = [sum(sum(factor_bytes(p.d_in, p.d_out, r)) * m.copies(p) * m.layers
                                  for p in m.projections) for r in self.ranks]

    def _link(self, name: str) -> LinkConfig:
        link = load_link(name)
        changes: dict[str, Any] = {}
        if self.run.link_bytes_per_s is not None:
            changes["bytes_per_s"] = self.run.link_bytes_per_s
        if self.run.link_latency_s is not None:
            changes["latency_s"] = self.run.link_latency_s
        return dataclasses.replace(link, **changes)

    def kv_capacity_bytes(self) -> float:
        raise NotImplementedError

    def decode(self, running: Sequence[Live]) -> StepCost:
        """One decode step of every request in `running`."""
        raise NotImplementedError

    def prefill(self, new: Sequence[Live], running: Sequence[Live] = ()) -> StepCost:
        """The prompts of `new` in one iteration (`running` waits)."""
        raise NotImplementedError

    def fits(self, running: Sequence[Live], request: Live) -> bool:
        """Whether `request` can be admitted beside `running` (its whole context reserved)."""
        tokens = sum(r.reserved_tokens for r in running) + request.reserved_tokens
        return tokens * self.kv_token <= self.kv_capacity_bytes()

    def head(self, sequences: int) -> float:
        return self.gpu_model.head_s(sequences)


class PoolSystem(System):
    def __init__(self, run: ServingConfig, system: SystemConfig, ranks: Sequence[int],
                 timing: DeviceTiming | None = None) -> None:
        super().__init__(run, system, ranks)
        device = load_device_config(run.device)
        self.timing = timing or DeviceTiming(device)
        policy_link = load_link(system.policy_link) if system.policy_link else self.link
        # a tiering moves a share of the base weights into the pool: HBM gains it, the pool loses it
        w_share = self.tiering.weight_share if self.tiering else 0.0
        self.weights_in_pool = w_share * self.model.weight_bytes
        budget = (load_scheduler_config(run.scheduler, gpu=run.gpu, model=run.model).gpu_budget()
                  + self.weights_in_pool) if self.tiering else None
        sched_cfg = load_scheduler_config(
            run.scheduler, gpu=run.gpu, model=run.model, device=run.device, num_devices=run.num_devices,
            link=system.policy_link or system.link or run.link,     # its name or path, as the run gives it
            link_bytes_per_s=policy_link.bytes_per_s, link_latency_s=policy_link.latency_s,
            strategies=list(system.strategies), forced_strategy=system.forced_strategy,
            distributed_attention=system.distributed_attention, kv_precision=run.kv_precision,
            max_cpu_loras=max(len(ranks), load_scheduler_config(run.scheduler).max_cpu_loras),
            **({"gpu_budget_bytes": budget} if budget is not None else {}))
        self.scheduler = Scheduler(sched_cfg, self.timing)
        for a, r in enumerate(self.ranks):
            self.scheduler.register(a, r)
        # the run's link prices what the policy decided
        self.cost = CostModel(self.gpu, self.link, self.timing, run.num_devices,
                              distributed_attention=system.distributed_attention, kv_scale=self.kv_scale,
                              page_tokens=sched_cfg.kv_page_tokens)
        self.pool_bytes = (system.pool_bytes or run.num_devices * device.dram_bytes) - self.weights_in_pool

    def kv_capacity_bytes(self) -> float:
        return self.pool_bytes - sum(self.adapter_bytes)

    # ---- decode ---------------------------------------------------------------------------

    def decode(self, running: Sequence[Live]) -> StepCost:
        plan = self.scheduler.step([SchedRequest(r.rid, r.adapter, r.context, r.new) for r in running])
        m, batch = self.model, len(running)
        gemms = dict(zip((g[0] for g in self.gpu_model.gemms), self.gpu_model.layer_costs(batch), strict=True))
        launch = self.gpu.kernel_launch_s if self.system.per_adapter_launch else 0.0
        projections = {p.name: p for p in m.projections}
        products: collections.Counter[str] = collections.Counter()  # round -> products per layer (NoCXL's launches)
        for site in plan.decisions:
            products[ROUND_OF[site.projection]] += m.copies(projections[site.projection])
        rounds: list[RoundLoad] = []
        launches: list[float] = []
        for name, _ in ROUNDS:
            load = plan.rounds[name].copy()
            if name == "attention":
                if self.tiering is not None and self.tiering.kv_share:
                    self._tier_attention(load, sum(plan.kv_tokens.values()))
                extra = self.run.num_devices * launch if load.descriptors else 0.0
            else:
                # the system's GEMM (a tiering reads part of the weights over the link, beside the results)
                load.gemm_s = gemms[name].seconds
                load.add_reads(gemms[name].second_bytes)
                extra = products[name] * launch
            load.gpu_s += extra
            rounds.append(load)
            launches.append(extra)
        link = self.link
        times = [r.seconds(link) for r in rounds]
        if self.run.overlap == "wave":
            layer = sum(times)
        else:
            # the paper's accounting: the pool's side hides under the GPU's whole layer
            layer = (max(sum(r.gemm_s + r.gpu_s for r in rounds), sum(r.pool_s(link) for r in rounds))
                     + sum(r.gpu_after_s for r in rounds))
            times = [t * layer / sum(times) for t in times]      # the layer shared in proportion
        # each round's time split in order: its GEMM, its launches, then what the LoRA
        # products (or attention) add
        gemm = launch_s = lora = attention = 0.0
        for (name, _), r, t, extra in zip(ROUNDS, rounds, times, launches, strict=True):
            g = min(r.gemm_s, t)
            k = min(extra, t - g)
            gemm, launch_s = gemm + g, launch_s + k
            if name == "attention":
                attention += t - g - k
            else:
                lora += t - g - k
        head = self.head(batch)
        contexts = sum(r.context for r in running)
        return StepCost(m.layers * layer + head, gemm_s=m.layers * gemm + head, lora_s=m.layers * lora,
                        attention_s=m.layers * attention, launch_s=m.layers * launch_s,
                        pool_s=m.layers * sum(r.pool_s(link) for r in rounds),
                        link_to_device=m.layers * sum(r.to_device for r in rounds),
                        link_to_gpu=m.layers * sum(r.to_gpu for r in rounds),
                        kv_bytes=contexts * self.kv_token, kv_gpu_bytes=sum(plan.kv_tokens.values()) * self.kv_token,
                        mix=plan.strategy_mix(), rounds=tuple(zip(rounds, times, strict=True)))

    def _tier_attention(self, load: RoundLoad, gpu_tokens: int) -> None:
        """The GPU's attention share with `kv_share` of its KV left in the pool (DSR's heads):
        HBM and the link read it together, the link also carrying the devices' partials."""
        m, tiering = self.model, self.tiering
        assert tiering is not None
        nbytes = gpu_tokens * self.kv_token_layer
        second = tiering.kv_share * nbytes
        flops_s = 4 * m.q_heads * m.head_dim * gpu_tokens / self.gpu.fp16_flops
        load.gpu_s = max(flops_s, tiering.memory_s(nbytes - second, second))
        load.add_reads(second)

    # ---- prefill --------------------------------------------------------------------------

    def prefill(self, new: Sequence[Live], running: Sequence[Live] = ()) -> StepCost:
        """The prompts of `new` in one iteration (`running` waits). Every adapter's product runs on the GPU: at a
        prompt's hundreds of tokens per adapter the GPU strategies win (Fig. 3a's crossovers),
        E1 where the GPU holds the factors, else E2 reading them over the link, and keeping
        them, evicting idle adapters for the room (Scheduler.keep: the read fills the cache,
        as S-LoRA's staging does); the prompts' K and V go to the pool over the link."""
        m = self.model
        tokens = sum(r.prompt for r in new)
        gemm = self.gpu_model.layer_s(tokens)
        att = self.gpu_model.prefill_attention_s([r.prompt for r in new])
        per_adapter: collections.Counter[int] = collections.Counter()
        for r in new:
            per_adapter[r.adapter] += r.prompt
        gpu_lora = to_gpu = 0.0
        launches = 0
        mix: collections.Counter[str] = collections.Counter()
        serving = {r.adapter for r in running} | set(per_adapter)
        for adapter, b in per_adapter.items():
            for p in m.projections:
                site = Site(adapter, p.name)
                held = self.scheduler.held(site)
                s = Strategy.E1 if {"A", "B"} <= held else Strategy.E2
                c = self.cost.lora_cost(s, b, p.d_in, p.d_out, self.ranks[adapter])
                if s is Strategy.E2:
                    self.scheduler.keep(site, "AB", serving)
                k = m.copies(p)
                gpu_lora += k * c.gpu_s
                to_gpu += k * c.link_to_gpu
                launches += k
                mix[s.name] += 1
        launch_s = launches * self.gpu.kernel_launch_s if self.system.per_adapter_launch else 0.0
        to_dev = tokens * self.kv_token_layer
        link_s = self.link.round_trip_s + self.link.transfer_s(max(to_dev, to_gpu))
        layer = max(gemm + att + gpu_lora + launch_s, link_s)
        head = self.head(len(new))
        return StepCost(m.layers * layer + head, gemm_s=m.layers * gemm + head,
                        lora_s=m.layers * (layer - gemm - att - launch_s), attention_s=m.layers * att,
                        launch_s=m.layers * launch_s, link_to_device=m.layers * to_dev,
                        link_to_gpu=m.layers * to_gpu, kv_bytes=tokens * self.kv_token, mix=mix)


class HostSystem(System):
    """Adapters in host DRAM behind PCIe, the KV cache in HBM only (S-LoRA's memory layout).

    lora "gpu" (S-LoRA): an adapter is staged into HBM when its request is admitted (its
    load over the link overlaps the prefill's compute, S-LoRA's prefetch) and computed by
    batched SGMV kernels; idle adapters are evicted least recently used when the KV cache
    or a new adapter needs the room (unified paging). lora "cpu" (CPU-LoRA-Offload): each of
    the layer's four dependent LoRA rounds (Q/K/V, O, gate/up, down) stops the GPU, copies x
    over the link, runs on the host CPU, copies the result back and relaunches."""

    def __init__(self, run: ServingConfig, system: SystemConfig, ranks: Sequence[int]) -> None:
        super().__init__(run, system, ranks)
        self.budget = load_scheduler_config(run.scheduler, gpu=run.gpu, model=run.model).gpu_budget()
        self.resident: collections.OrderedDict[int, float] = collections.OrderedDict()  # adapter -> bytes, LRU first
        self.cpu = load_cpu(system.cpu) if system.lora == "cpu" else None

    def kv_capacity_bytes(self) -> float:
        return self.budget

    def fits(self, running: Sequence[Live], request: Live) -> bool:
        adapters: float
        if self.cpu is None:
            serving = {r.adapter for r in running} | {request.adapter}
            adapters = sum(self.adapter_bytes[a] for a in serving)
        else:
            adapters = 0.0
        tokens = sum(r.reserved_tokens for r in running) + request.reserved_tokens
        return tokens * self.kv_token + adapters <= self.budget

    def _stage(self, adapters: Sequence[int], running: Sequence[Live]) -> float:
        """Make `adapters` resident, evicting idle ones least recently used; bytes loaded."""
        kv = sum(r.reserved_tokens for r in running) * self.kv_token
        serving = {r.adapter for r in running}
        loaded = 0.0
        for a in adapters:
            if a in self.resident:
                self.resident.move_to_end(a)
                continue
            need = self.adapter_bytes[a]
            for victim in [v for v in self.resident if v not in serving and v not in adapters]:
                if kv + sum(self.resident.values()) + need <= self.budget:
                    break
                del self.resident[victim]
            self.resident[a] = need
            loaded += need
        return loaded

    def _lora_gpu_s(self, rows: Mapping[int, int]) -> float:
        """One layer's SGMV time for `rows` (adapter -> tokens) from resident factors."""
        m = self.model
        total = 0.0
        for a, b in rows.items():
            for p in m.projections:
                r = self.ranks[a]
                a_bytes, b_bytes = factor_bytes(p.d_in, p.d_out, r)
                flops = 2 * b * r * (p.d_in + p.d_out)
                total += m.copies(p) * self.gpu.roofline_s(flops,
                                                           a_bytes + b_bytes + b * (p.d_in + p.d_out) * FP16_BYTES)
        return total

    def _cpu_rounds_s(self, rows: Mapping[int, int]) -> tuple[float, float, float]:
        """One layer's four CPU rounds for `rows` (adapter -> tokens): (seconds, bytes to the
        host, bytes back)."""
        m, cpu = self.model, self.cpu
        assert cpu is not None
        projections = {p.name: p for p in m.projections}
        tokens = sum(rows.values())
        total = to_host = back = 0.0
        for _, names in LORA_ROUNDS:
            flops = nbytes = 0.0
            x_bytes = tokens * projections[names[0]].d_in * FP16_BYTES
            y_bytes = sum(tokens * projections[n].d_out * FP16_BYTES for n in names)
            for a, b in rows.items():
                r = self.ranks[a]
                for n in names:
                    p = projections[n]
                    flops += m.copies(p) * 2 * b * r * (p.d_in + p.d_out)
                    nbytes += m.copies(p) * sum(factor_bytes(p.d_in, p.d_out, r))
            total += (cpu.exchange_s + self.link.round_trip_s + self.link.transfer_s(x_bytes)
                      + cpu.roofline_s(flops, nbytes) + self.link.transfer_s(y_bytes))
            to_host += x_bytes
            back += y_bytes
        return total, to_host, back

    def _lora(self, rows: Mapping[int, int]) -> tuple[float, float, float, float]:
        """(GPU LoRA seconds, host round seconds, bytes to the host, bytes back) of one layer."""
        if self.cpu is None:
            return self._lora_gpu_s(rows), 0.0, 0.0, 0.0
        return (0.0, *self._cpu_rounds_s(rows))

    def decode(self, running: Sequence[Live]) -> StepCost:
        m = self.model
        gemm = self.gpu_model.layer_s(len(running))
        tokens = sum(r.context for r in running)
        att = self.gpu_model.gpu_attention_s(tokens, self.kv_token_layer)
        lora, rounds, to_host, back = self._lora(collections.Counter(r.adapter for r in running))
        layer = gemm + lora + rounds + att
        head = self.head(len(running))
        return StepCost(m.layers * layer + head, gemm_s=m.layers * gemm + head, lora_s=m.layers * lora,
                        attention_s=m.layers * att, launch_s=m.layers * rounds,
                        link_to_device=m.layers * to_host, link_to_gpu=m.layers * back,
                        kv_bytes=tokens * self.kv_token, kv_gpu_bytes=tokens * self.kv_token)

    def prefill(self, new: Sequence[Live], running: Sequence[Live] = ()) -> StepCost:
        """The prompts of `new`; S-LoRA stages their adapters meanwhile (the step lasts at
        least the load)."""
        m = self.model
        tokens = sum(r.prompt for r in new)
        gemm = self.gpu_model.layer_s(tokens)
        att = self.gpu_model.prefill_attention_s([r.prompt for r in new])
        rows: collections.Counter[int] = collections.Counter()
        for r in new:
            rows[r.adapter] += r.prompt
        lora, rounds, to_host, back = self._lora(rows)
        loaded = self._stage(list(rows), list(running) + list(new)) if self.cpu is None else 0.0
        compute = m.layers * (gemm + att + lora + rounds)
        load_s = self.link.round_trip_s + self.link.transfer_s(loaded) if loaded else 0.0
        head = self.head(len(new))
        step = max(compute, load_s)
        return StepCost(step + head, gemm_s=m.layers * gemm + head, lora_s=step - m.layers * (gemm + att + rounds),
                        attention_s=m.layers * att, launch_s=m.layers * rounds,
                        link_to_device=m.layers * to_host, link_to_gpu=loaded + m.layers * back,
                        kv_bytes=tokens * self.kv_token, kv_gpu_bytes=tokens * self.kv_token)


def build_system(run: ServingConfig, system: SystemConfig, ranks: Sequence[int],
                 timing: DeviceTiming | None = None) -> PoolSystem | HostSystem:
    if system.kind == "pool":
        return PoolSystem(run, system, ranks, timing)
    return HostSystem(run, system, ranks)
