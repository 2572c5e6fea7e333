"""The reproduction table (issue 11, item 7): the paper's claims of sections VII-D and VIII
beside this simulator's figures, each with the ratio and a verdict.

One command runs every sweep the claims need (on a Dask cluster, serving.sweep), writes their
CSVs and the figures under `--out`, and prints the table; its last line is
`reproduction claims=<n> within_10pct=<k>`. A claim outside +-10 % prints the measured cause
beside it (a figure the simulator computes, not a guess).

How each claim is measured, and the sentence it rests on, is in docs/serving.md.
"""
import dataclasses
import math

from .config import load_serving_config
from .figures import fig8_tpot, fig9_ablation, fig11_breakdown, fig12_saturation, fig13_link
from .gpu_model import GpuModel
from .sweep import DEVICES, LADDER_GB_S, LATENCY_NS, points, sweep, write_csv

SHORT, LONG = "uniform", "uniform-long"
MODELS = ("llama2-7b", "llama2-13b")
ABLATION_WORKLOADS = ("lmsys", "uniform", "skewed", "uniform-long", "skewed-long")
FIG8_SYSTEMS = ("plora", "plora-nocxl", "grace-hopper", "pure-cxl", "s-lora", "cpu-lora-offload")


@dataclasses.dataclass
class Claim:
    what: str
    paper: float
    sim: float
    unit: str = ""
    why: str = ""                # the measured cause of a miss

    @property
    def ratio(self):
        return self.sim / self.paper if self.paper else math.nan

    @property
    def within(self):
        return abs(self.ratio - 1) <= 0.10


def plateau(rows):
    return max(r["full_batch_tok_s"] for r in rows)


def saturation_gb_s(rows):
    """The smallest ladder point within 1 % of the plateau (section VIII, Finding 5)."""
    top = plateau(rows)
    return min(r["link_gb_s"] for r in rows if r["full_batch_tok_s"] >= 0.99 * top)


def knee(rows):
    """The smallest device count within 5 % of the best (this project's reading of 'knee')."""
    top = max(r["full_batch_tok_s"] for r in rows)
    return min(r["num_devices"] for r in rows if r["full_batch_tok_s"] >= 0.95 * top)


def _select(rows, **match):
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


def run_sweeps(base, requests, address, workers, out):
    """Every sweep of the table: {name: rows}; each written to out/<name>.csv."""
    base = base.with_(requests=requests)
    grids = {
        "ladder": (base, dict(model=list(MODELS), workload=[SHORT, LONG], system=["plora", "plora-nocxl"],
                              link_gb_s=list(LADDER_GB_S))),
        "ablation": (base, dict(workload=list(ABLATION_WORKLOADS), system=["plora", "ns", "nd-e3", "nd-e4",
                                                                           "n-e3", "n-e4", "pure-cxl"])),
        "devices": (base, dict(workload=[SHORT, LONG], link_gb_s=[128, 450], devices=list(DEVICES))),
        "latency": (base, dict(workload=[SHORT, LONG], latency_ns=[0, *LATENCY_NS])),
        "systems": (base, dict(model=list(MODELS), workload=["lmsys", SHORT, LONG], system=list(FIG8_SYSTEMS))),
    }
    labelled = [(name, labels, cfg) for name, (b, grid) in grids.items() for labels, cfg in points(b, grid)]
    summaries = sweep([cfg for _, _, cfg in labelled], address=address, workers=workers, desc="reproduce")
    results = {name: [] for name in grids}
    for (name, labels, _), summary in zip(labelled, summaries):
        results[name].append(dict(summary, **{f"axis_{k}": v for k, v in labels.items()}))
    for name, rows in results.items():
        write_csv(rows, out / f"{name}.csv")
    return results


