"""What a serving run measured: a row per iteration, a row per request, and the summary.

The summary's metrics, as serving papers (and vLLM's and Vidur's reports) define them:
- TTFT: per request, first token - arrival; mean (`ttft_s`), p50, p90, p99;
- TPOT: per request, (finish - first token) / (output tokens - 1); mean (`tpot_ms`), p50,
  p90, p99;
- end-to-end latency: per request, finish - arrival; mean (`e2e_latency_s`), p50, p90, p99;
- throughput: output tokens / (last finish - first arrival) (`throughput_tok_s`), and
  requests / the same span (`throughput_req_s`);
- decode throughput: tokens per second of decode steps alone, and at a full batch
  (`max_batch` running: the plateau the paper's link sweep reports, section VIII);
- link utilization: the busier direction's bytes / (bandwidth x time), over decode steps;
- KV duplicated: the share of the batch's KV cache the GPU holds, over decode steps;
- the strategy mix: each strategy's share of the sites decided over the decode steps;
- what it ran with: the system, workload, model, GPU, link (the one the system used, its
  bandwidth and latency after the run's overrides) and device config.

Every percentile is `percentile` (numpy's default, linear interpolation). Every CSV column
ends in its unit (`_s`, `_ms`, `_us`, `_ns`, `_bytes`, `_frac`, `_count`, `_tokens`) unless
it is a name, an id or text (`system`, `gpu`, `rid`, `rank`: the LoRA rank r, `absent`); a
summary key without one (`requests`, `link_util`) is written to a CSV under csv_column's
name for it (`requests_count`, `link_util_frac`) and read back under the key by
summary_key. docs/serving.md lists the fields and the columns with their units.

A metric a run cannot define (no decode step at a full batch, no request with a second
token) is NaN, and the summary's `absent` names each such field with the reason; the
printed summary and summary.json carry it (`summary_lines`, `json_summary`).
"""
import csv
import dataclasses
import math
import pathlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .config import ServingConfig, SystemConfig
from .systems import STRATEGY_COLUMNS, Live, StepCost
from .workload import Workload

# steps.csv's columns, as StepLog keeps them: the step's kind, its end on the simulated clock,
# the requests and tokens it ran, its time and each component's, the link's bytes each way,
# the batch's KV bytes and those on the GPU, and the sites of each strategy it decided
STEP_COLUMNS = ("kind", "t_s", "requests_count", "tokens_count", "step_s", "gemm_s", "lora_s", "attention_s",
                "launch_s", "link_to_device_bytes", "link_to_gpu_bytes", "kv_bytes", "kv_gpu_bytes") + tuple(
                    f"{s}_count" for s in STRATEGY_COLUMNS)

# requests.csv's columns, a row per request in id order
REQUEST_COLUMNS = ("rid", "adapter", "rank", "arrival_s", "prompt_tokens", "output_tokens", "first_token_s",
                   "finish_s", "ttft_s", "tpot_s", "e2e_latency_s")

# a summary key (or sweep axis, or reproduce row field) whose name has no unit -> its CSV column
CSV_NAMES = {"num_devices": "devices_count", "max_batch": "max_batch_count", "adapters": "adapters_count",
             "requests": "requests_count", "requests_clipped": "requests_clipped_count",
             "requests_dropped": "requests_dropped_count", "steps": "steps_count",
             "decode_steps": "decode_steps_count", "link_util": "link_util_frac", "replicas": "replicas_count",
             **{f"share_{s}": f"share_{s}_frac" for s in STRATEGY_COLUMNS}}
AXIS_CSV_NAMES = {"devices": "devices_count", "batch": "batch_count"}    # serving.sweep.AXES without a unit
_CSV_KEYS = {v: k for k, v in CSV_NAMES.items()}
_AXIS_CSV_KEYS = {**_CSV_KEYS, **{v: k for k, v in AXIS_CSV_NAMES.items()}}


def csv_column(key: str) -> str:
    """The CSV column of summary key (or row field) `key`: itself where its name carries a unit
    or it is a label, else CSV_NAMES' name (`requests` -> `requests_count`); a sweep's
    `axis_<name>` column as `axis_` + the axis's (`axis_devices` -> `axis_devices_count`)."""
    if key.startswith("axis_"):
        name = key[len("axis_"):]
        return "axis_" + AXIS_CSV_NAMES.get(name, CSV_NAMES.get(name, name))
    return CSV_NAMES.get(key, key)


def summary_key(column: str) -> str:
    """csv_column's inverse: the summary key (or row field) of a CSV column; a column it does
    not know (a CSV written before the units) as it is. `axis_devices_count` reads back as
    `axis_devices`, the sweep axis, also where the axis was the run field `num_devices`."""
    if column.startswith("axis_"):
        name = column[len("axis_"):]
        return "axis_" + _AXIS_CSV_KEYS.get(name, name)
    return _CSV_KEYS.get(column, column)


