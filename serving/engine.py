"""The iteration-level serving loop (continuous batching, as vLLM and S-LoRA schedule).

Each iteration is either a prefill of newly admitted requests or a decode step of every
running request (vLLM's default without chunked prefill: waiting prompts go first). A request
is admitted when it has arrived, the batch has room (`max_batch`), the prefill's token
budget (`max_prefill_tokens`) has room, and the system can hold its whole context
(prompt + output reserved at admission, so no request is ever preempted). Its first token
comes with its prefill (TTFT); every decode step adds one token to every running request,
whose KV cache grows by one token. The system prices each iteration (serving.systems).
"""
import collections
import functools
import time

from tqdm import tqdm

from isa import load_config as load_device_config
from scheduler.device_timing import DeviceTiming

from .config import load_system_config
from .results import RunResult, StepLog
from .systems import Live, build_system
from .workload import generate, load_workload_config, read_trace


class ServingError(ValueError):
    """A workload the system cannot serve (a request larger than its memory)."""


def simulate(run, system_cfg, workload, timing=None, progress=None):
    """Serve `workload` on `system_cfg` as `run` configures; returns a RunResult."""
    start = time.perf_counter()
    system = build_system(run, system_cfg, workload.ranks, timing)
    pending = collections.deque(workload.requests)
    running, done = [], []
    log = StepLog()
    t = 0.0
    bar = tqdm(total=len(pending), desc=f"{system_cfg.name} {workload.name}", unit="req",
               disable=progress is False, delay=3.0, mininterval=2.0, leave=False)
    while pending or running:
        admit, tokens = [], 0
        while pending and pending[0].arrival_s <= t and len(running) + len(admit) < run.max_batch:
            r = pending[0]
            live = Live(r.rid, r.adapter, r.prompt_tokens, r.output_tokens, r.arrival_s)
            if admit and tokens + live.prompt > run.max_prefill_tokens:
                break
            if not system.fits(running + admit, live):
                if not running and not admit:
                    raise ServingError(f"request {r.rid}: a {live.reserved_tokens}-token context "
                                       f"({live.reserved_tokens * system.kv_token / 1e9:.1f} GB of KV) does not fit "
                                       f"{system_cfg.name!r}'s {system.kv_capacity_bytes() / 1e9:.1f} GB for KV")
                break
            admit.append(live)
            pending.popleft()
            tokens += live.prompt
        if admit:
            cost = system.prefill(admit, running)
            t += cost.seconds
            log.add("prefill", t, len(admit), tokens, cost)
            for live in admit:
                live.generated, live.first_token_s = 1, t
            batch = running + admit
        elif running:
            cost = system.decode(running)
            t += cost.seconds
            log.add("decode", t, len(running), len(running), cost)
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
    return RunResult(run, system_cfg, workload, system, log, done, time.perf_counter() - start)


@functools.lru_cache(maxsize=32)
def load_workload(name, requests=None, seed=None, trace=None):
    """A run's workload: its trace, or its config drawn with the run's overrides."""
    if trace:
        return read_trace(trace)
    overrides = {k: v for k, v in (("requests", requests), ("seed", seed)) if v is not None}
    return generate(load_workload_config(name, **overrides))


@functools.lru_cache(maxsize=8)
def device_timing(device):
    """One timing table per device config and process (it measures lazily, then caches on disk)."""
    return DeviceTiming(load_device_config(device))


def run(cfg, progress=None):
    """Simulate a ServingConfig: its system, its workload, the shared timing table."""
    workload = load_workload(cfg.workload, cfg.requests, cfg.seed, cfg.trace)
    return simulate(cfg, load_system_config(cfg.system), workload, device_timing(cfg.device), progress)
