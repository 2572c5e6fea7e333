"""The registered adapters: each one's rank, home device, sites and the bytes of its factors.

An adapter lives on device `adapter mod num_devices` (the pool's placement); its sites are
the model's injected weights (one per projection), each with an A (d_in x R) and a B
(R x d_out) factor per layer and per copy of the weight (scheduler.cost.factor_bytes).
"""
from __future__ import annotations

from isa.system import ModelConfig

from .cost import factor_bytes
from .entities import BOTH, SchedulerError, Site


class Adapters:
    def __init__(self, model: ModelConfig, num_devices: int, max_lora_rank: int, max_cpu_loras: int):
        self.model = model
        self.num_devices = num_devices
        self.max_lora_rank = max_lora_rank
        self.max_cpu_loras = max_cpu_loras
        self.ranks: dict[int, int] = {}         # adapter -> rank, in registration order
        self._projections = {p.name: p for p in model.projections}
        self._sites: dict[int, tuple[Site, ...]] = {}
        self._whole: dict[int, int] = {}        # adapter -> whole_bytes (asked each step per hot adapter)

    def register(self, adapter: int, rank: int) -> None:
        """Add an adapter. Its rank is fixed from then on: the GPU memory ledger counts its
        held factors at that rank (registering it again with another rank is refused)."""
        if not 1 <= rank <= self.max_lora_rank:
            raise SchedulerError(f"adapter {adapter!r}: rank {rank!r} outside 1..max_lora_rank="
                                 f"{self.max_lora_rank!r}")
        if adapter in self.ranks:
            if self.ranks[adapter] != rank:
                raise SchedulerError(f"adapter {adapter!r}: registered with rank {self.ranks[adapter]!r}, "
                                     f"not {rank!r}")
            return
        if len(self.ranks) >= self.max_cpu_loras:
            raise SchedulerError(f"adapter {adapter!r}: the pool already holds max_cpu_loras="
                                 f"{self.max_cpu_loras!r} adapters")
        self.ranks[adapter] = rank
        self._sites[adapter] = tuple(Site(adapter, p.name) for p in self.model.projections)
        self._whole[adapter] = sum(self.site_bytes(s, BOTH) for s in self._sites[adapter])

    def __contains__(self, adapter: object) -> bool:
        return adapter in self.ranks

    def device_of(self, adapter: int) -> int:
        return adapter % self.num_devices

    def sites(self, adapter: int) -> tuple[Site, ...]:
        """The adapter's sites, in the model's projection order (the order Algorithm 1 decides them)."""
        return self._sites[adapter]

    def site_bytes(self, site: Site, parts: frozenset | str) -> int:
        """GPU bytes of `parts` of a site's factors over every layer (an integer: sums of
        them are exact in any order, which the ledger's running totals rely on)."""
        p = self._projections[site.projection]
        a, b = factor_bytes(p.d_in, p.d_out, self.ranks[site.adapter])
        return ((a if "A" in parts else 0) + (b if "B" in parts else 0)) * self.model.layers * self.model.copies(p)

    def whole_bytes(self, adapter: int) -> int:
        """GPU bytes of every factor of every site of the adapter."""
        return self._whole[adapter]
