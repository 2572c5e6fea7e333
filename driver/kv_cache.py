"""The KV cache of PLoRA section V-B on a DevicePool: token i of every request lives on
device i mod N, and each decode step appends one token to one device.

Each device then computes integral attention on its share (NdpDevice.attention_partial
per page) and the host merges the partials (driver.attention.merge_attention).
"""
import dataclasses
import itertools

import numpy as np

from isa.slots import LINE_BYTES

from .attention import kv_operand_bytes, kv_operand_lines, kv_v_offset
from .device import KvBlock, _fp16_array, attention_descriptor
from .errors import ArgumentError, OutOfDeviceMemory, ShapeError, count_arg, index_arg


@dataclasses.dataclass
class _Page:
    device: int
    addr: int
    first: int              # device-local index of its first token (token first * N + device)
    v: np.ndarray = None    # its tokens' values (t x d), kept while it may grow (V moves with K's end)
    t: int = 0


@dataclasses.dataclass
class _Request:
    layers: int
    heads: int
    tokens: int
    pages: dict             # (layer, head, device) -> [_Page], in token order
    reserved: bool = False  # placed by reserve_request: pages without values


class PagedKvCache:
    """Per (request, layer, KV head), device j of the pool's N holds tokens j, j + N,
    j + 2N, ... in pages of up to `page_tokens` tokens, each page one ATTENTION operand
    (a KvBlock: K token-major, then V; driver.attention.kv_operand_bytes) in a range
    allocated for a full page.

    A page only grows at its end. Its keys are token-major (the descriptor's TRANS_W), so
    a token's key is one contiguous row written in place; V starts at the line after K's
    last, so it moves down by the new row and is written again, from the host's copy of
    the page's values (kept until the page is full).
    """

    def __init__(self, pool, head_dim, page_tokens):
        self.pool = pool
        self.head_dim = count_arg(head_dim, "head_dim", 1)
        self.page_tokens = count_arg(page_tokens, "page_tokens", 1)
        full = KvBlock(0, self.head_dim, self.page_tokens)
        for i, dev in enumerate(pool.devices):
            # ATTENTION's two products: q K^T (K = d, N = T), then S V (K = T, N = d)
            limit = min(dev.caps.k_max, dev.caps.n_max)
            for name, value in (("page_tokens", self.page_tokens), ("head_dim", self.head_dim)):
                if value > limit:
                    raise ShapeError(f"{name}={value!r} exceeds device {i}'s min(k_max, n_max)="
                                     f"{limit!r}: an ATTENTION descriptor cannot hold it")
        try:
            attention_descriptor(full, 1)
        except ValueError as exc:
            raise ShapeError(f"a page of {self.page_tokens!r} tokens of d={self.head_dim!r} does "
                             f"not fit a descriptor: {exc}") from None
        self._page_bytes = kv_operand_lines(self.head_dim, self.page_tokens) * LINE_BYTES
        self._requests = {}

    def __contains__(self, rid):
        return rid in self._requests

    # ---- reading ---------------------------------------------------------------------------

    def tokens(self, rid):
        """Tokens the request holds."""
        return self._request(rid).tokens

    def pages(self, rid, layer, head):
        """[(device, KvBlock, global token indices it holds)] of one layer's KV head, by
        device, then in token order: one attention_partial each, merged, covers the request."""
        request = self._request(rid)
        layer = index_arg(layer, "layer", request.layers)
        head = index_arg(head, "head", request.heads)
        n = len(self.pool)
        return [(device, KvBlock(page.addr, self.head_dim, page.t),
                 range(page.first * n + device, (page.first + page.t) * n + device, n))
                for device in range(n) for page in request.pages[(layer, head, device)]]

    def _request(self, rid):
        try:
            return self._requests[rid]
        except (KeyError, TypeError):
            raise ArgumentError(f"request {rid!r} is not in the KV cache") from None

    # ---- changing --------------------------------------------------------------------------

    async def add_request(self, rid, k, v):
        """Place a request's prefill: k, v float16 (layers, kv_heads, T, head_dim)."""
        if rid in self._requests:
            raise ArgumentError(f"request {rid!r} is in the KV cache already")
        k, v = self._kv(k, v, 4, "(layers, kv_heads, T, head_dim)")
        layers, heads, total, _ = k.shape
        n = len(self.pool)
        request = _Request(layers, heads, total, {})
        wanted = []
        for layer, head, device in itertools.product(range(layers), range(heads), range(n)):
            local = len(range(device, total, n))
            wanted += [(layer, head, device, first) for first in range(0, local, self.page_tokens)]
        pages = self._new_pages(wanted)
        for (layer, head, device, _), page in zip(wanted, pages):
            request.pages.setdefault((layer, head, device), []).append(page)
        try:
            for layer, head, device in itertools.product(range(layers), range(heads), range(n)):
                request.pages.setdefault((layer, head, device), [])
                local_k, local_v = k[layer, head, device::n], v[layer, head, device::n]
                for page in request.pages[(layer, head, device)]:
                    end = page.first + self.page_tokens
                    await self._write(page, local_k[page.first:end], local_v[page.first:end])
        except BaseException:
            self._free_pages(pages)
            raise
        self._requests[rid] = request

    def reserve_request(self, rid, tokens, layers, heads):
        """Place a request of `tokens` tokens as add_request would, pages allocated and
        nothing written: for timing runs on a model whose cycles do not depend on values
        (a whole model's KV cache does not fit in host memory). Such a request cannot grow."""
        if rid in self._requests:
            raise ArgumentError(f"request {rid!r} is in the KV cache already")
        tokens, layers, heads = (count_arg(tokens, "tokens", 1), count_arg(layers, "layers", 1),
                                 count_arg(heads, "heads", 1))
        n = len(self.pool)
        request = _Request(layers, heads, tokens, {}, reserved=True)
        wanted = []
        for layer, head, device in itertools.product(range(layers), range(heads), range(n)):
            local = len(range(device, tokens, n))
            wanted += [(layer, head, device, first) for first in range(0, local, self.page_tokens)]
            request.pages[(layer, head, device)] = []
        for (layer, head, device, first), page in zip(wanted, self._new_pages(wanted)):
            page.t, page.v = min(self.page_tokens, len(range(device, tokens, n)) - first), None
            request.pages[(layer, head, device)].append(page)
        self._requests[rid] = request

    async def append(self, rid, k_tok, v_tok):
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
        heads = list(itertools.product(range(request.layers), range(request.heads)))
        if local % self.page_tokens == 0:       # every tail page on that device is full
            pages = self._new_pages([(layer, head, device, local) for layer, head in heads])
            for (layer, head), page in zip(heads, pages):
                request.pages[(layer, head, device)].append(page)
        for layer, head in heads:
            page = request.pages[(layer, head, device)][-1]
            await self._append(page, k_tok[layer, head], v_tok[layer, head])
        request.tokens += 1

    async def free_request(self, rid):
        """Give back every page of the request."""
        request = self._request(rid)
        self._free_pages([page for pages in request.pages.values() for page in pages])
        del self._requests[rid]

    def _free_pages(self, pages):
        for page in pages:
            self.pool.free(page.device, page.addr)

    def _new_pages(self, wanted):
        """Allocate a page for each (layer, head, device, first): all, or none and
        OutOfDeviceMemory."""
        pages = []
        try:
            for _, _, device, first in wanted:
                addr = self.pool.allocate(device, self._page_bytes)
                pages.append(_Page(device, addr, first, self._empty()))
        except OutOfDeviceMemory:
            self._free_pages(pages)
            raise
        return pages

    def _empty(self):
        return np.zeros((0, self.head_dim), np.float16)

    async def _write(self, page, k, v):
        """Lay out the page's tokens k, v (t x d) and write them; a full page's copy is dropped."""
        await self.pool.mem_write(page.device, page.addr, kv_operand_bytes(k, v))
        self._hold(page, v)

    async def _append(self, page, k_row, v_row):
        """One more token at the page's end: its key row in place after the others, then V
        again from the line after the keys (kv_v_offset of the new count)."""
        t, d = page.t, self.head_dim
        if t == 0:
            return await self._write(page, k_row[None], v_row[None])
        v = np.concatenate([page.v, v_row[None]])
        key = np.ascontiguousarray(k_row).tobytes()
        gap = kv_v_offset(d, t + 1) - (t + 1) * d * 2          # zeros up to the line V starts on
        await self.pool.mem_write(page.device, page.addr + t * d * 2,
                                  key + bytes(gap) + np.ascontiguousarray(v).tobytes())
        self._hold(page, v)

    def _hold(self, page, v):
        page.t = len(v)
        page.v = None if page.t == self.page_tokens else v.copy()

    def _kv(self, k, v, ndim, shape):
        _fp16_array(k, "k", ndim)
        _fp16_array(v, "v", ndim)
        if k.shape != v.shape:
            raise ShapeError(f"k and v must have the same shape {shape}, got {k.shape!r} and {v.shape!r}")
        if k.shape[-1] != self.head_dim:
            raise ShapeError(f"k has head_dim {k.shape[-1]!r}, the cache's is {self.head_dim!r}")
        return k, v
