"""A run's timeline as a Chrome / Perfetto trace (the Trace Event Format's JSON, as Vidur and
LLMServingSim export theirs): open it in https://ui.perfetto.dev or chrome://tracing.

    plora simulate --set requests=64 --trace build/trace.json [--trace-steps 0:50]

Tracks (a process per part of the system, a thread per track):
- `run`: `steps` (every iteration: `prefill <i>` or `decode <i>`), `layers` (each layer of
  a detailed step, then `LM head`), `rounds` (a pool's decode layer in its five rounds,
  scheduler.rounds: qkv, attention, o, gate_up, down);
- `GPU <gpu>`: `stream`, the GPU's own work: the base GEMMs, LoRA on the GPU, its share of
  attention, kernel launches (or a host system's CPU rounds), the GPU's work on the pool's
  results (E4's m B, the attention merge) and the LM head;
- `link <link>`: `to pool` and `to GPU`, the time each direction is busy (bytes / bandwidth);
- `devices (<device> x N)`: `device <j>`, each device's queue, back to back (the sum of its
  descriptors' periods, then its last one's drain).

Every step is on the `steps` track; the steps in `steps` (a range of step indices, the first
50 by default, `None` for all) are detailed by layer: a decode step on a pool
(StepCost.rounds) as its rounds, each placed as scheduler.rounds prices it (the GPU's GEMM
and own work from the round's start, its work on the results at the round's end; the link
out from the round's start; device j from half the link's round trip plus its first
descriptor's transfer; the link back ending with the pool's side); any other step (a
prefill, a host system's decode) as the StepCost's parts one after another on the GPU, each
divided evenly over the layers, with the link's bytes of each layer from the layer's start
(to the pool) and to its end (to the GPU). A layer's events lie within it, its rounds' within
the round, and a device's events add up, over the detailed steps, to the busy time the
simulator charged it (`busy_s`). With the run's `overlap` "step" the rounds are the layer
shared in proportion (serving.systems), and a device's queue may run past its round.

Times are microseconds on the simulated clock, from the first arrival's t = 0.
"""
from __future__ import annotations

import json
import pathlib
from typing import TYPE_CHECKING, Any

from scheduler.rounds import RoundLoad

if TYPE_CHECKING:
    from .config import ServingConfig
    from .results import RunResult
    from .systems import StepCost, System

US = 1e6

# (pid, tid) of each track; process and thread names are filled in from the run
RUN, GPU, LINK, DEVICES = 1, 2, 3, 4
STEPS, LAYERS, ROUNDS_TID = 1, 2, 3
STREAM = 1
TO_POOL, TO_GPU = 1, 2
DEFAULT_STEPS = range(0, 50)


def parse_steps(text: object) -> range | None:
    """`--trace-steps`: "all", "N" (the first N steps) or "A:B" (steps A..B-1) as a range
    (None for all); ValueError for anything else."""
    text = str(text).strip()
    if text == "all":
        return None
    first, sep, last = text.partition(":")
    try:
        a, b = (int(first or 0), int(last)) if sep else (0, int(first))
    except ValueError:
        raise ValueError(f"expected 'all', N or A:B (step indices), got {text!r}") from None
    if a < 0 or b < a:
        raise ValueError(f"expected 0 <= A <= B, got {text!r}")
    return range(a, b)


