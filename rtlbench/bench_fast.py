"""Speed of the fast co-simulation path: `python rtlbench/bench_fast.py [reps] [dim] [config]`.

Runs the `speed` bench of cocotb_fast.py (a stream of `reps` GEMVs dim x dim through the
driver on FastRtlTransport) and prints simulated device cycles per wall-clock second as
`rtl_fast cycles_per_s=<n>`. measure_fast_speed() returns the figures as a dict.
"""
import json
import os
import sys

from rtlbench.runner import BUILD, run_fast


def measure_fast_speed(reps=4, dim=4096, config="default"):
    result = BUILD / f"run-fast-{config}" / "speed.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    result.unlink(missing_ok=True)
    run_fast("cocotb_fast", testcase="speed", config=config, env={
        "NDP_FAST_REPS": str(reps), "NDP_FAST_DIM": str(dim), "NDP_FAST_RESULT": str(result),
        "COCOTB_LOG_LEVEL": "WARNING", "PYTHONWARNINGS": "ignore::DeprecationWarning",
        # a BLAS worker thread spinning in the simulator process would take the second core
        "OPENBLAS_NUM_THREADS": "1"})
    return json.loads(result.read_text())


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    config = sys.argv[3] if len(sys.argv) > 3 else "default"
    figures = measure_fast_speed(*args, config=config)
    print(f"rtl_fast cycles_per_s={figures['cycles_per_s']:.0f} config={config}")
