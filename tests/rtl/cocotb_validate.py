"""The RTL side of `make validate`: run the stream of VALIDATE_SEED/VALIDATE_COUNT through
the driver on the RTL and write the records to VALIDATE_OUT."""
import json
import os

import cocotb

import stream
from env import DeviceEnv


@cocotb.test()
async def validate(dut):
    env = DeviceEnv(dut)
    dev = await env.start()
    seed, count = int(os.environ["VALIDATE_SEED"]), int(os.environ["VALIDATE_COUNT"])
    queues = await stream.configure(dev, env.cfg)
    records = await stream.run(dev, queues, stream.generate(seed, count, env.cfg), seed)
    with open(os.environ["VALIDATE_OUT"], "w") as f:
        json.dump(records, f)
