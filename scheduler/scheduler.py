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
4. duplicates KV on the GPU with what is left, up to the share that balances the GPU's and
   the devices' attention time (Table V);
5. pre-caches the hottest non-serving adapters with what is still left.

A strategy that needs factors the GPU does not hold pays their one-time load over the link,
amortized over `expected_steps` (the steps its batch is expected to last): the rule that
moves an adapter from P3 to P1 (E4 to E1) once its batch makes E1 win by more than the load.
Every decision keeps its ranked candidates, so `StepPlan.explain()` says why.

Speed (a serving simulator calls `step` every decode step): the decisions are those of the
plain algorithm above, to the bit (tests/unit/test_scheduler_speed.py holds them against
it); only repeated work is skipped. What the GPU holds is counted per adapter as it changes
(`_hold`); a site's ranked candidates and the best strategy for some cached parts are
memoized on what they depend on (projection, rank, batch, parts); an adapter whose every
site took its fastest candidate, needing nothing new, reuses those decisions while its
batch, rank and cached parts are unchanged and the budget is not overdrawn (nothing else
enters the rule then). What eviction plans see is kept while the holdings do not change.
What depends on the contexts is memoized per step (`_Contexts`): the KV share water-filling
in closed form (it places every unit asked for, so a share's bytes are units x unit bytes),
and the scan for the share of least attention time without the 33 exact times: intervals
sure to hold each time (AttentionScan.bounds) leave out the shares that cannot be the
least, and exact times (AttentionScan.totals, vectorized, the same float operations in the
same order as CostModel.attention_cost) are taken only where they decide.
"""
import bisect
import collections
import dataclasses
import heapq

import numpy as np

from .cost import INF, STRATEGIES, AttentionScan, CostModel, Strategy, amortized_load_s, factor_bytes
from .temperature import Temperatures
from .device_timing import DeviceTiming

PARTS = ("A", "B")
_GPU_PARTS = {s: s.gpu_parts for s in STRATEGIES}
_NOTHING = frozenset()
_FASTEST = "fastest, fits the GPU budget (line 6)"
_MEMO_LIMIT = 1 << 18           # entries a memo keeps before it starts over


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

    def describe(self):
        if self.kind == "kv":
            return f"KV duplicates ({self.nbytes / 1e6:.1f} MB, +{self.penalty_s * 1e6:.2f} us)"
        what = f"adapter {self.target}" if self.kind in ("cold", "hot") else \
            f"{self.target.adapter}/{self.target.projection}:{''.join(sorted(self.parts))}"
        return f"{self.kind} {what} ({self.nbytes / 1e6:.1f} MB, +{self.penalty_s * 1e6:.2f} us)"


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
    p_kv: float                 # KV share duplicated on the GPU (realized: whole pages)
    kv_tokens: dict             # rid -> the prefix of its tokens duplicated on the GPU
    kv_bytes: float
    kv_load_bytes: float        # KV copied to the GPU this step (the share grew)
    loads: list                 # (Site, parts, bytes) loaded into GPU memory this step
    evictions: list             # Eviction, in order
    precached: list             # adapters pre-cached this step
    used_bytes: float
    budget_bytes: float

    def strategy_mix(self):
        return collections.Counter(d.chosen.strategy.name for d in self.decisions.values())

    def explain(self):
        mix = ", ".join(f"{k} {v}" for k, v in sorted(self.strategy_mix().items()))
        lines = [f"step {self.step}: {len(self.decisions)} sites ({mix}); GPU {self.used_bytes / 1e9:.3f} of "
                 f"{self.budget_bytes / 1e9:.3f} GB; KV duplicated {self.p_kv:.3f} ({self.kv_bytes / 1e9:.3f} GB)"]
        lines += [d.explain() for d in self.decisions.values()]
        if self.precached:
            lines.append(f"pre-cached: {self.precached}")
        return "\n".join(lines)


class Scheduler:
    def __init__(self, config, timing=None):
        self.config = config
        self.model = config.model_config()
        self.link = config.link_config()
        self.device_cfg = config.device_config()
        self.timing = timing or DeviceTiming(self.device_cfg)
        self.cost = CostModel(config.gpu_config(), self.link, self.timing, config.num_devices,
                              distributed_attention=config.distributed_attention, kv_scale=config.kv_scale)
        # Algorithm 1's candidates; a forced strategy replaces it (the serving ablations)
        self._strategies = tuple(s for s in STRATEGIES if s.name in config.strategies)
        self._forced = Strategy[config.forced_strategy] if config.forced_strategy else None
        self.budget = config.gpu_budget()
        self.temps = Temperatures(config.temperature_increment, config.temperature_relaxation)
        self.ranks = {}             # adapter -> rank
        self.cached = {}            # Site -> frozenset of parts held on the GPU; change with _hold
        self._adapter_bytes = 0.0   # sum of site_bytes over `cached`
        self.p_kv = 0.0
        self.contexts = ()          # the current batch's contexts (KV duplicates follow them)
        self.step_count = 0
        self._projections = {p.name: p for p in self.model.projections}
        self._kv_token_bytes = self.model.kv_bytes_per_token() * config.kv_scale
        self._unit = config.kv_page_tokens * config.num_devices    # tokens of one KV unit
        self._contexts_memo = None  # _Contexts of self.contexts
        # what the GPU holds per adapter, kept by _hold
        self._holding = {}          # adapter -> its sites with any factor cached (> 0)
        self._whole = {}            # adapter -> its sites with both factors cached
        self._version = {}          # adapter -> how many times _hold changed one of its sites
        # memos of pure functions; the rank is in every key (register may change it)
        self._sites = {}            # adapter -> its sites
        self._bytes = {}            # (projection, rank, has A, has B) -> site_bytes
        self._ranked = {}           # (projection, rank, batch, parts) -> ranked candidates
        self._best = {}             # (projection, rank, batch, has A, has B) -> best_with
        self._serving_drop = {}     # (site, parts, batch, rank) -> its serving Eviction
        self._precache_need = {}    # adapter -> (version, rank, missing, need)
        self._holds = 0             # _hold calls so far
        self._residents_memo = None
        self._whole_eviction = {}   # adapter -> ((version, rank), bytes held, its "hot" Eviction)
        self._serving_memo = None
        # adapter -> (batch, rank, version, [(site, decision)]): every site took its fastest
        # candidate, which needs nothing new; valid while those and free >= 0 hold
        self._settled = {}

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
        return list(self._sites_of(adapter))

    def _sites_of(self, adapter):
        sites = self._sites.get(adapter)
        if sites is None:
            sites = self._sites[adapter] = tuple(Site(adapter, p.name) for p in self.model.projections)
        return sites

    def site_bytes(self, site, parts):
        """GPU bytes of `parts` of a site's factors over every layer."""
        rank = self.ranks[site.adapter]
        key = (site.projection, rank, "A" in parts, "B" in parts)
        nbytes = self._bytes.get(key)
        if nbytes is None:
            p = self._projections[site.projection]
            a, b = factor_bytes(p.d_in, p.d_out, rank)
            per_layer = (a if key[2] else 0) + (b if key[3] else 0)
            nbytes = self._bytes[key] = per_layer * self.model.layers * self.model.copies(p)
        return nbytes

    # ---- memory -------------------------------------------------------------------------

    def kv_share(self, p_kv, contexts=None):
        """Tokens each request keeps duplicated on the GPU for a share p_kv of all tokens.

        A request duplicates a prefix of whole pages on every device (token i on device
        i mod N), so each device skips whole pages: a unit of page_tokens x N tokens. The
        units are spread evenly over the requests (water-filling, then one more to the
        first requests with room), so a small change of p_kv moves a few units, not one
        per request."""
        memo = self._contexts(contexts)
        return list(memo.shares(memo.units(p_kv)))

    def kv_bytes(self, p_kv, contexts=None):
        memo = self._contexts(contexts)
        if memo.exact:              # the water-filling places every unit it is asked for
            return memo.units(p_kv) * self._unit * self._kv_token_bytes
        return sum(memo.shares(memo.units(p_kv))) * self._kv_token_bytes

    def _contexts(self, contexts=None):
        """The memo of everything that depends only on the contexts (this step's if None)."""
        if contexts is None or contexts is self.contexts:
            memo = self._contexts_memo
            if memo is None or memo.contexts is not self.contexts:
                memo = self._contexts_memo = _Contexts(self, self.contexts)
            return memo
        return _Contexts(self, contexts)

    def adapter_bytes(self):
        return self._adapter_bytes

    def used_bytes(self):
        return self.adapter_bytes() + self.kv_bytes(self.p_kv)

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
        self._holds += 1
        self._version[a] = self._version.get(a, 0) + 1
        for counter, had, has in ((self._holding, bool(before), bool(parts)),
                                  (self._whole, "A" in before and "B" in before, "A" in parts and "B" in parts)):
            if has != had:
                count = counter.get(a, 0) + (1 if has else -1)
                if count:
                    counter[a] = count
                else:
                    del counter[a]

    # ---- costs --------------------------------------------------------------------------

    def site_cost(self, site, strategy, batch):
        """(this step's time of the site under `strategy` over every layer, why infeasible);
        the cost model caches the per-layer cost."""
        p = self._projections[site.projection]
        c = self.cost.lora_cost(strategy, batch, p.d_in, p.d_out, self.ranks[site.adapter])
        return c.total_s * self.model.layers * self.model.copies(p), c.infeasible

    def best_with(self, site, parts, batch):
        """The fastest feasible strategy needing only `parts` on the GPU: (time, strategy)."""
        key = (site.projection, self.ranks[site.adapter], batch, "A" in parts, "B" in parts)
        best = self._best.get(key)
        if best is None:
            options = [(self.site_cost(site, s, batch)[0], s.name, s) for s in self._strategies
                       if s.gpu_parts <= parts]
            t, _, s = min(options)
            best = self._best[key] = (t, s)
        return best

    def attention_s(self, p_kv, contexts=None):
        """Attention time of one step over every layer for a KV share p_kv (Table V)."""
        contexts = self.contexts if contexts is None else contexts
        if not contexts:
            return 0.0
        memo = self._contexts(contexts)
        units = memo.units(p_kv)
        memo.price([units])
        return memo.attention[units]

    def load_s(self, nbytes):
        """A one-time load of `nbytes` over the link, amortized over expected_steps."""
        return amortized_load_s(self.link, nbytes, self.config.expected_steps)

    # ---- one step -----------------------------------------------------------------------

    def step(self, requests):
        """Decide this step for `requests` (the batch); returns a StepPlan."""
        self.step_count += 1
        contexts = tuple(r.context for r in requests)
        try:
            batch = collections.Counter([r.adapter for r in requests])
            valid = batch.keys() <= self.ranks.keys() and (not contexts or min(contexts) >= 1)
        except TypeError:
            valid = False
        if not valid:               # say which request, as the check one by one does
            batch = collections.Counter()
            for r in requests:
                if r.adapter not in self.ranks:
                    raise SchedulerError(f"request {r.rid!r}: adapter {r.adapter!r} is not registered")
                if r.context < 1:
                    raise SchedulerError(f"request {r.rid!r}: context must be >= 1 token, got {r.context!r}")
                batch[r.adapter] += 1
        if len(batch) > self.config.max_loras_per_batch:
            raise SchedulerError(f"{len(batch)!r} adapters in one batch exceed max_loras_per_batch="
                                 f"{self.config.max_loras_per_batch!r}")
        for r in requests:
            if r.new:
                self.temps.arrive(r.adapter)
        self.temps.relax()

        evictions, loads = [], []
        self.contexts = contexts
        # the duplicates follow the contexts: shrink the share if they outgrew the budget
        if self.p_kv > 0 and self.used_bytes() > self.budget:
            old = self.p_kv
            self.p_kv = self._kv_share_fitting(self.budget - self.adapter_bytes(), self.p_kv)
            evictions.append(Eviction("kv", self.p_kv, frozenset(), self.kv_bytes(old) - self.kv_bytes(self.p_kv), 0.0))

        serving = set(batch)
        decisions = {}
        free = checked = None       # both hold while nothing changes (settled adapters change nothing)
        for adapter in sorted(serving, key=lambda a: (-batch[a], a)):
            b, rank, version = batch[adapter], self.ranks[adapter], self._version.get(adapter, 0)
            settled = self._settled.get(adapter)
            if settled is not None and settled[:3] == (b, rank, version):
                if free is None:
                    free = self.free_bytes()
                if 0 <= free:
                    # what _decide gives each site again: the same ranking, its first fits
                    decisions.update(settled[3])
                    if not checked:
                        self._check_budget("deciding", settled[3][0][0])
                        checked = True
                    continue
            free = None
            made = []
            for site in self._sites_of(adapter):
                decision = self._decide(site, b, serving, batch)
                for e in decision.chosen.evictions:
                    self._apply_eviction(e)
                    evictions.append(e)
                    if e.kind == "serving" and e.target in decisions:
                        decisions[e.target] = self._downgrade(decisions[e.target], site)
                missing = _GPU_PARTS[decision.chosen.strategy] - self.cached.get(site, _NOTHING)
                if missing and not self._forced:
                    self._hold(site, self.cached.get(site, _NOTHING) | missing)
                    loads.append((site, missing, self.site_bytes(site, missing)))
                decisions[site] = decision
                self._check_budget("deciding", site)
                made.append((site, decision))
            checked = True
            if (self._version.get(adapter, 0) == version
                    and all(d.reason is _FASTEST and not d.chosen.need_bytes for _, d in made)):
                self._settled[adapter] = (b, rank, version, made)
            else:
                self._settled.pop(adapter, None)

        kv_before = self.kv_bytes(self.p_kv)
        best = self._best_kv_share(above=self.p_kv)
        if best is not None:        # else the best share is at most p_kv: the max keeps p_kv
            self.p_kv = max(self.p_kv, self._kv_share_fitting(self.budget - self.adapter_bytes(), best))
        self._check_budget("duplicating KV")
        precached = self._precache(serving, loads) if not self._forced else []
        memo = self._contexts()
        shares = memo.shares(memo.units(self.p_kv))
        realized = sum(shares) / memo.total if self.contexts else 0.0
        return StepPlan(self.step_count, decisions, realized, {r.rid: t for r, t in zip(requests, shares)},
                        self.kv_bytes(self.p_kv),
                        max(0.0, self.kv_bytes(self.p_kv) - kv_before), loads, evictions, precached,
                        self.used_bytes(), self.budget)

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
        """The four candidates ranked by cost-model time (line 3); a pure function of
        (projection, rank, batch, cached parts), memoized."""
        key = (site.projection, rank, b, parts)
        ranked = self._ranked.get(key)
        if ranked is None:
            candidates = []
            for s in self._strategies:                              # line 3: cost every strategy
                step_s, why = self.site_cost(site, s, b)
                missing = _GPU_PARTS[s] - parts
                need = self.site_bytes(site, missing)
                candidates.append(Candidate(s, step_s, self.load_s(need), need, (), why))
            ranked = tuple(sorted(candidates, key=lambda c: (c.total_s, c.strategy.name)))
            if len(self._ranked) >= _MEMO_LIMIT:
                self._ranked.clear()
            self._ranked[key] = ranked
        return ranked

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
        step_s, why = self.site_cost(site, self._forced, b)
        strategy, reason = self._forced, f"forced {self._forced.name}"
        if why:
            strategy, reason = Strategy.E4, f"forced {self._forced.name}, which the device cannot run here: E4"
            step_s, why = self.site_cost(site, strategy, b)
        chosen = Candidate(strategy, step_s, infeasible=why)
        return Decision(site, b, rank, parts, (chosen,), chosen, reason)

    def _downgrade(self, decision, taker):
        """A site decided earlier this step lost factors to `taker`: its fastest strategy
        among those the factors left allow."""
        parts = self.cached.get(decision.site, _NOTHING)
        step_s, strategy = self.best_with(decision.site, parts, decision.batch)
        return dataclasses.replace(decision, chosen=Candidate(strategy, step_s),
                                   reason=f"downgraded: its factors were evicted for {taker.adapter}/{taker.projection} "
                                          f"(lines 15-18)")

    def _eviction_plan(self, site, short, need_slot, serving, batch):
        """Residents to evict so that `short` more bytes (and a cache slot, if `need_slot`)
        are free: cold adapters first, coldest first (line 8); then, cheapest penalty per
        byte first, KV duplicates, hot adapters and other serving adapters' factors
        (lines 15-18). Returns (evictions, None) or (None, why)."""
        residents = self._residents(serving)
        hot, idle = residents.hot, residents.idle
        plan, freed, slot = [], 0.0, not need_slot
        for a in idle:                                              # line 8
            if a in hot:
                continue
            if freed >= short and slot:
                break
            nbytes = residents.nbytes[a]
            plan.append(Eviction("cold", a, frozenset(PARTS), nbytes, 0.0))
            freed += nbytes
            slot = True
        if freed >= short and slot:
            return plan, None

        # lines 15-18: the options in the order a stable sort by (penalty per byte, kind) puts
        # [hot adapters in idle order, the KV duplicates, serving factors in `cached` order]:
        # each is keyed (penalty per byte, kind, that group, its place in the group)
        taken = None
        if not slot:
            # only a whole adapter frees a cache slot (max_loras): the cheapest hot one
            if not residents.hot_options:
                return None, f"max_loras={self.config.max_loras!r} adapters are cached and none is idle"
            taken = min(residents.hot_options, key=lambda e: e.penalty_s)
            plan.append(taken)
            freed += taken.nbytes
            if freed >= short:
                return plan, None
        kv_now = self.kv_bytes(self.p_kv)
        kv = []
        if kv_now:
            penalty = max(0.0, self.attention_s(0.0) - self.attention_s(self.p_kv))
            kv = [((penalty / kv_now, "kv", 1, 0), None, None)]
        for _, owner, e in heapq.merge(residents.hot_ranked, kv, self._serving_options(serving, batch)):
            if freed >= short:
                break
            if e is None:
                # take only the KV that is needed: the largest share that frees enough
                target = self.kv_bytes(self.p_kv) - (short - freed)
                p = self._kv_share_fitting(target, self.p_kv)
                nbytes = kv_now - self.kv_bytes(p)
                e = Eviction("kv", p, frozenset(), nbytes, max(0.0, self.attention_s(p) - self.attention_s(self.p_kv)))
            elif owner == site.adapter or e is taken:
                continue
            plan.append(e)
            freed += e.nbytes
        if freed >= short:
            return plan, None
        return None, f"only {freed / 1e6:.2f} MB of {short / 1e6:.2f} MB can be freed"

    def _residents(self, serving):
        """The idle residents the eviction plans of this step see while the GPU's holdings do
        not change: the hot set, the idle cached adapters (coldest first), their bytes, the
        hot options and those ranked (key, adapter, option)."""
        key = (self.step_count, self._holds)
        memo = self._residents_memo
        if memo is not None and memo.key == key:
            return memo
        hot = set(self.temps.hottest(self.config.hot_set_size, exclude=serving))
        idle = sorted(set(self._holding) - serving, key=lambda a: (self.temps[a], a))
        nbytes, hot_options = {}, []
        for a in idle:              # what evicting a whole idle adapter frees (and costs if hot)
            stamp = (self._version.get(a, 0), self.ranks[a])
            known = self._whole_eviction.get(a)
            if known is None or known[0] != stamp:
                held = sum(self.site_bytes(s, self.cached.get(s, _NOTHING)) for s in self._sites_of(a))
                known = self._whole_eviction[a] = (stamp, held, Eviction("hot", a, frozenset(PARTS), held,
                                                                         self.load_s(held)))
            nbytes[a] = known[1]
            if a in hot:
                hot_options.append(known[2])
        ranked = sorted(((_penalty_per_byte(e), e.kind, 0, i), e.target, e) for i, e in enumerate(hot_options))
        memo = self._residents_memo = _Residents(key, hot, idle, nbytes, hot_options, ranked)
        return memo

    def _serving_options(self, serving, batch):
        """The serving sites' options, ranked (key, adapter, option): the A factor (else what
        is held) of every site of a serving adapter, priced by its site's slowdown. Kept
        while the holdings and the serving adapters' batches and ranks do not change."""
        memo = self._serving_memo
        if memo is not None and memo[2] == (self.step_count, self._holds):
            return memo[1]          # asked again this step, nothing held changed
        key = (self._holds, frozenset((a, b, self.ranks[a]) for a, b in batch.items()))
        if memo is not None and memo[0] == key:
            self._serving_memo = (key, memo[1], (self.step_count, self._holds))
            return memo[1]
        drops = self._serving_drop
        if len(drops) >= _MEMO_LIMIT:
            drops.clear()
        ranked = []
        for s, parts in self.cached.items():
            if s.adapter not in serving or not parts:
                continue
            b = batch[s.adapter]
            drop_key = (s, parts, b, self.ranks[s.adapter])
            e = drops.get(drop_key)
            if e is None:
                drop = frozenset("A") if "A" in parts else parts
                penalty = self.best_with(s, parts - drop, b)[0] - self.best_with(s, parts, b)[0]
                e = drops[drop_key] = Eviction("serving", s, drop, self.site_bytes(s, drop), max(0.0, penalty))
            ranked.append(((_penalty_per_byte(e), e.kind, 2, len(ranked)), s.adapter, e))
        ranked.sort(key=lambda entry: entry[0])
        self._serving_memo = (key, ranked, (self.step_count, self._holds))
        return ranked

    def _apply_eviction(self, e):
        if e.kind in ("cold", "hot"):
            for s in self._sites_of(e.target):
                self._hold(s, _NOTHING)
        elif e.kind == "kv":
            self.p_kv = min(self.p_kv, e.target)
        else:
            self._hold(e.target, self.cached.get(e.target, _NOTHING) - e.parts)

    # ---- KV duplicates and pre-caching --------------------------------------------------

    def _kv_share_fitting(self, nbytes, upper):
        """The largest share <= upper whose duplicates take at most `nbytes` (bisection; the
        bytes grow with the share in steps of whole pages)."""
        memo = self._contexts()
        if not memo.exact:
            kv_bytes = self.kv_bytes
            if kv_bytes(upper) <= nbytes:
                return upper
            lo, hi = 0.0, upper
            for _ in range(40):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if kv_bytes(mid) <= nbytes else (lo, mid)
            return lo
        # the same, self.kv_bytes(p) written out: min(units, caps) x unit x kv bytes per token
        total, unit, cap, unit_bytes = memo.total, memo.unit, memo.caps_sum, self._unit * self._kv_token_bytes
        if min(int(upper * total) // unit, cap) * unit_bytes <= nbytes:
            return upper
        lo, hi = 0.0, upper
        for _ in range(40):
            mid = (lo + hi) / 2
            if min(int(mid * total) // unit, cap) * unit_bytes <= nbytes:
                lo = mid
            else:
                hi = mid
        return lo

    def _best_kv_share(self, above=None):
        """The share minimizing attention time: T_ATT_GPU grows with it, T_ATT_dev shrinks; past
        the balance more duplicates only cost memory (a scan over steps of 1/32). With `above`,
        None when that share is sure to be at most `above` (fewer exact times needed)."""
        if not self.contexts:
            return None if above is not None and above >= 0.0 else 0.0
        grid = [i / 32 for i in range(33)]
        return self._contexts().least_attention(grid, above)

    def _precache(self, serving, loads):
        """Pre-cache the hottest non-serving adapters (A and B of every site) with the memory
        and cache slots left; never evicts anything."""
        done = []
        free = None                 # free_bytes(), while nothing is loaded
        whole, versions, ranks, needs = self._whole, self._version, self.ranks, self._precache_need
        every = len(self._projections)
        for a in self.temps.hottest(self.config.hot_set_size, exclude=serving):
            if whole.get(a, 0) == every:
                continue                                # holds everything: needs nothing
            known = needs.get(a)
            if known is not None and known[0] == versions.get(a, 0) and known[1] == ranks[a]:
                missing, need = known[2], known[3]
            else:
                sites = self._sites_of(a)
                missing = {s: frozenset(PARTS) - self.cached.get(s, _NOTHING) for s in sites}
                need = sum(self.site_bytes(s, m) for s, m in missing.items())
                needs[a] = (versions.get(a, 0), ranks[a], missing, need)
            if not need:
                continue
            if a not in self._holding and len(self._holding) >= self.config.max_loras:
                break
            if free is None:
                free = self.free_bytes()
            if need > free:
                continue
            for s, m in missing.items():
                if m:
                    self._hold(s, self.cached.get(s, _NOTHING) | m)
                    loads.append((s, m, self.site_bytes(s, m)))
            free = None
            done.append(a)
        self._check_budget("pre-caching")
        return done


_Residents = collections.namedtuple("_Residents", "key hot idle nbytes hot_options hot_ranked")


def _penalty_per_byte(e):
    """The eviction options' sort key (lines 15-18), with their kind."""
    return e.penalty_s / e.nbytes if e.nbytes else INF


class _Contexts:
    """What depends only on a batch's contexts: the KV shares by units of duplicates, and
    the attention time by units (memoized; the scheduler builds one per step).

    The water-filling of Scheduler.kv_share in closed form (integer contexts): with the caps
    c sorted ascending (stably) and L units to place, the requests are filled to their caps
    while c[k] x (n - k) <= L - (the caps before k); from the first k where that fails on,
    none is capped: the n - k left share what remains, q = rem // (n - k) each and one more
    to the last rem % (n - k) in that order (each floor division of the loop gives q until
    as many are left as the remainder, then q + 1, and every later cap is at least q + 1).
    So every unit is placed and the loop's final pass has nothing to add."""

    def __init__(self, sched, contexts):
        self.sched = sched
        self.contexts = contexts
        self.unit = unit = sched._unit
        self.total = sum(contexts)
        self.caps_sum = sum([t // unit for t in contexts])
        self.exact = type(self.total) is int and all(type(t) is int for t in contexts)
        # AttentionScan repeats attention_cost's default mode only
        self.scan = self.exact and sched.cost.scannable
        self._shares = {}           # units -> the shares (a list; not to be changed)
        self._rows = {}             # units -> the units of each request (an array row)
        self.attention = {}         # units -> attention seconds of the step, every layer
        self._arrays = None
        self._scan = None           # the AttentionScan of these contexts
        self._idle_gaps = None      # prefix sums, in cap order, of n - busy_at_cap
        self._lists = None          # _arrays' order, sorted caps, before, h as lists

    def units(self, p_kv):
        """The units of duplicates a share p_kv asks for (kv_share's `left`)."""
        return min(int(p_kv * self.total) // self.unit, self.caps_sum)

    def shares(self, units):
        shares = self._shares.get(units)
        if shares is None:
            if not self.exact:
                shares = self._water_fill(units)
            elif units in self._rows:
                shares = (self._rows[units] * self.unit).tolist()
            else:
                shares = self._share_list(units)
            self._shares[units] = shares
        return shares

    def _share_list(self, left):
        """One row of _sorted_units, in tokens and in request order, without arrays (one row
        is too little work for them)."""
        if self._lists is None:
            self._filling(np.zeros(0, np.int64))
            t, order, sorted_caps, before, h = self._arrays
            self._lists = order.tolist(), sorted_caps.tolist(), before.tolist(), h.tolist()
        order, sorted_caps, before, h = self._lists
        n, unit = len(order), self.unit
        first = bisect.bisect_right(h, left)
        q, r = divmod(left - before[first], max(n - first, 1))
        shares = [0] * n
        for i, u in zip(order, sorted_caps[:first] + [q] * (n - first - r) + [q + 1] * r):
            shares[i] = u * unit
        return shares

    def _water_fill(self, left):
        """Scheduler.kv_share's loop as written (contexts that are not all int)."""
        caps = [t // self.unit for t in self.contexts]
        units = [0] * len(caps)
        order = sorted(range(len(caps)), key=lambda i: caps[i])
        for k, i in enumerate(order):
            units[i] = min(caps[i], left // (len(order) - k))
            left -= units[i]
        for i in range(len(caps)):
            if left and units[i] < caps[i]:
                units[i] += 1
                left -= 1
        return [u * self.unit for u in units]

    def _filling(self, lefts):
        """For each number of units in `lefts` (an array): where the water-filling stops
        filling to caps and what the rest get, (first, q, r) in the closed form above.
        h(k) = c[k] x (n - k) + (the caps before k) does not decrease with k (its step is
        (c[k+1] - c[k]) x (n - k - 1) >= 0), so the first k with h(k) > L is a search."""
        if self._arrays is None:
            t = np.array(self.contexts, dtype=np.int64)
            caps = t // self.unit
            order = np.argsort(caps, kind="stable")
            sorted_caps = caps[order]
            before = np.zeros(t.size + 1, np.int64)
            np.cumsum(sorted_caps, out=before[1:])
            self._arrays = t, order, sorted_caps, before, sorted_caps * (t.size - np.arange(t.size)) + before[:-1]
        t, order, sorted_caps, before, h = self._arrays
        first = np.searchsorted(h, lefts, side="right")
        q, r = np.divmod(lefts - before[first], np.maximum(t.size - first, 1))
        return first, q, r

    def _sorted_units(self, lefts):
        """The units of each request, in order of cap (stable), for each number of units in
        `lefts`: one row each."""
        lefts = np.array(lefts, dtype=np.int64)
        first, q, r = self._filling(lefts)
        n = self._arrays[0].size
        position = np.arange(n)
        return np.where(position < first[:, None], self._arrays[2], q[:, None] + (position >= (n - r)[:, None]))

    def _rows_of(self, lefts):
        """The units of each request for each number of units in `lefts`: one row each."""
        missing = [u for u in lefts if u not in self._rows]
        if missing:
            units = self._sorted_units(missing)
            out = np.empty_like(units)
            out[:, self._arrays[1]] = units
            self._rows.update(zip(missing, out))
        return np.array([self._rows[u] for u in lefts]).reshape(len(lefts), len(self.contexts))

    def price(self, units_list):
        """Fill `attention` for every number of units in units_list."""
        todo = sorted({u for u in units_list if u not in self.attention})
        if todo:
            self._price(todo)

    def least_attention(self, grid, above=None):
        """min((attention_s(p), p) for p in grid)[1], or None if `above` is given and that p
        is sure to be at most `above`.

        Exact times only where they decide: every share gets an interval sure to hold its
        time (AttentionScan.bounds, times every layer: monotone). A share whose lower end
        exceeds the least upper end is slower than the share of that upper end, so it is
        not the least; if one number of units is left, its smallest p is the answer. If the
        least upper end of the shares p <= above is at most every lower end of the others
        (those of a number of units some p <= above has too tie with it), one of the former
        is the least (ties go to the smaller p), so the answer is at most `above`."""
        total, unit, cap = self.total, self.unit, self.caps_sum
        units = [min(int(p * total) // unit, cap) for p in grid]    # = self.units(p); many repeat
        distinct = set(units)
        if len(distinct) > 1 and self.scan:
            todo = sorted(distinct - self.attention.keys())
            lower, upper = self._bounds(todo)
            for u in distinct - set(todo):
                lower[u] = upper[u] = self.attention[u]
            if above is not None:
                low = {u for u, p in zip(units, grid) if p <= above}
                high = {u for u, p in zip(units, grid) if p > above} - low
                if low and min(upper[u] for u in low) <= min((lower[u] for u in high), default=INF):
                    return None
            least = min(upper.values())
            distinct = {u for u in distinct if lower[u] <= least}
        if len(distinct) == 1:                          # the same time at every p left
            return min(p for u, p in zip(units, grid) if u in distinct)
        self.price(distinct)
        return min((self.attention[u], p) for u, p in zip(units, grid) if u in distinct)[1]

    def _bounds(self, todo):
        """({units: lower}, {units: upper}) of the attention time (every layer)."""
        if not todo:
            return {}, {}
        lefts = np.array(todo, dtype=np.int64)
        lower, upper = self._scan_of().bounds(lefts, self._q_counts(lefts))
        layers = self.sched.model.layers
        return dict(zip(todo, (lower * layers).tolist())), dict(zip(todo, (upper * layers).tolist()))

    def _q_counts(self, lefts):
        """AttentionScan.q_counts of the shares of `lefts` units, in closed form: a request at
        its cap holds tokens on busy_at_cap devices, the others on all n. Those before
        `first` are at their cap; of the rest, those given q + 1 units whose cap is q + 1
        (the caps are sorted: a range)."""
        scan = self._scan_of()
        first, q, r = self._filling(lefts)
        t, order, sorted_caps = self._arrays[:3]
        if self._idle_gaps is None:         # devices a request at its cap leaves idle, summed
            self._idle_gaps = np.concatenate(([0], np.cumsum((scan.n - scan.busy_at_cap)[order])))
        gaps, requests = self._idle_gaps, t.size
        last = np.searchsorted(sorted_caps, q + 1, side="right")
        start = np.maximum(np.maximum(first, requests - r), np.searchsorted(sorted_caps, q + 1, side="left"))
        idle = gaps[first] + np.where(last > start, gaps[last] - gaps[np.minimum(start, last)], 0)
        return scan.n * requests - idle

    def _scan_of(self):
        if self._scan is None:
            if self._arrays is None:
                self._filling(np.zeros(0, np.int64))
            m = self.sched.model
            self._scan = AttentionScan(self.sched.cost, self._arrays[0], m.q_heads, m.kv_heads, m.head_dim,
                                       self.sched.config.kv_page_tokens)
        return self._scan

    def _price(self, todo):
        sched = self.sched
        m, page = sched.model, sched.config.kv_page_tokens
        if not self.scan:
            for u in todo:
                self.attention[u] = sched.cost.attention_cost(self.contexts, self.shares(u), m.q_heads, m.kv_heads,
                                                              m.head_dim, page).total_s * m.layers
            return
        rows = self._rows_of(todo)
        for u, total in zip(todo, self._scan_of().totals(rows)):
            self.attention[u] = total * m.layers
