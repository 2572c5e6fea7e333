"""The GPU memory manager and Algorithm 1 (seed 000, section VI-A).

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
before it. A strategy that needs factors the GPU does not hold also pays their one-time load
over the link, amortized over `expected_steps` (the steps its batch is expected to last):
the rule that moves an adapter from P3 to P1 (E4 to E1). Every decision keeps its ranked
candidates, so `StepPlan.explain()` says why. Factors loaded for a site cross the link in
its round of this step (StepPlan.rounds holds what the step costs; the ranking holds the
load amortized).

Speed: a step whose serving adapters, batches, ranks and cached factors are those of the
step before, which took every site's fastest candidate with nothing to load or evict, takes
the same decisions again: Algorithm 1 would (nothing it reads has changed). The KV share is
priced for every share at once (cost.AttentionTable) and searched for its balance.
"""
import collections
import dataclasses

import numpy as np

from .cost import INF, STRATEGIES, AttentionTable, CostModel, Strategy, amortized_load_s, factor_bytes
from .device_timing import DeviceTiming
from .gpu_model import GpuModel
from .kv_pages import water_fill
from .rounds import LORA_ROUNDS, ROUND_OF, RoundLoad
from .temperature import Temperatures

PARTS = ("A", "B")
_GPU_PARTS = {s: s.gpu_parts for s in STRATEGIES}
_NOTHING = frozenset()
_FASTEST = "fastest, fits the GPU budget (line 6)"


class SchedulerError(ValueError):
    """A request, adapter or configuration the scheduler cannot serve."""


@dataclasses.dataclass(frozen=True)
class Request:
    """A request in this step's batch: its adapter and its context (KV tokens so far)."""
    rid: int
    adapter: int
    context: int
    new: bool = False           # arrived this step: raises its adapter's temperature


Site = collections.namedtuple("Site", "adapter projection")


@dataclasses.dataclass(frozen=True)
class Eviction:
    kind: str                   # "cold", "hot", "kv", "serving"
    target: object              # adapter id, Site, or the KV share p_kv after the eviction
    parts: frozenset            # for serving sites: the factors dropped
    nbytes: float
    penalty_s: float            # added step time this eviction costs (amortized for reloads)
    for_kv: bool = False        # made room for the KV duplicates (not for a site)

    def describe(self):
        if self.kind == "kv":
            return f"KV duplicates ({self.nbytes / 1e6:.1f} MB, +{self.penalty_s * 1e6:.2f} us)"
        what = f"adapter {self.target}" if self.kind in ("cold", "hot") else \
            f"{self.target.adapter}/{self.target.projection}:{''.join(sorted(self.parts))}"
        why = " for KV duplicates" if self.for_kv else ""
        return f"{self.kind} {what} ({self.nbytes / 1e6:.1f} MB, +{self.penalty_s * 1e6:.2f} us){why}"


@dataclasses.dataclass(frozen=True)
class Candidate:
    strategy: Strategy
    step_s: float               # this step's time of the site under the strategy (all layers)
    load_s: float = 0.0         # the missing factors' load, amortized over expected_steps
    need_bytes: float = 0.0     # GPU memory the missing factors take
    evictions: tuple = ()
    infeasible: str = None

    @property
    def penalty_s(self):
        return sum(e.penalty_s for e in self.evictions)

    @property
    def total_s(self):
        return INF if self.infeasible else self.step_s + self.load_s + self.penalty_s


@dataclasses.dataclass(frozen=True)
class Decision:
    site: Site
    batch: int
    rank: int
    parts_before: frozenset
    candidates: tuple           # ranked by total_s, infeasible last
    chosen: Candidate
    reason: str

    def explain(self):
        cached = "".join(sorted(self.parts_before)) or "nothing"
        lines = [f"adapter {self.site.adapter} / {self.site.projection} (batch {self.batch}, R={self.rank}, "
                 f"GPU holds {cached}) -> {self.chosen.strategy.name}: {self.reason}"]
        for c in self.candidates:
            if c.infeasible:
                lines.append(f"    {c.strategy.name}  infeasible: {c.infeasible}")
                continue
            evict = ", ".join(e.describe() for e in c.evictions) or "-"
            lines.append(f"    {c.strategy.name}  step {c.step_s * 1e6:9.2f} us  load {c.load_s * 1e6:7.2f} us  "
                         f"needs {c.need_bytes / 1e6:8.2f} MB  evicts {evict}  = {c.total_s * 1e6:9.2f} us")
        return "\n".join(lines)


