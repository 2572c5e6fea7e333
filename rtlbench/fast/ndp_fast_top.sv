// Simulation-only top for long runs: ndp_device with its clock, reset, DRAM and register
// master all inside the Verilator build, so that Python (FastRtlTransport) only sets a few
// variables and waits on a Timer or one value change, instead of waking every clock.
//
// Built by rtlbench/runner.py:get_fast_runner with --timing (the clock below).
// Python-facing variables are marked public; the rest of the design is not, because
// --public-flat-rw on ndp_device makes the Verilator model about 16x slower.
//
//   clk, rst         clock of period CLK_PERIOD_PS, reset for RESET_CYCLES after time 0,
//                    and while Python holds rst_force high (FastRtlTransport.reset)
//   cycle            clock edges since reset was released
//   clk_period_ps    the period, for Python to turn cycles into Timer time
//   irq_count        per queue q, bits [32q +: 32]: irq pulses seen (wraps at 2^32)
//   reg_*            one AXI4-Lite access on io: Python sets reg_we/addr/wdata/pasid, then
//                    toggles reg_req; reg_ack becomes equal to reg_req when reg_rdata and
//                    reg_resp hold the answer.
//   dram_read_latency, dram_write_latency   the DRAM models' latencies (ndp_axi_dram.sv)
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
    parameter int NUM_QUEUES = 4,               // these three must match the config the RTL
    parameter int DATA_BITS = 512,              // was generated for (runner.py passes them)
    parameter int CHANNELS = 1,
    parameter int CLK_PERIOD_PS = 10000,        // even; 1 GHz device time would be 1000
    parameter int RESET_CYCLES = 8,
    parameter longint DRAM_BYTES = 64'd1 << 28, // or the plusarg +dram_bytes=<n>
    parameter int READ_LATENCY = 2,             // runner.py passes isa's dram_*_latency
    parameter int WRITE_LATENCY = 2
) ();
    logic clk = 1'b0;
    logic rst_init = 1'b1;
    logic rst_force /*verilator public_flat_rw*/ = 1'b0;
    logic rst /*verilator public_flat_rd*/;
    assign rst = rst_init || rst_force;
    int   clk_period_ps /*verilator public_flat_rd*/ = CLK_PERIOD_PS;
    logic [63:0] cycle /*verilator public_flat_rd*/ = 0;

    always #(CLK_PERIOD_PS / 2 * 1ps) clk = ~clk;

    /* verilator lint_off INITIALDLY */
    initial begin
        repeat (RESET_CYCLES) @(posedge clk);
        rst_init <= 1'b0;                   // non-blocking: no race with the flops at this edge
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

    // the DRAM channels: one behavioural DRAM each, all on the same bytes
    logic [63:0]  d_awaddr [CHANNELS], d_araddr [CHANNELS];
    logic [DATA_BITS/8-1:0] d_wstrb [CHANNELS];
    logic [7:0]   d_awlen [CHANNELS], d_arlen [CHANNELS], d_awid [CHANNELS], d_arid [CHANNELS];
    logic [7:0]   d_bid [CHANNELS], d_rid [CHANNELS];
    logic [2:0]   d_awsize [CHANNELS], d_arsize [CHANNELS];
    logic [1:0]   d_awburst [CHANNELS], d_arburst [CHANNELS], d_bresp [CHANNELS], d_rresp [CHANNELS];
    logic [DATA_BITS-1:0] d_wdata [CHANNELS], d_rdata [CHANNELS];
    logic d_awvalid [CHANNELS], d_awready [CHANNELS], d_wlast [CHANNELS], d_wvalid [CHANNELS];
    logic d_wready [CHANNELS], d_bvalid [CHANNELS], d_bready [CHANNELS];
    logic d_arvalid [CHANNELS], d_arready [CHANNELS], d_rlast [CHANNELS], d_rvalid [CHANNELS], d_rready [CHANNELS];

    // the device: CXL.mem tied idle, CXL.io from the register sequencer below, its DRAM
    // ports (dram__*, or dram0__* .. per channel) on the arrays above; the instance is
    // written for the config by rtlbench/runner.py
    `include "ndp_device_instance.svh"

    // the DRAM model's latencies (edges), for every channel; a test may change them
    // between bursts (FastRtlTransport.set_dram_latency)
    int unsigned dram_read_latency  /*verilator public_flat_rw*/ = READ_LATENCY;
    int unsigned dram_write_latency /*verilator public_flat_rw*/ = WRITE_LATENCY;

    for (genvar c = 0; c < CHANNELS; c++) begin : channel
        ndp_axi_dram #(.DATA_BITS(DATA_BITS), .BYTES(DRAM_BYTES)) dram (
            .clk(clk), .rst(rst), .read_latency(dram_read_latency), .write_latency(dram_write_latency),
            .awaddr(d_awaddr[c]), .awlen(d_awlen[c]), .awsize(d_awsize[c]), .awburst(d_awburst[c]),
            .awid(d_awid[c]), .awvalid(d_awvalid[c]), .awready(d_awready[c]),
            .wdata(d_wdata[c]), .wstrb(d_wstrb[c]), .wlast(d_wlast[c]), .wvalid(d_wvalid[c]),
            .wready(d_wready[c]),
            .bid(d_bid[c]), .bresp(d_bresp[c]), .bvalid(d_bvalid[c]), .bready(d_bready[c]),
            .araddr(d_araddr[c]), .arlen(d_arlen[c]), .arsize(d_arsize[c]), .arburst(d_arburst[c]),
            .arid(d_arid[c]), .arvalid(d_arvalid[c]), .arready(d_arready[c]),
            .rdata(d_rdata[c]), .rid(d_rid[c]), .rresp(d_rresp[c]), .rlast(d_rlast[c]), .rvalid(d_rvalid[c]),
            .rready(d_rready[c])
        );
    end

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

    // host-port stalls (FastRtlTransport.set_dram_stalls): an access starts late, its
    // response is taken late (bits of the DRAM model's generator: AR, R, B)
    import "DPI-C" function int ndp_dram_stalls();
    logic [4:0] io_stall = '0;
    always_ff @(posedge clk) io_stall <= rst ? '0 : 5'(ndp_dram_stalls());

    assign io_bready = sstate == S_WRITE && !io_stall[4];
    assign io_rready = sstate == S_READ && !io_stall[1];

    always_ff @(posedge clk) begin
        if (rst) begin
            sstate <= S_IDLE;
            io_awvalid <= 1'b0; io_wvalid <= 1'b0; io_arvalid <= 1'b0;
        end else case (sstate)
            S_IDLE: if (reg_req != reg_ack && !io_stall[0]) begin
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
                if (io_bvalid && io_bready) begin
                    reg_resp <= io_bresp;
                    reg_ack <= reg_req;
                    sstate <= S_IDLE;
                end
            end
            S_READ: begin
                if (io_arready) io_arvalid <= 1'b0;
                if (io_rvalid && io_rready) begin
                    reg_rdata <= io_rdata; reg_resp <= io_rresp;
                    reg_ack <= reg_req;
                    sstate <= S_IDLE;
                end
            end
            default: sstate <= S_IDLE;
        endcase
    end
endmodule
