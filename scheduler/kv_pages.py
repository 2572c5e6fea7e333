"""Which pages of a request's KV cache the GPU duplicates, and what each device is left with.

The pool holds token i of a request on device i mod N, in pages of P tokens per (layer, KV
head, device) (seed 000, section V-B; driver/kv_cache.py). A device computes a page whole:
a page is one ATTENTION operand (its V after its keys, at the line after the last one, or,
in a paged cache, half a page on: docs/read-compute-project.md), so no descriptor can start
or end inside a page. The GPU's
duplicates are therefore whole pages, and the finest unit is one page on one device: for a
context under N x P tokens that is the device's whole share, so any context can be
duplicated in part (the unit was N x P tokens before, issue 24).

A request's units come in a fixed order: page 0 on every device, then page 1, ..., the
devices in turn starting at device rid mod N. Holding u units is holding the first u of
that order, oldest pages first; starting each request at its own device leaves the devices
balanced when many requests hold the same number of units. Everything here is numpy over
arrays of requests (rows) and devices (columns).
"""
import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


@dataclasses.dataclass(frozen=True)
class Layout:
    """The pages of a batch: per request (row) and device (column)."""
    tokens: np.ndarray          # tokens the device holds
    full: np.ndarray            # its full pages (P tokens each)
    tail: np.ndarray            # the tokens of its last, partial page (0: none)
    pages: np.ndarray           # full + (tail > 0)
    rotation: np.ndarray        # (device - rid) mod N: the device's turn in the request's order
    common: np.ndarray          # per request (a column): the page rows every device has
    last_row: np.ndarray        # whether the device has a page in the row after them
    place: np.ndarray           # its turn among the devices that have one there
    units: np.ndarray           # per request: its pages on all devices

    @property
    def requests(self) -> int:
        return self.tokens.shape[0]


class KvPages:
    def __init__(self, num_devices: int, page_tokens: int) -> None:
        if num_devices < 1 or page_tokens < 1:
            raise ValueError(f"num_devices and page_tokens must be >= 1, got {num_devices!r}, {page_tokens!r}")
        self.n, self.page = int(num_devices), int(page_tokens)

    def layout(self, contexts: Sequence[int] | npt.ArrayLike, rids: Sequence[int] | npt.ArrayLike) -> Layout:
        """The pages of requests with `contexts` tokens and ids `rids` (sequences of ints)."""
        t = np.asarray(contexts, dtype=np.int64).reshape(-1, 1)
        rid = np.asarray(rids, dtype=np.int64).reshape(-1, 1)
        device = np.arange(self.n, dtype=np.int64)
        tokens = t // self.n + (device < t % self.n)
        full, tail = np.divmod(tokens, self.page)
        pages = full + (tail > 0)
        rotation = (device - rid) % self.n
        # the devices' page counts differ by at most one (the first devices hold one token
        # more): rows every device has, then a last row on some of them
        common = pages.min(axis=1, keepdims=True)
        last_row = pages > common
        place = (last_row[:, None, :] & (rotation[:, None, :] < rotation[:, :, None])).sum(axis=2)
        return Layout(tokens, full, tail, pages, rotation, common, last_row, place, pages.sum(axis=1))

    def held(self, layout: Layout, units: npt.ArrayLike) -> IntArray:
        """Pages the GPU holds per request and device when request r holds its first
        units[r] units (0 <= units[r] <= layout.units[r]); `units` may have leading axes
        (several shares at once: (..., requests) in, (..., requests, devices) out)."""
        u = np.asarray(units, dtype=np.int64)[..., None]
        if (u < 0).any() or (u[..., 0] > layout.units).any():
            bad = np.argwhere((u[..., 0] < 0) | (u[..., 0] > layout.units))[0]
            raise ValueError(f"request {int(bad[-1])}: {int(u[tuple(bad)][0])} units held, it has "
                             f"0..{int(layout.units[bad[-1]])}")
        below = np.minimum(u, layout.common * self.n)       # units in the rows all devices have
        held = below // self.n + (layout.rotation < below % self.n)
        return held + (layout.last_row & (layout.place < u - below))

    def held_pages(self, context: int, rid: int, units: int) -> list[int]:
        """Per device, how many of its first pages of one request the GPU holds."""
        layout = self.layout([context], [rid])
        return self.held(layout, [units])[0].tolist()

    def gpu_tokens(self, layout: Layout, held: IntArray) -> IntArray:
        """Tokens the GPU holds per request: its held pages' tokens."""
        held_full = np.minimum(held, layout.full)
        tail_held = (held > layout.full) & (layout.tail > 0)
        return (held_full * self.page + tail_held * layout.tail).sum(axis=-1)

    def device_pages(self, layout: Layout, held: IntArray) -> tuple[IntArray, npt.NDArray[np.bool_]]:
        """(full pages, whether the tail page is computed) per request and device: what
        each device is left to compute."""
        return np.maximum(layout.full - held, 0), (layout.tail > 0) & (held <= layout.full)


def water_fill(caps: npt.ArrayLike, total: float) -> IntArray:
    """`total` units spread over requests as evenly as their caps allow: every request gets
    min(cap, q), q the largest level at which they fit, and the first requests (in order)
    with room one more; returns the units per request (an int64 array summing to
    min(total, sum(caps)))."""
    caps = np.asarray(caps, dtype=np.int64)
    total = min(max(int(total), 0), int(caps.sum()))
    lo, hi = 0, int(caps.max(initial=0))
    while lo < hi:                      # the largest q with sum(min(caps, q)) <= total
        mid = (lo + hi + 1) // 2
        if int(np.minimum(caps, mid).sum()) <= total:
            lo = mid
        else:
            hi = mid - 1
    units = np.minimum(caps, lo)
    room = np.flatnonzero(caps > lo)[:total - int(units.sum())]
    units[room] += 1
    return units
