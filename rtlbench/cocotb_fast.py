"""Benches on ndp_fast_top (rtlbench/fast) through the unchanged driver on FastRtlTransport.

- `correctness`: what the scenarios (run here by cocotb_scenarios.py through FastBackend)
  do not cover: GEMV 4096x16 and GEMM 32x4096x16 bit-exact against sim.golden (K capped at
  the config's k_max), a slower DRAM (same bits, more cycles), a polled (no-irq) queue.
- `speed`: a stream of long GEMVs; reports simulated device cycles per wall-clock second
  and writes them as JSON to $NDP_FAST_RESULT (bench_fast.py reads it).
- `roofline`: rtlbench/roofline.py's back-to-back workloads, by the code the model runs.
"""
import json
import os
import time

import cocotb
import numpy as np

import isa
from isa.axi import RESP_SLVERR
from driver import NdpDevice
from driver.fast_rtl_transport import FastRtlTransport
from sim import golden
from rtlbench.backend import Backend

RING = 1 << 20                      # per queue: SQ ring, CQ ring (depth 2 x 512 KiB slots)
LOG2_DEPTH, LOG2_SLOT = 1, 19       # a slot holds a 32 x 4096 input or a 32 x 4096 result
QUEUE_SPAN = 1 << 26                # queue q owns [q * 64 MiB, (q + 1) * 64 MiB): rings, then data


async def open_device(dut):
    transport = FastRtlTransport(dut)
    dev = await NdpDevice.open(transport)
    return transport, dev


class FastBackend(Backend):
    """The scenarios' backend on ndp_fast_top (cocotb_scenarios.py runs them)."""
    name = "rtl_fast"
    unsupported = {
        "pasid_bound_queues_interleaved": "host data bypasses the CXL.mem port and its PASID filter",
        "every_status_code": "no per-cycle monitor of the device's DRAM reads",
    }
    monitors_reads = False

    @classmethod
    async def open(cls, dut):
        self = cls()
        self.cfg = isa.load_config(os.environ.get("NDP_CONFIG", "default"))
        self.fast, self.dev = await open_device(dut)
        return self

    @property
    def cycle(self):
        return self.fast.cycle

    def backdoor_read(self, addr, length):
        return self.fast.dram[addr:addr + length].tobytes()

    def backdoor_write(self, addr, data):
        self.fast.dram[addr:addr + len(data)] = np.frombuffer(bytes(data), np.uint8)

    async def add_dram_fault(self, lo, hi, read=RESP_SLVERR, write=RESP_SLVERR):
        await self.fast.add_dram_fault(lo, hi, read, write)

    async def clear_dram_faults(self):
        await self.fast.clear_dram_faults()

    async def add_backpressure(self, seed=1, permille=300):
        """Random stalls on every channel of every DRAM port and on the register port."""
        await self.fast.set_dram_stalls(permille, seed)

    async def remove_backpressure(self):
        await self.fast.set_dram_stalls(0)

    def stall_counts(self):
        return self.fast.stall_counts()

    async def reset(self, cycles=4):
        await self.fast.reset(cycles)

    def irq_pulses(self):
        return [self.fast.irq_seen(q) for q in range(self.cfg.num_queues)]


async def setup_queue(dev, q, irq=True, span=QUEUE_SPAN, pasid=0):
    base = q * span
    return await dev.configure_queue(q, sq_base=base, cq_base=base + RING, data_base=base + 2 * RING,
                                     data_limit=base + span, log2_depth=LOG2_DEPTH,
                                     log2_slot=LOG2_SLOT, pasid=pasid, irq=irq)


def bits(a):
    return a.view(np.uint16)


async def check_matmul(dev, rng, m, k, n, queue=None):
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16)
    x = rng.standard_normal((m, k)).astype(np.float16)
    tensor = await dev.upload(w, queue)
    if m == 1:
        out, completion = await dev.gemv(x[0], tensor, queue, return_completion=True)
        out = out[None, :]
    else:
        out, completion = await dev.gemm(x, tensor, queue, return_completion=True)
    assert np.array_equal(bits(out), bits(golden.gemm(x, w, dev.caps.lanes))), f"{m}x{k}x{n} differs from golden"
    dev.queue(queue).free_all()
    return completion.cycles


