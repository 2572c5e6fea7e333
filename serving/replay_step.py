"""Whole-step replay: the proof that the serving simulator charges each device what it does
(issue 24, item 2). `plora replay-step` (make replay-step).

For each case the serving simulator decodes a batch (a few warm-up steps, then the measured
one) and records what its scheduler decided and what the step was charged. The step's whole
descriptor stream (every layer, every device product, every attention page, scheduler.emit)
then runs descriptor by descriptor on N model devices of a DevicePool sharing one simulated
clock, with the link between the GPU and the pool modelled on that clock:
- each round starts when the round before it has ended (its pool side, and the GPU's side as
  charged: the GPU is not what is checked here);
- the GPU sends the round's descriptors in emission order, each its descriptor line and
  payload, over the GPU -> pool direction at W bytes/s, arriving L/2 after its last byte;
  a device's queue takes what has arrived as its slots allow and its doorbell rings;
- each device runs its queue as the cycle model runs it (sim/, timing-only: operands are
  placed, not filled, since a model's KV cache does not fit in host memory and no cycle
  depends on a value; the host's slot writes and reads take no device time, as on the fast
  co-simulation path), completions in order, an interrupt each;
- each completion line and result goes back over the pool -> GPU direction in the order
  they complete, arriving L/2 after its last byte; the round's pool side ends with the last.
The replayed pool side of the step (every round of every layer) is compared with the
pool side the simulator charged (StepCost.pool_s: scheduler.rounds' three-path bound on
the timing tables' periods and drains). The last line is

    replay model=<m> batch=<b> devices=<n> descriptors=<k> wall_s=<x> charged_ms=<x> replayed_ms=<x> error_max=<x>%

of the first case, with error_max over every case run.
"""
import asyncio
import collections
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import numpy as np

from driver import DevicePool
from driver.attention import query_groups
from driver.clock import SimClock
from driver.clock import run as run_on_clock
from driver.kv_cache import PagedKvCache
from driver.model_transport import ModelTransport
from isa import load_config as load_device_config
from isa import payload_bytes, result_bytes
from isa.descriptor import Descriptor
from isa.encoders import DeviceTensor, LoraAdapter
from isa.slots import HEADER_BYTES
from isa.system import LinkConfig, ModelConfig
from scheduler.cost import Strategy, factor_bytes
from scheduler.emit import DeviceOp, attention_round, lora_round
from scheduler.entities import Site, StepPlan
from scheduler.kv_pages import KvPages
from scheduler.rounds import ROUND_OF, ROUNDS
from scheduler.scheduler import Request, Scheduler

from .config import load_serving_config, load_system_config
from .engine import device_timing, load_workload
from .systems import Live, PoolSystem, StepCost, build_system

log = logging.getLogger(__name__)      # progress: each case as its replay starts
QUEUE_LOG2_DEPTH = 8        # 256 slots a device: far more than a queue needs in flight
WARMUP_STEPS = 2            # decode steps before the measured one (temperatures, cached factors)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    model: str
    workload: str           # where the contexts, adapters and ranks come from
    batch: int = 32
    devices: int = 4
    mixed: bool = False     # every strategy on some site (adapter a, projection p: E1..E4 in turn)
    seed: int = 0
    gpu_budget_bytes: float | None = None   # the scheduler's GPU budget, if not the config's


CASES = {c.name: c for c in (
    Case("llama2-7b-short", "llama2-7b", "uniform"),
    Case("llama2-7b-long", "llama2-7b", "uniform-long"),
    Case("llama3-8b", "llama3-8b", "uniform"),
    Case("qwen3-30b-a3b", "qwen3-30b-a3b", "uniform"),
    Case("mixed-e1-e4", "llama2-7b", "uniform", mixed=True),
)}


