"""The instruction buffer: a FIFO of taken descriptors in device SRAM, between the
command engine and the control unit. The host never addresses it."""
from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from . import fifo
from .command_engine import ibuf_entry


class InstructionBuffer(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        layout = ibuf_entry(cfg)
        super().__init__({
            "push": In(stream.Signature(layout)),
            "pop": Out(stream.Signature(layout)),
            "level": Out(range(cfg.ibuf_depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = buf = fifo.SyncFIFOBuffered(width=len(self.push.payload.as_value()),
                                                        depth=self._cfg.ibuf_depth)
        m.d.comb += [buf.w_data.eq(self.push.payload), buf.w_en.eq(self.push.valid), self.push.ready.eq(buf.w_rdy),
                     self.pop.payload.eq(buf.r_data), self.pop.valid.eq(buf.r_rdy), buf.r_en.eq(self.pop.ready),
                     self.level.eq(buf.level)]
        return m