def claims(results, base):
    ladder, ablation = results["ladder"], results["ablation"]
    devices, latency = results["devices"], results["latency"]
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
        why = (f"the HBM floor here is {floor_ms:.2f} ms ({load_model_params(model):.2f}B parameters at "
               f"3350 GB/s; the paper streams {step_ms * 3.35:.0f} GB)")
        out.append(Claim(f"{model} short decode step at batch 32 (plateau)", step_ms, step, "ms", why))
        out.append(Claim(f"{model} short plateau", tok_s, top, "tok/s", why))
        out.append(Claim(f"{model} short plateau / HBM floor", 1.0, step / floor_ms, "x",
                         f"the step adds {step - floor_ms:.3f} ms to the floor"))
    for model, tok_s in (("llama2-7b", 3461), ("llama2-13b", 2092)):
        rows = _select(ladder, model=model, workload=LONG, system="plora")
        top = plateau(rows)
        best = max(rows, key=lambda r: r["full_batch_tok_s"])
        why = (f"at the plateau one layer is {best['layer_gemm_us']:.0f} us GEMMs + {best['layer_attention_us']:.0f} us "
               f"attention + {best['layer_lora_us']:.0f} us LoRA; Table VII's long lengths are not in the text "
               f"(ours: docs/workloads.md)")
        out.append(Claim(f"{model} long plateau", tok_s, top, "tok/s", why))
    for model in MODELS:
        for workload, gbs in ((SHORT, 32), (LONG, 64)):
            rows = _select(ladder, model=model, workload=workload, system="plora")
            sat = saturation_gb_s(rows)
            curve = ", ".join(f"{r['link_gb_s']:.0f}:{r['full_batch_tok_s']:.0f}" for r in sorted(rows, key=lambda r: r['link_gb_s']))
            out.append(Claim(f"{model} {workload} saturation bandwidth", gbs, sat, "GB/s", f"tok/s by GB/s: {curve}"))
    ratios = []
    for model in MODELS:
        for workload in (SHORT, LONG):
            p = {r["link_gb_s"]: r["full_batch_tok_s"] for r in _select(ladder, model=model, workload=workload, system="plora")}
            n = {r["link_gb_s"]: r["full_batch_tok_s"] for r in _select(ladder, model=model, workload=workload,
                                                                        system="plora-nocxl")}
            ratios += [p[g] / n[g] for g in p]
    why = "the NoCXL step is PLoRA's plus a kernel launch per adapter, site and layer (5 us each)"
    out.append(Claim("PLoRA over PLoRA-NoCXL, least across the ladder", 4.0, min(ratios), "x", why))
    out.append(Claim("PLoRA over PLoRA-NoCXL, most across the ladder", 11.1, max(ratios), "x", why))
    # VII-D: ablations, averaged over the workloads
    def lead(system):
        by = {r["workload"]: r["throughput_tok_s"] for r in _select(ablation, system="plora")}
        them = {r["workload"]: r["throughput_tok_s"] for r in _select(ablation, system=system)}
        each = {w: by[w] / them[w] for w in by}
        return sum(each.values()) / len(each), each
    for system, paper, label in (("ns", 3.8, "NSD over NS"), ("nd-e3", 1.30, "NSD over ND(E3)"),
                                 ("nd-e4", 1.10, "NSD over ND(E4)"), ("n-e3", 4.0, "NSD over N(E3)"),
                                 ("n-e4", 3.8, "NSD over N(E4)")):
        avg, each = lead(system)
        out.append(Claim(f"{label}, mean over the workloads", paper, avg, "x",
                         "per workload: " + ", ".join(f"{w} {v:.2f}" for w, v in each.items())))
    # Finding 3: the device-count knee and the fall past 32
    for workload, paper_knee, paper_fall in ((SHORT, 4, -0.38), (LONG, 16, -0.25)):
        rows = _select(devices, workload=workload, link_gb_s=128.0)
        curve = ", ".join(f"{r['num_devices']}:{r['full_batch_tok_s']:.0f}" for r in sorted(rows, key=lambda r: r['num_devices']))
        out.append(Claim(f"{workload} device-count knee at 128 GB/s", paper_knee, knee(rows), "devices", curve))
        top = max(r["full_batch_tok_s"] for r in rows)
        at64 = _select(rows, num_devices=64)[0]
        fall = at64["full_batch_tok_s"] / top - 1
        out.append(Claim(f"{workload} throughput at 64 devices vs the best, 128 GB/s", 1 + paper_fall, 1 + fall, "x",
                         f"link utilization at 64 devices {at64['link_util']:.0%}; {curve}"))
        rows = _select(devices, workload=workload, link_gb_s=450.0)
        top = max(r["full_batch_tok_s"] for r in rows)
        at64 = _select(rows, num_devices=64)[0]
        out.append(Claim(f"{workload} throughput at 64 devices vs the best, 450 GB/s", 1.0,
                         at64["full_batch_tok_s"] / top, "x", ""))
    # Finding 4: latency on long KV
    rows = {r["link_latency_ns"]: r["full_batch_tok_s"] for r in _select(latency, workload=LONG)}
    for ns, paper in ((200, 0.3), (2000, 2.6)):
        loss = 100 * (1 - rows[ns] / rows[0.0])
        out.append(Claim(f"long-KV throughput lost to {ns} ns one-way latency (vs 0 ns)", paper, loss, "%",
                         "two round trips per layer, on the critical path when the devices bound the step"))
    return out


def load_model_params(model):
    from isa.system import load_model
    return load_model(model).params / 1e9


def print_table(table, echo=print):
    echo(f"{'claim':64s} {'paper':>10s} {'sim':>10s} {'ratio':>7s}  verdict")
    for c in table:
        verdict = "within 10%" if c.within else f"miss: {c.why}"
        echo(f"{c.what:64s} {c.paper:10.3g} {c.sim:10.3g} {c.ratio:7.3f}  {verdict} [{c.unit}]")
    echo(f"reproduction claims={len(table)} within_10pct={sum(c.within for c in table)}")


def reproduce(out, requests=128, address=None, workers=None, echo=print):
    base = load_serving_config("default")
    results = run_sweeps(base, requests, address, workers, out)
    table = claims(results, base)
    figures(results, out)
    print_table(table, echo)
    return table


def figures(results, out):
    fig8_tpot(results["systems"], out / "fig8_tpot.png")
    fig9_ablation([r for r in results["ablation"] if r["system"] in ("plora", "ns", "nd-e3", "nd-e4", "n-e3", "n-e4")],
                  out / "fig9_ablation.png")
    breakdown = [dict(r, breakdown=True) for r in results["ablation"]
                 if r["workload"] == "uniform-long" and r["system"] in ("pure-cxl", "n-e3", "nd-e3", "plora")]
    kv = [dict(r, kv_panel=True) for r in results["systems"] if r["system"] == "plora"]
    fig11_breakdown(breakdown + kv, out / "fig11_breakdown.png")
    sat = [(m, w, saturation_gb_s(_select(results["ladder"], model=m, workload=w, system="plora")))
           for m in MODELS for w in (SHORT, LONG)]
    fig12_saturation(sat, out / "fig12_saturation.png")
    fig13_link(results["ladder"], results["devices"], results["latency"], out / "fig13_link.png")