class Timeline:
    """The engine's `on_step` callback (serving.engine.simulate) that records the run's trace
    events; `write(path)` saves them, `trace()` is the JSON object."""

    def __init__(self, steps: range | None = DEFAULT_STEPS) -> None:
        self.steps = steps
        self.events: list[dict[str, Any]] = []
        self.busy_s: list[float] | None = None  # per device: the busy time of the detailed steps, as charged
        self.system: System | None = None
        self._index = 0

    def _detailed(self, index: int) -> bool:
        return self.steps is None or index in self.steps

    def _x(self, pid: int, tid: int, name: str, start_s: float, dur_s: float, cat: str, **args: Any) -> None:
        """A complete event ("X") from `start_s` lasting `dur_s`, when it lasts."""
        if dur_s <= 0:
            return
        event = dict(name=name, cat=cat, ph="X", pid=pid, tid=tid, ts=round(start_s * US, 6),
                     dur=round(dur_s * US, 6))
        if args:
            event["args"] = args
        self.events.append(event)

    def __call__(self, system: System, kind: str, start_s: float, requests: int, tokens: int, cost: StepCost) -> None:
        if self.system is None:
            self.system = system
            self.busy_s = [0.0] * system.run.num_devices
        index = self._index
        self._index += 1
        self._x(RUN, STEPS, f"{kind} {index}", start_s, cost.seconds, "step", kind=kind, step=index,
                requests=requests, tokens=tokens, step_ms=cost.seconds * 1e3,
                **{f"{s}_count": n for s, n in sorted(cost.mix.items())})
        if not self._detailed(index):
            return
        layers = system.model.layers
        head = system.head(requests)
        layer_s = (cost.seconds - head) / layers
        for layer in range(layers):
            t0 = start_s + layer * layer_s
            self._x(RUN, LAYERS, f"layer {layer}", t0, layer_s, "layer", step=index, layer=layer)
            if cost.rounds:
                self._rounds(system, t0, cost.rounds, index, layer)
            else:
                self._parts(system, t0, layer_s, cost, layers, head, kind)
        self._x(RUN, LAYERS, "LM head", start_s + layers * layer_s, head, "layer", step=index)
        self._x(GPU, STREAM, "LM head", start_s + layers * layer_s, head, "gpu", step=index)

    def _rounds(self, system: System, t0: float, rounds: tuple[tuple[RoundLoad, float], ...], index: int,
                layer: int) -> None:
        """One decode layer of a pool, round by round (scheduler.rounds' pricing)."""
        link, busy_s = system.link, self.busy_s
        assert busy_s is not None
        w = link.transfer_s
        for load, t in rounds:
            self._x(RUN, ROUNDS_TID, load.name, t0, t, "round", step=index, layer=layer,
                    descriptors=load.descriptors, to_pool_bytes=load.to_device, to_gpu_bytes=load.to_gpu)
            gemm = min(load.gemm_s, t)
            self._x(GPU, STREAM, f"GEMM {load.name}", t0, gemm, "gpu")
            own = "attention (GPU's share)" if load.name == "attention" else f"LoRA {load.name} (GPU)"
            self._x(GPU, STREAM, own, t0 + gemm, min(load.gpu_s, t - gemm), "gpu")
            after = min(load.gpu_after_s, t)
            after_name = "attention merge" if load.name == "attention" else f"E4 m.B {load.name}"
            self._x(GPU, STREAM, after_name, t0 + t - after, after, "gpu")
            pool = load.pool_s(link)
            if pool > 0:
                self._x(LINK, TO_POOL, f"{load.name} out", t0, min(w(load.to_device), pool), "link",
                        bytes=load.to_device)
                back = min(w(load.to_gpu), pool)
                self._x(LINK, TO_GPU, f"{load.name} back", t0 + pool - back, back, "link", bytes=load.to_gpu)
            for j, (first, busy, drain) in enumerate(zip(load.first_out, load.busy, load.drain, strict=True)):
                if busy:
                    self._x(DEVICES, j + 1, load.name, t0 + link.latency_s + w(first), busy + drain, "device",
                            periods_us=busy * US, drain_us=drain * US)
                    busy_s[j] += busy + drain
            t0 += t

    def _parts(self, system: System, t0: float, layer_s: float, cost: StepCost, layers: int, head: float,
               kind: str) -> None:
        """One layer of a step without rounds: the StepCost's parts over the layers."""
        parts = (("GEMM", (cost.gemm_s - head) / layers), ("attention", cost.attention_s / layers),
                 ("LoRA", cost.lora_s / layers),
                 ("kernel launches" if system.system.kind == "pool" else "host rounds", cost.launch_s / layers))
        t = t0
        for name, dur in parts:
            dur = min(dur, t0 + layer_s - t)
            self._x(GPU, STREAM, f"{name} ({kind})", t, dur, "gpu")
            t += max(dur, 0.0)
        w = system.link.transfer_s
        out, back = cost.link_to_device / layers, cost.link_to_gpu / layers
        self._x(LINK, TO_POOL, f"{kind} out", t0, min(w(out), layer_s), "link", bytes=out)
        back_s = min(w(back), layer_s)
        self._x(LINK, TO_GPU, f"{kind} back", t0 + layer_s - back_s, back_s, "link", bytes=back)

    def _metadata(self) -> list[dict[str, Any]]:
        s = self.system
        if s is None:
            return []
        run = s.run
        names: dict[int, tuple[str, dict[int, str]]] = {
            RUN: (f"run: {s.system.name} {run.model}", {STEPS: "steps", LAYERS: "layers", ROUNDS_TID: "rounds"}),
            GPU: (f"GPU {s.gpu.name}", {STREAM: "stream"}),
            LINK: (f"link {s.link.name} ({s.link.bytes_per_s / 1e9:g} GB/s, {s.link.latency_s * 1e9:g} ns)",
                   {TO_POOL: "to pool", TO_GPU: "to GPU"}),
            DEVICES: (f"devices ({run.device} x {run.num_devices})",
                      {j + 1: f"device {j}" for j in range(run.num_devices)})}
        out = []
        for pid, (pname, threads) in names.items():
            out.append(dict(name="process_name", ph="M", pid=pid, tid=0, args=dict(name=pname)))
            out.append(dict(name="process_sort_index", ph="M", pid=pid, tid=0, args=dict(sort_index=pid)))
            for tid, tname in threads.items():
                out.append(dict(name="thread_name", ph="M", pid=pid, tid=tid, args=dict(name=tname)))
                out.append(dict(name="thread_sort_index", ph="M", pid=pid, tid=tid, args=dict(sort_index=tid)))
        return out

    def trace(self) -> dict[str, Any]:
        """The trace as a JSON object: `traceEvents`, and the run's names in `otherData`."""
        other = {}
        if self.system is not None and self.busy_s is not None:
            s, run = self.system, self.system.run
            steps = "all" if self.steps is None else f"{self.steps.start}:{self.steps.stop}"
            other = dict(system=s.system.name, model=run.model, gpu=s.gpu.name, link=s.link.name,
                         device=run.device, num_devices=run.num_devices, steps=self._index, detailed_steps=steps,
                         time_unit="us on the simulated clock",
                         device_busy_us=[b * US for b in self.busy_s])
        return dict(traceEvents=self._metadata() + self.events, displayTimeUnit="ns", otherData=other)

    def write(self, path: str | pathlib.Path) -> pathlib.Path:
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as f:
            json.dump(self.trace(), f, separators=(",", ":"))
        return path


def trace_run(cfg: ServingConfig, path: str | pathlib.Path, steps: range | None = DEFAULT_STEPS,
              progress: bool | None = None) -> tuple[RunResult, pathlib.Path]:
    """Simulate ServingConfig `cfg` and write its timeline to `path`: (RunResult, path)."""
    from .engine import run
    timeline = Timeline(steps)
    result = run(cfg, progress, on_step=timeline)
    return result, timeline.write(path)