@dataclasses.dataclass
class StepPlan:
    step: int
    decisions: dict             # Site -> Decision
    p_kv: float                 # share of the batch's KV tokens duplicated on the GPU
    kv_units: dict              # rid -> KV units (pages, scheduler.kv_pages) the GPU holds
    kv_tokens: dict             # rid -> the tokens of those pages
    kv_bytes: float             # GPU memory the duplicates take (every layer)
    loads: list                 # (Site, parts, bytes) loaded into GPU memory this step
    evictions: list             # Eviction, in order
    precached: list             # adapters pre-cached this step
    used_bytes: float
    budget_bytes: float
    rounds: dict                # round name -> RoundLoad of one layer (scheduler.rounds)
    attention_on_devices: bool = True   # the devices compute the pages the GPU does not hold (else the GPU reads them)

    def strategy_mix(self):
        return collections.Counter(d.chosen.strategy.name for d in self.decisions.values())

    def explain(self):
        mix = ", ".join(f"{k} {v}" for k, v in sorted(self.strategy_mix().items()))
        rest = "the devices compute the rest" if self.attention_on_devices else "the GPU reads the rest over the link"
        lines = [f"step {self.step}: {len(self.decisions)} sites ({mix}); GPU {self.used_bytes / 1e9:.3f} of "
                 f"{self.budget_bytes / 1e9:.3f} GB; KV duplicated {self.p_kv:.3f} ({self.kv_bytes / 1e9:.3f} GB), {rest}"]
        lines += [d.explain() for d in self.decisions.values()]
        room = [e.describe() for e in self.evictions if e.for_kv]
        if room:
            lines.append(f"evicted for KV duplicates: {', '.join(room)}")
        if self.precached:
            lines.append(f"pre-cached: {self.precached}")
        return "\n".join(lines)


