"""A step's batch as KV pages the GPU may duplicate, and its attention round under every
share of them (seed 000, sections V-B and VI; Table V).

A share p of the batch's units (scheduler.kv_pages) is spread over the requests as evenly as
their pages allow (water-filling), and priced as cost.AttentionTable does, every layer: the
GPU over the pages it holds, and the pages it does not hold computed by the devices
(`on_devices`) or read by the GPU over the link.

It is built once a step from values (the cost model, the link, the model's shapes, the
bytes of a token's KV); it reads no scheduler state. Its memos (`_units`, `_loads`) are of a
step's batch and live as long as it does.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from isa.system import LinkConfig, ModelConfig

from .cost import AttentionTable, CostModel
from .entities import Request
from .kv_pages import water_fill
from .rounds import RoundLoad


class KvShare:
    def __init__(self, cost: CostModel, link: LinkConfig, model: ModelConfig, kv_token_bytes: float,
                 requests: Sequence[Request]):
        self.link = link
        self.layers = model.layers
        self.kv_token_bytes = kv_token_bytes
        self.table = AttentionTable(cost, [r.context for r in requests], [r.rid for r in requests],
                                    model.q_heads, model.kv_heads, model.head_dim)
        self.caps = self.table.layout.units
        self.total = int(self.caps.sum())
        self.on_devices = cost.distributed_attention
        self.modes = (True, False) if self.on_devices else (False,)
        self._units: dict[int, np.ndarray] = {}
        self._loads: dict[tuple[int, bool], tuple[RoundLoad, float]] = {}

    def units_of(self, p_kv: float) -> np.ndarray:
        """Units per request of a share p_kv of all units."""
        total = min(int(p_kv * self.total), self.total)
        units = self._units.get(total)
        if units is None:
            units = self._units[total] = water_fill(self.caps, total)
        return units

    def tokens_of(self, units: np.ndarray) -> np.ndarray:
        return self.table.gpu_tokens[units, self.table.requests]

    def bytes(self, units: np.ndarray) -> float:
        return float(self.tokens_of(units).sum()) * self.kv_token_bytes

    def share_bytes(self, p_kv: float) -> float:
        """GPU bytes of the duplicates at share p_kv."""
        return self.bytes(self.units_of(p_kv))

    def load(self, units: np.ndarray, on_devices: bool | None = None) -> tuple[RoundLoad, float]:
        """(RoundLoad of one layer, GPU KV bytes) with the GPU holding `units` (kept: the
        search asks for the same shares again)."""
        on_devices = self.on_devices if on_devices is None else on_devices
        key = (int(units.sum()), on_devices)        # units come from units_of: one per total
        found = self._loads.get(key)
        if found is None:
            found = self._loads[key] = self.table.load(units, on_devices)
        return found

    def seconds(self, units: np.ndarray, on_devices: bool | None = None) -> float:
        """The attention round over every layer with the GPU holding `units`."""
        return self.load(units, on_devices)[0].seconds(self.link) * self.layers

    def share_seconds(self, p_kv: float) -> float:
        """The attention round over every layer with a share p_kv duplicated on the GPU."""
        return self.seconds(self.units_of(p_kv))

    def share_fitting(self, nbytes: float, upper: float) -> float:
        """The largest share <= upper whose duplicates take at most `nbytes`."""
        if self.bytes(self.units_of(upper)) <= nbytes:
            return upper
        lo, hi = 0, min(int(upper * self.total), self.total)     # in units: bytes grow with them
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.bytes(self.units_of(mid / self.total)) <= nbytes:
                lo = mid
            else:
                hi = mid - 1
        return lo / self.total if self.total else 0.0

    def best_share(self, on_devices: bool | None = None, hint: float | None = None) -> float:
        """The share of least attention time. The GPU's side grows with the share and the
        pool's shrinks, so the least is where they cross: the first share whose GPU side
        is no shorter than the pool's, or the one before it (a bisection; `hint`, the last
        step's share, is tried first, since contexts grow a token a step), or an end."""
        if not self.total:
            return 0.0
        link = self.link

        def gpu_ahead(u: int) -> bool:
            load = self.load(self.units_of(u / self.total), on_devices)[0]
            return load.gpu_s >= load.pool_s(link)
        lo, hi = 0, self.total
        if hint is not None:
            guess = min(int(hint * self.total), self.total)
            if gpu_ahead(guess):
                hi = guess
                if guess == 0 or not gpu_ahead(guess - 1):
                    lo = guess
            else:
                lo = guess + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if gpu_ahead(mid):
                hi = mid
            else:
                lo = mid + 1
        candidates = sorted({0, self.total, max(lo - 1, 0), lo})
        best = min(candidates, key=lambda u: (self.seconds(self.units_of(u / self.total), on_devices), u))
        return best / self.total

    def choose(self, room: float, hints: dict[bool, float]) -> tuple[bool, float]:
        """(on_devices, the share of least attention time): the devices compute what the GPU
        does not hold, or the GPU reads it over the link, whichever is faster at the share
        each would get in `room` bytes of GPU memory (the devices first on a tie). A device
        is slower than the link where its MACs bind: a GQA group of 8 query heads per KV
        head does 8 FLOPs per KV byte against the core's 2 (docs/scheduler.md). `hints`
        (mode -> the last step's best share) is where each search starts, and is updated."""
        options = []
        for mode in self.modes:
            best = hints[mode] = self.best_share(mode, hints.get(mode))
            fitted = self.share_fitting(room, best)
            options.append((self.seconds(self.units_of(fitted), mode), not mode, mode, best))
        _, _, mode, best = min(options)
        self.on_devices = mode
        return mode, best
