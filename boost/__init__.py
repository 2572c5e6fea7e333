"""BOOST (seed 002): concurrent, bandwidth-proportional access to both memory tiers.

Layers, each a small module:
- `config`: the machine (two tiers, SMs, page size) and the model shapes as data (`configs/`);
- `pages`: PAM's placements (MPP with superpages, LPP) and the alternatives (BAPP-R,
  Linux weighted interleave, proportional interleave);
- `kernels`: kernels as grids of CTAs with per-CTA byte ranges (add, GEMM, paged attention);
- `waves`: the wave-level bandwidth model, the stall rule, prefetching and UVM;
- `dsr`: the data shape remapper (two block types, two free lists, sticky greedy fulfilment);
- `churn`: DSR under Poisson arrivals (Fig. 19);
- `step`: a decode step of a model under each policy (Table 4);
- `reproduce`: the claims table (`plora boost`, plora_cli/boost.py); `pool`: BOOST inside PLoRA's
  serving simulator.

`boost` imports `serving`, `scheduler`, `isa`; nothing there imports `boost` (the serving
simulator reaches `boost.pool` only by the name a run config gives, serving/tiering.py).
"""
