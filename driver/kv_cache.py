"""The KV cache of PLoRA section V-B on a DevicePool: token i of every request lives on
device i mod N, and each decode step appends one token to one device.

Each device computes integral attention on its share and the host merges the partials
(driver.attention.merge_attention): with a paged layout (`PagedKvCache.paged`), one paged
ATTENTION per device, request and KV head over the share's page list
(`PagedKvCache.shares`, docs/read-compute-project.md); else one ATTENTION per page
(`PagedKvCache.pages`).
"""
import dataclasses
import itertools
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from isa.descriptor import PAGE_ALIGN, PAGE_ENTRY_BYTES, PAGE_SHIFT_BITS
from isa.encoders import KvBlock, PagedKvShare, attention_descriptor, page_list_bytes, paged_attention_descriptor
from isa.errors import ArgumentError, ShapeError, count_arg, index_arg
from isa.microarch import PAGE_LIST_MAX
from isa.slots import LINE_BYTES
from isa.validate import PAGE_LIST_BYTES

from .attention import F16, kv_operand_bytes, kv_operand_lines, kv_v_offset
from .device import _fp16_array, _padded_bytes
from .errors import OutOfDeviceMemory

if TYPE_CHECKING:
    from .pool import DevicePool


def paged_page_shift(page_tokens: int, d: int) -> int | None:
    """log2 of `page_tokens` where pages of that many tokens of head dimension d can be a
    paged ATTENTION's (a power of two whose keys, page_tokens x d x 2 bytes, are whole
    PAGE_ALIGN pages, and whose log2 fits the flag field), else None: one rule for the
    driver's KV cache and the scheduler's cost model."""
    shift = page_tokens.bit_length() - 1
    if page_tokens < 1 or page_tokens != 1 << shift or shift >= 1 << PAGE_SHIFT_BITS:
        return None
    return shift if page_tokens * d * 2 % PAGE_ALIGN == 0 else None


