"""The compute unit: input buffer, output buffer of FP32 accumulators, and the PE array.

Input buffer: one bank per row, `k_max` FP16 elements each, written a chunk at a time.
Output buffer: one bank per row, `n_max` FP32 accumulators each.
PE array: ROWS x LANES MACs. A weight chunk W[k, n0 : n0 + LANES] updates, for every
row r, acc[r][n0 + j] += x[r][k] * W[k, n0 + j] (exact FP16 product, FP32 add, RNE);
`first` (k == 0) starts the sum from +0. So every output is accumulated in order of k,
the order `sim/golden.py` reproduces.
Readout converts one accumulator word of one row to FP16 (RNE) for write-back.
"""
from amaranth import Module, Signal, Cat, Mux, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .fp_cells import add_cell
from .unpacker import DIM_BITS


class ComputeUnit(wiring.Component):
    def __init__(self, cfg, shared_cells=True):
        self._cfg, self._shared = cfg, shared_cells
        lanes, rows = cfg.lanes, cfg.rows
        self.k_words, self.n_words = cfg.k_max // lanes, cfg.n_max // lanes
        super().__init__({
            # input buffer fill
            "in_we": In(1), "in_row": In(range(rows)), "in_word": In(range(self.k_words)),
            "in_data": In(16 * lanes),
            # one MAC step
            "mac": In(1), "first": In(1), "k": In(DIM_BITS), "n_word": In(range(self.n_words)),
            "w_data": In(16 * lanes),
            # readout
            "rd_row": In(range(rows)), "rd_word": In(range(self.n_words)), "rd_fp16": Out(16 * lanes),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, rows = self._cfg.lanes, self._cfg.rows
        readouts = []
        for r in range(rows):
            bank = Memory(shape=unsigned(16 * lanes), depth=self.k_words, init=[])
            acc = Memory(shape=unsigned(32 * lanes), depth=self.n_words, init=[])
            m.submodules[f"in_bank{r}"], m.submodules[f"acc_bank{r}"] = bank, acc
            bank_w, bank_r = bank.write_port(), bank.read_port(domain="comb")
            acc_w, acc_r, acc_out = acc.write_port(), acc.read_port(domain="comb"), acc.read_port(domain="comb")
            m.d.comb += [bank_w.addr.eq(self.in_word), bank_w.data.eq(self.in_data),
                         bank_w.en.eq(self.in_we & (self.in_row == r))]

            lane_bits = (lanes - 1).bit_length()
            m.d.comb += bank_r.addr.eq(self.k[lane_bits:])
            x = Signal(16, name=f"x{r}")
            m.d.comb += x.eq(bank_r.data.word_select(self.k[:lane_bits], 16))

            m.d.comb += [acc_r.addr.eq(self.n_word), acc_w.addr.eq(self.n_word), acc_w.en.eq(self.mac)]
            sums = []
            for j in range(lanes):
                product, total = Signal(32, name=f"product_{r}_{j}"), Signal(32, name=f"sum_{r}_{j}")
                add_cell(m, f"mul_{r}_{j}", "ndp_fp16_mul", self._shared,
                         a=x, b=self.w_data.word_select(j, 16), p=product)
                add_cell(m, f"add_{r}_{j}", "ndp_fp32_add", self._shared,
                         a=Mux(self.first, 0, acc_r.data.word_select(j, 32)), b=product, s=total)
                sums.append(total)
            m.d.comb += acc_w.data.eq(Cat(*sums))

            m.d.comb += acc_out.addr.eq(self.rd_word)
            readouts.append(acc_out.data)

        selected = Signal(32 * lanes)
        with m.Switch(self.rd_row):
            for r in range(rows):
                with m.Case(r):
                    m.d.comb += selected.eq(readouts[r])
        for j in range(lanes):
            half = Signal(16, name=f"half_{j}")
            add_cell(m, f"cvt_{j}", "ndp_fp32_to_fp16", self._shared, a=selected.word_select(j, 32), h=half)
            m.d.comb += self.rd_fp16.word_select(j, 16).eq(half)
        return m
