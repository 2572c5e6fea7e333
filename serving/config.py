"""A serving run as data: which system, on which hardware, under which workload.

Two kinds of file (beside this module, `configs/`):
- `systems/<name>.json`: a system the paper evaluates (section VII-A), PLoRA, its ablations
  and the baselines, each as a few switches on one mechanism (docs/serving.md says why
  each switch models what the paper describes);
- `runs/<name>.json`: a run: model, GPU, link, device and count, system, workload, batch,
  KV precision, seed. Any field can be overridden (`--set key=value` on the CLI).
"""
import dataclasses
import pathlib
from typing import Any, TypeVar

from isa.config import build_config
from scheduler.config import KV_SCALE as KV_PRECISIONS

from .workload import CONTEXT_OVERFLOW

CONFIG_DIR = pathlib.Path(__file__).parent / "configs"
STRATEGY_NAMES = ("E1", "E2", "E3", "E4")
# the run fields that override the workload config's (None: the workload's own)
WORKLOAD_FIELDS = ("requests", "seed", "trace", "popularity", "adapters", "hot_adapters", "hot_share", "zipf_alpha")
_C = TypeVar("_C", "SystemConfig", "ServingConfig")


def _need(cond: object, kind: str, name: str, what: str) -> None:
    if not cond:
        raise ValueError(f"{kind} config {name!r}: {what}")


@dataclasses.dataclass(frozen=True)
class SystemConfig:
    """How a system serves adapters and KV beyond HBM.

    kind "pool": adapters and KV live behind the link (the device pool, or Grace's memory);
      every step the host scheduler (Algorithm 1 over `strategies`, or one `forced_strategy`)
      places each adapter's product and the KV duplicates.
    kind "host": adapters live in host DRAM behind PCIe and the KV cache in HBM only
      (S-LoRA); `lora` says who computes an adapter the GPU does not hold: "gpu" loads it
      into HBM first (S-LoRA's staging), "cpu" computes it on the host (CPU-LoRA-Offload).
    """
    # (str, not str | None: isa.config checks a config's values against its fields' plain types)
    name: str
    kind: str = "pool"
    description: str = ""
    strategies: tuple = STRATEGY_NAMES      # pool: Algorithm 1's candidates
    forced_strategy: str = None             # type: ignore[assignment]  # pool: "E3" / "E4" for every site (N(E3), ND(E4), ...)
    distributed_attention: bool = True      # pool: devices compute attention partials (D)
    link: str = None                        # type: ignore[assignment]  # the link this system uses; None: the run's
    policy_link: str = None                 # type: ignore[assignment]  # pool: the link the scheduler assumes; None: the one used
    per_adapter_launch: bool = False        # every adapter product is its own kernel (PLoRA-NoCXL)
    lora: str = "gpu"                       # host: "gpu" (stage into HBM) or "cpu"
    cpu: str = None                         # type: ignore[assignment]  # host, lora "cpu": isa/configs/cpus/<cpu>.json
    pool_bytes: float = None                # type: ignore[assignment]  # pool: memory behind the link; None: devices x dram_bytes

    def __post_init__(self) -> None:
        def need(c: object, w: str) -> None:
            _need(c, "system", self.name, w)
        need(self.kind in ("pool", "host"), f"kind must be 'pool' or 'host', got {self.kind!r}")
        object.__setattr__(self, "strategies", tuple(self.strategies))
        need(self.strategies and set(self.strategies) <= set(STRATEGY_NAMES),
             f"strategies must be a non-empty subset of {STRATEGY_NAMES}, got {self.strategies!r}")
        need(self.forced_strategy in (None, "E3", "E4"),
             f"forced_strategy must be null, 'E3' or 'E4', got {self.forced_strategy!r}")
        need(self.lora in ("gpu", "cpu"), f"lora must be 'gpu' or 'cpu', got {self.lora!r}")
        need(self.lora != "cpu" or self.cpu, "lora 'cpu' needs a cpu config")
        need(self.pool_bytes is None or self.pool_bytes > 0, f"pool_bytes must be > 0, got {self.pool_bytes!r}")


