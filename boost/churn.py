"""DSR under Poisson churn (seed 002, section 5.11, Fig. 19): a decode instance serving a
stream of requests from a DSR pool; the realized second-tier share of the KV read at every
step.

vLLM's way with blocks: a request is admitted when the batch has room and the pool holds
its prompt's blocks (plus a watermark of 1 % of the pool); it takes one block each time its
context fills the last one; when DSR defers (PoolExhausted), the request admitted last is
preempted (its blocks freed, it waits at the head of the queue to be recomputed). A step
lasts the bytes it reads over HBM's bandwidth: the weights its tokens touch (every expert at
least one token routes to, serving.gpu_model.experts_touched) and the batch's KV.
"""
import dataclasses
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from isa.system import ModelConfig
from scheduler.gpu_model import experts_touched
from serving.workload import generate, load_workload_config

from .config import CONFIG_DIR, Machine
from .dsr import DsrPool, KvShape, PoolExhausted


@dataclasses.dataclass
class ChurnResult:
    times: np.ndarray               # seconds at each measured step
    fraction: np.ndarray            # second-tier share of the KV read by that step
    batch: np.ndarray
    window: int
    preemptions: int
    mixed_requests: int             # requests that crossed a boundary condition
    finished: int

    @property
    def window_medians(self) -> npt.NDArray[np.float64]:
        n = len(self.fraction) // self.window
        return np.median(self.fraction[: n * self.window].reshape(n, self.window), axis=1)

    @property
    def median(self) -> float:
        return float(np.median(self.fraction))

    def within(self, target: float, tol: float = 0.01) -> float:
        return float(np.mean(np.abs(self.fraction - target) <= tol))


def step_s(machine: Machine, model: ModelConfig, batch: int, kv_tokens: float, elem_bytes: int = 1) -> float:
    m = model
    q, kv = m.q_heads * m.head_dim, m.kv_heads * m.head_dim
    dense = m.hidden * (q + 2 * kv) + q * m.hidden
    experts = experts_touched(m, batch) * 3 * m.hidden * m.ffn
    weights = (m.layers * (dense + experts) + m.hidden * m.vocab) * elem_bytes
    kv_bytes = kv_tokens * 2 * m.layers * kv * elem_bytes
    return (weights + kv_bytes) / machine.hbm_bytes_per_s


def simulate(machine: Machine, model: ModelConfig, workload: str = "longwriter", requests: int | None = None,
             max_batch: int = 256, warmup_s: float = 60.0, window: int = 1000, elem_bytes: int = 1,
             block_tokens: int = 16, seed: int | None = None) -> ChurnResult:
    path = CONFIG_DIR / "workloads" / f"{workload}.json"
    overrides = {k: v for k, v in (("requests", requests), ("seed", seed)) if v is not None}
    wl = generate(load_workload_config(str(path) if path.exists() else workload, **overrides))
    shape = KvShape(model.layers, model.kv_heads, model.head_dim, block_tokens, elem_bytes)
    M = machine.placement_modulus
    weights = model.params * elem_bytes
    hbm_kv = machine.hbm_utilization * machine.hbm_bytes - weights
    if hbm_kv <= 0:
        raise ValueError(f"the weights of {model.name!r} do not fit the HBM of {machine.name!r}")
    n_blocks = int(hbm_kv / (shape.block_bytes * (1 - 1 / M)))    # the second tier holds 1/M of the pool
    pool = DsrPool(n_blocks, shape, M, machine.page_bytes)
    watermark = max(1, n_blocks // 100)
    H = model.kv_heads
    queue: list[list[Any]] = [[r.arrival_s, r.rid, r.prompt_tokens, r.output_tokens] for r in wl.requests]
    queue.reverse()                 # pop() takes the earliest
    running: dict[int, list[int]] = {}      # rid -> [context, remaining output]
    order: list[int] = []           # admission order (preemption takes the last)
    host_tok: dict[int, float] = {}     # rid -> sum over its tokens of host heads / H
    last_h: dict[int, float] = {}   # rid -> host heads / H of its last block
    t, preempted, finished = 0.0, 0, 0
    mixed: set[int] = set()
    last_arrival = wl.requests[-1].arrival_s      # measured up to here: a steady stream, no drain
    out_t: list[float] = []
    out_f: list[float] = []
    out_b: list[int] = []
    total_tokens = total_host = s_last = 0.0

    def release(rid: int) -> None:
        nonlocal total_tokens, total_host, s_last
        ctx, _ = running.pop(rid)
        total_tokens -= ctx
        total_host -= host_tok.pop(rid)
        s_last -= last_h.pop(rid)
        order.remove(rid)
        if rid in pool.mixed:
            mixed.add(rid)
        pool.release(rid)

    def grow(rid: int, tokens: int) -> None:
        """Give `rid` blocks for `tokens` more tokens (prompt at admission, then one a step)."""
        nonlocal total_tokens, total_host, s_last
        ctx = running[rid][0]
        for _ in range(tokens):
            if ctx % block_tokens == 0:
                b = pool.allocate(rid)
                h = pool.host_heads(b) / H
                s_last += h - last_h.get(rid, 0.0)
                last_h[rid] = h
            host_tok[rid] = host_tok.get(rid, 0.0) + last_h[rid]
            ctx += 1
        running[rid][0] = ctx
        total_tokens += tokens
        total_host = sum(host_tok.values()) if tokens > 1 else total_host + last_h[rid]

    while queue or running:
        while (queue and queue[-1][0] <= t and len(running) < max_batch
               and pool.free_count() >= math.ceil(queue[-1][2] / block_tokens) + watermark):
            _, rid, prompt, output = queue.pop()
            running[rid] = [0, output]
            order.append(rid)
            host_tok[rid], last_h[rid] = 0.0, 0.0
            grow(rid, prompt)
        if not running:
            t = queue[-1][0]
            continue
        t += step_s(machine, model, len(running), total_tokens, elem_bytes)
        for rid in list(running):
            if rid not in running:
                continue
            try:
                grow(rid, 1)
            except PoolExhausted:
                victim = order[-1]
                ctx, left = running[victim]
                release(victim)
                preempted += 1
                queue.append([t, victim, ctx, left])
                if victim == rid:
                    continue
                grow(rid, 1)
            running[rid][1] -= 1
            if running[rid][1] <= 0:
                release(rid)
                finished += 1
        if warmup_s <= t <= last_arrival and total_tokens:
            out_t.append(t)
            out_f.append(total_host / total_tokens)
            out_b.append(len(running))
    return ChurnResult(np.array(out_t), np.array(out_f), np.array(out_b), window, preempted, len(mixed), finished)
