"""CocotbAxiTransport on a simulator, against cocotbext-axi subordinates.

The HDL is a port-only stub with the device's top-level port names (spec section 5):
every port is an input, so the transport (manager side) and the cocotbext-axi
subordinates of this test both drive it. It checks what the fake device of
test_driver.py cannot: the bus names, the PASID on awuser/aruser (also under concurrent
register accesses), error responses, and the interrupt pulse counter.

pytest runs `test_rtl_transport_on_verilator`, which builds the stub with Verilator and
runs the cocotb test `rtl_transport_smoke` of this module.
"""
import os
import pathlib
import sys


REPO = pathlib.Path(__file__).resolve().parents[2]
NUM_QUEUES = 4

STUB = """
module ndp_stub (
    input clk, input rst, input [%(nq)d:0] irq,
    input [7:0] mem__awid, input [63:0] mem__awaddr, input [7:0] mem__awlen, input [2:0] mem__awsize,
    input [1:0] mem__awburst, input [19:0] mem__awuser, input mem__awvalid, input mem__awready,
    input [511:0] mem__wdata, input [63:0] mem__wstrb, input mem__wlast, input mem__wvalid, input mem__wready,
    input [7:0] mem__bid, input [1:0] mem__bresp, input mem__bvalid, input mem__bready,
    input [7:0] mem__arid, input [63:0] mem__araddr, input [7:0] mem__arlen, input [2:0] mem__arsize,
    input [1:0] mem__arburst, input [19:0] mem__aruser, input mem__arvalid, input mem__arready,
    input [7:0] mem__rid, input [511:0] mem__rdata, input [1:0] mem__rresp, input mem__rlast,
    input mem__rvalid, input mem__rready,
    input [15:0] io__awaddr, input [19:0] io__awuser, input io__awvalid, input io__awready,
    input [31:0] io__wdata, input [3:0] io__wstrb, input io__wvalid, input io__wready,
    input [1:0] io__bresp, input io__bvalid, input io__bready,
    input [15:0] io__araddr, input [19:0] io__aruser, input io__arvalid, input io__arready,
    input [31:0] io__rdata, input [1:0] io__rresp, input io__rvalid, input io__rready
);
endmodule
""" % {"nq": NUM_QUEUES - 1}

FORBIDDEN_MEM = 0xF000       # the subordinates answer SLVERR here
FORBIDDEN_REG = 0x3FC


def test_rtl_transport_on_verilator(tmp_path):
    from rtlbench.runner import verilator_env
    verilator_env()
    from cocotb_tools.runner import get_runner

    source = tmp_path / "ndp_stub.v"
    source.write_text(STUB)
    runner = get_runner("verilator")
    runner.build(sources=[source], hdl_toplevel="ndp_stub", build_dir=tmp_path / "build",
                 build_args=["-Wno-fatal"])
    pythonpath = os.pathsep.join([str(REPO), str(pathlib.Path(__file__).parent),
                                  os.environ.get("PYTHONPATH", "")])
    results = runner.test(hdl_toplevel="ndp_stub", test_module=pathlib.Path(__file__).stem,
                          test_dir=tmp_path / "build", build_dir=tmp_path / "build",
                          extra_env={"PYTHONPATH": pythonpath,
                                     "PYGPI_PYTHON_BIN": sys.executable})
    from cocotb_tools.check_results import get_results
    total, failed = get_results(results)
    assert (total, failed) == (1, 0)


# ---- the cocotb side (imported only inside the simulator) ----------------------------------

try:
    import cocotb
except ImportError:          # pragma: no cover
    cocotb = None

