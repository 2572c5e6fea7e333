"""A step's LoRA rounds of one layer as Algorithm 1 fills them (scheduler.rounds): each
round's base GEMM, the products decided so far, and the factors read over the link for
them this step.

It is what a candidate is priced against: the time a product adds to its layer is how much
longer its round gets with it, given the products decided before it (issue 24; the
scheduler module's docstring). One is started per step that runs Algorithm 1.
"""
from __future__ import annotations

from isa.system import LinkConfig

from .cost import CostModel, LoraCost
from .entities import Site
from .gpu_model import GpuModel
from .rounds import LORA_ROUNDS, ROUND_OF, RoundLoad

# a site's product in its round: (LoraCost of one layer, its device, copies per layer)
Product = tuple[LoraCost, int, int]


class LayerRounds:
    def __init__(self, cost: CostModel, gpu_model: GpuModel, link: LinkConfig, num_devices: int, batch: int):
        """Every LoRA round of one layer for a batch of `batch` requests, its base GEMM alone."""
        self.cost = cost
        self.link = link
        self.layers = gpu_model.model.layers
        self.num_devices = num_devices
        gemms = dict(zip((g[0] for g in gpu_model.gemms), gpu_model.layer_costs(batch), strict=True))
        self.loads: dict[str, RoundLoad] = {name: RoundLoad(name, num_devices, gemm_s=gemms[name].seconds)
                                            for name, _ in LORA_ROUNDS}
        self._products: dict[str, dict[Site, Product]] = {name: {} for name, _ in LORA_ROUNDS}
        self._reads = {name: 0.0 for name, _ in LORA_ROUNDS}     # factor bytes read over the link, a layer's

    def added_s(self, site: Site, product: Product) -> float:
        """The time `product` adds to the site's round, over every layer."""
        load = self.loads[ROUND_OF[site.projection]]
        trial = load.copy()
        self.cost.add_lora(trial, *product)
        return (trial.seconds(self.link) - load.seconds(self.link)) * self.layers

    def place(self, site: Site, product: Product) -> None:
        """Put the site's product into its round (replacing its earlier one: a downgrade
        rebuilds the round, so that the round holds each site's product once)."""
        name = ROUND_OF[site.projection]
        products = self._products[name]
        replaced = site in products
        products[site] = product
        if not replaced:
            self.cost.add_lora(self.loads[name], *product)
            return
        load = RoundLoad(name, self.num_devices, gemm_s=self.loads[name].gemm_s)
        for c, device, copies in products.values():
            self.cost.add_lora(load, c, device, copies)
        load.add_reads(self._reads[name])
        self.loads[name] = load

    def add_reads(self, site: Site, nbytes: float) -> None:
        """Factors of `site` read over the link this step, `nbytes` over every layer: a
        layer's share in each layer's round, where the site's product needs them."""
        name = ROUND_OF[site.projection]
        self._reads[name] += nbytes / self.layers
        self.loads[name].add_reads(nbytes / self.layers)

    def snapshot(self) -> dict[str, RoundLoad]:
        """The rounds as they stand, copied."""
        return {name: load.copy() for name, load in self.loads.items()}
