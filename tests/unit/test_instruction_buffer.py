"""The instruction buffer: the model (sim/instruction_buffer.py) against the RTL
(hw/instruction_buffer.py), cycle for cycle, through the harness of ties.py (its docstring
gives the cycle convention)."""
from amaranth.sim import Simulator

import isa


def test_instruction_buffer_pop_latency_and_depth():
    """An entry pushed at cycle p can be popped from p + POP_LATENCY on; `depth` entries
    fit (sim/instruction_buffer.py)."""
    from hw.instruction_buffer import InstructionBuffer
    from sim import instruction_buffer as model_ibuf
    cfg = isa.load_config("default")
    dut = InstructionBuffer(cfg)
    seen = {}

    async def bench(ctx):
        ctx.set(dut.push.payload.seq, 7)
        ctx.set(dut.push.valid, 1)
        await ctx.tick()                        # pushed at cycle 0
        ctx.set(dut.push.valid, 0)
        for cycle in range(1, 8):
            if ctx.get(dut.pop.valid) and "first" not in seen:
                seen["first"] = cycle
                assert ctx.get(dut.pop.payload.seq) == 7
            await ctx.tick()
        ctx.set(dut.pop.ready, 1)               # drain, then fill until full
        await ctx.tick()
        ctx.set(dut.pop.ready, 0)
        ctx.set(dut.push.valid, 1)
        pushed = 0
        for _ in range(3 * cfg.ibuf_depth):
            if ctx.get(dut.push.ready):
                pushed += 1
            await ctx.tick()
        seen["capacity"] = pushed

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen["first"] == model_ibuf.POP_LATENCY
    assert seen["capacity"] == cfg.ibuf_depth
