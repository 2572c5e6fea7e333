"""`ndp_device`: the NDP core beside HDM, with the ports of spec section 5.

    io  (CXL.io)  -> RegisterFile ---------------------------.
    mem (CXL.mem) -> MemFrontend (PASID filter) ----------.  | queue registers
                     CommandEngine -> InstructionBuffer ---+--+-> ControlUnit -> irq
                                                          v
                                    DramArbiter -> dram (AXI4 to the memory controllers)
"""
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi import device_bus
from .command_engine import CommandEngine
from .control_unit import ControlUnit
from .dram_arbiter import DramArbiter
from .instruction_buffer import InstructionBuffer
from .mem_frontend import MemFrontend, mem_signature
from .regfile import RegisterFile, io_signature


class NdpDevice(wiring.Component):
    def __init__(self, cfg, shared_cells=True):
        if cfg.data_bits != 512:
            # the datapath takes one 64-byte slot header and line per beat, and AXI4's
            # size field ends at 128-byte beats; wider configs exist for the model only
            raise ValueError(f"config {cfg.name!r}: the RTL supports data_bits=512 only, got {cfg.data_bits!r}")
        self._cfg, self._shared = cfg, shared_cells
        super().__init__({
            "mem": In(mem_signature(cfg)),
            "io": In(io_signature(cfg)),
            "dram": Out(device_bus(cfg)),
            "irq": Out(cfg.num_queues),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        m.submodules.regfile = regfile = RegisterFile(cfg)
        m.submodules.mem_frontend = front = MemFrontend(cfg)
        m.submodules.command_engine = engine = CommandEngine(cfg)
        m.submodules.instruction_buffer = ibuf = InstructionBuffer(cfg)
        m.submodules.control_unit = control = ControlUnit(cfg, self._shared)
        m.submodules.dram_arbiter = arbiter = DramArbiter(cfg, 3)

        cycle = Signal(64)
        m.d.sync += cycle.eq(cycle + 1)

        wiring.connect(m, wiring.flipped(self.io), regfile.io)
        wiring.connect(m, wiring.flipped(self.mem), front.mem)
        wiring.connect(m, arbiter.dram, wiring.flipped(self.dram))
        wiring.connect(m, front.down, arbiter.ports[0])
        wiring.connect(m, engine.bus, arbiter.ports[1])
        wiring.connect(m, control.bus, arbiter.ports[2])

        for q in range(cfg.num_queues):
            m.d.comb += [front.queues[q].eq(regfile.queues[q]), engine.queues[q].eq(regfile.queues[q]),
                         control.queues[q].eq(regfile.queues[q]), engine.reset[q].eq(regfile.reset[q])]
        m.d.comb += [engine.cycle.eq(cycle), control.cycle.eq(cycle),
                     ibuf.push_valid.eq(engine.push_valid), engine.push_ready.eq(ibuf.push_ready),
                     ibuf.push.eq(engine.push),
                     control.pop_valid.eq(ibuf.pop_valid), ibuf.pop_ready.eq(control.pop_ready),
                     control.pop.eq(ibuf.pop),
                     regfile.done_valid.eq(control.done_valid), regfile.done_queue.eq(control.done_queue),
                     regfile.done_seq.eq(control.done_seq), regfile.done_status.eq(control.done_status),
                     self.irq.eq(control.irq)]
        return m
