"""The RTL side of `make bench`: the bench stream through the driver, on the top this
simulation was built with: `ndp_device` with the cocotbext-axi bench (the BFM path) or
`ndp_fast_top` (the fast path). Writes device cycles and wall seconds to BENCH_OUT."""
import json
import os
import time

import cocotb
from cocotb.simtime import get_sim_time

import isa
import stream
from bench import POLL_CYCLES


async def open_device(dut):
    """(device, function giving the simulated device cycles so far)."""
    if hasattr(dut, "reg_req"):                     # ndp_fast_top
        from cocotb_fast import open_device as open_fast
        transport, dev = await open_fast(dut)
        return dev, lambda: transport.cycle
    from env import DeviceEnv
    env = DeviceEnv(dut)
    dev = await env.start()
    return dev, lambda: get_sim_time("ns") // 10    # the bench's 10 ns clock


@cocotb.test()
async def bench(dut):
    cfg = isa.load_config(os.environ.get("NDP_CONFIG", "default"))
    dev, cycles = await open_device(dut)
    queues = await stream.configure(dev, cfg)
    batches = stream.bench_batches()
    data = stream.draw(batches)
    start_cycles, start = cycles(), time.perf_counter()
    records = await stream.run(dev, queues, batches, poll_cycles=POLL_CYCLES, data=data)
    wall = time.perf_counter() - start
    with open(os.environ["BENCH_OUT"], "w") as f:
        json.dump({"cycles": cycles() - start_cycles, "wall_s": wall, "records": records}, f)
