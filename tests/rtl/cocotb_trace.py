"""Temporary: cycle trace of the dram port for one descriptor."""
import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from env import DeviceEnv


async def trace(dut, log):
    cyc = 0
    while True:
        await RisingEdge(dut.clk)
        cyc += 1
        for ch, v, r, extra in (("AR", "arvalid", "arready", "araddr"), ("R", "rvalid", "rready", "rlast"),
                                ("AW", "awvalid", "awready", "awaddr"), ("W", "wvalid", "wready", "wlast"),
                                ("B", "bvalid", "bready", "bresp")):
            if int(getattr(dut, "dram__" + v).value) and int(getattr(dut, "dram__" + r).value):
                log.append((cyc, ch, hex(int(getattr(dut, "dram__" + extra).value))))


@cocotb.test()
async def tr(dut):
    env = DeviceEnv(dut)
    dev = await env.start()
    q = await env.setup_queue(0, log2_depth=1, log2_slot=16, irq=True)
    a = np.ones((1, 32), np.float16)
    t = await dev.upload(np.zeros_like(a))
    log = []
    cocotb.start_soon(trace(dut, log))
    _, c = await dev.load(t, return_completion=True)
    print("LOAD cycles", c.cycles)
    for e in log:
        print(e)
    log.clear()
    w = np.ones((512, 512), np.float16)
    t = await dev.upload(w)
    _, c = await dev.gemv(np.ones(512, np.float16), t, return_completion=True)
    print("GEMV cycles", c.cycles)
    ars = [e[0] for e in log if e[1] == "AR"]
    rs = [e[0] for e in log if e[1] == "R"]
    print("AR gaps", [b - a for a, b in zip(ars, ars[1:])][:200])
    print("R count", len(rs), "first", rs[0], "last", rs[-1])
