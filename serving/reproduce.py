"""The reproduction table (issue 11, item 7; issue 24, item 7): the paper's claims of sections
VII-B, VII-D, VII-F, VII-G and VIII beside this simulator's figures, each with the ratio and a
verdict.

One command runs every sweep the claims need (on a Dask cluster, serving.sweep), and the
4-GPU S-LoRA's replicas (each a quarter of the workload, in this process), writes their CSVs
and the figures under `--out`, and prints the table; its last line is
`reproduction claims=<n> within_10pct=<k>` (k: the claims within their band, +-10 %, or exact
for a count the paper states as 'every'). A claim outside its band prints the measured cause
beside it (a figure the simulator computes, not a guess); a claim on a baseline the paper
measured on real hardware, which the simulator idealizes, prints what the idealization omits
whatever its verdict.

How each claim is measured, and the sentence it rests on, is in docs/serving.md.

The printed table fits a 120-column terminal: a row per claim (paper, simulator, unit, ratio,
verdict), a miss's cause and a note cut to one line each; every claim with its whole cause
and note is in `--out`/claims.csv (write_claims_csv), which the table's first line names.
"""
import csv
import dataclasses
import logging
import math
import pathlib
import statistics
import textwrap
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from scheduler.config import load_scheduler_config
from scheduler.gpu_model import GpuModel

from .claims import Claim
from .config import WORKLOAD_FIELDS, ServingConfig, load_serving_config, load_system_config
from .figures import fig8_tpot, fig9_ablation, fig11_breakdown, fig12_saturation, fig13_link, setup_text
from .sweep import DEVICES, LADDER_GB_S, LATENCY_NS, points, read_csv, sweep, write_csv
from .workload import Workload

log = logging.getLogger(__name__)      # progress: the sweeps run (or read back), the 4-GPU S-LoRA's replicas
Row = dict[str, Any]                        # a sweep's summary row (serving.sweep), with its labels
Cell = tuple[str, str]                      # (model, workload)
Cells = dict[Cell, dict[str, Row]]          # by_cell: {(model, workload): {system: row}}
Echo = Callable[[str], object]

SHORT, LONG = "uniform", "uniform-long"
MODELS = ("llama2-7b", "llama2-13b")
ABLATION_WORKLOADS = ("lmsys", "uniform", "skewed", "uniform-long", "skewed-long")
FIG8_SYSTEMS = ("plora", "plora-nocxl", "grace-hopper", "pure-cxl", "s-lora", "cpu-lora-offload")
# Fig. 8 (VII-B): 'every workload and all four base models'
FIG8_MODELS = ("llama2-7b", "llama2-13b", "llama3-8b", "qwen3-30b-a3b")
FIG8_WORKLOADS = ("lmsys", SHORT, LONG)
LLAMA_MODELS = ("llama2-7b", "llama2-13b", "llama3-8b")    # 'the Llama models', the dense ones
MOE_MODELS = ("qwen3-30b-a3b",)
# 'S-LoRA is measured on a real H100, so we report it only for the two models we could run'
SLORA_MODELS = MODELS
# (model, system) pairs the systems sweep leaves out: S-LoRA where the paper did not run it
FIG8_SKIP = {(m, "s-lora") for m in FIG8_MODELS if m not in SLORA_MODELS}
DP_GPUS = 4                       # VII-G: '4-GPU S-LoRA' (Llama2-7B)
DP_MODEL = "llama2-7b"


class ReproduceError(ValueError):
    """A claim the sweeps' rows cannot give (no run reached a full batch): the CLI's `Error:` line."""


def _no_full_batch(rows: Sequence[Row], what: str) -> "ReproduceError":
    """Why `what` cannot be read from `rows`: none has a decode step at a full batch."""
    cells: list[Any] = sorted({(r.get("model"), r.get("workload")) for r in rows})
    batches: list[Any] = sorted({r.get("max_batch") for r in rows})
    requests: list[Any] = sorted({r.get("requests") for r in rows})
    return ReproduceError(
        f"{what}: no run of {', '.join(f'{m} {w}' for m, w in cells)} has a decode step at a full batch "
        f"(max_batch={'/'.join(map(str, batches))}, {'/'.join(map(str, requests))} requests a run), so "
        f"full_batch_tok_s is empty in all {len(rows)}; give more requests (--requests) or a smaller batch "
        f"(--set max_batch=...)")


def plateau(rows: Iterable[Row]) -> float:
    return max(r["full_batch_tok_s"] for r in rows)


def saturation_gb_s(rows: Sequence[Row]) -> float:
    """The smallest ladder point within 1 % of the plateau (section VIII, Finding 5)."""
    top = plateau(rows)
    within = [r["link_gb_s"] for r in rows if r["full_batch_tok_s"] >= 0.99 * top]
    if not within:
        raise _no_full_batch(rows, "the saturation bandwidth")
    return min(within)


def knee(rows: Sequence[Row]) -> int:
    """The smallest device count within 5 % of the best (this project's reading of 'knee')."""
    top = max(r["full_batch_tok_s"] for r in rows)
    within = [r["num_devices"] for r in rows if r["full_batch_tok_s"] >= 0.95 * top]
    if not within:
        raise _no_full_batch(rows, "the device-count knee")
    return min(within)


def _select(rows: Iterable[Row], **match: Any) -> list[Row]:
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


