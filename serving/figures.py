"""Figures shaped like seed 000's Figs. 8, 9, 11, 12 and 13, from sweep rows (the summaries
`serving.sweep` returns, or the CSVs it writes), and any sweep's results (`plora sweep
--plot`, sweep_plot). Each function writes one image (PNG unless the path names another
format) and returns its path; none runs a simulation.
"""
import collections
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches  # noqa: E402
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

LABELS = {"plora": "PLoRA (NSD)", "plora-nocxl": "PLoRA-NoCXL", "grace-hopper": "Grace-Hopper",
          "pure-cxl": "Pure CXL", "s-lora": "S-LoRA", "cpu-lora-offload": "CPU-LoRA-Offload",
          "ns": "NS", "nd-e3": "ND(E3)", "nd-e4": "ND(E4)", "n-e3": "N(E3)", "n-e4": "N(E4)"}


def _save(fig, path):
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _grouped_bars(ax, rows, group, series, value, log=False, names=None, colors=None):
    """Bars of `value` per `group` (x) and `series` (a bar each); `names` fixes the series and
    their order (a series with no row leaves its slot empty), `colors` their colors."""
    groups = list(dict.fromkeys(r[group] for r in rows))
    names = list(names or dict.fromkeys(r[series] for r in rows))
    table = {(r[group], r[series]): r[value] for r in rows}
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        xs = [g + (i - (len(names) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [table.get((g, name), float("nan")) for g in groups], width, label=LABELS.get(name, name),
               **({"color": colors[name]} if colors else {}))
    ax.set_xticks(range(len(groups)), groups, rotation=20)
    if log:
        ax.set_yscale("log")


def fig8_tpot(rows, path):
    """Fig. 8: TPOT of every system per workload, a panel per model, one legend for all above
    the panels (a system a panel lacks, S-LoRA beyond the Llama2 models as in the paper, leaves
    its slot empty and is named in the panel's title, "not run")."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    names = list(dict.fromkeys(r["system"] for r in rows))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {n: cycle[i % len(cycle)] for i, n in enumerate(names)}
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 4.2), squeeze=False)
    for ax, model in zip(axes[0], models):
        mine = [r for r in rows if r["model"] == model]
        _grouped_bars(ax, mine, "workload", "system", "tpot_ms", log=True, names=names, colors=colors)
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
            lambda v, _: f"{v:g}" if f"{v:g}"[0] in "235" else ""))
        ax.tick_params(axis="y", which="minor", labelsize=7)
        missing = [LABELS.get(n, n) for n in names if not any(r["system"] == n for r in mine)]
        ax.set_title(model + (f"\n(not run: {', '.join(missing)})" if missing else ""), fontsize=10)
    axes[0][0].set_ylabel("TPOT (ms, log scale; lower is better)")
    handles = [matplotlib.patches.Patch(color=colors[n], label=LABELS.get(n, n)) for n in names]
    fig.legend(handles=handles, loc="upper center", ncol=len(names), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def fig9_ablation(rows, path):
    """Fig. 9: throughput of each ablation over NSD's, per workload."""
    base = {r["workload"]: r["throughput_tok_s"] for r in rows if r["system"] == "plora"}
    norm = [dict(r, speed=r["throughput_tok_s"] / base[r["workload"]]) for r in rows if r["workload"] in base]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    _grouped_bars(ax, norm, "workload", "system", "speed")
    ax.set_ylabel("throughput / NSD")
    ax.legend(fontsize=7)
    return _save(fig, path)


def fig11_breakdown(rows, path):
    """Fig. 11: (a) one layer's decode latency by component per system; (b) KV duplicated on
    the GPU per model and workload (PLoRA)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    parts = (("layer_gemm_us", "base GEMMs"), ("layer_lora_us", "LoRA"), ("layer_attention_us", "attention"),
             ("layer_launch_us", "launches"))
    systems = [r for r in rows if r.get("breakdown")]
    bottom = [0.0] * len(systems)
    for key, label in parts:
        values = [r[key] for r in systems]
        a.bar(range(len(systems)), values, bottom=bottom, label=label)
        bottom = [x + y for x, y in zip(bottom, values)]
    a.set_xticks(range(len(systems)), [LABELS.get(r["system"], r["system"]) for r in systems], rotation=20)
    a.set_ylabel("one layer (us)")
    a.legend(fontsize=7)
    kv = [r for r in rows if r["system"] == "plora" and r.get("kv_panel")]
    _grouped_bars(b, [dict(r, kv_pct=100 * r["kv_dup_frac"]) for r in kv], "workload", "model", "kv_pct")
    b.set_ylabel("KV duplicated on the GPU (%)")
    b.legend(fontsize=7)
    return _save(fig, path)


def fig12_saturation(saturation, path):
    """Fig. 12: the saturation bandwidth (smallest ladder point within 1 % of the plateau) per
    model, short and long KV. `saturation`: [(model, workload, GB/s)]."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    _grouped_bars(ax, [dict(model=m, workload=w, gbs=g) for m, w, g in saturation], "model", "workload", "gbs")
    ax.set_ylabel("saturation bandwidth (GB/s)")
    ax.legend(fontsize=7)
    return _save(fig, path)


def _curves(ax, rows, x, key, log_x=True):
    series = collections.defaultdict(list)
    for r in rows:
        series[key(r)].append((r[x], r["throughput_tok_s"]))
    for name, points in series.items():
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", ms=3, label=name)
    if log_x:
        ax.set_xscale("log")
    ax.set_ylabel("tokens/s")
    ax.legend(fontsize=6)


def fig13_link(ladder, devices, latency, path):
    """Fig. 13: (a) throughput over the link ladder; (c) over the device count at two links;
    (d) over the one-way latency."""
    fig, (a, c, d) = plt.subplots(1, 3, figsize=(15, 3.8))
    _curves(a, ladder, "link_gb_s", lambda r: f"{LABELS.get(r['system'], r['system'])} {r['model']} {r['workload']}")
    a.set_xlabel("link bandwidth (GB/s)")
    a.set_title("(a) link ladder")
    _curves(c, devices, "num_devices", lambda r: f"{r['workload']} @ {r['link_gb_s']:.0f} GB/s", log_x=True)
    c.set_xlabel("devices")
    c.set_title("(c) pool size")
    _curves(d, latency, "link_latency_ns", lambda r: r["workload"], log_x=False)
    d.set_xlabel("one-way link latency (ns)")
    d.set_title("(d) link latency")
    return _save(fig, path)


# ---- any sweep (plora sweep --plot) --------------------------------------------------------

AXIS_LABELS = {"link_gb_s": "link bandwidth (GB/s)", "latency_ns": "one-way link latency (ns)",
               "devices": "devices (count)", "batch": "max batch (requests)"}
SWEEP_METRICS = (("throughput_tok_s", 1, "throughput (tokens/s)\nhigher is better"),
                 ("tpot_ms", 1, "TPOT (ms)\nlower is better"),
                 ("link_util", 100, "link utilization (%)\nbusier direction"))


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def axis_label(axis):
    """An axis's name with its unit: the sweep's own axes, a run field by its name's unit
    suffix (`max_prefill_tokens` -> tokens), else the name."""
    if axis in AXIS_LABELS:
        return AXIS_LABELS[axis]
    for suffix, unit in (("_bytes_per_s", "B/s"), ("_s", "s"), ("_tokens", "tokens"), ("_bytes", "bytes")):
        if axis.endswith(suffix):
            return f"{axis} ({unit})"
    return {"requests": "requests (count)", "num_devices": "devices (count)",
            "max_batch": "max batch (requests)", "seed": "seed"}.get(axis, axis)


def sweep_plot(rows, axes, path):
    """A sweep's results: throughput, TPOT and link utilization (a panel each) over the first
    axis whose values are all numbers (log scale when they span 10x or more), a line per
    combination of the other axes' values; with no numeric axis, bars per value of the first
    axis. `rows` are the sweep's summaries with their `axis_<name>` labels, `axes` the axis
    names in the order given. The fields every point shares (system, model, workload, GPU,
    link, devices) title it; the legend sits right of the panels."""
    axes = list(axes)
    numeric = [a for a in axes if all(_is_number(r[f"axis_{a}"]) for r in rows)]
    x_axis = numeric[0] if numeric else axes[0]
    others = [a for a in axes if a != x_axis]

    def series_of(r):
        return ", ".join(f"{a}={LABELS.get(r[f'axis_{a}'], r[f'axis_{a}'])}" for a in others) or "all"

    names = list(dict.fromkeys(series_of(r) for r in rows))
    legend = len(names) > 1
    fig, panels = plt.subplots(1, len(SWEEP_METRICS), figsize=(4.2 * len(SWEEP_METRICS) + 2.4 * legend, 3.8),
                               squeeze=False)
    panels = panels[0]
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {n: cycle[i % len(cycle)] for i, n in enumerate(names)}
    for ax, (key, scale, ylabel) in zip(panels, SWEEP_METRICS):
        if numeric:
            for name in names:
                points = sorted((r[f"axis_{x_axis}"], r[key] * scale) for r in rows if series_of(r) == name)
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", ms=4, color=colors[name])
            xs = [r[f"axis_{x_axis}"] for r in rows]
            if min(xs) > 0 and max(xs) >= 10 * min(xs):
                ax.set_xscale("log")
                ticks = sorted(set(xs))
                ax.set_xticks(ticks, [f"{t:g}" for t in ticks], rotation=45 if len(ticks) > 6 else 0)
                ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        else:
            scaled = [dict(r, _x=str(r[f"axis_{x_axis}"]), _series=series_of(r), _y=r[key] * scale) for r in rows]
            _grouped_bars(ax, scaled, "_x", "_series", "_y", names=names, colors=colors)
        ax.set_xlabel(axis_label(x_axis))
        ax.set_ylabel(ylabel)
        ax.set_ylim(*((0, 105) if key == "link_util" else (0, None)))
        ax.grid(True, lw=0.3, alpha=0.5)
    shared = [f"{k} {LABELS.get(rows[0][k], rows[0][k])}" for k in ("system", "model", "workload", "gpu", "link",
                                                                     "num_devices")
              if k in rows[0] and len({str(r[k]) for r in rows}) == 1]
    fig.suptitle(f"sweep over {', '.join(axes)}" + (f"; {', '.join(shared)}" if shared else ""), fontsize=10)
    if legend:
        handles = [matplotlib.patches.Patch(color=colors[n], label=n) for n in names]
        fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1 - 2.3 / fig.get_figwidth(), 0.5),
                   fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1 - 2.4 * legend / fig.get_figwidth(), 0.94))
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
