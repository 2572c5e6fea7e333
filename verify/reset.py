"""Reset in the middle of work: `rst` asserted at a random cycle while descriptors run on
two queues (before their first completion, between completions, during a result run or a
completion line, after the last), and on the cocotbext-axi bench also while a host burst is
on CXL.mem. After each reset:
- every queue register reads its reset value (0) and the global ones their constants;
- for `QUIET_CYCLES` nothing is written anywhere in the queues' window (no completion, no
  result, for work the reset dropped) and no interrupt pulses;
- a freshly configured queue runs a GEMM exactly (sim/golden.py).
Works on every RTL backend of rtlbench (the model has no reset)."""
import dataclasses

import cocotb
import numpy as np

from isa import Op
from isa.encoders import matmul_descriptor
from isa import regs as R
from isa import slots
from sim import golden

QUIET_CYCLES = 3000
WINDOW = 2 << 24                  # the two queues' spans (rtlbench/backend.py QUEUE_SPAN)
QUEUE_REGS = (R.SQ_BASE_LO, R.SQ_BASE_HI, R.CQ_BASE_LO, R.CQ_BASE_HI, R.DATA_BASE_LO, R.DATA_BASE_HI,
              R.DATA_LIMIT_LO, R.DATA_LIMIT_HI, R.CFG, R.CTRL, R.HEAD, R.STATUS)


@dataclasses.dataclass
class ResetResult:
    resets: int = 0
    # where the reset fell: completions written before it, of the batch's descriptors
    before_any: int = 0
    mid_batch: int = 0
    after_all: int = 0
    host_burst: int = 0

    def line(self, name):
        return (f"reset backend={name} resets={self.resets} before_any={self.before_any} "
                f"mid_batch={self.mid_batch} after_all={self.after_all} host_burst={self.host_burst} "
                f"late_writes=0 late_irqs=0")


def _fp16(rng, shape):
    return (rng.standard_normal(shape) / 4).astype(np.float16)


async def check_reset_state(env):
    t = env.transport
    for q in range(env.cfg.num_queues):
        for off in QUEUE_REGS:
            value = await t.reg_read(R.queue_reg(q, off))
            assert value == 0, f"after reset: queue {q} register {off:#04x} reads {value:#x}"
    assert await t.reg_read(R.ID) == R.ID_VALUE
    assert await t.reg_read(R.NUM_QUEUES) == env.cfg.num_queues


async def run(env, count, seed=1, host_bursts=False):
    """`count` resets; raises AssertionError at the first thing out of place."""
    rng = np.random.default_rng(seed)
    dev, result = env.dev, ResetResult()
    nq = min(2, env.cfg.num_queues)
    for i in range(count):
        queues = [await env.setup_queue(q, log2_depth=2, log2_slot=14, irq=True) for q in range(nq)]
        seqs = []
        for q, queue in enumerate(queues):
            items = []
            for _ in range(int(rng.integers(1, queue.depth + 1))):
                m, k, n = int(rng.integers(1, 9)), int(rng.integers(16, 257)), int(rng.integers(8, 97))
                tensor = await dev.upload(_fp16(rng, (k, n)), queue=q)
                desc = matmul_descriptor(Op.GEMM, tensor, m)
                items.append((desc, _fp16(rng, (m, k)).tobytes()))
            seqs.append(await queue.submit_many(items))
        burst = None
        if host_bursts and rng.random() < 0.5:
            # a host write of many beats in flight on CXL.mem when rst rises
            burst = cocotb.start_soon(env.transport.mem_write(queues[0].data_base + (1 << 20),
                                                              bytes(16384), 0))
        point = int(rng.integers(0, 3500))
        await env.cycles(point)
        done = sum(_completed(env, queue, s) for queue, ss in zip(queues, seqs) for s in ss)
        await env.reset(int(rng.integers(1, 9)))
        if burst is not None:
            burst.cancel()
            result.host_burst += 1
        total = sum(len(ss) for ss in seqs)
        if done == 0:
            result.before_any += 1
        elif done < total:
            result.mid_batch += 1
        else:
            result.after_all += 1

        await check_reset_state(env)
        pulses = env.irq_pulses()
        snapshot = env.backdoor_read(0, WINDOW)
        await env.cycles(QUIET_CYCLES)
        after = env.backdoor_read(0, WINDOW)
        if after != snapshot:
            first = next(j for j, (a, b) in enumerate(zip(after, snapshot)) if a != b)
            raise AssertionError(f"reset {i}: byte {first:#x} written after the reset")
        assert env.irq_pulses() == pulses, f"reset {i}: interrupt after the reset"

        # a fresh configuration runs exactly
        queue = await env.setup_queue(0, log2_depth=2, log2_slot=14)
        w, x = _fp16(rng, (40, 24)), _fp16(rng, (3, 40))
        tensor = await dev.upload(w, queue=0)
        got = await dev.gemm(x, tensor, queue=0)
        expected = golden.gemm(x, w, dev.caps.lanes)
        assert np.array_equal(got.view(np.uint16), expected.view(np.uint16)), f"reset {i}: GEMM after reset"
        for queue in dev.queues.values():
            queue.free_all()
        result.resets += 1
    return result


def _completed(env, queue, seq):
    header = env.backdoor_read(queue.cq_slot(seq), slots.HEADER_BYTES)
    return int.from_bytes(header[slots.CQ_SEQ:slots.CQ_SEQ + 8], "little") == seq
