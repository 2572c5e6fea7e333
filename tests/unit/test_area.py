"""area/: the cell library, the hierarchical synthesis, the scaling fit, the SRAM model,
the activity counts and the report's arithmetic (issue 13)."""
import dataclasses
import math

import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

import isa
from area import blocks, cells, power, report, sram
from area.synth import synthesize, totals
from hw import depth
from hw.fp import FP32AddPipe
from hw.line_packer import packer_muxes
from hw.operand_select import select_muxes


def test_cell_areas_are_the_quoted_lef_sizes():
    # issue 13 quotes these three from the Nangate45 LEF
    assert cells.area("NAND2_X1") == 0.798
    assert cells.area("DFF_X1") == 4.522
    assert cells.area("FA_X1") == 4.256
    assert "DFF_X1" in cells.liberty() and "XOR2_X1" in cells.liberty()


def test_adder_maps_onto_the_library_with_its_pipeline_registers(tmp_path):
    result = synthesize(FP32AddPipe(), "fp32_add_pipe", out_dir=tmp_path)
    row = result["modules"]["fp32_add_pipe"]
    # the area is the cells' sum (synthesize checks it against yosys' stat)
    assert abs(row["area_um2"] - sum(n * cells.area(k) for k, n in row["cells"].items())) < 1e-6
    # the same registers as the generic-gate synthesis of hw/depth.py (another flow), and
    # its deepest stage within a few levels of that flow's (choices, dch, map a little shallower)
    generic = depth.measure("FP32AddPipe", FP32AddPipe, 3, out_dir=tmp_path / "depth")
    assert row["flops"] == generic["flops"]
    assert abs(row["path"]["levels"] - max(generic["per_stage"])) <= 6
    assert row["flops"] * cells.area("DFF_X1") < row["area_um2"]
    assert row["transistors"] > 4 * sum(n for k, n in row["cells"].items() if k != "DFF_X1")
    assert row["memories"] == []


class Buffer(wiring.Component):
    """256 words of 32 bits, one write and one synchronous read port."""
    addr: In(8)
    data: In(32)
    we: In(1)
    out: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=32, depth=256, init=[])
        w, r = mem.write_port(), mem.read_port()
        m.d.comb += [w.addr.eq(self.addr), w.data.eq(self.data), w.en.eq(self.we),
                     r.addr.eq(self.addr), self.out.eq(r.data)]
        return m


def test_memories_stay_out_of_the_logic_and_match_the_elaborated_list(tmp_path):
    result = synthesize(Buffer(), "buffer", out_dir=tmp_path)
    row = result["modules"]["buffer"]
    expected = {"width": 32, "depth": 256, "bits": 8192, "read_ports": 1, "write_ports": 1}
    assert [{k: m[k] for k in expected} for m in row["memories"]] == [expected]
    assert row["flops"] < 64         # not 8192 flip-flops
    # the SRAM model reads the same memory from the design itself
    assert [{k: m[k] for k in expected} for m in sram.memories_of(Buffer())] == [expected]


class TwoAdders(wiring.Component):
    """Two shared FP32 adder cells (hw/fp_cells.py) and a register."""
    a: In(32)
    b: In(32)
    s: Out(32)

    def elaborate(self, platform):
        from hw.fp_cells import add_cell
        m = Module()
        mid, out = Signal(32), Signal(32)
        add_cell(m, "first", "ndp_fp32_add_pipe", True, a=self.a, b=self.b, s=mid)
        add_cell(m, "second", "ndp_fp32_add_pipe", True, a=mid, b=self.b, s=out)
        m.d.sync += self.s.eq(out)
        return m


def test_shared_fp_cells_are_counted_not_synthesized(tmp_path):
    result = synthesize(TwoAdders(), "two_adders", out_dir=tmp_path)
    row = result["modules"]["two_adders"]
    assert row["instances"] == {"ndp_fp32_add_pipe": 2}
    assert row["flops"] == 32


class Adds(wiring.Component):
    """A registered sum of `n` 32-bit inputs."""
    def __init__(self, n):
        self.n = n
        super().__init__({f"x{i}": In(32) for i in range(n)} | {"s": Out(32)})

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.s.eq(sum(getattr(self, f"x{i}") for i in range(self.n))[:32])
        return m


