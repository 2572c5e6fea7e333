"""The ledger of what the GPU holds beyond the base model, against its budget: the factors
of each adapter's sites (A, B or both), and the KV duplicates (a share p_kv of this step's
batch's pages, priced by scheduler.kv_share). GPU memory is "a software-managed cache for
the devices" (seed 000, section V-A); this is its directory.

`hold` is the one way the factors change; it keeps the running totals the scheduler asks
for every decision (bytes held, adapters holding a slot, whole adapters) so that none of
them is a sum over the cache. Factor bytes are integers (scheduler.adapters), so the running
totals equal the sums exactly, in any order.
"""
from __future__ import annotations

from collections.abc import Iterator

from .adapters import Adapters
from .entities import NOTHING, Site
from .kv_share import KvShare


class GpuLedger:
    def __init__(self, adapters: Adapters, budget: float, max_loras: int):
        self.adapters = adapters
        self.budget = budget            # bytes beside the base model (scheduler.config.gpu_budget)
        self.max_loras = max_loras      # adapters that may hold factors at once (cache slots)
        self.p_kv = 0.0                 # share of the batch's KV units duplicated on the GPU
        self.kv: KvShare | None = None  # the last step's batch, which p_kv is a share of
        # Site -> parts held, in the order they were last changed: the serving-eviction
        # options are listed in this order, and ties among them keep it
        self._parts: dict[Site, frozenset] = {}
        self._adapter_bytes = 0.0
        self._held: dict[int, int] = {}         # adapter -> bytes of its held factors (> 0 sites)
        self._sites: dict[int, int] = {}        # adapter -> its sites holding any factor (> 0)
        self._whole: dict[int, int] = {}        # adapter -> its sites holding both factors (> 0)

    # ---- reading ------------------------------------------------------------------------

    def parts(self, site: Site) -> frozenset:
        """The factors of `site` the GPU holds."""
        return self._parts.get(site, NOTHING)

    def items(self) -> Iterator[tuple[Site, frozenset]]:
        """Every site holding factors and its parts, in the order they last changed."""
        return iter(self._parts.items())

    def adapter_parts(self, adapter: int) -> tuple[frozenset, ...]:
        """The parts each of the adapter's sites holds, in projection order (a value: the
        settled-step cache keys on it)."""
        return tuple(self._parts.get(s, NOTHING) for s in self.adapters.sites(adapter))

    def holding(self) -> set[int]:
        """The adapters holding any factor (each takes a cache slot)."""
        return set(self._sites)

    def holds_any(self, adapter: int) -> bool:
        return adapter in self._sites

    def slot_free_for(self, adapter: int) -> bool:
        """Whether factors of `adapter` can be held without evicting a whole adapter."""
        return adapter in self._sites or len(self._sites) < self.max_loras

    def holds_whole(self, adapter: int) -> bool:
        """Whether every site of the adapter holds both factors."""
        return self._whole.get(adapter, 0) == len(self.adapters.sites(adapter))

    def held_bytes(self, adapter: int) -> int:
        """GPU memory the adapter's held factors take."""
        return self._held.get(adapter, 0)

    def missing_bytes(self, adapter: int) -> int:
        """GPU memory the adapter's factors the GPU does not hold would take."""
        return self.adapters.whole_bytes(adapter) - self._held.get(adapter, 0)

    def adapter_bytes(self) -> float:
        return self._adapter_bytes

    def kv_bytes(self, p_kv: float | None = None) -> float:
        """GPU bytes of the KV duplicates at share p_kv (default: the current) of the batch."""
        if self.kv is None:
            return 0.0
        return self.kv.share_bytes(self.p_kv if p_kv is None else p_kv)

    def used_bytes(self) -> float:
        return self.adapter_bytes() + self.kv_bytes()

    def free_bytes(self) -> float:
        return self.budget - self.used_bytes()

    def check(self, doing: str, site: Site | None = None) -> None:
        """The ledger's invariant after each change the scheduler makes: within the budget
        (to a rounding) and within max_loras adapters."""
        used = self.used_bytes()
        if site is not None and (used > self.budget * (1 + 1e-12) or len(self._sites) > self.max_loras):
            doing = f"{doing} {site}"
        if used > self.budget * (1 + 1e-12):
            raise AssertionError(f"GPU memory {used!r} exceeds the budget {self.budget!r} after {doing}")
        if len(self._sites) > self.max_loras:
            raise AssertionError(f"{len(self._sites)} adapters cached exceed max_loras after {doing}")

    # ---- changing -----------------------------------------------------------------------

    def hold(self, site: Site, parts: frozenset) -> None:
        """Set the factors of `site` the GPU holds (the one place they change)."""
        before = self._parts.pop(site, NOTHING)
        a = site.adapter
        delta = self.adapters.site_bytes(site, parts) - self.adapters.site_bytes(site, before)
        self._adapter_bytes += delta
        if parts:
            self._parts[site] = frozenset(parts)
        for counter, had, has in ((self._sites, bool(before), bool(parts)),
                                  (self._whole, "A" in before and "B" in before, "A" in parts and "B" in parts)):
            if has != had:
                count = counter.get(a, 0) + (1 if has else -1)
                if count:
                    counter[a] = count
                else:
                    del counter[a]
        held = self._held.get(a, 0) + delta
        if held:
            self._held[a] = held
        else:
            self._held.pop(a, None)

    def add(self, site: Site, parts: frozenset) -> None:
        """Hold `parts` of the site beside what it holds."""
        self.hold(site, self.parts(site) | parts)

    def drop_adapter(self, adapter: int) -> None:
        """Drop every factor of the adapter (a cold or hot eviction)."""
        for s in self.adapters.sites(adapter):
            self.hold(s, NOTHING)
