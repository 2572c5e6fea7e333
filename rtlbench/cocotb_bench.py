"""The RTL side of `make bench`: the bench stream through the driver, on the top this
simulation was built with: `ndp_device` with the cocotbext-axi bench (the BFM path) or
`ndp_fast_top` (the fast path). Writes device cycles and wall seconds to BENCH_OUT."""
import json
import os
import time

import cocotb

from rtlbench import stream
from rtlbench.bench import POLL_CYCLES
from rtlbench.env import backend_class


@cocotb.test()
async def bench(dut):
    backend = await backend_class().open(dut)
    queues = await stream.configure(backend.dev, backend.cfg)
    batches = stream.bench_batches()
    data = stream.draw(batches)
    start_cycles, start = backend.cycle, time.perf_counter()
    records = await stream.run(backend.dev, queues, batches, poll_cycles=POLL_CYCLES, data=data)
    wall = time.perf_counter() - start
    with open(os.environ["BENCH_OUT"], "w") as f:
        json.dump({"cycles": backend.cycle - start_cycles, "wall_s": wall, "records": records}, f)
