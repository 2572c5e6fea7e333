"""A port with several sources: each drives it under a condition of its own, and the port
takes the one whose condition holds.

The control unit's shared ports (the writer's job, the unpacker's run, the input buffer's
write port, the buffers' read port, the line packer's words) are driven from several FSM
phases and from blocks that run beside the FSM (the readout, the anchor poster, the
completion). Written as assignments in the phases and in `m.If`s, the last one written
would win silently when two conditions hold at once. Here each port has one mux, an AND-OR
of its sources (0 when none drives it), and in simulation an assertion fails in the cycle
two sources drive it, naming the port and the sources.
"""
import functools
import operator

from amaranth import Mux
from amaranth.hdl import Assert


class SharedPort:
    """`fields` names the port's signals; `source(name, when, **values)` adds a source that
    drives them with `values` while `when` holds (a field it leaves out is 0 then);
    `elaborate(m)` adds the mux and the assertion, once every source is in."""

    def __init__(self, name, **fields):
        self._name, self._fields, self._sources = name, fields, []

    def source(self, name, when, **values):
        unknown = set(values) - set(self._fields)
        if unknown:
            raise ValueError(f"{self._name}: {name} drives {sorted(unknown)}, which the port lacks")
        self._sources.append((name, when, values))

    def elaborate(self, m):
        if not self._sources:
            raise ValueError(f"{self._name}: no source")
        for field, target in self._fields.items():
            terms = [Mux(when, values[field], 0) for _, when, values in self._sources if field in values]
            if terms:
                m.d.comb += target.eq(functools.reduce(operator.or_, terms))
        names = ", ".join(name for name, _, _ in self._sources)
        m.d.sync += Assert(sum(when for _, when, _ in self._sources) <= 1,
                           f"{self._name}: two sources in one cycle (of {names})")
