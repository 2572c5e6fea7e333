"""Temporary: measure RTL cycles of single descriptors for model calibration."""
import json
import os

import cocotb
import numpy as np

from isa import Descriptor, DescType, Dtype, Op
from isa.validate import lines
from env import DeviceEnv


@cocotb.test()
async def probe(dut):
    env = DeviceEnv(dut)
    dev = await env.start()
    queue = await env.setup_queue(0, log2_depth=1, log2_slot=19, irq=True)
    rng = np.random.default_rng(0)
    out = []
    shapes = [(1, 1, 1), (1, 1, 32), (1, 32, 32), (1, 64, 32), (1, 64, 64), (1, 128, 16), (1, 256, 16),
              (1, 32, 33), (1, 32, 48), (1, 100, 100), (1, 1000, 64), (1, 512, 512), (2, 64, 64), (4, 64, 64),
              (5, 64, 64), (8, 64, 64), (4, 1, 1), (4, 33, 1), (1, 2048, 1), (1, 64, 1024), (1, 4096, 16),
              (3, 77, 129), (1, 16, 16), (9, 200, 40), (1, 1, 4096), (1, 2, 2048), (16, 300, 8)]
    for m, k, n in shapes:
        w = rng.standard_normal((k, n)).astype(np.float16)
        x = rng.standard_normal((m, k)).astype(np.float16)
        t = await dev.upload(w)
        _, c = await dev.gemm(x, t, return_completion=True)
        out.append(("gemm", m, k, n, c.cycles))
        queue.free_all()
    for rows in [1, 2, 3, 31, 32, 33, 64, 65, 100, 128, 129, 200, 1000]:
        a = rng.standard_normal((rows, 32)).astype(np.float16)
        t = await dev.upload(np.zeros_like(a))
        c = await dev.store(t, a, return_completion=True)
        out.append(("store", rows, 32, 0, c.cycles))
        _, c = await dev.load(t, return_completion=True)
        out.append(("load", rows, 32, 0, c.cycles))
        queue.free_all()
    c = await queue.run(Descriptor(type=DescType.RESERVED))
    out.append(("error", 0, 0, 0, c.cycles))
    with open(os.environ.get("PROBE_OUT", "/tmp/probe.json"), "w") as f:
        json.dump(out, f)
