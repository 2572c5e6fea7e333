"""The system around the device, as data: GPUs, links and models (`configs/gpus`,
`configs/links`, `configs/models` beside this file).

Like the device configs (`isa.config`), a file names the few published numbers and the
rest is derived here once, for the scheduler and the serving simulator alike.
"""
import dataclasses
import functools
import pathlib
from typing import TypeVar

from .config import CONFIG_DIR, build_config

FP16_BYTES = 2
_C = TypeVar("_C", "GpuConfig", "LinkConfig", "CpuConfig", "ModelConfig")


def _need(cond: bool, kind: str, name: str, what: str) -> None:
    if not cond:
        raise ValueError(f"{kind} config {name!r}: {what}")


@dataclasses.dataclass(frozen=True)
class GpuConfig:
    """A GPU as the roofline sees it."""
    name: str
    hbm_bytes: float
    hbm_bytes_per_s: float
    fp16_flops: float           # dense FP16 tensor-core peak
    kernel_launch_s: float      # fixed cost of one kernel launch

    def __post_init__(self) -> None:
        for field in ("hbm_bytes", "hbm_bytes_per_s", "fp16_flops"):
            _need(getattr(self, field) > 0, "gpu", self.name, f"{field} must be > 0, got {getattr(self, field)!r}")
        _need(self.kernel_launch_s >= 0, "gpu", self.name,
              f"kernel_launch_s must be >= 0, got {self.kernel_launch_s!r}")

    def roofline_s(self, flops: float, hbm_bytes: float) -> float:
        """Time of a kernel that does `flops` and moves `hbm_bytes`, without its launch."""
        return max(flops / self.fp16_flops, hbm_bytes / self.hbm_bytes_per_s)


@dataclasses.dataclass(frozen=True)
class LinkConfig:
    """A memory-semantic link as PLoRA's cost model sees it: two numbers (section VI-B,
    'the model touches the interconnect only through its bandwidth W_link and its
    round-trip latency L_link')."""
    name: str
    bytes_per_s: float          # W_link, per direction
    latency_s: float            # one way

    def __post_init__(self) -> None:
        _need(self.bytes_per_s > 0, "link", self.name, f"bytes_per_s must be > 0, got {self.bytes_per_s!r}")
        _need(self.latency_s >= 0, "link", self.name, f"latency_s must be >= 0, got {self.latency_s!r}")

    @property
    def round_trip_s(self) -> float:
        """L_link."""
        return 2 * self.latency_s

    def transfer_s(self, nbytes: float) -> float:
        """Time `nbytes` occupy one direction of the link."""
        return nbytes / self.bytes_per_s


@dataclasses.dataclass(frozen=True)
class CpuConfig:
    """A host CPU as CPU-LoRA-Offload sees it: a roofline and the software cost of one
    GPU -> CPU -> GPU exchange."""
    name: str
    mem_bytes_per_s: float
    flops: float
    exchange_s: float

    def __post_init__(self) -> None:
        for field in ("mem_bytes_per_s", "flops"):
            _need(getattr(self, field) > 0, "cpu", self.name, f"{field} must be > 0, got {getattr(self, field)!r}")
        _need(self.exchange_s >= 0, "cpu", self.name, f"exchange_s must be >= 0, got {self.exchange_s!r}")

    def roofline_s(self, flops: float, mem_bytes: float) -> float:
        return max(flops / self.flops, mem_bytes / self.mem_bytes_per_s)


@dataclasses.dataclass(frozen=True)
class Projection:
    """One weight matrix LoRA is injected into: x (.. x d_in) W (d_in x d_out)."""
    name: str
    d_in: int
    d_out: int


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer by its published shapes."""
    name: str
    hidden: int
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int                    # FFN width (one expert's for MoE)
    vocab: int
    params: float               # total parameters, for the resident base weights
    experts: int = 1
    active_experts: int = 1
    # (int, not int | None: isa.config checks a config's values against its fields' plain types)
    max_context: int = None     # type: ignore[assignment]  # prompt + output tokens one request may hold; None: not stated

    def __post_init__(self) -> None:
        for field in ("hidden", "layers", "q_heads", "kv_heads", "head_dim", "ffn", "vocab",
                      "experts", "active_experts"):
            value = getattr(self, field)
            _need(isinstance(value, int) and value >= 1, "model", self.name,
                  f"{field} must be an integer >= 1, got {value!r}")
        _need(self.max_context is None or (isinstance(self.max_context, int) and self.max_context >= 2), "model",
              self.name, f"max_context must be an integer >= 2 (a prompt and an output token) or null, "
                         f"got {self.max_context!r}")
        _need(self.q_heads % self.kv_heads == 0, "model", self.name,
              f"q_heads={self.q_heads!r} must be a multiple of kv_heads={self.kv_heads!r}")
        _need(self.active_experts <= self.experts, "model", self.name,
              f"active_experts={self.active_experts!r} exceeds experts={self.experts!r}")

    @property
    def group(self) -> int:
        """Query heads per KV head (1 for MHA)."""
        return self.q_heads // self.kv_heads

    @functools.cached_property
    def projections(self) -> tuple["Projection", ...]:
        """The weights LoRA is injected into, per layer: Q/K/V, the output projection and the
        FFN (seed 000, section VII-A: 'we add adapters to all weight matrices'). For MoE the
        FFN adapter is on each active expert's gate/up/down; it is counted once per active
        expert by `ffn_copies`."""
        q, kv = self.q_heads * self.head_dim, self.kv_heads * self.head_dim
        return (Projection("q", self.hidden, q), Projection("k", self.hidden, kv),
                Projection("v", self.hidden, kv), Projection("o", q, self.hidden),
                Projection("gate", self.hidden, self.ffn), Projection("up", self.hidden, self.ffn),
                Projection("down", self.ffn, self.hidden))

    def copies(self, projection: "Projection") -> int:
        """How many times a token passes through `projection` per layer (active experts for the FFN)."""
        return self.active_experts if projection.name in ("gate", "up", "down") else 1

    @property
    def weight_bytes(self) -> float:
        return self.params * FP16_BYTES

    def kv_bytes_per_token(self) -> int:
        """K and V of one token over every layer, FP16."""
        return 2 * self.layers * self.kv_heads * self.head_dim * FP16_BYTES


def _load(kind: str, cls: type[_C], name_or_path: str | pathlib.Path) -> _C:
    """`cls` from `configs/<kind>/<name>.json` or a .json path; ConfigError naming the file and
    the field (unknown keys with the valid ones, wrong types, values out of range)."""
    return build_config(cls, CONFIG_DIR / kind, kind[:-1], name_or_path)


def load_gpu(name_or_path: str | pathlib.Path = "h100") -> GpuConfig:
    return _load("gpus", GpuConfig, name_or_path)


def load_link(name_or_path: str | pathlib.Path = "cxl3.1") -> LinkConfig:
    return _load("links", LinkConfig, name_or_path)


def load_cpu(name_or_path: str | pathlib.Path = "xeon-8480") -> CpuConfig:
    return _load("cpus", CpuConfig, name_or_path)


def load_model(name_or_path: str | pathlib.Path = "llama2-7b") -> ModelConfig:
    return _load("models", ModelConfig, name_or_path)
