"""The FP units as cells shared by name.

The PE array holds ROWS x LANES multipliers and adders. Emitted as Amaranth submodules,
each would become its own Verilog module, and Verilator would compile each copy: about
100k lines of Verilog and many minutes of C++. Instead the device instantiates each FP
unit by module name, and `hw/gen.py` emits each module once, converted from the same
Amaranth components; Verilator then compiles one class per unit. Amaranth's own
simulator cannot run an `Instance`, so unit tests build the blocks with `shared=False`.

The pipelined units (`*_pipe`) have a `sync` domain: their Verilog modules take `clk` and
`rst` ports, which a shared instance connects to the instantiating module's `sync` clock
and reset; as plain submodules they use that domain directly.
"""
from amaranth import ClockSignal, Instance, ResetSignal
from amaranth.back import verilog
from amaranth.lib.wiring import Flow

from .fp import FP16MulToFP32, FP16MulToFP32Pipe, FP32Add, FP32AddPipe, FP32ToFP16
from .fp_sfu import ExpApproxPipe, FP32MulToFP16Pipe

CELLS = {
    "ndp_fp16_mul": FP16MulToFP32,
    "ndp_fp32_add": FP32Add,
    "ndp_fp32_to_fp16": FP32ToFP16,
    "ndp_fp16_mul_pipe": FP16MulToFP32Pipe,
    "ndp_fp32_add_pipe": FP32AddPipe,
    "ndp_exp_approx_pipe": ExpApproxPipe,
    "ndp_fp32_mul_to_fp16_pipe": FP32MulToFP16Pipe,
}
# Cells with a `sync` domain; Amaranth names its ports `clk` and `rst` in the Verilog.
CLOCKED = {"ndp_fp16_mul_pipe", "ndp_fp32_add_pipe", "ndp_exp_approx_pipe", "ndp_fp32_mul_to_fp16_pipe"}


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
        if cell in CLOCKED:
            args.update(i_clk=ClockSignal(), i_rst=ResetSignal())
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