class Scheduler:
    def __init__(self, config, timing=None, strategy_of=None):
        """`strategy_of(site)`, if given, fixes every site's strategy instead of Algorithm 1
        (the whole-step replay's mixed step), its factors held idealized as a forced
        strategy's are; `config.forced_strategy` is the same for one strategy on every site."""
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
        self.budget = config.gpu_budget()
        self.temps = Temperatures(config.temperature_increment, config.temperature_relaxation)
        self.ranks = {}             # adapter -> rank
        self.cached = {}            # Site -> frozenset of parts held on the GPU; change with _hold
        self._adapter_bytes = 0.0   # sum of site_bytes over `cached`
        self._holding = {}          # adapter -> its sites with any factor cached (> 0)
        self._whole = {}            # adapter -> its sites with both factors cached
        self._version = {}          # adapter -> how many times _hold changed one of its sites
        self.p_kv = 0.0             # share of the batch's KV units duplicated on the GPU
        self.kv = None              # _KvShare of this step's batch
        self.rounds = {}            # round name -> RoundLoad of one layer, as decided so far
        self._products = {}         # round name -> {Site: (LoraCost, device, copies)}
        self.step_count = 0
        self._projections = {p.name: p for p in self.model.projections}
        self._kv_token_bytes = self.model.kv_bytes_per_token() * config.kv_scale
        self._repeat = None         # (key, decisions, rounds): the last step, if it can repeat
        self._kv_hints = {}         # on_devices -> the last step's best KV share (where a search starts)
        self._serving_memo = None   # (step, {(site, parts, batch): its eviction option})
        self._precache_need = {}    # adapter -> ((version, rank), missing parts by site, their bytes)

    # ---- adapters -----------------------------------------------------------------------

    def register(self, adapter, rank):
        """Add an adapter (it lives on device adapter mod num_devices)."""
        if not 1 <= rank <= self.config.max_lora_rank:
            raise SchedulerError(f"adapter {adapter!r}: rank {rank!r} outside 1..max_lora_rank="
                                 f"{self.config.max_lora_rank!r}")
        if adapter not in self.ranks and len(self.ranks) >= self.config.max_cpu_loras:
            raise SchedulerError(f"adapter {adapter!r}: the pool already holds max_cpu_loras="
                                 f"{self.config.max_cpu_loras!r} adapters")
        self.ranks[adapter] = rank
        self.temps.register(adapter)

    def device_of(self, adapter):
        return adapter % self.config.num_devices

    def sites(self, adapter):
        return [Site(adapter, p.name) for p in self.model.projections]

    def site_bytes(self, site, parts):
        """GPU bytes of `parts` of a site's factors over every layer."""
        p = self._projections[site.projection]
        a, b = factor_bytes(p.d_in, p.d_out, self.ranks[site.adapter])
        return ((a if "A" in parts else 0) + (b if "B" in parts else 0)) * self.model.layers * self.model.copies(p)

    # ---- memory -------------------------------------------------------------------------

    def kv_bytes(self, p_kv=None):
        """GPU bytes of the KV duplicates at share p_kv (default: the current) of this step's batch."""
        if self.kv is None:
            return 0.0
        return self.kv.bytes(self.kv.units_of(self.p_kv if p_kv is None else p_kv))

    def adapter_bytes(self):
        return self._adapter_bytes

    def used_bytes(self):
        return self.adapter_bytes() + self.kv_bytes()

    def free_bytes(self):
        return self.budget - self.used_bytes()

    def cached_adapters(self):
        return set(self._holding)

    def _hold(self, site, parts):
        """Set the factors of `site` the GPU holds (the one place `cached` changes)."""
        before = self.cached.pop(site, _NOTHING)
        self._adapter_bytes += self.site_bytes(site, parts) - self.site_bytes(site, before)
        if parts:
            self.cached[site] = frozenset(parts)
        a = site.adapter
        self._version[a] = self._version.get(a, 0) + 1
        for counter, had, has in ((self._holding, bool(before), bool(parts)),
                                  (self._whole, "A" in before and "B" in before, "A" in parts and "B" in parts)):
            if has != had:
                count = counter.get(a, 0) + (1 if has else -1)
                if count:
                    counter[a] = count
                else:
                    del counter[a]

    def _idle_coldest(self, serving):
        """The adapters holding factors that no request in `serving` uses, coldest first."""
        return sorted(set(self._holding) - set(serving), key=lambda a: (self.temps[a], a))

    def _held_bytes(self, a):
        """GPU memory adapter `a`'s cached factors take."""
        return sum(self.site_bytes(s, self.cached.get(s, _NOTHING)) for s in self.sites(a))

    def keep(self, site, parts, serving=frozenset()):
        """Keep `parts` of a site's factors that the GPU has just read over the link (a
        prefill's E2) in GPU memory: GPU memory is "a software-managed cache for the devices"
        (section V-A), and a read is a cache fill. To make room it evicts idle adapters (not
        in `serving`, the adapters of the running and admitted requests), coldest first, as
        S-LoRA's unified paging evicts its least recently used: the request that read them
        decodes next, and without them every decode step reads them again (or loads them,
        which the prefill's read already paid for). It evicts nothing when the idle adapters
        together cannot make the room. Returns whether they are held now."""
        missing = frozenset(parts) - self.cached.get(site, _NOTHING)
        if not missing:
            return True
        if self._forced:
            return False
        need = self.site_bytes(site, missing)
        need_slot = site.adapter not in self._holding and len(self._holding) >= self.config.max_loras
        victims, free = [], self.free_bytes()
        for a in self._idle_coldest(set(serving) | {site.adapter}):
            if need <= free and not need_slot:
                break
            victims.append(Eviction("cold", a, frozenset(PARTS), self._held_bytes(a), 0.0))
            free += victims[-1].nbytes
            need_slot = False
        if need > free or need_slot:
            return False
        for e in victims:
            self._apply_eviction(e)
        self._hold(site, self.cached.get(site, _NOTHING) | missing)
        self._check_budget("keep")
        return True

    # ---- costs --------------------------------------------------------------------------

    def product(self, site, strategy, batch):
        """(LoraCost of one layer, device, copies) of a site's product under `strategy`."""
        p = self._projections[site.projection]
        c = self.cost.lora_cost(strategy, batch, p.d_in, p.d_out, self.ranks[site.adapter])
        return c, self.device_of(site.adapter), self.model.copies(p)

    def site_cost(self, site, strategy, batch):
        """(the time `strategy` adds to this step over every layer, why infeasible): how
        much longer the site's round gets with its product in it, given the products
        decided so far (the module docstring)."""
        c, device, copies = self.product(site, strategy, batch)
        if c.infeasible:
            return INF, c.infeasible
        load = self.rounds[ROUND_OF[site.projection]]
        trial = load.copy()
        self.cost.add_lora(trial, c, device, copies)
        return (trial.seconds(self.link) - load.seconds(self.link)) * self.model.layers, None

    def best_with(self, site, parts, batch):
        """The fastest feasible strategy needing only `parts` on the GPU: (time, strategy)."""
        options = [(self.site_cost(site, s, batch)[0], s.name, s) for s in self._strategies
                   if _GPU_PARTS[s] <= parts]
        t, _, s = min(options)
        return t, s

    def attention_s(self, p_kv=None):
        """Attention time of one step over every layer with a KV share p_kv (default: the
        current) duplicated on the GPU (Table V)."""
        if self.kv is None:
            return 0.0
        return self.kv.seconds(self.kv.units_of(self.p_kv if p_kv is None else p_kv))

    def load_s(self, nbytes):
        """A one-time load of `nbytes` over the link, amortized over expected_steps."""
        return amortized_load_s(self.link, nbytes, self.config.expected_steps)

    def _start_rounds(self, batch):
        """Every LoRA round of one layer with its base GEMM alone."""
        gemms = dict(zip((g[0] for g in self.gpu_model.gemms), self.gpu_model.layer_costs(batch)))
        self.rounds = {name: RoundLoad(name, self.config.num_devices, gemm_s=gemms[name].seconds)
                       for name, _ in LORA_ROUNDS}
        self._products = {name: {} for name, _ in LORA_ROUNDS}
        self._loading = {name: 0.0 for name, _ in LORA_ROUNDS}    # factors read over the link this step

    def _place(self, site, strategy, batch):
        """Put the site's product under `strategy` into its round (replacing its earlier one)."""
        name = ROUND_OF[site.projection]
        products = self._products[name]
        replaced = site in products
        products[site] = self.product(site, strategy, batch)
        if not replaced:
            self.cost.add_lora(self.rounds[name], *products[site])
            return
        load = RoundLoad(name, self.config.num_devices, gemm_s=self.rounds[name].gemm_s)
        for c, device, copies in products.values():
            self.cost.add_lora(load, c, device, copies)
        load.add_reads(self._loading[name])
        self.rounds[name] = load

    def _load(self, site, missing, loads):
        """Load a site's missing factors for this step: held from now on, and read over the
        link in the site's round, where its product needs them (a layer's share each layer)."""
        nbytes = self.site_bytes(site, missing)
        self._hold(site, self.cached.get(site, _NOTHING) | missing)
        loads.append((site, missing, nbytes))
        name = ROUND_OF[site.projection]
        self._loading[name] += nbytes / self.model.layers
        self.rounds[name].add_reads(nbytes / self.model.layers)

    # ---- one step -----------------------------------------------------------------------

    def step(self, requests):
        """Decide this step for `requests` (the batch); returns a StepPlan."""
        self.step_count += 1
        batch = collections.Counter()
        for r in requests:
            if r.adapter not in self.ranks:
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

        evictions, loads = [], []
        self.kv = _KvShare(self, requests) if requests else None
        # the duplicates follow the contexts: shrink the share if they outgrew the budget
        if self.p_kv > 0 and self.used_bytes() > self.budget:
            old = self.kv_bytes()
            self.p_kv = self.kv.share_fitting(self.budget - self.adapter_bytes(), self.p_kv)
            evictions.append(Eviction("kv", self.p_kv, frozenset(), old - self.kv_bytes(), 0.0))

        order = sorted(batch, key=lambda a: (-batch[a], a))
        key = tuple((a, batch[a], self.ranks[a], self._version.get(a, 0)) for a in order)
        serving = set(batch)
        if self._repeat is not None and self._repeat[0] == key:
            decisions = dict(self._repeat[1])
            self.rounds = {name: load.copy() for name, load in self._repeat[2].items()}
        else:
            decisions = self._decide_all(order, batch, serving, evictions, loads)
            # nothing loaded or evicted and every site's fastest candidate taken: the same
            # inputs give these decisions again, whatever memory is free (module docstring)
            repeatable = not evictions and not loads and (
                self._forced or all(d.reason is _FASTEST for d in decisions.values()))
            self._repeat = (key, dict(decisions), {n: l.copy() for n, l in self.rounds.items()}) if repeatable else None

        if self.kv is not None:
            _, best = self.kv.choose(self.budget - self.adapter_bytes(), self._kv_hints)
            self._make_room_for_kv(best, serving, evictions)
            self.p_kv = self.kv.share_fitting(self.budget - self.adapter_bytes(), best)
        self._check_budget("duplicating KV")
        units = self.kv.units_of(self.p_kv) if self.kv else np.zeros(0, np.int64)
        tokens = self.kv.tokens_of(units) if self.kv else np.zeros(0, np.int64)
        rounds = {name: load.copy() for name, load in self.rounds.items()}
        if self.kv is not None:
            rounds["attention"] = self.kv.load(units)[0].copy()
        precached = self._precache(serving, loads, self._link_slack(rounds)) if not self._forced else []
        on_devices = self.kv.on_devices if self.kv is not None else self.cost.distributed_attention
        total = sum(r.context for r in requests)
        return StepPlan(self.step_count, decisions, float(tokens.sum()) / total if total else 0.0,
                        {r.rid: int(u) for r, u in zip(requests, units)},
                        {r.rid: int(t) for r, t in zip(requests, tokens)}, self.kv_bytes(), loads,
                        evictions, precached, self.used_bytes(), self.budget, rounds, on_devices)

    def _decide_all(self, order, batch, serving, evictions, loads):
        """Algorithm 1 over every site of every serving adapter, largest batch first."""
        self._start_rounds(sum(batch.values()))
        decisions = {}
        for adapter in order:
            b = batch[adapter]
            for site in self.sites(adapter):
                decision = self._decide(site, b, serving, batch)
                for e in decision.chosen.evictions:
                    self._apply_eviction(e)
                    evictions.append(e)
                    if e.kind == "serving" and e.target in decisions:
                        decisions[e.target] = self._downgrade(decisions[e.target], site)
                missing = _GPU_PARTS[decision.chosen.strategy] - self.cached.get(site, _NOTHING)
                if missing and not self._forced:
                    self._load(site, missing, loads)
                decisions[site] = decision
                self._place(site, decision.chosen.strategy, b)
                self._check_budget("deciding", site)
        return decisions

    def _make_room_for_kv(self, best, serving, evictions):
        """Evict idle adapters to make room for the KV share of least attention time: cold
        ones freely (coldest first), hot ones only where the attention time they buy exceeds
        their reload, amortized (the duplicates "compete with LoRA adapters for GPU memory"
        and the memory manager "evicts them using our algorithm and cost model", section
        V-B: here in the other direction)."""
        want = self.kv.bytes(self.kv.units_of(best))
        if want <= self.budget - self.adapter_bytes():
            return
        hot = set(self.temps.hottest(self.config.hot_set_size, exclude=serving))
        for a in self._idle_coldest(serving):
            room = self.budget - self.adapter_bytes()
            if want <= room:
                break
            held = self._held_bytes(a)
            penalty = 0.0
            if a in hot:
                penalty = self.load_s(held)
                gain = (self.attention_s(self.kv.share_fitting(room, best))
                        - self.attention_s(self.kv.share_fitting(room + held, best)))
                if gain <= penalty:
                    continue
            e = Eviction("hot" if a in hot else "cold", a, frozenset(PARTS), held, penalty, for_kv=True)
            self._apply_eviction(e)
            evictions.append(e)

    def _check_budget(self, doing, site=None):
        used = self.used_bytes()
        if used > self.budget * (1 + 1e-12) or len(self._holding) > self.config.max_loras:
            if site is not None:
                doing = f"{doing} {site}"
            if used > self.budget * (1 + 1e-12):
                raise AssertionError(f"GPU memory {used!r} exceeds the budget {self.budget!r} after {doing}")
            raise AssertionError(f"{len(self._holding)} adapters cached exceed max_loras after {doing}")

    # ---- Algorithm 1 --------------------------------------------------------------------

    def _rank(self, site, rank, b, parts):
        """The candidates ranked by the time each adds to the step (line 3)."""
        candidates = []
        for s in self._strategies:
            step_s, why = self.site_cost(site, s, b)
            need = self.site_bytes(site, _GPU_PARTS[s] - parts)
            candidates.append(Candidate(s, step_s, self.load_s(need), need, (), why))
        return tuple(sorted(candidates, key=lambda c: (c.total_s, c.strategy.name)))

    def _decide(self, site, b, serving, batch):
        parts = self.cached.get(site, _NOTHING)
        rank = self.ranks[site.adapter]
        if self._forced:
            return self._forced_decision(site, b, rank, parts)
        free = self.free_bytes()
        slot_free = (site.adapter in self._holding
                     or len(self._holding) < self.config.max_loras)
        ranked = self._rank(site, rank, b, parts)

        def fits(c):
            return c.need_bytes <= free and (slot_free or not c.need_bytes)
        fitting = [c for c in ranked if not c.infeasible and fits(c)]   # E2 needs nothing: never empty
        best_fit = fitting[0]
        if best_fit is ranked[0]:
            return Decision(site, b, rank, parts, ranked, best_fit, _FASTEST)

        # lines 8-20: make room for each faster candidate, price it, re-rank
        options = [best_fit]
        priced = []
        for c in ranked:
            if c is best_fit:
                break
            if c.infeasible:
                continue
            plan, why = self._eviction_plan(site, c.need_bytes - free, not slot_free, serving, batch)
            if plan is None:
                priced.append(dataclasses.replace(c, infeasible=f"cannot free {c.need_bytes / 1e6:.2f} MB: {why}"))
                continue
            c = dataclasses.replace(c, evictions=tuple(plan))
            priced.append(c)
            options.append(c)
        chosen = min(options, key=lambda c: (c.total_s, c.strategy.name))
        others = [c for c in ranked if c.strategy not in {p.strategy for p in priced} and c is not best_fit]
        table = tuple(sorted(priced + [best_fit] + others, key=lambda c: (c.total_s, c.strategy.name)))
        if chosen is best_fit:
            reason = "fastest that fits; every faster one costs more with its evictions (lines 19-20)"
        elif all(e.kind == "cold" for e in chosen.evictions):
            reason = "fastest after evicting cold adapters (line 8)"
        else:
            reason = "fastest after evictions, re-ranked with their penalties (lines 15-20)"
        return Decision(site, b, rank, parts, table, chosen, reason)

    def _forced_decision(self, site, b, rank, parts):
        """The forced strategy, or E4 where the device cannot run it (E3 on a weight that is
        not square: LORA_XAB's A is D x R and B R x D). Its factors are idealized as the
        paper's ND(E4) is (VII-D: 'E4 there caches one LoRA matrix per layer and per
        injected weight, 91 GB at their mean rank, which no H100 holds'): held without
        taking GPU memory or a cache slot."""
        forced = self._forced(site)
        step_s, why = self.site_cost(site, forced, b)
        strategy, reason = forced, f"forced {forced.name}"
        if why:
            strategy, reason = Strategy.E4, f"forced {forced.name}, which the device cannot run here: E4"
            step_s, why = self.site_cost(site, strategy, b)
        chosen = Candidate(strategy, step_s, infeasible=why)
        return Decision(site, b, rank, parts, (chosen,), chosen, reason)

    def _downgrade(self, decision, taker):
        """A site decided earlier this step lost factors to `taker`: its fastest strategy
        among those the factors left allow."""
        parts = self.cached.get(decision.site, _NOTHING)
        step_s, strategy = self.best_with(decision.site, parts, decision.batch)
        self._place(decision.site, strategy, decision.batch)
        return dataclasses.replace(decision, chosen=Candidate(strategy, step_s),
                                   reason=f"downgraded: its factors were evicted for {taker.adapter}/{taker.projection} "
                                          f"(lines 15-18)")

    def _eviction_plan(self, site, short, need_slot, serving, batch):
        """Residents to evict so that `short` more bytes (and a cache slot, if `need_slot`)
        are free: cold adapters first, coldest first (line 8); then, cheapest penalty per
        byte first, KV duplicates, hot adapters and other serving adapters' factors
        (lines 15-18). Returns (evictions, None) or (None, why)."""
        hot = set(self.temps.hottest(self.config.hot_set_size, exclude=serving))
        idle = self._idle_coldest(serving)
        held = {a: self._held_bytes(a) for a in idle}
        plan, freed, slot = [], 0.0, not need_slot
        for a in idle:                                              # line 8
            if a in hot:
                continue
            if freed >= short and slot:
                break
            plan.append(Eviction("cold", a, frozenset(PARTS), held[a], 0.0))
            freed += held[a]
            slot = True
        if freed >= short and slot:
            return plan, None

        # lines 15-18, cheapest penalty per byte first (ties: hot adapters, KV, serving
        # factors, each group in its own order)
        hot_options = [Eviction("hot", a, frozenset(PARTS), held[a], self.load_s(held[a])) for a in idle if a in hot]
        taken = None
        if not slot:
            # only a whole adapter frees a cache slot (max_loras): the cheapest hot one
            if not hot_options:
                return None, f"max_loras={self.config.max_loras!r} adapters are cached and none is idle"
            taken = min(hot_options, key=lambda e: e.penalty_s)
            plan.append(taken)
            freed += taken.nbytes
            if freed >= short:
                return plan, None
        options = [((_penalty_per_byte(e), 0, i), e) for i, e in enumerate(hot_options) if e is not taken]
        kv_now = self.kv_bytes()
        if kv_now:
            penalty = max(0.0, self.attention_s(0.0) - self.attention_s())
            options.append(((penalty / kv_now, 1, 0), None))
        options += [((_penalty_per_byte(e), 2, i), e) for i, e in enumerate(self._serving_options(site, serving, batch))]
        for _, e in sorted(options, key=lambda option: option[0]):
            if freed >= short:
                break
            if e is None:
                # take only the KV that is needed: the largest share that frees enough
                p = self.kv.share_fitting(kv_now - (short - freed), self.p_kv)
                e = Eviction("kv", p, frozenset(), kv_now - self.kv_bytes(p),
                             max(0.0, self.attention_s(p) - self.attention_s()))
            plan.append(e)
            freed += e.nbytes
        if freed >= short:
            return plan, None
        return None, f"only {freed / 1e6:.2f} MB of {short / 1e6:.2f} MB can be freed"

    def _serving_options(self, taker, serving, batch):
        """The serving sites' options: the A factor (else what is held) of every site of
        another serving adapter, priced by its site's slowdown and, as a hot adapter's
        eviction is, by its reload, amortized: a serving adapter will want its factors
        back while its batch lasts, and without that term two sites short of memory take
        each other's factors step after step, each load crossing the link."""
        # a site's option is priced once a step, against the rounds as they stand when it is
        # first asked for (an eviction plan under memory pressure asks for every one, for
        # every site decided: pricing them all again each time took most of a run's time)
        if self._serving_memo is None or self._serving_memo[0] != self.step_count:
            self._serving_memo = (self.step_count, {})
        priced = self._serving_memo[1]
        out = []
        for s, parts in self.cached.items():
            if s.adapter not in serving or s.adapter == taker.adapter or not parts:
                continue
            b = batch[s.adapter]
            e = priced.get((s, parts, b))
            if e is None:
                drop = frozenset("A") if "A" in parts else parts
                nbytes = self.site_bytes(s, drop)
                penalty = self.best_with(s, parts - drop, b)[0] - self.best_with(s, parts, b)[0]
                e = priced[(s, parts, b)] = Eviction("serving", s, drop, nbytes,
                                                     max(0.0, penalty) + self.load_s(nbytes))
            out.append(e)
        return out

    def _apply_eviction(self, e):
        if e.kind in ("cold", "hot"):
            for s in self.sites(e.target):
                self._hold(s, _NOTHING)
        elif e.kind == "kv":
            self.p_kv = min(self.p_kv, e.target)
        else:
            self._hold(e.target, self.cached.get(e.target, _NOTHING) - e.parts)

    # ---- pre-caching --------------------------------------------------------------------

    def _link_slack(self, rounds):
        """Bytes the link's pool -> GPU direction can carry this step without lengthening it:
        in each round of each layer, its time less a round trip and what it carries already."""
        w = self.link.bytes_per_s
        return self.model.layers * sum(
            max(0.0, load.seconds(self.link) - self.link.round_trip_s - self.link.transfer_s(load.to_gpu)) * w
            for load in rounds.values())

    def _precache(self, serving, loads, slack):
        """Pre-cache the hottest non-serving adapters (A and B of every site) with the memory
        and cache slots left, in the background: as many as the link's idle time this step
        carries (`slack` bytes), so that no step waits for them; never evicts anything."""
        done = []
        every = len(self._projections)
        for a in self.temps.hottest(self.config.hot_set_size, exclude=serving):
            if self._whole.get(a, 0) == every:
                continue                                # holds everything: needs nothing
            known = self._precache_need.get(a)
            if known is None or known[0] != (self._version.get(a, 0), self.ranks[a]):
                missing = {s: frozenset(PARTS) - self.cached.get(s, _NOTHING) for s in self.sites(a)}
                known = self._precache_need[a] = ((self._version.get(a, 0), self.ranks[a]), missing,
                                                  sum(self.site_bytes(s, m) for s, m in missing.items()))
            _, missing, need = known
            if not need:
                continue
            if a not in self._holding and len(self._holding) >= self.config.max_loras:
                break
            if need > self.free_bytes() or need > slack:
                continue
            slack -= need
            for s, m in missing.items():
                if m:
                    self._hold(s, self.cached.get(s, _NOTHING) | m)
                    loads.append((s, m, self.site_bytes(s, m)))
            done.append(a)
        self._check_budget("pre-caching")
        return done


