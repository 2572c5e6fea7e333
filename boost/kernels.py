"""Kernels as grids of CTAs, each CTA a set of byte ranges it reads or writes (seed 002,
section 2.2: 'The kernel is divided into many threadblocks (CTAs) ... We refer to the set of
active threadblocks across all SMs in the GPU as a wave').

A kernel lists segments: (CTA, tensor, start, length, stage, write). CTAs dispatch in grid
order, `slots` at a time (a wave). Segments of one CTA with the same `stage` are co-issued
(the loads of one pipeline stage, which the CTA waits on together): the stall rule of
section 3.2 acts on them (`waves`). Builders:
- `add_kernel`: c = a + b streamed by thousands of CTAs (section 2.6's microbenchmark);
- `cap_add_kernel`: the same, handcrafted for CAP: a fixed set of CTAs reads from the second
  tier, writes stay on HBM (section 3);
- `gemm_kernel`: a decode GEMM, one CTA per 128-column output tile over the whole
  contraction, weights stored a column (d_in bytes) after another, split-K when the tiles do
  not fill the SMs; every k-step of a CTA loads all its columns, so one stage per CTA;
- `attention_kernel`: paged decode attention, one CTA per (request, KV head, KV split), each
  stage a tile of `stage_tokens` tokens.
"""
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .config import Machine


@dataclasses.dataclass(frozen=True)
class Kernel:
    name: str
    slots: int                  # CTAs resident at once (a full wave)
    n_ctas: int
    tensors: tuple[str, ...]    # names; `tensor` indexes them
    cta: np.ndarray
    tensor: np.ndarray
    start: np.ndarray
    length: np.ndarray
    stage: np.ndarray           # co-issued group within a CTA
    write: np.ndarray           # stores: bandwidth, never a stall
    footprints: dict[str, int] = dataclasses.field(default_factory=dict)   # tensor -> contiguous bytes a CTA reads
    fixed_tier: np.ndarray | None = None   # per segment: -1 by placement, else the tier the kernel chose

    def __post_init__(self) -> None:
        if not (isinstance(self.slots, int) and self.slots >= 1):
            raise ValueError(f"kernel {self.name!r}: slots must be an integer >= 1, got {self.slots!r}")
        if not (isinstance(self.n_ctas, int) and self.n_ctas >= 1):
            raise ValueError(f"kernel {self.name!r}: n_ctas must be an integer >= 1, got {self.n_ctas!r}")
        n = len(self.cta)
        for f in ("tensor", "start", "length", "stage", "write"):
            if len(getattr(self, f)) != n:
                raise ValueError(f"kernel {self.name!r}: {f} has {len(getattr(self, f))} entries, cta {n}")
        if n and (self.length.min() < 1 or self.start.min() < 0):
            raise ValueError(f"kernel {self.name!r}: segments need start >= 0 and length >= 1 (a CTA footprint of 0)")
        if n and not (0 <= self.cta.min() and self.cta.max() < self.n_ctas):
            raise ValueError(f"kernel {self.name!r}: a segment names a CTA outside 0..{self.n_ctas - 1}")

    @property
    def waves(self) -> int:
        return -(-self.n_ctas // self.slots)

    def bytes_of(self, tensor: str) -> int:
        i = self.tensors.index(tensor)
        return int(self.length[self.tensor == i].sum())


def _positive_int(name: str, v: Any) -> int:
    if not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1):
        raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    return int(v)


def _slots(machine: Machine, threads_per_cta: int | None = None, ctas_per_sm: int | None = None) -> int:
    if ctas_per_sm is None:
        ctas_per_sm = machine.threads_per_sm // _positive_int("threads_per_cta", threads_per_cta)
    return machine.sms * _positive_int("ctas_per_sm", ctas_per_sm)


def add_kernel(machine: Machine, array_bytes: int, ctas: int, threads_per_cta: int = 256,
               name: str = "add") -> Kernel:
    """c = a + b over arrays of `array_bytes`: CTA i reads its slice of a and b (one stage:
    a thread loads a[i] and b[i] together) and writes its slice of c."""
    array_bytes, ctas = _positive_int("array_bytes", array_bytes), _positive_int("ctas", ctas)
    if array_bytes % ctas:
        raise ValueError(f"array_bytes={array_bytes!r} must split evenly over ctas={ctas!r}")
    chunk = array_bytes // ctas
    i = np.arange(ctas, dtype=np.int64)
    z = np.zeros(ctas, dtype=np.int64)
    return Kernel(name, _slots(machine, threads_per_cta), ctas, ("a", "b", "c"),
                  cta=np.concatenate((i, i, i)), tensor=np.concatenate((z, z + 1, z + 2)),
                  start=np.tile(i * chunk, 3), length=np.full(3 * ctas, chunk, dtype=np.int64),
                  stage=np.zeros(3 * ctas, dtype=np.int64),
                  write=np.concatenate((np.zeros(2 * ctas, bool), np.ones(ctas, bool))),
                  footprints={"a": chunk, "b": chunk, "c": chunk})


