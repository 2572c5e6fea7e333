"""The instruction buffer: a FIFO of taken descriptors in device SRAM, between the
command engine and the control unit. The host never addresses it."""
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from . import fifo
from .command_engine import ibuf_entry


class InstructionBuffer(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        layout = ibuf_entry(cfg)
        super().__init__({
            "push_valid": In(1), "push_ready": Out(1), "push": In(layout),
            "pop_valid": Out(1), "pop_ready": In(1), "pop": Out(layout),
            "level": Out(range(cfg.ibuf_depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = buf = fifo.SyncFIFOBuffered(width=len(self.push.as_value()), depth=self._cfg.ibuf_depth)
        m.d.comb += [buf.w_data.eq(self.push), buf.w_en.eq(self.push_valid), self.push_ready.eq(buf.w_rdy),
                     self.pop.eq(buf.r_data), self.pop_valid.eq(buf.r_rdy), buf.r_en.eq(self.pop_ready),
                     self.level.eq(buf.level)]
        return m