@cocotb.test()
async def correctness(dut):
    transport, dev = await open_device(dut)
    cfg = isa.load_config(os.environ.get("NDP_CONFIG", "default"))
    assert dev.caps.num_queues == cfg.num_queues
    await setup_queue(dev, 0, irq=True)
    rng = np.random.default_rng(7)

    k_big = min(4096, dev.caps.k_max)     # the small config's buffers hold K <= 2048
    for m, k, n in [(1, k_big, 16), (32, k_big, 16)]:
        cycles = await check_matmul(dev, rng, m, k, n)
        dut._log.info(f"GEMM {m}x{k}x{n}: bit-exact, {cycles} device cycles")

    # a slower DRAM: same bits, more cycles
    latency = transport.dram_latency          # the config's, as the cycle model assumes
    assert latency == (cfg.dram_read_latency, cfg.dram_write_latency)
    base = await check_matmul(dev, rng, 4, 256, 64)
    transport.set_dram_latency(read=latency[0] + 40, write=latency[1] + 20)
    slow = await check_matmul(dev, rng, 4, 256, 64)
    transport.set_dram_latency(*latency)
    assert slow > base, f"a slower DRAM took {slow} cycles, the config's {base}"
    dut._log.info(f"GEMM 4x256x64: {base} cycles at DRAM latency {latency}, {slow} at +40/+20")

    # a queue without interrupts: the driver polls the completion word every 64 cycles
    await setup_queue(dev, 1, irq=False)
    await check_matmul(dev, rng, 3, 200, 40, queue=1)


@cocotb.test()
async def speed(dut):
    reps = int(os.environ.get("NDP_FAST_REPS", "4"))
    dim = int(os.environ.get("NDP_FAST_DIM", "4096"))
    transport, dev = await open_device(dut)
    k, n = min(dim, dev.caps.k_max), min(dim, dev.caps.n_max)
    await setup_queue(dev, 0, irq=True)
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16)
    xs = rng.standard_normal((reps, k)).astype(np.float16)
    t0 = time.perf_counter()
    tensor = await dev.upload(w)
    upload_s = time.perf_counter() - t0

    start_cycle, device_cycles, outs = transport.cycle, 0, []
    t0 = time.perf_counter()
    for x in xs:
        out, completion = await dev.gemv(x, tensor, return_completion=True)
        device_cycles += completion.cycles
        outs.append(out)
    wall = time.perf_counter() - t0
    sim_cycles = transport.cycle - start_cycle

    assert np.array_equal(bits(outs[0]), bits(golden.gemv(xs[0], w, dev.caps.lanes))), "GEMV differs from golden"
    result = {"cycles_per_s": sim_cycles / wall, "sim_cycles": sim_cycles,
              "device_cycles": device_cycles, "wall_s": wall, "reps": reps, "k": k, "n": n,
              "upload_mib_per_s": w.nbytes / 2**20 / upload_s}
    print(f"\nrtl_fast: {reps} GEMV {k}x{n}, {sim_cycles} cycles ({device_cycles} in completions) "
          f"in {wall:.2f} s; upload {result['upload_mib_per_s']:.0f} MiB/s\n"
          f"rtl_fast cycles_per_s={sim_cycles / wall:.0f}", flush=True)
    if os.environ.get("NDP_FAST_RESULT"):
        with open(os.environ["NDP_FAST_RESULT"], "w") as f:
            json.dump(result, f)


@cocotb.test()
async def roofline(dut):
    """rtlbench/roofline.py's workloads from $NDP_ROOFLINE (JSON: works, copies, memory),
    measured by the same code as on the model; results as JSON to $NDP_FAST_RESULT."""
    from rtlbench import roofline as rl
    spec = json.loads(os.environ["NDP_ROOFLINE"])
    cfg = isa.load_config(os.environ.get("NDP_CONFIG", "default"))
    transport, dev = await open_device(dut)
    works = [rl.Workload(*w) for w in spec["works"]]
    t0 = time.perf_counter()

    def progress(result):
        print(f"rtl_fast roofline {result['name']}: period {result['period']:.1f} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    results = await rl.measure_all(dev, lambda: transport.cycle, cfg, works, spec["copies"],
                                   spec["memory"], progress)
    with open(os.environ["NDP_FAST_RESULT"], "w") as f:
        json.dump(results, f)
