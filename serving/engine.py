"""The iteration-level serving loop (continuous batching, as vLLM and S-LoRA schedule).

Each iteration is either a prefill of newly admitted requests or a decode step of every
running request (vLLM's default without chunked prefill: waiting prompts go first). A request
is admitted when it has arrived, the batch has room (`max_batch`), the prefill's token
budget (`max_prefill_tokens`) has room, and the system can hold its whole context
(prompt + output reserved at admission, so no request is ever preempted). Its first token
comes with its prefill (TTFT); every decode step adds one token to every running request,
whose KV cache grows by one token. The system prices each iteration (serving.systems).

Before the first iteration a run refuses what it cannot serve rather than serve it wrongly:
requests over the model's context (or with an empty prompt or output, which a trace may
hold) unless `context_overflow` says to clip or drop them, and a pool whose adapters leave
no room for any KV.
"""
import collections
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from tqdm import tqdm

from isa import load_config as load_device_config
from isa.system import load_model
from scheduler.device_timing import DeviceTiming

from .config import WORKLOAD_FIELDS, ServingConfig, SystemConfig, load_system_config
from .results import RunResult, StepLog
from .systems import Live, PoolSystem, StepCost, System, build_system
from .workload import Workload, fit_context, generate, load_workload_config

logger = logging.getLogger(__name__)   # progress: each run as it starts and ends (the bar shows it to a terminal)
# called after each iteration: (system, kind, start on the simulated clock, requests, tokens, its cost)
OnStep = Callable[[System, str, float, int, int, StepCost], object]


class ServingError(ValueError):
    """A workload the system cannot serve (a request larger than its memory or the model's
    context, more adapters than its pool holds)."""


def fit_to_model(run: ServingConfig, workload: Workload) -> tuple[Workload, int, int]:
    """`workload` as `run.context_overflow` makes it fit the model's context, and how many
    requests were clipped and dropped; ServingError when it refuses them, or drops them all."""
    model = load_model(run.model)
    try:
        fitted, changed = fit_context(workload, model.max_context, run.context_overflow, run.model)
    except ValueError as exc:
        raise ServingError(str(exc)) from None
    if not fitted.requests:
        raise ServingError(f"context_overflow=drop left none of the {len(workload.requests)} requests of "
                           f"{workload.name!r}: none fits {run.model}'s {model.max_context}-token context")
    clipped = changed if run.context_overflow == "clip" else 0
    return fitted, clipped, changed - clipped


def check_pool(system_cfg: SystemConfig, system: System, workload: Workload) -> None:
    """A pool holds every registered adapter and then the KV cache: refuse one the adapters
    alone fill (S-LoRA's host systems keep adapters in host DRAM, so only pools are checked)."""
    if system_cfg.kind == "pool" and system.kv_capacity_bytes() <= 0:
        assert isinstance(system, PoolSystem)       # build_system's for kind "pool"
        need, pool = sum(system.adapter_bytes), system.pool_bytes
        raise ServingError(f"{len(workload.ranks)} adapters of {workload.name!r} need {need / 1e9:.1f} GB "
                           f"({need:.0f} bytes) but the pool of system {system_cfg.name!r} holds {pool / 1e9:.1f} GB "
                           f"({pool:.0f} bytes), leaving no room for the KV cache; use fewer adapters or a "
                           f"larger pool (num_devices)")