@dataclasses.dataclass(frozen=True)
class ServingConfig:
    # (float, not float | None: isa.config checks a config's values against its fields' plain types)
    name: str = "default"
    system: str = "plora"                   # configs/systems/<system>.json
    workload: str = "uniform"               # configs/workloads/<workload>.json (or a path)
    scheduler: str = "default"              # scheduler/configs/<scheduler>.json: the knobs
    model: str = "llama2-7b"
    gpu: str = "h100"
    link: str = "cxl3.1"
    link_bytes_per_s: float = None          # type: ignore[assignment]  # overrides the link config's bandwidth (sweeps)
    link_latency_s: float = None            # type: ignore[assignment]  # overrides its one-way latency
    device: str = "paper"
    num_devices: int = 4
    max_batch: int = 32                     # running requests (vLLM's max_num_seqs)
    max_prefill_tokens: int = 8192          # prompt tokens one prefill iteration takes
    kv_precision: str = "fp16"
    overlap: str = "wave"                   # "wave": device work hides within its wave; "step": the paper's
    requests: int = None                    # type: ignore[assignment]  # overrides the workload's request count; a trace's first N
    seed: int = None                        # type: ignore[assignment]  # overrides the workload's seed (a trace: its ranks, its adapters)
    trace: str = None                       # type: ignore[assignment]  # a trace CSV instead of the workload's generator
    popularity: str = None                  # type: ignore[assignment]  # overrides the workload's popularity: uniform, skewed, zipf
    adapters: int = None                    # type: ignore[assignment]  # ... its adapter count
    hot_adapters: int = None                # type: ignore[assignment]  # ... skewed: its hot set
    hot_share: float = None                 # type: ignore[assignment]  # ... skewed: the hot set's share of the requests
    zipf_alpha: float = None                # type: ignore[assignment]  # ... zipf: its exponent
    context_overflow: str = "refuse"        # requests over the model's context: refuse the run, clip or drop them
    tiering: str = None                     # type: ignore[assignment]  # 'module:callable': base weights and KV duplicates across HBM
                                            # and the pool (serving/tiering.py; BOOST: boost.pool:tiering)

    def __post_init__(self) -> None:
        def need(c: object, w: str) -> None:
            _need(c, "serving", self.name, w)
        for field in ("num_devices", "max_batch", "max_prefill_tokens"):
            value = getattr(self, field)
            need(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                 f"{field} must be an integer >= 1, got {value!r}")
        need(self.kv_precision in KV_PRECISIONS,
             f"kv_precision must be one of {sorted(KV_PRECISIONS)}, got {self.kv_precision!r}")
        need(self.overlap in ("wave", "step"), f"overlap must be 'wave' or 'step', got {self.overlap!r}")
        need(self.link_bytes_per_s is None or self.link_bytes_per_s > 0,
             f"link_bytes_per_s must be > 0, got {self.link_bytes_per_s!r}")
        need(self.link_latency_s is None or self.link_latency_s >= 0,
             f"link_latency_s must be >= 0, got {self.link_latency_s!r}")
        need(self.requests is None or (isinstance(self.requests, int) and self.requests >= 1),
             f"requests must be an integer >= 1, got {self.requests!r}")
        need(self.trace is None or isinstance(self.trace, str), f"trace must be a path, got {self.trace!r}")
        need(self.context_overflow in CONTEXT_OVERFLOW,
             f"context_overflow must be one of {CONTEXT_OVERFLOW}, got {self.context_overflow!r}")

    def with_(self, **changes: Any) -> "ServingConfig":
        return dataclasses.replace(self, **changes)


def _load(cls: type[_C], folder: str, kind: str, name_or_path: str | pathlib.Path, overrides: dict[str, Any]) -> _C:
    """ConfigError (a ValueError) naming the file and the field for a missing or malformed
    file, an unknown field (the valid ones listed), a wrong type or a refused value."""
    return build_config(cls, CONFIG_DIR / folder, kind, name_or_path, overrides)


def load_system_config(name_or_path: str | pathlib.Path, **overrides: Any) -> SystemConfig:
    return _load(SystemConfig, "systems", "system", name_or_path, overrides)


def load_serving_config(name_or_path: str | pathlib.Path = "default", **overrides: Any) -> ServingConfig:
    return _load(ServingConfig, "runs", "serving", name_or_path, overrides)


def system_names() -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / "systems").glob("*.json"))