if cocotb is not None:
    from cocotb.clock import Clock
    from cocotb.triggers import ClockCycles, RisingEdge
    from cocotb.utils import get_sim_time

    class Target:
        """Memory behind a cocotbext-axi subordinate; one forbidden address answers SLVERR."""

        def __init__(self, forbidden):
            self.data = {}
            self.forbidden = forbidden

        async def write(self, address, data):
            if address <= self.forbidden < address + len(data):
                raise PermissionError("forbidden")
            for i, byte in enumerate(data):
                self.data[address + i] = byte

        async def read(self, address, length):
            if address <= self.forbidden < address + length:
                raise PermissionError("forbidden")
            return bytes(self.data.get(address + i, 0) for i in range(length))

    async def record_handshakes(clk, channel, valid, ready, addr, user, log):
        """Log (channel, address, user) at each address handshake."""
        while True:
            await RisingEdge(clk)
            if valid.value == 1 and ready.value == 1:
                log.append((channel, int(addr.value), int(user.value)))

    async def pulse(dut, bits, after):
        await ClockCycles(dut.clk, after)
        dut.irq.value = bits
        await RisingEdge(dut.clk)
        dut.irq.value = 0

    @cocotb.test()
    async def rtl_transport_smoke(dut):
        from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteSlave, AxiSlave

        from driver import MemAccessError, RegisterAccessError
        from driver.rtl_transport import CocotbAxiTransport

        cocotb.start_soon(Clock(dut.clk, 2, unit="ns").start())
        dut.irq.value = 0
        dut.rst.value = 1
        AxiSlave(AxiBus.from_prefix(dut, "mem_"), dut.clk, dut.rst, target=Target(FORBIDDEN_MEM))
        AxiLiteSlave(AxiLiteBus.from_prefix(dut, "io_"), dut.clk, dut.rst, target=Target(FORBIDDEN_REG))
        transport = CocotbAxiTransport(dut)
        assert transport.supports_irq
        log = []
        for channel, prefix in (("mem_aw", "mem__aw"), ("mem_ar", "mem__ar"),
                                ("io_aw", "io__aw"), ("io_ar", "io__ar")):
            sig = {name: getattr(dut, prefix + name) for name in ("valid", "ready", "addr", "user")}
            cocotb.start_soon(record_handshakes(dut.clk, channel, sig["valid"], sig["ready"],
                                                sig["addr"], sig["user"], log))
        await ClockCycles(dut.clk, 5)
        dut.rst.value = 0
        await ClockCycles(dut.clk, 5)

        # CXL.mem with the PASID on awuser/aruser
        payload = bytes(range(200))
        await transport.mem_write(0x1010, payload, pasid=5)
        assert await transport.mem_read(0x1010, len(payload), pasid=6) == payload
        assert ("mem_aw", 0x1010, 5) in log and ("mem_ar", 0x1010, 6) in log
        for coro in (transport.mem_write(FORBIDDEN_MEM, b"x" * 8, pasid=1),
                     transport.mem_read(FORBIDDEN_MEM, 8, pasid=1)):
            try:
                await coro
            except MemAccessError as exc:
                assert "SLVERR" in str(exc)
            else:
                raise AssertionError("no MemAccessError")

        # CXL.io with the PASID driven beside AxiLiteMaster
        await transport.reg_write(0x128, 0xDEADBEEF, pasid=7)
        assert await transport.reg_read(0x128, pasid=3) == 0xDEADBEEF
        assert ("io_aw", 0x128, 7) in log and ("io_ar", 0x128, 3) in log
        try:
            await transport.reg_write(FORBIDDEN_REG, 1, pasid=0)
        except RegisterAccessError as exc:
            assert "SLVERR" in str(exc)
        else:
            raise AssertionError("no RegisterAccessError")

        # concurrent register writers never mix their PASIDs
        del log[:]

        async def writer(pasid):
            for i in range(6):
                await transport.reg_write(0x100 + 0x40 * pasid + 4 * i, i, pasid=pasid)
        tasks = [cocotb.start_soon(writer(p)) for p in (1, 2, 3)]
        for task in tasks:
            await task
        writes = [entry for entry in log if entry[0] == "io_aw"]
        assert len(writes) == 18
        assert all((addr - 0x100) // 0x40 == pasid for _, addr, pasid in writes), writes

        # interrupts: pulses are counted, also when nobody waits
        await pulse(dut, 0b0100, 1)
        await pulse(dut, 0b0101, 0)
        await ClockCycles(dut.clk, 3)
        assert await transport.wait_irq(2, 10)
        assert await transport.wait_irq(2, 10)
        assert await transport.wait_irq(0, 10)
        start = get_sim_time("ns")
        assert not await transport.wait_irq(2, 10)
        assert get_sim_time("ns") - start == 10 * 2
        cocotb.start_soon(pulse(dut, 0b1000, 20))
        start = get_sim_time("ns")
        assert await transport.wait_irq(3, 1000)
        assert get_sim_time("ns") - start < 40 * 2

        start = get_sim_time("ns")
        await transport.wait_cycles(17)
        assert get_sim_time("ns") - start == 17 * 2
