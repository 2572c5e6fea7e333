"""hw/shared_port.py on Amaranth's simulator: the port takes the values of the one source
whose condition holds (0 in a field that source leaves out, 0 everywhere when none holds),
and two sources in one cycle fail the simulation with the port's and the sources' names."""
import itertools

import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from hw.shared_port import SharedPort


def port_with_three_sources():
    m = Module()
    when = [Signal(name=f"when{i}") for i in range(3)]
    addr, lines, start = Signal(16), Signal(8), Signal()
    port = SharedPort("writer's job", addr=addr, lines=lines, start=start)
    value = Signal(16)                       # a source's value may be a signal
    port.source("results", when[0], start=1, addr=value, lines=7)
    port.source("anchors", when[1], start=1, addr=0x1234)
    port.source("copy", when[2], start=1, addr=0xBEEF, lines=200)
    port.elaborate(m)
    return m, when, value, (addr, lines, start)


def run(bench, m):
    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_the_one_source_that_holds_drives_the_port():
    m, when, value, (addr, lines, start) = port_with_three_sources()
    expected = {None: (0, 0, 0), 0: (0x0F0F, 7, 1), 1: (0x1234, 0, 1), 2: (0xBEEF, 200, 1)}
    seen = {}

    async def bench(ctx):
        ctx.set(value, 0x0F0F)
        for chosen in (None, 0, 1, 2):
            for i, w in enumerate(when):
                ctx.set(w, i == chosen)
            seen[chosen] = (ctx.get(addr), ctx.get(lines), ctx.get(start))
            await ctx.tick()
    run(bench, m)
    assert seen == expected


@pytest.mark.parametrize("pair", list(itertools.combinations(range(3), 2)))
def test_two_sources_in_one_cycle_fail(pair):
    m, when, _, _ = port_with_three_sources()

    async def bench(ctx):
        await ctx.tick()
        for i in pair:
            ctx.set(when[i], 1)
        await ctx.tick()
        await ctx.tick()
    with pytest.raises(AssertionError, match=r"writer's job: two sources in one cycle \(of results, anchors, copy\)"):
        run(bench, m)


def test_a_source_names_only_the_ports_fields():
    port = SharedPort("p", x=Signal(4))
    with pytest.raises(ValueError, match=r"p: bad drives \['y'\], which the port lacks"):
        port.source("bad", Signal(), y=1)