def cap_add_kernel(machine: Machine, array_bytes: int, ctas: int, second_share: float,
                   threads_per_cta: int = 256) -> Kernel:
    """The add kernel edited for CAP (section 3: 'the data resides in both tiers, a fixed
    subset of warps reads from the host tier ... (writes stay HBM-local)'): `second_share` of
    all its accesses (reads and writes) come from the second tier, whole CTAs' reads at a
    time, spread evenly over the grid."""
    if not 0 <= second_share <= 2 / 3:
        raise ValueError(f"second_share must be in [0, 2/3] (the reads' share of the accesses), got {second_share!r}")
    k = add_kernel(machine, array_bytes, ctas, threads_per_cta, name=f"cap-add-{second_share:.4f}")
    q = 1.5 * second_share          # the share of CTAs whose reads go to the second tier
    i = np.arange(ctas)
    host = (np.floor((i + 1) * q + 1e-9) - np.floor(i * q + 1e-9)).astype(np.int8)
    fixed = np.concatenate((host, host, np.zeros(ctas, np.int8)))
    return dataclasses.replace(k, fixed_tier=fixed)


def split_k(tiles: int, d_in: int, sms: int, align: int = 64) -> int:
    """Split-K factor: doubled while the tiles do not fill the SMs and the split contraction
    stays a multiple of `align` elements (cuBLAS splits skinny decode GEMMs this way)."""
    s = 1
    while tiles * s < sms and d_in % (2 * s * align) == 0:
        s *= 2
    return s


def gemm_kernel(machine: Machine, name: str, d_in: int, d_out: int, elem_bytes: int = 1, tile_n: int = 128,
                ctas_per_sm: int = 1, tensor: str = "w") -> Kernel:
    """A decode GEMM y = x W, W stored column after column (d_in x elem_bytes bytes each):
    CTA (split s, tile t) reads, for each of the tile's columns, the s-th slice of the
    contraction; grid order puts the tile fastest (blockIdx.x) and the split slowest."""
    d_in, d_out, tile_n = (_positive_int(n, v) for n, v in (("d_in", d_in), ("d_out", d_out), ("tile_n", tile_n)))
    tiles = -(-d_out // tile_n)
    s = split_k(tiles, d_in, machine.sms)
    klen = d_in // s * elem_bytes
    col = np.arange(d_out, dtype=np.int64)
    cta = (np.arange(s, dtype=np.int64)[:, None] * tiles + (col // tile_n)[None, :]).ravel()
    start = (col[None, :] * d_in * elem_bytes + np.arange(s, dtype=np.int64)[:, None] * klen).ravel()
    n = len(cta)
    return Kernel(name, _slots(machine, ctas_per_sm=ctas_per_sm), tiles * s, (tensor,), cta=cta,
                  tensor=np.zeros(n, dtype=np.int64), start=start, length=np.full(n, klen, dtype=np.int64),
                  stage=np.zeros(n, dtype=np.int64), write=np.zeros(n, bool),
                  footprints={tensor: tile_n * d_in * elem_bytes})


def attention_splits(batch: int, heads: int, slots: int, blocks: int) -> int:
    """KV splits per (request, head): enough CTAs to fill a wave, no more splits than blocks
    (FlashDecoding's heuristic)."""
    return max(1, min(blocks, math.ceil(slots / (batch * heads))))


def attention_kernel(machine: Machine, name: str, tables: Sequence[Sequence[int] | npt.NDArray[np.int64]],
                     kv_heads: int,
                     segment: Callable[[npt.NDArray[np.int64], int], npt.NDArray[np.int64]], head_bytes: int,
                     block_tokens: int = 16, stage_tokens: int = 128, ctas_per_sm: int = 2,
                     tensor: str = "kv") -> Kernel:
    """Paged decode attention over one layer: `tables[r]` the block ids of request r;
    `segment(blocks, head)` the start of each block's data of that head in the pool tensor,
    `head_bytes` long (K and V). One CTA per (request, head, split); a stage is
    `stage_tokens` tokens (stage_tokens / block_tokens blocks)."""
    kv_heads = _positive_int("kv_heads", kv_heads)
    if not tables or any(len(t) == 0 for t in tables):
        raise ValueError(f"attention kernel {name!r}: every request needs at least one block")
    slots = _slots(machine, ctas_per_sm=ctas_per_sm)
    per_stage = max(1, stage_tokens // block_tokens)
    splits = attention_splits(len(tables), kv_heads, slots, min(len(t) for t in tables))
    ctas: list[npt.NDArray[np.int64]] = []
    starts: list[npt.NDArray[np.int64]] = []
    stages: list[npt.NDArray[np.int64]] = []
    c = 0
    for table in tables:
        blocks = np.asarray(table, dtype=np.int64)
        bounds = np.linspace(0, len(blocks), splits + 1).astype(np.int64)
        for h in range(kv_heads):
            seg = segment(blocks, h)
            for j in range(splits):
                lo, hi = bounds[j], bounds[j + 1]
                ctas.append(np.full(hi - lo, c, dtype=np.int64))
                starts.append(seg[lo:hi])
                stages.append(np.arange(hi - lo, dtype=np.int64) // per_stage)
                c += 1
    cta, start, stage = np.concatenate(ctas), np.concatenate(starts), np.concatenate(stages)
    n = len(cta)
    return Kernel(name, slots, c, (tensor,), cta=cta, tensor=np.zeros(n, dtype=np.int64), start=start,
                  length=np.full(n, head_bytes, dtype=np.int64), stage=stage, write=np.zeros(n, bool))