def list_pages(page_tokens: int, limit: int) -> int:
    """Pages one paged ATTENTION covers at most: its list's PAGE_LIST_MAX entries, and its
    T within `limit`, the device's min(k_max, n_max) (q K^T's N and S V's K are T)."""
    return min(PAGE_LIST_MAX, limit // page_tokens)


def share_chunks(first: int, pages: int, per_list: int) -> list[tuple[int, int]]:
    """The paged ATTENTIONs over pages first..pages-1 of a device's share whose lists hold
    `per_list` pages each (pages c * per_list on): [(first page, end page)], cut at the
    lists' boundaries, so that each chunk but the first is one whole stored list, and the
    first, where it starts inside a list, is that list's tail (the KV cache's suffix list)."""
    cuts = list(range((first // per_list + 1) * per_list, pages, per_list))
    starts = [first, *cuts]
    return [(a, b) for a, b in zip(starts, [*cuts, pages], strict=True) if a < b]


@dataclasses.dataclass
class _Page:
    device: int
    addr: int
    first: int              # device-local index of its first token (token first * N + device)
    t: int = 0


@dataclasses.dataclass
class _Share:
    """One (layer, KV head, device) of a request: its pages in token order; with a paged
    layout, its page lists (one per `lists_pages` pages), its tail list (one entry: the
    last page, for `pages`' per-page path) and its suffix list (the pages of one list from
    the first the GPU does not hold, for `shares` after a held prefix)."""
    pages: list["_Page"] = dataclasses.field(default_factory=list)
    lists: list[int] = dataclasses.field(default_factory=list)
    tail: int | None = None

    @property
    def suffix(self) -> int:
        """The suffix list's address: allocated with the tail list, after it."""
        return cast(int, self.tail) + PAGE_LIST_BYTES


@dataclasses.dataclass
class _Request:
    layers: int
    heads: int
    tokens: int
    shares: dict[tuple[int, int, int], _Share]      # (layer, head, device) -> _Share
    reserved: bool = False  # placed by reserve_request: pages without values


class PagedKvCache:
    """Per (request, layer, KV head), device j of the pool's N holds tokens j, j + N,
    j + 2N, ... in pages of up to `page_tokens` tokens, each in a range allocated for a
    full page: its keys token-major (page_tokens x d FP16, a token per row: the
    descriptor's TRANS_W), then its values.

    The paged layout (`paged`: page_tokens a power of two whose keys, page_tokens x d x 2
    bytes, are a multiple of PAGE_ALIGN): a page starts at a PAGE_ALIGN boundary and its
    values at `page_half_bytes`, so a token's key row and value row are each written in
    place and never move; each (request, layer, head, device) has a page list (u64 page
    addresses in token order) at a PAGE_LIST_BYTES boundary, one per `lists_pages` pages,
    whose entry's line is written when a page is added. `shares` gives the operands of one
    paged ATTENTION per device (per list).

    Other geometries keep the unpaged layout of one ATTENTION operand per page (V from the
    line after K's last, driver.attention.kv_operand_bytes): appending a token whose key
    reaches V's first line moves V down by a line, read back from the device.
    """

    def __init__(self, pool: "DevicePool", head_dim: int, page_tokens: int) -> None:
        self.pool = pool
        self.head_dim = count_arg(head_dim, "head_dim", 1)
        self.page_tokens = count_arg(page_tokens, "page_tokens", 1)
        full = KvBlock(0, self.head_dim, self.page_tokens)
        # ATTENTION's two products: q K^T (K = d, N = T), then S V (K = T, N = d)
        limit = min(min(dev.caps.k_max, dev.caps.n_max) for dev in pool.devices)
        for i, dev in enumerate(pool.devices):
            mine = min(dev.caps.k_max, dev.caps.n_max)
            for name, value in (("page_tokens", self.page_tokens), ("head_dim", self.head_dim)):
                if value > mine:
                    raise ShapeError(f"{name}={value!r} exceeds device {i}'s min(k_max, n_max)="
                                     f"{mine!r}: an ATTENTION descriptor cannot hold it")
        try:
            attention_descriptor(full, 1)
        except ValueError as exc:
            raise ShapeError(f"a page of {self.page_tokens!r} tokens of d={self.head_dim!r} does "
                             f"not fit a descriptor: {exc}") from None
        shift = paged_page_shift(self.page_tokens, self.head_dim)
        keys = self.page_tokens * self.head_dim * 2
        self.paged = shift is not None
        # page_shift, lists_pages and page_half_bytes: ints with the paged layout, else None
        self.page_shift: Any = shift
        # pages one list (so one descriptor) covers: the list's entries, and T within the products' limits
        self.lists_pages: Any = list_pages(self.page_tokens, limit) if self.paged else None
        if self.paged:
            paged_attention_descriptor(0, cast(int, self.lists_pages) * self.page_tokens, self.head_dim,
                                       cast(int, shift), 1)
        self.page_half_bytes: Any = keys if self.paged else None
        self._page_bytes = 2 * keys if self.paged else kv_operand_lines(self.head_dim, self.page_tokens) * LINE_BYTES
        self._requests: dict[Hashable, _Request] = {}

    def __contains__(self, rid: Hashable) -> bool:
        return rid in self._requests

    # ---- reading ---------------------------------------------------------------------------

    def tokens(self, rid: Hashable) -> int:
        """Tokens the request holds."""
        return self._request(rid).tokens

    def pages(self, rid: Hashable, layer: int, head: int) -> list[tuple[int, KvBlock | PagedKvShare, range]]:
        """[(device, operand, global token indices it holds)] of one layer's KV head, one
        per page, by device, then in token order: one ATTENTION each (attention_descriptor;
        NdpDevice.attention_partial, or attention_paged for a share), merged, covers the
        request. The operand is the page's KvBlock; with the paged layout a partial last
        page is a one-page PagedKvShare (its values are not where a KvBlock of its tokens
        has them), except on a reserved request, which holds no values (its pages are
        described as KvBlocks of their tokens, for timing)."""
        request, layer, head = self._where(rid, layer, head)
        n = len(self.pool)
        out: list[tuple[int, KvBlock | PagedKvShare, range]] = []
        for device in range(n):
            share = request.shares[(layer, head, device)]
            for page in share.pages:
                if self.paged and page.t < self.page_tokens and not request.reserved:
                    operand: KvBlock | PagedKvShare = PagedKvShare(cast(int, share.tail), page.t, self.head_dim,
                                                                    self.page_shift, (page.addr,))
                else:
                    operand = KvBlock(page.addr, self.head_dim, page.t)
                out.append((device, operand, range(page.first * n + device, (page.first + page.t) * n + device, n)))
        return out

    def shares(self, rid: Hashable, layer: int, head: int) -> list[tuple[int, PagedKvShare, range]]:
        """[(device, PagedKvShare, global token indices it covers)] of one layer's KV head,
        by device (a device without tokens has none; one with more than `lists_pages`
        pages, one per list): one paged ATTENTION each (NdpDevice.attention_paged, or
        attention_decode), merged, covers the request. Needs the paged layout."""
        return [(device, share, tokens) for device, share, tokens, _ in self.shares_after(rid, layer, head)]

    def shares_after(self, rid: Hashable, layer: int, head: int, held: Sequence[int] | None = None
                     ) -> list[tuple[int, PagedKvShare, range, bytes | None]]:
        """`shares` of the pages the GPU does not hold: on device j, from page held[j] on
        (None: from page 0), cut at the lists' boundaries (share_chunks). A
        chunk that starts inside a stored list reads the share's suffix list, whose bytes
        come fourth: the caller writes them at the share's list_addr before it submits the
        descriptor (at most PAGE_LIST_BYTES; None for a stored list)."""
        if not self.paged:
            raise ShapeError(f"pages of page_tokens={self.page_tokens!r} tokens of head_dim={self.head_dim!r} "
                             f"are not a paged ATTENTION's (a power of two whose keys are a multiple of "
                             f"{PAGE_ALIGN!r} bytes): use pages()")
        request, layer, head = self._where(rid, layer, head)
        n = len(self.pool)
        if held is not None and len(held) != n:
            raise ArgumentError(f"held must give one count per device ({n}), got {len(held)}")
        out: list[tuple[int, PagedKvShare, range, bytes | None]] = []
        for device in range(n):
            share = request.shares[(layer, head, device)]
            first = 0 if held is None else count_arg(held[device], "held")
            if first > len(share.pages):
                raise ArgumentError(f"device {device} holds {len(share.pages)} pages of request {rid!r}, "
                                    f"the GPU cannot hold {first} of them")
            for start, end in share_chunks(first, len(share.pages), self.lists_pages):
                pages = share.pages[start:end]
                addrs = tuple(page.addr for page in pages)
                stored = start % self.lists_pages == 0
                list_addr = share.lists[start // self.lists_pages] if stored else share.suffix
                tokens = sum(page.t for page in pages)
                out.append((device, PagedKvShare(list_addr, tokens, self.head_dim, self.page_shift, addrs),
                            range(pages[0].first * n + device, (pages[0].first + tokens) * n + device, n),
                            None if stored else page_list_bytes(addrs)))
        return out

    def _where(self, rid: Hashable, layer: int, head: int) -> tuple[_Request, int, int]:
        request = self._request(rid)
        return (request, index_arg(layer, "layer", request.layers), index_arg(head, "head", request.heads))

    def _request(self, rid: Hashable) -> _Request:
        try:
            return self._requests[rid]
        except (KeyError, TypeError):
            raise ArgumentError(f"request {rid!r} is not in the KV cache") from None

    # ---- changing --------------------------------------------------------------------------

    async def add_request(self, rid: Hashable, k: F16, v: F16) -> None:
        """Place a request's prefill: k, v float16 (layers, kv_heads, T, head_dim)."""
        if rid in self._requests:
            raise ArgumentError(f"request {rid!r} is in the KV cache already")
        k, v = self._kv(k, v, 4, "(layers, kv_heads, T, head_dim)")
        layers, heads, total, _ = k.shape
        request = self._place(layers, heads, total, reserved=False)
        n = len(self.pool)
        try:
            for (layer, head, device), share in request.shares.items():
                local_k, local_v = k[layer, head, device::n], v[layer, head, device::n]
                for page in share.pages:
                    end = page.first + self.page_tokens
                    await self._write(page, local_k[page.first:end], local_v[page.first:end])
                await self._write_lists(share)
        except BaseException:
            self._free(request)
            raise
        self._requests[rid] = request

    def reserve_request(self, rid: Hashable, tokens: int, layers: int, heads: int) -> None:
        """Place a request of `tokens` tokens as add_request would, pages (and lists)
        allocated and nothing written: for timing runs on a model whose cycles do not depend
        on values (a whole model's KV cache does not fit in host memory). Such a request
        cannot grow; `write_lists` writes its page lists, for `shares`."""
        if rid in self._requests:
            raise ArgumentError(f"request {rid!r} is in the KV cache already")
        tokens, layers, heads = (count_arg(tokens, "tokens", 1), count_arg(layers, "layers", 1),
                                 count_arg(heads, "heads", 1))
        request = self._place(layers, heads, tokens, reserved=True)
        n = len(self.pool)
        for (_, _, device), share in request.shares.items():
            local = len(range(device, tokens, n))
            for page in share.pages:
                page.t = min(self.page_tokens, local - page.first)
        self._requests[rid] = request

    async def write_lists(self, rid: Hashable) -> None:
        """Write every page list of the request (reserve_request writes nothing)."""
        for share in self._request(rid).shares.values():
            await self._write_lists(share)

    async def append(self, rid: Hashable, k_tok: F16, v_tok: F16) -> None:
        """Append one decode token, k_tok and v_tok float16 (layers, kv_heads, head_dim), to
        every layer and head of the request: token T goes to device T mod N."""
        request = self._request(rid)
        if request.reserved:
            raise ArgumentError(f"request {rid!r} was reserved without values (reserve_request): it cannot grow")
        k_tok, v_tok = self._kv(k_tok, v_tok, 3, "(layers, kv_heads, head_dim)")
        if k_tok.shape[:2] != (request.layers, request.heads):
            raise ShapeError(f"request {rid!r} has {(request.layers, request.heads)!r} (layers, "
                             f"kv_heads), the token {k_tok.shape[:2]!r}")
        n = len(self.pool)
        device, local = request.tokens % n, request.tokens // n
        shares = [(layer, head, request.shares[(layer, head, device)])
                  for layer, head in itertools.product(range(request.layers), range(request.heads))]
        new_page = local % self.page_tokens == 0        # every tail page on that device is full
        if new_page:
            self._grow([share for _, _, share in shares], device, local)
        for layer, head, share in shares:
            await self._append(share.pages[-1], k_tok[layer, head], v_tok[layer, head])
            if new_page:                        # the page written, then listed
                await self._write_list_entry(share, len(share.pages) - 1)
        request.tokens += 1

    async def free_request(self, rid: Hashable) -> None:
        """Give back every page and list of the request."""
        self._free(self._request(rid))
        del self._requests[rid]

    # ---- placing -----------------------------------------------------------------------------

    def _place(self, layers: int, heads: int, total: int, reserved: bool) -> _Request:
        """A request's shares with their pages (and lists) allocated: all, or none and
        OutOfDeviceMemory."""
        n = len(self.pool)
        request = _Request(layers, heads, total, {}, reserved)
        try:
            for layer, head, device in itertools.product(range(layers), range(heads), range(n)):
                share = request.shares[(layer, head, device)] = _Share()
                for first in range(0, len(range(device, total, n)), self.page_tokens):
                    self._grow([share], device, first)
        except OutOfDeviceMemory:
            self._free(request)
            raise
        return request

    def _grow(self, shares: list[_Share], device: int, first: int) -> None:
        """A new page on `device` for each share, its first token `first` (and a new list
        where one is full, a tail list for the first page): all, or none and
        OutOfDeviceMemory."""
        taken: list[int] = []
        added: list[tuple[_Share, bool, bool]] = []          # addresses allocated here; (share, new list, new tail)
        try:
            for share in shares:
                addr = self._allocate(device, self._page_bytes, PAGE_ALIGN if self.paged else None)
                taken.append(addr)
                new_list: int | None = None
                new_tail: int | None = None
                if self.paged and len(share.pages) % self.lists_pages == 0:
                    new_list = self._allocate(device, PAGE_LIST_BYTES, PAGE_LIST_BYTES)
                    taken.append(new_list)
                    if share.tail is None:      # the tail and suffix lists, with the first list
                        new_tail = self._allocate(device, 2 * PAGE_LIST_BYTES, PAGE_LIST_BYTES)
                        taken.append(new_tail)
                share.pages.append(_Page(device, addr, first))
                if new_list is not None:
                    share.lists.append(new_list)
                if new_tail is not None:
                    share.tail = new_tail
                added.append((share, new_list is not None, new_tail is not None))
        except OutOfDeviceMemory:
            for share, new_list, new_tail in added:
                share.pages.pop()
                if new_list:
                    share.lists.pop()
                if new_tail:
                    share.tail = None
            for addr in taken:
                self.pool.free(device, addr)
            raise

    def _allocate(self, device: int, nbytes: int, align: int | None) -> int:
        return self.pool.allocate(device, nbytes, align)

    def _free(self, request: _Request) -> None:
        for (_, _, device), share in request.shares.items():
            tail = [share.tail] if share.tail is not None else []
            for addr in [page.addr for page in share.pages] + share.lists + tail:
                self.pool.free(device, addr)
            share.pages, share.lists, share.tail = [], [], None

    # ---- writing -----------------------------------------------------------------------------

    async def _write_lists(self, share: _Share) -> None:
        """A share's lists whole and its tail list (the paged layout)."""
        if not self.paged or not share.pages:
            return
        device = share.pages[0].device
        for c, list_addr in enumerate(share.lists):
            pages = share.pages[c * self.lists_pages:(c + 1) * self.lists_pages]
            await self.pool.mem_write(device, list_addr, page_list_bytes([page.addr for page in pages]))
        await self.pool.mem_write(device, cast(int, share.tail), page_list_bytes([share.pages[-1].addr]))

    async def _write_list_entry(self, share: _Share, p: int) -> None:
        """Page p was added: the line of its list that holds its entry, and the tail list."""
        if not self.paged:
            return
        device = share.pages[p].device
        c, entry = divmod(p, self.lists_pages)
        per_line = LINE_BYTES // PAGE_ENTRY_BYTES
        start = c * self.lists_pages + entry // per_line * per_line
        line = share.pages[start:min(start + per_line, (c + 1) * self.lists_pages)]
        await self.pool.mem_write(device, share.lists[c] + entry // per_line * LINE_BYTES,
                                  page_list_bytes([page.addr for page in line]))
        await self.pool.mem_write(device, cast(int, share.tail), page_list_bytes([share.pages[p].addr]))

    async def _write(self, page: _Page, k: F16, v: F16) -> None:
        """Lay out the page's tokens k, v (t x d) and write them."""
        if self.paged:
            data = _padded_bytes(k, self.page_half_bytes) + _padded_bytes(v, self.page_half_bytes)
        else:
            data = kv_operand_bytes(k, v)
        await self.pool.mem_write(page.device, page.addr, data)
        page.t = len(k)

    async def _append(self, page: _Page, k_row: F16, v_row: F16) -> None:
        """One more token at the page's end: its key row after the others; its value row
        after the others' (the paged layout: at page_half_bytes; else from the line after
        the keys, which moves V down a line when the new key reaches it)."""
        t, d = page.t, self.head_dim
        if t == 0:
            return await self._write(page, k_row[None], v_row[None])
        row = d * 2
        key, value = np.ascontiguousarray(k_row).tobytes(), np.ascontiguousarray(v_row).tobytes()
        v_at = self.page_half_bytes if self.paged else kv_v_offset(d, t)
        v_next = self.page_half_bytes if self.paged else kv_v_offset(d, t + 1)
        if v_next == v_at:
            await self.pool.mem_write(page.device, page.addr + t * row, key)
            await self.pool.mem_write(page.device, page.addr + v_at + t * row, value)
        else:
            old = await self.pool.mem_read(page.device, page.addr + v_at, t * row)
            gap = v_next - (t + 1) * row                     # zeros up to the line V starts on
            await self.pool.mem_write(page.device, page.addr + t * row, key + bytes(gap) + old + value)
        page.t = t + 1

    def _kv(self, k: F16, v: F16, ndim: int, shape: str) -> tuple[F16, F16]:
        _fp16_array(k, "k", ndim)
        _fp16_array(v, "v", ndim)
        if k.shape != v.shape:
            raise ShapeError(f"k and v must have the same shape {shape}, got {k.shape!r} and {v.shape!r}")
        if k.shape[-1] != self.head_dim:
            raise ShapeError(f"k has head_dim {k.shape[-1]!r}, the cache's is {self.head_dim!r}")
        return k, v
