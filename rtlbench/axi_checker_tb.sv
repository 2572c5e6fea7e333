// The HDL of the AXI protocol checker's own tests (tests/unit/test_axi_checker.py,
// rtlbench/cocotb_axi_checker.py): ports only, every one an input, so that cocotb
// drives both sides of each bus and the checker (rtlbench/axi_checker.py) watches them.
// Names as in rtl/ndp_device.v: <prefix>__<member>.
//   h  AXI4, driven cycle by cycle by the test (legal and illegal sequences)
//   m  AXI4, cocotbext-axi AxiMaster and AxiRam (legal traffic under random stalls)
//   hl AXI4-Lite, driven by the test
//   l  AXI4-Lite, cocotbext-axi AxiLiteMaster and AxiLiteRam
// AXI4 ports: 32-bit address, 64-bit data, 4-bit IDs, 2-bit user; AXI4-Lite: 16 / 32.
module axi_checker_tb (
    input clk, input rst,

    input [3:0] h__awid, input [31:0] h__awaddr, input [7:0] h__awlen, input [2:0] h__awsize,
    input [1:0] h__awburst, input h__awlock, input [3:0] h__awcache, input [2:0] h__awprot,
    input [3:0] h__awqos, input [3:0] h__awregion, input [1:0] h__awuser,
    input h__awvalid, input h__awready,
    input [63:0] h__wdata, input [7:0] h__wstrb, input h__wlast, input [1:0] h__wuser,
    input h__wvalid, input h__wready,
    input [3:0] h__bid, input [1:0] h__bresp, input [1:0] h__buser, input h__bvalid, input h__bready,
    input [3:0] h__arid, input [31:0] h__araddr, input [7:0] h__arlen, input [2:0] h__arsize,
    input [1:0] h__arburst, input h__arlock, input [3:0] h__arcache, input [2:0] h__arprot,
    input [3:0] h__arqos, input [3:0] h__arregion, input [1:0] h__aruser,
    input h__arvalid, input h__arready,
    input [3:0] h__rid, input [63:0] h__rdata, input [1:0] h__rresp, input h__rlast,
    input [1:0] h__ruser, input h__rvalid, input h__rready,

    input [3:0] m__awid, input [31:0] m__awaddr, input [7:0] m__awlen, input [2:0] m__awsize,
    input [1:0] m__awburst, input m__awlock, input [3:0] m__awcache, input [2:0] m__awprot,
    input [3:0] m__awqos, input [3:0] m__awregion, input [1:0] m__awuser,
    input m__awvalid, input m__awready,
    input [63:0] m__wdata, input [7:0] m__wstrb, input m__wlast, input [1:0] m__wuser,
    input m__wvalid, input m__wready,
    input [3:0] m__bid, input [1:0] m__bresp, input [1:0] m__buser, input m__bvalid, input m__bready,
    input [3:0] m__arid, input [31:0] m__araddr, input [7:0] m__arlen, input [2:0] m__arsize,
    input [1:0] m__arburst, input m__arlock, input [3:0] m__arcache, input [2:0] m__arprot,
    input [3:0] m__arqos, input [3:0] m__arregion, input [1:0] m__aruser,
    input m__arvalid, input m__arready,
    input [3:0] m__rid, input [63:0] m__rdata, input [1:0] m__rresp, input m__rlast,
    input [1:0] m__ruser, input m__rvalid, input m__rready,

    input [15:0] hl__awaddr, input [2:0] hl__awprot, input hl__awvalid, input hl__awready,
    input [31:0] hl__wdata, input [3:0] hl__wstrb, input hl__wvalid, input hl__wready,
    input [1:0] hl__bresp, input hl__bvalid, input hl__bready,
    input [15:0] hl__araddr, input [2:0] hl__arprot, input hl__arvalid, input hl__arready,
    input [31:0] hl__rdata, input [1:0] hl__rresp, input hl__rvalid, input hl__rready,

    input [15:0] l__awaddr, input [2:0] l__awprot, input l__awvalid, input l__awready,
    input [31:0] l__wdata, input [3:0] l__wstrb, input l__wvalid, input l__wready,
    input [1:0] l__bresp, input l__bvalid, input l__bready,
    input [15:0] l__araddr, input [2:0] l__arprot, input l__arvalid, input l__arready,
    input [31:0] l__rdata, input [1:0] l__rresp, input l__rvalid, input l__rready
);
endmodule
