"""The Data Shape Remapper (DSR, seed 002 sections 4.3, 4.5): KV blocks of two types in two
free lists, assigned to requests greedily and stickily, over an LPP-placed pool.

Block types. For a target share 1/M of the KV on the second tier with H KV heads, a block
keeps h_hi or h_lo of its heads there: with H <= M, one ('single-head-host') or none
('all-local') in the ratio H : M - H (section 4.3); with H > M, floor(H/M) or ceil(H/M)
heads (section 4.5: 'When H>M, DSR mixes blocks with floor(H/M) and ceil(H/M) host heads').
Per M blocks, H mod M are of the high type, so the share is exactly 1/M over the pool.

Fulfilment. A new request takes the high type if the high list's share of the free blocks
exceeds its share of the pool ('if the free single-head-host fraction exceeds H/M'), else
the low type; all its blocks come from that list (sticky). When its list is empty it takes
the other type and keeps it (sticky again: the mixing stays in that request); when fewer
than `reserve` blocks are free, DSR defers to the serving system's scheduler (PoolExhausted).

Layout (section 4.5: 'DSR reshapes the KV tensor to place heads as the outermost dimension,
so the data of each head becomes contiguous and aligns to the LPP partition'): a block's
head h is one chunk [layers][K, V][tokens][head_dim]; the pool is LPP-placed, its HBM
region first, and a chunk's slot is in the region of its tier, so the tier of a KV head
chunk follows from the free list its block came from, with no per-page bookkeeping.
"""
import collections
import dataclasses
import math
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any

from .pages import Placement, lpp

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


class PoolExhausted(RuntimeError):
    """No block can be given without the serving system's scheduler (preempt or wait)."""


def _int(name: str, v: Any, low: int) -> int:
    if not (isinstance(v, int) and not isinstance(v, bool) and v >= low):
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
    return v


@dataclasses.dataclass(frozen=True)
class BlockTypes:
    kv_heads: int
    modulus: int                    # M: 1/M of the KV on the second tier

    def __post_init__(self) -> None:
        _int("kv_heads (H)", self.kv_heads, 1)
        _int("modulus (M)", self.modulus, 2)

    @property
    def lo(self) -> int:
        return self.kv_heads // self.modulus

    @property
    def hi(self) -> int:
        return math.ceil(self.kv_heads / self.modulus)

    @property
    def hi_per_modulus(self) -> int:
        """High-type blocks in every M blocks: H mod M (all M when M divides H: one type)."""
        r = self.kv_heads % self.modulus
        return r if r else self.modulus

    @property
    def hi_share(self) -> float:
        return self.hi_per_modulus / self.modulus

    def host_heads(self, hi: bool) -> int:
        return self.hi if hi else self.lo

    def pattern(self, n_blocks: int) -> list[bool]:
        """Block b's type (True: high), spread evenly: Bresenham over the pool."""
        q = self.hi_share
        return [math.floor((b + 1) * q + 1e-9) - math.floor(b * q + 1e-9) == 1 for b in range(n_blocks)]


@dataclasses.dataclass(frozen=True)
class KvShape:
    layers: int
    kv_heads: int
    head_dim: int
    block_tokens: int = 16
    elem_bytes: int = 1

    @property
    def chunk_bytes(self) -> int:
        """One head of one block over every layer, K and V: the unit DSR places."""
        return self.layers * 2 * self.block_tokens * self.head_dim * self.elem_bytes

    @property
    def head_layer_bytes(self) -> int:
        """What one layer's attention CTA reads of a block's head."""
        return 2 * self.block_tokens * self.head_dim * self.elem_bytes

    @property
    def block_bytes(self) -> int:
        return self.chunk_bytes * self.kv_heads