class StepLog:
    """Per-iteration rows, kept as columns."""

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {c: [] for c in STEP_COLUMNS}

    def add(self, kind: str, t: float, requests: int, tokens: int, cost: StepCost) -> None:
        row = dict(kind=kind, t_s=t, requests_count=requests, tokens_count=tokens, step_s=cost.seconds,
                   gemm_s=cost.gemm_s, lora_s=cost.lora_s, attention_s=cost.attention_s, launch_s=cost.launch_s,
                   link_to_device_bytes=cost.link_to_device, link_to_gpu_bytes=cost.link_to_gpu,
                   kv_bytes=cost.kv_bytes, kv_gpu_bytes=cost.kv_gpu_bytes,
                   **{f"{s}_count": cost.mix.get(s, 0) for s in STRATEGY_COLUMNS})
        for c in STEP_COLUMNS:
            self.columns[c].append(row[c])

    def __len__(self) -> int:
        return len(self.columns["kind"])

    def array(self, column: str, kind: str | None = None) -> npt.NDArray[np.float64]:
        values = np.asarray(self.columns[column], dtype=float)
        if kind is None:
            return values
        return values[np.asarray(self.columns["kind"]) == kind]


def _mean(values: Sequence[float] | npt.NDArray[np.float64]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def percentile(values: Sequence[float] | npt.NDArray[np.float64], q: float) -> float:
    """The q-th percentile (0 <= q <= 100) of `values`, NaN when there are none: every
    percentile of the summary comes from here. numpy.percentile's default method, "linear"
    (Hyndman and Fan's type 7): the sorted values x_0..x_{n-1} interpolated linearly at
    position (n - 1) q / 100; the same as statistics.quantiles(method="inclusive") and
    Excel's PERCENTILE.INC."""
    return float(np.percentile(values, q)) if len(values) else math.nan


PERCENTILES = (50, 90, 99)


def _distribution(name: str, unit: str, values: Sequence[float], scale: float = 1.0) -> dict[str, float]:
    """{name_unit: mean, name_p50_unit: ..., name_p90_unit, name_p99_unit} of `values` x `scale`."""
    out = {f"{name}_{unit}": _mean(values) * scale}
    out.update({f"{name}_p{q}_{unit}": percentile(values, q) * scale for q in PERCENTILES})
    return out


@dataclasses.dataclass
class RunResult:
    run: ServingConfig
    system_cfg: SystemConfig
    workload: Workload
    # the System that served it, a PoolSystem or a HostSystem (serving.systems.build_system); Any,
    # so that a caller reads a pool's `scheduler` without an isinstance check (boost.pool does)
    system: Any
    log: StepLog
    done: list[tuple[Live, float]]  # (Live, finish time)
    wall_s: float
    requests_clipped: int = 0   # shortened to the model's context (context_overflow "clip")
    requests_dropped: int = 0   # left out, over the model's context (context_overflow "drop")

    def summary(self) -> dict[str, Any]:
        run, log, link = self.run, self.log, self.system.link
        sec = log.array("step_s", "decode")
        batch = log.array("requests_count", "decode")
        full = batch == run.max_batch
        outputs = sum(live.output for live, _ in self.done)
        first_arrival = min((live.arrival_s for live, _ in self.done), default=0.0)
        makespan = max((t for _, t in self.done), default=0.0) - first_arrival
        tpot = [(t - live.first_token_s) / (live.output - 1) for live, t in self.done if live.output > 1]
        ttft = [live.first_token_s - live.arrival_s for live, _ in self.done]
        e2e = [t - live.arrival_s for live, t in self.done]
        busier = np.maximum(log.array("link_to_device_bytes", "decode"), log.array("link_to_gpu_bytes", "decode"))
        sites = {s: log.array(f"{s}_count", "decode").sum() for s in STRATEGY_COLUMNS}
        total_sites = sum(sites.values())
        layers = self.system.model.layers
        out = dict(
            system=self.system_cfg.name, workload=self.workload.name, workload_source=self.workload.source,
            model=run.model, gpu=self.system.gpu.name, link=link.name, device=run.device,
            num_devices=run.num_devices, link_gb_s=round(link.bytes_per_s / 1e9, 6),
            link_latency_ns=round(link.latency_s * 1e9, 6),
            kv_precision=run.kv_precision, max_batch=run.max_batch, adapters=len(self.workload.ranks),
            requests=len(self.done), requests_clipped=self.requests_clipped,
            requests_dropped=self.requests_dropped, steps=len(log),
            decode_steps=len(sec), sim_s=float(log.array("t_s")[-1]) if len(log) else 0.0,
            throughput_tok_s=outputs / makespan if makespan > 0 else math.nan,
            throughput_req_s=len(self.done) / makespan if makespan > 0 else math.nan,
            decode_tok_s=batch.sum() / sec.sum() if sec.sum() > 0 else math.nan,
            full_batch_tok_s=batch[full].sum() / sec[full].sum() if full.any() else math.nan,
            full_batch_step_ms=_mean(sec[full]) * 1e3,
            **_distribution("tpot", "ms", tpot, 1e3),
            **_distribution("ttft", "s", ttft),
            **_distribution("e2e_latency", "s", e2e),
            link_util=busier.sum() / (link.bytes_per_s * sec.sum()) if sec.sum() > 0 else math.nan,
            kv_dup_frac=(log.array("kv_gpu_bytes", "decode").sum() / log.array("kv_bytes", "decode").sum()
                         if log.array("kv_bytes", "decode").sum() > 0 else math.nan),
            layer_gemm_us=_mean(log.array("gemm_s", "decode")) / layers * 1e6,
            layer_lora_us=_mean(log.array("lora_s", "decode")) / layers * 1e6,
            layer_attention_us=_mean(log.array("attention_s", "decode")) / layers * 1e6,
            layer_launch_us=_mean(log.array("launch_s", "decode")) / layers * 1e6,
            wall_s=self.wall_s)
        for s in STRATEGY_COLUMNS:
            out[f"share_{s}"] = sites[s] / total_sites if total_sites else 0.0
        out["absent"] = self._absent(out, batch, tpot)
        return out

    def _absent(self, out: Mapping[str, Any], batch: npt.NDArray[np.float64], tpot: Sequence[float]
                ) -> dict[str, str]:
        """{field: why it is NaN} for each NaN field of the summary `out`."""
        why: dict[str, str] = {}
        if not len(batch):
            why.update(dict.fromkeys(
                ("decode_tok_s", "full_batch_tok_s", "full_batch_step_ms", "link_util", "kv_dup_frac",
                 "layer_gemm_us", "layer_lora_us", "layer_attention_us", "layer_launch_us"),
                "no decode step ran: every request has 1 output token, which its prefill gives"))
        else:
            full = f"no decode step ran at max_batch={self.run.max_batch}: the largest batch was {int(batch.max())}"
            why.update(full_batch_tok_s=full, full_batch_step_ms=full)
        if not tpot:
            why.update(dict.fromkeys(("tpot_ms", *(f"tpot_p{q}_ms" for q in PERCENTILES)),
                                     "no request has a second output token to time"))
        if not self.done:
            why.update(dict.fromkeys(("throughput_tok_s", "throughput_req_s", "ttft_s", "e2e_latency_s",
                                      *(f"{m}_p{q}_s" for m in ("ttft", "e2e_latency") for q in PERCENTILES)),
                                     "no request finished"))
        return {k: why.get(k, "not defined for this run") for k, v in out.items()
                if isinstance(v, float) and math.isnan(v)}

    def write_steps_csv(self, path: str | pathlib.Path) -> pathlib.Path:
        path = pathlib.Path(path)
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(STEP_COLUMNS)
            w.writerows(zip(*(self.log.columns[c] for c in STEP_COLUMNS), strict=True))
        return path

    def write_requests_csv(self, path: str | pathlib.Path) -> pathlib.Path:
        path = pathlib.Path(path)
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(REQUEST_COLUMNS)
            labels = self.workload.labels       # the adapter as the trace names it
            for live, t in sorted(self.done, key=lambda d: d[0].rid):
                tpot = (t - live.first_token_s) / (live.output - 1) if live.output > 1 else ""
                w.writerow((live.rid, labels[live.adapter], self.workload.ranks[live.adapter], live.arrival_s,
                            live.prompt, live.output, live.first_token_s, t, live.first_token_s - live.arrival_s, tpot,
                            t - live.arrival_s))
        return path


def summary_lines(summary: Mapping[str, Any]) -> Iterator[str]:
    """The summary as `plora simulate` prints it, a field a line: an absent value as NaN with
    its reason, `absent` as the list of those fields."""
    absent = summary.get("absent", {})
    for key, value in summary.items():
        if key == "absent":
            value = ", ".join(absent) or "none"
        elif key in absent:
            value = f"NaN ({absent[key]})"
        elif isinstance(value, float):
            value = f"{value:.6g}"
        yield f"{key:20s} {value}"


def json_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The summary for summary.json: an absent value as null (JSON has no NaN), its reason in
    `absent`."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in summary.items()}
