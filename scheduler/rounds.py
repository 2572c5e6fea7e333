"""A decode layer as the rounds it runs in, and what each round costs (seed 000, sections V,
VI-B and VIII; docs/scheduler.md derives it).

Each round needs the previous one's results: the LoRA products of Q, K and V take the
layer's input; attention takes Q, K and V; the output projection takes attention's output;
gate and up take the residual after it; down takes the FFN's hidden state. So a layer is
five rounds, in `ROUNDS`' order, and one round trip over the link in each round that sends
anything to the pool.

In a round the GPU and the pool work in parallel:
- the GPU's own work: the round's base GEMM (`gemm_s`), its LoRA products (E1, E2; E4's
  second half waits: below) and its share of attention (`gpu_s`);
- the pool's side: the GPU stores each descriptor and its payload into a device's queue over
  the link, each device runs its queue back to back (scheduler.device_timing: the sum of
  its descriptors' periods, then its last one's drain), and the results come back over the
  link; what the GPU reads from pool memory itself (E2's factors: `reads`) comes back over
  it too, from the start of the round;
- then the GPU's work on the pool's results (`gpu_after_s`): E4's m B, the attention merge.

    round = max(gemm_s + gpu_s, pool side) + gpu_after_s
    pool side = L + max(max_j (W(first out_j) + busy_j + drain_j + W(last in_j)),   a device
                        W(to devices) + run + W(last in),                          the link out
                        max(W(reads), W(first out) + run) + W(results))            the link back

with L the link's round trip and W its transfer time: the three paths of a three-stage
pipeline (link out, the devices, link back), each a lower bound of the round and the
largest close to it when one stage dominates (`make replay-step` runs whole steps on the
model devices and the link to check it). `run` is the shortest period + drain of the
round's descriptors: the last descriptor to arrive, or the first to leave, still runs.
"""
import copy
import dataclasses
import math

from isa.system import LinkConfig

# (round, the projections whose LoRA products run in it); attention has none
ROUNDS = (("qkv", ("q", "k", "v")), ("attention", ()), ("o", ("o",)), ("gate_up", ("gate", "up")),
          ("down", ("down",)))
LORA_ROUNDS = tuple((name, projections) for name, projections in ROUNDS if projections)
ROUND_OF = {p: name for name, projections in ROUNDS for p in projections}
# the base GEMM each round runs on the GPU (scheduler.gpu_model's names)
GEMM_OF = {"qkv": "qkv", "attention": None, "o": "o", "gate_up": "gate_up", "down": "down"}


@dataclasses.dataclass
class RoundLoad:
    """What one round of one layer asks of the GPU, the link and each device."""
    name: str
    num_devices: int
    gemm_s: float = 0.0             # the round's base GEMM on the GPU
    gpu_s: float = 0.0              # the GPU's other work that does not wait for the pool
    gpu_after_s: float = 0.0        # GPU work on the pool's results
    to_device: float = 0.0          # bytes GPU -> pool (descriptor lines, payloads)
    to_gpu: float = 0.0             # bytes pool -> GPU: completion lines and results, and `reads`
    reads: float = 0.0              # of which the GPU reads from pool memory (E2's factors)
    run_s: float = math.inf         # the shortest period + drain of a descriptor
    descriptors: int = 0
    busy: list[float] = None        # type: ignore[assignment]  # per device: the sum of its descriptors' periods
    drain: list[float] = None       # type: ignore[assignment]  # per device: the drain of its last descriptor
    first_out: list[float] = None   # type: ignore[assignment]  # per device: the bytes its first descriptor carries out
    last_in: list[float] = None     # type: ignore[assignment]  # per device: the bytes its last completion carries back

    def __post_init__(self) -> None:
        for name in ("busy", "drain", "first_out", "last_in"):
            if getattr(self, name) is None:
                setattr(self, name, [0.0] * self.num_devices)

    def copy(self) -> "RoundLoad":
        new = copy.copy(self)           # fields as they are, the per-device lists their own
        new.busy, new.drain, new.first_out, new.last_in = (list(self.busy), list(self.drain),
                                                           list(self.first_out), list(self.last_in))
        return new

    def add_descriptors(self, device: int, count: int, period_s: float, drain_s: float, out_bytes: float,
                        in_bytes: float) -> None:
        """`count` descriptors of one shape at the end of `device`'s queue."""
        if count <= 0:
            return
        if not self.busy[device]:
            self.first_out[device] = out_bytes
        self.busy[device] += count * period_s
        self.drain[device] = drain_s
        self.last_in[device] = in_bytes
        self.descriptors += count
        self.to_device += count * out_bytes
        self.to_gpu += count * in_bytes
        self.run_s = min(self.run_s, period_s + drain_s)

    def add_reads(self, nbytes: float) -> None:
        """Bytes the GPU reads from pool memory over the link in this round."""
        self.reads += nbytes
        self.to_gpu += nbytes

    def device_s(self) -> float:
        """The busiest device's queue: its periods and its last drain."""
        return max((b + d for b, d in zip(self.busy, self.drain, strict=True)), default=0.0)

    def pool_s(self, link: LinkConfig) -> float:
        """The pool's side: the link out, the devices, the link back (module docstring)."""
        if not (self.descriptors or self.reads):
            return 0.0
        w = link.transfer_s
        if not self.descriptors:
            return link.round_trip_s + w(self.reads)
        devices = max(w(f) + b + d + w(i)
                      for f, b, d, i in zip(self.first_out, self.busy, self.drain, self.last_in, strict=True) if b)
        first, last = max(self.first_out), max(self.last_in)
        return link.round_trip_s + max(devices, w(self.to_device) + self.run_s + w(last),
                                       max(w(self.reads), w(first) + self.run_s) + w(self.to_gpu - self.reads))

    def seconds(self, link: LinkConfig) -> float:
        return max(self.gemm_s + self.gpu_s, self.pool_s(link)) + self.gpu_after_s
