"""What a serving run measured: a row per iteration, a row per request, and the summary.

The summary's metrics, as serving papers define them:
- TPOT: per request, (finish - first token) / (output tokens - 1); mean, p50, p99;
- TTFT: first token - arrival; mean, p99;
- throughput: output tokens / (last finish - first arrival);
- decode throughput: tokens per second of decode steps alone, and at a full batch
  (`max_batch` running: the plateau the paper's link sweep reports, section VIII);
- link utilization: the busier direction's bytes / (bandwidth x time), over decode steps;
- KV duplicated: the share of the batch's KV cache the GPU holds, over decode steps;
- the strategy mix: each strategy's share of the sites decided over the decode steps.

A metric a run cannot define (no decode step at a full batch, no request with a second
token) is NaN, and the summary's `absent` names each such field with the reason; the
printed summary and summary.json carry it (`summary_lines`, `json_summary`).
"""
import csv
import dataclasses
import math
import pathlib

import numpy as np

from .systems import STRATEGY_COLUMNS

STEP_COLUMNS = ("kind", "t_s", "requests", "tokens", "seconds", "gemm_s", "lora_s", "attention_s", "launch_s",
                "link_to_device", "link_to_gpu", "kv_bytes", "kv_gpu_bytes") + STRATEGY_COLUMNS


class StepLog:
    """Per-iteration rows, kept as columns."""

    def __init__(self):
        self.columns = {c: [] for c in STEP_COLUMNS}

    def add(self, kind, t, requests, tokens, cost):
        row = dict(kind=kind, t_s=t, requests=requests, tokens=tokens, seconds=cost.seconds, gemm_s=cost.gemm_s,
                   lora_s=cost.lora_s, attention_s=cost.attention_s, launch_s=cost.launch_s,
                   link_to_device=cost.link_to_device, link_to_gpu=cost.link_to_gpu, kv_bytes=cost.kv_bytes,
                   kv_gpu_bytes=cost.kv_gpu_bytes, **{s: cost.mix.get(s, 0) for s in STRATEGY_COLUMNS})
        for c in STEP_COLUMNS:
            self.columns[c].append(row[c])

    def __len__(self):
        return len(self.columns["kind"])

    def array(self, column, kind=None):
        values = np.asarray(self.columns[column], dtype=float)
        if kind is None:
            return values
        return values[np.asarray(self.columns["kind"]) == kind]


def _mean(values):
    return float(np.mean(values)) if len(values) else math.nan


def _pct(values, q):
    return float(np.percentile(values, q)) if len(values) else math.nan


@dataclasses.dataclass
class RunResult:
    run: object
    system_cfg: object
    workload: object
    system: object
    log: StepLog
    done: list                  # (Live, finish time)
    wall_s: float
    requests_clipped: int = 0   # shortened to the model's context (context_overflow "clip")
    requests_dropped: int = 0   # left out, over the model's context (context_overflow "drop")

    def summary(self):
        run, log, link = self.run, self.log, self.system.link
        sec = log.array("seconds", "decode")
        batch = log.array("requests", "decode")
        full = batch == run.max_batch
        outputs = sum(live.output for live, _ in self.done)
        first_arrival = min((live.arrival_s for live, _ in self.done), default=0.0)
        makespan = max((t for _, t in self.done), default=0.0) - first_arrival
        tpot = [(t - live.first_token_s) / (live.output - 1) for live, t in self.done if live.output > 1]
        ttft = [live.first_token_s - live.arrival_s for live, _ in self.done]
        busier = np.maximum(log.array("link_to_device", "decode"), log.array("link_to_gpu", "decode"))
        sites = {s: log.array(s, "decode").sum() for s in STRATEGY_COLUMNS}
        total_sites = sum(sites.values())
        layers = self.system.model.layers
        out = dict(
            system=self.system_cfg.name, workload=self.workload.name, workload_source=self.workload.source,
            model=run.model, device=run.device,
            num_devices=run.num_devices, link_gb_s=round(link.bytes_per_s / 1e9, 6), link_latency_ns=round(link.latency_s * 1e9, 6),
            kv_precision=run.kv_precision, max_batch=run.max_batch, adapters=len(self.workload.ranks),
            requests=len(self.done), requests_clipped=self.requests_clipped,
            requests_dropped=self.requests_dropped, steps=len(log),
            decode_steps=len(sec), sim_s=float(log.array("t_s")[-1]) if len(log) else 0.0,
            throughput_tok_s=outputs / makespan if makespan > 0 else math.nan,
            decode_tok_s=batch.sum() / sec.sum() if sec.sum() > 0 else math.nan,
            full_batch_tok_s=batch[full].sum() / sec[full].sum() if full.any() else math.nan,
            full_batch_step_ms=_mean(sec[full]) * 1e3,
            tpot_ms=_mean(tpot) * 1e3, tpot_p50_ms=_pct(tpot, 50) * 1e3, tpot_p99_ms=_pct(tpot, 99) * 1e3,
            ttft_s=_mean(ttft), ttft_p99_s=_pct(ttft, 99),
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

    def _absent(self, out, batch, tpot):
        """{field: why it is NaN} for each NaN field of the summary `out`."""
        why = {}
        if not len(batch):
            why.update(dict.fromkeys(
                ("decode_tok_s", "full_batch_tok_s", "full_batch_step_ms", "link_util", "kv_dup_frac",
                 "layer_gemm_us", "layer_lora_us", "layer_attention_us", "layer_launch_us"),
                "no decode step ran: every request has 1 output token, which its prefill gives"))
        else:
            full = f"no decode step ran at max_batch={self.run.max_batch}: the largest batch was {int(batch.max())}"
            why.update(full_batch_tok_s=full, full_batch_step_ms=full)
        if not tpot:
            why.update(dict.fromkeys(("tpot_ms", "tpot_p50_ms", "tpot_p99_ms"),
                                     "no request has a second output token to time"))
        if not self.done:
            why.update(dict.fromkeys(("throughput_tok_s", "ttft_s", "ttft_p99_s"), "no request finished"))
        return {k: why.get(k, "not defined for this run") for k, v in out.items()
                if isinstance(v, float) and math.isnan(v)}

    def write_steps_csv(self, path):
        path = pathlib.Path(path)
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(STEP_COLUMNS)
            w.writerows(zip(*(self.log.columns[c] for c in STEP_COLUMNS)))
        return path

    def write_requests_csv(self, path):
        path = pathlib.Path(path)
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(("rid", "adapter", "rank", "arrival_s", "prompt_tokens", "output_tokens", "first_token_s",
                        "finish_s", "ttft_s", "tpot_s"))
            labels = self.workload.labels       # the adapter as the trace names it
            for live, t in sorted(self.done, key=lambda d: d[0].rid):
                tpot = (t - live.first_token_s) / (live.output - 1) if live.output > 1 else ""
                w.writerow((live.rid, labels[live.adapter], self.workload.ranks[live.adapter], live.arrival_s,
                            live.prompt, live.output, live.first_token_s, t, live.first_token_s - live.arrival_s, tpot))
        return path


def summary_lines(summary):
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


def json_summary(summary):
    """The summary for summary.json: an absent value as null (JSON has no NaN), its reason in
    `absent`."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in summary.items()}
