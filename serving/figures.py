"""Figures shaped like seed 000's Figs. 8, 9, 11, 12 and 13, from sweep rows (the summaries
`serving.sweep` returns, or the CSVs it writes), and any sweep's results (`plora sweep
--plot`, sweep_plot). Each function writes one image (PNG unless the path names another
format) and returns its path; none runs a simulation.
"""
import collections
import pathlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.axis import Axis  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.legend import Legend  # noqa: E402

Row = Mapping[str, Any]         # a sweep's summary (serving.results.RunResult.summary), with its labels
Path = str | pathlib.Path

LABELS = {"plora": "PLoRA (NSD)", "plora-nocxl": "PLoRA-NoCXL", "grace-hopper": "Grace-Hopper",
          "pure-cxl": "Pure CXL", "s-lora": "S-LoRA", "cpu-lora-offload": "CPU-LoRA-Offload",
          "ns": "NS", "nd-e3": "ND(E3)", "nd-e4": "ND(E4)", "n-e3": "N(E3)", "n-e4": "N(E4)"}


def _save(fig: Figure, path: Path, rect: tuple[float, float, float, float] = (0, 0, 1, 1)) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=120, bbox_inches="tight")       # legends outside the panels stay in the image
    plt.close(fig)
    return path


def setup_text(rows: Sequence[Row]) -> str:
    """What every row shares of the hardware, for a figure's title: the GPU, the link (when one
    link served every row), the devices and the batch (`h100, cxl3.1 128 GB/s, 4 x paper
    devices, batch 32`)."""
    def shared(key: str) -> str | None:
        values = {str(r[key]) for r in rows if key in r}
        return values.pop() if len(values) == 1 else None
    parts = []
    if shared("gpu"):
        parts.append(f"GPU {shared('gpu')}")
    if shared("link"):
        gbs = shared("link_gb_s")
        parts.append(f"link {shared('link')}" + (f" {float(gbs):g} GB/s" if gbs else ""))
    if shared("device"):
        n = shared("num_devices")
        parts.append(f"{n} x {shared('device')} devices" if n else f"{shared('device')} devices")
    if shared("max_batch"):
        parts.append(f"batch {shared('max_batch')}")
    return ", ".join(parts)


def _legend_right(ax: Axes, **kwargs: Any) -> Legend:
    """The axes' legend right of it, clear of the data."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False,
                     fontsize=8, **kwargs)


def _legend_below(ax: Axes, ncol: int = 2) -> Legend:
    """The axes' legend under its x label, clear of the data."""
    return ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), borderaxespad=0.0, frameon=False,
                     fontsize=7, ncol=ncol)


def _grouped_bars(ax: Axes, rows: Sequence[Row], group: str, series: str, value: str, log: bool = False,
                  names: Iterable[str] | None = None, colors: Mapping[str, Any] | None = None) -> None:
    """Bars of `value` per `group` (x) and `series` (a bar each); `names` fixes the series and
    their order (a series with no row leaves its slot empty), `colors` their colors."""
    groups = list(dict.fromkeys(r[group] for r in rows))
    order = list(names or dict.fromkeys(r[series] for r in rows))
    table = {(r[group], r[series]): r[value] for r in rows}
    width = 0.8 / max(1, len(order))
    for i, name in enumerate(order):
        xs = [g + (i - (len(order) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [table.get((g, name), float("nan")) for g in groups], width, label=LABELS.get(name, name),
               **({"color": colors[name]} if colors else {}))
    ax.set_xticks(range(len(groups)), groups, rotation=20)
    if log:
        ax.set_yscale("log")


def _plain_log_ticks(axis: Axis, minor: bool = True) -> None:
    """A log axis's ticks as plain numbers (5, 10, 20, 50), never 6x10^0."""
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
        lambda v, _: f"{v:g}" if minor and f"{v:g}"[0] in "235" else ""))