@dataclasses.dataclass
class Replayed:
    case: Case
    descriptors: int
    charged_s: float            # the pool side the serving simulator charged the step
    replayed_s: float           # the pool side the replay measured
    rounds: dict[str, tuple[float, float]]  # round name -> (charged, replayed) seconds summed over layers
    wall_s: float
    mix: dict[str, int]

    @property
    def error(self) -> float:
        return abs(self.charged_s - self.replayed_s) / self.replayed_s

    def line(self) -> str:
        m = self.case
        return (f"replay model={m.model} batch={m.batch} devices={m.devices} descriptors={self.descriptors} "
                f"wall_s={self.wall_s:.1f} charged_ms={self.charged_s * 1e3:.4f} "
                f"replayed_ms={self.replayed_s * 1e3:.4f}")


def mixed_strategies(model: ModelConfig) -> Callable[[Site], Strategy]:
    """Adapter a's projection p takes E1..E4 in turn (E3 where the weight is square, else E4)."""
    order = (Strategy.E3, Strategy.E4, Strategy.E1, Strategy.E2)
    names = [p.name for p in model.projections]
    square = {p.name: p.d_in == p.d_out for p in model.projections}

    def strategy_of(site: Site) -> Strategy:
        s = order[(site.adapter + names.index(site.projection)) % len(order)]
        return Strategy.E4 if s is Strategy.E3 and not square[site.projection] else s
    return strategy_of


def decode_step(case: Case) -> tuple[PoolSystem, list[Live], StepPlan, StepCost]:
    """(system, the running batch, the measured step's plan, its StepCost)."""
    run = load_serving_config("default", model=case.model, num_devices=case.devices, max_batch=case.batch,
                              workload=case.workload, seed=case.seed)
    workload = load_workload(case.workload, seed=case.seed)
    system = build_system(run, load_system_config("plora"), workload.ranks, device_timing(run.device))
    assert isinstance(system, PoolSystem)       # plora's kind is "pool"
    if case.mixed:
        old = system.scheduler
        system.scheduler = Scheduler(old.config, old.timing, strategy_of=mixed_strategies(system.model))
        for adapter, rank in old.ranks.items():
            system.scheduler.register(adapter, rank)
    if case.gpu_budget_bytes is not None:
        system.scheduler.budget = case.gpu_budget_bytes
    rng = np.random.default_rng(case.seed)
    running: list[Live] = []
    for r in workload.requests[:case.batch]:
        # a request part way through its output: its context is its prompt and what it has made
        generated = int(rng.integers(1, max(2, r.output_tokens)))
        running.append(Live(r.rid, r.adapter, r.prompt_tokens, r.output_tokens + WARMUP_STEPS + 1, 0.0,
                            generated=generated, new=True))
    plans: list[StepPlan] = []
    step = system.scheduler.step

    def recorded(requests: Sequence[Request]) -> StepPlan:
        plans.append(step(requests))
        return plans[-1]
    system.scheduler.step = recorded  # type: ignore[method-assign]
    for _ in range(WARMUP_STEPS + 1):
        cost = system.decode(running)
        for live in running:
            live.generated += 1
            live.new = False
    for live in running:                    # the batch as the measured step saw it
        live.generated -= 1
    return system, running, plans[-1], cost


