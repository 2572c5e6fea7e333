"""`make bench`: simulation speed on one stream, in simulated device cycles per wall second.

The same descriptor stream (stream.bench_batches) runs through the same driver on three
backends: the cycle model (sim/), the RTL with the fast co-simulation path (DRAM, clock
and register sequencer inside Verilator; Python acts per descriptor) and the RTL with the
cocotbext-axi bus functional models (Python acts per bus beat). The speed counts the
device cycles of the stream's descriptors (their completions' `cycles`, the same work on
every backend) per wall second of the whole run, host work included; the stream's data
is drawn before the clock starts. Ends with
    speed cycles_per_s model=<n> rtl_fast=<n> rtl_bfm=<n>
The result bytes of the three runs are compared as well.
"""
import asyncio
import json
import os
import sys
import time

from rtlbench import runner
from rtlbench import stream

import isa
from driver import NdpDevice
from driver.model_transport import ModelTransport

POLL_CYCLES = 1024          # the host watches HEAD this often while the device works
QUIET = {"COCOTB_LOG_LEVEL": "WARNING", "PYTHONWARNINGS": "ignore::DeprecationWarning",
         "OPENBLAS_NUM_THREADS": "1"}


def bench_model(cfg):
    async def main():
        transport = ModelTransport(cfg)
        dev = await NdpDevice.open(transport)
        queues = await stream.configure(dev, cfg)
        batches = stream.bench_batches()
        data = stream.draw(batches)
        start_cycles, start = transport.now, time.perf_counter()
        records = await stream.run(dev, queues, batches, poll_cycles=POLL_CYCLES, data=data)
        return {"cycles": transport.now - start_cycles, "wall_s": time.perf_counter() - start,
                "records": records}
    return asyncio.run(main())


def bench_rtl(path, config):
    out = runner.BUILD / f"bench-{path}-{config}.json"
    run = runner.run_fast if path == "fast" else runner.run
    run("cocotb_bench", config=config, env={**QUIET, "BENCH_OUT": str(out)})
    return json.loads(out.read_text())


def main(config="default"):
    cfg = isa.load_config(config)
    results = {"model": bench_model(cfg), "rtl_fast": bench_rtl("fast", config),
               "rtl_bfm": bench_rtl("bfm", config)}
    print(f"\nbench stream: {sum(len(b) for b in stream.bench_batches())} descriptors, config {config!r}")
    print(f"{'backend':<9} {'device cycles':>14} {'simulated':>10} {'wall s':>9} {'cycles/s':>12}")
    speed = {}
    for name, r in results.items():
        device_cycles = sum(rec["cycles"] for rec in r["records"])
        speed[name] = device_cycles / r["wall_s"]
        print(f"{name:<9} {device_cycles:>14} {int(r['cycles']):>10} {r['wall_s']:>9.3f} {speed[name]:>12.0f}")
    reference = [rec["result"] for rec in results["rtl_bfm"]["records"]]
    for name, r in results.items():
        same = [rec["result"] for rec in r["records"]] == reference
        print(f"{name}: results {'identical to' if same else 'DIFFER from'} the BFM run's")
    print(f"model / rtl_fast = {speed['model'] / speed['rtl_fast']:.1f}x, "
          f"rtl_fast / rtl_bfm = {speed['rtl_fast'] / speed['rtl_bfm']:.1f}x")
    print(f"speed cycles_per_s model={speed['model']:.0f} rtl_fast={speed['rtl_fast']:.0f} "
          f"rtl_bfm={speed['rtl_bfm']:.0f}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