class DsrPool:
    def __init__(self, n_blocks: int, shape: KvShape, modulus: int, page_bytes: int = 2 << 20,
                 reserve: int = 0) -> None:
        _int("n_blocks", n_blocks, 1)
        self.types = BlockTypes(shape.kv_heads, modulus)
        self.shape, self.page_bytes, self.reserve = shape, page_bytes, _int("reserve", reserve, 0)
        hi = self.types.pattern(n_blocks)
        self.is_hi = hi
        self.free = {True: collections.deque(b for b in range(n_blocks) if hi[b]),
                     False: collections.deque(b for b in range(n_blocks) if not hi[b])}
        self.n_blocks = n_blocks
        self.kind: dict[Hashable, bool] = {}            # rid -> current type (True: high)
        self.blocks: dict[Hashable, list[int]] = {}     # rid -> its blocks, in order
        self.mixed: set[Hashable] = set()               # requests that crossed a boundary condition
        self._layout()

    # ---- layout -----------------------------------------------------------------------

    def _layout(self) -> None:
        """Slots: the HBM region holds every block's local heads, the second-tier region
        (from a page boundary on, LPP) its host heads; slot(b, h) x chunk_bytes is the
        chunk's address. Host heads are heads 0 .. host_heads(b) - 1."""
        t, chunk, H = self.types, self.shape.chunk_bytes, self.shape.kv_heads
        host_chunks = sum(t.host_heads(h) for h in self.is_hi)
        local_chunks = self.n_blocks * H - host_chunks
        page = self.page_bytes
        unit = math.lcm(chunk, page)
        self.host_start = -(-local_chunks * chunk // unit) * unit      # bytes: the LPP boundary
        self.nbytes = self.host_start + host_chunks * chunk
        self._slot: dict[tuple[int, int], int] = {}
        nxt_local, nxt_host = 0, self.host_start // chunk
        for b in range(self.n_blocks):
            k = t.host_heads(self.is_hi[b])
            for h in range(H):
                if h < k:
                    self._slot[b, h] = nxt_host
                    nxt_host += 1
                else:
                    self._slot[b, h] = nxt_local
                    nxt_local += 1

    def placement(self) -> Placement:
        """LPP of the pool: the pages from host_start on are on the second tier."""
        n = -(-self.nbytes // self.page_bytes)
        return Placement(self.nbytes, self.page_bytes, lpp(n, (n - self.host_start // self.page_bytes) / n))

    def chunk_offset(self, block: int, head: int) -> int:
        return self._slot[block, head] * self.shape.chunk_bytes

    def segment(self, blocks: Iterable[int], head: int, layer: int = 0) -> "npt.NDArray[np.int64]":
        """Starts of `blocks`' data of `head` in `layer` (for kernels.attention_kernel)."""
        import numpy as np
        return np.array([self.chunk_offset(int(b), head) for b in blocks], dtype=np.int64) \
            + layer * self.shape.head_layer_bytes

    # ---- fulfilment -------------------------------------------------------------------

    def free_count(self) -> int:
        return len(self.free[True]) + len(self.free[False])

    def _new_type(self) -> bool:
        free = self.free_count()
        return free > 0 and len(self.free[True]) / free > self.types.hi_share

    def allocate(self, rid: Hashable) -> int:
        """One more block for request `rid` (its first decides its type)."""
        if self.free_count() <= self.reserve:
            raise PoolExhausted(f"{self.free_count()} free blocks, reserve {self.reserve}: defer to the scheduler")
        if rid not in self.kind:
            self.kind[rid] = self._new_type()
            self.blocks[rid] = []
        kind = self.kind[rid]
        if not self.free[kind]:
            kind = self.kind[rid] = not kind        # a boundary condition: sticky switch
            self.mixed.add(rid)
        b = self.free[kind].popleft()
        self.blocks[rid].append(b)
        return b

    def release(self, rid: Hashable) -> None:
        for b in self.blocks.pop(rid, ()):
            self.free[self.is_hi[b]].append(b)
        self.kind.pop(rid, None)
        self.mixed.discard(rid)

    def host_heads(self, block: int) -> int:
        return self.types.host_heads(self.is_hi[block])
