"""BOOST inside PLoRA's pool (issue 15, item 5): PAM places a share of the base weights and
DSR a share of the GPU-side KV (PLoRA's duplicates) in the device pool, which the GPU's own
kernels read over the link while they read HBM; the serving simulator takes it as a run's
`tiering` ("boost.pool:tiering", serving/tiering.py).

What changes, and how the simulator prices it (serving/systems.py):
- the weight GEMMs read 1/(K+1) of the weights over the link (MPP, K = ceil(1/alpha)); a GEMM
  takes `memory_s` (the wave model's fluid bounds: both tiers' bandwidths and the SMs' budget),
  and the link's pool -> GPU direction carries those bytes beside PLoRA's results;
- the GPU's attention share reads 1/M of its KV heads from the pool (DSR over the duplicated
  tokens: those heads are not duplicated, the pool holds them already);
- capacity: HBM gains the weights' pool share (the scheduler's GPU budget grows by it), the
  pool loses it; DSR's heads need no HBM (reported, docs/boost.md).
`compare` runs PLoRA alone and with BOOST over the links and workloads and tabulates both.
"""
import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from isa.system import GpuConfig, LinkConfig, ModelConfig, load_gpu, load_link
from serving.config import load_serving_config
from serving.engine import run as serve

from .config import CONFIG_DIR, Machine, modulus_for
from .waves import WaveModel

TIERING = "boost.pool:tiering"
PAM_ONLY = "boost.pool:tiering_weights"


Echo = Callable[[str], object]      # where a table's lines go: print, click.echo, a list's append


def _params() -> dict[str, Any]:
    return {k: v for k, v in json.loads((CONFIG_DIR / "pool.json").read_text()).items() if not k.startswith("_")}


@dataclasses.dataclass(frozen=True)
class BoostTiering:
    machine: Machine

    @property
    def modulus(self) -> int:
        return self.machine.placement_modulus

    @property
    def weight_share(self) -> float:
        return 1 / self.modulus

    dsr: bool = True

    @property
    def kv_share(self) -> float:
        return 1 / self.modulus if self.dsr else 0.0

    def memory_s(self, hbm_bytes: float, pool_bytes: float) -> float:
        return WaveModel(self.machine).fluid_s(hbm_bytes, pool_bytes)

    def describe(self) -> str:
        m = self.machine
        return (f"BOOST: alpha {m.alpha:.4f}, modulus {self.modulus} (1/{self.modulus} of the weights and of the "
                f"GPU-side KV heads in the pool)")


def tiering(gpu: GpuConfig, link: LinkConfig, model: ModelConfig | None = None) -> BoostTiering:
    """The serving simulator's hook: BOOST over HBM and the pool behind `link`."""
    p = _params()
    if link.bytes_per_s > gpu.hbm_bytes_per_s:
        raise ValueError(f"the link ({link.bytes_per_s:.3g} B/s) is faster than HBM: alpha must be in (0, 1]")
    alpha = link.bytes_per_s / gpu.hbm_bytes_per_s
    second_f = min(1.0, p["second_sm_fraction_at"] * link.bytes_per_s / p["second_reference_bytes_per_s"])
    machine = Machine(f"{gpu.name}+{link.name}", gpu.hbm_bytes_per_s, link.bytes_per_s,
                      hbm_sm_fraction=p["hbm_sm_fraction"], second_sm_fraction=second_f,
                      modulus=modulus_for(alpha), hbm_bytes=gpu.hbm_bytes)
    return BoostTiering(machine)


def tiering_weights(gpu: GpuConfig, link: LinkConfig, model: ModelConfig | None = None) -> BoostTiering:
    """PAM alone: the weights across HBM and the pool, the GPU-side KV all in HBM."""
    return dataclasses.replace(tiering(gpu, link, model), dsr=False)


LINKS = ("cxl3.1", "nvlink-c2c")
WORKLOADS = ("uniform", "uniform-long")


def compare(requests: int = 128, links: Sequence[str] = LINKS, workloads: Sequence[str] = WORKLOADS,
            model: str = "llama2-7b", echo: Echo = print) -> list[dict[str, Any]]:
    """PLoRA alone and PLoRA + BOOST on each link and workload: rows of the table."""
    rows = []
    for link in links:
        for workload in workloads:
            base_cfg = load_serving_config("default", link=link, workload=workload, model=model, requests=requests)
            pair: dict[str, dict[str, Any]] = {}
            for label, spec in (("plora", None), ("plora+pam", PAM_ONLY), ("plora+boost", TIERING)):
                result = serve(base_cfg.with_(tiering=spec), progress=False)
                s = result.summary()
                sys = result.system
                pair[label] = dict(tpot_ms=s["tpot_ms"], tok_s=s["throughput_tok_s"], gemm_us=s["layer_gemm_us"],
                                   attention_us=s["layer_attention_us"], kv_dup=s["kv_dup_frac"],
                                   gpu_budget_gb=sys.scheduler.budget / 1e9,
                                   pool_kv_gb=sys.kv_capacity_bytes() / 1e9, link_util=s["link_util"])
            t = tiering(load_gpu(base_cfg.gpu), load_link(link))
            rows.append(dict(link=link, workload=workload, model=model, alpha=t.machine.alpha, modulus=t.modulus,
                             **{f"{k}_{lab}": v for lab, d in pair.items() for k, v in d.items()}))
    return rows


def print_table(rows: Iterable[Mapping[str, Any]], echo: Echo = print) -> None:
    echo("(a->b: PLoRA alone -> PLoRA + BOOST; dTPOT PAM: weights only; "
         "dTPOT BOOST: weights (PAM) and GPU-side KV (DSR))")
    echo(f"{'link':11s} {'workload':13s} {'alpha':>6s} {'mod':>4s} {'TPOT ms':>15s} {'dTPOT PAM':>9s} "
         f"{'dTPOT BOOST':>11s} {'GEMM us/layer':>15s} {'attn us/layer':>15s} {'GPU budget GB':>15s} "
         f"{'pool KV GB':>15s} {'KV on GPU':>11s}")
    for r in rows:
        a, b = "_plora", "_plora+boost"
        echo(f"{r['link']:11s} {r['workload']:13s} {r['alpha']:6.3f} {r['modulus']:4d} "
             f"{r['tpot_ms' + a]:7.2f}->{r['tpot_ms' + b]:6.2f} {r['tpot_ms_plora+pam'] / r['tpot_ms' + a] - 1:+9.2%} "
             f"{r['tpot_ms' + b] / r['tpot_ms' + a] - 1:+11.2%} "
             f"{r['gemm_us' + a]:7.1f}->{r['gemm_us' + b]:6.1f} "
             f"{r['attention_us' + a]:7.1f}->{r['attention_us' + b]:6.1f} "
             f"{r['gpu_budget_gb' + a]:7.2f}->{r['gpu_budget_gb' + b]:6.2f} "
             f"{r['pool_kv_gb' + a]:7.2f}->{r['pool_kv_gb' + b]:6.2f} "
             f"{r['kv_dup' + a]:5.0%}->{r['kv_dup' + b]:4.0%}")