def sweep_grids() -> dict[str, list[dict[str, list[Any]]]]:
    """{sweep name: [grid]}: the axes (serving.sweep.points) of every sweep the table reads."""
    return {
        "ladder": [dict(model=list(MODELS), workload=[SHORT, LONG], system=["plora", "plora-nocxl"],
                        link_gb_s=list(LADDER_GB_S))],
        "ablation": [dict(workload=list(ABLATION_WORKLOADS), system=["plora", "ns", "nd-e3", "nd-e4",
                                                                     "n-e3", "n-e4", "pure-cxl"])],
        "devices": [dict(workload=[SHORT, LONG], link_gb_s=[128, 450], devices=list(DEVICES))],
        "latency": [dict(workload=[SHORT, LONG], latency_ns=[0, *LATENCY_NS])],
        # Fig. 8: S-LoRA on the two models the paper ran it on (FIG8_SKIP), the other systems on all four
        "systems": [dict(model=[m], workload=list(FIG8_WORKLOADS),
                         system=[s for s in FIG8_SYSTEMS if (m, s) not in FIG8_SKIP]) for m in FIG8_MODELS],
        "kv": [dict(model=["llama2-13b"], workload=[LONG], system=["plora", "plora-nocxl"],
                    kv_precision=["fp16", "int8", "int4"])],
    }


SWEEP_NAMES = ("ladder", "ablation", "devices", "latency", "systems", "kv", "dp")


def reusable(out: str | pathlib.Path) -> bool:
    """Whether `out` holds every sweep's CSV (what --reuse reads instead of running them)."""
    return all((pathlib.Path(out) / f"{n}.csv").exists() for n in SWEEP_NAMES)


def check_requests(requests: int, max_batch: int) -> str | None:
    """None if runs of `requests` requests at batch `max_batch` can give every claim, else
    why not: the plateau, saturation and knee claims read decode steps at a full batch, and
    the 4-GPU S-LoRA deals the requests to DP_GPUS replicas."""
    if requests < max_batch:
        return (f"{requests} requests never fill a batch of max_batch={max_batch}, and the plateau, saturation "
                f"and knee claims read decode steps at a full batch: give --requests {max_batch} or more, or "
                f"--set max_batch={requests}")
    if requests < DP_GPUS:
        return f"{requests} requests leave a {DP_GPUS}-GPU S-LoRA replica none: give --requests {DP_GPUS} or more"
    return None


def run_sweeps(base: ServingConfig, requests: int, address: str | None, workers: int | None, out: pathlib.Path,
               reuse: bool = False) -> dict[str, list[Row]]:
    """Every sweep of the table: {name: rows}; each written to out/<name>.csv (with `reuse`,
    read back from there instead when all exist). "dp" holds the 4-GPU S-LoRA's replicas."""
    names = SWEEP_NAMES
    if reuse and reusable(out):
        log.info("reading the sweeps back from %s", out)
        return {n: read_csv(out / f"{n}.csv") for n in names}
    base = base.with_(requests=requests)
    grids = sweep_grids()
    labelled = [(name, labels, cfg) for name, gs in grids.items() for grid in gs
                for labels, cfg in points(base, grid)]
    # the longest points (Qwen3-30B-A3B's Uniform and Uniform-long: 20-120 s each, 48 layers of many expert
    # sites) go to the workers first, so that the short ones fill in beside them rather than wait at the end
    order = sorted(range(len(labelled)), key=lambda i: (labelled[i][2].model not in MOE_MODELS, i))
    log.info("running %d sweeps, %d points, %d requests a point", len(grids), len(labelled), requests)
    done = sweep([labelled[i][2] for i in order], address=address, workers=workers, desc="reproduce")
    summaries: list[Row] = [None] * len(labelled)   # type: ignore[list-item]  # each filled in below
    for i, summary in zip(order, done, strict=True):
        summaries[i] = summary
    results: dict[str, list[Row]] = {name: [] for name in grids}
    for (name, labels, _), summary in zip(labelled, summaries, strict=True):
        results[name].append(dict(summary, **{f"axis_{k}": v for k, v in labels.items()}))
    results["dp"] = data_parallel_rows(base, DP_MODEL, FIG8_WORKLOADS)
    for name, rows in results.items():
        write_csv(rows, out / f"{name}.csv")
    return results


# ---- 4-GPU S-LoRA (VII-G): data-parallel replicas ---------------------------------------------

def split_round_robin(workload: Workload, replicas: int) -> list[Workload]:
    """`workload`'s requests dealt round robin: request i (in arrival order) to replica i mod
    `replicas`; each replica a Workload with every adapter (a replica stages what it serves)."""
    return [dataclasses.replace(workload, requests=workload.requests[k::replicas]) for k in range(replicas)]


def data_parallel_rows(base: ServingConfig, model: str, workloads: Iterable[str], system: str = "s-lora",
                       gpus: int = DP_GPUS) -> list[Row]:
    """A data-parallel `system` of `gpus` GPUs per workload: `gpus` independent replicas, each
    serving its round-robin share of the run's requests (split_round_robin); a summary row per
    replica, with the output tokens, first arrival and last finish data_parallel_throughput
    merges."""
    from .engine import device_timing, load_workload, simulate
    rows = []
    for w in workloads:
        cfg = base.with_(model=model, workload=w, system=system)
        workload = load_workload(cfg.workload, **{f: getattr(cfg, f) for f in WORKLOAD_FIELDS})
        for k, part in enumerate(split_round_robin(workload, gpus)):
            log.info("%d-GPU %s, %s: replica %d of %d", gpus, system, w, k + 1, gpus)
            result = simulate(cfg, load_system_config(system), part, device_timing(cfg.device), progress=False)
            rows.append(dict(result.summary(), replica=k, replicas=gpus,
                             output_tokens=sum(live.output for live, _ in result.done),
                             first_arrival_s=min(live.arrival_s for live, _ in result.done),
                             last_finish_s=max(t for _, t in result.done)))
    return rows


def data_parallel_throughput(rows: Sequence[Row]) -> float:
    """The replicas' output tokens summed over the longest replica's makespan (first arrival
    to last finish over all of them): tokens/s of the data-parallel system."""
    tokens = sum(r["output_tokens"] for r in rows)
    span = max(r["last_finish_s"] for r in rows) - min(r["first_arrival_s"] for r in rows)
    return tokens / span


# ---- Fig. 8 (VII-B): TPOT of every system per model and workload ------------------------------

