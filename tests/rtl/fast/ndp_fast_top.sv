// Simulation-only top for long runs: ndp_device with its clock, reset, DRAM and register
// master all inside the Verilator build, so that Python (FastRtlTransport) only sets a few
// variables and waits on a Timer or one value change, instead of waking every clock.
//
// Built by tests/rtl/runner.py:get_fast_runner with --timing (the clock below).
// Python-facing variables are marked public; the rest of the design is not, because
// --public-flat-rw on ndp_device makes the Verilator model about 16x slower.
//
//   clk, rst         clock of period CLK_PERIOD_PS, reset for RESET_CYCLES after time 0
//   cycle            clock edges since reset was released
//   clk_period_ps    the period, for Python to turn cycles into Timer time
//   irq_count        per queue q, bits [32q +: 32]: irq pulses seen (wraps at 2^32)
//   reg_*            one AXI4-Lite access on io: Python sets reg_we/addr/wdata/pasid, then
//                    toggles reg_req; reg_ack becomes equal to reg_req when reg_rdata and
//                    reg_resp hold the answer.
//   dram.*_latency   the DRAM model's latencies (ndp_axi_dram.sv)
//
// The CXL.mem port (mem__*) is tied idle: host data goes through the DRAM backdoor.
//
// Keep Python off the clock. With the clock inside Verilator, a coroutine woken by
// RisingEdge(clk) already sees the values after that edge (measured with this Verilator
// and cocotb 2.1), not the values before it as with a cocotb-driven clock, so clocked
// Python BFMs (cocotbext-axi) miss handshakes here. The reg_req/reg_ack toggle and the
// irq counters work whenever Python samples them. Before time first advances, the
// initializers below have not been applied yet (FastRtlTransport waits for reset).
module ndp_fast_top #(
    parameter int NUM_QUEUES = 4,               // these two must match the config the RTL
    parameter int DATA_BITS = 512,              // was generated for (runner.py passes them)
    parameter int CLK_PERIOD_PS = 10000,        // even; 1 GHz device time would be 1000
    parameter int RESET_CYCLES = 8,
    parameter longint DRAM_BYTES = 64'd1 << 28, // or the plusarg +dram_bytes=<n>
    parameter int READ_LATENCY = 2,             // runner.py passes isa's dram_*_latency
    parameter int WRITE_LATENCY = 2
) ();
    logic clk = 1'b0;
    logic rst /*verilator public_flat_rd*/ = 1'b1;
    int   clk_period_ps /*verilator public_flat_rd*/ = CLK_PERIOD_PS;
    logic [63:0] cycle /*verilator public_flat_rd*/ = 0;

    always #(CLK_PERIOD_PS / 2 * 1ps) clk = ~clk;

    /* verilator lint_off INITIALDLY */
    initial begin
        repeat (RESET_CYCLES) @(posedge clk);
        rst <= 1'b0;                        // non-blocking: no race with the flops at this edge
    end
    /* verilator lint_on INITIALDLY */

    always_ff @(posedge clk)
        if (!rst) cycle <= cycle + 1;

    // ---- the device ------------------------------------------------------------------
    logic [NUM_QUEUES-1:0] irq;

    logic [15:0] io_awaddr, io_araddr;
    logic [19:0] io_awuser, io_aruser;
    logic [31:0] io_wdata, io_rdata;
    logic [1:0]  io_bresp, io_rresp;
    logic io_awvalid, io_awready, io_wvalid, io_wready, io_bvalid, io_bready;
    logic io_arvalid, io_arready, io_rvalid, io_rready;

    logic [63:0]  d_awaddr, d_araddr;
    logic [DATA_BITS/8-1:0] d_wstrb;
    logic [7:0]   d_awlen, d_arlen, d_awid, d_arid, d_bid, d_rid;
    logic [2:0]   d_awsize, d_arsize;
    logic [1:0]   d_awburst, d_arburst, d_bresp, d_rresp;
    logic [DATA_BITS-1:0] d_wdata, d_rdata;
    logic d_awvalid, d_awready, d_wlast, d_wvalid, d_wready, d_bvalid, d_bready;
    logic d_arvalid, d_arready, d_rlast, d_rvalid, d_rready;

    ndp_device dev (
        .clk(clk), .rst(rst), .irq(irq),
        // CXL.mem tied idle: no requests, always ready for (never coming) responses
        .mem__awaddr('0), .mem__awlen('0), .mem__awsize('0), .mem__awburst('0), .mem__awlock('0),
        .mem__awcache('0), .mem__awprot('0), .mem__awid('0), .mem__awuser('0), .mem__awvalid(1'b0),
        .mem__awready(), .mem__wdata('0), .mem__wstrb('0), .mem__wlast(1'b0), .mem__wvalid(1'b0),
        .mem__wready(), .mem__bid(), .mem__bresp(), .mem__bvalid(), .mem__bready(1'b1),
        .mem__araddr('0), .mem__arlen('0), .mem__arsize('0), .mem__arburst('0), .mem__arlock('0),
        .mem__arcache('0), .mem__arprot('0), .mem__arid('0), .mem__aruser('0), .mem__arvalid(1'b0),
        .mem__arready(), .mem__rdata(), .mem__rid(), .mem__rresp(), .mem__rlast(), .mem__rvalid(),
        .mem__rready(1'b1),
        // CXL.io from the register sequencer below
        .io__awaddr(io_awaddr), .io__awprot(3'b0), .io__awuser(io_awuser), .io__awvalid(io_awvalid),
        .io__awready(io_awready), .io__wdata(io_wdata), .io__wstrb(4'hF), .io__wvalid(io_wvalid),
        .io__wready(io_wready), .io__bresp(io_bresp), .io__bvalid(io_bvalid), .io__bready(io_bready),
        .io__araddr(io_araddr), .io__arprot(3'b0), .io__aruser(io_aruser), .io__arvalid(io_arvalid),
        .io__arready(io_arready), .io__rdata(io_rdata), .io__rresp(io_rresp), .io__rvalid(io_rvalid),
        .io__rready(io_rready),
        // device DRAM
        .dram__awaddr(d_awaddr), .dram__awlen(d_awlen), .dram__awsize(d_awsize),
        .dram__awburst(d_awburst), .dram__awlock(), .dram__awcache(), .dram__awprot(),
        .dram__awid(d_awid), .dram__awvalid(d_awvalid), .dram__awready(d_awready),
        .dram__wdata(d_wdata), .dram__wstrb(d_wstrb), .dram__wlast(d_wlast),
        .dram__wvalid(d_wvalid), .dram__wready(d_wready),
        .dram__bid(d_bid), .dram__bresp(d_bresp), .dram__bvalid(d_bvalid), .dram__bready(d_bready),
        .dram__araddr(d_araddr), .dram__arlen(d_arlen), .dram__arsize(d_arsize),
        .dram__arburst(d_arburst), .dram__arlock(), .dram__arcache(), .dram__arprot(),
        .dram__arid(d_arid), .dram__arvalid(d_arvalid), .dram__arready(d_arready),
        .dram__rdata(d_rdata), .dram__rid(d_rid), .dram__rresp(d_rresp), .dram__rlast(d_rlast),
        .dram__rvalid(d_rvalid), .dram__rready(d_rready)
    );

    ndp_axi_dram #(.DATA_BITS(DATA_BITS), .BYTES(DRAM_BYTES), .READ_LATENCY(READ_LATENCY),
                   .WRITE_LATENCY(WRITE_LATENCY)) dram (
        .clk(clk), .rst(rst),
        .awaddr(d_awaddr), .awlen(d_awlen), .awsize(d_awsize), .awburst(d_awburst), .awid(d_awid),
        .awvalid(d_awvalid), .awready(d_awready),
        .wdata(d_wdata), .wstrb(d_wstrb), .wlast(d_wlast), .wvalid(d_wvalid), .wready(d_wready),
        .bid(d_bid), .bresp(d_bresp), .bvalid(d_bvalid), .bready(d_bready),
        .araddr(d_araddr), .arlen(d_arlen), .arsize(d_arsize), .arburst(d_arburst), .arid(d_arid),
        .arvalid(d_arvalid), .arready(d_arready),
        .rdata(d_rdata), .rid(d_rid), .rresp(d_rresp), .rlast(d_rlast), .rvalid(d_rvalid),
        .rready(d_rready)
    );

    // ---- interrupt counters: Python waits for one of these to change -------------------
    logic [NUM_QUEUES*32-1:0] irq_count /*verilator public_flat_rd*/ = '0;

    always_ff @(posedge clk)
        for (int q = 0; q < NUM_QUEUES; q++)
            if (irq[q]) irq_count[q*32 +: 32] <= irq_count[q*32 +: 32] + 1;

    // ---- register sequencer: one AXI4-Lite access per toggle of reg_req ----------------
    logic        reg_req   /*verilator public_flat_rw*/ = 1'b0;
    logic        reg_we    /*verilator public_flat_rw*/ = 1'b0;
    logic [15:0] reg_addr  /*verilator public_flat_rw*/ = '0;
    logic [31:0] reg_wdata /*verilator public_flat_rw*/ = '0;
    logic [19:0] reg_pasid /*verilator public_flat_rw*/ = '0;
    logic        reg_ack   /*verilator public_flat_rd*/ = 1'b0;
    logic [31:0] reg_rdata /*verilator public_flat_rd*/ = '0;
    logic [1:0]  reg_resp  /*verilator public_flat_rd*/ = '0;

    typedef enum logic [1:0] {S_IDLE, S_WRITE, S_READ} sstate_t;
    sstate_t sstate = S_IDLE;

    assign io_bready = sstate == S_WRITE;
    assign io_rready = sstate == S_READ;

    always_ff @(posedge clk) begin
        if (rst) begin
            sstate <= S_IDLE;
            io_awvalid <= 1'b0; io_wvalid <= 1'b0; io_arvalid <= 1'b0;
        end else case (sstate)
            S_IDLE: if (reg_req != reg_ack) begin
                io_awaddr <= reg_addr; io_araddr <= reg_addr;
                io_awuser <= reg_pasid; io_aruser <= reg_pasid;
                io_wdata <= reg_wdata;
                if (reg_we) begin
                    io_awvalid <= 1'b1; io_wvalid <= 1'b1;
                    sstate <= S_WRITE;
                end else begin
                    io_arvalid <= 1'b1;
                    sstate <= S_READ;
                end
            end
            S_WRITE: begin
                if (io_awready) io_awvalid <= 1'b0;
                if (io_wready) io_wvalid <= 1'b0;
                if (io_bvalid) begin
                    reg_resp <= io_bresp;
                    reg_ack <= reg_req;
                    sstate <= S_IDLE;
                end
            end
            S_READ: begin
                if (io_arready) io_arvalid <= 1'b0;
                if (io_rvalid) begin
                    reg_rdata <= io_rdata; reg_resp <= io_rresp;
                    reg_ack <= reg_req;
                    sstate <= S_IDLE;
                end
            end
            default: sstate <= S_IDLE;
        endcase
    end
endmodule
