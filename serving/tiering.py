"""A second tier for what stays on the GPU side: a run's `tiering` option.

PLoRA keeps the base weights and the KV duplicates in HBM. A tiering places a share of them
in the device pool instead, read by the GPU's own kernels over the link concurrently with
HBM (BOOST, seed 002: `boost.pool`). The serving simulator needs three things of it:

- `weight_share`: the share of the base weights' bytes read from the pool;
- `kv_share`: the share of the GPU's KV duplicates' bytes left in the pool and read from there;
- `memory_s(hbm_bytes, pool_bytes)`: how long a kernel takes to read both;
- optionally `describe()`: one line saying what it places (for a reader; the simulator does not call it).

The run names it as 'module:callable' (`tiering="boost.pool:tiering"`); the callable gets
(gpu, link, model) and returns the object. This file is the one place the serving simulator
reaches beyond its own packages, by that name only, so `boost` depends on `serving` and
never the reverse at import time.
"""
import importlib

from isa.system import GpuConfig, LinkConfig, ModelConfig
from scheduler.gpu_model import Tiering


def load_tiering(spec: object, gpu: GpuConfig, link: LinkConfig, model: ModelConfig) -> Tiering | None:
    if spec is None:
        return None
    module, sep, name = str(spec).partition(":")
    if not sep or not module or not name:
        raise ValueError(f"tiering must be 'module:callable', got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"tiering {spec!r}: {exc}") from None
    tiering = factory(gpu, link, model)
    for attr in ("weight_share", "kv_share", "memory_s"):
        if not hasattr(tiering, attr):
            raise ValueError(f"tiering {spec!r} lacks {attr!r}")
    for attr in ("weight_share", "kv_share"):
        if not 0 <= getattr(tiering, attr) < 1:
            raise ValueError(f"tiering {spec!r}: {attr} must be in [0, 1), got {getattr(tiering, attr)!r}")
    return tiering
