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
  link; E2's factors come back over it too;
- then the GPU's work on the pool's results (`gpu_after_s`): E4's m B, the attention merge.

    round = max(gemm_s + gpu_s, pool side) + gpu_after_s
    pool side = L + max(W(first out) + max_j (busy_j + drain_j) + W(last in),   a device
                        W(to devices) + run + W(last in),                        the link out
                        W(first out) + run + W(to GPU))                          the link back

with L the link's round trip and W its transfer time: the three paths of a three-stage
pipeline (link out, the devices, link back), each a lower bound of the round and the
largest close to it when one stage dominates (`make replay-step` runs whole steps on the
model devices and the link to check it). `run` is the shortest period + drain of the
round's descriptors: the last descriptor to arrive, or the first to leave, still runs.
"""
import dataclasses
import math

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
    to_gpu: float = 0.0             # bytes pool -> GPU (completion lines, results, E2's factors)
    first_out: float = 0.0          # the largest bytes one descriptor carries out
    last_in: float = 0.0            # the largest bytes one completion carries back
    run_s: float = math.inf         # the shortest period + drain of a descriptor
    descriptors: int = 0
    busy: list = None               # per device: the sum of its descriptors' periods
    drain: list = None              # per device: the drain of its last descriptor

    def __post_init__(self):
        if self.busy is None:
            self.busy = [0.0] * self.num_devices
        if self.drain is None:
            self.drain = [0.0] * self.num_devices

    def copy(self):
        return dataclasses.replace(self, busy=list(self.busy), drain=list(self.drain))

    def add_descriptors(self, device, count, period_s, drain_s, out_bytes, in_bytes):
        """`count` descriptors of one shape at the end of `device`'s queue."""
        if count <= 0:
            return
        self.busy[device] += count * period_s
        self.drain[device] = drain_s
        self.descriptors += count
        self.to_device += count * out_bytes
        self.to_gpu += count * in_bytes
        self.first_out = max(self.first_out, out_bytes)
        self.last_in = max(self.last_in, in_bytes)
        self.run_s = min(self.run_s, period_s + drain_s)

    def device_s(self):
        """The busiest device's queue: its periods and its last drain."""
        return max((b + d for b, d in zip(self.busy, self.drain)), default=0.0)

    def pool_s(self, link):
        """The pool's side: the link out, the devices, the link back (module docstring)."""
        if not (self.descriptors or self.to_device or self.to_gpu):
            return 0.0
        w = link.transfer_s
        run = self.run_s if self.descriptors else 0.0
        return link.round_trip_s + max(w(self.first_out) + self.device_s() + w(self.last_in),
                                       w(self.to_device) + run + w(self.last_in),
                                       w(self.first_out) + run + w(self.to_gpu))

    def seconds(self, link):
        return max(self.gemm_s + self.gpu_s, self.pool_s(link)) + self.gpu_after_s