def fig8_tpot(rows: Sequence[Row], path: Path) -> pathlib.Path:
    """Fig. 8: TPOT of every system per workload, a panel per model, lettered (a), (b), ...,
    one legend for all above the panels (a system a panel lacks, S-LoRA beyond the Llama2
    models as in the paper, leaves its slot empty and is named in the panel's title, "not
    run")."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    names = list(dict.fromkeys(r["system"] for r in rows))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {n: cycle[i % len(cycle)] for i, n in enumerate(names)}
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 4.6), squeeze=False)
    for i, (ax, model) in enumerate(zip(axes[0], models, strict=True)):
        mine = [r for r in rows if r["model"] == model]
        _grouped_bars(ax, mine, "workload", "system", "tpot_ms", log=True, names=names, colors=colors)
        _plain_log_ticks(ax.yaxis)
        ax.tick_params(axis="y", which="minor", labelsize=7)
        missing = [LABELS.get(n, n) for n in names if not any(r["system"] == n for r in mine)]
        ax.set_title(f"({chr(ord('a') + i)}) {model}" + (f"\n(not run: {', '.join(missing)})" if missing else ""),
                     fontsize=10)
        ax.set_xlabel("workload")
    axes[0][0].set_ylabel("TPOT (ms, log scale; lower is better)")
    handles = [matplotlib.patches.Patch(color=colors[n], label=LABELS.get(n, n)) for n in names]
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.94), ncol=len(names), fontsize=8,
               frameon=False)
    fig.suptitle(f"Fig. 8: time per output token by system; {setup_text(rows)}", fontsize=10, y=0.99)
    return _save(fig, path, rect=(0, 0, 1, 0.9))


def fig9_ablation(rows: Sequence[Row], path: Path) -> pathlib.Path:
    """Fig. 9: end-to-end throughput of each ablation over NSD's, per workload."""
    base = {r["workload"]: r["throughput_tok_s"] for r in rows if r["system"] == "plora"}
    norm = [dict(r, speed=r["throughput_tok_s"] / base[r["workload"]]) for r in rows if r["workload"] in base]
    fig, ax = plt.subplots(figsize=(8.4, 3.8))
    _grouped_bars(ax, norm, "workload", "system", "speed")
    ax.axhline(1.0, color="0.3", lw=0.8, ls="--")
    ax.set_xlabel("workload")
    ax.set_ylabel("throughput / NSD's (x)\nhigher is better")
    _legend_right(ax, title="system")
    ax.set_title(f"Fig. 9: ablations; {setup_text(rows)}", fontsize=10)
    return _save(fig, path)


