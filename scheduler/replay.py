"""Replay of a decode step through the driver on a device pool, against a dense float64
computation of the same layers.

One forward function (`Step.forward`) runs a decoder layer (LoRA on Q/K/V/O and the FFN,
GQA attention over the KV cache, residuals; no norms) with two backends for its LoRA
products and attention: `DenseBackend`, float64 on the float16 weights, and `PoolBackend`,
which emits the scheduler's descriptor stream (scheduler.emit), submits it to the pool,
collects the completions as they arrive and does the GPU's share in float64. Only the
device's own roundings (its FP16 results, E3's FP16 x A, attention's FP16 S) separate the
two, so a descriptor with a wrong address, rows, token split or merge shows at once.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from driver.attention import Partial, merge_attention, partial_attention_reference, query_groups, scale_query
from driver.kv_cache import PagedKvCache
from driver.pool import DevicePool
from isa.encoders import FP16, attention_result
from isa.system import ModelConfig

from .cost import Strategy
from .emit import Round, attention_round, lora_round
from .entities import StepPlan
from .kv_pages import KvPages

F64 = npt.NDArray[np.float64]
F16 = npt.NDArray[np.float16]
StrategyOf = Callable[[int, str], Strategy]


def _silu(x: F64) -> F64:
    return x / (1 + np.exp(-x))


class Step:
    """A model's weights, adapters, requests and KV cache, made up from `rng` (FP16)."""

    def __init__(self, model: ModelConfig, ranks: Mapping[int, int], requests: Iterable[tuple[int, int, int]],
                 rng: np.random.Generator) -> None:
        """`ranks`: adapter -> rank; `requests`: [(rid, adapter, context tokens)]."""
        self.model, self.ranks, self.requests = model, dict(ranks), list(requests)
        d = model.hidden
        self.base = {(layer, p.name): self._fp16(rng, (p.d_in, p.d_out), p.d_in)
                     for layer in range(model.layers) for p in model.projections}
        self.lora = {(a, layer, p.name): (self._fp16(rng, (p.d_in, r), p.d_in), self._fp16(rng, (r, p.d_out), r))
                     for a, r in self.ranks.items() for layer in range(model.layers) for p in model.projections}
        shape = (model.layers, model.kv_heads)
        self.kv = {rid: (self._fp16(rng, (*shape, t, model.head_dim), 1),
                         self._fp16(rng, (*shape, t, model.head_dim), 1))
                   for rid, _, t in self.requests}
        self.x = np.stack([self._fp16(rng, (d,), 1) for _ in self.requests]).astype(np.float64)
        self.groups = query_groups(model.q_heads, model.kv_heads)

    @staticmethod
    def _fp16(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> F16:
        return (rng.standard_normal(shape) / math.sqrt(fan_in)).astype(np.float16)

    def rows_by_adapter(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for i, (_, adapter, _) in enumerate(self.requests):
            out.setdefault(adapter, []).append(i)
        return out

    async def forward(self, backend: DenseBackend | PoolBackend) -> tuple[F64, list[tuple[F16, F16]]]:
        """The step's output rows (requests x hidden, float64) and each request's new K, V
        per layer (float16), through `backend`'s LoRA and attention."""
        m = self.model
        h = self.x
        new_kv = []
        for layer in range(m.layers):
            def proj(name: str, x: F64, layer: int = layer) -> F64:
                return x @ self.base[(layer, name)].astype(np.float64)
            delta = await backend.lora(self, layer, ("q", "k", "v"), h)
            q, k, v = (proj(n, h) + delta[n] for n in ("q", "k", "v"))
            k16 = k.reshape(len(self.requests), m.kv_heads, m.head_dim).astype(np.float16)
            v16 = v.reshape(len(self.requests), m.kv_heads, m.head_dim).astype(np.float16)
            new_kv.append((k16, v16))
            attn = await backend.attention(self, layer, q.reshape(len(self.requests), m.q_heads, m.head_dim),
                                           k16, v16)
            attn = attn.reshape(len(self.requests), -1)
            h = h + proj("o", attn) + (await backend.lora(self, layer, ("o",), attn))["o"]
            delta = await backend.lora(self, layer, ("gate", "up"), h)
            f = _silu(proj("gate", h) + delta["gate"]) * (proj("up", h) + delta["up"])
            h = h + proj("down", f) + (await backend.lora(self, layer, ("down",), f))["down"]
        return h, new_kv


class DenseBackend:
    """float64 on the float16 weights and KV."""

    async def lora(self, step: Step, layer: int, projections: Sequence[str], x: F64) -> dict[str, F64]:
        out = {}
        for name in projections:
            d_out = next(p.d_out for p in step.model.projections if p.name == name)
            y = np.zeros((len(step.requests), d_out))
            for i, (_, adapter, _) in enumerate(step.requests):
                a, b = step.lora[(adapter, layer, name)]
                y[i] = x[i] @ a.astype(np.float64) @ b.astype(np.float64)
            out[name] = y
        return out

    async def attention(self, step: Step, layer: int, q: F64, k_new: F16, v_new: F16) -> F64:
        out = np.zeros(q.shape)
        for i, (rid, _, _) in enumerate(step.requests):
            k_all, v_all = step.kv[rid]
            for head, heads in enumerate(step.groups):
                k = np.concatenate([k_all[layer, head], k_new[i, head][None]]).astype(np.float64)
                v = np.concatenate([v_all[layer, head], v_new[i, head][None]]).astype(np.float64)
                p = q[i, heads] @ k.T / math.sqrt(step.model.head_dim)
                e = np.exp(p - p.max(axis=1, keepdims=True))
                out[i, heads] = (e @ v) / e.sum(axis=1, keepdims=True)
        return out


class PoolBackend:
    """The scheduler's descriptor stream on a DevicePool; the GPU's share in float64.

    `strategy_of(adapter, projection)` gives each site's strategy (from a StepPlan, or
    forced); `kv_units[rid]` the KV units (scheduler.kv_pages) the GPU holds. `rounds`
    collects every emitted Round, so a caller can inspect the exact stream."""

    def __init__(self, pool: DevicePool, strategy_of: StrategyOf, kv_units: Mapping[int, int],
                 page_tokens: int) -> None:
        self.pool, self.strategy_of, self.kv_units = pool, strategy_of, kv_units
        self.page_tokens = page_tokens
        self.pages = KvPages(len(pool), page_tokens)
        self.handles: dict[tuple[int, int, str], Any] = {}
        self.rounds: list[Round] = []
        self.kv_cache: PagedKvCache | None = None

    def device_of(self, adapter: int) -> int:
        return adapter % len(self.pool)

    async def place(self, step: Step) -> None:
        """Upload every adapter's factors to its device and every request's KV."""
        for (adapter, layer, name), (a, b) in step.lora.items():
            dev = self.device_of(adapter)
            square = a.shape[0] == b.shape[1]
            self.handles[(adapter, layer, name)] = (await self.pool.upload_lora(dev, a, b) if square
                                                    else await self.pool.upload(dev, a))
        self.kv_cache = PagedKvCache(self.pool, step.model.head_dim, self.page_tokens)
        for rid, (k, v) in step.kv.items():
            await self.kv_cache.add_request(rid, k, v)

    async def _run(self, rnd: Round, payloads: Mapping[int, bytes]) -> dict[int, Any]:
        """Submit a round's descriptors with their payloads (by id of the op), in chunks the
        queues hold, and collect them as they come."""
        self.rounds.append(rnd)
        results = {}
        room = min(len(dev.queues) * min(q.depth for q in dev.queues.values()) for dev in self.pool.devices)
        ops = rnd.device_ops
        for start in range(0, len(ops), room):
            chunk = ops[start:start + room]
            for op in chunk:            # a share's suffix list, then its descriptor
                if op.page_list is not None:
                    await self.pool.mem_write(op.device, op.descriptor.dev_addr, op.page_list)
            tickets = await self.pool.submit_many([(op.device, op.descriptor, payloads[id(op)]) for op in chunk])
            which = {id(t): op for t, op in zip(tickets, chunk, strict=True)}
            async for ticket, completion in self.pool.as_completed(tickets):
                results[id(which[id(ticket)])] = completion.check()
        return results

    async def lora(self, step: Step, layer: int, projections: Sequence[str], x: F64) -> dict[str, F64]:
        rows = step.rows_by_adapter()
        handles = {(a, name): self.handles[(a, layer, name)] for a in rows for name in projections}
        rnd = lora_round(f"layer {layer} {'/'.join(projections)}", projections, rows, self.strategy_of,
                         handles, self.device_of)
        x16 = x.astype(np.float16)
        payloads = {id(op): x16[list(op.rows)].tobytes() for op in rnd.device_ops}
        results = await self._run(rnd, payloads)
        out = {name: np.zeros((len(step.requests), next(p.d_out for p in step.model.projections if p.name == name)))
               for name in projections}
        for op in rnd.device_ops:
            a, b = step.lora[(op.key[0], layer, op.key[1])]
            data = results[id(op)].result
            if op.kind == "lora_xab":       # E3: y from the device
                out[op.key[1]][list(op.rows)] = np.frombuffer(data, FP16, len(op.rows) * b.shape[1]).reshape(
                    len(op.rows), -1)
            else:                           # E4: m = x A from the device, m B on the GPU
                m = np.frombuffer(data, FP16, len(op.rows) * a.shape[1]).reshape(len(op.rows), -1)
                out[op.key[1]][list(op.rows)] = m.astype(np.float64) @ b.astype(np.float64)
        for gop in rnd.gpu_ops:
            if gop.kind in ("lora_e1", "lora_e2"):
                a, b = step.lora[(gop.key[0], layer, gop.key[1])]
                out[gop.key[1]][list(gop.rows)] = x[list(gop.rows)] @ a.astype(np.float64) @ b.astype(np.float64)
        return out

    async def attention(self, step: Step, layer: int, q: F64, k_new: F16, v_new: F16) -> F64:
        kv_cache = self.kv_cache
        assert kv_cache is not None, "place() first"
        index = {rid: i for i, (rid, _, _) in enumerate(step.requests)}
        held = {rid: self.pages.held_pages(kv_cache.tokens(rid), rid, self.kv_units[rid]) for rid in index}
        rnd = attention_round(kv_cache, layer, list(index), held, step.groups)
        q16 = q.astype(np.float16)
        payloads = {}
        for op in rnd.device_ops:
            rows = scale_query(q16[index[op.key[0]], list(op.rows)])
            payloads[id(op)] = rows.tobytes()       # the pool pads it to the descriptor's in_size
        results = await self._run(rnd, payloads)
        partials: dict[tuple[int, int], list[Partial | None]] = {}
        for op in rnd.device_ops:
            rid, head, _ = op.key
            partials.setdefault((rid, head), []).append(attention_result(results[id(op)].result, op.descriptor))
        out = np.zeros(q.shape)
        for gop in rnd.gpu_ops:              # the GPU's share: the pages it holds and the new token
            rid, head, tokens = gop.key
            i = index[rid]
            k_all, v_all = step.kv[rid]
            k = np.concatenate([k_all[layer, head][list(tokens)], k_new[i, head][None]])
            v = np.concatenate([v_all[layer, head][list(tokens)], v_new[i, head][None]])
            mine = partial_attention_reference(scale_query(q16[i, list(gop.rows)]), k, v)
            out[i, list(gop.rows)] = merge_attention([mine] + partials.get((rid, head), []))
        return out


def plan_strategies(plan: StepPlan) -> StrategyOf:
    """strategy_of from a StepPlan's decisions."""
    chosen = {(site.adapter, site.projection): d.chosen.strategy for site, d in plan.decisions.items()}
    return lambda adapter, projection: chosen[(adapter, projection)]


def forced_strategies(model: ModelConfig, ranks: object) -> StrategyOf:
    """A mix that exercises every strategy: adapter a takes E1..E4 in turn by projection,
    E3 only where the weight is square (LORA_XAB), else E4."""
    order = (Strategy.E3, Strategy.E4, Strategy.E1, Strategy.E2)
    square = {p.name: p.d_in == p.d_out for p in model.projections}
    names = [p.name for p in model.projections]

    def strategy_of(adapter: int, projection: str) -> Strategy:
        s = order[(adapter + names.index(projection)) % len(order)]
        return Strategy.E4 if s is Strategy.E3 and not square[projection] else s
    return strategy_of