def simulate(run: ServingConfig, system_cfg: SystemConfig, workload: Workload, timing: DeviceTiming | None = None,
             progress: bool | None = None, on_step: OnStep | None = None) -> RunResult:
    """Serve `workload` on `system_cfg` as `run` configures; returns a RunResult.
    `on_step(system, kind, start_s, requests, tokens, cost)`, if given, is called after each
    iteration with its start on the simulated clock and its StepCost (serving.trace.Timeline)."""
    start = time.perf_counter()
    logger.info("serving %d requests of %s on %s (%s, %s, %d x %s)", len(workload.requests), workload.name,
                system_cfg.name, run.model, run.link, run.num_devices, run.device)
    workload, clipped, dropped = fit_to_model(run, workload)
    system = build_system(run, system_cfg, workload.ranks, timing)
    check_pool(system_cfg, system, workload)
    pending = collections.deque(workload.requests)
    running: list[Live] = []
    done: list[tuple[Live, float]] = []
    log = StepLog()
    t = 0.0
    bar = tqdm(total=len(pending), desc=f"{system_cfg.name} {workload.name}", unit="req",
               disable=progress is False, delay=3.0, mininterval=2.0, leave=False)
    while pending or running:
        admit: list[Live] = []
        tokens = 0
        while pending and pending[0].arrival_s <= t and len(running) + len(admit) < run.max_batch:
            r = pending[0]
            live = Live(r.rid, r.adapter, r.prompt_tokens, r.output_tokens, r.arrival_s)
            if admit and tokens + live.prompt > run.max_prefill_tokens:
                break
            if not system.fits(running + admit, live):
                if not running and not admit:
                    raise ServingError(f"request {r.rid}: a {live.reserved_tokens}-token context "
                                       f"({live.reserved_tokens * system.kv_token / 1e9:.1f} GB of KV) does not fit "
                                       f"the {system.kv_capacity_bytes() / 1e9:.1f} GB for KV of {system_cfg.name!r}")
                break
            admit.append(live)
            pending.popleft()
            tokens += live.prompt
        if admit:
            cost = system.prefill(admit, running)
            t += cost.seconds
            log.add("prefill", t, len(admit), tokens, cost)
            if on_step is not None:
                on_step(system, "prefill", t - cost.seconds, len(admit), tokens, cost)
            for live in admit:
                live.generated, live.first_token_s = 1, t
            batch = running + admit
        elif running:
            cost = system.decode(running)
            t += cost.seconds
            log.add("decode", t, len(running), len(running), cost)
            if on_step is not None:
                on_step(system, "decode", t - cost.seconds, len(running), len(running), cost)
            for live in running:
                live.generated += 1
                live.new = False
            batch = running
        else:
            t = max(t, pending[0].arrival_s)
            continue
        running = []
        for live in batch:
            if live.generated >= live.output:
                done.append((live, t))
            else:
                running.append(live)
        bar.update(len(batch) - len(running))
    bar.close()
    logger.info("served %d requests of %s on %s: %d iterations, %.3f s simulated, %.1f s wall", len(done),
                workload.name, system_cfg.name, len(log), t, time.perf_counter() - start)
    return RunResult(run, system_cfg, workload, system, log, done, time.perf_counter() - start,
                     requests_clipped=clipped, requests_dropped=dropped)


@functools.lru_cache(maxsize=32)
def load_workload(name: str, requests: int | None = None, seed: int | None = None, trace: str | None = None,
                  **popularity: Any) -> Workload:
    """A run's workload: its config drawn, or its trace replayed, with the run's overrides
    (`requests`: a trace's first N; `seed` and `popularity`: what the trace does not give)."""
    overrides = {k: v for k, v in dict(popularity, requests=requests, seed=seed, trace=trace).items()
                 if v is not None}
    return generate(load_workload_config(name, **overrides))


@functools.lru_cache(maxsize=8)
def device_timing(device: str) -> DeviceTiming:
    """One timing table per device config and process (it measures lazily, then caches on disk)."""
    return DeviceTiming(load_device_config(device))


def run(cfg: ServingConfig, progress: bool | None = None, on_step: OnStep | None = None) -> RunResult:
    """Simulate a ServingConfig: its system, its workload, the shared timing table
    (`on_step`: simulate's)."""
    workload = load_workload(cfg.workload, **{f: getattr(cfg, f) for f in WORKLOAD_FIELDS})
    return simulate(cfg, load_system_config(cfg.system), workload, device_timing(cfg.device), progress, on_step)
