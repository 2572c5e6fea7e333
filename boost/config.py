"""The machine and the model shapes BOOST runs on, as data (`configs/` beside this file).

A machine is two memory tiers behind one GPU: HBM and a second tier (Grace's memory over
NVLink-C2C in the paper; the device pool behind the link in this project), the page size,
the SMs and, per tier, the fraction of the SMs whose loads in flight saturate it (section
6.1). alpha is the second tier's bandwidth over HBM's (section 2.3: 'We define alpha as the
ratio of C2G read bandwidth to HBM bandwidth').
"""
import dataclasses
import math
import pathlib
from typing import Any

from isa.config import read_config
from isa.system import ModelConfig
from isa.system import load_model as _load_isa_model

CONFIG_DIR = pathlib.Path(__file__).parent / "configs"
MiB = 1 << 20
GiB = 1 << 30


def _need(cond: bool, kind: str, name: str, what: str) -> None:
    if not cond:
        raise ValueError(f"{kind} config {name!r}: {what}")


def check_alpha(alpha: float) -> float:
    """alpha must be a number in (0, 1]: the second tier is slower than HBM, and present."""
    if not (isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and 0 < alpha <= 1):
        raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
    return float(alpha)


def modulus_for(alpha: float) -> int:
    """MPP's modulus: K = ceil(1/alpha) pages to HBM, then one to the second tier (section 4.4:
    'When K=1/alpha is not an integer, PAM sets K=ceil(1/alpha), which keeps the host fraction
    below alpha'); 1/alpha is rounded to 1e-9 first so that alpha = 0.1 gives K = 10, not 11."""
    alpha = check_alpha(alpha)
    return math.ceil(round(1 / alpha, 9)) + 1


@dataclasses.dataclass(frozen=True)
class Machine:
    name: str
    hbm_bytes_per_s: float
    second_bytes_per_s: float
    page_bytes: int = 2 * MiB
    sms: int = 132
    threads_per_sm: int = 2048
    hbm_sm_fraction: float = 0.0        # of the SMs' loads in flight, what saturates HBM (0: never binds)
    second_sm_fraction: float = 0.0     # the same for the second tier
    modulus: int = None                 # type: ignore[assignment]  # MPP's period in pages (K + 1); None: from alpha
    hbm_bytes: float = 96e9
    hbm_utilization: float = 0.85
    second_reserve_bytes: float = 0.0

    def __post_init__(self) -> None:
        need = lambda c, w: _need(c, "machine", self.name, w)   # noqa: E731
        for f in ("hbm_bytes_per_s", "second_bytes_per_s"):
            v = getattr(self, f)
            need(isinstance(v, (int, float)) and v > 0, f"{f} must be > 0, got {v!r}")
        need(self.second_bytes_per_s <= self.hbm_bytes_per_s,
             f"second_bytes_per_s={self.second_bytes_per_s!r} exceeds hbm_bytes_per_s={self.hbm_bytes_per_s!r} "
             "(alpha must be in (0, 1])")
        for f in ("page_bytes", "sms", "threads_per_sm"):
            v = getattr(self, f)
            need(isinstance(v, int) and not isinstance(v, bool) and v >= 1, f"{f} must be an integer >= 1, got {v!r}")
        for f in ("hbm_sm_fraction", "second_sm_fraction"):
            v = getattr(self, f)
            need(0 <= v <= 1, f"{f} must be in [0, 1], got {v!r}")
        need(self.modulus is None or (isinstance(self.modulus, int) and self.modulus >= 2),
             f"modulus must be null or an integer >= 2, got {self.modulus!r}")
        need(0 < self.hbm_utilization <= 1, f"hbm_utilization must be in (0, 1], got {self.hbm_utilization!r}")

    @property
    def alpha(self) -> float:
        return self.second_bytes_per_s / self.hbm_bytes_per_s

    @property
    def placement_modulus(self) -> int:
        """The modulus PAM uses: the config's (BOOST's measured optimum) or K + 1 from alpha."""
        return self.modulus or modulus_for(self.alpha)

    @property
    def share(self) -> float:
        """The second tier's share of a tensor's pages under MPP: 1 / modulus."""
        return 1 / self.placement_modulus

    def with_(self, **changes: Any) -> "Machine":
        return dataclasses.replace(self, **changes)


def load_machine(name_or_path: str | pathlib.Path = "gh200", **overrides: Any) -> Machine:
    data = read_config(CONFIG_DIR / "machines", "machine", name_or_path)
    data.update(overrides)
    unknown = set(data) - {f.name for f in dataclasses.fields(Machine)}
    if unknown:
        raise ValueError(f"machine config {str(name_or_path)!r}: unknown fields {sorted(unknown)!r}")
    return Machine(**data)


def load_model(name: str) -> ModelConfig:
    """A model's shapes: boost/configs/models/<name>.json, else isa/configs/models/<name>.json."""
    path = CONFIG_DIR / "models" / f"{name}.json"
    return _load_isa_model(str(path) if path.exists() else name)