def _penalty_per_byte(e):
    """The eviction options' sort key (lines 15-18)."""
    return e.penalty_s / e.nbytes if e.nbytes else INF


class _KvShare:
    """A batch's KV pages and its attention round under every share (scheduler.kv_pages):
    a share p of the batch's units is spread over the requests as evenly as their pages
    allow (water-filling), and prices as cost.AttentionTable does, every layer, the pages
    the GPU does not hold computed by the devices (`on_devices`) or read over the link."""

    def __init__(self, sched, requests):
        m = sched.model
        self.sched = sched
        self.table = AttentionTable(sched.cost, [r.context for r in requests], [r.rid for r in requests],
                                    m.q_heads, m.kv_heads, m.head_dim)
        self.caps = self.table.layout.units
        self.total = int(self.caps.sum())
        self.on_devices = sched.cost.distributed_attention
        self.modes = (True, False) if self.on_devices else (False,)
        self._units, self._loads = {}, {}

    def units_of(self, p_kv):
        """Units per request of a share p_kv of all units."""
        total = min(int(p_kv * self.total), self.total)
        units = self._units.get(total)
        if units is None:
            units = self._units[total] = water_fill(self.caps, total)
        return units

    def tokens_of(self, units):
        return self.table.gpu_tokens[units, self.table.requests]

    def bytes(self, units):
        return float(self.tokens_of(units).sum()) * self.sched._kv_token_bytes

    def load(self, units, on_devices=None):
        """(RoundLoad of one layer, GPU KV bytes) with the GPU holding `units` (kept: the
        search asks for the same shares again)."""
        on_devices = self.on_devices if on_devices is None else on_devices
        key = (int(units.sum()), on_devices)        # units come from units_of: one per total
        found = self._loads.get(key)
        if found is None:
            found = self._loads[key] = self.table.load(units, on_devices)
        return found

    def seconds(self, units, on_devices=None):
        """The attention round over every layer with the GPU holding `units`."""
        return self.load(units, on_devices)[0].seconds(self.sched.link) * self.sched.model.layers

    def share_fitting(self, nbytes, upper):
        """The largest share <= upper whose duplicates take at most `nbytes`."""
        if self.bytes(self.units_of(upper)) <= nbytes:
            return upper
        lo, hi = 0, min(int(upper * self.total), self.total)     # in units: bytes grow with them
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.bytes(self.units_of(mid / self.total)) <= nbytes:
                lo = mid
            else:
                hi = mid - 1
        return lo / self.total if self.total else 0.0

    def best_share(self, on_devices=None, hint=None):
        """The share of least attention time. The GPU's side grows with the share and the
        pool's shrinks, so the least is where they cross: the first share whose GPU side
        is no shorter than the pool's, or the one before it (a bisection; `hint`, the last
        step's share, is tried first, since contexts grow a token a step), or an end."""
        if not self.total:
            return 0.0
        link = self.sched.link

        def gpu_ahead(u):
            load = self.load(self.units_of(u / self.total), on_devices)[0]
            return load.gpu_s >= load.pool_s(link)
        lo, hi = 0, self.total
        if hint is not None:
            guess = min(int(hint * self.total), self.total)
            if gpu_ahead(guess):
                hi = guess
                if guess == 0 or not gpu_ahead(guess - 1):
                    lo = guess
            else:
                lo = guess + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if gpu_ahead(mid):
                hi = mid
            else:
                lo = mid + 1
        candidates = sorted({0, self.total, max(lo - 1, 0), lo})
        best = min(candidates, key=lambda u: (self.seconds(self.units_of(u / self.total), on_devices), u))
        return best / self.total

    def choose(self, room, hints):
        """(on_devices, the share of least attention time): the devices compute what the GPU
        does not hold, or the GPU reads it over the link, whichever is faster at the share
        each would get in `room` bytes of GPU memory (the devices first on a tie). A device
        is slower than the link where its MACs bind: a GQA group of 8 query heads per KV
        head does 8 FLOPs per KV byte against the core's 2 (docs/scheduler.md)."""
        options = []
        for mode in self.modes:
            best = hints[mode] = self.best_share(mode, hints.get(mode))
            fitted = self.share_fitting(room, best)
            options.append((self.seconds(self.units_of(fitted), mode), not mode, mode, best))
        _, _, mode, best = min(options)
        self.on_devices = mode
        return mode, best