class TwoSums(wiring.Component):
    """A sum of four and a sum of two as submodules, their outputs XORed into a register."""
    a: In(32)
    b: In(32)
    s: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.submodules.four = four = Adds(4)
        m.submodules.two = two = Adds(2)
        for i in range(4):
            m.d.comb += getattr(four, f"x{i}").eq(self.a + i if i % 2 else self.b - i)
        m.d.comb += [two.x0.eq(self.a), two.x1.eq(self.b)]
        m.d.sync += self.s.eq(four.s ^ two.s)
        return m


def test_hierarchy_totals_and_paths(tmp_path):
    result = synthesize(TwoSums(), "two_sums", out_dir=tmp_path)
    mods = result["modules"]
    assert set(mods) == {"two_sums", "two_sums.four", "two_sums.two", "two_sums across blocks"}
    assert mods["two_sums"]["children"] == {"two_sums.four": 1, "two_sums.two": 1}
    top = totals(result)
    assert math.isclose(top["area_um2"], sum(m["area_um2"] for m in mods.values()))
    assert top["flops"] == sum(m["flops"] for m in mods.values())
    assert mods["two_sums.two"]["flops"] == 32 and mods["two_sums"]["flops"] == 32
    # three adds deep are deeper than one; the top's own paths (its adders before the
    # submodules, the XOR after them) stop at the submodules' ports
    assert mods["two_sums.four"]["path"]["levels"] > mods["two_sums.two"]["path"]["levels"] > 4
    assert mods["two_sums"]["path"]["levels"] < mods["two_sums.four"]["path"]["levels"]
    # across the blocks: the top's subtractor before `four` and four's adds, one path
    # (area/flat_timing.py), longer than either block's own; the clock is no logic net
    across = mods["two_sums across blocks"]["path"]
    assert [block for block, _ in across["through"]] == ["two_sums", "four"]
    assert across["levels"] == sum(n for _, n in across["through"])
    assert across["levels"] > mods["two_sums.four"]["path"]["levels"]
    assert "clk" not in across["max_fanout_net"]


def _row(area, flops, levels, fp=None):
    return {"area_um2": area, "own_um2": area / 2, "flops": flops, "transistors": 4 * flops,
            "fp_cells": fp or {}, "levels": levels, "path": {"levels": levels, "start": "", "end": ""},
            "memory_bits": 0}


def test_fit_is_linear_but_for_the_operand_selects_and_the_packer():
    compute = "device.control_unit.compute"
    packer = "device.control_unit.packer"
    selects = [f"{compute}.operand_select{r}" for r in (0, 1)]
    m = {c: select_muxes(32 * c) for c in (1, 2, 16)}
    p = {c: packer_muxes(32 * c) for c in (1, 2, 16)}

    def leaf(area, c):              # all its area its own
        row = _row(area, c, 10)
        row["own_um2"] = row["area_um2"]
        return row

    def select_row(c):              # 2 c + 3 M(32 c)
        return leaf(2 * c + 3 * m[c], c)

    def packer_row(c):              # 5 c + 2 P(32 c)
        return leaf(5 * c + 2 * p[c], c)

    def compute_row(c):             # its own logic 50 c, its selects below it
        row = _row(100.0 * c + 2 * select_row(c)["area_um2"], c, 10)
        row["own_um2"] = 50.0 * c
        return row
    points = {c: {"device": _row(1000.0 * c + 2 * select_row(c)["area_um2"] + packer_row(c)["area_um2"], 10 * c,
                                 20 + 4 * (c - 1), {"ndp_fp16_mul_pipe": 64 * c}),
                  compute: compute_row(c), packer: packer_row(c),
                  "device.writer": _row(10.0 + 13 * (c - 1), 2, 8),
                  **{s: select_row(c) for s in selects}} for c in (1, 2)}
    points[2]["device.interleaver"] = _row(30.0, 6, 10)
    row = blocks.fit(points, 16, 32)
    bar = 2 * 16 + 3 * m[16]
    for s in selects:
        assert math.isclose(row[s]["own_um2"], bar) and math.isclose(row[s]["area_um2"], bar)
        assert row[s]["scaling"] == "linear + operand select M(LANES)"
    assert math.isclose(row[compute]["area_um2"], 100.0 * 16 + 2 * bar)
    assert math.isclose(row[compute]["own_um2"], 50.0 * 16)       # the selects are not its own
    packer_bar = 5 * 16 + 2 * p[16]
    assert math.isclose(row[packer]["area_um2"], packer_bar) and math.isclose(row[packer]["own_um2"], packer_bar)
    assert row[packer]["scaling"] == "linear + packer M(LANES)"
    assert math.isclose(row["device"]["area_um2"], 1000.0 * 16 + 2 * bar + packer_bar)
    assert row["device"]["scaling"] == "linear + operand select M(LANES) + packer M(LANES)"
    assert row["device"]["levels"] == 20 + 4 * 4          # 4 doublings from 1 channel, 4 levels each
    assert row["device"]["fp_cells"] == {"ndp_fp16_mul_pipe": 1024}
    assert math.isclose(row["device.writer"]["area_um2"], 10 + 13 * 15)
    assert row["device.writer"]["scaling"] == "linear"
    # only in the larger variant: in proportion to channels
    assert math.isclose(row["device.interleaver"]["area_um2"], 30 * 8)


