// The bytes of the behavioural DRAM (ndp_axi_dram.sv).
//
// They live here, not in a Verilog array, so that Python can reach them directly: the
// simulation is linked with -rdynamic, and FastRtlTransport finds ndp_fast_dram_base /
// ndp_fast_dram_bytes with ctypes and maps the whole array as one numpy buffer. Loading
// or dumping megabytes is then a memcpy, with no VPI call per word.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>

#include <vector>

#include "svdpi.h"
#if __has_include("Vtop__Dpi.h")
#include "Vtop__Dpi.h"  // the prototypes Verilator expects, checked against the definitions below
#endif

namespace {
uint8_t* g_mem = nullptr;
uint64_t g_bytes = 0;
uint64_t g_line = 64;  // bytes per beat: DATA_BITS / 8, a power of two
bool g_warned = false;

// Faulty lines (FastRtlTransport.add_dram_fault): [lo, hi) answers `read` / `write`.
struct Fault {
    uint64_t lo, hi;
    int read, write;
};
std::vector<Fault> g_faults;

int fault_resp(uint64_t line, bool write) {
    int worst = 0;
    for (const Fault& f : g_faults)
        if (line < f.hi && f.lo < line + g_line) {
            int r = write ? f.write : f.read;
            if (r > worst) worst = r;
        }
    return worst;
}

// Stalls (FastRtlTransport.set_dram_stalls): each of the five channels of every DRAM port
// is stalled at an edge with probability g_stall_permille / 1000, from a seeded xorshift64*.
uint64_t g_rng = 1;
unsigned g_stall_permille = 0;
uint64_t g_stall_counts[5] = {0, 0, 0, 0, 0};

uint64_t next_random() {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1Dull;
}

// Whether the line starting at `line` is inside the array; warns once otherwise.
bool in_range(uint64_t line) {
    if (g_mem && line + g_line <= g_bytes) return true;
    if (!g_warned) {
        fprintf(stderr, "ndp_axi_dram: access at %#llx outside the %llu-byte DRAM (reads 0, "
                "writes dropped; warned once)\n", (unsigned long long)line, (unsigned long long)g_bytes);
        g_warned = true;
    }
    return false;
}
}  // namespace

extern "C" {

void ndp_dram_init(long long bytes, int line_bytes) {
    if (g_mem) return;
    g_line = (uint64_t)line_bytes;
    g_bytes = (uint64_t)bytes & ~(g_line - 1);
    // Anonymous mapping: zero pages the OS provides on first touch, so a large DRAM
    // costs only what a run writes.
    void* p = mmap(nullptr, g_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "ndp_axi_dram: cannot map %llu bytes\n", (unsigned long long)g_bytes);
        abort();
    }
    g_mem = static_cast<uint8_t*>(p);
}

// svBitVecVal is 32-bit words, least significant first; on this little-endian host byte i
// of the array is bits 8i..8i+7 of the vector, as AXI lays bytes on the data bus.
int ndp_dram_read(long long addr, svBitVecVal* data) {
    uint64_t line = (uint64_t)addr & ~(g_line - 1);
    int resp = g_faults.empty() ? 0 : fault_resp(line, false);
    if (resp == 0 && in_range(line))
        memcpy(data, g_mem + line, g_line);
    else
        memset(data, 0, g_line);
    return resp;
}

int ndp_dram_write(long long addr, const svBitVecVal* data, const svBitVecVal* strb) {
    uint64_t line = (uint64_t)addr & ~(g_line - 1);
    int resp = g_faults.empty() ? 0 : fault_resp(line, true);
    if (resp != 0 || !in_range(line)) return resp;
    const uint8_t* src = reinterpret_cast<const uint8_t*>(data);
    uint8_t* dst = g_mem + line;
    for (uint64_t w = 0; w < g_line / 32; w++, src += 32, dst += 32) {  // 32 strobe bits a word
        uint32_t mask = strb[w];
        if (mask == 0xFFFFFFFFu) {
            memcpy(dst, src, 32);
            continue;
        }
        for (; mask; mask &= mask - 1) {
            int i = __builtin_ctz(mask);
            dst[i] = src[i];
        }
    }
    return 0;
}

int ndp_dram_stalls() {
    if (g_stall_permille == 0) return 0;
    int bits = 0;
    for (int k = 0; k < 5; k++)
        if (next_random() % 1000 < g_stall_permille) {
            bits |= 1 << k;
            g_stall_counts[k]++;
        }
    return bits;
}

// For Python (ctypes). Null and 0 until the Verilog initial block has run.
__attribute__((visibility("default"))) uint8_t* ndp_fast_dram_base() { return g_mem; }
__attribute__((visibility("default"))) unsigned long long ndp_fast_dram_bytes() { return g_bytes; }

__attribute__((visibility("default"))) void ndp_fast_dram_add_fault(unsigned long long lo, unsigned long long hi,
                                                                    int read, int write) {
    g_faults.push_back({lo, hi, read, write});
}
__attribute__((visibility("default"))) void ndp_fast_dram_clear_faults() { g_faults.clear(); }

__attribute__((visibility("default"))) void ndp_fast_dram_set_stalls(unsigned long long seed, unsigned permille) {
    g_rng = seed ? seed : 1;
    g_stall_permille = permille;
}
// stalls inserted so far on channel kind k (0 AR, 1 R, 2 AW, 3 W, 4 B), over every port
__attribute__((visibility("default"))) unsigned long long ndp_fast_dram_stall_count(int k) {
    return (k >= 0 && k < 5) ? g_stall_counts[k] : 0;
}

}  // extern "C"