def by_cell(rows: Iterable[Row]) -> Cells:
    """{(model, workload): {system: row}} of sweep rows."""
    cells: Cells = {}
    for r in rows:
        cells.setdefault((r["model"], r["workload"]), {})[r["system"]] = r
    return cells


def tpot_over_plora(cells: Cells, system: str, models: Sequence[str], workloads: Sequence[str] | None = None,
                    metric: str = "tpot_ms") -> dict[Cell, float]:
    """{(model, workload): `system`'s TPOT / PLoRA's} over the cells of `models` (and
    `workloads`) where both ran, in the cells' order."""
    return {c: row[system][metric] / row["plora"][metric] for c, row in cells.items()
            if c[0] in models and (workloads is None or c[1] in workloads) and system in row and "plora" in row}


def lowest_tpot(cells: Cells) -> list[tuple[str, str, str, float]]:
    """[(model, workload, the system of lowest TPOT, PLoRA's TPOT / that system's)] per cell (a
    tie goes to PLoRA)."""
    out = []
    for (model, workload), row in cells.items():
        best = min(row, key=lambda s: (row[s]["tpot_ms"], s != "plora"))
        out.append((model, workload, best, row["plora"]["tpot_ms"] / row[best]["tpot_ms"]))
    return out


def _cell(c: Cell) -> str:
    return f"{c[0]} {c[1]}"


def _ratios(ratios: dict[Cell, float]) -> str:
    return ", ".join(f"{_cell(c)} {v:.2f}" for c, v in ratios.items())


def _layer(row: Row) -> str:
    """One decode layer of a sweep row, by component."""
    return (f"{row['layer_gemm_us']:.0f} GEMM + {row['layer_lora_us']:.0f} LoRA + {row['layer_attention_us']:.0f} "
            f"attention + {row['layer_launch_us']:.0f} launch/host us at a mean batch of {mean_batch(row):.1f}")


def _mix(row: Row) -> str:
    """The strategy mix of a sweep row's decode sites."""
    return " ".join(f"{s} {row[f'share_{s}']:.0%}" for s in ("E1", "E2", "E3", "E4"))


def mean_batch(row: Row) -> float:
    """A run's mean decode batch: its output tokens less the first tokens (each its prefill's)
    over its decode steps (offline arrivals: the makespan is the simulated time)."""
    tokens = row["throughput_tok_s"] * row["sim_s"] - row["requests"]
    return tokens / row["decode_steps"] if row["decode_steps"] else float("nan")


def slora_omits(cells: Cells, ratios: dict[Cell, float], paper: float, base: ServingConfig) -> str:
    """What the roofline S-LoRA leaves out, measured: the TPOT the paper's ratio implies for
    S-LoRA on the simulated PLoRA (PLoRA's TPOT x `paper`) against the simulated S-LoRA's,
    and that difference per decode step and per layer, in the GPU's kernel launches."""
    from isa.system import load_gpu, load_model
    launch = load_gpu(base.gpu).kernel_launch_s
    implied = {c: cells[c]["plora"]["tpot_ms"] * paper for c in ratios}
    sim = {c: cells[c]["s-lora"]["tpot_ms"] for c in ratios}
    per_layer = {c: (implied[c] - sim[c]) * 1e3 / load_model(c[0]).layers for c in ratios}
    gap = statistics.mean(implied[c] - sim[c] for c in ratios)
    us = statistics.mean(per_layer.values())
    mean = f" (mean over {len(ratios)} cells)" if len(ratios) > 1 else ""
    return (f"S-LoRA is the paper's measurement on a real H100, here a roofline (the same GEMMs and attention, "
            f"SGMV LoRA, adapters staged over PCIe): the paper's {paper}x on the simulated PLoRA implies S-LoRA at "
            f"{statistics.mean(implied.values()):.1f} ms a token{mean}, the roofline gives "
            f"{statistics.mean(sim.values()):.1f} ms; the {gap:.1f} ms a decode step ({us:.0f} us a layer, "
            f"{us * 1e-6 / launch:.0f} kernel launches of {launch * 1e6:.0f} us) is what the roofline does not charge "
            f"(framework, scheduling, kernel launches, memory management). Per cell, implied vs roofline ms: "
            + ", ".join(f"{_cell(c)} {implied[c]:.1f} vs {sim[c]:.1f}" for c in ratios))


def cpu_offload_parts(row: Row, base: ServingConfig) -> tuple[float, float, float]:
    """CPU-LoRA-Offload's host rounds in one decode layer of a sweep row, in us: (fixed: the
    assumed exchange cost and the PCIe round trip of each round; transfers: x over PCIe and the
    results back at the row's mean batch; the rest: the CPU's roofline)."""
    from isa.system import FP16_BYTES, load_cpu, load_link, load_model
    from scheduler.rounds import LORA_ROUNDS
    system = load_system_config("cpu-lora-offload")
    cpu, link = load_cpu(system.cpu), load_link(system.link)
    model = load_model(row["model"])
    projections = {p.name: p for p in model.projections}
    fixed = len(LORA_ROUNDS) * (cpu.exchange_s + link.round_trip_s) * 1e6
    per_token = sum((projections[names[0]].d_in + sum(projections[n].d_out for n in names)) * FP16_BYTES
                    for _, names in LORA_ROUNDS)
    transfers = link.transfer_s(per_token * mean_batch(row)) * 1e6
    return fixed, transfers, row["layer_launch_us"] - fixed - transfers


def nocxl_launches(cell: dict[str, Row], base: ServingConfig) -> str:
    """Why NoCXL's TPOT is what it is over PLoRA's: its launches a layer against PLoRA's layer."""
    from isa.system import load_gpu
    launch = load_gpu(base.gpu).kernel_launch_s * 1e6
    n, p = cell["plora-nocxl"], cell["plora"]
    layer = p["layer_gemm_us"] + p["layer_lora_us"] + p["layer_attention_us"] + p["layer_launch_us"]
    nocxl = n["layer_gemm_us"] + n["layer_lora_us"] + n["layer_attention_us"] + n["layer_launch_us"]
    return (f"one layer: NoCXL {_layer(n)}, PLoRA {_layer(p)}: NoCXL's {n['layer_launch_us']:.0f} us of launches "
            f"({n['layer_launch_us'] / launch:.0f} of {launch:.0f} us) is {n['layer_launch_us'] / layer:.1f}x PLoRA's "
            f"layer; were PLoRA's layer its GEMMs alone ({p['layer_gemm_us']:.0f} us, the HBM floor), NoCXL's "
            f"{nocxl:.0f} us would be {nocxl / p['layer_gemm_us']:.1f}x it")


