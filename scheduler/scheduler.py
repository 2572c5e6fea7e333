"""The GPU memory manager: each decode step, Algorithm 1 on every site, then the KV
duplicates and the pre-caching (seed 000, section VI).

Every decode step, `Scheduler.step(requests)`:
1. raises the temperature of each new request's adapter, relaxes every temperature;
2. frees what finished requests held and shrinks the KV duplicates if the contexts grew
   past the budget;
3. for every serving adapter and every projection it is injected into (a *site*), largest
   batch first, runs Algorithm 1: rank E1-E4 by the cost model (line 3), take the fastest
   that fits the GPU budget (line 6); else evict cold adapters first (line 8), then consider
   the other residents, KV duplicates, hot adapters and serving adapters (lines 15-18),
   re-rank every candidate with its eviction penalty and take the fastest (lines 19-20);
4. duplicates KV pages on the GPU up to the share of least attention time (Table V), the
   devices computing the rest or, where that is faster, the GPU reading it over the link,
   evicting idle adapters for it where the time it buys exceeds their reload;
5. pre-caches the hottest non-serving adapters with what is still left, as far as the
   link's idle time in the step carries them.

The time a candidate is ranked by is the time it adds to its layer (issue 24): a layer
runs in rounds (scheduler.rounds), each the longer of the GPU's stream and the pool's side,
so a product on a device with room, or factors the link has room to carry, hide under the
round's base GEMM ("the charge hides under the base-model step", section VIII, Finding 4),
and a product is charged only what it makes its round longer, given the products decided
before it (scheduler.layer_rounds). A strategy that needs factors the GPU does not hold also
pays their one-time load over the link, amortized over `expected_steps` (the steps its batch
is expected to last): the rule that moves an adapter from P3 to P1 (E4 to E1). Every
decision keeps its ranked candidates, so `StepPlan.explain()` says why. Factors loaded for
a site cross the link in its round of this step (StepPlan.rounds holds what the step costs;
the ranking holds the load amortized).

The parts, after Vidur's layering (entities, a memory ledger, a policy, the driver):
- scheduler.entities: the values asked and answered (Request, Site, Candidate, Decision, StepPlan);
- scheduler.adapters: the registered adapters, their ranks, devices, sites and factor bytes;
- scheduler.ledger: what the GPU holds (factors per site, the KV share) against its budget;
- scheduler.kv_share: a step's batch as KV pages and its attention round under every share;
- scheduler.layer_rounds: a step's rounds of one layer, which candidates are priced against;
- scheduler.algorithm1: Algorithm 1 for one site, a pure function of its snapshot;
- scheduler.settled: the caching layer around it, steps kept by the value of their inputs;
- this module: the driver, which prices the candidates, lists the residents, applies each
  decision to the ledger and the rounds, and then sizes the KV duplicates and pre-caches.
"""
from __future__ import annotations

import collections
import dataclasses
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from . import algorithm1
from .adapters import Adapters
from .algorithm1 import IdleAdapter, Others, Residents, SiteSnapshot
from .config import SchedulerConfig
from .cost import INF, STRATEGIES, CostModel, Strategy, amortized_load_s
from .device_timing import DeviceTiming
from .entities import (
    BOTH,
    FASTEST,
    NOTHING,
    PARTS,
    Candidate,
    Decision,
    Eviction,
    Request,
    SchedulerError,
    Site,
    StepPlan,
)
from .gpu_model import GpuModel
from .kv_share import KvShare
from .layer_rounds import LayerRounds, Product
from .ledger import GpuLedger
from .rounds import RoundLoad
from .settled import SettledSteps, StepKey
from .temperature import Temperatures

__all__ = ["PARTS", "Candidate", "Decision", "Eviction", "Request", "Scheduler", "SchedulerError", "Site",
           "StepPlan"]

# how many settled steps the caching layer keeps: the last one. Keeping more found no more
# hits, measured 2026-12-05: 8 or 64 on the default serving run (2,585 of 2,868 steps with
# 300 requests, as with 1), 8 on tests/unit/test_scheduler_speed.py's churning workloads
SETTLED_STEPS = 1
GPU_PARTS = {s: s.gpu_parts for s in STRATEGIES}    # Strategy.gpu_parts builds a set each call


@dataclasses.dataclass
class _Step:
    """One step's working state, dropped when the step's plan is returned."""
    batch: collections.Counter          # adapter -> its requests in the batch
    order: list[int]                    # the serving adapters, largest batch first (ties by id)
    evictions: list[Eviction] = dataclasses.field(default_factory=list)
    loads: list[tuple[Site, frozenset, int]] = dataclasses.field(default_factory=list)

    @property
    def serving(self) -> set[int]:
        return set(self.batch)


