"""area/: the cell library's areas and the per-block synthesis (issue 13, first part)."""
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from area import cells
from area.synth import synthesize
from hw import depth
from hw.fp import FP32AddPipe


def test_cell_areas_are_the_quoted_lef_sizes():
    # issue 13 quotes these three from the Nangate45 LEF
    assert cells.area("NAND2_X1") == 0.798
    assert cells.area("DFF_X1") == 4.522
    assert cells.area("FA_X1") == 4.256
    assert "DFF_X1" in cells.liberty() and "XOR2_X1" in cells.liberty()


def test_adder_maps_onto_the_library_with_its_pipeline_registers(tmp_path):
    result = synthesize(FP32AddPipe(), "fp32_add_pipe", out_dir=tmp_path)
    # the area is the cells' sum (synthesize checks it against yosys' stat)
    assert abs(result["area_um2"] - sum(n * cells.area(k) for k, n in result["cells"].items())) < 1e-6
    # the same registers as the generic-gate synthesis of hw/depth.py (another flow)
    generic = depth.measure("FP32AddPipe", FP32AddPipe, 3, out_dir=tmp_path / "depth")
    assert result["flops"] == generic["flops"]
    assert result["flops"] * cells.area("DFF_X1") < result["area_um2"]
    assert result["transistors"] > 4 * sum(n for k, n in result["cells"].items() if k != "DFF_X1")
    assert result["memories"] == []


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


def test_memories_stay_out_of_the_logic(tmp_path):
    result = synthesize(Buffer(), "buffer", out_dir=tmp_path)
    assert result["memories"] == [{"name": result["memories"][0]["name"], "width": 32, "depth": 256,
                                   "bits": 8192, "read_ports": 1, "write_ports": 1}]
    assert result["flops"] < 64         # not 8192 flip-flops


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
    assert result["instances"] == {"ndp_fp32_add_pipe": 2}
    assert result["flops"] == 32
