"""The scheduler's configuration as a file (`configs/<name>.json` beside this file).

Knob names follow the serving systems users know where the meaning carries over
(docs/scheduler.md maps each): vLLM's `max_loras`, `max_cpu_loras`, `max_lora_rank`,
`gpu_memory_utilization`; SGLang's `max_loras_per_batch`. The PLoRA ones are section VI-A's.
"""
import dataclasses
import pathlib
from typing import Any

import isa
from isa.config import DeviceConfig, read_config
from isa.system import GpuConfig, LinkConfig, ModelConfig, load_gpu, load_link, load_model

CONFIG_DIR = pathlib.Path(__file__).parent / "configs"
KV_SCALE = {"fp16": 1.0, "int8": 0.5, "int4": 0.25}


@dataclasses.dataclass(frozen=True)
class SchedulerConfig:
    name: str = "default"
    gpu: str = "h100"                   # isa/configs/gpus/<gpu>.json
    link: str = "cxl3.1"                # isa/configs/links/<link>.json
    device: str = "paper"               # isa/configs/<device>.json
    model: str = "llama2-7b"            # isa/configs/models/<model>.json
    num_devices: int = 4
    # GPU memory for adapters and KV duplicates: gpu_budget_bytes if given, else
    # gpu_memory_utilization x HBM - base weights - activation_reserve_bytes
    gpu_memory_utilization: float = 0.9
    activation_reserve_bytes: float = 4e9
    gpu_budget_bytes: float | None = None
    max_loras: int = 256                # adapters with any part cached on the GPU
    max_cpu_loras: int = 4096           # adapters registered in the device pool
    max_lora_rank: int = 128
    max_loras_per_batch: int = 1024     # distinct adapters in one step's batch
    temperature_increment: float = 1.0  # added to an adapter's temperature per new request
    temperature_relaxation: float = 0.1  # fraction of the gap to the mean closed per step
    hot_set_size: int = 50              # hottest non-serving adapters pre-cached
    expected_steps: float = 214         # decode steps a batch is expected to last (load amortization)
    kv_page_tokens: int = 512           # tokens per KV page on a device (one ATTENTION operand)
    # the link's two numbers, if not the link config's (a sweep's point)
    link_bytes_per_s: float | None = None
    link_latency_s: float | None = None
    # what the system around the scheduler allows (the serving simulator's ablations):
    strategies: tuple[str, ...] = ("E1", "E2", "E3", "E4")    # Algorithm 1's candidates
    forced_strategy: str | None = None       # "E3"/"E4": every site takes it, no Algorithm 1 (N(E3), ND(E4), ...)
    distributed_attention: bool = True  # devices compute attention partials (else the GPU reads the KV)
    kv_precision: str = "fp16"          # KV cache elements: fp16, int8 or int4

    def __post_init__(self) -> None:
        def need(cond: object, what: str) -> None:
            if not cond:
                raise ValueError(f"scheduler config {self.name!r}: {what}")
        for field in ("num_devices", "max_loras", "max_cpu_loras", "max_lora_rank",
                      "max_loras_per_batch", "kv_page_tokens"):
            value = getattr(self, field)
            need(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                 f"{field} must be an integer >= 1, got {value!r}")
        need(isinstance(self.hot_set_size, int) and self.hot_set_size >= 0,
             f"hot_set_size must be an integer >= 0, got {self.hot_set_size!r}")
        need(0 < self.gpu_memory_utilization <= 1,
             f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}")
        need(self.gpu_budget_bytes is None or self.gpu_budget_bytes >= 0,
             f"gpu_budget_bytes must be >= 0 or null, got {self.gpu_budget_bytes!r}")
        need(self.activation_reserve_bytes >= 0,
             f"activation_reserve_bytes must be >= 0, got {self.activation_reserve_bytes!r}")
        need(self.temperature_increment > 0,
             f"temperature_increment must be > 0, got {self.temperature_increment!r}")
        need(0 <= self.temperature_relaxation <= 1,
             f"temperature_relaxation must be in [0, 1], got {self.temperature_relaxation!r}")
        need(self.expected_steps >= 1, f"expected_steps must be >= 1, got {self.expected_steps!r}")
        object.__setattr__(self, "strategies", tuple(self.strategies))
        need(self.strategies and set(self.strategies) <= {"E1", "E2", "E3", "E4"},
             f"strategies must be a non-empty subset of E1..E4, got {self.strategies!r}")
        need("E2" in self.strategies or self.forced_strategy,
             f"strategies must include E2, the one that needs no GPU memory, got {self.strategies!r}")
        need(self.forced_strategy in (None, "E3", "E4"),
             f"forced_strategy must be null, 'E3' or 'E4', got {self.forced_strategy!r}")
        need(self.kv_precision in KV_SCALE,
             f"kv_precision must be one of {sorted(KV_SCALE)}, got {self.kv_precision!r}")
        need(self.link_bytes_per_s is None or self.link_bytes_per_s > 0,
             f"link_bytes_per_s must be > 0, got {self.link_bytes_per_s!r}")
        need(self.link_latency_s is None or self.link_latency_s >= 0,
             f"link_latency_s must be >= 0, got {self.link_latency_s!r}")
        need(self.max_cpu_loras >= self.max_loras,
             f"max_cpu_loras={self.max_cpu_loras!r} must be >= max_loras={self.max_loras!r} (as in vLLM)")

    def with_(self, **changes: Any) -> "SchedulerConfig":
        return dataclasses.replace(self, **changes)

    # the configs this one names, loaded
    def gpu_config(self) -> GpuConfig:
        return load_gpu(self.gpu)

    def link_config(self) -> LinkConfig:
        link = load_link(self.link)
        changes: dict[str, Any] = {k: v for k, v in (("bytes_per_s", self.link_bytes_per_s),
                                                     ("latency_s", self.link_latency_s)) if v is not None}
        return dataclasses.replace(link, **changes)

    @property
    def kv_scale(self) -> float:
        """KV bytes per element over FP16's two."""
        return KV_SCALE[self.kv_precision]

    def device_config(self) -> DeviceConfig:
        return isa.load_config(self.device)

    def model_config(self) -> ModelConfig:
        return load_model(self.model)

    def gpu_budget(self) -> float:
        """Bytes of GPU memory the scheduler may fill with adapters and KV duplicates."""
        if self.gpu_budget_bytes is not None:
            return float(self.gpu_budget_bytes)
        gpu, model = self.gpu_config(), self.model_config()
        budget = self.gpu_memory_utilization * gpu.hbm_bytes - model.weight_bytes - self.activation_reserve_bytes
        if budget < 0:
            raise ValueError(f"scheduler config {self.name!r}: the weights of {model.name!r} "
                             f"({model.weight_bytes / 1e9:.1f} GB) and the activation reserve "
                             f"({self.activation_reserve_bytes / 1e9:.1f} GB) exceed "
                             f"{self.gpu_memory_utilization!r} of the {gpu.hbm_bytes / 1e9:.0f} GB of {gpu.name!r}")
        return budget


def load_scheduler_config(name_or_path: str | pathlib.Path = "default", **overrides: Any) -> SchedulerConfig:
    data = read_config(CONFIG_DIR, "scheduler", name_or_path)
    unknown = set(data) | set(overrides)
    unknown -= {f.name for f in dataclasses.fields(SchedulerConfig)}
    if unknown:
        raise ValueError(f"scheduler config {str(name_or_path)!r}: unknown knobs {sorted(unknown)!r}")
    data.update(overrides)
    return SchedulerConfig(**data)