class _Host:
    """The GPU's side of the replay: the link's two directions and one queue per device."""

    def __init__(self, pool: DevicePool, clock: SimClock, link: LinkConfig) -> None:
        self.pool, self.clock = pool, clock
        self.w, self.half = link.bytes_per_s, link.latency_s      # one way: latency_s

    async def round(self, ops: Sequence[DeviceOp], reads: Sequence[float] = ()) -> float:
        """Run one round's device ops (emission order) while the GPU reads `reads` (bytes
        each: E2's factors) from the pool; returns the round's pool side in seconds."""
        t0 = self.clock.now
        if not ops and not reads:
            return 0.0
        # a descriptor's line and payload, and before it a share's suffix list
        sizes: list[float] = [HEADER_BYTES + payload_bytes(op.descriptor) + len(op.page_list or b"") for op in ops]
        out = np.array(sizes or [0.0], dtype=np.float64)
        arrivals = t0 + self.half + np.cumsum(out) / self.w
        per_device: dict[int, list[tuple[float, DeviceOp]]] = collections.defaultdict(list)
        for op, when in zip(ops, arrivals.tolist(), strict=False):     # [0.0] stands for no ops
            per_device[op.device].append((when, op))
        # (when ready to go back, bytes): E2's reads reach the pool L/2 after the round starts
        finished = [(t0 + self.half, nbytes) for nbytes in reads]
        await asyncio.gather(*(self._device(d, items, finished) for d, items in per_device.items()))
        free = 0.0
        for when, nbytes in sorted(finished):   # the pool -> GPU direction, in the order they are ready
            free = max(free, when) + nbytes / self.w
        back = free + self.half
        await self.clock.sleep_until(back)
        return back - t0

    async def _device(self, index: int, items: Iterable[tuple[float, DeviceOp]],
                      finished: list[tuple[float, float]]) -> None:
        """Feed one device's queue as its descriptors arrive and slots free; collect its
        completions (by interrupt) in order."""
        dev = self.pool.devices[index]
        queue, transport = dev.queues[0], cast(ModelTransport, dev.transport)   # the pool _replay opens
        pending, outstanding = collections.deque(items), collections.deque[int]()
        while pending or outstanding:
            now = self.clock.now
            batch: list[tuple[Descriptor, bytes]] = []
            while pending and pending[0][0] <= now and len(outstanding) + len(batch) < queue.depth:
                op = pending.popleft()[1]
                if op.page_list is not None:        # arrived with it (its bytes in the arrival time)
                    await self.pool.mem_write(index, op.descriptor.dev_addr, op.page_list)
                batch.append((op.descriptor, b""))
            if batch:
                taken = queue.take(batch)
                await queue.write(taken)
                await queue.ring()
                outstanding.extend(seq for seq, _, _ in taken)
                continue
            if not outstanding:
                await self.clock.sleep_until(pending[0][0])
                continue
            wait = 1 << 40
            if pending and len(outstanding) < queue.depth:
                wait = max(1, int((pending[0][0] - now) * transport.cfg.clock_hz))
            if await transport.wait_irq(0, wait):
                completion = await queue.poll(outstanding[0])
                if completion is None:
                    raise RuntimeError(f"device {index}: an interrupt without seq {outstanding[0]}'s completion")
                completion.check()
                outstanding.popleft()
                assert completion.descriptor is not None    # a completion poll() matched to its seq
                finished.append((self.clock.now, HEADER_BYTES + result_bytes(completion.descriptor)))