def fig11_breakdown(rows: Sequence[Row], path: Path) -> pathlib.Path:
    """Fig. 11: (a) one layer's decode latency by component per system; (b) KV duplicated on
    the GPU per model and workload (PLoRA)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 3.9))
    parts = (("layer_gemm_us", "base GEMMs"), ("layer_lora_us", "LoRA"), ("layer_attention_us", "attention"),
             ("layer_launch_us", "launches"))
    systems = [r for r in rows if r.get("breakdown")]
    bottom = [0.0] * len(systems)
    for key, label in parts:
        values = [r[key] for r in systems]
        a.bar(range(len(systems)), values, bottom=bottom, label=label)
        bottom = [x + y for x, y in zip(bottom, values, strict=True)]
    a.set_xticks(range(len(systems)), [LABELS.get(r["system"], r["system"]) for r in systems], rotation=20)
    a.set_ylim(0, 1.08 * max(bottom, default=1.0))
    a.set_xlabel("system" + (f" ({systems[0]['workload']}, {systems[0]['model']})" if systems else ""))
    a.set_ylabel("one decode layer (µs)\nlower is better")
    a.set_title("(a) a layer's decode time by component", fontsize=10)
    _legend_right(a)
    kv = [r for r in rows if r["system"] == "plora" and r.get("kv_panel")]
    _grouped_bars(b, [dict(r, kv_pct=100 * r["kv_dup_frac"]) for r in kv], "workload", "model", "kv_pct")
    b.set_xlabel("workload")
    b.set_ylabel("KV duplicated on the GPU (%)\n(PLoRA; a share, not a score)")
    b.set_ylim(0, 105)
    b.set_title("(b) the KV the GPU duplicates", fontsize=10)
    _legend_right(b, title="model")
    fig.suptitle(f"Fig. 11: decode breakdown; {setup_text(rows)}", fontsize=10)
    return _save(fig, path)


def fig12_saturation(saturation: Iterable[tuple[str, str, float]], path: Path, setup: str = "") -> pathlib.Path:
    """Fig. 12: the saturation bandwidth (smallest ladder point within 1 % of the plateau) per
    model, short and long KV. `saturation`: [(model, workload, GB/s)]; `setup`: the
    hardware for the title (setup_text of the ladder's rows)."""
    fig, ax = plt.subplots(figsize=(7, 3.8))
    _grouped_bars(ax, [dict(model=m, workload=w, gbs=g) for m, w, g in saturation], "model", "workload", "gbs")
    for patch in ax.patches:
        bar = cast(matplotlib.patches.Rectangle, patch)     # _grouped_bars' bars
        ax.annotate(f"{bar.get_height():g}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_xlabel("model")
    ax.set_ylabel("saturation bandwidth (GB/s)\nlower is better: a slower link suffices")
    _legend_right(ax, title="workload")
    ax.set_title("Fig. 12: the link past which PLoRA's throughput stops growing" + (f"\n{setup}" if setup else ""),
                 fontsize=10)
    return _save(fig, path)


_STYLES = ("-", "--", ":", "-.")


def _curves(ax: Axes, rows: Sequence[Row], x: str, key: Callable[[Row], str], log_x: bool = True) -> None:
    """Throughput over `x`, a line per `key(row)`; lines that coincide told apart by their
    dash and marker."""
    series: dict[str, list[tuple[Any, Any]]] = collections.defaultdict(list)
    for r in rows:
        series[key(r)].append((r[x], r["throughput_tok_s"]))
    for i, (name, points) in enumerate(series.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="os^vD"[i // len(_STYLES) % 5], ms=3,
                ls=_STYLES[i % len(_STYLES)], label=name)
    if log_x:
        ax.set_xscale("log")
        ticks = sorted({r[x] for r in rows})
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks], fontsize=8)
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_ylabel("throughput (tokens/s)\nhigher is better")
    ax.set_ylim(0, None)
    ax.grid(True, lw=0.3, alpha=0.5)


def fig13_link(ladder: Sequence[Row], devices: Sequence[Row], latency: Sequence[Row], path: Path) -> pathlib.Path:
    """Fig. 13: (a) throughput over the link ladder; (b) over the device count at two links;
    (c) over the one-way latency; each panel's legend under it."""
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(16, 4.4))
    _curves(a, ladder, "link_gb_s",
            lambda r: f"{LABELS.get(r['system'], r['system'])} {r['model']} {r['workload']}")
    a.set_xlabel("link bandwidth (GB/s)")
    a.set_title("(a) link ladder", fontsize=10)
    _curves(b, devices, "num_devices", lambda r: f"{r['workload']} @ {r['link_gb_s']:.0f} GB/s", log_x=True)
    b.set_xlabel("devices (count)")
    b.set_title("(b) pool size (PLoRA)", fontsize=10)
    _curves(c, latency, "link_latency_ns", lambda r: r["workload"], log_x=False)
    c.set_xlabel("one-way link latency (ns)")
    c.set_title("(c) link latency (PLoRA)", fontsize=10)
    for ax in (a, b, c):
        _legend_below(ax)
    fig.suptitle(f"Fig. 13: throughput over the link and the pool; {setup_text([*ladder, *devices, *latency])}",
                 fontsize=10)
    return _save(fig, path)


