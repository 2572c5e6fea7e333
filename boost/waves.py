"""The wave-level bandwidth model (seed 002, sections 2.4, 3.2, 6.1).

A kernel's CTAs run `slots` at a time; wave w is CTAs [w x slots, (w + 1) x slots) in grid
order. A wave moves H bytes on HBM and C on the second tier and lasts

    T_w = max(H / B_hbm,  C / B_second,  (slots / min(n, slots)) x sum over its bytes of s(byte))

- the first two terms are section 2.4's requirement: both tiers busy within every wave, in
  proportion to their bandwidths (CAP); a wave with more than its share on the second tier
  waits on it while HBM idles, one with less leaves the link idle;
- the third is the SMs' budget of loads in flight (section 6.1: 'HBM saturation uses 84% of
  the SMs and the host tier needs another 20%, exceeding the SM budget'). By Little's law a
  byte from tier t holds f_t / B_t of the GPU's in-flight capacity for a second, f_t being the
  fraction of the SMs that saturates tier t. CTAs dispatch continuously, so every wave has
  the whole capacity, except in a kernel of fewer CTAs than slots (n CTAs hold n / slots);
- the stall rule (section 3.2: 'When the accesses of a single CTA span both tiers, the host
  loads stall the SM and delay the co-issued HBM loads, so the SM loses HBM bandwidth'): the
  HBM bytes of a stage that also reads the second tier wait with its host loads, so they hold
  the SM as long as second-tier bytes do, f_second / B_second each. Stores never stall.

A kernel lasts the sum of its waves. The alternatives that are not placements are here too:
prefetching (section 2.5: every prefetched byte is also written to HBM) and
cudaMallocManaged (pages migrate on fault; once the working set exceeds HBM, an LRU page
cache over a cyclic sweep misses on every page, so every byte comes over the link, in turn).
"""
import collections
import dataclasses
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from .config import Machine
from .kernels import Kernel
from .pages import Placement


@dataclasses.dataclass(frozen=True)
class KernelTime:
    name: str
    seconds: float
    wave_seconds: np.ndarray
    wave_second_ratio: np.ndarray   # per wave: second-tier share of the bytes read
    wave_ctas: np.ndarray
    hbm_bytes: float
    second_bytes: float
    mixed_ctas: int                 # CTAs with a stage reading both tiers
    n_ctas: int

    @property
    def second_ratio(self) -> float:
        total = self.hbm_bytes + self.second_bytes
        return self.second_bytes / total if total else 0.0