def test_variant_keeps_lanes_per_channel_and_everything_else():
    cfg = isa.load_config("paper")
    v = blocks.variant(cfg, 2)
    assert (v.dram_channels, v.lanes) == (2, 2 * cfg.lanes // cfg.dram_channels)
    assert v.softmax_lanes == 2 * cfg.softmax_lanes // cfg.dram_channels
    assert dataclasses.replace(v, dram_channels=cfg.dram_channels, lanes=cfg.lanes,
                               softmax_lanes=cfg.softmax_lanes) == cfg


def test_small_memories_are_flops_and_wide_ones_macros():
    small = {"name": "q.storage", "width": 66, "depth": 20, "bits": 1320, "read_ports": 1, "write_ports": 1}
    row = sram.cost(small)
    assert row["kind"] == "flops"
    assert math.isclose(row["area_mm2"], 1320 * (4.522 + 1.862) / 1e6)
    wide = {"name": "x.compute.in_bank0", "width": 4 * sram.MACRO_WIDTH, "depth": 128,
            "bits": 4 * sram.MACRO_WIDTH * 128, "read_ports": 1, "write_ports": 1}
    one = sram.cacti(128 * sram.MACRO_WIDTH // 8, sram.MACRO_WIDTH, 1, 1)
    row = sram.cost(wide)
    assert (row["kind"], row["macros"], row["buffer"]) == ("sram", 4, "input")
    assert math.isclose(row["area_mm2"], 4 * one["area_mm2"])
    assert math.isclose(row["read_pj"], 4e3 * one["read_nj"])
    # periphery: more than the bitcells alone; more ports, more area
    assert row["area_mm2"] > row["bitcell_mm2"]
    assert sram.cost({**wide, "read_ports": 2})["area_mm2"] > row["area_mm2"]


def test_each_memory_takes_the_lowest_leakage_cells_that_meet_the_clock():
    # a 64 KiB macro: itrs-hp cycles in 0.53 ns, itrs-lop in 1.09 (area/sram.py); a 4 KiB one
    # is fast enough in low-leakage cells; a deep memory may be stacked in banks of macros
    big = {"name": "x.reader.buffer.storage", "width": sram.MACRO_WIDTH, "depth": 1024,
           "bits": sram.MACRO_WIDTH * 1024, "read_ports": 1, "write_ports": 1}
    small = {**big, "depth": 64, "bits": sram.MACRO_WIDTH * 64}
    for memory in (big, small):
        for period in (0.6, 1.0, 2.0):
            row = sram.clocked(memory, period)
            options = {(cell, banks, objective): sram.cost(memory, cell_type=cell, banks=banks, objective=objective)
                       for cell in sram.CELL_TYPES for banks in sram.BANKS for objective in sram.OBJECTIVES
                       if (memory["depth"] // banks) >= sram.MIN_SRAM_DEPTH}
            # works at the clock: the read registered a cycle after its address, so the
            # macro's access as well as its cycle within the period
            meets = [key for key, r in options.items() if max(r["cycle_ns"], r["access_ns"]) <= period]
            cell = meets[0][0] if meets else sram.CELL_TYPE
            assert row["cell_type"] == cell
            best = (min(options[key]["area_mm2"] for key in meets if key[0] == cell) if meets
                    else options[sram.CELL_TYPE, 1, sram.OBJECTIVES[0]]["area_mm2"])
            assert row["area_mm2"] == best
    # the 64 KiB memory at 1 GHz: banks of low-leakage macros, not one of high-performance
    # ones; a line's energy one bank's, the leakage all banks', the bank choice log2(banks)
    # gate levels after the macro's read
    row = sram.clocked(big, 1.0)
    banks, objective = row["banks"], tuple(int(w) for w in row["objective"].split(":"))
    one = sram.cacti(1024 // banks * sram.MACRO_WIDTH // 8, sram.MACRO_WIDTH, 1, 1, cell_type="itrs-lop",
                     objective=objective)                                     # type: ignore[arg-type]
    assert (row["cell_type"], row["macros"]) == ("itrs-lop", banks) and banks > 1
    assert math.isclose(row["read_pj"], 1e3 * one["read_nj"])
    assert math.isclose(row["leakage_mw"], banks * one["leakage_mw"])
    mux_ns = (banks.bit_length() - 1) * cells.T_LEVEL_PS / 1e3
    assert math.isclose(row["clock_ns"], max(one["cycle_ns"], one["access_ns"]) + mux_ns) and row["clock_ns"] <= 1.0
    # organized for cycle time alone, two banks of 32 KiB macros cycle within 1 ns but take
    # longer than that to read (what a check of the cycle alone would have let through),
    # and are larger than the densest organization that works
    fast = sram.cost(big, cell_type="itrs-lop", banks=2)
    assert fast["cycle_ns"] <= 1.0 < fast["access_ns"]
    assert row["area_mm2"] < 0.7 * fast["area_mm2"]
    assert row["leakage_mw"] < sram.cost(big, cell_type="itrs-hp")["leakage_mw"] / 10
    assert sram.clocked(small, 1.0)["leakage_mw"] < sram.cost(small, cell_type="itrs-hp")["leakage_mw"] / 10
    flops = {**small, "depth": 8, "bits": sram.MACRO_WIDTH * 8}
    assert sram.clocked(flops, 1.0)["cell_type"] == "flops"
    with pytest.raises(ValueError, match="in 3 banks"):
        sram.cost(big, banks=3)


def test_one_read_write_port_is_smaller_than_a_read_and_a_write_port():
    wide = {"name": "x.compute.in_bank0", "width": 2 * sram.MACRO_WIDTH, "depth": 512,
            "bits": 2 * sram.MACRO_WIDTH * 512, "read_ports": 1, "write_ports": 1}
    single = sram.clocked(wide, 1.0, sram.SINGLE_PORT)
    dual = sram.clocked(wide, 1.0)
    assert (single["ports"], dual["ports"]) == ("1RW", "1R1W")
    assert single["clock_ns"] <= 1.0 and dual["clock_ns"] <= 1.0
    # CACTI's answer for the macro the single-ported memory is built of
    objective = tuple(int(w) for w in single["objective"].split(":"))
    rows = 512 // single["banks"]
    one = sram.cacti(rows * sram.MACRO_WIDTH // 8, sram.MACRO_WIDTH, 0, 0, 1, single["cell_type"],
                     objective)                                               # type: ignore[arg-type]
    assert math.isclose(single["area_mm2"], 2 * single["banks"] * one["area_mm2"])
    assert single["area_mm2"] < 0.6 * dual["area_mm2"]
    # flip-flops: one multiplexer per bit for the shared port, as for one read port
    small = {**wide, "depth": 16, "bits": 2 * sram.MACRO_WIDTH * 16}
    assert sram.cost(small, sram.SINGLE_PORT)["area_mm2"] == sram.cost(small)["area_mm2"]


def test_a_memory_declared_single_ported_is_costed_as_one_read_write_port():
    from amaranth import Module
    from amaranth.lib import wiring
    from amaranth.lib.memory import Memory
    from hw import fifo
    found = sram.memories_of(fifo.SyncFIFOSinglePort(width=512, depth=256))
    assert [(m["width"], m["depth"], m["read_ports"], m["write_ports"], m["rw_ports"]) for m in found] == \
        [(1024, 128, 0, 0, 1)]                       # pairs of lines, 255 lines in 128 pairs
    assert sram.cost(found[0])["ports"] == "1RW"
    assert sram.memories_of(fifo.SyncFIFOBuffered(width=512, depth=256))[0]["rw_ports"] == 0

    class TwoReads(wiring.Component):                # declared single-ported, built with two reads
        def __init__(self):
            super().__init__({})

        def elaborate(self, platform):
            m = Module()
            m.submodules.storage = mem = Memory(shape=8, depth=64, init=[], attrs={fifo.SINGLE_PORT_ATTR: 1})
            mem.write_port(), mem.read_port(), mem.read_port()
            return m
    with pytest.raises(ValueError, match="declared single-ported with 2 read and 1 write ports"):
        sram.memories_of(TwoReads())


def test_cacti_grows_with_capacity():
    small, large = sram.cacti(8 << 10, 512), sram.cacti(64 << 10, 512)
    assert large["area_mm2"] > 4 * small["area_mm2"] and large["read_nj"] > small["read_nj"]
    assert large["leakage_mw"] > small["leakage_mw"]


def test_activity_of_a_gemv_counts_each_chunk():
    from isa.encoders import DeviceTensor, matmul_descriptor
    from isa import Op
    cfg = isa.load_config("default")                 # 32 lanes
    desc = matmul_descriptor(Op.GEMV, DeviceTensor(0, 256, 64), 1)     # K = 256, N = 64
    count = power.activity(cfg, [desc])
    assert count["macs"] == 256 * 64
    assert count["chunks"] == 256 * 2                 # a chunk per k and 32-lane word
    assert count["readout_words"] == 2
    # one input row: the k-groups alternate PE rows, each with 2 sets of its 2 words written
    # once, and each reading the 8 input lines of K = 256 once
    assert count["acc_line_writes"] == 2 * (2 + 2) and count["in_line_reads"] == 2 * 8
    packed = power.activity(cfg, [matmul_descriptor(Op.GEMV, DeviceTensor(0, 256, 8), 1)])
    assert packed["chunks"] == 256 // 4               # 4 rows of 8 per 32-lane chunk
    assert packed["acc_line_writes"] == 3 + 3 and packed["in_line_reads"] == 2 * 8
    # N = 300: 10 words in column tiles of 7 and 3, each tile reading K = 40's two lines again
    tiled = power.activity(cfg, [matmul_descriptor(Op.GEMV, DeviceTensor(0, 40, 300), 1)])
    assert tiled["acc_line_writes"] == 10 * (1 + 1) and tiled["in_line_reads"] == 2 * 2 * 2


def _estimate(levels):
    fp = {"ndp_fp16_mul_pipe": {"area_um2": 1000.0, "flops": 30, "transistors": 8000, "path": {"levels": 30}},
          "ndp_fp32_add_pipe": {"area_um2": 2000.0, "flops": 100, "transistors": 12000, "path": {"levels": 33}}}
    cells_pe = {"ndp_fp16_mul_pipe": 128, "ndp_fp32_add_pipe": 128}
    rows = {"device": _row(500_000.0, 1000, 40, cells_pe), report.PE_MODULE: _row(200_000.0, 500, 30, cells_pe),
            "device.control_unit": _row(450_000.0, 900, levels, cells_pe)}
    return {"rows": rows, "fp": fp, "source": "synthesized"}


def test_report_arithmetic():
    cfg = isa.load_config("default")                 # 128 MACs
    memories = [{"name": "a.in_bank0", "buffer": "input", "kind": "sram", "bits": 1000, "area_mm2": 1.5,
                 "area_1rw_mm2": 1.0, "bitcell_mm2": 0.2, "leakage_mw": 10.0, "leakage_lop_mw": 1.0,
                 "cycle_ns": 0.5, "clock_ns": 0.5, "read_pj": 1.0, "write_pj": 1.0, "memories": 1},
                {"name": "q", "buffer": "other", "kind": "flops", "bits": 24, "area_mm2": 0.25,
                 "area_1rw_mm2": 0.25, "bitcell_mm2": 0.001, "leakage_mw": 0.0, "leakage_lop_mw": 0.0,
                 "cycle_ns": 0.0, "clock_ns": 0.0, "read_pj": 0.0, "write_pj": 0.0, "memories": 1}]
    peak = {"pe_w": 1.0, "buffers_dynamic_w": 0.5, "buffers_leakage_w": 0.01, "core_w": 1.51,
            "worst_stream": "s", "streams_w": {"s": 0.5}}
    r = report.assemble("default", cfg, _estimate(60), memories, {}, peak)
    pe = (200_000 + 128 * 3000) / 1e6
    core = (500_000 + 128 * 3000) / 1e6
    assert math.isclose(r["area"]["pe_mm2"], pe)
    assert math.isclose(r["area"]["other_logic_mm2"], core - pe)
    assert math.isclose(r["area"]["sram_mm2"], 1.75)
    assert math.isclose(r["area"]["total_mm2"], core + 1.75)
    assert math.isclose(r["area"]["pe_per_mac_um2"], pe * 1e6 / 128)
    assert math.isclose(r["references"]["horowitz_pe_mm2"], 128 * (1640 + 4184) / 1e6)
    assert math.isclose(r["references"]["paper_per_mac_um2"], 0.80e6 / 1024)
    assert math.isclose(r["references"]["paper_per_bit_um2"], 44.22e6 / (3 * 2 ** 23))
    # the deepest block limits the clock: 60 levels x 20 ps + 100 ps
    assert r["timing"]["limiting"] == "device.control_unit"
    assert math.isclose(r["timing"]["fmax_ghz"], 1e3 / (60 * 20 + 100))
    assert not r["timing"]["holds_1ghz"]
    # shallower, the device's own 40 levels limit it (the SRAM's 0.5 ns cycle would allow 2 GHz)
    shallow = report.assemble("default", cfg, _estimate(20), memories, {}, peak)
    assert shallow["timing"]["limiting"] == "device"
    assert math.isclose(shallow["timing"]["fmax_ghz"], 1e3 / (40 * 20 + 100)) and shallow["timing"]["holds_1ghz"]
    # a memory read that takes 1.25 ns (its access, though it cycles in 0.5) limits the clock to 0.8 GHz
    slow_sram = [{**memories[0], "clock_ns": 1.25}, memories[1]]
    assert math.isclose(report.assemble("default", cfg, _estimate(20), slow_sram, {}, peak)["timing"]["fmax_ghz"], 0.8)
    ratios = {row[0]: row[3] for row in report.summary_table(r)}
    assert ratios["PEs, mm^2"] == f"{pe / (0.80 * 128 / 1024):.2f}x"      # the paper per MAC, 128 MACs
    line = report.last_line(r)
    assert line.startswith("area config=default total_mm2=") and "fmax_ghz=0.77" in line
    # the deepest path named: the control unit's 60 levels
    assert line.endswith(" worst_levels=60 worst_path=device.control_unit")


@pytest.mark.parametrize("config", ["default", "quad"])
def test_memories_of_the_device_hold_the_configs_buffers(config):
    cfg = isa.load_config(config)
    by = sram.by_buffer([{**m, "buffer": sram.buffer_of(m["name"]), "area_mm2": 0, "area_1rw_mm2": 0,
                          "bitcell_mm2": 0, "leakage_mw": 0, "leakage_lop_mw": 0, "cycle_ns": 0,
                          "clock_ns": 0}
                         for m in sram.memories(cfg)])
    assert by["input"]["bits"] == 8 * cfg.in_buf_bytes
    assert by["output"]["bits"] == 2 * 8 * cfg.out_buf_bytes       # two banks of the output buffer
    assert 8 * cfg.dram_buf_bytes - 512 * cfg.dram_channels <= by["dram"]["bits"] <= 8 * cfg.dram_buf_bytes


def _committed_points(config):
    """The committed synthesis results (area/results/) of a scaled config's variants, as
    rows per channel count: recorded data (their RTL may be older than the checkout's)."""
    import json
    cfg = isa.load_config(config)
    points = {}
    for c in blocks.FIT_CHANNELS:
        path = blocks.COMMITTED / f"{blocks._tag(blocks.variant(cfg, c))}/{blocks.TOP}.result.json"
        points[c] = blocks.block_rows(json.loads(path.read_text())["result"])
    return points


def test_operand_selects_grow_as_their_multiplexers_predict():
    # each PE row's operand select (hw/operand_select.py) is a rotator and each lane's
    # choice among its few sources, 16 bits: the k of a c + k M(LANES) through the
    # synthesized 1 and 2 channel points must be about 16 two-input muxes' area (another
    # count: the RTL's structure), and both selects alike
    cfg = isa.load_config("paper")
    points = _committed_points("paper")
    selects = [s for s in points[2] if blocks.mux_model(s) == "operand_select"]
    assert len(selects) == cfg.rows
    per_channel = cfg.lanes // cfg.dram_channels
    for s in selects:
        _, k = blocks.mux_terms("operand_select", {c: points[c][s]["own_um2"] for c in (1, 2)}, per_channel)
        assert 0.5 * 16 * cells.area("MUX2_X1") < k < 1.5 * 16 * cells.area("MUX2_X1"), (s, k)
    # and the rest of the core, FP cells included, grows no faster than linearly with an offset
    fp = blocks.fp_cell_results()

    def rest(c):
        device = points[c][blocks.TOP]
        return device["area_um2"] - sum(points[c][s]["own_um2"] for s in selects) + blocks.fp_area(device, fp)
    assert 1.5 < rest(2) / rest(1) <= 2.0


def test_cli_names_a_bad_config():
    from click.testing import CliRunner
    from plora_cli import main
    result = CliRunner().invoke(main, ["area", "--config", "no-such-config"])
    assert result.exit_code != 0 and "no device config 'no-such-config'" in result.output


@pytest.mark.parametrize("name", list(blocks._standalone(isa.load_config("paper"))))
def test_lane_wide_blocks_grow_linearly_within_the_stated_margin(name):
    # the fold unit, line packer, unpacker, softmax unit, DRAM writer and operand select
    # synthesized alone at 1, 2 and 4 channels of the paper config (committed results): the
    # device's fit through 1 and 2 channels (the line; the select's and the packer's models)
    # predicts 4
    import json
    cfg = isa.load_config("paper")
    fp = blocks.fp_cell_results()
    areas = []
    for c in blocks.GROWTH_CHANNELS:
        path = blocks.COMMITTED / f"{blocks._tag(blocks.variant(cfg, c))}/{name}.result.json"
        row = blocks.block_rows(json.loads(path.read_text())["result"])[name]
        areas.append(row["area_um2"] + blocks.fp_area(row, fp))
    predicted = blocks.predicted(name, {1: areas[0], 2: areas[1]}, 4, cfg.lanes // cfg.dram_channels)
    assert abs(predicted - areas[2]) <= blocks.LINE_MARGIN * areas[2], name


def test_stress_streams_drive_what_they_name():
    # area/power.py's peak takes the buffers at the rate of its stress streams: each must
    # drive the traffic it is named for (counted as the RTL moves it, test_compute_unit)
    from isa.encoders import DeviceTensor, matmul_descriptor
    from isa import Op
    from isa.pe_array import plan
    cfg = isa.load_config("default")
    shapes = dict(power.stress_shapes(cfg))
    for name in ("outer products, column tiles", "outer products in the slots", "dot products",
                 "transposed rows of two lines"):
        kind, m, k, n = shapes[name]
        tensor = DeviceTensor(0, n, k) if kind == "gemm_t" else DeviceTensor(0, k, n)
        count = power.activity(cfg, [matmul_descriptor(Op.GEMM, tensor, m, transposed=kind == "gemm_t")])
        chunks = count["chunks"] + count["trans_chunks"]
        if name.startswith("outer"):
            # every chunk is its set's last: it writes its sums
            assert count["acc_line_writes"] == chunks and plan(n, cfg.lanes, m).slotted == name.endswith("slots")
        else:
            # every chunk takes an input line of its own
            assert count["in_line_reads"] == chunks
