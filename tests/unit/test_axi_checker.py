"""The AXI protocol checker (rtlbench/axi_checker.py) on its own bench.

Builds rtlbench/axi_checker_tb.sv (ports only, every one an input) with Verilator and
runs rtlbench/cocotb_axi_checker.py on it: legal sequences and cocotbext-axi traffic
that must pass, one illegal sequence per rule that must raise exactly that rule, and two
tests that must fail by themselves (a violation fails the running test, even one marked
expect_fail). The pure helpers (byte lanes, burst spans) are checked here against the
AXI spec's worked examples.
"""
import pathlib
import sys
import xml.etree.ElementTree as ET

REPO = pathlib.Path(__file__).resolve().parents[2]
BENCH = REPO / "rtlbench"

from isa.axi import BURST_FIXED, BURST_INCR, BURST_WRAP
from rtlbench.axi_checker import beat_lanes, burst_span

MUST_FAIL = {"must_fail_on_a_violation", "must_fail_even_marked_expect_fail"}


def test_byte_lanes_follow_the_spec_pseudocode():
    # A3.4.2 / A3.4.3: 32-bit bus, 32-bit INCR from 0x07: lanes 3, then 0..3
    assert [beat_lanes(0x07, 2, 4, BURST_INCR, n, 4) for n in range(3)] == [(3, 3), (0, 3), (0, 3)]
    # 8-bit transfers on a 32-bit bus walk the lanes
    assert [beat_lanes(0x01, 0, 4, BURST_INCR, n, 4) for n in range(4)] == [(1, 1), (2, 2), (3, 3), (0, 0)]
    # WRAP of 4 x 4 bytes from 0x34 on a 64-bit bus: 0x34, 0x38, 0x3C, then 0x30
    assert [beat_lanes(0x34, 2, 4, BURST_WRAP, n, 8) for n in range(4)] == [(4, 7), (0, 3), (4, 7), (0, 3)]
    # FIXED keeps the first beat's lanes
    assert [beat_lanes(0x102, 1, 3, BURST_FIXED, n, 8) for n in range(3)] == [(2, 3)] * 3


def test_burst_spans():
    assert burst_span(0xFF8, 3, 2, BURST_INCR) == (0xFF8, 0x1007)
    assert burst_span(0x103, 3, 2, BURST_INCR) == (0x103, 0x10F)
    assert burst_span(0x1F0, 3, 16, BURST_WRAP) == (0x180, 0x1FF)
    assert burst_span(0x102, 1, 16, BURST_FIXED) == (0x102, 0x103)


def test_checker_on_verilator(tmp_path):
    from rtlbench.runner import verilator_env
    verilator_env()
    from cocotb_tools.runner import get_runner
    build = REPO / "build" / "verilator-axi-checker"
    runner = get_runner("verilator")
    runner.build(sources=[BENCH / "axi_checker_tb.sv"], hdl_toplevel="axi_checker_tb", build_dir=build,
                 build_args=["-Wno-fatal", "-Wno-lint", "-Wno-style"], always=False)
    if str(REPO) not in sys.path:           # the simulator's PYTHONPATH
        sys.path.insert(0, str(REPO))
    results = tmp_path / "results.xml"
    try:
        runner.test(hdl_toplevel="axi_checker_tb", test_module="rtlbench.cocotb_axi_checker", build_dir=build,
                    test_dir=tmp_path, results_xml=str(results))
    except SystemExit:      # under pytest the runner exits when any test failed: two must
        pass
    outcome = {}
    for case in ET.parse(results).getroot().iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        outcome[case.get("name")] = "failed" if failed else "passed"
    expected = {name: "failed" if name in MUST_FAIL else "passed" for name in outcome}
    assert MUST_FAIL <= set(outcome) and len(outcome) == 8, outcome
    assert outcome == expected, outcome