def fig8_claims(systems: list[Row], dp: list[Row], base: ServingConfig) -> list[Claim]:
    """The claims of VII-B (Fig. 8) and VII-G (4-GPU S-LoRA) from the systems sweep's rows and
    the 4-GPU S-LoRA's replica rows."""
    cells = by_cell(systems)
    out = []
    # S-LoRA, the two Llama2 models (measured on a real H100 in the paper)
    ratios = tpot_over_plora(cells, "s-lora", SLORA_MODELS)
    worst = max(ratios, key=ratios.__getitem__)
    why = (f"per cell {_ratios(ratios)}; one layer at {_cell(worst)}: PLoRA {_layer(cells[worst]['plora'])}, "
           f"S-LoRA {_layer(cells[worst]['s-lora'])}: the roofline S-LoRA runs PLoRA's GEMMs and differs only in its "
           f"LoRA (SGMV on factors staged in HBM) and attention (all the KV in HBM, which caps its batch)")
    out.append(Claim("PLoRA TPOT below S-LoRA, mean over Llama2-7B/13B x 3 workloads", 6.6,
                     statistics.mean(ratios.values()), "x", why, slora_omits(cells, ratios, 6.6, base)))
    out.append(Claim(f"PLoRA TPOT below S-LoRA, most ({_cell(worst)})", 13.1, ratios[worst], "x", why,
                     slora_omits(cells, {worst: ratios[worst]}, 13.1, base)))
    # CPU-LoRA-Offload, every model and workload
    ratios = tpot_over_plora(cells, "cpu-lora-offload", FIG8_MODELS)
    lo, hi = min(ratios, key=ratios.__getitem__), max(ratios, key=ratios.__getitem__)
    # section VIII, Finding 1: 'CPU-LoRA-Offload is CPU-bound below 188 tokens/s' (batch 32)
    full = {c: cells[c]["cpu-lora-offload"]["full_batch_tok_s"] for c in cells
            if c[0] in MODELS and c[1] != "lmsys" and "cpu-lora-offload" in cells[c]}
    bound = (f"its decode throughput at a full batch here is {min(full.values()):.0f}-{max(full.values()):.0f} tok/s "
             f"on Llama2-7B/13B Uniform and Uniform-long, against the paper's 'CPU-bound below 188 tokens/s' "
             f"(Finding 1), a step of at least 32/188 = {32 / 188 * 1e3:.0f} ms")
    for label, paper, c in (("least", 3.7, lo), ("most", 177.0, hi)):
        row = cells[c]["cpu-lora-offload"]
        fixed, transfers, cpu = cpu_offload_parts(row, base)
        step = row["layer_gemm_us"] + row["layer_lora_us"] + row["layer_attention_us"] + row["layer_launch_us"]
        note = (f"a baseline the paper simulates too; here on this project's assumptions (isa/configs/cpus/"
                f"xeon-8480.json: 307 GB/s, 50 TFLOPS, 15 us an exchange; PCIe 5.0 63 GB/s, 1 us): at {_cell(c)} "
                f"a layer's 4 host rounds take {row['layer_launch_us']:.0f} us of its {step:.0f} us: {fixed:.0f} us "
                f"the assumed exchange cost and PCIe round trips, {transfers:.0f} us x and the results over PCIe, "
                f"{cpu:.0f} us the CPU's roofline (every served adapter's factors read from host DRAM); PLoRA's "
                f"layer {_layer(cells[c]['plora'])}; {bound}")
        out.append(Claim(f"PLoRA TPOT below CPU-LoRA-Offload, {label} ({_cell(c)})", paper, ratios[c], "x",
                         f"per cell {_ratios(ratios)}", note))
    # Grace-Hopper: the Llama models under LMSYS, and Llama2-13B Uniform-long
    ratios = tpot_over_plora(cells, "grace-hopper", LLAMA_MODELS, ("lmsys",))
    lo, hi = min(ratios, key=ratios.__getitem__), max(ratios, key=ratios.__getitem__)
    for label, paper, c in (("least", 1.6, lo), ("most", 3.6, hi)):
        p = cells[c]["plora"]
        floor = p["layer_gemm_us"] / (p["layer_gemm_us"] + p["layer_lora_us"] + p["layer_attention_us"])
        out.append(Claim(f"Grace-Hopper TPOT over PLoRA, Llama LMSYS, {label} ({c[0]})", paper, ratios[c], "x",
                         f"per cell {_ratios(ratios)}; one layer: Grace-Hopper {_layer(cells[c]['grace-hopper'])}, "
                         f"PLoRA {_layer(p)}: at LMSYS's short contexts both sit on the HBM floor (the GEMMs "
                         f"{floor:.0%} of PLoRA's layer), and E1/E2 over 450 GB/s add as little as PLoRA's mix"))
    c = ("llama2-13b", LONG)
    gh = tpot_over_plora(cells, "grace-hopper", (c[0],), (c[1],))[c]
    out.append(Claim("Grace-Hopper TPOT over PLoRA, llama2-13b uniform-long", 13.6, gh, "x",
                     f"one layer: Grace-Hopper {_layer(cells[c]['grace-hopper'])} (KV on the GPU "
                     f"{cells[c]['grace-hopper']['kv_dup_frac']:.0%}, the rest read over the link, "
                     f"{cells[c]['grace-hopper']['link_util']:.0%} busy), PLoRA {_layer(cells[c]['plora'])}: the "
                     f"paper's 13.6x on PLoRA's {cells[c]['plora']['tpot_ms']:.1f} ms would be "
                     f"{13.6 * cells[c]['plora']['tpot_ms']:.0f} ms a token, Grace-Hopper's is "
                     f"{cells[c]['grace-hopper']['tpot_ms']:.0f} ms"))
    # PLoRA-NoCXL: the dense models, and the MoE model
    ratios = tpot_over_plora(cells, "plora-nocxl", LLAMA_MODELS)
    lo, hi = min(ratios, key=ratios.__getitem__), max(ratios, key=ratios.__getitem__)
    for label, paper, c in (("least", 4.0, lo), ("most", 11.0, hi)):
        out.append(Claim(f"PLoRA-NoCXL TPOT over PLoRA, dense models, {label} ({_cell(c)})", paper, ratios[c], "x",
                         f"per cell {_ratios(ratios)}; " + nocxl_launches(cells[c], base)))
    ratios = tpot_over_plora(cells, "plora-nocxl", MOE_MODELS)
    c = max(ratios, key=ratios.__getitem__)
    out.append(Claim(f"PLoRA-NoCXL TPOT over PLoRA, MoE, most ({_cell(c)})", 31.0, ratios[c], "x",
                     f"per cell {_ratios(ratios)}; " + nocxl_launches(cells[c], base)))
    # PLoRA lowest on every model and workload
    lows = lowest_tpot(cells)
    beaten = [(m, w, s, r) for m, w, s, r in lows if s != "plora"]
    out.append(Claim(f"cells where PLoRA has the lowest TPOT, of {len(lows)} (models x workloads)", 1.0,
                     (len(lows) - len(beaten)) / len(lows), "share",
                     "PLoRA is not lowest at " + "; ".join(
                         f"{m} {w}: {s}, PLoRA's TPOT {r:.3f}x its (one layer {s} "
                         f"{_layer(cells[(m, w)][s])}, {cells[(m, w)][s]['throughput_tok_s']:.0f} tok/s; PLoRA "
                         f"{_layer(cells[(m, w)]['plora'])}, {cells[(m, w)]['plora']['throughput_tok_s']:.0f} tok/s)"
                         for m, w, s, r in beaten), tolerance=0.0))
    # VII-G: 4-GPU S-LoRA, Llama2-7B, throughput
    each, scale, spans = {}, {}, {}
    for w in FIG8_WORKLOADS:
        replicas = [r for r in dp if r["workload"] == w]
        spans[w] = [r["last_finish_s"] - r["first_arrival_s"] for r in replicas]
        tok_s = data_parallel_throughput(replicas)
        each[w] = cells[(DP_MODEL, w)]["plora"]["throughput_tok_s"] / tok_s
        scale[w] = tok_s / cells[(DP_MODEL, w)]["s-lora"]["throughput_tok_s"]
    mean = statistics.mean(each.values())
    implied = {w: cells[(DP_MODEL, w)]["plora"]["throughput_tok_s"] / 2.23 for w in each}
    sim_tok = {w: cells[(DP_MODEL, w)]["plora"]["throughput_tok_s"] / each[w] for w in each}
    note = (f"the paper ran {DP_GPUS} real H100s, here {DP_GPUS} roofline S-LoRA replicas, each serving every "
            f"{DP_GPUS}th request, their tokens over the longest replica's makespan: linear data-parallel scaling, "
            f"an idealization (the paper: 'S-LoRA's throughput grows sublinearly in GPU count'); here "
            f"{DP_GPUS} replicas give " + ", ".join(f"{w} {v:.2f}x" for w, v in scale.items())
            + f" one GPU's throughput (the paper's 6.6x and 2.23x together imply {6.6 / 2.23:.2f}x), the replicas' "
            "makespans " + ", ".join(f"{w} {min(v):.1f}-{max(v):.1f} s" for w, v in spans.items())
            + "; the paper's 2.23x on the simulated PLoRA implies "
            + ", ".join(f"{w} {implied[w]:.0f}" for w in each) + " tok/s for 4-GPU S-LoRA against the replicas' "
            + ", ".join(f"{w} {sim_tok[w]:.0f}" for w in each))
    out.append(Claim(f"PLoRA throughput over {DP_GPUS}-GPU S-LoRA, {DP_MODEL}, mean over 3 workloads", 2.23, mean,
                     "x", "per workload " + ", ".join(f"{w} {v:.2f}" for w, v in each.items()), note))
    return out


