// Behavioural AXI4 DRAM for the fast co-simulation (simulation only, not synthesizable).
//
// Why not cocotbext-axi's AxiRam: a Python BFM costs a Python round trip per bus beat;
// this model runs inside the Verilator build, so long runs need Python only to wait.
//
// - Reads: up to AR_DEPTH bursts accepted ahead, served in order, back to back. Writes: up
//   to AW_DEPTH addresses accepted ahead of their data, the data of one burst after the
//   other's, back to back; up to B_SLOTS responses wait their turn (the device posts
//   writes). A memory controller's queues: deep enough that a device with several
//   channels and 100-cycle latencies keeps every channel busy.
// - INCR bursts up to 256 beats (FIXED: the address stays); beats of DATA_BITS (512 in the
//   spec's default: 64 bytes), byte strobes. Narrow beats are served from the line holding
//   the beat's address, so the lanes AXI defines for them are right. WRAP is not
//   supported (the device never issues it). Buses wider than 1024 bits: see next_addr.
// - Latencies count clock edges: an AR taken at edge t gives the first R beat at edge
//   t + read_latency (>= 1); the W beat with wlast taken at edge t gives B at edge
//   t + write_latency (>= 1), as isa's dram_read_latency / dram_write_latency define them
//   for the cycle model. They are inputs (ndp_fast_top drives every channel's from two
//   public variables, which a test may change between bursts, no rebuild).
// - The size is BYTES, or the plusarg +dram_bytes=<n> (no rebuild).
// - The bytes live in C++ (ndp_fast_dram.cpp), reached through DPI-C per beat, and are
//   shared with Python through ctypes for the backdoor (FastRtlTransport).
// - Faults: lines Python marks (FastRtlTransport.add_dram_fault) answer SLVERR or DECERR;
//   a read of one returns zeros with that RRESP, a write to one is dropped and its
//   burst's BRESP is the worst of its beats', as cocotbext-axi's AxiRam does.
// - Stalls: with a stall probability set (FastRtlTransport.set_dram_stalls), each edge a
//   seeded generator in C++ may hold ARREADY, AWREADY or WREADY low or keep the next R
//   beat or B response back (never dropping a VALID already shown: AXI A3.2.1).
module ndp_axi_dram #(
    parameter int DATA_BITS = 512,
    parameter longint BYTES = 64'd1 << 28       // allocated lazily by the OS: untouched pages cost nothing
) (
    input  logic         clk,
    input  logic         rst,
    input  int unsigned  read_latency,
    input  int unsigned  write_latency,
    input  logic [63:0]  awaddr,
    input  logic [7:0]   awlen,
    input  logic [2:0]   awsize,
    input  logic [1:0]   awburst,
    input  logic [7:0]   awid,
    input  logic         awvalid,
    output logic         awready,
    input  logic [DATA_BITS-1:0]   wdata,
    input  logic [DATA_BITS/8-1:0] wstrb,
    input  logic         wlast,
    input  logic         wvalid,
    output logic         wready,
    output logic [7:0]   bid,
    output logic [1:0]   bresp,
    output logic         bvalid,
    input  logic         bready,
    input  logic [63:0]  araddr,
    input  logic [7:0]   arlen,
    input  logic [2:0]   arsize,
    input  logic [1:0]   arburst,
    input  logic [7:0]   arid,
    input  logic         arvalid,
    output logic         arready,
    output logic [DATA_BITS-1:0] rdata,
    output logic [7:0]   rid,
    output logic [1:0]   rresp,
    output logic         rlast,
    output logic         rvalid,
    input  logic         rready
);
    import "DPI-C" function void ndp_dram_init(input longint bytes, input int line_bytes);
    // each returns the access's AXI response (0 OKAY, 2 SLVERR, 3 DECERR)
    import "DPI-C" function int ndp_dram_read(input longint addr, output bit [DATA_BITS-1:0] data);
    import "DPI-C" function int ndp_dram_write(input longint addr, input bit [DATA_BITS-1:0] data,
                                               input bit [DATA_BITS/8-1:0] strb);
    // this edge's stalls: bit 0 AR, 1 R, 2 AW, 3 W, 4 B
    import "DPI-C" function int ndp_dram_stalls();

    initial begin
        longint bytes;
        if (!$value$plusargs("dram_bytes=%d", bytes)) bytes = BYTES;
        ndp_dram_init(bytes, DATA_BITS / 8);
    end

    localparam logic [1:0] FIXED = 2'd0;

    localparam int ST_AR = 0, ST_R = 1, ST_AW = 2, ST_W = 3, ST_B = 4;
    logic [4:0] stall = '0;
    always_ff @(posedge clk) stall <= rst ? '0 : 5'(ndp_dram_stalls());

    // The address of the beat after `addr` in a burst of beat size 2^size. AXI's 3-bit size
    // ends at 128-byte beats: on a wider bus (the paper config's 8192 bits) the device's
    // size field cannot say its beat, so every beat is taken as full width there.
    function automatic logic [63:0] next_addr(logic [63:0] addr, logic [2:0] size, logic [1:0] burst);
        logic [63:0] step = DATA_BITS > 1024 ? 64'(DATA_BITS / 8) : 64'd1 << size;
        return burst == FIXED ? addr : (addr & ~(step - 1)) + step;
    endfunction

    // ---- read channel --------------------------------------------------------------
    // Up to AR_DEPTH read bursts are accepted ahead; each one's beats follow the previous
    // burst's, from `read_latency` edges after its AR (as cocotbext-axi's AxiRam does).
    localparam int AR_DEPTH = 128;
    logic [63:0] q_addr [AR_DEPTH];
    logic [7:0]  q_len [AR_DEPTH], q_id [AR_DEPTH];
    logic [2:0]  q_size [AR_DEPTH];
    logic [1:0]  q_burst [AR_DEPTH];
    longint unsigned q_due [AR_DEPTH];      // edge at which its first beat may be put on the bus
    int unsigned q_head = 0, q_count = 0;
    longint unsigned now = 0;               // edges since reset
    logic [63:0] raddr;
    logic [7:0]  rleft = 0;     // beats of the current burst after the one on the bus
    logic [2:0]  rsize;
    logic [1:0]  rburst;
    bit   [DATA_BITS-1:0] line;

    assign arready = q_count < AR_DEPTH && !rst && !stall[ST_AR];

    always_ff @(posedge clk) begin
        int unsigned count, slot;
        if (rst) begin
            rvalid <= 1'b0; rleft <= 0;
            q_head <= 0; q_count <= 0; now <= 0;
        end else begin
            count = q_count;
            if (arvalid && arready) begin
                slot = (q_head + count) % AR_DEPTH;
                q_addr[slot] <= araddr; q_len[slot] <= arlen; q_id[slot] <= arid;
                q_size[slot] <= arsize; q_burst[slot] <= arburst;
                q_due[slot] <= now + (read_latency > 0 ? read_latency - 1 : 0);
                count = count + 1;
            end
            if (!rvalid || rready) begin
                if (stall[ST_R])                            // a gap (inside a burst too)
                    rvalid <= 1'b0;
                else if (rleft != 0) begin                  // the burst's next beat
                    rresp <= 2'(ndp_dram_read(raddr, line));
                    rdata <= line; rvalid <= 1'b1; rlast <= rleft == 1;
                    raddr <= next_addr(raddr, rsize, rburst);
                    rleft <= rleft - 1;
                end else if (q_count != 0 && q_due[q_head] <= now) begin   // the next burst
                    rresp <= 2'(ndp_dram_read(q_addr[q_head], line));
                    rdata <= line; rvalid <= 1'b1; rlast <= q_len[q_head] == 0; rid <= q_id[q_head];
                    raddr <= next_addr(q_addr[q_head], q_size[q_head], q_burst[q_head]);
                    rleft <= q_len[q_head]; rsize <= q_size[q_head]; rburst <= q_burst[q_head];
                    q_head <= (q_head + 1) % AR_DEPTH;
                    count = count - 1;
                end else
                    rvalid <= 1'b0;
            end
            q_count <= count;
            now <= now + 1;
        end
    end

    // ---- write channel -------------------------------------------------------------
    // Addresses queue ahead (AW_DEPTH); the data beats of the head burst are taken one per
    // cycle and, at its last beat, the next queued burst's follow at once.
    localparam int AW_DEPTH = 32;
    localparam int B_SLOTS = 32;
    logic [63:0] a_addr [AW_DEPTH];
    logic [2:0]  a_size [AW_DEPTH];
    logic [1:0]  a_burst [AW_DEPTH];
    logic [7:0]  a_id [AW_DEPTH];
    int unsigned a_head = 0, a_count = 0;
    logic [63:0] waddr;                     // the head burst's next beat
    logic        w_started = 1'b0;          // waddr holds the head burst's next beat
    // the responses of the bursts written: due edge and ID, in order
    longint unsigned b_due [B_SLOTS];
    logic [7:0]      b_id [B_SLOTS];
    logic [1:0]      b_resp [B_SLOTS];
    int unsigned     b_head = 0, b_count = 0;
    logic [1:0]      w_resp = '0;           // the worst response of the head burst's beats so far
    logic            b_shown = 1'b0;        // B was valid and not taken at the last edge: it stays

    assign awready = a_count < AW_DEPTH && !rst && !stall[ST_AW];
    assign wready = a_count != 0 && b_count < B_SLOTS && !rst && !stall[ST_W];
    assign bresp = b_resp[b_head];
    assign bvalid = b_count != 0 && b_due[b_head] <= now && (b_shown || !stall[ST_B]);
    assign bid = b_id[b_head];

    always_ff @(posedge clk) begin
        if (rst) begin
            a_head <= 0; a_count <= 0; w_started <= 1'b0;
            b_head <= 0; b_count <= 0; w_resp <= '0; b_shown <= 1'b0;
        end else begin
            // assigned, not initialized: a variable declared with an initializer in an
            // always block is static (IEEE 1800 6.21), initialized once, and would keep its
            // value across a reset instead of taking the counts'
            int unsigned count, queued;
            logic [63:0] here;
            logic [1:0] resp;
            count = b_count;
            queued = a_count;
            b_shown <= bvalid && !bready;
            if (bvalid && bready) begin
                b_head <= (b_head + 1) % B_SLOTS;
                count = count - 1;
            end
            if (awvalid && awready) begin
                a_addr[(a_head + queued) % AW_DEPTH] <= awaddr; a_size[(a_head + queued) % AW_DEPTH] <= awsize;
                a_burst[(a_head + queued) % AW_DEPTH] <= awburst; a_id[(a_head + queued) % AW_DEPTH] <= awid;
                queued = queued + 1;
            end
            if (wvalid && wready) begin
                here = w_started ? waddr : a_addr[a_head];
                resp = 2'(ndp_dram_write(here, wdata, wstrb));
                if (w_started && w_resp > resp) resp = w_resp;
                w_resp <= resp;
                waddr <= next_addr(here, a_size[a_head], a_burst[a_head]);
                w_started <= !wlast;
                if (wlast) begin
                    b_due[(b_head + b_count) % B_SLOTS] <= now + write_latency;
                    b_resp[(b_head + b_count) % B_SLOTS] <= resp;
                    b_id[(b_head + b_count) % B_SLOTS] <= a_id[a_head];
                    count = count + 1;
                    a_head <= (a_head + 1) % AW_DEPTH;
                    queued = queued - 1;
                end
            end
            b_count <= count;
            a_count <= queued;
        end
    end
endmodule
