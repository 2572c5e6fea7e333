"""The RTL side of `make verify` (verify/cli.py): fuzzing and the soak, on the top this
simulation was built with (the fast path for both at full size). The count, the seed and
the result file are the run's settings (verify/settings.py)."""
import dataclasses
import json
import time

import cocotb

from rtlbench import stream
from rtlbench.env import backend_class
from verify import fuzz as fuzzing
from verify import reset as resets
from verify.settings import VerifySettings


def _settings(default_count):
    settings = VerifySettings.from_env()
    return settings.count_or(default_count), settings.seed, settings.out


def _write(out, record):
    if out:
        with open(out, "w") as f:
            json.dump(record, f)


@cocotb.test()
async def fuzz(dut):
    """Random 204-bit words (verify/fuzz.py): each completes with the status the decode
    rules predict, none hangs, nothing is written outside the rings and the STOREs' bytes."""
    count, seed, out = _settings(200)
    env = await backend_class().open(dut)
    started = time.time()
    result = await fuzzing.run(env, count, seed)
    _write(out, {"count": result.count, "by_status": result.by_status, "by_kind": result.by_kind,
                 "seconds": time.time() - started, "line": result.line(env.name)})


@cocotb.test()
async def soak(dut):
    """rtlbench/stream.py's random stream over every queue with random stalls on every
    DRAM channel and the register port (seeded): the records (status, result bytes) are
    compared with the model's by verify/soak.py; here, each descriptor's completion is
    counted by the interrupt: exactly one pulse per descriptor per queue."""
    count, seed, out = _settings(100)
    env = await backend_class().open(dut)
    dev = env.dev
    await env.add_backpressure(seed=seed)
    queues = [await stream.setup_queue(dev, q, pasid=stream.pasid_of(q), log2_depth=stream.LOG2_DEPTH,
                                       log2_slot=stream.LOG2_SLOT, irq=True) for q in range(env.cfg.num_queues)]
    pulses_before = env.irq_pulses()
    started = time.time()
    records = await stream.run(dev, queues, stream.generate(seed, count, env.cfg), seed)
    await env.cycles(200)            # a duplicated completion would pulse after the last one
    pulses = [after - before for after, before in zip(env.irq_pulses(), pulses_before)]
    _write(out, {"records": records, "pulses": pulses, "seconds": time.time() - started,
                 "cycles": env.cycle, "stalls": env.stall_counts()})


@cocotb.test()
async def reset(dut):
    """`rst` at random cycles in the middle of descriptors (and of host bursts on the
    cocotbext-axi bench): verify/reset.py."""
    count, seed, out = _settings(10)
    env = await backend_class().open(dut)
    started = time.time()
    result = await resets.run(env, count, seed, host_bursts=env.name == "rtl")
    _write(out, {**dataclasses.asdict(result), "seconds": time.time() - started, "line": result.line(env.name)})
