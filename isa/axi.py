"""AXI codes the RTL (`hw/`), the model (`sim/`), the driver's transports and the benches
share (AMBA AXI and ACE Protocol Specification, ARM IHI 0022): defined once here.

The device answers SLVERR where it refuses an access (a register write it does not take,
a CXL.mem access the PASID filter stops); its DRAM answers SLVERR or DECERR to a faulty
line, and the descriptor then completes DRAM_ERROR (isa.status). Plain ints, so that
Amaranth, numpy and the simulators take them as they are.
"""

# xRESP (A3.4.4 Read and write response structure), 2 bits
RESP_OKAY, RESP_EXOKAY, RESP_SLVERR, RESP_DECERR = 0, 1, 2, 3
RESP_NAMES = {RESP_OKAY: "OKAY", RESP_EXOKAY: "EXOKAY", RESP_SLVERR: "SLVERR", RESP_DECERR: "DECERR"}

# AxBURST (A3.4.1 Burst type), 2 bits; 0b11 is reserved
BURST_FIXED, BURST_INCR, BURST_WRAP = 0, 1, 2