class WaveModel:
    def __init__(self, machine: Machine) -> None:
        self.machine = m = machine
        self.b_hbm, self.b_second = m.hbm_bytes_per_s, m.second_bytes_per_s
        self.s_hbm = m.hbm_sm_fraction / self.b_hbm          # SM-seconds of in-flight capacity per byte
        self.s_second = m.second_sm_fraction / self.b_second

    def segment_bytes(self, kernel: Kernel,
                      placements: Mapping[str, Placement]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(HBM bytes, second-tier bytes) of every segment of `kernel` under `placements`
        (tensor name -> Placement; a tensor not named is on HBM)."""
        second = np.zeros(len(kernel.cta), dtype=np.int64)
        for i, name in enumerate(kernel.tensors):
            p = placements.get(name)
            if p is None:
                continue
            if not isinstance(p, Placement):
                raise TypeError(f"placement of {name!r} must be a Placement, got {type(p).__name__}")
            sel = kernel.tensor == i
            start = kernel.start[sel]
            end = start + kernel.length[sel]
            if len(end) and end.max() > p.nbytes:
                raise ValueError(f"kernel {kernel.name!r} reads {name!r} up to byte {int(end.max())}, "
                                 f"past its {p.nbytes} bytes")
            second[sel] = p.second_bytes_in(start, end)
        if kernel.fixed_tier is not None:
            fixed = kernel.fixed_tier >= 0
            second[fixed] = np.where(kernel.fixed_tier[fixed] == 1, kernel.length[fixed], 0)
        return kernel.length - second, second

    def time(self, kernel: Kernel, placements: Mapping[str, Placement] | None = None) -> KernelTime:
        hbm, second = self.segment_bytes(kernel, placements or {})
        read = ~kernel.write
        # the stall rule: a stage is mixed when its reads touch both tiers
        key = kernel.cta * (int(kernel.stage.max()) + 1) + kernel.stage
        uniq, inv = np.unique(key, return_inverse=True)
        stage_hbm = np.bincount(inv, weights=np.where(read, hbm, 0), minlength=len(uniq))
        stage_second = np.bincount(inv, weights=np.where(read, second, 0), minlength=len(uniq))
        mixed = ((stage_hbm > 0) & (stage_second > 0))[inv] & read
        cost = np.where(mixed, (hbm + second) * self.s_second, hbm * self.s_hbm + second * self.s_second)
        wave = kernel.cta // kernel.slots
        n_waves = kernel.waves
        h = np.bincount(wave, weights=hbm, minlength=n_waves)
        c = np.bincount(wave, weights=second, minlength=n_waves)
        slot = np.bincount(wave, weights=cost, minlength=n_waves)
        ctas = np.bincount(np.arange(kernel.n_ctas) // kernel.slots, minlength=n_waves)
        capacity = min(kernel.n_ctas, kernel.slots) / kernel.slots
        t = np.maximum.reduce([h / self.b_hbm, c / self.b_second, slot / capacity])
        r_h = np.bincount(wave, weights=np.where(read, hbm, 0), minlength=n_waves)
        r_c = np.bincount(wave, weights=np.where(read, second, 0), minlength=n_waves)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(r_h + r_c > 0, r_c / (r_h + r_c), 0.0)
        mixed_ctas = len(np.unique(kernel.cta[mixed]))
        return KernelTime(kernel.name, float(t.sum()), t, ratio, ctas, float(h.sum()), float(c.sum()),
                          mixed_ctas, kernel.n_ctas)

    def fluid_s(self, hbm_bytes: float, second_bytes: float) -> float:
        """The same three bounds over a whole kernel whose CTAs each stay on one tier and whose
        every wave holds the kernel's ratio (the CAP ideal; the serving simulator's form)."""
        return max(hbm_bytes / self.b_hbm, second_bytes / self.b_second,
                   hbm_bytes * self.s_hbm + second_bytes * self.s_second)

    # ---- the migration schemes --------------------------------------------------------

    def prefetch_s(self, hbm_only_s: float, offloaded_bytes: float) -> float:
        """A step whose kernels read everything from HBM (`hbm_only_s`) while `offloaded_bytes`
        are prefetched from the second tier into HBM: the copies' HBM writes share HBM with the
        demand loads (section 2.5: 'Each byte read from host memory incurs a write to HBM'),
        their reads take the link; an ideal prefetcher overlaps both."""
        if offloaded_bytes < 0 or hbm_only_s < 0:
            raise ValueError(f"times and bytes must be >= 0, got {hbm_only_s!r}, {offloaded_bytes!r}")
        return max(hbm_only_s + offloaded_bytes / self.b_hbm, offloaded_bytes / self.b_second)

    def uvm_s(self, hbm_only_s: float, working_set_bytes: float, hbm_capacity_bytes: float) -> float:
        """cudaMallocManaged: as HBM alone while the working set fits (section 5.7: 'it matches
        HBM-only when the working set fits in HBM'); beyond, every page of a step faults and
        migrates over the link one after another (`lru_misses` of a cyclic sweep: all of
        them), its copy into HBM overlapped."""
        page = self.machine.page_bytes
        n, cap = -(-int(working_set_bytes) // page), int(hbm_capacity_bytes) // page
        if n <= cap:
            return hbm_only_s
        return max(lru_misses(n, cap) * page / self.b_second, hbm_only_s)


def lru_misses(n_pages: int, capacity_pages: int, sweeps: int = 3) -> int:
    """Misses per sweep, in steady state, of an LRU cache of `capacity_pages` under a cyclic
    sweep over `n_pages` (a decode step reads every page in the same order); simulated."""
    if capacity_pages < 1 or n_pages < 1:
        raise ValueError(f"pages and capacity must be >= 1, got {n_pages!r}, {capacity_pages!r}")
    if n_pages <= capacity_pages:
        return 0
    cache: collections.OrderedDict[int, bool] = collections.OrderedDict()
    misses = 0
    for _ in range(sweeps):
        misses = 0
        for p in range(n_pages):
            if p in cache:
                cache.move_to_end(p)
                continue
            misses += 1
            cache[p] = True
            if len(cache) > capacity_pages:
                cache.popitem(last=False)
    return misses
