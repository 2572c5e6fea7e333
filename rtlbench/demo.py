"""`make demo`, quietly: build ndp_device (one progress line; the compiler's output in
build/verilator-default/build.log), run the demo bench (cocotb_demo.py; the simulator's
output in build/run-default/cocotb_demo.log) and print its result lines. On a failure: the
error, where the log is and its last lines; exit status 1."""
import os
import sys

from rtlbench import runner


def main():
    results = runner.build_folder("run-default") / "cocotb_demo.results"
    results.parent.mkdir(parents=True, exist_ok=True)
    results.unlink(missing_ok=True)
    try:
        runner.run("cocotb_demo", log=True, progress="the demo (a GEMV and a GEMM through the driver) on the RTL",
                   env={"NDP_DEMO_RESULTS": str(results), "PYTHONWARNINGS": "ignore::DeprecationWarning"})
    except runner.BuildError as e:
        print(e, file=sys.stderr)
        return 1
    except runner.SimulationFailed as e:
        if results.exists():
            print(results.read_text(), end="")
        print(e, file=sys.stderr)
        if e.log:
            print(f"the last lines of {runner.shown(e.log)}:\n{runner.tail(e.log, 15)}", file=sys.stderr)
        return 1
    print(results.read_text(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
