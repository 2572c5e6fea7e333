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
"""
import collections
import dataclasses
import functools

from .cost import INF, STRATEGIES, CostModel, Strategy, amortized_load_s, factor_bytes
from .temperature import Temperatures
from .device_timing import DeviceTiming

PARTS = ("A", "B")


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
        self.cost = CostModel(config.gpu_config(), self.link, self.timing, config.num_devices)
        self.budget = config.gpu_budget()
        self.temps = Temperatures(config.temperature_increment, config.temperature_relaxation)
        self.ranks = {}             # adapter -> rank
        self.cached = {}            # Site -> frozenset of parts held on the GPU; change with _hold
        self._adapter_bytes = 0.0   # sum of site_bytes over `cached`
        self.p_kv = 0.0
        self.contexts = ()          # the current batch's contexts (KV duplicates follow them)
        self.step_count = 0
        # many shares round to the same whole pages: the grid and the eviction pricing repeat them
        self._attention_s = functools.lru_cache(maxsize=256)(self._attention_s_uncached)
        self._projections = {p.name: p for p in self.model.projections}

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
        per_layer = (a if "A" in parts else 0) + (b if "B" in parts else 0)
        return per_layer * self.model.layers * self.model.copies(p)

    # ---- memory -------------------------------------------------------------------------

    def kv_share(self, p_kv, contexts=None):
        """Tokens each request keeps duplicated on the GPU for a share p_kv of all tokens.

        A request duplicates a prefix of whole pages on every device (token i on device
        i mod N), so each device skips whole pages: a unit of page_tokens x N tokens. The
        units are spread evenly over the requests (water-filling, then one more to the
        first requests with room), so a small change of p_kv moves a few units, not one
        per request."""
        contexts = self.contexts if contexts is None else contexts
        unit = self.config.kv_page_tokens * self.config.num_devices
        caps = [t // unit for t in contexts]
        left = min(int(p_kv * sum(contexts)) // unit, sum(caps))
        units = [0] * len(caps)
        order = sorted(range(len(caps)), key=lambda i: caps[i])
        for k, i in enumerate(order):
            units[i] = min(caps[i], left // (len(order) - k))
            left -= units[i]
        for i in range(len(caps)):
            if left and units[i] < caps[i]:
                units[i] += 1
                left -= 1
        return [u * unit for u in units]

    def kv_bytes(self, p_kv, contexts=None):
        return sum(self.kv_share(p_kv, contexts)) * self.model.kv_bytes_per_token()

    def adapter_bytes(self):
        return self._adapter_bytes

    def used_bytes(self):
        return self.adapter_bytes() + self.kv_bytes(self.p_kv)

    def free_bytes(self):
        return self.budget - self.used_bytes()

    def cached_adapters(self):
        return {s.adapter for s, parts in self.cached.items() if parts}

    def _hold(self, site, parts):
        """Set the factors of `site` the GPU holds (the one place `cached` changes)."""
        before = self.cached.pop(site, frozenset())
        self._adapter_bytes += self.site_bytes(site, parts) - self.site_bytes(site, before)
        if parts:
            self.cached[site] = frozenset(parts)

    # ---- costs --------------------------------------------------------------------------

    def site_cost(self, site, strategy, batch):
        """(this step's time of the site under `strategy` over every layer, why infeasible);
        the cost model caches the per-layer cost."""
        p = self._projections[site.projection]
        c = self.cost.lora_cost(strategy, batch, p.d_in, p.d_out, self.ranks[site.adapter])
        return c.total_s * self.model.layers * self.model.copies(p), c.infeasible

    def best_with(self, site, parts, batch):
        """The fastest feasible strategy needing only `parts` on the GPU: (time, strategy)."""
        options = [(self.site_cost(site, s, batch)[0], s.name, s) for s in STRATEGIES if s.gpu_parts <= parts]
        t, _, s = min(options)
        return t, s

    def attention_s(self, p_kv, contexts=None):
        """Attention time of one step over every layer for a KV share p_kv (Table V)."""
        contexts = self.contexts if contexts is None else contexts
        if not contexts:
            return 0.0
        return self._attention_s(tuple(contexts), tuple(self.kv_share(p_kv, contexts)))

    def _attention_s_uncached(self, contexts, shares):
        m = self.model
        cost = self.cost.attention_cost(contexts, shares, m.q_heads, m.kv_heads, m.head_dim,
                                        self.config.kv_page_tokens)
        return cost.total_s * m.layers

    def load_s(self, nbytes):
        """A one-time load of `nbytes` over the link, amortized over expected_steps."""
        return amortized_load_s(self.link, nbytes, self.config.expected_steps)

    # ---- one step -----------------------------------------------------------------------

    def step(self, requests):
        """Decide this step for `requests` (the batch); returns a StepPlan."""
        self.step_count += 1
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
        self.contexts = tuple(r.context for r in requests)
        # the duplicates follow the contexts: shrink the share if they outgrew the budget
        if self.p_kv > 0 and self.used_bytes() > self.budget:
            old = self.p_kv
            self.p_kv = self._kv_share_fitting(self.budget - self.adapter_bytes(), self.p_kv)
            evictions.append(Eviction("kv", self.p_kv, frozenset(), self.kv_bytes(old) - self.kv_bytes(self.p_kv), 0.0))

        serving = set(batch)
        decisions = {}
        for adapter in sorted(serving, key=lambda a: (-batch[a], a)):
            for site in self.sites(adapter):
                decision = self._decide(site, batch[adapter], serving, batch)
                for e in decision.chosen.evictions:
                    self._apply_eviction(e)
                    evictions.append(e)
                    if e.kind == "serving" and e.target in decisions:
                        decisions[e.target] = self._downgrade(decisions[e.target], site)
                missing = decision.chosen.strategy.gpu_parts - self.cached.get(site, frozenset())
                if missing:
                    self._hold(site, self.cached.get(site, frozenset()) | missing)
                    loads.append((site, missing, self.site_bytes(site, missing)))
                decisions[site] = decision
                self._check_budget(f"deciding {site}")

        kv_before = self.kv_bytes(self.p_kv)
        self.p_kv = max(self.p_kv, self._kv_share_fitting(self.budget - self.adapter_bytes(), self._best_kv_share()))
        self._check_budget("duplicating KV")
        precached = self._precache(serving, loads)
        shares = self.kv_share(self.p_kv)
        realized = sum(shares) / sum(self.contexts) if self.contexts else 0.0
        return StepPlan(self.step_count, decisions, realized, {r.rid: t for r, t in zip(requests, shares)},
                        self.kv_bytes(self.p_kv),
                        max(0.0, self.kv_bytes(self.p_kv) - kv_before), loads, evictions, precached,
                        self.used_bytes(), self.budget)

    def _check_budget(self, doing):
        used = self.used_bytes()
        if used > self.budget * (1 + 1e-12):
            raise AssertionError(f"GPU memory {used!r} exceeds the budget {self.budget!r} after {doing}")
        if len(self.cached_adapters()) > self.config.max_loras:
            raise AssertionError(f"{len(self.cached_adapters())} adapters cached exceed max_loras after {doing}")

    # ---- Algorithm 1 --------------------------------------------------------------------

    def _decide(self, site, b, serving, batch):
        parts = self.cached.get(site, frozenset())
        rank = self.ranks[site.adapter]
        free = self.free_bytes()
        slot_free = (site.adapter in self.cached_adapters()
                     or len(self.cached_adapters()) < self.config.max_loras)
        candidates = []
        for s in STRATEGIES:                                        # line 3: cost every strategy
            step_s, why = self.site_cost(site, s, b)
            missing = s.gpu_parts - parts
            need = self.site_bytes(site, missing)
            candidates.append(Candidate(s, step_s, self.load_s(need), need, (), why))
        ranked = sorted(candidates, key=lambda c: (c.total_s, c.strategy.name))

        def fits(c):
            return c.need_bytes <= free and (slot_free or not c.need_bytes)
        fitting = [c for c in ranked if not c.infeasible and fits(c)]   # E2 needs nothing: never empty
        best_fit = fitting[0]
        if best_fit is ranked[0]:
            return Decision(site, b, rank, parts, tuple(ranked), best_fit, "fastest, fits the GPU budget (line 6)")

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

    def _downgrade(self, decision, taker):
        """A site decided earlier this step lost factors to `taker`: its fastest strategy
        among those the factors left allow."""
        parts = self.cached.get(decision.site, frozenset())
        step_s, strategy = self.best_with(decision.site, parts, decision.batch)
        return dataclasses.replace(decision, chosen=Candidate(strategy, step_s),
                                   reason=f"downgraded: its factors were evicted for {taker.adapter}/{taker.projection} "
                                          f"(lines 15-18)")

    def _eviction_plan(self, site, short, need_slot, serving, batch):
        """Residents to evict so that `short` more bytes (and a cache slot, if `need_slot`)
        are free: cold adapters first, coldest first (line 8); then, cheapest penalty per
        byte first, KV duplicates, hot adapters and other serving adapters' factors
        (lines 15-18). Returns (evictions, None) or (None, why)."""
        hot = set(self.temps.hottest(self.config.hot_set_size, exclude=serving))
        cached = self.cached_adapters() - {site.adapter}
        idle = sorted(cached - serving, key=lambda a: (self.temps[a], a))
        plan, freed, slot = [], 0.0, not need_slot
        for a in idle:                                              # line 8
            if a in hot:
                continue
            if freed >= short and slot:
                break
            nbytes = sum(self.site_bytes(s, self.cached.get(s, frozenset())) for s in self.sites(a))
            plan.append(Eviction("cold", a, frozenset(PARTS), nbytes, 0.0))
            freed += nbytes
            slot = True
        if freed >= short and slot:
            return plan, None

        options = []                                                # lines 15-18
        for a in idle:
            if a in hot:
                nbytes = sum(self.site_bytes(s, self.cached.get(s, frozenset())) for s in self.sites(a))
                options.append(Eviction("hot", a, frozenset(PARTS), nbytes, self.load_s(nbytes)))
        if not slot:
            # only a whole adapter frees a cache slot (max_loras): the cheapest hot one
            hot_options = sorted((e for e in options), key=lambda e: e.penalty_s)
            if not hot_options:
                return None, f"max_loras={self.config.max_loras!r} adapters are cached and none is idle"
            plan.append(hot_options[0])
            freed += hot_options[0].nbytes
            options.remove(hot_options[0])
            if freed >= short:
                return plan, None
        kv_now = self.kv_bytes(self.p_kv)
        if kv_now:
            penalty = self.attention_s(0.0) - self.attention_s(self.p_kv)
            options.append(Eviction("kv", 0.0, frozenset(), kv_now, max(0.0, penalty)))
        for s, parts in self.cached.items():
            if s.adapter == site.adapter or s.adapter not in serving or not parts:
                continue
            drop = frozenset("A") if "A" in parts else parts
            b = batch[s.adapter]
            penalty = self.best_with(s, parts - drop, b)[0] - self.best_with(s, parts, b)[0]
            options.append(Eviction("serving", s, drop, self.site_bytes(s, drop), max(0.0, penalty)))
        options.sort(key=lambda e: (e.penalty_s / e.nbytes if e.nbytes else INF, e.kind))
        for e in options:
            if freed >= short:
                break
            if e.kind == "kv":
                # take only the KV that is needed: the largest share that frees enough
                target = self.kv_bytes(self.p_kv) - (short - freed)
                p = self._kv_share_fitting(target, self.p_kv)
                nbytes = kv_now - self.kv_bytes(p)
                e = Eviction("kv", p, frozenset(), nbytes, max(0.0, self.attention_s(p) - self.attention_s(self.p_kv)))
            plan.append(e)
            freed += e.nbytes
        if freed >= short:
            return plan, None
        return None, f"only {freed / 1e6:.2f} MB of {short / 1e6:.2f} MB can be freed"

    def _apply_eviction(self, e):
        if e.kind in ("cold", "hot"):
            for s in self.sites(e.target):
                self._hold(s, frozenset())
        elif e.kind == "kv":
            self.p_kv = min(self.p_kv, e.target)
        else:
            self._hold(e.target, self.cached.get(e.target, frozenset()) - e.parts)

    # ---- KV duplicates and pre-caching --------------------------------------------------

    def _kv_share_fitting(self, nbytes, upper):
        """The largest share <= upper whose duplicates take at most `nbytes` (bisection; the
        bytes grow with the share in steps of whole pages)."""
        if self.kv_bytes(upper) <= nbytes:
            return upper
        lo, hi = 0.0, upper
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.kv_bytes(mid) <= nbytes else (lo, mid)
        return lo

    def _best_kv_share(self):
        """The share minimizing attention time: T_ATT_GPU grows with it, T_ATT_dev shrinks; past
        the balance more duplicates only cost memory (a scan over steps of 1/32)."""
        if not self.contexts:
            return 0.0
        grid = [i / 32 for i in range(33)]
        times = [(self.attention_s(p), p) for p in grid]
        return min(times)[1]

    def _precache(self, serving, loads):
        """Pre-cache the hottest non-serving adapters (A and B of every site) with the memory
        and cache slots left; never evicts anything."""
        done = []
        for a in self.temps.hottest(self.config.hot_set_size, exclude=serving):
            sites = self.sites(a)
            missing = {s: frozenset(PARTS) - self.cached.get(s, frozenset()) for s in sites}
            need = sum(self.site_bytes(s, m) for s, m in missing.items())
            if not need:
                continue
            if a not in self.cached_adapters() and len(self.cached_adapters()) >= self.config.max_loras:
                break
            if need > self.free_bytes():
                continue
            for s, m in missing.items():
                if m:
                    self._hold(s, self.cached.get(s, frozenset()) | m)
                    loads.append((s, m, self.site_bytes(s, m)))
            done.append(a)
        self._check_budget("pre-caching")
        return done