def device_attention_note(base: ServingConfig) -> str:
    """The measured cause behind most misses: what one KV page costs the paper device."""
    from isa import load_config
    from isa.system import load_model

    from .engine import device_timing
    m, cfg = load_model(base.model), load_config(base.device)
    page = load_scheduler_config(base.scheduler).kv_page_tokens
    timing = device_timing(base.device)
    seconds = timing.attention(m.q_heads // m.kv_heads, m.head_dim, page)
    period, _ = timing.stream("attention", m.q_heads // m.kv_heads, m.head_dim, page)
    nbytes = 2 * page * m.head_dim * 2
    return (f"device attention: one {page}-token page ({nbytes // 1024} KB of K and V) takes {seconds * 1e9:.0f} ns "
            f"alone on the cycle model, {period * 1e9:.0f} ns back to back ({nbytes / period / 1e9:.0f} GB/s of the "
            f"port's {cfg.dram_bytes_per_s / 1e9:.0f} GB/s)")


def device_share_note(base: ServingConfig, devices: int, rows: Sequence[Row]) -> str:
    """Why the device side grows past the knee: a request-head's share is one descriptor
    (a page when it is at most kv_page_tokens), and the shorter the share, the more of its
    period is the attention chain's fixed cost. `rows` are the runs at `devices` devices."""
    from isa import load_config
    from isa.system import load_model

    from .engine import device_timing
    from .workload import generate, load_workload_config
    m, cfg = load_model(base.model), load_config(base.device)
    requests = generate(load_workload_config(rows[0]["workload"])).requests
    context = sum(r.prompt_tokens + r.output_tokens / 2 for r in requests) / len(requests)   # mean over decode
    timing = device_timing(base.device)
    page = load_scheduler_config(base.scheduler).kv_page_tokens
    rate = {}
    for tokens in (page, max(1, round(context / devices))):
        period, _ = timing.stream("attention", m.q_heads // m.kv_heads, m.head_dim, tokens)
        rate[tokens] = 2 * tokens * m.head_dim * 2 / period / 1e9
    (full, full_gb), (share, share_gb) = list(rate.items())[0], list(rate.items())[-1]
    return (f"at {devices} devices a request-head's share is {share} tokens a device, one descriptor streaming at "
            f"{share_gb:.0f} GB/s against a {full}-token page's {full_gb:.0f} GB/s of the port's "
            f"{cfg.dram_bytes_per_s / 1e9:.0f} GB/s (the attention chain's fixed cost per descriptor, issue 25), and "
            f"one partial (O, m, l) per device and request-head crosses the link")


def claims(results: dict[str, list[Row]], base: ServingConfig) -> list[Claim]:
    ladder, ablation = results["ladder"], results["ablation"]
    devices, latency = results["devices"], results["latency"]
    device_note = device_attention_note(base)
    out = []
    floors = {}
    from isa.system import load_gpu, load_model
    for model in MODELS:
        floors[model] = GpuModel(load_gpu(base.gpu), load_model(model)).weights_floor_s()
    # Finding 1: the short-context plateau and the HBM floor
    for model, step_ms, tok_s in (("llama2-7b", 4.18, 7657), ("llama2-13b", 7.76, 4123)):
        rows = _select(ladder, model=model, workload=SHORT, system="plora")
        top = plateau(rows)
        step = 32 / top * 1e3
        floor_ms = floors[model] * 1e3
        best = max(rows, key=lambda r: r["full_batch_tok_s"])
        layers = load_model(model).layers
        why = (f"the HBM floor here is {floor_ms:.2f} ms ({load_model_params(model):.2f}B parameters at "
               f"3350 GB/s; the paper streams {step_ms * 3.35:.0f} GB); the step at the plateau is "
               f"{best['layer_gemm_us'] * layers / 1e3:.2f} ms of GEMMs and LM head + "
               f"{best['layer_lora_us'] * layers / 1e3:.2f} ms LoRA + "
               f"{best['layer_attention_us'] * layers / 1e3:.2f} ms "
               f"attention rounds: the GPU's own work beside its GEMMs (it reads the "
               f"{best['kv_dup_frac']:.0%} of the KV "
               f"it duplicates from HBM, and the LoRA products it keeps)")
        out.append(Claim(f"{model} short decode step at batch 32 (plateau)", step_ms, step, "ms", why))
        out.append(Claim(f"{model} short plateau", tok_s, top, "tok/s", why))
        out.append(Claim(f"{model} short plateau / HBM floor", 1.0, step / floor_ms, "x",
                         f"one layer is {best['layer_gemm_us']:.0f} us GEMMs + {best['layer_lora_us']:.0f} us LoRA + "
                         f"{best['layer_attention_us']:.0f} us attention with {best['kv_dup_frac']:.0%} of the KV on "
                         f"the GPU; {device_note}"))
    for model, tok_s in (("llama2-7b", 3461), ("llama2-13b", 2092)):
        rows = _select(ladder, model=model, workload=LONG, system="plora")
        top = plateau(rows)
        best = max(rows, key=lambda r: r["full_batch_tok_s"])
        why = (f"at the plateau one layer is {best['layer_gemm_us']:.0f} us GEMMs + "
               f"{best['layer_attention_us']:.0f} us "
               f"attention + {best['layer_lora_us']:.0f} us LoRA; Table VII's long lengths are not in the text "
               f"(ours: docs/workloads.md)")
        out.append(Claim(f"{model} long plateau", tok_s, top, "tok/s", why))
    for model in MODELS:
        for workload, gbs in ((SHORT, 32), (LONG, 64)):
            rows = _select(ladder, model=model, workload=workload, system="plora")
            sat = saturation_gb_s(rows)
            top = plateau(rows)
            curve = ", ".join(f"{r['link_gb_s']:.0f}:{r['full_batch_tok_s']:.0f}"
                              for r in sorted(rows, key=lambda r: r['link_gb_s']))
            at = {r["link_gb_s"]: r for r in rows}
            below = at[max(g for g in at if g < sat)] if any(g < sat for g in at) else at[sat]
            out.append(Claim(f"{model} {workload} saturation bandwidth", gbs, sat, "GB/s",
                             f"tok/s by GB/s: {curve}; 128 GB/s gives {at[128.0]['full_batch_tok_s'] / top:.1%} of the "
                             f"plateau (the paper: 128 to 1800 GB/s moves it +0.00 to +0.39 %); PLoRA's policy stays "
                             f"tuned for 128 GB/s ({_mix(at[sat])} of the sites), and the link bounds its rounds up to "
                             f"{sat:.0f} GB/s: at {below['link_gb_s']:.0f} GB/s it is "
                             f"{below['link_util']:.0%} busy and "
                             f"LoRA takes {below['layer_lora_us']:.0f} us a layer, at {sat:.0f} GB/s "
                             f"{at[sat]['link_util']:.0%} and {at[sat]['layer_lora_us']:.0f} us"))
    ratios = {}
    for model in MODELS:
        for workload in (SHORT, LONG):
            p = {r["link_gb_s"]: r for r in _select(ladder, model=model, workload=workload, system="plora")}
            n = {r["link_gb_s"]: r for r in _select(ladder, model=model, workload=workload, system="plora-nocxl")}
            for g in p:
                ratios[(model, workload, g)] = (p[g]["full_batch_tok_s"] / n[g]["full_batch_tok_s"], p[g], n[g])
    nocxl = [r[2]["full_batch_tok_s"] for r in ratios.values()]
    for label, paper, pick in (("least", 4.0, min), ("most", 11.1, max)):
        key = pick(ratios, key=lambda k: ratios[k][0])
        v, p, n = ratios[key]
        why = (f"at {key[0]} {key[1]} {key[2]:.0f} GB/s: PLoRA {p['full_batch_tok_s']:.0f} tok/s, its policy tuned for "
               f"128 GB/s ({_mix(p)}), link {p['link_util']:.0%} busy, one layer {_layer(p)}; NoCXL "
               f"{n['full_batch_tok_s']:.0f} tok/s, its policy on the link ({_mix(n)}), one layer {_layer(n)}; "
               f"NoCXL here {min(nocxl):.0f}-{max(nocxl):.0f} tok/s over the ladder (the paper's: 468-690), so the gap "
               f"is PLoRA's step (the plateau claims)")
        out.append(Claim(f"PLoRA over PLoRA-NoCXL, {label} across the ladder", paper, v, "x", why))
    # VII-D: ablations, averaged over the workloads
    def lead(system: str) -> tuple[float, dict[str, float], dict[str, tuple[Any, ...]]]:
        by = {r["workload"]: r for r in _select(ablation, system="plora")}
        them = {r["workload"]: r for r in _select(ablation, system=system)}
        each = {w: by[w]["throughput_tok_s"] / them[w]["throughput_tok_s"] for w in by}
        kv = {w: (by[w]["kv_dup_frac"], them[w]["kv_dup_frac"], by[w]["layer_lora_us"], them[w]["layer_lora_us"],
                  by[w]["share_E1"]) for w in by}
        return sum(each.values()) / len(each), each, kv
    for system, paper, label in (("ns", 3.8, "NSD over NS"), ("nd-e3", 1.30, "NSD over ND(E3)"),
                                 ("nd-e4", 1.10, "NSD over ND(E4)"), ("n-e3", 4.0, "NSD over N(E3)"),
                                 ("n-e4", 3.8, "NSD over N(E4)")):
        avg, each, kv = lead(system)
        out.append(Claim(f"{label}, mean over the workloads", paper, avg, "x",
                         "per workload: " + ", ".join(
                             f"{w} {v:.2f} (KV on the GPU {kv[w][0]:.0%} vs {kv[w][1]:.0%}, LoRA a layer "
                             f"{kv[w][2]:.0f} vs {kv[w][3]:.0f} us, NSD's E1 share {kv[w][4]:.0%})"
                             for w, v in each.items())))
    # Finding 3: the device-count knee and the fall past 32
    for workload, paper_knee, paper_fall in ((SHORT, 4, -0.38), (LONG, 16, -0.25)):
        rows = _select(devices, workload=workload, link_gb_s=128.0)
        curve = ", ".join(f"{r['num_devices']}:{r['full_batch_tok_s']:.0f}"
                          for r in sorted(rows, key=lambda r: r['num_devices']))
        out.append(Claim(f"{workload} device-count knee at 128 GB/s", paper_knee, knee(rows), "devices",
                         f"tok/s by devices {curve}; "
                         + device_share_note(base, 64, _select(rows, num_devices=64))))
        top = max(r["full_batch_tok_s"] for r in rows)
        at64 = _select(rows, num_devices=64)[0]
        fall = at64["full_batch_tok_s"] / top - 1
        out.append(Claim(f"{workload} throughput at 64 devices vs the best, 128 GB/s", 1 + paper_fall, 1 + fall, "x",
                         f"link utilization at 64 devices {at64['link_util']:.0%}; {curve}"))
        rows = _select(devices, workload=workload, link_gb_s=450.0)
        top = max(r["full_batch_tok_s"] for r in rows)
        at64 = _select(rows, num_devices=64)[0]
        out.append(Claim(f"{workload} throughput at 64 devices vs the best, 450 GB/s", 1.0,
                         at64["full_batch_tok_s"] / top, "x",
                         f"link utilization {at64['link_util']:.0%}, KV on the GPU {at64['kv_dup_frac']:.0%} at 64 "
                         "devices, the link not the bound; " + device_share_note(base, 64, [at64])))
    # VII-F: KV compression widens PLoRA's margin over PLoRA-NoCXL (Llama2-13B, Uniform-long)
    kv_runs = {(r["system"], r["kv_precision"]): r for r in results["kv"]}
    margin = {p: kv_runs[("plora", p)]["throughput_tok_s"] / kv_runs[("plora-nocxl", p)]["throughput_tok_s"]
              for p in ("fp16", "int8", "int4")}
    for prec, paper in (("fp16", 4.4), ("int8", 6.3), ("int4", 7.8)):
        out.append(Claim(f"llama2-13b uniform-long PLoRA over PLoRA-NoCXL, {prec} KV", paper, margin[prec], "x",
                         f"one layer: PLoRA {_layer(kv_runs[('plora', prec)])}, "
                         f"NoCXL {_layer(kv_runs[('plora-nocxl', prec)])}: "
                         f"NoCXL's launches against PLoRA's step; {device_note}"))
    out.append(Claim("that margin widened from fp16 to int4 KV", 7.8 / 4.4, margin["int4"] / margin["fp16"], "x",
                     f"a smaller KV shifts the step towards adapter handling: PLoRA's attention "
                     f"{kv_runs[('plora', 'fp16')]['layer_attention_us']:.0f} -> "
                     f"{kv_runs[('plora', 'int4')]['layer_attention_us']:.0f} "
                     f"us a layer against NoCXL's constant "
                     f"{kv_runs[('plora-nocxl', 'int4')]['layer_launch_us']:.0f} us of "
                     f"launches; the margin starts at {margin['fp16']:.2f}x, not 4.4x (the fp16 claim)"))
    # Finding 4: latency on long KV
    by_latency = {r["axis_latency_ns"]: r["full_batch_tok_s"] for r in _select(latency, workload=LONG)}
    for ns, paper in ((200, 0.3), (2000, 2.6)):
        loss = 100 * (1 - by_latency[ns] / by_latency[0])
        step_ms = 32 / by_latency[0] * 1e3
        out.append(Claim(f"long-KV throughput lost to {ns} ns one-way latency (vs 0 ns)", paper, loss, "%",
                         f"two round trips per layer cost {4 * ns * 32 / 1e3:.1f} us a step at most, against a "
                         f"{step_ms:.1f} ms step (the paper's: 9.2 ms)"))
    out += fig8_claims(results["systems"], results["dp"], base)
    return out


def load_model_params(model: str) -> float:
    from isa.system import load_model
    return load_model(model).params / 1e9


WIDTH = 120                 # the printed table's widest line
CLAIM_WIDTH = 62            # the claim's column; a longer claim wraps within it
CSV_COLUMNS = ("number", "claim", "paper_value", "sim_value", "unit", "ratio_sim_over_paper", "band_frac",
               "within_band", "verdict", "why", "note")


def _one_line(label: str, text: str, indent: int = 6) -> str:
    """`label: text` on one line of at most WIDTH columns, cut with '...' (the whole text is
    in claims.csv)."""
    line = f"{'':{indent}s}{label}: {' '.join(text.split())}"
    return line if len(line) <= WIDTH else line[:WIDTH - 3].rstrip() + "..."


def short_verdict(claim: Claim) -> str:
    """'within 10%', 'exact' or 'miss' (Claim.verdict without the miss's cause)."""
    return "miss" if not claim.within else claim.verdict


def print_table(table: Sequence[Claim], echo: Echo = print, csv_path: str | pathlib.Path | None = None,
                setup: str | None = None) -> None:
    """The claims as a table no wider than WIDTH columns: a numbered row per claim, under it
    a miss's cause and a note (whatever the verdict) cut to a line each; `csv_path`, where
    write_claims_csv put the whole text, is named first, then `setup` (setup_line: the GPU,
    link, devices and batch the runs share). The last line is
    `reproduction claims=<n> within_10pct=<k>`."""
    if csv_path is not None:
        echo(f"each claim's whole cause (why) and note: {csv_path}")
    if setup:
        echo(f"setup: {setup}")
    echo(f"{'#':>3s}  {'claim':{CLAIM_WIDTH}s} {'paper':>10s} {'sim':>10s} {'unit':7s} {'ratio':>7s}  verdict")
    for number, c in enumerate(table, start=1):
        what = textwrap.wrap(c.what, CLAIM_WIDTH) or [""]
        echo(f"{number:3d}  {what[0]:{CLAIM_WIDTH}s} {c.paper:10.3g} {c.sim:10.3g} {c.unit:7s} {c.ratio:7.3f}  "
             f"{short_verdict(c)}")
        for more in what[1:]:
            echo(f"{'':5s}{more}")
        if not c.within and c.why:
            echo(_one_line("why", c.why))
        if c.note:
            echo(_one_line("note", c.note))
    echo(f"reproduction claims={len(table)} within_10pct={sum(c.within for c in table)}")


def write_claims_csv(table: Sequence[Claim], path: str | pathlib.Path) -> pathlib.Path:
    """Every claim as a CSV row, numbered as the printed table: the paper's and the
    simulator's figures in the row's `unit`, their ratio, the verdict's band (a fraction,
    0 for an exact count) and whether the claim is within it, the verdict, and the whole
    measured cause (`why`, the verdict's reason for a miss; what lies behind the figure for
    the others) and `note`."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for number, c in enumerate(table, start=1):
            w.writerow((number, c.what, repr(float(c.paper)), repr(float(c.sim)), c.unit,
                        "" if math.isnan(c.ratio) else repr(float(c.ratio)), c.tolerance, bool(c.within),
                        short_verdict(c),
                        c.why, c.note))
    return path


def reproduce(out: pathlib.Path, requests: int = 128, address: str | None = None, workers: int | None = None,
              echo: Echo = print, reuse: bool = False, base: ServingConfig | None = None) -> list[Claim]:
    base = base or load_serving_config("default")
    results = run_sweeps(base, requests, address, workers, out, reuse)
    table = claims(results, base)
    figures(results, out)
    print_table(table, echo, write_claims_csv(table, out / "claims.csv"), setup_line(base))
    return table


def setup_line(base: ServingConfig) -> str:
    """What every run shares unless its claim varies it: the GPU, the link, the devices and
    the batch (the model and workload are in each claim)."""
    from isa.system import load_link
    link = load_link(base.link)
    return (f"GPU {base.gpu}, link {base.link} ({link.bytes_per_s / 1e9:g} GB/s, {link.latency_s * 1e9:g} ns), "
            f"{base.num_devices} x {base.device} devices, batch {base.max_batch}, unless the claim varies it")


def figures(results: dict[str, list[Row]], out: pathlib.Path) -> None:
    fig8_tpot(results["systems"], out / "fig8_tpot.png")
    fig9_ablation([r for r in results["ablation"] if r["system"] in ("plora", "ns", "nd-e3", "nd-e4", "n-e3", "n-e4")],
                  out / "fig9_ablation.png")
    breakdown = [dict(r, breakdown=True) for r in results["ablation"]
                 if r["workload"] == "uniform-long" and r["system"] in ("pure-cxl", "n-e3", "nd-e3", "plora")]
    kv = [dict(r, kv_panel=True) for r in results["systems"] if r["system"] == "plora"]
    fig11_breakdown(breakdown + kv, out / "fig11_breakdown.png")
    sat = [(m, w, saturation_gb_s(_select(results["ladder"], model=m, workload=w, system="plora")))
           for m in MODELS for w in (SHORT, LONG)]
    fig12_saturation(sat, out / "fig12_saturation.png", setup=setup_text(results["ladder"]))
    fig13_link(results["ladder"], results["devices"], results["latency"], out / "fig13_link.png")
