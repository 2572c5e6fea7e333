"""The host-side scheduler of PLoRA (seed 000, sections V-A, V-B and VI).

Every decode step it decides, per adapter, where the LoRA product runs (E1-E4), how much
KV cache the GPU duplicates under a GPU memory budget, and emits the descriptors a pool of
NDP devices executes. It imports `driver/` and `sim/`; nothing there imports it.
"""