async def _replay(system: PoolSystem, running: Sequence[Live], plan: StepPlan) -> tuple[dict[str, float], int]:
    """The plan's whole step on a model pool: {round name: replayed pool side summed over
    layers}, descriptors run."""
    m, sched = system.model, system.scheduler
    cfg = load_device_config(system.run.device)
    n = system.run.num_devices
    clock = SimClock()
    transports = [ModelTransport(cfg, clock=clock, backdoor_memory=True, compute_results=False) for _ in range(n)]
    # slots for the largest payload or result of the step: an E3/E4 product's rows
    biggest = max(max(p.d_in, p.d_out) for p in m.projections) * len(running) * 2
    pool = await DevicePool.open(transports, log2_depth=QUEUE_LOG2_DEPTH,
                                 log2_slot=(HEADER_BYTES + biggest - 1).bit_length(), queues=[0], irq=True,
                                 clock=clock)
    rows: dict[int, list[int]] = collections.defaultdict(list)
    for i, r in enumerate(running):
        rows[r.adapter].append(i)
    copies = {p.name: m.copies(p) for p in m.projections}
    handles: dict[tuple[int, int, str], list[Any]] = {}
    for adapter in rows:
        device, rank = sched.device_of(adapter), sched.ranks[adapter]
        for layer in range(m.layers):
            for p in m.projections:
                placed: list[Any] = []
                for _ in range(copies[p.name]):
                    operand: LoraAdapter | DeviceTensor = (LoraAdapter(0, p.d_in, rank) if p.d_in == p.d_out
                                                           else DeviceTensor(0, p.d_in, rank))
                    addr = pool.allocate(device, operand.size_lines * 64)
                    placed.append(dataclasses.replace(operand, addr=addr))
                handles[(adapter, layer, p.name)] = placed
    kv = PagedKvCache(pool, m.head_dim, sched.config.kv_page_tokens)
    for r in running:
        kv.reserve_request(r.rid, r.context, m.layers, m.kv_heads)
        if kv.paged:
            await kv.write_lists(r.rid)
    pages = KvPages(n, sched.config.kv_page_tokens)
    held = {r.rid: pages.held_pages(r.context, r.rid, plan.kv_units[r.rid]) for r in running}
    chosen = {(site.adapter, site.projection): d.chosen.strategy for site, d in plan.decisions.items()}
    groups = query_groups(m.q_heads, m.kv_heads)
    # E2: the GPU reads a copy's factors over the link (emission gives an op per copy)
    e2_bytes = {(a, p.name): sum(factor_bytes(p.d_in, p.d_out, sched.ranks[a]))
                for a in rows for p in m.projections}
    # factors the step loads into GPU memory: read in the round of the site that needs them,
    # a layer's share each layer (pre-cached ones ride the link's idle time)
    loading: dict[str, float] = collections.defaultdict(float)
    for site, _, nbytes in plan.loads:
        if site.adapter not in plan.precached:
            loading[ROUND_OF[site.projection]] += nbytes / m.layers
    host = _Host(pool, clock, system.link)
    replayed: dict[str, float] = collections.defaultdict(float)
    descriptors = 0
    for layer in range(m.layers):
        for name, projections in ROUNDS:
            if projections:
                mine = {(a, p): handles[(a, layer, p)] for a in rows for p in projections}
                rnd = lora_round(name, projections, rows, lambda a, p: chosen[(a, p)], mine, sched.device_of)
            else:
                rnd = attention_round(kv, layer, [r.rid for r in running], held, groups, plan.attention_on_devices)
            reads: list[float] = [e2_bytes[op.key] for op in rnd.gpu_ops if op.kind == "lora_e2"]
            if loading[name]:
                reads.append(loading[name])
            if name == "attention" and not plan.attention_on_devices:
                reads.append(plan.rounds[name].reads)       # the pages the GPU does not hold, over the link
            pool_s = await host.round(rnd.device_ops, reads)
            descriptors += len(rnd.device_ops)
            replayed[name] += pool_s
            # the GPU's side of the round as charged, and its work on the pool's results
            load = plan.rounds[name]
            await clock.sleep(max(0.0, load.gemm_s + load.gpu_s - pool_s) + load.gpu_after_s)
    return replayed, descriptors


def replay(case: Case) -> Replayed:
    start = time.perf_counter()
    log.info("replaying %s: %s, batch %d, %d devices", case.name, case.model, case.batch, case.devices)
    system, running, plan, cost = decode_step(case)
    replayed, descriptors = run_on_clock(_replay(system, running, plan))
    link, layers = system.link, system.model.layers
    rounds = {name: (layers * plan.rounds[name].pool_s(link), replayed[name]) for name, _ in ROUNDS}
    return Replayed(case, descriptors, cost.pool_s, sum(replayed.values()), rounds,
                    time.perf_counter() - start, dict(plan.strategy_mix()))


def main(names: Iterable[str] | None = None, out: Callable[[str], object] = print) -> list[Replayed]:
    """Replay each case (all by default); returns the results. Prints a line per case, its
    rounds, and the summary line."""
    results = []
    for name in names or list(CASES):
        if name not in CASES:
            raise ValueError(f"unknown case {name!r}; the cases: {', '.join(CASES)}")
        r = replay(CASES[name])
        results.append(r)
        out(f"{name}: {r.line()} error={r.error:.2%} mix={r.mix}")
        for round_name, (charged, replayed) in r.rounds.items():
            if replayed or charged:
                out(f"    {round_name:<9} charged {charged * 1e3:9.4f} ms  replayed {replayed * 1e3:9.4f} ms  "
                    f"error {abs(charged - replayed) / replayed if replayed else 0:.2%}")
    first = results[0]
    out(f"{first.line()} error_max={max(r.error for r in results):.2%}")
    return results