# ---- any sweep (plora sweep --plot) --------------------------------------------------------

AXIS_LABELS = {"link_gb_s": "link bandwidth (GB/s)", "latency_ns": "one-way link latency (ns)",
               "devices": "devices (count)", "batch": "max batch (requests)"}
SWEEP_METRICS = (("throughput_tok_s", 1, "throughput (tokens/s)\nhigher is better"),
                 ("tpot_ms", 1, "TPOT (ms)\nlower is better"),
                 ("link_util", 100, "link utilization (%)\nbusier direction"))


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def axis_label(axis: str) -> str:
    """An axis's name with its unit: the sweep's own axes, a run field by its name's unit
    suffix (`max_prefill_tokens` -> tokens), else the name."""
    if axis in AXIS_LABELS:
        return AXIS_LABELS[axis]
    for suffix, unit in (("_bytes_per_s", "B/s"), ("_s", "s"), ("_tokens", "tokens"), ("_bytes", "bytes")):
        if axis.endswith(suffix):
            return f"{axis} ({unit})"
    return {"requests": "requests (count)", "num_devices": "devices (count)",
            "max_batch": "max batch (requests)", "seed": "seed"}.get(axis, axis)


def sweep_plot(rows: Sequence[Row], axes: Iterable[str], path: Path) -> pathlib.Path:
    """A sweep's results: throughput, TPOT and link utilization (a panel each) over the first
    axis whose values are all numbers (log scale when they span 10x or more), a line per
    combination of the other axes' values; with no numeric axis, bars per value of the first
    axis. `rows` are the sweep's summaries with their `axis_<name>` labels, `axes` the axis
    names in the order given. The fields every point shares (system, model, workload, GPU,
    link, devices) title it; the legend sits right of the panels."""
    names_of_axes = list(axes)
    numeric = [a for a in names_of_axes if all(_is_number(r[f"axis_{a}"]) for r in rows)]
    x_axis = numeric[0] if numeric else names_of_axes[0]
    others = [a for a in names_of_axes if a != x_axis]

    def series_of(r: Row) -> str:
        return ", ".join(f"{a}={LABELS.get(r[f'axis_{a}'], r[f'axis_{a}'])}" for a in others) or "all"

    names = list(dict.fromkeys(series_of(r) for r in rows))
    legend = len(names) > 1
    fig, panel_grid = plt.subplots(1, len(SWEEP_METRICS), figsize=(4.2 * len(SWEEP_METRICS) + 2.4 * legend, 3.8),
                                   squeeze=False)
    panels = panel_grid[0]
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {n: cycle[i % len(cycle)] for i, n in enumerate(names)}
    for letter, ax, (key, scale, ylabel) in zip("abc", panels, SWEEP_METRICS, strict=True):
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
        ax.set_title(f"({letter}) {ylabel.split(' (')[0]}", fontsize=10)
        ax.grid(True, lw=0.3, alpha=0.5)
    shared: list[Any] = [LABELS.get(rows[0][k], rows[0][k]) for k in ("system", "model") if k in rows[0]
                         and len({str(r[k]) for r in rows}) == 1]
    if "workload" in rows[0] and len({str(r["workload"]) for r in rows}) == 1:
        shared.append(f"{rows[0]['workload']} workload")
    setup = setup_text(rows)
    lines = f", a line per {' and '.join(others)}" if numeric and others else ""
    fig.suptitle(f"over {axis_label(x_axis)}{lines}; " + ", ".join(shared + ([setup] if setup else [])),
                 fontsize=10)
    if legend:
        handles = [matplotlib.patches.Patch(color=colors[n], label=n) for n in names]
        fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1 - 2.3 / fig.get_figwidth(), 0.5),
                   fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1 - 2.4 * legend / fig.get_figwidth(), 0.94))
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