@dataclasses.dataclass
class _Deciding:
    """A step while Algorithm 1 runs over its sites (not on a settled step)."""
    step: _Step
    rounds: LayerRounds                 # the rounds of one layer as the sites decided so far fill them
    # a serving site's eviction option, priced once a step, against the rounds as they stand
    # when it is first asked for (an eviction plan under memory pressure asks for every one,
    # for every site decided: pricing them all again each time took most of a run's time)
    serving_prices: dict[tuple[Site, frozenset, int], Eviction] = dataclasses.field(default_factory=dict)


class Scheduler:
    def __init__(self, config: SchedulerConfig, timing: DeviceTiming | None = None,
                 strategy_of: Callable[[Site], Strategy] | None = None, settled: SettledSteps | None = None):
        """`strategy_of(site)`, if given, fixes every site's strategy instead of Algorithm 1
        (the whole-step replay's mixed step), its factors held idealized as a forced
        strategy's are; `config.forced_strategy` is the same for one strategy on every site.
        `settled` is the caching layer (default: the last SETTLED_STEPS settled steps;
        `SettledSteps(0)` runs Algorithm 1 on every site of every step)."""
        self.config = config
        self.model = config.model_config()
        self.link = config.link_config()
        self.device_cfg = config.device_config()
        self.timing = timing or DeviceTiming(self.device_cfg)
        self.cost = CostModel(config.gpu_config(), self.link, self.timing, config.num_devices,
                              distributed_attention=config.distributed_attention, kv_scale=config.kv_scale,
                              page_tokens=config.kv_page_tokens)
        self.gpu_model = GpuModel(config.gpu_config(), self.model)
        # Algorithm 1's candidates; a forced strategy replaces it (the serving ablations)
        self._strategies = tuple(s for s in STRATEGIES if s.name in config.strategies)
        self._forced = strategy_of
        if strategy_of is None and config.forced_strategy:
            self._forced = lambda site, forced=Strategy[config.forced_strategy]: forced
        self.adapters = Adapters(self.model, config.num_devices, config.max_lora_rank, config.max_cpu_loras)
        self.ledger = GpuLedger(self.adapters, config.gpu_budget(), config.max_loras)
        self.temps = Temperatures(config.temperature_increment, config.temperature_relaxation)
        self.settled = settled if settled is not None else SettledSteps(SETTLED_STEPS)
        self.step_count = 0
        self._projections = {p.name: p for p in self.model.projections}
        self._kv_token_bytes = self.model.kv_bytes_per_token() * config.kv_scale
        self._kv_hints: dict[bool, float] = {}     # on_devices -> the last step's best KV share (a search's start)

    # ---- the public surface: adapters, memory ------------------------------------------

    def register(self, adapter: int, rank: int) -> None:
        """Add an adapter (it lives on device adapter mod num_devices)."""
        self.adapters.register(adapter, rank)
        self.temps.register(adapter)

    @property
    def ranks(self) -> Mapping[int, int]:
        """adapter -> rank (change them through `register`)."""
        return self.adapters.ranks

    @property
    def budget(self) -> float:
        """GPU bytes beside the base model for factors and KV duplicates (settable: the
        whole-step replay sizes it per case)."""
        return self.ledger.budget

    @budget.setter
    def budget(self, nbytes: float) -> None:
        self.ledger.budget = nbytes

    @property
    def p_kv(self) -> float:
        """The share of the batch's KV units duplicated on the GPU."""
        return self.ledger.p_kv

    def device_of(self, adapter: int) -> int:
        return self.adapters.device_of(adapter)

    def sites(self, adapter: int) -> tuple[Site, ...]:
        return self.adapters.sites(adapter)

    def site_bytes(self, site: Site, parts: frozenset | str) -> int:
        """GPU bytes of `parts` of a site's factors over every layer."""
        return self.adapters.site_bytes(site, parts)

    def held(self, site: Site) -> frozenset:
        """The factors of `site` the GPU holds now."""
        return self.ledger.parts(site)

    def kv_bytes(self, p_kv: float | None = None) -> float:
        """GPU bytes of the KV duplicates at share p_kv (default: the current) of the last step's batch."""
        return self.ledger.kv_bytes(p_kv)

    def adapter_bytes(self) -> float:
        return self.ledger.adapter_bytes()

    def used_bytes(self) -> float:
        return self.ledger.used_bytes()

    def free_bytes(self) -> float:
        return self.ledger.free_bytes()

    def cached_adapters(self) -> set[int]:
        return self.ledger.holding()

    def keep(self, site: Site, parts: frozenset | str, serving: Iterable[int] = frozenset()) -> bool:
        """Keep `parts` of a site's factors that the GPU has just read over the link (a
        prefill's E2) in GPU memory: GPU memory is "a software-managed cache for the devices"
        (section V-A), and a read is a cache fill. To make room it evicts idle adapters (not
        in `serving`, the adapters of the running and admitted requests), coldest first, as
        S-LoRA's unified paging evicts its least recently used: the request that read them
        decodes next, and without them every decode step reads them again (or loads them,
        which the prefill's read already paid for). It evicts nothing when the idle adapters
        together cannot make the room. Returns whether they are held now."""
        ledger = self.ledger
        missing = frozenset(parts) - ledger.parts(site)
        if not missing:
            return True
        if self._forced:
            return False
        need = self.site_bytes(site, missing)
        need_slot = not ledger.slot_free_for(site.adapter)
        victims, free = [], ledger.free_bytes()
        for a in self._idle_coldest(set(serving) | {site.adapter}):
            if need <= free and not need_slot:
                break
            victims.append(Eviction("cold", a, BOTH, ledger.held_bytes(a), 0.0))
            free += victims[-1].nbytes
            need_slot = False
        if need > free or need_slot:
            return False
        for e in victims:
            self._apply_eviction(e)
        ledger.add(site, missing)
        ledger.check("keep")
        return True

    # ---- costs --------------------------------------------------------------------------

    def product(self, site: Site, strategy: Strategy, batch: int) -> Product:
        """(LoraCost of one layer, device, copies) of a site's product under `strategy`."""
        # on every candidate of every site: dict lookups, not the adapters' methods
        p = self._projections[site.projection]
        c = self.cost.lora_cost(strategy, batch, p.d_in, p.d_out, self.adapters.ranks[site.adapter])
        return c, site.adapter % self.config.num_devices, self.model.copies(p)

    def site_cost(self, site: Site, strategy: Strategy, batch: int, rounds: LayerRounds) -> tuple[float, str | None]:
        """(the time `strategy` adds to this step over every layer, why infeasible): how
        much longer the site's round gets with its product in it, given the products
        decided so far (the module docstring)."""
        product = self.product(site, strategy, batch)
        if product[0].infeasible:
            return INF, product[0].infeasible
        return rounds.added_s(site, product), None

    def best_with(self, site: Site, parts: frozenset, batch: int, rounds: LayerRounds) -> tuple[float, Strategy]:
        """The fastest feasible strategy needing only `parts` on the GPU: (time, strategy)."""
        options = [(self.site_cost(site, s, batch, rounds)[0], s.name, s) for s in self._strategies
                   if GPU_PARTS[s] <= parts]
        t, _, s = min(options)
        return t, s

    def attention_s(self, p_kv: float | None = None) -> float:
        """Attention time of one step over every layer with a KV share p_kv (default: the
        current) duplicated on the GPU (Table V)."""
        kv = self.ledger.kv
        if kv is None:
            return 0.0
        return kv.share_seconds(self.ledger.p_kv if p_kv is None else p_kv)

    def load_s(self, nbytes: float) -> float:
        """A one-time load of `nbytes` over the link, amortized over expected_steps."""
        return amortized_load_s(self.link, nbytes, self.config.expected_steps)

    # ---- one step -----------------------------------------------------------------------

    def step(self, requests: Sequence[Request]) -> StepPlan:
        """Decide this step for `requests` (the batch); returns a StepPlan."""
        self.step_count += 1
        batch: collections.Counter[int] = collections.Counter()
        for r in requests:
            if r.adapter not in self.adapters:
                raise SchedulerError(f"request {r.rid!r}: adapter {r.adapter!r} is not registered")
            if not isinstance(r.context, (int, np.integer)) or r.context < 1:
                raise SchedulerError(f"request {r.rid!r}: context must be an integer >= 1 token, got {r.context!r}")
            batch[r.adapter] += 1
        if len(batch) > self.config.max_loras_per_batch:
            raise SchedulerError(f"{len(batch)!r} adapters in one batch exceed max_loras_per_batch="
                                 f"{self.config.max_loras_per_batch!r}")
        for r in requests:
            if r.new:
                self.temps.arrive(r.adapter)
        self.temps.relax()

        ledger = self.ledger
        st = _Step(batch, sorted(batch, key=lambda a: (-batch[a], a)))
        ledger.kv = KvShare(self.cost, self.link, self.model, self._kv_token_bytes, requests) if requests else None
        # the duplicates follow the contexts: shrink the share if they outgrew the budget
        if ledger.kv is not None and ledger.p_kv > 0 and ledger.used_bytes() > ledger.budget:
            old = ledger.kv_bytes()
            ledger.p_kv = ledger.kv.share_fitting(ledger.budget - ledger.adapter_bytes(), ledger.p_kv)
            st.evictions.append(Eviction("kv", ledger.p_kv, NOTHING, old - ledger.kv_bytes(), 0.0))

        key = self._settled_key(st)
        settled = self.settled.get(key)
        if settled is not None:
            decisions, layer_rounds = dict(settled.decisions), settled.rounds
        else:
            decisions, layer_rounds = self._decide_all(st)
            if self._settles(decisions, st):
                self.settled.put(key, decisions, layer_rounds)

        serving = st.serving
        if ledger.kv is not None:
            _, best = ledger.kv.choose(ledger.budget - ledger.adapter_bytes(), self._kv_hints)
            self._make_room_for_kv(best, serving, st.evictions)
            ledger.p_kv = ledger.kv.share_fitting(ledger.budget - ledger.adapter_bytes(), best)
        ledger.check("duplicating KV")
        units = ledger.kv.units_of(ledger.p_kv) if ledger.kv else np.zeros(0, np.int64)
        tokens = ledger.kv.tokens_of(units) if ledger.kv else np.zeros(0, np.int64)
        rounds = {name: load.copy() for name, load in layer_rounds.items()}
        if ledger.kv is not None:
            rounds["attention"] = ledger.kv.load(units)[0].copy()
        precached = self._precache(serving, st.loads, self._link_slack(rounds)) if not self._forced else []
        on_devices = ledger.kv.on_devices if ledger.kv is not None else self.cost.distributed_attention
        total = sum(r.context for r in requests)
        return StepPlan(self.step_count, decisions, float(tokens.sum()) / total if total else 0.0,
                        {r.rid: int(u) for r, u in zip(requests, units, strict=True)},
                        {r.rid: int(t) for r, t in zip(requests, tokens, strict=True)}, ledger.kv_bytes(), st.loads,
                        st.evictions, precached, ledger.used_bytes(), ledger.budget, rounds, on_devices)

    def _settled_key(self, st: _Step) -> StepKey:
        """What a settled step's decisions depend on (scheduler.settled), as values."""
        return tuple((a, st.batch[a], self.ranks[a], self.ledger.adapter_parts(a)) for a in st.order)

    def _settles(self, decisions: dict[Site, Decision], st: _Step) -> bool:
        """Whether the caching layer may keep the step: nothing loaded or evicted for a site,
        and every site's fastest candidate taken (or a forced strategy), so that its inputs
        give these decisions again, whatever memory is free (scheduler.settled)."""
        return not st.loads and (self._forced is not None
                                 or all(d.reason == FASTEST for d in decisions.values()))

    def _decide_all(self, st: _Step) -> tuple[dict[Site, Decision], dict[str, RoundLoad]]:
        """Algorithm 1 over every site of every serving adapter, largest batch first, each
        decision applied before the next site is decided: the decisions, and the rounds of
        one layer they fill."""
        d = _Deciding(st, LayerRounds(self.cost, self.gpu_model, self.link, self.config.num_devices,
                                      sum(st.batch.values())))
        decisions: dict[Site, Decision] = {}
        for adapter in st.order:
            b = st.batch[adapter]
            for site in self.sites(adapter):
                decision = self._decide(site, b, d)
                for e in decision.chosen.evictions:
                    self._apply_eviction(e)
                    st.evictions.append(e)
                    if e.kind == "serving" and e.target in decisions:
                        decisions[e.target] = self._downgrade(decisions[e.target], site, d)
                missing = GPU_PARTS[decision.chosen.strategy] - self.ledger.parts(site)
                if missing and not self._forced:
                    self._load(site, missing, d)
                decisions[site] = decision
                d.rounds.place(site, self.product(site, decision.chosen.strategy, b))
                self.ledger.check("deciding", site)
        return decisions, d.rounds.loads

    def _decide(self, site: Site, b: int, d: _Deciding) -> Decision:
        """One site: the snapshot Algorithm 1 reads, then Algorithm 1 (scheduler.algorithm1)."""
        parts = self.ledger.parts(site)
        rank = self.ranks[site.adapter]
        if self._forced:
            return self._forced_decision(site, b, rank, parts, d.rounds)
        candidates = []
        for s in self._strategies:
            step_s, why = self.site_cost(site, s, b, d.rounds)
            need = self.site_bytes(site, GPU_PARTS[s] - parts)
            candidates.append(Candidate(s, step_s, self.load_s(need), need, (), why))
        snapshot = SiteSnapshot(site, b, rank, parts, tuple(candidates), self.ledger.free_bytes(),
                                self.ledger.slot_free_for(site.adapter))
        return algorithm1.decide(snapshot, lambda: self._residents(site, d))

    def _residents(self, site: Site, d: _Deciding) -> Residents:
        """What Algorithm 1's lines 8-18 may evict to make room for `site`, as it stands."""
        serving = d.step.serving
        hot = set(self.temps.hottest(self.config.hot_set_size, exclude=serving))
        idle = []
        for a in self._idle_coldest(serving):
            nbytes = self.ledger.held_bytes(a)
            idle.append(IdleAdapter(a, nbytes, a in hot, self.load_s(nbytes)))
        listed: list[Others] = []

        def others() -> Others:
            # listed once a decision: the ledger does not change while Algorithm 1 reads it
            if not listed:
                listed.append(self._others(site, d))
            return listed[0]
        return Residents(tuple(idle), self.config.max_loras, others)

    def _others(self, site: Site, d: _Deciding) -> Others:
        """The KV duplicates and the other serving adapters' factors (lines 15-18)."""
        kv, p_now = self.ledger.kv, self.ledger.p_kv
        kv_now = self.ledger.kv_bytes()
        penalty = max(0.0, self.attention_s(0.0) - self.attention_s()) if kv_now else 0.0

        def shrink_kv(keep_bytes: float) -> Eviction:
            assert kv is not None           # asked only where kv_now > 0
            p = kv.share_fitting(keep_bytes, p_now)
            return Eviction("kv", p, NOTHING, kv_now - self.ledger.kv_bytes(p),
                            max(0.0, self.attention_s(p) - self.attention_s()))
        return Others(kv_now, penalty, shrink_kv, tuple(self._serving_options(site, d)))

    def _forced_decision(self, site: Site, b: int, rank: int, parts: frozenset, rounds: LayerRounds) -> Decision:
        """The forced strategy, or E4 where the device cannot run it (E3 on a weight that is
        not square: LORA_XAB's A is D x R and B R x D). Its factors are idealized as the
        paper's ND(E4) is (VII-D: 'E4 there caches one LoRA matrix per layer and per
        injected weight, 91 GB at their mean rank, which no H100 holds'): held without
        taking GPU memory or a cache slot."""
        assert self._forced is not None
        forced = self._forced(site)
        step_s, why = self.site_cost(site, forced, b, rounds)
        strategy, reason = forced, f"forced {forced.name}"
        if why:
            strategy, reason = Strategy.E4, f"forced {forced.name}, which the device cannot run here: E4"
            step_s, why = self.site_cost(site, strategy, b, rounds)
        chosen = Candidate(strategy, step_s, infeasible=why)
        return Decision(site, b, rank, parts, (chosen,), chosen, reason)

    def _downgrade(self, decision: Decision, taker: Site, d: _Deciding) -> Decision:
        """A site decided earlier this step lost factors to `taker`: its fastest strategy
        among those the factors left allow."""
        parts = self.ledger.parts(decision.site)
        step_s, strategy = self.best_with(decision.site, parts, decision.batch, d.rounds)
        d.rounds.place(decision.site, self.product(decision.site, strategy, decision.batch))
        return dataclasses.replace(decision, chosen=Candidate(strategy, step_s),
                                   reason=f"downgraded: its factors were evicted for "
                                          f"{taker.adapter}/{taker.projection} (lines 15-18)")

    def _serving_options(self, taker: Site, d: _Deciding) -> list[Eviction]:
        """The serving sites' options: the A factor (else what is held) of every site of
        another serving adapter, priced by its site's slowdown and, as a hot adapter's
        eviction is, by its reload, amortized: a serving adapter will want its factors
        back while its batch lasts, and without that term two sites short of memory take
        each other's factors step after step, each load crossing the link."""
        out = []
        for s, parts in self.ledger.items():
            if s.adapter not in d.step.batch or s.adapter == taker.adapter or not parts:
                continue
            b = d.step.batch[s.adapter]
            e = d.serving_prices.get((s, parts, b))
            if e is None:
                drop = frozenset("A") if "A" in parts else parts
                nbytes = self.site_bytes(s, drop)
                penalty = (self.best_with(s, parts - drop, b, d.rounds)[0]
                           - self.best_with(s, parts, b, d.rounds)[0])
                e = d.serving_prices[(s, parts, b)] = Eviction("serving", s, drop, nbytes,
                                                                max(0.0, penalty) + self.load_s(nbytes))
            out.append(e)
        return out

    def _load(self, site: Site, missing: frozenset, d: _Deciding) -> None:
        """Load a site's missing factors for this step: held from now on, and read over the
        link in the site's round, where its product needs them."""
        nbytes = self.site_bytes(site, missing)
        self.ledger.add(site, missing)
        d.step.loads.append((site, missing, nbytes))
        d.rounds.add_reads(site, nbytes)

    def _apply_eviction(self, e: Eviction) -> None:
        # the target by kind: an adapter, the KV share left, or a site (entities.Eviction)
        if e.kind in ("cold", "hot"):
            self.ledger.drop_adapter(typing.cast(int, e.target))
        elif e.kind == "kv":
            self.ledger.p_kv = min(self.ledger.p_kv, typing.cast(float, e.target))
        else:
            site = typing.cast(Site, e.target)
            self.ledger.hold(site, self.ledger.parts(site) - e.parts)

    def _idle_coldest(self, serving: Iterable[int]) -> list[int]:
        """The adapters holding factors that no request in `serving` uses, coldest first."""
        return sorted(self.ledger.holding() - set(serving), key=lambda a: (self.temps[a], a))

    # ---- the KV duplicates and pre-caching ----------------------------------------------

    def _make_room_for_kv(self, best: float, serving: set[int], evictions: list[Eviction]) -> None:
        """Evict idle adapters to make room for the KV share of least attention time: cold
        ones freely (coldest first), hot ones only where the attention time they buy exceeds
        their reload, amortized (the duplicates "compete with LoRA adapters for GPU memory"
        and the memory manager "evicts them using our algorithm and cost model", section
        V-B: here in the other direction)."""
        ledger, kv = self.ledger, self.ledger.kv
        assert kv is not None               # called for a batch with requests
        want = kv.share_bytes(best)
        if want <= ledger.budget - ledger.adapter_bytes():
            return
        hot = set(self.temps.hottest(self.config.hot_set_size, exclude=serving))
        for a in self._idle_coldest(serving):
            room = ledger.budget - ledger.adapter_bytes()
            if want <= room:
                break
            held = ledger.held_bytes(a)
            penalty = 0.0
            if a in hot:
                penalty = self.load_s(held)
                gain = (self.attention_s(kv.share_fitting(room, best))
                        - self.attention_s(kv.share_fitting(room + held, best)))
                if gain <= penalty:
                    continue
            e = Eviction("hot" if a in hot else "cold", a, BOTH, held, penalty, for_kv=True)
            self._apply_eviction(e)
            evictions.append(e)

    def _link_slack(self, rounds: dict[str, RoundLoad]) -> float:
        """Bytes the link's pool -> GPU direction can carry this step without lengthening it:
        in each round of each layer, its time less a round trip and what it carries already."""
        w = self.link.bytes_per_s
        return self.model.layers * sum(
            max(0.0, load.seconds(self.link) - self.link.round_trip_s - self.link.transfer_s(load.to_gpu)) * w
            for load in rounds.values())

    def _precache(self, serving: set[int], loads: list, slack: float) -> list[int]:
        """Pre-cache the hottest non-serving adapters (A and B of every site) with the memory
        and cache slots left, in the background: as many as the link's idle time this step
        carries (`slack` bytes), so that no step waits for them; never evicts anything."""
        ledger, done = self.ledger, []
        for a in self.temps.hottest(self.config.hot_set_size, exclude=serving):
            if ledger.holds_whole(a):
                continue                                # holds everything: needs nothing
            if not ledger.slot_free_for(a):
                break
            need = ledger.missing_bytes(a)
            if need > ledger.free_bytes() or need > slack:
                continue
            slack -= need
            for s in self.sites(a):
                missing = BOTH - ledger.parts(s)
                if missing:
                    ledger.add(s, missing)
                    loads.append((s, missing, self.site_bytes(s, missing)))
            done.append(a)
        ledger.check("pre-caching")
        return done
