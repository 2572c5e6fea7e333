"""`ndp_device`: the NDP core beside HDM, with the ports of spec sections 5 and 6.

    io  (CXL.io)  -> RegisterFile ---------------------------.
    mem (CXL.mem) -> MemFrontend (PASID filter) [-> HostBridge]  | queue registers
                     CommandEngine -> InstructionBuffer ---+--+-> ControlUnit -> irq
                                                          v
                                    DramArbiter [-> DramInterleaver] -> dram, or dram0 .. dram<C-1>

The device's blocks share one internal bus whose beat holds a line of every DRAM channel
(64 bytes with one channel, where it is the `dram` port itself); with several channels the
interleaver spreads it over the channel ports and the host bridge widens CXL.mem to it.
"""
from amaranth import Module, Signal
from amaranth.hdl import Assert
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi import device_bus, port_bus
from .command_engine import CommandEngine
from .control_unit import ControlUnit
from .dram_arbiter import DramArbiter
from .dram_interleaver import DramInterleaver
from .host_bridge import HostBridge
from .instruction_buffer import InstructionBuffer
from .mem_frontend import MemFrontend, mem_signature
from .regfile import RegisterFile, io_signature


class NdpDevice(wiring.Component):
    def __init__(self, cfg, shared_cells=True):
        self._cfg, self._shared = cfg, shared_cells
        drams = ({"dram": Out(device_bus(cfg))} if cfg.dram_channels == 1 else
                 {f"dram{c}": Out(port_bus(cfg)) for c in range(cfg.dram_channels)})
        super().__init__({
            "mem": In(mem_signature(cfg)),
            "io": In(io_signature(cfg)),
            **drams,
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
        if cfg.dram_channels == 1:
            wiring.connect(m, arbiter.dram, wiring.flipped(self.dram))
            wiring.connect(m, front.down, arbiter.ports[0])
        else:
            m.submodules.interleaver = interleaver = DramInterleaver(cfg)
            m.submodules.host_bridge = bridge = HostBridge(cfg)
            wiring.connect(m, arbiter.dram, interleaver.bus)
            for c in range(cfg.dram_channels):
                wiring.connect(m, interleaver.channels[c], wiring.flipped(getattr(self, f"dram{c}")))
            wiring.connect(m, front.down, bridge.host)
            wiring.connect(m, bridge.bus, arbiter.ports[0])
            # the interleaver's address readies are room in every channel queue, which the
            # arbiter's tags guarantee here (hw/dram_interleaver.py): a burst never waits
            bus = interleaver.bus
            m.d.sync += [Assert(~bus.arvalid | bus.arready, "a read burst waits for room in the interleaver"),
                         Assert(~bus.awvalid | bus.awready, "a write burst waits for room in the interleaver")]
        wiring.connect(m, engine.bus, arbiter.ports[1])
        wiring.connect(m, control.bus, arbiter.ports[2])

        for q in range(cfg.num_queues):
            m.d.comb += [front.queues[q].eq(regfile.queues[q]), engine.queues[q].eq(regfile.queues[q]),
                         control.queues[q].eq(regfile.queues[q]), engine.reset[q].eq(regfile.reset[q])]
        m.d.comb += [engine.cycle.eq(cycle), control.cycle.eq(cycle), self.irq.eq(control.irq)]
        wiring.connect(m, engine.push, ibuf.push)
        wiring.connect(m, ibuf.pop, control.pop)
        wiring.connect(m, control.done, regfile.done)
        return m
