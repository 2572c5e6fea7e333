"""`make demo`: a GEMV and a GEMM through the driver on the RTL, checked against numpy.

Prints, for each: the shape, whether the result is bit-exact against the golden model,
the largest difference from a float64 numpy reference, the device cycles from the
completion, and the DRAM-port utilization those cycles imply. The lines also go to the file
$NDP_DEMO_RESULTS when set (demo.py prints them; the simulator's own output is in its log).
"""
import os

import cocotb
import numpy as np

from sim import golden
from rtlbench.env import DeviceEnv

SHAPES = [("GEMV", 1, 4096, 16), ("GEMM", 32, 4096, 16)]


def report(line):
    print(line, flush=True)
    path = os.environ.get("NDP_DEMO_RESULTS")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def moved_bytes(cfg, m, k, n):
    """Bytes the device moves over its DRAM port for one GEMM: the weights once per group
    of ROWS input rows, the input, the result, and the slot header and completion lines."""
    groups = -(-m // cfg.rows)
    return groups * k * n * 2 + m * k * 2 + m * n * 2 + 2 * cfg.beat_bytes


@cocotb.test()
async def demo(dut):
    env = DeviceEnv(dut)
    dev = await env.start()
    await env.setup_queue(0, log2_depth=1, log2_slot=19)
    cfg = env.cfg
    rng = np.random.default_rng(1)
    report(f"ndp_device config {cfg.name!r}: LANES={cfg.lanes} ROWS={cfg.rows}, "
           f"DRAM port {cfg.beat_bytes} bytes/cycle")
    for name, m, k, n in SHAPES:
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16)
        x = rng.standard_normal((m, k)).astype(np.float16)
        tensor = await dev.upload(w)
        if name == "GEMV":
            out, completion = await dev.gemv(x[0], tensor, return_completion=True)
            out = out[None, :]
        else:
            out, completion = await dev.gemm(x, tensor, return_completion=True)
        exact = np.array_equal(out.view(np.uint16), golden.gemm(x, w, dev.caps.lanes).view(np.uint16))
        reference = x.astype(np.float64) @ w.astype(np.float64)
        err = np.max(np.abs(out.astype(np.float64) - reference))
        util = moved_bytes(cfg, m, k, n) / completion.cycles / cfg.beat_bytes
        report(f"{name} {m}x{k}x{n}: bit-exact vs golden model: {'yes' if exact else 'NO'}; "
               f"max |device - numpy float64| = {err:.3g}; device cycles = {completion.cycles}; "
               f"DRAM-port utilization = {util:.1%}")
        assert exact, f"{name} differs from the golden model"
        assert err < 0.05, f"{name} is far from numpy: {err}"
        dev.queue().free_all()
