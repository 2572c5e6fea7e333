"""The RTL side of `make validate`: run the stream of VALIDATE_SEED/VALIDATE_COUNT through
the driver on the RTL and write the records to VALIDATE_OUT."""
import json
import os

import cocotb

from rtlbench import stream
from rtlbench.env import backend_class


@cocotb.test()
async def validate(dut):
    """On the top this simulation was built with: the cocotbext-axi bench, or the fast path."""
    env = await backend_class().open(dut)
    dev = env.dev
    seed, count = int(os.environ["VALIDATE_SEED"]), int(os.environ["VALIDATE_COUNT"])
    queues = await stream.configure(dev, env.cfg)
    batches = (stream.from_json(os.environ["VALIDATE_STREAM"]) if os.environ.get("VALIDATE_STREAM")
               else stream.generate(seed, count, env.cfg))
    records = await stream.run(dev, queues, batches, seed)
    with open(os.environ["VALIDATE_OUT"], "w") as f:
        json.dump(records, f)
