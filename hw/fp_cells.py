"""The FP units as cells shared by name.

The PE array holds ROWS x LANES multipliers and adders. Emitted as Amaranth submodules,
each would become its own Verilog module, and Verilator would compile each copy: about
100k lines of Verilog and many minutes of C++. Instead the device instantiates each FP
unit by module name, and `hw/gen.py` emits the three modules once, converted from the
same Amaranth components; Verilator then compiles one class per unit. Amaranth's own
simulator cannot run an `Instance`, so unit tests build the blocks with `shared=False`.
"""
from amaranth import Instance
from amaranth.back import verilog
from amaranth.lib.wiring import Flow

from .fp import FP16MulToFP32, FP32Add, FP32ToFP16

CELLS = {"ndp_fp16_mul": FP16MulToFP32, "ndp_fp32_add": FP32Add, "ndp_fp32_to_fp16": FP32ToFP16}


def _port_flows(cls):
    component = cls()
    component._MustUse__silence = True      # built only to read its signature
    return {name: member.flow for name, member in component.signature.members.items()}


FLOWS = {name: _port_flows(cls) for name, cls in CELLS.items()}


def add_cell(m, instance_name, cell, shared, **ports):
    """Add FP unit `cell` (a CELLS key) to `m`; `ports` maps its port names to signals."""
    if shared:
        args = {("i_" if FLOWS[cell][port] == Flow.In else "o_") + port: value
                for port, value in ports.items()}
        m.submodules[instance_name] = Instance(cell, **args)
        return
    component = CELLS[cell]()
    m.submodules[instance_name] = component
    for port, value in ports.items():
        if component.signature.members[port].flow == Flow.In:
            m.d.comb += getattr(component, port).eq(value)
        else:
            m.d.comb += value.eq(getattr(component, port))


def cell_verilog():
    """The Verilog of the shared cells, one module each."""
    return "".join(verilog.convert(cls(), name=name, emit_src=False) for name, cls in CELLS.items())
